"""The Apple Silicon backend on captured sysctl and system_profiler outputs."""

from __future__ import annotations

from pathlib import Path

import pytest

from hwadvisor.models import DeviceClass
from hwadvisor.probe import apple
from hwadvisor.probe.apple import AppleBackend
from hwadvisor.profiles import enrich_devices, match

FIXTURES = Path(__file__).parent / "fixtures" / "apple"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def mac_runner(brand: str | None, memsize: str | None, displays: str | None):
    """Replay sysctl keys and system_profiler; record each argv and its timeout."""
    calls: list[tuple[list[str], float]] = []
    by_key = {"machdep.cpu.brand_string": brand, "hw.memsize": memsize}

    def run(argv: list[str], timeout_s: float) -> str | None:
        calls.append((argv, timeout_s))
        if argv[:2] == ["sysctl", "-n"]:
            return by_key.get(argv[2])
        if argv[0] == "system_profiler":
            return displays
        return None

    run.calls = calls  # type: ignore[attr-defined]
    return run


def probe(runner, system: str = "Darwin"):
    return AppleBackend(runner=runner, platform_name=lambda: system).probe()


def test_m3_max():
    run = mac_runner(fixture("sysctl-brand-m3-max.txt"), fixture("sysctl-memsize-128g.txt"),
                     fixture("system-profiler-displays-m3-max.json"))
    (chip,) = probe(run).devices
    assert chip.name == "Apple M3 Max"
    assert chip.vendor == "apple"
    assert chip.device_class == DeviceClass.APPLE_SILICON.value
    assert chip.unified_memory is True
    assert chip.memory_total_bytes == 137438953472
    assert chip.compute_units == 40
    assert set(chip.formats) == {"fp16", "int8", "bf16"}
    assert chip.memory_bandwidth_gbps is None  # left to the profile
    assert all(timeout > 0 for _, timeout in run.calls)
    assert ["system_profiler", "SPDisplaysDataType", "-json"] in [argv for argv, _ in run.calls]
    (enriched,), _ = enrich_devices([chip])
    assert enriched.profile_id == "m3-max"
    assert enriched.memory_bandwidth_gbps == 400


def test_early_brand_string_uses_gpu_model_without_prefix():
    run = mac_runner(fixture("sysctl-brand-early.txt"), fixture("sysctl-memsize-16g.txt"),
                     fixture("system-profiler-displays-m1-max-old.json"))
    (chip,) = probe(run).devices
    assert chip.name == "Apple M1 Max"
    assert chip.compute_units == 32
    assert "bf16" not in chip.formats and chip.formats == ["fp16", "int8"]
    assert match(chip).id == "m1-max"


def test_early_brand_string_without_profiler_is_unknown_chip_not_failure():
    run = mac_runner(fixture("sysctl-brand-early.txt"), fixture("sysctl-memsize-16g.txt"), None)
    (chip,) = probe(run).devices
    assert chip.name == apple.UNKNOWN_CHIP_NAME
    assert chip.device_class == DeviceClass.APPLE_SILICON.value
    assert chip.memory_total_bytes == 17179869184
    assert chip.compute_units is None
    assert chip.notes


def test_intel_mac_has_no_apple_gpu():
    run = mac_runner(fixture("sysctl-brand-intel.txt"), fixture("sysctl-memsize-16g.txt"),
                     fixture("system-profiler-displays-intel.json"))
    result = probe(run)
    assert result.devices == [] and "Intel Mac" in result.notes[0]


def test_intel_gpu_list_gives_no_apple_model():
    assert apple.parse_displays(fixture("system-profiler-displays-intel.json")) == (None, None)


def test_not_darwin_runs_nothing():
    run = mac_runner("Apple M3 Max", "1", None)
    result = probe(run, system="Linux")
    assert result.devices == [] and run.calls == []


@pytest.mark.parametrize("garbage", [None, "", "garbage", "{]", '{"SPDisplaysDataType": 3}'])
def test_garbage_and_missing_tools(garbage):
    result = probe(mac_runner(garbage, garbage, garbage))
    assert result.devices == []
    assert result.notes


def test_garbage_memsize_is_none():
    run = mac_runner("Apple M2 Pro", "lots", "not json")
    (chip,) = probe(run).devices
    assert chip.name == "Apple M2 Pro" and chip.memory_total_bytes is None
    assert "bf16" in chip.formats


def test_runner_that_raises_is_contained():
    def broken(argv, timeout_s):
        raise OSError("boom")

    result = probe(broken)
    assert result.devices == [] and "probe failed" in result.notes[0]


@pytest.mark.parametrize(("text", "expected"), [
    ("Apple M3 Max", (3, "Apple M3 Max")), ("M1 Max", (1, "Apple M1 Max")),
    ("Apple M4", (4, "Apple M4")), ("Apple M2 ULTRA", (2, "Apple M2 Ultra")),
    ("AMD Radeon Pro 5500M", None), ("Apple processor", None), (None, None),
])
def test_parse_chip(text, expected):
    assert apple.parse_chip(text) == expected
