"""What phones share: RAM reading and the per-app memory limit rule (as data, with sources).

The Android and iOS backends live in android.py and ios.py; both build a mobile-soc Device
whose memory_total_bytes is the phone's RAM (unified memory, shared with the OS and other apps).
This module owns the per-app memory limit: the profiles (hwadvisor.profiles), the planned
devices (probe/target.py) and the probe report all get it from app_memory_limit_for.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from hwadvisor.models import Device, DeviceClass


@dataclass(frozen=True)
class AppMemoryRule:
    """The share of RAM one app can count on, with why and where it comes from."""

    fraction: float
    basis: str
    sources: tuple[str, ...]


# Per-app memory rules by mobile OS. Neither Apple nor Google publishes a fixed limit, so
# these are estimates; the datasheet profiles (profiles/*.toml [mobile]) use the same figure
# and, when a phone matches one, its fraction wins (see app_memory_limit_bytes).
APP_MEMORY_RULES: dict[str, AppMemoryRule] = {
    "ios": AppMemoryRule(
        fraction=0.5,
        basis=(
            "iOS ends a foreground app past its jetsam limit, which Apple does not publish; "
            "developers measure about 50-60% of RAM with the increased-memory-limit "
            "entitlement, so half of RAM is the planning figure. Read the real headroom on the "
            "device with os_proc_available_memory()."
        ),
        sources=(
            "https://developer.apple.com/documentation/bundleresources/entitlements/com.apple.developer.kernel.increased-memory-limit",
            "https://developer.apple.com/documentation/os/3191911-os_proc_available_memory",
        ),
    ),
    "android": AppMemoryRule(
        fraction=0.5,
        basis=(
            "Android sets no fixed cap on native memory; the low-memory killer (lmkd) ends apps "
            "under pressure, so an app can rely on roughly half of RAM on a flagship phone. "
            "Java heap limits (ActivityManager.getMemoryClass) do not apply to native tensors."
        ),
        sources=(
            "https://developer.android.com/topic/performance/memory-overview",
            "https://source.android.com/docs/core/perf/lmkd",
        ),
    ),
}


def mobile_os_of(device: Device) -> str | None:
    """'ios' or 'android' for a mobile-soc device (Apple phones run iOS); None otherwise."""
    if device.device_class != DeviceClass.MOBILE_SOC.value:
        return None
    return "ios" if device.vendor == "apple" else "android"


def app_memory_limit_for(memory_total_bytes: int | None, mobile_os: str,
                         profile_fraction: float | None = None) -> int | None:
    """Compute the per-app limit for this much RAM: the profile's share, else the OS rule's.

    This is the one place the limit is computed. None when the RAM is unknown.
    """
    if not memory_total_bytes:
        return None
    rule = APP_MEMORY_RULES.get(mobile_os)
    fraction = profile_fraction if profile_fraction is not None else (
        rule.fraction if rule is not None else None)
    return int(memory_total_bytes * fraction) if fraction is not None else None


def app_memory_limit_bytes(device: Device, profile_fraction: float | None = None) -> int | None:
    """Per-app memory limit a phone implies: its RAM times the profile's or the OS rule's share.

    The caller passes the profile's share when a profile matched (hwadvisor.profiles does, as
    it builds or enriches the device); without one the OS rule applies. None for devices that
    are not phones or whose RAM is unknown.
    """
    mobile_os = mobile_os_of(device)
    if mobile_os is None or not device.memory_total_bytes:
        return None
    return app_memory_limit_for(device.memory_total_bytes, mobile_os, profile_fraction)


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
