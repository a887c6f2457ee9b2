"""What phones share: RAM reading and the per-app memory limit rule (as data, with sources).

The Android and iOS backends live in android.py and ios.py; both build a mobile-soc Device
whose memory_total_bytes is the phone's RAM (unified memory, shared with the OS and other apps).
The per-app memory limit rule lives with the datasheet profiles (hwadvisor.profiles); the
probe report applies it to the phone found here.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

# The per-app memory rule is hardware data, kept with the profiles (profiles/devices.py);
# the probe applies it to the phone it finds.
from hwadvisor.profiles import (  # noqa: E402
    APP_MEMORY_RULES,
    AppMemoryRule,
    app_memory_limit_bytes,
    app_memory_limit_for,
    mobile_os_of,
)

__all__ = ["APP_MEMORY_RULES", "AppMemoryRule", "app_memory_limit_bytes", "app_memory_limit_for",
           "mobile_os_of"]


FileReader = Callable[[Path], str | None]


def read_file(path: Path) -> str | None:
    """Read a file's text; None when it cannot be read (missing, no permission)."""
    try:
        return path.read_text(errors="replace")
    except OSError:
        return None


def parse_meminfo_total_bytes(text: str | None) -> int | None:
    """MemTotal from /proc/meminfo ('MemTotal:  11718420 kB') in bytes; None when absent."""
    for line in (text or "").splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "MemTotal":
            parts = value.split()
            if parts and parts[0].isdigit():
                unit = parts[1].lower() if len(parts) > 1 else "kb"
                return int(parts[0]) * (1024 if unit == "kb" else 1)
    return None


def psutil_memory_total_bytes() -> int | None:
    """Total RAM through psutil; None when psutil cannot read it on this platform."""
    try:
        import psutil

        return int(psutil.virtual_memory().total)
    except Exception:  # psutil raises assorted errors on unsupported platforms
        return None
