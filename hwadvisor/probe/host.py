"""Host probe: OS, CPU model, cores, SIMD flags, clock and RAM through psutil and the stdlib.

Every reading degrades on its own: an unreadable or odd /proc/meminfo (a locked-down
container, a broken procfs) leaves the memory fields null with a note in HostInfo.notes,
and the commands carry on; psutil raises OSError, or ValueError/KeyError on a file it
cannot parse.
"""

from __future__ import annotations

import platform
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import psutil

from hwadvisor.models import HostInfo

T = TypeVar("T")

# Where Linux states the CPU: module-level so tests point them at recorded files.
CPUINFO = Path("/proc/cpuinfo")
CPUFREQ_MAX = Path("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq")
# The /proc/cpuinfo flags (x86 "flags", Arm "Features") the performance model reads: the SIMD
# and matrix ISA a CPU's matmul kernels can use (perfmodel/constants.py CPU_SIMD). Others are
# left out of the report.
SIMD_FLAGS: tuple[str, ...] = (
    "sse4_2", "avx", "f16c", "fma", "avx2", "avx_vnni", "avx512f", "avx512bw", "avx512vl",
    "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_int8", "amx_bf16",
    "asimd", "asimddp", "i8mm", "sve", "sve2", "bf16",
)


def _cpuinfo_fields() -> dict[str, str]:
    """Return the first processor's /proc/cpuinfo fields (key -> value); empty: none."""
    if not CPUINFO.is_file():
        return {}
    fields: dict[str, str] = {}
    for line in CPUINFO.read_text(errors="replace").splitlines():
        key, sep, value = line.partition(":")
        key = key.strip()
        if not sep or not key:
            continue
        fields.setdefault(key, value.strip())
    return fields


def _cpu_model() -> str | None:
    """CPU brand string: /proc/cpuinfo on Linux, else platform.processor()."""
    try:
        fields = _cpuinfo_fields()
    except OSError:
        fields = {}
    for key in ("model name", "Model", "Hardware"):
        if fields.get(key):
            return fields[key]
    return platform.processor() or None


def _cpu_flags() -> list[str]:
    """Return the SIMD / matrix ISA flags of /proc/cpuinfo that SIMD_FLAGS names, in order."""
    fields = _cpuinfo_fields()
    listed = set((fields.get("flags") or fields.get("Features") or "").split())
    return [flag for flag in SIMD_FLAGS if flag in listed]


def _cpu_clock() -> tuple[float | None, str | None]:
    """(MHz, where it came from): cpufreq's maximum, else /proc/cpuinfo's "cpu MHz".

    cpufreq states the highest clock a core runs at; without it (virtual machines pass no
    cpufreq) "cpu MHz" is what the kernel was told, in a VM usually the nominal (TSC) clock.
    """
    if CPUFREQ_MAX.is_file():
        khz = float(CPUFREQ_MAX.read_text().strip())
        if khz > 0:
            return khz / 1000.0, "cpufreq-max"
    value = _cpuinfo_fields().get("cpu MHz")
    if value:
        mhz = float(value)
        if mhz > 0:
            return mhz, "cpuinfo"
    return None, None


def _reading(what: str, read: Callable[[], T], notes: list[str]) -> T | None:
    """Return read(), or None with a note when the host will not tell (any error)."""
    try:
        return read()
    except Exception as exc:  # noqa: BLE001 - a host reading must never stop a command
        notes.append(f"host: could not read {what} ({type(exc).__name__}: "
                     f"{str(exc).strip()[:120] or 'no detail'}); it is unknown (null)")
        return None


def _count(value: object) -> int | None:
    """Return a positive count, else None (psutil gives None when it cannot tell)."""
    return value if isinstance(value, int) and value > 0 else None


def _memory(notes: list[str]) -> tuple[int | None, int | None]:
    """Return (total, available) bytes of RAM, each None when unreadable or implausible."""
    mem = _reading("the memory size (/proc/meminfo)", psutil.virtual_memory, notes)
    if mem is None:
        return None, None
    total = getattr(mem, "total", None)
    available = getattr(mem, "available", None)
    if not isinstance(total, int) or total <= 0:
        notes.append(f"host: the memory size read as {total!r}; it is unknown (null)")
        return None, None
    if not isinstance(available, int) or not 0 <= available <= total:
        notes.append(f"host: the free memory read as {available!r}; it is unknown (null)")
        available = None
    return total, available


def probe_host() -> HostInfo:
    """Read the host's OS, CPU and memory; a reading that fails is null, with a note."""
    notes: list[str] = []
    total, available = _memory(notes)
    cores = _reading("the physical core count", lambda: psutil.cpu_count(logical=False), notes)
    threads = _reading("the logical CPU count", lambda: psutil.cpu_count(logical=True), notes)
    flags = _reading("the CPU flags (/proc/cpuinfo)", _cpu_flags, notes) or []
    clock, clock_source = _reading("the CPU clock", _cpu_clock, notes) or (None, None)
    return HostInfo(
        os=f"{platform.system()} {platform.release()}".strip() or None,
        platform=platform.machine() or None,
        cpu_model=_reading("the CPU model", _cpu_model, notes),
        cpu_cores=_count(cores),
        cpu_threads=_count(threads),
        cpu_flags=flags,
        cpu_clock_mhz=clock,
        cpu_clock_source=clock_source,
        memory_total_bytes=total,
        memory_available_bytes=available,
        python_version=sys.version.split()[0],
        notes=notes,
    )
