"""The NVIDIA backend, the NVML helper and the topology parser, on replayed real readings."""

from __future__ import annotations

import ctypes
import subprocess
import sys

import pytest
from nvml_fakes import (
    H200_DIR,
    H200X2_DIR,
    MIB,
    FakeNvml,
    h200_fake,
    h200_gpu,
    h200x2_fake,
    no_module_loader,
    topo_runner,
)

from hwadvisor.models import DeviceClass
from hwadvisor.probe import nvml as nvml_mod
from hwadvisor.probe import topology
from hwadvisor.probe.detect import BACKEND_FACTORIES, DETECTION_ORDER
from hwadvisor.probe.nvidia import (
    NvidiaBackend,
    architecture_for,
    classify_device,
    cuda_version_text,
    formats_for,
    theoretical_bandwidth_gbps,
)
from hwadvisor.probe.nvml import Nvml, decode_clock_event_reasons


def probe(fake: FakeNvml, runner=None):
    return NvidiaBackend(Nvml(backend=fake), topo_runner=runner).probe()


# --- the single H200 -------------------------------------------------------------------------
@pytest.fixture(scope="module")
def h200():
    result = probe(h200_fake())
    assert len(result.devices) == 1
    return result


def test_h200_common_fields(h200):
    device = h200.devices[0]
    assert device.vendor == "nvidia"
    assert device.source == "probe"
    assert device.index == 0
    assert device.name == "NVIDIA H200"  # bytes from the (old-style) binding were decoded
    assert device.device_class == DeviceClass.DATACENTER_GPU.value
    assert device.memory_total_bytes == 150754820096
    assert device.memory_bandwidth_gbps == pytest.approx(4814, abs=1)
    assert device.memory_bandwidth_source == "probe"
    assert device.compute_capability == "9.0"
    assert device.architecture == "Hopper"
    assert "bf16" in device.formats and "fp8" in device.formats
    assert "fp4" not in device.formats
    # No NVML reading of the SM count in the fixtures: it stays null, not guessed.
    assert device.compute_units is None
    assert device.power_w == 700.0


def test_h200_nvidia_details(h200):
    details = h200.devices[0].nvidia
    assert details.power_limit_w == 700.0
    assert details.driver_version == "580.159.04"
    assert details.cuda_driver_version == "13.0"
    assert details.brand == "NVIDIA"
    assert details.memory_bus_width_bits == 6016
    assert details.memory_clock_max_mhz == 3201
    assert details.sm_clock_max_mhz == 1980
    assert details.sm_clock_current_mhz == 1965
    assert details.memory_clock_current_mhz == 3201
    assert details.mig_mode is False
    assert details.ecc_enabled is True
    assert details.throttle_reasons == ["sw_power_cap"]
    assert details.temperature_c == 39
    assert details.power_draw_w == pytest.approx(308.22)
    assert details.memory_used_bytes == 30261 * MIB
    assert details.pci_device_id == "0x233510DE"
    assert details.pci_bus_id == "00000000:00:06.0"
    assert [(p.pid, p.name, p.used_memory_bytes) for p in details.processes] == [
        (430, "python3", 30250 * MIB)]
    assert "nvlink" in details.unsupported_fields


def test_h200_interconnect(h200):
    inter = h200.devices[0].interconnect
    assert (inter.pcie.generation_max, inter.pcie.width_max) == (5, 16)
    assert (inter.pcie.generation_current, inter.pcie.width_current) == (5, 16)
    assert inter.nvlink is None  # link 0 raised on this single-GPU host
    assert inter.peers == []
    assert inter.cpu_affinity == "0-15"
    assert inter.numa_node == 0


def test_one_note_for_all_missing_fields():
    fake = h200_fake(not_supported={(0, "nvmlDeviceGetMemoryBusWidth"),
                                    (0, "nvmlDeviceGetTemperature"),
                                    (0, "nvmlDeviceGetEccMode")})
    result = probe(fake)
    device = result.devices[0]
    assert device.memory_bandwidth_gbps is None  # null, never 0
    assert device.memory_bandwidth_source is None
    assert device.nvidia.temperature_c is None
    assert device.nvidia.ecc_enabled is None
    assert {"memory_bus_width", "temperature", "ecc_mode"} <= set(device.nvidia.unsupported_fields)
    missing_notes = [n for n in result.notes if n.startswith("NVML could not read")]
    assert len(missing_notes) == 1
    assert "memory_bus_width" in missing_notes[0] and "temperature" in missing_notes[0]


def test_throttle_reasons_fall_back_to_the_older_function():
    fake = h200_fake(not_supported={(0, "nvmlDeviceGetCurrentClocksEventReasons")})
    device = probe(fake).devices[0]
    assert device.nvidia.throttle_reasons == ["sw_power_cap"]
    assert ("nvmlDeviceGetCurrentClocksThrottleReasons", 0) in fake.calls


def test_binding_without_a_function_is_a_missing_field():
    class OldBinding(FakeNvml):
        nvmlDeviceGetMemoryBusWidth = None  # an older nvidia-ml-py lacks it

    fake = OldBinding([h200_gpu()])
    device = probe(fake).devices[0]
    assert device.memory_bandwidth_gbps is None
    assert "memory_bus_width" in device.nvidia.unsupported_fields


# --- no library, no driver, lost GPU ---------------------------------------------------------
def test_no_pynvml_module():
    result = NvidiaBackend(Nvml(loader=no_module_loader)).probe()
    assert result.devices == []
    assert len(result.notes) == 1
    assert result.notes[0].startswith("no NVIDIA GPU:") and "nvidia-ml-py" in result.notes[0]


@pytest.mark.parametrize(("code", "words"), [
    (12, "NVML library not found (is the NVIDIA driver installed?)"),
    (9, "driver not loaded"),
    (1, "could not be initialized"),
])
def test_library_or_driver_missing(code, words):
    result = probe(h200_fake(init_error=code))
    assert result.devices == []
    assert len(result.notes) == 1
    assert result.notes[0].startswith("no NVIDIA GPU: ") and words in result.notes[0]


def test_gpu_lost_mid_probe_keeps_what_was_read():
    fake = h200_fake(lose_on=(0, "nvmlDeviceGetMemoryBusWidth"))
    result = probe(fake)
    device = result.devices[0]
    assert device.name == "NVIDIA H200"
    assert device.memory_total_bytes == 150754820096  # read before the loss
    assert device.memory_bandwidth_gbps is None
    assert device.nvidia.power_limit_w is None  # after the loss: null, not stale
    lost_at = fake.calls.index(("nvmlDeviceGetMemoryBusWidth", 0))
    assert fake.calls[lost_at + 1:] == []  # nothing more was asked of the lost GPU
    assert any("GPU 0" in n and "lost" in n for n in result.notes)
    assert device.notes and "lost" in device.notes[0]


def test_gpu_lost_before_its_name_is_left_out_other_gpu_still_read():
    fake = h200x2_fake(lose_on=(0, "nvmlDeviceGetName"))
    result = probe(fake, topo_runner(H200X2_DIR))
    assert [d.index for d in result.devices] == [1]
    assert result.devices[0].memory_total_bytes == 150754820096
    assert any("GPU 0" in n for n in result.notes)


def test_unknown_error_marks_the_gpu_lost_without_raising():
    class Flaky(FakeNvml):
        def nvmlDeviceGetPowerUsage(self, h):
            raise self.NVMLError(999)

    result = probe(Flaky([h200_gpu()]))
    assert result.devices[0].nvidia.power_draw_w is None
    assert any("unknown error" in n for n in result.notes)


def test_non_nvml_exception_is_a_missing_field():
    class Broken(FakeNvml):
        def nvmlDeviceGetBrand(self, h):
            raise ctypes.ArgumentError("argument 2: wrong type")

    device = probe(Broken([h200_gpu()])).devices[0]
    assert device.nvidia.brand is None
    assert "brand" in device.nvidia.unsupported_fields
    assert device.device_class == DeviceClass.DATACENTER_GPU.value  # the name still says H200


# --- two H200s: NVLink and peers -------------------------------------------------------------
@pytest.fixture(scope="module")
def h200x2():
    runner = topo_runner(H200X2_DIR)
    fake = h200x2_fake()
    return probe(fake, runner), runner, fake


def test_h200x2_nvlinks(h200x2):
    result, _, _ = h200x2
    assert [d.index for d in result.devices] == [0, 1]
    for device in result.devices:
        nvlink = device.interconnect.nvlink
        assert nvlink.links_active == 18
        assert nvlink.version == 4  # NVML_NVLINK_VERSION_4_0 is the value 6
        assert nvlink.bandwidth_gbps == 450.0  # 18 x 25 GB/s, one direction


def test_h200x2_gpu_link(h200x2):
    result, _, _ = h200x2
    for device in result.devices:
        link = device.interconnect
        assert (link.gpu_link_kind, link.gpu_link_gbps, link.gpu_link_domain) == ("nvlink", 450, 2)


def test_single_h200_without_readable_links_has_no_gpu_link(h200):
    assert h200.devices[0].interconnect.gpu_link_kind is None  # nothing invented


def test_links_without_destinations_leave_the_domain_to_the_profile():
    from hwadvisor.profiles import enrich_devices

    result = probe(h200x2_fake(), lambda argv, timeout_s: None)  # no topo -m either
    assert {d.interconnect.gpu_link_domain for d in result.devices} == {None}
    devices, _ = enrich_devices(result.devices)
    assert {d.interconnect.gpu_link_domain for d in devices} == {2}  # 8 on HGX, 2 GPUs here
    assert any("capped at the 2 GPU(s)" in note for note in devices[0].notes)


def test_no_active_links_is_pcie():
    from hwadvisor.models import Interconnect, PcieLink
    from hwadvisor.probe.nvidia import _LinkReading

    link = Interconnect(pcie=PcieLink(generation_max=4, width_max=16))
    NvidiaBackend._set_gpu_link(link, _LinkReading(links_active=0), set(), 2)
    assert (link.gpu_link_kind, link.gpu_link_gbps, link.gpu_link_domain) == ("pcie", 31.5, 1)


def test_h200x2_peers(h200x2):
    result, runner, fake = h200x2
    gpu0, gpu1 = result.devices
    assert [(p.peer_index, p.link, p.nvlinks, p.p2p) for p in gpu0.interconnect.peers] == [
        (1, "NV18", 18, True)]
    assert [(p.peer_index, p.link, p.nvlinks) for p in gpu1.interconnect.peers] == [
        (0, "NV18", 18)]
    # NVML could not say where the links go (no remote PCI reading), so topo -m was read once.
    assert len(runner.calls) == 1 and runner.calls[0][1:] == ["topo", "-m"]
    assert gpu0.interconnect.cpu_affinity == "0-31"
    assert gpu0.nvidia.pci_bus_id == "00000000:00:06.0"
    assert gpu1.nvidia.pci_bus_id == "00000000:00:07.0"
    assert gpu0.nvidia.throttle_reasons == ["gpu_idle"]
    assert gpu0.nvidia.processes == []


def test_p2p_is_none_when_nvml_fails():
    fake = h200x2_fake(not_supported={(0, "nvmlDeviceGetP2PStatus")})
    result = probe(fake, topo_runner(H200X2_DIR))
    assert result.devices[0].interconnect.peers[0].p2p is None
    assert result.devices[1].interconnect.peers[0].p2p is True


def test_peer_link_from_nvml_remote_pci_info_without_topo():
    """Synthetic: NVML gives each link's far end (an NVSwitch), so topo -m is not needed."""
    from types import SimpleNamespace

    class WithRemotes(FakeNvml):
        def nvmlDeviceGetNvLinkRemotePciInfo(self, h, link):
            self._gpu(h, "nvmlDeviceGetNvLinkRemotePciInfo")
            return SimpleNamespace(busId=b"00000000:A0:00.0")  # not a GPU: a switch

    fake = WithRemotes(h200x2_fake().gpus)

    def no_topo(argv, timeout_s):
        raise AssertionError("topo -m should not run when NVML answers")

    result = probe(fake, no_topo)
    assert result.devices[0].interconnect.peers[0].link == "NV18"
    # Links to a switch join every GPU present.
    assert result.devices[0].interconnect.gpu_link_domain == 2
    assert result.devices[0].interconnect.gpu_link_kind == "nvlink"


def test_topo_missing_leaves_link_null():
    result = probe(h200x2_fake(), lambda argv, timeout_s: None)
    peer = result.devices[0].interconnect.peers[0]
    assert peer.link is None and peer.nvlinks is None


# --- data tables -----------------------------------------------------------------------------
@pytest.mark.parametrize(("name", "brand", "expected"), [
    ("NVIDIA H200", 14, DeviceClass.DATACENTER_GPU),
    ("NVIDIA H100 PCIe", 14, DeviceClass.DATACENTER_GPU),
    ("NVIDIA H100 80GB HBM3", 14, DeviceClass.DATACENTER_GPU),
    ("NVIDIA A100-SXM4-80GB", 2, DeviceClass.DATACENTER_GPU),
    ("NVIDIA A100 80GB PCIe", 14, DeviceClass.DATACENTER_GPU),
    ("NVIDIA L4", 14, DeviceClass.DATACENTER_GPU),
    ("NVIDIA L40S", 14, DeviceClass.DATACENTER_GPU),
    ("NVIDIA A10G", 14, DeviceClass.DATACENTER_GPU),
    ("NVIDIA B200", 14, DeviceClass.DATACENTER_GPU),
    ("NVIDIA GH200 480GB", 14, DeviceClass.DATACENTER_GPU),
    ("Tesla V100-SXM2-16GB", 2, DeviceClass.DATACENTER_GPU),
    ("Tesla T4", 2, DeviceClass.DATACENTER_GPU),
    ("NVIDIA GeForce RTX 4090", 5, DeviceClass.CONSUMER_GPU),
    ("NVIDIA GeForce RTX 5090", 5, DeviceClass.CONSUMER_GPU),
    ("NVIDIA GeForce RTX 3090", 5, DeviceClass.CONSUMER_GPU),
    ("NVIDIA TITAN RTX", 6, DeviceClass.CONSUMER_GPU),
    ("Quadro RTX 8000", 1, DeviceClass.CONSUMER_GPU),
    ("NVIDIA RTX A6000", 13, DeviceClass.CONSUMER_GPU),
    ("NVIDIA RTX 6000 Ada Generation", 13, DeviceClass.CONSUMER_GPU),
    ("NVIDIA RTX A1000", 13, DeviceClass.CONSUMER_GPU),
    # Unknown names: the brand decides; unknown brand: consumer (the conservative class).
    ("NVIDIA Future X9", 14, DeviceClass.DATACENTER_GPU),
    ("NVIDIA Future X9", 5, DeviceClass.CONSUMER_GPU),
    ("Mystery GPU", None, DeviceClass.CONSUMER_GPU),
])
def test_device_class(name, brand, expected):
    assert classify_device(name, brand) == expected


@pytest.mark.parametrize(("cc", "expected"), [
    ("6.1", []),
    ("7.0", ["fp16"]),
    ("7.5", ["fp16", "int8"]),
    ("8.0", ["fp16", "int8", "bf16", "tf32"]),
    ("8.6", ["fp16", "int8", "bf16", "tf32"]),
    ("8.9", ["fp16", "int8", "bf16", "tf32", "fp8"]),
    ("9.0", ["fp16", "int8", "bf16", "tf32", "fp8"]),
    ("10.0", ["fp16", "int8", "bf16", "tf32", "fp8", "fp4"]),
    ("12.0", ["fp16", "int8", "bf16", "tf32", "fp8", "fp4"]),
    (None, []),
    ("gfx942", []),
])
def test_formats(cc, expected):
    assert formats_for(cc) == expected


def test_architecture_names():
    assert architecture_for(9, "9.0") == "Hopper"
    assert architecture_for(10, None) == "Blackwell"
    assert architecture_for(None, "8.9") == "Ada"  # NVML arch unsupported: from the cc
    assert architecture_for(None, "12.0") == "Blackwell"
    assert architecture_for(None, None) is None


def test_unit_conversions():
    assert cuda_version_text(13000) == "13.0"
    assert cuda_version_text(12040) == "12.4"
    assert cuda_version_text(None) is None
    assert theoretical_bandwidth_gbps(6016, 3201) == pytest.approx(4814.3, abs=0.1)
    assert theoretical_bandwidth_gbps(None, 3201) is None
    assert theoretical_bandwidth_gbps(384, 0) is None


def test_clock_event_reason_bits():
    assert decode_clock_event_reasons(0) == []
    assert decode_clock_event_reasons(0x1 | 0x4 | 0x8 | 0x40) == [
        "gpu_idle", "sw_power_cap", "hw_slowdown", "hw_thermal_slowdown"]


# --- the helper's public API for the validator -----------------------------------------------
def test_helper_public_api():
    helper = Nvml(backend=h200_fake())
    assert helper.available() and helper.device_count() == 1
    assert helper.current_clocks(0) == {"sm_mhz": 1965, "memory_mhz": 3201}
    procs = helper.gpu_processes(0)
    assert [(p.pid, p.used_memory_bytes) for p in procs] == [(430, 30250 * MIB)]
    assert helper.throttle_reasons(0) == ["sw_power_cap"]
    assert helper.current_clocks(5) == {"sm_mhz": None, "memory_mhz": None}  # no such GPU
    helper.shutdown()
    helper.shutdown()  # twice is harmless


def test_helper_starts_once_lazily():
    fake = h200_fake()
    helper = Nvml(backend=fake)
    assert not fake.initialized  # nothing until first use
    helper.device_count()
    helper.device_count()
    assert fake.initialized


def test_helper_without_library():
    helper = Nvml(loader=no_module_loader)
    assert helper.device_count() == 0
    assert helper.current_clocks(0) == {"sm_mhz": None, "memory_mhz": None}
    assert helper.gpu_processes(0) is None
    assert "nvidia-ml-py" in helper.reason


def test_module_level_api_uses_the_process_wide_helper():
    nvml_mod.set_nvml(Nvml(backend=h200_fake()))
    try:
        assert nvml_mod.current_clocks(0) == {"sm_mhz": 1965, "memory_mhz": 3201}
        assert [p.pid for p in nvml_mod.gpu_processes(0)] == [430]
        assert nvml_mod.throttle_reasons(0) == ["sw_power_cap"]
    finally:
        nvml_mod.set_nvml(None)


def test_process_wide_helper_is_injectable():
    fake_helper = Nvml(backend=h200_fake())
    nvml_mod.set_nvml(fake_helper)
    try:
        assert nvml_mod.get_nvml() is fake_helper
        assert NvidiaBackend().probe().devices[0].name == "NVIDIA H200"
    finally:
        nvml_mod.set_nvml(None)
    assert nvml_mod.get_nvml() is not fake_helper


def test_detect_registers_nvidia_first():
    assert DETECTION_ORDER[0] == "nvidia"
    nvml_mod.set_nvml(Nvml(backend=h200_fake()))
    try:
        assert isinstance(BACKEND_FACTORIES["nvidia"](), NvidiaBackend)
    finally:
        nvml_mod.set_nvml(None)


def test_without_nvml_the_backend_module_is_not_needed():
    """No NVML: the factory answers with the backend's own note (its module stays unloaded)."""
    nvml_mod.set_nvml(Nvml(loader=no_module_loader))
    try:
        backend = BACKEND_FACTORIES["nvidia"]()
        assert not isinstance(backend, NvidiaBackend)
        result = backend.probe()
        assert result.devices == []
        assert result.notes == [NvidiaBackend(Nvml(loader=no_module_loader)).probe().notes[0]]
        assert result.notes[0].startswith("no NVIDIA GPU: the nvidia-ml-py package")
    finally:
        nvml_mod.set_nvml(None)


# --- topology --------------------------------------------------------------------------------
def test_parse_topo_single():
    matrix = topology.parse_topo_matrix((H200_DIR / "nvidia-smi-topo-m.txt").read_text())
    assert matrix.gpus == [0]
    assert matrix.links == {}
    assert matrix.cpu_affinity == {0: "0-15"}
    assert matrix.numa_node == {0: 0}


def test_parse_topo_nv18():
    matrix = topology.parse_topo_matrix((H200X2_DIR / "nvidia-smi-topo-m.txt").read_text())
    assert matrix.gpus == [0, 1]
    assert matrix.link(0, 1) == "NV18" and matrix.link(1, 0) == "NV18"
    assert matrix.cpu_affinity == {0: "0-31", 1: "0-31"}
    assert topology.nvlinks_in_code(matrix.link(0, 1)) == 18


def test_parse_topo_pcie_codes_and_nics():
    text = ("\tGPU0\tGPU1\tGPU2\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
            "GPU0\t X \tPIX\tSYS\tNODE\t0-23,48-71\t0\t\tN/A\n"
            "GPU1\tPIX\t X \tSYS\tNODE\t0-23,48-71\t0\t\tN/A\n"
            "GPU2\tSYS\tSYS\t X \tSYS\t24-47\t1\t\tN/A\n"
            "NIC0\tNODE\tNODE\tSYS\t X \t\t\t\n\nLegend:\n  X    = Self\n")
    matrix = topology.parse_topo_matrix(text)
    assert matrix.gpus == [0, 1, 2]
    assert matrix.link(0, 1) == "PIX" and matrix.link(0, 2) == "SYS"
    assert matrix.cpu_affinity[0] == "0-23,48-71" and matrix.numa_node[2] == 1
    assert topology.nvlinks_in_code("PIX") is None


def test_parse_topo_garbage():
    assert topology.parse_topo_matrix("").gpus == []
    assert topology.parse_topo_matrix("command not found\n").gpus == []


def test_read_topo_without_binary(monkeypatch):
    monkeypatch.setattr(topology.shutil, "which", lambda name: None)
    assert topology.read_topo_matrix() is None


def test_run_survives_missing_binary_and_timeout():
    assert topology._run(["/nonexistent/nvidia-smi", "topo", "-m"], 1.0) is None
    assert topology._run([sys.executable, "-c", "import time; time.sleep(5)"], 0.2) is None
    assert topology._run([sys.executable, "-c", "raise SystemExit(3)"], 5.0) is None


def test_cpu_ranges_and_masks():
    assert topology.cpu_ranges([0, 1, 2, 3, 8, 10, 11]) == "0-3,8,10-11"
    assert topology.cpu_ranges([]) is None
    assert topology.cpus_from_masks([0b101, 0x1]) == [0, 2, 64]


def test_nvlink_bandwidth_table():
    assert topology.nvlink_generation(6) == 4
    assert topology.nvlink_generation(7) == 5
    assert topology.nvlink_bandwidth_gbps(18, 4) == 450.0
    assert topology.nvlink_bandwidth_gbps(18, 5) == 900.0
    assert topology.nvlink_bandwidth_gbps(0, 4) is None
    assert topology.nvlink_bandwidth_gbps(18, None) is None


def test_subprocess_helper_never_uses_a_shell(monkeypatch):
    seen = {}

    def fake_run(argv, **kwargs):
        seen.update(kwargs, argv=argv)
        return subprocess.CompletedProcess(argv, 0, stdout="", stderr="")

    monkeypatch.setattr(topology.subprocess, "run", fake_run)
    topology._run(["nvidia-smi", "topo", "-m"], 3.0)
    assert seen["argv"] == ["nvidia-smi", "topo", "-m"]
    assert not seen.get("shell") and seen["timeout"] == 3.0
