"""Host probe: OS, CPU model, cores and RAM through psutil and the standard library.

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


def _cpu_model() -> str | None:
    """CPU brand string: /proc/cpuinfo on Linux, else platform.processor()."""
    cpuinfo = Path("/proc/cpuinfo")
    try:
        if cpuinfo.is_file():
            for line in cpuinfo.read_text(errors="replace").splitlines():
                key, _, value = line.partition(":")
                if key.strip() in ("model name", "Model", "Hardware") and value.strip():
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or None


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
    return HostInfo(
        os=f"{platform.system()} {platform.release()}".strip() or None,
        platform=platform.machine() or None,
        cpu_model=_reading("the CPU model", _cpu_model, notes),
        cpu_cores=_count(cores),
        cpu_threads=_count(threads),
        memory_total_bytes=total,
        memory_available_bytes=available,
        python_version=sys.version.split()[0],
        notes=notes,
    )
