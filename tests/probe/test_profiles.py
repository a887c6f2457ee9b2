"""Datasheet profiles: schema, sanity bounds, matching, enrichment and the `profiles` command."""

from __future__ import annotations

import importlib.resources
import json
import re
from pathlib import Path

import pytest
from pydantic import ValidationError
from script_loader import load_script
from typer.testing import CliRunner

from hwadvisor import profiles
from hwadvisor.cli.app import app
from hwadvisor.errors import UserError
from hwadvisor.models import Device, Interconnect, NvidiaDetails, NvLinkInfo

REPO_PROFILES = Path(__file__).resolve().parents[2] / "profiles"
FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "nvidia-h200" / "nvidia-smi-q.txt"
GIB = 2**30
REQUIRED_IDS = {
    "h100-sxm", "h100-pcie", "h200-sxm", "b200", "a100-40gb", "a100-80gb", "l40s", "l4",
    "rtx-3090", "rtx-4090", "rtx-5090", "mi250x", "mi300x", "mi325x", "rx-7900-xtx",
    "m1-max", "m2-ultra", "m3-max", "m3-ultra", "m4-max",
    "snapdragon-8-gen-3", "snapdragon-8-elite", "a17-pro", "a18-pro",
    # devices people actually have
    "t4", "v100-sxm2", "a10g", "a10", "l40", "rtx-a6000", "rtx-6000-ada", "rtx-3060",
    "rtx-4060-ti", "rtx-4070", "rtx-4080", "b300", "r100", "w7900", "mi210", "rx-7900-xt",
    "m1", "m1-pro", "m1-ultra", "m2", "m2-pro", "m2-max", "m3", "m3-pro", "m4", "m4-pro",
    "snapdragon-8-gen-2", "a19-pro", "a19",
}
MOBILE_IDS = {"snapdragon-8-gen-2", "snapdragon-8-gen-3", "snapdragon-8-elite", "a17-pro",
              "a18-pro", "a19-pro", "a19"}
runner = CliRunner()


def probed(name: str, memory_gib: float | None = None, pci: str | None = None, **extra) -> Device:
    """A device as a backend would report it (source 'probe')."""
    return Device(
        index=0,
        vendor=extra.pop("vendor", "nvidia"),
        device_class=extra.pop("device_class", "datacenter-gpu"),
        name=name,
        memory_total_bytes=int(memory_gib * GIB) if memory_gib else None,
        nvidia=NvidiaDetails(pci_device_id=pci) if pci else None,
        source="probe",
        **extra,
    )


# --- the files -----------------------------------------------------------------------------


def test_every_file_validates_and_is_named_after_its_id():
    files = sorted(REPO_PROFILES.glob("*.toml"))
    assert len(files) >= len(REQUIRED_IDS) >= 40
    for path in files:
        profile = profiles.parse_profile(path.name, path.read_bytes())
        assert path.stem == profile.id


def test_required_devices_are_covered_and_ids_unique():
    ids = profiles.ids()
    assert len(ids) == len(set(ids))
    assert REQUIRED_IDS <= set(ids)
    assert all(re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", i) for i in ids)


def test_profiles_ship_as_package_data():
    root = importlib.resources.files("hwadvisor.profiles_data")
    shipped = {entry.name for entry in root.iterdir() if entry.name.endswith(".toml")}
    assert {f"{i}.toml" for i in REQUIRED_IDS} <= shipped


@pytest.mark.parametrize("profile", profiles.load_all(), ids=lambda p: p.id)
def test_sanity_bounds(profile):
    # Plausible ranges: phones 4 GB .. GPUs/Macs 512 GB; 30 GB/s .. 10 TB/s for shipping parts,
    # 25 TB/s for announced ones (Rubin's HBM4: 22 TB/s).
    assert 4 <= profile.memory_gib <= 512
    ceiling = 25_000 if profile.status == "announced" else 10_000
    assert 30 <= profile.memory_bandwidth_gbps <= ceiling
    peaks = profile.peak_tflops
    if "fp32" in peaks:
        assert 1 <= peaks["fp32"] <= 200
        for wider in ("fp16", "bf16", "tf32"):
            if wider in peaks:
                assert peaks[wider] >= peaks["fp32"], f"{wider} < fp32"
    if "bf16" in peaks and "fp8" in peaks:
        assert peaks["fp8"] >= peaks["bf16"]
    if "fp8" in peaks and "fp4" in peaks:
        assert peaks["fp4"] >= peaks["fp8"]
    assert peaks.get("bf16", 0) <= 5000  # dense: no single device beyond 5 PFLOP/s bf16 yet
    for urls in profile.sources.values():
        assert urls and all(u.startswith("https://") for u in urls)
    for figure in profile.derived_figures:
        assert profile.notes, "a derived figure must be explained in notes"
        assert figure.split(".")[0] in profiles.Profile.model_fields, figure
    if profile.device_class.value == "mobile-soc":
        assert profile.mobile is not None and "stimate" in profile.mobile.basis
    if profile.unified_memory:
        assert profile.device_class.value in ("apple-silicon", "mobile-soc")
    if profile.device_class.value in ("datacenter-gpu", "consumer-gpu"):
        # Every GPU says how it reaches its peers and in what reference system.
        link = profile.interconnect
        assert link is not None and link.gpu_link_kind is not None, "model the GPU link"
        assert link.gpu_link_domain >= 1 and link.gpu_link_gbps > 0
        assert profile.system is not None and "system" in profile.sources
        if profile.system.assumption:
            assert "ssumption" in profile.system.basis
    if profile.status == "announced":
        assert any("announced" in note.lower() for note in profile.notes)
    for variant in profile.variants:
        assert variant.id.startswith(profile.id + "-")
        assert variant.memory_bandwidth_gbps <= profile.memory_bandwidth_gbps
        for fmt, value in variant.peak_tflops.items():
            assert value <= profile.peak_tflops[fmt], "the profile's figures are the top config"


def test_h200_figures_match_the_datasheet():
    h200 = profiles.get("h200-sxm")
    assert h200.memory_gib == 141 and h200.memory_type == "HBM3e"
    assert h200.memory_bandwidth_gbps == 4800
    assert h200.peak_tflops["bf16"] == pytest.approx(989, abs=1)
    assert h200.peak_tflops["fp8"] == pytest.approx(1979, abs=1)
    assert h200.interconnect.nvlink_gbps_bidirectional == 900
    assert h200.compute_capability == "9.0"


def _valid_doc() -> dict:
    return {
        "id": "x-1", "name": "X", "vendor": "nvidia", "device_class": "consumer-gpu",
        "family": "nvidia-ada", "memory_gib": 24, "memory_type": "GDDR6",
        "memory_bandwidth_gbps": 900,
        "peak_tflops": {"fp32": 30}, "sources": {
            "memory": ["https://a"], "bandwidth": ["https://a"], "compute": ["https://a"]},
    }


def test_schema_accepts_a_minimal_profile():
    assert profiles.Profile.model_validate(_valid_doc()).id == "x-1"


@pytest.mark.parametrize("change", [
    {"extra_key": 1},
    {"id": "Bad_ID"},
    {"peak_tflops": {"fp33": 1}},
    {"peak_tflops": {"fp32": 0}},
    {"sources": {"memory": ["https://a"], "bandwidth": ["https://a"]}},  # compute unsourced
    {"sources": {"memory": ["http://a"], "bandwidth": ["https://a"], "compute": ["https://a"]}},
    {"power_w": 300},  # no sources.power
    {"device_class": "gpu"},
    {"family": "nvidia-hoper"},
    {"match": {"pci_ids": ["0x2335"]}},
])
def test_schema_refuses_bad_profiles(change):
    doc = _valid_doc() | change
    with pytest.raises(ValidationError):
        profiles.Profile.model_validate(doc)


def test_file_name_must_equal_id():
    data = (REPO_PROFILES / "l4.toml").read_bytes()
    with pytest.raises(ValueError, match="name the file"):
        profiles.parse_profile("l4-other.toml", data)


# --- matching ------------------------------------------------------------------------------


def _fixture_value(key: str) -> str:
    for line in FIXTURE.read_text().splitlines():
        if line.strip().startswith(key):
            return line.split(":", 1)[1].strip()
    raise AssertionError(key)


def test_real_h200_name_and_pci_id_match():
    name = _fixture_value("Product Name")  # "NVIDIA H200"
    pci = _fixture_value("Device Id")  # "0x233510DE"
    assert profiles.match(probed(name, 140.4, pci)).id == "h200-sxm"
    assert profiles.match(probed("some renamed board", 140.4, pci)).id == "h200-sxm"
    assert profiles.match(probed(name, 140.4)).id == "h200-sxm"


@pytest.mark.parametrize("raw,expected", [
    ("0x233510DE", ("10de", "2335")),
    ("10de:2335", ("10de", "2335")),
    ("0x2335", (None, "2335")),
    ("garbage", None),
    (None, None),
])
def test_parse_pci_id(raw, expected):
    assert profiles.parse_pci_id(raw) == expected


def test_pci_id_of_another_vendor_does_not_match():
    # Device 0x2335 of vendor 0x1002 is not the H200.
    assert profiles.match(probed("mystery", None, "0x23351002")) is None


@pytest.mark.parametrize("name,memory_gib,expected", [
    ("NVIDIA A100-SXM4-40GB", 39.4, "a100-40gb"),
    ("NVIDIA A100-SXM4-80GB", 79.2, "a100-80gb"),
    ("NVIDIA A100-SXM4", 79.2, "a100-80gb"),  # size left out of the name: memory decides
    ("NVIDIA A100-SXM4", 39.4, "a100-40gb"),
    ("NVIDIA H100 80GB HBM3", 79.6, "h100-sxm"),
    ("NVIDIA H100 PCIe", 79.6, "h100-pcie"),
    ("NVIDIA H100 NVL", 93.0, "h100-nvl"),  # its own profile (PCIe, bridged pairs)
    ("NVIDIA H200 NVL", 140.0, None),
    ("NVIDIA GeForce RTX 4090", 23.99, "rtx-4090"),
    ("NVIDIA GeForce RTX 4090 D", 23.99, None),
    ("NVIDIA GeForce RTX 3090 Ti", 24, "rtx-3090-ti"),  # its own profile, not the 3090's
    ("AMD Instinct MI300X", 191.5, "mi300x"),
    ("AMD Instinct MI325X", 255.5, "mi325x"),
    ("AMD Radeon RX 7900 XTX", 24, "rx-7900-xtx"),
    ("Apple M3 Max", 36, "m3-max"),
    ("Apple M3 Pro", 36, "m3-pro"),
    ("Apple M3", 16, "m3"),
    ("Apple M1 Ultra", 128, "m1-ultra"),
    ("Apple M4 Pro", 48, "m4-pro"),
    ("iPhone16,2", 7.5, "a17-pro"),
    ("iPhone17,1", 7.5, "a18-pro"),
    ("iPhone16,10", 7.5, None),
    ("SM8650", 11.2, "snapdragon-8-gen-3"),
    ("Qualcomm Snapdragon 8 Elite", 11.2, "snapdragon-8-elite"),
    ("Snapdragon 8 Elite Gen 5", 11.2, None),
    ("Qualcomm Snapdragon 8 Gen 2 (SM8550)", 11.2, "snapdragon-8-gen-2"),
    ("Tesla T4", 15, "t4"),
    ("Tesla V100-SXM2-32GB", 31.7, "v100-sxm2"),
    ("NVIDIA A10G", 22.3, "a10g"),
    ("NVIDIA A10", 22.3, "a10"),
    ("NVIDIA L40", 44.5, "l40"),
    ("NVIDIA L40S", 44.5, "l40s"),
    ("NVIDIA RTX A6000", 47.5, "rtx-a6000"),
    ("NVIDIA RTX 6000 Ada Generation", 47.5, "rtx-6000-ada"),
    ("NVIDIA GeForce RTX 3060", 12, "rtx-3060"),
    ("NVIDIA GeForce RTX 3060 Ti", 8, None),
    ("NVIDIA GeForce RTX 4060 Ti", 16, "rtx-4060-ti"),
    ("NVIDIA GeForce RTX 4070", 12, "rtx-4070"),
    ("NVIDIA GeForce RTX 4070 SUPER", 12, None),
    ("NVIDIA GeForce RTX 4080", 16, "rtx-4080"),
    ("NVIDIA GeForce RTX 4080 SUPER", 16, None),
    ("NVIDIA B300 SXM6 AC", 279, "b300"),
    ("AMD Radeon PRO W7900", 48, "w7900"),
    ("AMD Instinct MI210", 64, "mi210"),
    ("AMD Radeon RX 7900 XT", 20, "rx-7900-xt"),
    ("iPhone18,2", 11.5, "a19-pro"),
    ("iPhone18,3", 7.5, "a19"),
])
def test_name_matching(name, memory_gib, expected):
    found = profiles.match(probed(name, memory_gib))
    assert (found.id if found else None) == expected


def test_unknown_device_keeps_its_readings_and_gets_a_hint():
    device = probed("NVIDIA A16", 15, memory_bandwidth_gbps=200.0, memory_bandwidth_source="probe")
    devices, hints = profiles.enrich_devices([device])
    assert devices[0] == device.model_copy(update={"family": "nvidia-older"})  # its guess added
    assert devices[0].profile_id is None
    assert len(hints) == 1 and "NVIDIA A16" in hints[0] and "--device" in hints[0]


def test_enrich_fills_gaps_but_keeps_probe_readings():
    nvlink = Interconnect(nvlink=NvLinkInfo(links_active=18, version=4))
    device = probed("NVIDIA H200", 140.4, "0x233510DE", formats=["fp32", "bf16"],
                    interconnect=nvlink)
    (out,), hints = profiles.enrich_devices([device])
    assert hints == []
    assert out.profile_id == "h200-sxm"
    assert out.peak_tflops["fp8"] == 1979 and out.peak_tflops_source == "datasheet"
    assert out.memory_bandwidth_gbps == 4800 and out.memory_bandwidth_source == "datasheet"
    assert out.formats[:2] == ["fp32", "bf16"] and "fp8" in out.formats
    assert len(out.formats) == len(set(out.formats))
    assert out.interconnect.nvlink.bandwidth_gbps == 450  # one direction of 900
    assert out.source == "probe"

    read = device.model_copy(update={"memory_bandwidth_gbps": 4000.0,
                                     "memory_bandwidth_source": "probe"})
    (kept,), _ = profiles.enrich_devices([read])
    assert kept.memory_bandwidth_gbps == 4000 and kept.memory_bandwidth_source == "probe"


def test_enrich_invents_no_nvlink_where_the_probe_saw_none():
    (out,), _ = profiles.enrich_devices([probed("NVIDIA H200", 140.4)])
    assert out.interconnect is None
    down = Interconnect(nvlink=NvLinkInfo(links_active=0))
    (out,), _ = profiles.enrich_devices([probed("NVIDIA H200", 140.4, interconnect=down)])
    assert out.interconnect.nvlink.bandwidth_gbps is None


def test_enrich_marks_derived_figures():
    device = probed("Apple M3 Max", 64, vendor="apple", device_class="apple-silicon")
    (out,), _ = profiles.enrich_devices([device])
    assert out.profile_id == "m3-max" and out.peak_tflops_source == "derived"


def test_memory_mismatch_is_noted():
    (out,), _ = profiles.enrich_devices([probed("NVIDIA H200", 40)])  # odd: a name match only
    assert out.profile_id == "h200-sxm"
    assert any("does not fit" in note for note in out.notes)


# --- devices from profiles -----------------------------------------------------------------


def test_device_from_profile():
    device = profiles.device_from_profile("h200-sxm", index=3)
    assert device.source == "profile" and device.index == 3 and device.profile_id == "h200-sxm"
    assert device.memory_total_bytes == 141 * GIB
    assert device.memory_bandwidth_gbps == 4800 and device.memory_bandwidth_source == "datasheet"
    assert device.peak_tflops["bf16"] == pytest.approx(989.5)
    assert device.device_class == "datacenter-gpu" and device.compute_capability == "9.0"
    assert device.interconnect.nvlink.bandwidth_gbps == 450
    assert device.interconnect.pcie.generation_max == 5
    # The planned device round-trips through JSON like any probed one; the facts the JSON
    # leaves out (family, SoC part) come back from its profile.
    read = Device.model_validate_json(device.model_dump_json())
    assert read.model_dump() == device.model_dump() and profiles.restore_facts(read) == device


def test_device_from_phone_profile_marks_derived_bandwidth():
    device = profiles.device_from_profile("snapdragon-8-gen-3")
    assert device.unified_memory and device.memory_bandwidth_source == "derived"
    assert device.peak_tflops == {} and device.peak_tflops_source is None


def test_get_unknown_id_suggests_close_ids():
    with pytest.raises(UserError) as info:
        profiles.get("h200")
    assert info.value.code == 2 and "h200-sxm" in info.value.hint
    assert profiles.get(" H200-SXM ").id == "h200-sxm"


# --- the command ---------------------------------------------------------------------------


def test_cli_list_json():
    result = runner.invoke(app, ["profiles", "list", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert {row["id"] for row in data} == set(profiles.ids())


def test_cli_list_class_filter():
    result = runner.invoke(app, ["profiles", "list", "--class", "mobile-soc", "--json"])
    assert result.exit_code == 0
    data = json.loads(result.stdout)
    assert {row["id"] for row in data} == MOBILE_IDS
    assert all(row["device_class"] == "mobile-soc" for row in data)


def test_cli_list_table_runs():
    result = runner.invoke(app, ["profiles", "list"])
    assert result.exit_code == 0 and "h200-sxm" in result.stdout


def test_cli_bad_class_is_a_usage_error():
    result = runner.invoke(app, ["profiles", "list", "--class", "gpu"])
    assert result.exit_code == 2


def test_cli_show_json():
    result = runner.invoke(app, ["profiles", "show", "mi300x", "--json"])
    assert result.exit_code == 0
    data = json.loads(result.stdout)
    assert data["id"] == "mi300x" and data["compute_capability"] == "gfx942"
    assert profiles.Profile.model_validate(data) == profiles.get("mi300x")


def test_cli_show_unknown_id():
    result = runner.invoke(app, ["profiles", "show", "h200"])
    assert result.exit_code == 2


def test_replayed_h200_probe_is_enriched_from_its_profile():
    # The NVIDIA backend on the real H200 readings, then the same enrichment collect() runs.
    from nvml_fakes import h200_fake, h200x2_fake

    from hwadvisor.probe.nvidia import NvidiaBackend
    from hwadvisor.probe.nvml import Nvml

    for fake in (h200_fake(), h200x2_fake()):
        found = NvidiaBackend(Nvml(backend=fake), topo_runner=None).probe()
        devices, hints = profiles.enrich_devices(found.devices)
        assert hints == []
        assert len(devices) == len(found.devices)
        for before, after in zip(found.devices, devices, strict=True):
            assert after.profile_id == "h200-sxm"
            assert after.peak_tflops["bf16"] == pytest.approx(989.5)
            assert after.peak_tflops_source == "datasheet"
            # What NVML read stays: the probe's bandwidth is not replaced by the datasheet's.
            assert after.memory_bandwidth_gbps == before.memory_bandwidth_gbps
            assert after.memory_total_bytes == before.memory_total_bytes


# --- schema additions: status, npu, mobile, links, reference systems, variants --------------


def test_announced_part_is_marked_and_planned_devices_say_so():
    rubin = profiles.get("r100")
    assert rubin.status == "announced"
    device = profiles.device_from_profile("r100")
    assert device.status == "announced"
    assert any("announced" in note for note in device.notes)
    assert profiles.get("h200-sxm").status == "shipping"
    assert profiles.device_from_profile("h200-sxm").status is None
    doc = _valid_doc() | {"status": "announced"}  # announced without saying so in the notes
    with pytest.raises(ValidationError, match="announced"):
        profiles.Profile.model_validate(doc)


def test_b300_uses_announced_hgx_figures_and_says_so():
    b300 = profiles.get("b300")
    assert b300.memory_gib == 288 and b300.memory_bandwidth_gbps == 8000
    assert b300.peak_tflops["fp4"] == 13500 and b300.peak_tflops["bf16"] == 2250
    assert any(note.startswith("Announced figures") for note in b300.notes)
    assert b300.is_derived("peak_tflops.fp4")


@pytest.mark.parametrize("profile_id,kind,gbps,domain", [
    ("h100-sxm", "nvlink", 450, 8),
    ("h200-sxm", "nvlink", 450, 8),
    ("h100-pcie", "nvlink-bridge", 300, 2),  # bridges join pairs; 8 cards talk over PCIe
    ("rtx-a6000", "nvlink-bridge", 56.25, 2),
    ("mi300x", "xgmi", 448, 8),  # Infinity Fabric, not PCIe
    ("mi325x", "xgmi", 448, 8),
    ("mi250x", "xgmi", 200, 8),
    ("rtx-4090", "pcie", 31.5, 1),
    ("rtx-4060-ti", "pcie", 15.8, 1),  # a Gen4 x8 card
])
def test_gpu_links(profile_id, kind, gbps, domain):
    device = profiles.device_from_profile(profile_id)
    link = device.interconnect
    assert (link.gpu_link_kind, link.gpu_link_gbps, link.gpu_link_domain) == (kind, gbps, domain)


def test_link_fields_go_together():
    doc = _valid_doc() | {"interconnect": {"gpu_link_kind": "pcie"}}
    with pytest.raises(ValidationError, match="go together"):
        profiles.Profile.model_validate(doc)


def test_reference_systems():
    assert profiles.get("h200-sxm").system.host_memory_gib == 2048
    assert profiles.get("h200-sxm").system.gpus_per_node == 8
    desktop = profiles.get("rtx-4090").system
    assert desktop.gpus_per_node == 1 and desktop.host_memory_gib == 64 and desktop.assumption
    assert profiles.device_from_profile("mi300x").gpus_per_node == 8


def test_mi250x_profile_is_one_gcd_with_the_module_in_notes():
    gcd = profiles.get("mi250x")
    assert gcd.compute_units == 110 and gcd.memory_gib == 64
    assert gcd.memory_bandwidth_gbps == pytest.approx(1638.4)
    assert gcd.peak_tflops["bf16"] == pytest.approx(191.5)
    assert any("220 CUs" in note and "383" in note for note in gcd.notes)


def test_npu_figures_only_where_published():
    a17 = profiles.device_from_profile("a17-pro")
    assert a17.npu.name.startswith("Apple Neural Engine") and a17.npu.tops == {"unstated": 35}
    snapdragon = profiles.device_from_profile("snapdragon-8-gen-3")
    assert snapdragon.npu.name == "Qualcomm Hexagon NPU" and snapdragon.npu.tops == {}
    assert profiles.get("m4").npu.tops() == {"unstated": 38}


def test_phones_carry_sustained_fraction_and_app_limit():
    phone = profiles.device_from_profile("snapdragon-8-gen-2")
    assert phone.sustained_fraction == pytest.approx(0.72)
    assert phone.app_memory_limit_bytes == int(12 * GIB * 0.5)
    assert "Wild Life" in profiles.get("snapdragon-8-gen-2").mobile.sustained_basis
    doc = _valid_doc() | {"mobile": {"app_memory_limit_fraction": 0.5, "basis": "Estimate",
                                     "sustained_fraction": 0.7}}
    with pytest.raises(ValidationError, match="sustained_basis"):
        profiles.Profile.model_validate(doc)


def test_variant_ids_resolve_and_the_base_id_is_the_top_configuration():
    top = profiles.get("m3-max")
    assert top.compute_units == 40 and top.memory_bandwidth_gbps == 400
    low = profiles.get("m3-max-30c")
    assert low.compute_units == 30 and low.memory_bandwidth_gbps == 300
    assert low.peak_tflops["fp32"] == pytest.approx(10.6)
    assert low.variant_of == "m3-max" and low.variant_name == "30-core GPU"
    assert profiles.get("m3-max-40c") == top
    planned = profiles.device_from_profile("m3-max-30c")
    assert planned.variant == "30-core GPU" and planned.profile_id == "m3-max-30c"
    assert planned.memory_bandwidth_gbps == 300
    assert "m4-max-32c" in profiles.variant_ids() and "m4-max-32c" not in profiles.ids()
    assert "m3-max-30c" in profiles.suggest("m3-max-3")


def test_variant_schema_needs_a_top_configuration():
    doc = _valid_doc() | {"compute_units": 40, "variants": [
        {"id": "x-1-30c", "name": "30-core GPU", "gpu_cores": 30, "memory_bandwidth_gbps": 300,
         "peak_tflops": {"fp32": 20}}],
        "sources": _valid_doc()["sources"] | {"variants": ["https://a"]}}
    with pytest.raises(ValidationError, match="top configuration"):
        profiles.Profile.model_validate(doc)
    doc["variants"][0]["id"] = "other-30c"
    with pytest.raises(ValidationError, match="must read"):
        profiles.Profile.model_validate(doc)


@pytest.mark.parametrize("chip,cores,cpu,perf,memory_gib,expected", [
    ("m3-max", 30, None, None, None, "30-core GPU"),
    ("m3-max", 40, None, None, None, "40-core GPU"),
    ("m3-max", None, 14, 10, 36, "30-core GPU"),  # CPU and memory both say 30-core
    ("m3-max", None, None, None, 96, "30-core GPU"),  # 96 GB was sold with 30 cores only
    ("m3-max", None, None, None, 64, "40-core GPU"),
    ("m4-max", None, 14, None, None, "32-core GPU"),
    ("m4-pro", None, 12, 8, 24, "16-core GPU"),
    ("m3-pro", None, 11, 5, None, "14-core GPU"),
    ("m2-ultra", 60, None, None, None, "60-core GPU"),
    ("m3-ultra", None, None, None, 512, "80-core GPU"),
])
def test_choose_variant(chip, cores, cpu, perf, memory_gib, expected):
    memory = int(memory_gib * GIB) if memory_gib else None
    choice = profiles.choose_variant(profiles.get(chip), gpu_cores=cores, cpu_cores=cpu,
                                     performance_cores=perf, memory_bytes=memory)
    assert choice.variant is not None and choice.variant.name == expected


def test_ambiguous_variant_keeps_the_top_figures_and_claims_no_evidence():
    # M1 Max: both GPUs came with the 10-core CPU and 32 or 64 GB: nothing tells them apart.
    choice = profiles.choose_variant(profiles.get("m1-max"), cpu_cores=10, memory_bytes=32 * GIB)
    assert choice.variant is None and "configuration unknown" in choice.note
    assert "chosen by" not in choice.note
    none_read = profiles.choose_variant(profiles.get("m2-max"))
    assert none_read.variant is None and "no core count or memory size" in none_read.note
    odd = profiles.choose_variant(profiles.get("m3-max"), gpu_cores=35)
    assert odd.variant is None and "match no configuration" in odd.note


def test_enrich_picks_the_variant_from_gpu_cores():
    device = probed("Apple M3 Max", 36, vendor="apple", device_class="apple-silicon",
                    compute_units=30)
    (out,), _ = profiles.enrich_devices([device])
    assert out.variant == "30-core GPU" and out.profile_id == "m3-max-30c"
    assert out.memory_bandwidth_gbps == 300 and out.peak_tflops["fp32"] == pytest.approx(10.6)
    assert any("chosen by its GPU core count (30)" in note for note in out.notes)


def test_enrich_fills_links_for_amd_capped_at_the_gpus_present():
    amd = dict(vendor="amd", pci_device_id="0x74a1")
    one = Device(index=0, device_class="datacenter-gpu", name="AMD Instinct MI300X",
                 memory_total_bytes=192 * GIB, source="probe", **amd)
    (out,), _ = profiles.enrich_devices([one])
    assert out.interconnect.gpu_link_kind == "xgmi" and out.interconnect.gpu_link_domain == 1
    eight = [one.model_copy(update={"index": i}) for i in range(8)]
    outs, _ = profiles.enrich_devices(eight)
    assert {d.interconnect.gpu_link_domain for d in outs} == {8}
    assert all(d.gpus_per_node == 8 for d in outs)
    assert any("not read" in note for note in outs[0].notes)


def test_enrich_invents_no_nvlink_but_fills_pcie_from_the_profile():
    (h200,), _ = profiles.enrich_devices([probed("NVIDIA H200", 140.4)])
    assert h200.interconnect is None  # NVML saw no links: nothing invented
    (card,), _ = profiles.enrich_devices([probed("NVIDIA GeForce RTX 4090", 23.99,
                                                 device_class="consumer-gpu")])
    assert card.interconnect.gpu_link_kind == "pcie" and card.interconnect.gpu_link_domain == 1


def test_a_system_cannot_take_fewer_gpus_than_its_reference():
    with pytest.raises(ValidationError, match="below gpus_per_node"):
        profiles.ProfileSystem(name="x", gpus_per_node=8, max_gpus_per_node=4,
                               host_memory_gib=64, basis="b")


def test_desktop_cards_take_four_per_machine_and_datacenter_parts_keep_their_node():
    assert profiles.get("rtx-4090").system.max_gpus_per_node == 4
    h100 = profiles.get("h100-sxm").system
    assert h100.max_gpus_per_node is None and h100.gpus_per_node == 8
    for profile in profiles.load_all():
        system = profile.system
        if profile.device_class.value == "consumer-gpu" and system is not None:
            assert (system.max_gpus_per_node or system.gpus_per_node) >= 4, profile.id


def test_a_profile_device_has_the_family_its_file_states(monkeypatch) -> None:
    """The device carries the profile's family; the efficiency tables read it from the device."""
    from hwadvisor.perfmodel import efficiency
    from hwadvisor.profiles import devices

    device = profiles.device_from_profile("h200-sxm")
    assert device.family == efficiency.device_family(device) == "nvidia-hopper"
    stated = profiles.get("h200-sxm").model_copy(update={"family": "nvidia-blackwell"})
    monkeypatch.setattr(devices, "get", lambda _id: stated)
    planned = profiles.device_from_profile("h200-sxm")
    assert planned.family == efficiency.device_family(planned) == "nvidia-blackwell"
    by_hand = planned.model_copy(update={"source": "probe", "profile_id": None, "family": None})
    assert efficiency.device_family(by_hand) == "nvidia-hopper"  # guessed from Hopper


def test_a_probed_device_leaves_the_probe_with_its_guessed_family() -> None:
    """Matched or not, a probed device's family is guessed from what it carries after the match."""
    (h200, mystery), _ = profiles.enrich_devices([probed("NVIDIA H200", 140.4),
                                                   probed("mystery board", 16)])
    assert h200.profile_id == "h200-sxm" and h200.architecture  # the profile filled it in
    assert h200.family == "nvidia-hopper" == h200.guessed_family()
    assert mystery.profile_id is None and mystery.family == "nvidia-older"


def test_the_soc_part_comes_from_the_profile_where_the_device_is_made() -> None:
    assert profiles.device_from_profile("snapdragon-8-elite").soc_part == "SM8750"
    assert profiles.device_from_profile("h200-sxm").soc_part is None
    assert profiles.device_from_profile("m3-max-30c").soc_part is None


def test_the_report_json_leaves_family_and_soc_part_out_and_a_reader_restores_them() -> None:
    """Byte-identical reports: the facts are excluded; validate --report gets them back."""
    from hwadvisor.models import Report

    planned = profiles.device_from_profile("snapdragon-8-elite")
    text = planned.model_dump_json()
    assert '"family"' not in text and '"soc_part"' not in text
    properties = Report.model_json_schema(mode="serialization")["$defs"]["Device"]["properties"]
    assert "family" not in properties and "soc_part" not in properties
    read = Device.model_validate_json(text)
    assert read.family is None and read.soc_part is None
    assert profiles.restore_facts(read) == planned
    (phone,), _ = profiles.enrich_devices([Device(
        index=0, vendor="qualcomm", device_class="mobile-soc", name="Snapdragon 8 Elite SM8750",
        memory_total_bytes=12 * GIB, source="probe")])
    again = profiles.restore_facts(Device.model_validate_json(phone.model_dump_json()))
    assert (again.family, again.soc_part) == (phone.family, phone.soc_part) == ("mobile", "SM8750")


def test_every_profile_file_states_a_known_family() -> None:
    assert all(p.family in profiles.FAMILIES for p in profiles.load_all())
    # In-process, so the script reads this tree's hwadvisor (not an installed one).
    assert load_script("scripts/profile_families.py").main(["--check"]) == 0
