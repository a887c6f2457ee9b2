"""The AMD backend on captured amd-smi / rocm-smi outputs, a fake amdsmi module and a fake sysfs."""

from __future__ import annotations

import types
from pathlib import Path

import pytest

from hwadvisor.models import DeviceClass
from hwadvisor.probe import amd
from hwadvisor.probe.amd import AmdBackend
from hwadvisor.profiles import enrich_devices, match

FIXTURES = Path(__file__).parents[1] / "fixtures" / "amd"
GIB = 2**30


def no_module(name: str) -> types.ModuleType:
    raise ImportError(f"No module named {name!r}")


def runner_for(outputs: dict[str, str | None]):
    """A runner that replays a fixture per tool name and records every argv it was given."""
    calls: list[tuple[list[str], float]] = []

    def run(argv: list[str], timeout_s: float) -> str | None:
        calls.append((argv, timeout_s))
        return outputs.get(argv[0])

    run.calls = calls  # type: ignore[attr-defined]
    return run


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def backend(tmp_path: Path, outputs: dict[str, str | None], importer=no_module, modules=None):
    return AmdBackend(runner=runner_for(outputs), importer=importer, sys_root=tmp_path,
                      modules=modules if modules is not None else {})


# --- amd-smi ---------------------------------------------------------------------------------


def test_amd_smi_list_format_mi300x(tmp_path):
    result = backend(tmp_path, {"amd-smi": fixture("amd-smi-static-mi300x.json")}).probe()
    assert len(result.devices) == 2
    gpu = result.devices[0]
    assert gpu.vendor == "amd"
    assert gpu.name == "AMD Instinct MI300X"
    assert gpu.device_class == DeviceClass.DATACENTER_GPU.value
    assert gpu.memory_total_bytes == 196592 * 2**20
    assert gpu.compute_capability == "gfx942"
    assert gpu.architecture == "CDNA3"
    assert gpu.compute_units == 304
    assert gpu.pci_device_id == "0x74a1"
    assert "fp8" in gpu.formats and "fp4" not in gpu.formats
    assert [d.index for d in result.devices] == [0, 1]
    profile = match(gpu)
    assert profile is not None and profile.id == "mi300x"


def test_amd_smi_gpu_data_format_with_generic_market_name(tmp_path):
    text = fixture("amd-smi-static-gpu-data-rx7900xtx.json")
    result = backend(tmp_path, {"amd-smi": text}).probe()
    (gpu,) = result.devices
    # market_name "N/A", board name lists four products: 24 GiB picks the XTX.
    assert gpu.name == "AMD Radeon RX 7900 XTX"
    assert gpu.device_class == DeviceClass.CONSUMER_GPU.value
    assert gpu.compute_capability == "gfx1100" and gpu.architecture == "RDNA3"
    assert gpu.formats == ["bf16", "fp16", "int8"]
    assert gpu.memory_total_bytes == 24560 * 2**20
    assert any("shared by several products" in note for note in gpu.notes)
    profile = match(gpu)
    assert profile is not None and profile.id == "rx-7900-xtx"


def test_amd_smi_is_tried_before_rocm_smi(tmp_path):
    run = runner_for({"amd-smi": fixture("amd-smi-static-mi300x.json"),
                      "rocm-smi": fixture("rocm-smi-rx7900xt.json")})
    result = AmdBackend(runner=run, importer=no_module, sys_root=tmp_path, modules={}).probe()
    assert result.devices[0].name == "AMD Instinct MI300X"
    assert [argv[0] for argv, _ in run.calls] == ["amd-smi"]
    assert run.calls[0][0] == ["amd-smi", "static", "--json"]
    assert run.calls[0][1] > 0  # every command has a timeout


# --- rocm-smi ---------------------------------------------------------------------------------


def test_rocm_smi_card_dict_format(tmp_path):
    run = runner_for({"rocm-smi": fixture("rocm-smi-rx7900xt.json")})
    result = AmdBackend(runner=run, importer=no_module, sys_root=tmp_path, modules={}).probe()
    (gpu,) = result.devices
    assert gpu.name == "AMD Radeon RX 7900 XT"  # a specific series wins over the shared id
    assert gpu.memory_total_bytes == 21458059264
    assert gpu.pci_device_id == "0x744c"
    assert gpu.compute_capability == "gfx1100"
    assert gpu.device_class == DeviceClass.CONSUMER_GPU.value
    assert match(gpu) is None or match(gpu).id != "rx-7900-xtx"
    assert ["rocm-smi", "--showproductname", "--showmeminfo", "vram", "--showbus", "--json"] in [
        argv for argv, _ in run.calls]


def test_rocm_smi_warning_line_before_json(tmp_path):
    result = backend(tmp_path, {"rocm-smi": fixture("rocm-smi-warning-mi250x.txt")}).probe()
    assert len(result.devices) == 2
    gpu = result.devices[0]
    # The family-only series is replaced by the one-product id 0x7408.
    assert gpu.name == "AMD Instinct MI250X" and not gpu.model_guessed
    assert gpu.compute_capability == "gfx90a"  # rocm-smi's "gfx9010"
    assert gpu.architecture == "CDNA2"
    assert "fp8" not in gpu.formats and "bf16" in gpu.formats
    assert gpu.device_class == DeviceClass.DATACENTER_GPU.value
    assert any("two GCDs" in note and "per GCD" in note for note in gpu.notes)
    assert match(gpu).id == "mi250x"


def test_mi250x_gcd_gets_per_gcd_figures(tmp_path):
    # Each GCD is one device with 64 GiB: it is planned with half the module, not all of it.
    found = backend(tmp_path, {"rocm-smi": fixture("rocm-smi-warning-mi250x.txt")}).probe()
    devices, _ = enrich_devices(found.devices)
    for gcd in devices:
        assert gcd.profile_id == "mi250x"
        assert gcd.compute_units == 110
        assert gcd.memory_bandwidth_gbps == pytest.approx(1638.4)
        assert gcd.peak_tflops["bf16"] == pytest.approx(191.5)
        assert gcd.interconnect.gpu_link_kind == "xgmi"
        assert gcd.interconnect.gpu_link_domain == 2  # two GCDs found here
        assert not any("does not fit" in note for note in gcd.notes)


def test_shared_mi200_id_told_apart_by_compute_units(tmp_path):
    result = backend(tmp_path, {"amd-smi": fixture("amd-smi-static-mi250-gcd.json")}).probe()
    gpu = result.devices[0]
    assert gpu.name == "AMD Instinct MI250" and not gpu.model_guessed
    assert any("chosen by its compute unit count (104)" in note for note in gpu.notes)


def test_rocm_smi_raw_device_id_series(tmp_path):
    result = backend(tmp_path, {"rocm-smi": fixture("rocm-smi-rawid-mi300x.json")}).probe()
    (gpu,) = result.devices
    assert gpu.name == "AMD Instinct MI300X"
    assert gpu.pci_device_id == "0x74a1"
    assert match(gpu).id == "mi300x"


def test_rocm_smi_legacy_keys_do_not_take_subsystem_for_device_id(tmp_path):
    result = backend(tmp_path, {"rocm-smi": fixture("rocm-smi-legacy-keys-mi100.json")}).probe()
    (gpu,) = result.devices
    assert gpu.pci_device_id == "0x738c"  # from "Card series", not "Card model" 0x0c34
    assert gpu.name == "AMD Instinct MI100"
    assert gpu.compute_capability == "gfx908"


@pytest.mark.parametrize("garbage", ["", "not json at all", "WARNING: No JSON data to report\n",
                                     '{"card0": "oops"}', "[1, 2, 3]", '{"gpu_data": {}}', "{"])
def test_garbage_outputs_give_no_devices_and_a_note(tmp_path, garbage):
    result = backend(tmp_path, {"amd-smi": garbage, "rocm-smi": garbage}).probe()
    assert result.devices == []
    assert result.notes and "no AMD GPU" in result.notes[0]


def test_missing_tools_give_no_devices(tmp_path):
    result = backend(tmp_path, {}).probe()
    assert result.devices == []
    assert "amdsmi Python library not installed" in result.notes[0]


def test_real_runner_survives_missing_binaries(tmp_path):
    # The default runner on a machine without ROCm: every tool is missing, nothing raises.
    result = AmdBackend(importer=no_module, sys_root=tmp_path, modules={}).probe()
    assert result.devices == []


# --- amdsmi library ---------------------------------------------------------------------------


def fake_amdsmi(asics: list[dict], vram_total: int | None = None, vram_info_mb: int | None = None,
                init_error: Exception | None = None) -> types.ModuleType:
    module = types.ModuleType("amdsmi")
    state = {"shut_down": False}

    class AmdSmiMemoryType:
        VRAM = 0

    def amdsmi_init():
        if init_error is not None:
            raise init_error

    def amdsmi_get_gpu_memory_total(handle, memory_type):
        if vram_total is None:
            raise RuntimeError("AMDSMI_STATUS_NOT_SUPPORTED")
        return vram_total

    module.AmdSmiMemoryType = AmdSmiMemoryType
    module.amdsmi_init = amdsmi_init
    module.amdsmi_shut_down = lambda: state.update(shut_down=True)
    module.amdsmi_get_processor_handles = lambda: list(range(len(asics)))
    module.amdsmi_get_gpu_asic_info = lambda handle: asics[handle]
    module.amdsmi_get_gpu_memory_total = amdsmi_get_gpu_memory_total
    module.amdsmi_get_gpu_vram_info = lambda handle: {"vram_type": 2, "vram_size": vram_info_mb}
    module.state = state
    return module


MI325X_ASIC = {"market_name": "AMD Instinct MI325X", "vendor_id": 4098, "device_id": 0x74A5,
               "vendor_name": "AMD", "target_graphics_version": "gfx942", "num_compute_units": 304}


def test_amdsmi_library_first(tmp_path):
    module = fake_amdsmi([MI325X_ASIC], vram_total=256 * GIB)
    run = runner_for({"amd-smi": fixture("amd-smi-static-mi300x.json")})
    result = AmdBackend(runner=run, importer=lambda name: module, sys_root=tmp_path,
                        modules={}).probe()
    (gpu,) = result.devices
    assert gpu.name == "AMD Instinct MI325X"
    assert gpu.pci_device_id == "0x74a5"  # an int device id is normalised
    assert gpu.memory_total_bytes == 256 * GIB
    assert run.calls == []  # the CLI is not run when the library answers
    assert module.state["shut_down"] is True
    assert match(gpu).id == "mi325x"


def test_amdsmi_vram_info_fallback_in_mib(tmp_path):
    module = fake_amdsmi([MI325X_ASIC], vram_total=None, vram_info_mb=262128)
    (gpu,) = backend(tmp_path, {}, importer=lambda name: module).probe().devices
    assert gpu.memory_total_bytes == 262128 * 2**20


def test_amdsmi_init_failure_falls_back_to_cli(tmp_path):
    module = fake_amdsmi([], init_error=RuntimeError("AMDSMI_STATUS_INIT_ERROR"))
    result = backend(tmp_path, {"rocm-smi": fixture("rocm-smi-rx7900xt.json")},
                     importer=lambda name: module).probe()
    assert result.devices[0].name == "AMD Radeon RX 7900 XT"


def test_amdsmi_asic_info_error_keeps_going(tmp_path):
    module = fake_amdsmi([MI325X_ASIC], vram_total=256 * GIB)

    def broken(handle):
        raise RuntimeError("AMDSMI_STATUS_NOT_SUPPORTED")

    module.amdsmi_get_gpu_asic_info = broken
    (gpu,) = backend(tmp_path, {}, importer=lambda name: module).probe().devices
    # No name, id or gfx target: 256 GiB is more than any Radeon has, so it is an Instinct part.
    assert gpu.name == "AMD Instinct GPU (model unknown)" and gpu.model_guessed
    assert gpu.device_class == DeviceClass.DATACENTER_GPU.value
    assert gpu.memory_total_bytes == 256 * GIB
    assert gpu.compute_capability is None and gpu.formats == []
    assert any("more than any Radeon" in note for note in gpu.notes)


# --- sysfs -------------------------------------------------------------------------------------


def make_card(root: Path, card: str, vendor: str, device: str, vram: str | None = None,
              product: str | None = None) -> None:
    device_dir = root / "class" / "drm" / card / "device"
    device_dir.mkdir(parents=True)
    (device_dir / "vendor").write_text(vendor + "\n")
    (device_dir / "device").write_text(device + "\n")
    if vram is not None:
        (device_dir / "mem_info_vram_total").write_text(vram + "\n")
    if product is not None:
        (device_dir / "product_name").write_text(product + "\n")


def make_kfd_node(root: Path, node: int, vendor_id: int, device_id: int, gfx: int) -> None:
    node_dir = root / "class" / "kfd" / "kfd" / "topology" / "nodes" / str(node)
    node_dir.mkdir(parents=True)
    (node_dir / "properties").write_text(
        f"cpu_cores_count 0\nsimd_count 1216\ngfx_target_version {gfx}\n"
        f"vendor_id {vendor_id}\ndevice_id {device_id}\n")


def test_sysfs_tree(tmp_path):
    make_card(tmp_path, "card0", "0x8086", "0x4680")  # an Intel iGPU is skipped
    make_card(tmp_path, "card1", "0x1002", "0x74a1", vram=str(206141652992))
    make_card(tmp_path, "card10", "0x1002", "0x744c", vram=str(25753026560),
              product="Radeon RX 7900 XTX")
    (tmp_path / "class" / "drm" / "card1-DP-1").mkdir()  # connector entries are not cards
    make_kfd_node(tmp_path, 0, 0, 0, 0)  # the CPU node
    make_kfd_node(tmp_path, 1, 4098, 0x74A1, 90402)
    make_kfd_node(tmp_path, 2, 4098, 0x744C, 110000)
    result = backend(tmp_path, {}).probe()
    assert [d.name for d in result.devices] == ["AMD Instinct MI300X", "AMD Radeon RX 7900 XTX"]
    mi300x, xtx = result.devices
    assert mi300x.memory_total_bytes == 206141652992
    assert mi300x.compute_capability == "gfx942"
    assert xtx.compute_capability == "gfx1100"
    assert xtx.device_class == DeviceClass.CONSUMER_GPU.value
    assert any("sysfs" in note for note in mi300x.notes)


def test_sysfs_unreadable_values_stay_none(tmp_path):
    make_card(tmp_path, "card0", "0x1002", "garbage")
    (gpu,) = backend(tmp_path, {}).probe().devices
    assert gpu.pci_device_id is None and gpu.memory_total_bytes is None
    assert gpu.name == "AMD GPU (unknown model)"


# --- torch --------------------------------------------------------------------------------------


def fake_torch(hip: str | None) -> types.ModuleType:
    torch = types.ModuleType("torch")
    torch.version = types.SimpleNamespace(hip=hip)
    props = types.SimpleNamespace(name="AMD Instinct MI300X", total_memory=205822885888,
                                  gcnArchName="gfx942:sramecc+:xnack-", multi_processor_count=304)
    torch.cuda = types.SimpleNamespace(is_available=lambda: True, device_count=lambda: 1,
                                       get_device_properties=lambda index: props)
    return torch


def test_torch_only_when_already_imported(tmp_path):
    (gpu,) = backend(tmp_path, {}, modules={"torch": fake_torch("6.2.41133")}).probe().devices
    assert gpu.compute_capability == "gfx942"
    assert gpu.memory_total_bytes == 205822885888
    assert backend(tmp_path, {}, modules={"torch": fake_torch(None)}).probe().devices == []
    assert backend(tmp_path, {}, modules={}).probe().devices == []


# --- tables and helpers ------------------------------------------------------------------------


def test_format_table():
    assert amd.GFX_TARGETS["gfx90a"].formats == ("bf16", "fp16", "int8")
    assert set(amd.GFX_TARGETS["gfx942"].formats) == {"bf16", "fp16", "int8", "fp8"}
    assert set(amd.GFX_TARGETS["gfx950"].formats) == {"bf16", "fp16", "int8", "fp8", "fp4"}
    assert amd.GFX_TARGETS["gfx1100"].architecture == "RDNA3"


@pytest.mark.parametrize(("raw", "expected"), [
    ("Arcturus GL-XL [AMD Instinct MI100]", "AMD Instinct MI100"),
    ("AMD INSTINCT MI300X", "AMD Instinct MI300X"),
    ("Radeon RX 7900 XT", "AMD Radeon RX 7900 XT"),
    ("AMD Radeon PRO W7900", "AMD Radeon PRO W7900"),
    ("0x74a1", None), ("N/A", None), ("", None), (None, None),
])
def test_clean_product_name(raw, expected):
    assert amd.clean_product_name(raw) == expected


def test_device_class_rules():
    assert amd.classify_device("AMD Instinct MI210", None) == DeviceClass.DATACENTER_GPU
    assert amd.classify_device("AMD Radeon PRO W7900", "RDNA3") == DeviceClass.CONSUMER_GPU
    assert amd.classify_device("AMD GPU 0x1234", "CDNA3") == DeviceClass.DATACENTER_GPU
    assert amd.classify_device("AMD GPU 0x1234", None) == DeviceClass.CONSUMER_GPU


def test_ids_and_targets_normalise():
    assert amd.normalize_device_id("0x74A1") == "0x74a1"
    assert amd.normalize_device_id(29857) == "0x74a1"
    assert amd.normalize_device_id("Radeon") is None
    assert amd.normalize_device_id(True) is None
    assert amd.gfx_from_kfd_version(90010) == "gfx90a"
    assert amd.gfx_from_kfd_version(90402) == "gfx942"
    assert amd.gfx_from_kfd_version(110000) == "gfx1100"
    assert amd.gfx_from_kfd_version(0) is None
    assert amd.normalize_gfx_target("gfx9010") == "gfx90a"
    assert amd.normalize_gfx_target(90402) is None


def test_json_after_noise():
    assert amd.load_json_after_noise("WARNING: x\n[1]\n") == [1]
    assert amd.load_json_after_noise("{bad\n{\"a\": 1}") == {"a": 1}
    assert amd.load_json_after_noise("nothing") is None


def test_integrated_gpu_with_small_carve_out_is_skipped(tmp_path):
    make_card(tmp_path, "card0", "0x1002", "0x1900", vram=str(512 * 2**20))
    result = backend(tmp_path, {}).probe()
    assert result.devices == []
    assert any("integrated GPU" in note for note in result.notes)


# --- classification from every signal, guessed models -----------------------------------------


def test_unnamed_gpus_with_hbm_and_gfx942_are_datacenter_and_the_model_is_a_guess(tmp_path):
    # Eight GPUs with 192 GiB of HBM each whose name and device id amd-smi could not read.
    result = backend(tmp_path, {"amd-smi": fixture("amd-smi-static-unnamed-x8.json")}).probe()
    assert len(result.devices) == 8
    for gpu in result.devices:
        assert gpu.device_class == DeviceClass.DATACENTER_GPU.value
        assert gpu.name == "AMD Instinct MI300X" and gpu.model_guessed
        assert gpu.memory_type == "HBM"
        assert any("is a guess from gfx target gfx942 and 192 GiB" in note for note in gpu.notes)
    devices, _ = enrich_devices(result.devices)
    assert {d.profile_id for d in devices} == {"mi300x"}
    assert {d.interconnect.gpu_link_kind for d in devices} == {"xgmi"}
    assert {d.interconnect.gpu_link_domain for d in devices} == {8}


@pytest.mark.parametrize(("signals", "expected", "reason"), [
    ({"gfx_target": "gfx90a"}, DeviceClass.DATACENTER_GPU, "Instinct-only"),
    ({"memory_total_bytes": 64 * GIB}, DeviceClass.DATACENTER_GPU, "more than any Radeon"),
    ({"memory_total_bytes": 32 * GIB, "memory_type": "HBM2e"}, DeviceClass.DATACENTER_GPU,
     "of HBM2e"),
    ({"memory_total_bytes": 16 * GIB, "memory_type": "HBM2"}, DeviceClass.CONSUMER_GPU, None),
    ({"memory_total_bytes": 24 * GIB, "memory_type": "GDDR6"}, DeviceClass.CONSUMER_GPU, None),
])
def test_class_from_signals_when_the_model_is_unknown(signals, expected, reason):
    gpu = amd.build_device(0, amd.AmdReading(source="test", **signals))
    assert gpu.device_class == expected.value
    if reason:
        assert any(reason in note for note in gpu.notes)


@pytest.mark.parametrize(("device_id", "name"), [
    ("0x74a0", "AMD Instinct MI300A"), ("0x74a2", "AMD Instinct MI308X"),
    ("0x74a5", "AMD Instinct MI325X"), ("0x74a9", "AMD Instinct MI300X HF"),
    ("0x74b5", "AMD Instinct MI300X VF"), ("0x74b9", "AMD Instinct MI325X VF"),
    ("0x740f", "AMD Instinct MI210"), ("0x7448", "AMD Radeon PRO W7900"),
])
def test_device_ids_of_mi300_variants_and_virtual_functions(device_id, name):
    gpu = amd.build_device(0, amd.AmdReading(device_id=device_id, source="sysfs"))
    assert gpu.name == name and not gpu.model_guessed
    expected = DeviceClass.CONSUMER_GPU if "Radeon" in name else DeviceClass.DATACENTER_GPU
    assert gpu.device_class == expected.value


def test_sriov_virtual_function_matches_the_mi300x_profile(tmp_path):
    outputs = {"amd-smi": fixture("amd-smi-static-mi300x-vf.json")}
    (gpu,) = backend(tmp_path, outputs).probe().devices
    assert gpu.name == "AMD Instinct MI300X VF"
    assert gpu.device_class == DeviceClass.DATACENTER_GPU.value
    assert match(gpu).id == "mi300x"


def test_unknown_aldebaran_id_is_datacenter_without_a_claimed_name():
    gpu = amd.build_device(0, amd.AmdReading(device_id="0x7410", memory_total_bytes=64 * GIB,
                                             source="sysfs"))
    assert gpu.device_class == DeviceClass.DATACENTER_GPU.value
    assert gpu.name == "AMD Instinct GPU (gfx90a, model unknown)" and gpu.model_guessed


# --- shared 0x744c: memory decides, and no evidence is claimed that was not read --------------


def test_7900_xt_and_xtx_chosen_by_memory(tmp_path):
    make_card(tmp_path, "card0", "0x1002", "0x744c", vram=str(20464 * 2**20))
    (gpu,) = backend(tmp_path, {}).probe().devices
    assert gpu.name == "AMD Radeon RX 7900 XT" and not gpu.model_guessed
    assert any("chosen by its memory size (20.0 GiB)" in note for note in gpu.notes)
    (enriched,), _ = enrich_devices([gpu])
    assert enriched.profile_id == "rx-7900-xt" and enriched.memory_bandwidth_gbps == 800


def test_7900_without_a_memory_reading_is_a_guess_and_claims_no_memory(tmp_path):
    make_card(tmp_path, "card0", "0x1002", "0x744c")
    (gpu,) = backend(tmp_path, {}).probe().devices
    assert gpu.name == "AMD Radeon RX 7900 XTX" and gpu.model_guessed
    assert not any("memory size" in note for note in gpu.notes)
    assert any("nothing read tells them apart" in note for note in gpu.notes)


# --- merging sources field by field ------------------------------------------------------------


def test_names_from_rocm_smi_merge_into_memory_from_amd_smi(tmp_path):
    run = runner_for({"amd-smi": fixture("amd-smi-static-memory-only.json"),
                      "rocm-smi": fixture("rocm-smi-names-bus-mi300x.json")})
    result = AmdBackend(runner=run, importer=no_module, sys_root=tmp_path, modules={}).probe()
    assert len(result.devices) == 2
    for gpu in result.devices:
        assert gpu.name == "AMD Instinct MI300X" and not gpu.model_guessed
        assert gpu.memory_total_bytes == 196592 * 2**20 and gpu.memory_type == "HBM"
        assert gpu.compute_capability == "gfx942" and gpu.pci_device_id == "0x74a1"
        origin = next(note for note in gpu.notes if note.startswith("read through"))
        assert "amd-smi static --json (memory" in origin and "rocm-smi --json (name" in origin
    assert [argv[0] for argv, _ in run.calls] == ["amd-smi", "rocm-smi"]


def test_merge_pairs_gpus_by_bus_id_not_order():
    first = amd.parse_amd_smi_static(fixture("amd-smi-static-memory-only.json"))
    second = amd.parse_rocm_smi(fixture("rocm-smi-names-bus-mi300x.json"))
    assert [r.bus_id for r in first] == ["0000:a6:00.0", "0000:c6:00.0"]
    assert [r.bus_id for r in second] == ["0000:c6:00.0", "0000:a6:00.0"]  # 'C6' normalised
    assert amd._pair(first, second) == [(0, 1), (1, 0)]


def test_merge_refuses_to_guess_pairs_when_counts_differ():
    one = [amd.AmdReading(memory_total_bytes=GIB * 64, source="a")]
    two = [amd.AmdReading(series="AMD Instinct MI210", source="b"),
           amd.AmdReading(series="AMD Instinct MI210", source="b")]
    merged, notes = amd.merge_sources([one, two])
    assert merged[0].series is None and notes and "not merged" in notes[0]


def test_complete_source_stops_the_search():
    reading = amd.parse_amd_smi_static(fixture("amd-smi-static-mi300x.json"))[0]
    assert reading.is_complete()
    assert not amd.parse_amd_smi_static(fixture("amd-smi-static-memory-only.json"))[0].is_complete()


# --- rocm-smi without --json: CSV and plain text ----------------------------------------------


def flag_runner(outputs: dict[tuple[str, str | None], str | None]):
    """Replay by (tool, output flag): ('rocm-smi', '--json'), ('rocm-smi', None) for plain text."""
    calls: list[list[str]] = []

    def run(argv: list[str], timeout_s: float) -> str | None:
        calls.append(argv)
        flag = next((a for a in argv if a in ("--json", "--csv")), None)
        return outputs.get((argv[0], flag))

    run.calls = calls  # type: ignore[attr-defined]
    return run


def test_old_rocm_smi_plain_text(tmp_path):
    # ROCm 4: no --json (the call fails), no --csv; the plain output is parsed.
    run = flag_runner({("rocm-smi", None): fixture("rocm-smi-text-mi100.txt")})
    result = AmdBackend(runner=run, importer=no_module, sys_root=tmp_path, modules={}).probe()
    assert len(result.devices) == 2
    gpu = result.devices[0]
    assert gpu.name == "AMD Instinct MI100"
    assert gpu.memory_total_bytes == 34342961152
    assert gpu.pci_device_id is None  # the legacy "Card model" is the subsystem id, not used
    assert gpu.device_class == DeviceClass.DATACENTER_GPU.value
    assert any("rocm-smi (text)" in note for note in gpu.notes)
    assert ["rocm-smi", "--showproductname", "--showmeminfo", "vram", "--showbus"] in run.calls
    readings = amd.parse_rocm_smi_text(fixture("rocm-smi-text-mi100.txt"))
    assert [r.bus_id for r in readings] == ["0000:23:00.0", "0000:43:00.0"]


def test_rocm_smi_csv(tmp_path):
    run = flag_runner({("rocm-smi", "--csv"): fixture("rocm-smi-csv-rx7900xt.csv")})
    amd_backend = AmdBackend(runner=run, importer=no_module, sys_root=tmp_path, modules={})
    (gpu,) = amd_backend.probe().devices
    assert gpu.name == "AMD Radeon RX 7900 XT"
    assert gpu.pci_device_id == "0x744c" and gpu.compute_capability == "gfx1100"
    assert gpu.memory_total_bytes == 21458059264
    assert amd.parse_rocm_smi_csv(fixture("rocm-smi-csv-rx7900xt.csv"))[0].bus_id == "0000:03:00.0"


@pytest.mark.parametrize("garbage", ["", "GPU[x] : nonsense", "GPU[0] : Temperature: 30c",
                                     "device\ncard0", "no table here"])
def test_text_and_csv_parsers_tolerate_garbage(garbage):
    assert amd.parse_rocm_smi_text(garbage) == []
    assert amd.parse_rocm_smi_csv(garbage) == []


def test_sysfs_uevent_bus_id(tmp_path):
    make_card(tmp_path, "card0", "0x1002", "0x74a1", vram=str(206141652992))
    (tmp_path / "class" / "drm" / "card0" / "device" / "uevent").write_text(
        "DRIVER=amdgpu\nPCI_CLASS=38000\nPCI_ID=1002:74A1\nPCI_SLOT_NAME=0000:0c:00.0\n")
    (reading,) = amd.read_sysfs(tmp_path)
    assert reading.bus_id == "0000:0c:00.0"
