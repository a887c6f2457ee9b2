"""The Apple Silicon backend on captured sysctl and system_profiler outputs."""

from __future__ import annotations

from pathlib import Path

import pytest

from hwadvisor.models import DeviceClass
from hwadvisor.probe import apple
from hwadvisor.probe.apple import AppleBackend
from hwadvisor.profiles import enrich_devices, match

FIXTURES = Path(__file__).parents[1] / "fixtures" / "apple"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def mac_runner(brand: str | None, memsize: str | None, displays: str | None,
               ncpu: str | None = None, perflevel0: str | None = None,
               displays_text: str | None = None):
    """Replay sysctl keys and system_profiler (JSON and plain); record each argv and timeout."""
    calls: list[tuple[list[str], float]] = []
    by_key = {"machdep.cpu.brand_string": brand, "hw.memsize": memsize, "hw.ncpu": ncpu,
              "hw.perflevel0.physicalcpu": perflevel0}

    def run(argv: list[str], timeout_s: float) -> str | None:
        calls.append((argv, timeout_s))
        if argv[:2] == ["sysctl", "-n"]:
            return by_key.get(argv[2])
        if argv[0] == "system_profiler":
            return displays if "-json" in argv else displays_text
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
    assert chip.variant == enriched.variant == "40-core GPU"


def test_m3_max_30_core_configuration_gets_its_own_bandwidth_and_peaks():
    run = mac_runner(fixture("sysctl-brand-m3-max.txt"), fixture("sysctl-memsize-36g.txt"),
                     fixture("system-profiler-displays-m3-max-30c.json"))
    (chip,) = probe(run).devices
    assert chip.compute_units == 30 and chip.variant == "30-core GPU"
    assert any("chosen by its GPU core count (30)" in note for note in chip.notes)
    (enriched,), _ = enrich_devices([chip])
    assert enriched.profile_id == "m3-max-30c"
    assert enriched.memory_bandwidth_gbps == 300
    assert enriched.peak_tflops["fp32"] == pytest.approx(10.6)
    assert enriched.compute_units == 30


def test_cpu_cores_and_memory_choose_the_configuration_without_gpu_cores():
    # system_profiler gives nothing (both forms); sysctl's CPU counts and RAM say 32-core M4 Max.
    run = mac_runner(fixture("sysctl-brand-m4-max.txt"), fixture("sysctl-memsize-36g.txt"), None,
                     ncpu=fixture("sysctl-ncpu-14.txt"),
                     perflevel0=fixture("sysctl-perflevel0-10.txt"))
    (chip,) = probe(run).devices
    assert chip.compute_units is None and chip.variant == "32-core GPU"
    note = next(n for n in chip.notes if n.startswith("configuration"))
    assert "14 CPU cores" in note and "GPU core" not in note
    (enriched,), _ = enrich_devices([chip])
    assert enriched.memory_bandwidth_gbps == 410 and enriched.compute_units == 32
    assert ["sysctl", "-n", "hw.perflevel0.physicalcpu"] in [argv for argv, _ in run.calls]


def test_plain_text_system_profiler():
    run = mac_runner(fixture("sysctl-brand-m1-pro.txt"), fixture("sysctl-memsize-32g.txt"),
                     "not json", ncpu=fixture("sysctl-ncpu-10.txt"),
                     perflevel0=fixture("sysctl-perflevel0-8.txt"),
                     displays_text=fixture("system-profiler-displays-m1-pro.txt"))
    (chip,) = probe(run).devices
    assert chip.name == "Apple M1 Pro" and chip.compute_units == 14
    assert chip.variant == "14-core GPU"
    assert ["system_profiler", "SPDisplaysDataType"] in [argv for argv, _ in run.calls]
    assert apple.parse_displays_text(fixture("system-profiler-displays-m1-pro.txt")) == (
        "Apple M1 Pro", 14)


def test_configuration_that_nothing_tells_apart_keeps_the_top_figures():
    # Both M1 Max GPUs came with the 10-core CPU and 32 GB: the variant stays unknown.
    run = mac_runner(fixture("sysctl-brand-m1-max.txt"), fixture("sysctl-memsize-32g.txt"), None,
                     ncpu=fixture("sysctl-ncpu-10.txt"),
                     perflevel0=fixture("sysctl-perflevel0-8.txt"))
    (chip,) = probe(run).devices
    assert chip.variant is None
    (enriched,), _ = enrich_devices([chip])
    assert enriched.profile_id == "m1-max" and enriched.peak_tflops["fp32"] == 10.4
    config_notes = [n for n in enriched.notes if n.startswith("configuration")]
    assert len(config_notes) == 1 and "configuration unknown" in config_notes[0]
    assert "chosen by" not in config_notes[0]


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
