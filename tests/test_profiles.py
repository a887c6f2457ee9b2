"""Datasheet profiles: schema, sanity bounds, matching, enrichment and the `profiles` command."""

from __future__ import annotations

import importlib.resources
import json
import re
from pathlib import Path

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from hwadvisor import profiles
from hwadvisor.cli.app import app
from hwadvisor.errors import UserError
from hwadvisor.models import Device, Interconnect, NvidiaDetails, NvLinkInfo

REPO_PROFILES = Path(__file__).resolve().parent.parent / "profiles"
FIXTURE = Path(__file__).resolve().parent / "fixtures" / "nvidia-h200" / "nvidia-smi-q.txt"
GIB = 2**30
REQUIRED_IDS = {
    "h100-sxm", "h100-pcie", "h200-sxm", "b200", "a100-40gb", "a100-80gb", "l40s", "l4",
    "rtx-3090", "rtx-4090", "rtx-5090", "mi250x", "mi300x", "mi325x", "rx-7900-xtx",
    "m1-max", "m2-ultra", "m3-max", "m3-ultra", "m4-max",
    "snapdragon-8-gen-3", "snapdragon-8-elite", "a17-pro", "a18-pro",
}
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
    assert len(files) >= len(REQUIRED_IDS)
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
    # Plausible ranges for 2020-2025 devices: phones 4 GB .. GPUs/Macs 512 GB; 30 GB/s .. 10 TB/s.
    assert 4 <= profile.memory_gib <= 512
    assert 30 <= profile.memory_bandwidth_gbps <= 10_000
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
        "memory_gib": 24, "memory_type": "GDDR6", "memory_bandwidth_gbps": 900,
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
    ("NVIDIA H100 NVL", 93.0, None),
    ("NVIDIA H200 NVL", 140.0, None),
    ("NVIDIA GeForce RTX 4090", 23.99, "rtx-4090"),
    ("NVIDIA GeForce RTX 4090 D", 23.99, None),
    ("NVIDIA GeForce RTX 3090 Ti", 24, None),
    ("AMD Instinct MI300X", 191.5, "mi300x"),
    ("AMD Instinct MI325X", 255.5, "mi325x"),
    ("AMD Radeon RX 7900 XTX", 24, "rx-7900-xtx"),
    ("Apple M3 Max", 36, "m3-max"),
    ("Apple M3 Pro", 36, None),
    ("iPhone16,2", 7.5, "a17-pro"),
    ("iPhone17,1", 7.5, "a18-pro"),
    ("iPhone16,10", 7.5, None),
    ("SM8650", 11.2, "snapdragon-8-gen-3"),
    ("Qualcomm Snapdragon 8 Elite", 11.2, "snapdragon-8-elite"),
    ("Snapdragon 8 Elite Gen 5", 11.2, None),
    ("Tesla T4", 15, None),
])
def test_name_matching(name, memory_gib, expected):
    found = profiles.match(probed(name, memory_gib))
    assert (found.id if found else None) == expected


def test_unknown_device_keeps_its_readings_and_gets_a_hint():
    device = probed("Tesla T4", 15, memory_bandwidth_gbps=320.0, memory_bandwidth_source="probe")
    devices, hints = profiles.enrich_devices([device])
    assert devices[0] == device
    assert devices[0].profile_id is None
    assert len(hints) == 1 and "Tesla T4" in hints[0] and "--device" in hints[0]


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
    # The planned device round-trips through JSON like any probed one.
    assert Device.model_validate_json(device.model_dump_json()) == device


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
    assert {row["id"] for row in data} == {
        "snapdragon-8-gen-3", "snapdragon-8-elite", "a17-pro", "a18-pro"}
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
