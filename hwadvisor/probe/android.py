"""Android backend: the SoC from getprop, else from /proc/cpuinfo's CPU cores.

`getprop` (one call, the full property dump) names the SoC on Android 12+ (ro.soc.model
"SM8650", ro.soc.manufacturer "QTI"); older releases give ro.board.platform ("pineapple").
Where getprop cannot run (a sandbox), recent kernels print no `Hardware` line in
/proc/cpuinfo, so the SoC is told from its cores' implementer and part numbers. The cpuinfo
route only runs where Android itself is detected, so a Linux ARM server or a Snapdragon X laptop
is never taken for a phone.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hwadvisor.models import Device, DeviceClass
from hwadvisor.probe.base import BackendResult, GuardedBackend
from hwadvisor.probe.mobile import (
    FileReader,
    parse_meminfo_total_bytes,
    psutil_memory_total_bytes,
    read_file,
)
from hwadvisor.probe.presence import NOT_ANDROID, android_ver, running_on_android
from hwadvisor.probe.runcmd import Runner, run_command

GETPROP_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class Soc:
    """A phone SoC: marketing name (as the profiles name it), vendor and codename."""

    name: str
    vendor: str
    platform: str | None = None


# Qualcomm part numbers -> product. Sources: Qualcomm product pages (each names its SM part)
# and the board-platform codenames in the kernel device trees (arch/arm64/boot/dts/qcom:
# sm8250 "kona", sm8450 "taro", sm8550 "kalama", sm8650 "pineapple", sm8750 "sun").
SOC_MODELS: dict[str, Soc] = {
    "SM8250": Soc("Qualcomm Snapdragon 865", "qualcomm", "kona"),
    "SM8450": Soc("Qualcomm Snapdragon 8 Gen 1", "qualcomm", "taro"),
    "SM8475": Soc("Qualcomm Snapdragon 8+ Gen 1", "qualcomm", "cape"),
    "SM8550": Soc("Qualcomm Snapdragon 8 Gen 2", "qualcomm", "kalama"),
    "SM8650": Soc("Qualcomm Snapdragon 8 Gen 3", "qualcomm", "pineapple"),
    "SM8750": Soc("Qualcomm Snapdragon 8 Elite", "qualcomm", "sun"),
    "SM8850": Soc("Qualcomm Snapdragon 8 Elite Gen 5", "qualcomm", "canoe"),
}
PLATFORM_TO_MODEL: dict[str, str] = {
    soc.platform: model for model, soc in SOC_MODELS.items() if soc.platform is not None
}

# ro.soc.manufacturer values -> vendor key ("QTI" = Qualcomm Technologies, Inc.).
MANUFACTURER_VENDORS: dict[str, str] = {
    "qti": "qualcomm", "qualcomm": "qualcomm", "mediatek": "mediatek", "google": "google",
    "samsung": "samsung",
}
VENDOR_DISPLAY: dict[str, str] = {
    "qualcomm": "Qualcomm", "mediatek": "MediaTek", "google": "Google", "samsung": "Samsung",
}

# CPU implementer codes in /proc/cpuinfo (Arm ARM, MIDR_EL1.Implementer).
IMPLEMENTER_ARM = 0x41
IMPLEMENTER_QUALCOMM = 0x51


@dataclass(frozen=True)
class CoreSignature:
    """A SoC's cores as (implementer, part) -> count, and how sure the mapping is."""

    model: str
    cores: tuple[tuple[tuple[int, int], int], ...]
    certain: bool
    source: str


# Core mixes -> SoC. Arm part numbers from the Cortex technical reference manuals (MIDR
# PartNum): 0xd46 A510, 0xd47 A710, 0xd4d A715, 0xd4e X3, 0xd80 A520, 0xd81 A720, 0xd82 X4.
CPU_SIGNATURES: tuple[CoreSignature, ...] = (
    CoreSignature(
        "SM8650",
        (((IMPLEMENTER_ARM, 0xD82), 1), ((IMPLEMENTER_ARM, 0xD81), 5),
         ((IMPLEMENTER_ARM, 0xD80), 2)),
        certain=True,
        source="1x Cortex-X4 + 5x Cortex-A720 + 2x Cortex-A520 (Qualcomm; Xiaomi 14 cpuinfo in "
               "https://github.com/hrw/arm-socs-table/issues/98)",
    ),
    CoreSignature(
        "SM8550",
        (((IMPLEMENTER_ARM, 0xD4E), 1), ((IMPLEMENTER_ARM, 0xD4D), 2),
         ((IMPLEMENTER_ARM, 0xD47), 2), ((IMPLEMENTER_ARM, 0xD46), 3)),
        certain=True,
        source="1x Cortex-X3 + 2x A715 + 2x A710 + 3x A510 (Qualcomm 8 Gen 2 product brief)",
    ),
    # Oryon cores report implementer 0x51 part 0x001 (Galaxy S25+ cpuinfo in
    # https://github.com/hrw/arm-socs-table/issues/115). The laptop Snapdragon X Elite reports
    # the same part ("no distinction between Oryon-1 and Oryon-2, both are partid 1",
    # https://github.com/FEX-Emu/FEX/pull/5426), so this is only trusted on Android: uncertain.
    CoreSignature(
        "SM8750",
        (((IMPLEMENTER_QUALCOMM, 0x001), 8),),
        certain=False,
        source="8x Qualcomm Oryon (implementer 0x51, part 0x001)",
    ),
    # Oryon V3 reports part 0x002 (OnePlus 15 with ro.soc.model SM8850 in
    # https://github.com/pytorch/cpuinfo/pull/357); the X2 Elite laptop shares it: uncertain.
    CoreSignature(
        "SM8850",
        (((IMPLEMENTER_QUALCOMM, 0x002), 8),),
        certain=False,
        source="8x Qualcomm Oryon V3 (implementer 0x51, part 0x002)",
    ),
)

_PROP_LINE = re.compile(r"^\[([^\]]+)\]:\s*\[(.*)\]\s*$")
_SM_MODEL = re.compile(r"\b(SM\d{4})\b", re.IGNORECASE)


def parse_getprop(text: str | None) -> dict[str, str]:
    """Parse `getprop`'s dump ('[ro.soc.model]: [SM8650]' per line) into a dict."""
    props: dict[str, str] = {}
    for line in (text or "").splitlines():
        found = _PROP_LINE.match(line.strip())
        if found and found.group(2).strip():
            props[found.group(1)] = found.group(2).strip()
    return props


def parse_cpuinfo_cores(text: str | None) -> Counter[tuple[int, int]]:
    """Count (implementer, part) over the processors listed in /proc/cpuinfo."""
    cores: Counter[tuple[int, int]] = Counter()
    implementer: int | None = None
    for line in (text or "").splitlines():
        key, _, value = line.partition(":")
        key, value = key.strip(), value.strip()
        try:
            if key == "CPU implementer":
                implementer = int(value, 16)
            elif key == "CPU part" and implementer is not None:
                cores[(implementer, int(value, 16))] += 1
                implementer = None
        except ValueError:
            implementer = None
    return cores


def cpuinfo_hardware(text: str | None) -> str | None:
    """Return the `Hardware` line older kernels print ('Qualcomm Technologies, Inc SM8250')."""
    for line in (text or "").splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "Hardware" and value.strip():
            return value.strip()
    return None


def soc_from_cores(cores: Counter[tuple[int, int]]) -> CoreSignature | None:
    """Find the SoC whose core mix is exactly this one; None when no signature matches."""
    for signature in CPU_SIGNATURES:
        if Counter(dict(signature.cores)) == cores:
            return signature
    return None


def soc_device(model: str | None, manufacturer: str | None, platform_name: str | None,
               memory_total_bytes: int | None, notes: list[str]) -> Device:
    """Build the mobile-soc Device from what identifies the SoC (model id, maker, codename)."""
    if model is None and platform_name is not None:
        model = PLATFORM_TO_MODEL.get(platform_name.lower())
    model = model.upper() if model and _SM_MODEL.fullmatch(model) else model
    soc = SOC_MODELS.get(model or "")
    vendor = MANUFACTURER_VENDORS.get((manufacturer or "").strip().lower())
    if soc is not None:
        # Model id in the name too: the profile matcher reads names ("SM8650" is a match name).
        name, vendor = f"{soc.name} ({model})", soc.vendor
    elif model:
        vendor = vendor or ("qualcomm" if model.upper().startswith("SM") else None)
        name = f"{VENDOR_DISPLAY.get(vendor or '', manufacturer or '')} {model}".strip()
        notes.append(f"SoC {model} is not in the SoC table; profile figures may be missing")
    else:
        name = "Android SoC (unknown)"
        notes.append("the SoC could not be identified")
    return Device(
        index=0,
        vendor=vendor or "unknown",
        device_class=DeviceClass.MOBILE_SOC,
        name=name,
        memory_total_bytes=memory_total_bytes,
        unified_memory=True,
        pci_device_id=None,
        source="probe",
        notes=notes,
    )


class AndroidBackend(GuardedBackend):
    """Android phones: one mobile-soc device, identified by getprop or by the CPU cores."""

    name = "android"

    def __init__(
        self,
        runner: Runner = run_command,
        reader: FileReader = read_file,
        is_android: Callable[[], bool] = running_on_android,
        android_ver: Callable[[], Any] = android_ver,
        memory_total: Callable[[], int | None] = psutil_memory_total_bytes,
        proc_root: Path = Path("/proc"),
    ) -> None:
        self.runner = runner
        self.reader = reader
        self.is_android = is_android
        self.android_ver = android_ver
        self.memory_total = memory_total
        self.proc_root = proc_root

    def _memory(self) -> int | None:
        return (parse_meminfo_total_bytes(self.reader(self.proc_root / "meminfo"))
                or self.memory_total())

    def _probe(self) -> BackendResult:
        """Return the phone's SoC on Android; nothing elsewhere."""
        props = parse_getprop(self.runner(["getprop"], GETPROP_TIMEOUT_S))
        notes: list[str] = []
        if props.get("ro.soc.model") or props.get("ro.board.platform"):
            notes.append("SoC read through getprop")
            device = soc_device(props.get("ro.soc.model"), props.get("ro.soc.manufacturer"),
                                props.get("ro.board.platform"), self._memory(), notes)
            return BackendResult(devices=[device])
        version = self.android_ver()
        on_android = self.is_android() or bool(getattr(version, "release", ""))
        if not on_android:
            return BackendResult(notes=[NOT_ANDROID])
        cpuinfo = self.reader(self.proc_root / "cpuinfo")
        hardware = cpuinfo_hardware(cpuinfo)
        sm_model = _SM_MODEL.search(hardware or "")
        if sm_model is not None:
            notes.append(f"SoC read from /proc/cpuinfo Hardware line ({hardware})")
            device = soc_device(sm_model.group(1), "qualcomm", None, self._memory(), notes)
            return BackendResult(devices=[device])
        signature = soc_from_cores(parse_cpuinfo_cores(cpuinfo))
        if signature is not None:
            sure = "" if signature.certain else " (uncertain: other SoCs share these cores)"
            notes.append(f"SoC inferred from CPU cores: {signature.source}{sure}")
            device = soc_device(signature.model, "qualcomm", None, self._memory(), notes)
            return BackendResult(devices=[device])
        notes.append("getprop unavailable and the CPU cores match no known SoC")
        device = soc_device(None, None, None, self._memory(), notes)
        return BackendResult(devices=[device])
