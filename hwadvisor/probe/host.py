"""Host probe: OS, CPU model, cores and RAM through psutil and the standard library."""

from __future__ import annotations

import platform
import sys
from pathlib import Path

import psutil

from hwadvisor.models import HostInfo


def _cpu_model() -> str | None:
    """CPU brand string: /proc/cpuinfo on Linux, else platform.processor()."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        try:
            for line in cpuinfo.read_text(errors="replace").splitlines():
                key, _, value = line.partition(":")
                if key.strip() in ("model name", "Model", "Hardware") and value.strip():
                    return value.strip()
        except OSError:
            pass
    return platform.processor() or None


def probe_host() -> HostInfo:
    """Read the host's OS, CPU and memory."""
    mem = psutil.virtual_memory()
    return HostInfo(
        os=f"{platform.system()} {platform.release()}".strip() or None,
        platform=platform.machine() or None,
        cpu_model=_cpu_model(),
        cpu_cores=psutil.cpu_count(logical=False),
        cpu_threads=psutil.cpu_count(logical=True),
        memory_total_bytes=int(mem.total),
        memory_available_bytes=int(mem.available),
        python_version=sys.version.split()[0],
    )
