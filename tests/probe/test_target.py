"""Resolving the hardware to plan for: --device profiles, the probe, and the CPU fallback."""

from __future__ import annotations

import pytest

from hwadvisor.errors import UserError
from hwadvisor.models import Device, HostInfo, Report
from hwadvisor.probe import target as hardware
from hwadvisor.profiles import restore_facts

GIB = 2**30


def test_resolve_with_a_device_builds_profile_devices_on_the_real_host():
    report = hardware.resolve_target("h200-sxm", count=8)
    assert report.kind == "probe"
    assert report.device_class == "datacenter-gpu"
    assert [d.index for d in report.devices] == list(range(8))
    assert all(d.source == "profile" and d.profile_id == "h200-sxm" for d in report.devices)
    assert report.host.memory_total_bytes and report.host.memory_total_bytes > 0  # real probe
    assert report.host.mobile_app_memory_limit_bytes is None
    assert any("h200-sxm" in note for note in report.notes)
    # A planned report is a valid report: it round-trips through JSON (all but the devices'
    # family and SoC part, which the JSON leaves out and a reader restores from the profile).
    read = Report.model_validate_json(report.model_dump_json())
    assert read.model_dump() == report.model_dump()
    assert [restore_facts(d) for d in read.devices] == report.devices


def test_planned_report_takes_host_memory_and_gpus_per_node_from_the_reference_system():
    report = hardware.resolve_target("h200-sxm", count=8)
    assert report.host.memory_total_bytes == 2048 * GIB  # DGX H200: 2 TB, not this machine's
    assert report.host.memory_available_bytes is None
    assert all(d.gpus_per_node == 8 for d in report.devices)
    assert all(d.interconnect.gpu_link_kind == "nvlink" for d in report.devices)
    assert any("NVIDIA DGX H200" in note and "not this machine" in note for note in report.notes)
    desktop = hardware.resolve_target("rtx-4090")
    assert desktop.host.memory_total_bytes == 64 * GIB
    assert any("an assumption" in note for note in desktop.notes)


def test_resolve_a_variant_id():
    report = hardware.resolve_target("m3-max-30c")
    (device,) = report.devices
    assert device.profile_id == "m3-max-30c" and device.variant == "30-core GPU"
    assert device.memory_bandwidth_gbps == 300 and device.compute_units == 30
    top = hardware.resolve_target("m3-max").devices[0]
    assert top.memory_bandwidth_gbps == 400 and top.compute_units == 40


def test_resolve_an_announced_part_says_so():
    report = hardware.resolve_target("r100")
    assert report.devices[0].status == "announced"
    assert any("announced" in note for note in report.notes)


def test_resolve_for_a_phone_sets_the_per_app_memory_estimate():
    report = hardware.resolve_target("a17-pro")
    assert report.device_class == "mobile-soc"
    limit = report.host.mobile_app_memory_limit_bytes
    assert limit is not None and 0 < limit < report.devices[0].memory_total_bytes
    assert any("estimate" in note for note in report.notes)


def test_resolve_unknown_device_is_a_usage_error():
    with pytest.raises(UserError) as info:
        hardware.resolve_target("rtx4090")
    assert int(info.value.code) == 2 and "rtx-4090" in (info.value.hint or "")


@pytest.mark.parametrize("count", [0, -1, 100_000])
def test_resolve_refuses_bad_counts(count):
    with pytest.raises(UserError):
        hardware.resolve_target("l4", count=count)


def test_resolve_without_a_device_probes(monkeypatch):
    probed = Report(kind="probe", host=HostInfo(cpu_model="x"))
    monkeypatch.setattr("hwadvisor.probe.collect", lambda: probed)
    assert hardware.resolve_target(None) is probed


def test_resolving_a_profile_does_not_import_torch():
    import subprocess
    import sys

    code = ("import sys; from hwadvisor.probe.target import resolve_target; "
            "resolve_target('mi300x', 2); print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_primary_device_is_the_first_device():
    report = hardware.resolve_target("rtx-4090", count=2)
    assert hardware.primary_device(report) == report.devices[0]


@pytest.mark.parametrize("cpu_model,platform,vendor", [
    ("Intel(R) Xeon(R) Platinum 8480+", "x86_64", "intel"),
    ("AMD EPYC 9654 96-Core Processor", "x86_64", "amd"),
    ("AMD Ryzen 9 7950X", "x86_64", "amd"),
    ("Neoverse-V2", "aarch64", "arm"),
    ("Apple M3 Max", "arm64", "arm"),
    (None, None, "unknown"),
])
def test_primary_device_for_a_cpu_only_host(cpu_model, platform, vendor):
    host = HostInfo(cpu_model=cpu_model, platform=platform, cpu_cores=16,
                    memory_total_bytes=64 * GIB)
    device = hardware.primary_device(Report(kind="probe", host=host))
    assert isinstance(device, Device)
    assert device.device_class == "cpu" and device.vendor == vendor
    assert device.name == (cpu_model or "unknown CPU")
    assert device.memory_total_bytes == 64 * GIB
    assert device.memory_bandwidth_gbps is None and device.peak_tflops == {}
    assert device.compute_units == 16 and device.source == "probe"
