"""iOS backend: the iPhone model identifier (platform.ios_ver, Python >= 3.13) -> its chip.

Python runs on iOS only embedded in an app (PEP 730); there `platform.system()` is "iOS" and
`platform.ios_ver().model` is the identifier ("iPhone16,1"), or just "iPhone" on a simulator.
"""

from __future__ import annotations

import platform
from collections.abc import Callable
from typing import Any

from hwadvisor.models import Device, DeviceClass
from hwadvisor.probe.base import BackendResult, GuardedBackend
from hwadvisor.probe.mobile import psutil_memory_total_bytes
from hwadvisor.probe.presence import not_ios

# Model identifier -> chip. Source: Apple's "Identify your iPhone model" support page
# (https://support.apple.com/en-us/108044) for the model names and the chip each ships with,
# and the identifiers as the devices report them (hw.machine).
IPHONE_CHIPS: dict[str, str] = {
    "iPhone14,2": "A15 Bionic", "iPhone14,3": "A15 Bionic",  # 13 Pro, 13 Pro Max
    "iPhone14,4": "A15 Bionic", "iPhone14,5": "A15 Bionic",  # 13 mini, 13
    "iPhone14,6": "A15 Bionic",  # SE (3rd gen)
    "iPhone14,7": "A15 Bionic", "iPhone14,8": "A15 Bionic",  # 14, 14 Plus
    "iPhone15,2": "A16 Bionic", "iPhone15,3": "A16 Bionic",  # 14 Pro, 14 Pro Max
    "iPhone15,4": "A16 Bionic", "iPhone15,5": "A16 Bionic",  # 15, 15 Plus
    "iPhone16,1": "A17 Pro", "iPhone16,2": "A17 Pro",  # 15 Pro, 15 Pro Max
    "iPhone17,1": "A18 Pro", "iPhone17,2": "A18 Pro",  # 16 Pro, 16 Pro Max
    "iPhone17,3": "A18", "iPhone17,4": "A18",  # 16, 16 Plus
    "iPhone17,5": "A18",  # 16e
    # iPhone 17 family (2025): identifiers as device tables list them (e.g. the public
    # iOS-device lists on GitHub); chips from Apple's product pages. The Air's A19 Pro has a
    # 5-core GPU, the 17 Pro's 6.
    "iPhone18,1": "A19 Pro", "iPhone18,2": "A19 Pro",  # 17 Pro, 17 Pro Max
    "iPhone18,3": "A19",  # 17
    "iPhone18,4": "A19 Pro",  # Air
}

def _ios_ver_default() -> Any:
    # platform.ios_ver exists from Python 3.13 only.
    func = getattr(platform, "ios_ver", None)
    return func() if func is not None else None


def chip_name(identifier: str | None) -> str | None:
    """'iPhone16,1' -> 'Apple A17 Pro'; None for an unknown identifier."""
    chip = IPHONE_CHIPS.get((identifier or "").strip())
    return f"Apple {chip}" if chip is not None else None


class IosBackend(GuardedBackend):
    """iPhones: one mobile-soc device named after the chip of the model identifier."""

    name = "ios"

    def __init__(
        self,
        platform_name: Callable[[], str] = platform.system,
        ios_ver: Callable[[], Any] = _ios_ver_default,
        memory_total: Callable[[], int | None] = psutil_memory_total_bytes,
    ) -> None:
        self.platform_name = platform_name
        self.ios_ver = ios_ver
        self.memory_total = memory_total

    def _probe(self) -> BackendResult:
        """Return the iPhone's SoC on iOS; nothing elsewhere."""
        system = self.platform_name()
        absent = not_ios(system)
        if absent is not None:
            return BackendResult(notes=[absent])
        version = self.ios_ver()
        identifier = getattr(version, "model", None) or None
        notes: list[str] = []
        if getattr(version, "is_simulator", False):
            notes.append("running in the iOS simulator: the host Mac's chip does the work")
        chip = chip_name(identifier)
        if chip is not None:
            # The identifier goes in the name too: profiles list identifiers as match names.
            name = f"{chip} ({identifier})"
        elif identifier:
            name = f"Apple {identifier}"
            notes.append(f"model identifier {identifier} is not in the chip table")
        else:
            name = "Apple iPhone (unknown model)"
            notes.append("platform.ios_ver() gave no model identifier (Python < 3.13?)")
        device = Device(
            index=0,
            vendor="apple",
            device_class=DeviceClass.MOBILE_SOC,
            name=name,
            memory_total_bytes=self.memory_total(),
            unified_memory=True,
            pci_device_id=None,
            source="probe",
            notes=notes,
        )
        return BackendResult(devices=[device])
