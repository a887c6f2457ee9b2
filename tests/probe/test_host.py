"""The host probe reads the CPU's SIMD flags and clock from /proc/cpuinfo and cpufreq."""

from __future__ import annotations

from pathlib import Path

import pytest

from hwadvisor.probe import host
from hwadvisor.probe.target import cpu_device

RECORDED = Path(__file__).resolve().parents[1] / "fixtures" / "cpuinfo"
# An Arm server's /proc/cpuinfo (Neoverse N1 class: NEON with the dot-product extension).
ARM_CPUINFO = """processor\t: 0
BogoMIPS\t: 243.75
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm \
lrcpc dcpop asimddp ssbs
CPU implementer\t: 0x41
CPU part\t: 0xd0c
"""


@pytest.fixture
def cpuinfo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """Point the probe at a /proc/cpuinfo text and a cpufreq maximum (None: no cpufreq)."""
    def use(text: str, max_khz: str | None = None) -> None:
        info = tmp_path / "cpuinfo"
        info.write_text(text)
        freq = tmp_path / "cpuinfo_max_freq"
        if max_khz is not None:
            freq.write_text(max_khz + "\n")
        monkeypatch.setattr(host, "CPUINFO", info)
        monkeypatch.setattr(host, "CPUFREQ_MAX", freq)
    return use


def test_an_avx2_vm_states_its_flags_and_nominal_clock(cpuinfo) -> None:  # type: ignore[no-untyped-def]
    cpuinfo((RECORDED / "amd-epyc-2core-vm.txt").read_text())
    found = host.probe_host()
    assert found.cpu_model == "AMD EPYC"
    assert found.cpu_flags == ["sse4_2", "avx", "f16c", "fma", "avx2"]
    assert found.cpu_clock_mhz == pytest.approx(2445.424)
    assert found.cpu_clock_source == "cpuinfo"
    assert not [n for n in found.notes if "flags" in n or "clock" in n]


def test_cpufreq_maximum_comes_before_cpu_mhz(cpuinfo) -> None:  # type: ignore[no-untyped-def]
    cpuinfo((RECORDED / "amd-epyc-2core-vm.txt").read_text(), max_khz="3500000")
    found = host.probe_host()
    assert found.cpu_clock_mhz == pytest.approx(3500.0)
    assert found.cpu_clock_source == "cpufreq-max"


def test_arm_features_are_read(cpuinfo) -> None:  # type: ignore[no-untyped-def]
    cpuinfo(ARM_CPUINFO)
    found = host.probe_host()
    assert found.cpu_flags == ["asimd", "asimddp"]
    assert found.cpu_clock_mhz is None and found.cpu_clock_source is None


def test_an_unreadable_clock_is_null_with_a_note(cpuinfo) -> None:  # type: ignore[no-untyped-def]
    cpuinfo("processor\t: 0\ncpu MHz\t\t: fast\nflags\t\t: avx2 fma\n")
    found = host.probe_host()
    assert found.cpu_clock_mhz is None
    assert found.cpu_flags == ["fma", "avx2"]
    assert any("clock" in n and "unknown" in n for n in found.notes), found.notes


def test_the_cpu_device_carries_the_flags_and_clock(cpuinfo) -> None:  # type: ignore[no-untyped-def]
    cpuinfo((RECORDED / "amd-epyc-2core-vm.txt").read_text())
    device = cpu_device(host.probe_host())
    assert device.cpu_flags == ["sse4_2", "avx", "f16c", "fma", "avx2"]
    assert device.cpu_clock_mhz == pytest.approx(2445.424)
    assert "cpu_flags" not in device.model_dump()  # host facts: the report keeps them in host
