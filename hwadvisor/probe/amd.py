"""AMD ROCm backend: amdsmi library, amd-smi, rocm-smi (JSON, CSV or text), sysfs and torch.

Sources are read in that order and merged field by field until each GPU is known. Output
formats vary across ROCm releases (a series name may be a raw PCI id, a WARNING line may
precede the JSON, amd-smi >= 6.4 nests its list under "gpu_data", old rocm-smi has no --json),
so every parser takes what it can and leaves the rest None. Tables below are data, each with
its source.
"""

from __future__ import annotations

import csv
import importlib
import json
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from hwadvisor.models import Device, DeviceClass
from hwadvisor.probe.base import BackendResult
from hwadvisor.probe.runcmd import Runner, run_command

AMD_PCI_VENDOR_ID = "0x1002"
MIB = 2**20
CLI_TIMEOUT_S = 15.0
# An integrated Radeon (a Ryzen laptop's APU) shows up in every source with a small VRAM
# carve-out (512 MiB is the common BIOS default); advice for a GPU class would mislead there,
# so a GPU with less VRAM than this is skipped with a note and the host stays "cpu".
MIN_ACCELERATOR_VRAM_BYTES = 2 * 2**30


@dataclass(frozen=True)
class GfxTarget:
    """What a gfx target implies: architecture and the formats its matrix cores run."""

    architecture: str
    formats: tuple[str, ...]


# gfx target -> architecture and native matrix formats. Sources: ROCm "GPU architecture
# specifications" (https://rocm.docs.amd.com/en/latest/reference/gpu-arch-specs.html) and
# "Data types and precision support" (https://rocm.docs.amd.com/en/latest/reference/precision-support.html):
# CDNA2 MFMA runs bf16/fp16/int8; CDNA3 adds fp8 (FNUZ); CDNA4 (MI350) adds fp6/fp4;
# RDNA3 WMMA runs bf16/fp16/int8.
GFX_TARGETS: dict[str, GfxTarget] = {
    "gfx908": GfxTarget("CDNA", ("bf16", "fp16", "int8")),  # MI100
    "gfx90a": GfxTarget("CDNA2", ("bf16", "fp16", "int8")),  # MI200
    "gfx942": GfxTarget("CDNA3", ("bf16", "fp16", "int8", "fp8")),  # MI300
    "gfx950": GfxTarget("CDNA4", ("bf16", "fp16", "int8", "fp8", "fp4")),  # MI350
    "gfx1100": GfxTarget("RDNA3", ("bf16", "fp16", "int8")),  # RX 7900 XT/XTX
    "gfx1101": GfxTarget("RDNA3", ("bf16", "fp16", "int8")),  # RX 7800/7700
    "gfx1102": GfxTarget("RDNA3", ("bf16", "fp16", "int8")),  # RX 7600
}

# rocm-smi prints "GFX Version" by gluing KFD's major/minor/stepping as decimals, so gfx90a
# (stepping 10) reads "gfx9010" (MI250X output in https://github.com/ROCm/rocm_smi_lib/issues/159).
GFX_ALIASES: dict[str, str] = {"gfx9010": "gfx90a", "gfx9012": "gfx90c"}


@dataclass(frozen=True)
class ChipName:
    """One product a PCI device id may be, with the readings that tell it from its siblings."""

    name: str | None  # None: the id names a family, not one product (e.g. an SR-IOV VF id)
    memory_gib: float | None = None
    compute_units: int | None = None


@dataclass(frozen=True)
class KnownChip:
    """A PCI device id's product(s), gfx target and class; first name is the default."""

    names: tuple[ChipName, ...]
    gfx_target: str
    device_class: DeviceClass
    note: str | None = None


# MI250X / MI250 carry two graphics compute dies; ROCm shows each as its own GPU.
_MI200_GCD_NOTE = (
    "MI250X/MI250 is two GCDs in one package; ROCm shows each GCD as its own GPU with half the "
    "package's memory, compute units, bandwidth and peaks. The profile's figures are per GCD"
)
_DC = DeviceClass.DATACENTER_GPU
_CONSUMER = DeviceClass.CONSUMER_GPU

# PCI device ids (vendor 0x1002) -> product. Sources: the PCI ID repository
# (https://pci-ids.ucw.cz/read/PC/1002, pciutils/pciids pci.ids: 74a0 MI300A, 74a1 MI300X,
# 74a2 MI308X, 74a5 MI325X, 74a9 and 74bd MI300X HF, 74b5 MI300X VF, 74b9 MI325X VF, 75a0
# MI350X, 75a3 MI355X, 740f MI210, 7448 W7900, 744c RX 7900 XT/XTX/GRE/7900M) and the amdgpu
# driver's pciidlist (drivers/gpu/drm/amd/amdgpu/amdgpu_drv.c lists 0x7410 as CHIP_ALDEBARAN,
# an MI200-family id pci.ids does not name). Ids shared by several products list each with the
# memory size or CU count that tells them apart.
KNOWN_DEVICE_IDS: dict[str, KnownChip] = {
    "0x738c": KnownChip((ChipName("AMD Instinct MI100"),), "gfx908", _DC),
    "0x738e": KnownChip((ChipName("AMD Instinct MI100"),), "gfx908", _DC),
    "0x7408": KnownChip((ChipName("AMD Instinct MI250X"),), "gfx90a", _DC, _MI200_GCD_NOTE),
    "0x740c": KnownChip(
        (ChipName("AMD Instinct MI250X", 64.0, 110), ChipName("AMD Instinct MI250", 64.0, 104)),
        "gfx90a", _DC, _MI200_GCD_NOTE,
    ),
    "0x740f": KnownChip((ChipName("AMD Instinct MI210"),), "gfx90a", _DC),
    "0x7410": KnownChip((ChipName(None),), "gfx90a", _DC),  # Aldebaran (MI200 family)
    "0x74a0": KnownChip((ChipName("AMD Instinct MI300A"),), "gfx942", _DC),
    "0x74a1": KnownChip((ChipName("AMD Instinct MI300X"),), "gfx942", _DC),
    "0x74a2": KnownChip((ChipName("AMD Instinct MI308X"),), "gfx942", _DC),
    "0x74a5": KnownChip((ChipName("AMD Instinct MI325X"),), "gfx942", _DC),
    "0x74a9": KnownChip((ChipName("AMD Instinct MI300X HF"),), "gfx942", _DC),
    "0x74b5": KnownChip((ChipName("AMD Instinct MI300X VF"),), "gfx942", _DC),
    "0x74b9": KnownChip((ChipName("AMD Instinct MI325X VF"),), "gfx942", _DC),
    "0x74bd": KnownChip((ChipName("AMD Instinct MI300X HF"),), "gfx942", _DC),
    "0x75a0": KnownChip((ChipName("AMD Instinct MI350X"),), "gfx950", _DC),
    "0x75a3": KnownChip((ChipName("AMD Instinct MI355X"),), "gfx950", _DC),
    "0x7448": KnownChip((ChipName("AMD Radeon PRO W7900"),), "gfx1100", _CONSUMER),
    "0x744a": KnownChip((ChipName("AMD Radeon PRO W7900 Dual Slot"),), "gfx1100", _CONSUMER),
    "0x7449": KnownChip((ChipName("AMD Radeon PRO W7800 48GB"),), "gfx1100", _CONSUMER),
    "0x745e": KnownChip((ChipName("AMD Radeon PRO W7800"),), "gfx1100", _CONSUMER),
    "0x744c": KnownChip(
        (ChipName("AMD Radeon RX 7900 XTX", 24.0), ChipName("AMD Radeon RX 7900 XT", 20.0),
         ChipName("AMD Radeon RX 7900 GRE", 16.0)),
        "gfx1100", _CONSUMER,
    ),
}

# Series strings that name no product (amd-smi's market_name on some releases, an APU's
# "AMD Radeon Graphics"): the device-id table or board name is used instead.
GENERIC_NAMES: frozenset[str] = frozenset({"", "n/a", "amd radeon graphics", "unknown"})

# Device class by product name (first match wins): Instinct and MI-series are datacenter
# accelerators; Radeon (incl. Radeon Pro workstation cards) is the consumer class, as for
# NVIDIA's workstation line (see nvidia.py's NAME_CLASS_RULES for why).
NAME_CLASS_RULES: tuple[tuple[str, DeviceClass], ...] = (
    (r"\bInstinct\b", DeviceClass.DATACENTER_GPU),
    (r"\bMI\d{2,3}[A-Z]?\b", DeviceClass.DATACENTER_GPU),
    (r"\bRadeon\b", DeviceClass.CONSUMER_GPU),
)
# When the name says nothing: CDNA is datacenter-only, everything else consumer.
ARCH_CLASSES: dict[str, DeviceClass] = {
    "CDNA": DeviceClass.DATACENTER_GPU, "CDNA2": DeviceClass.DATACENTER_GPU,
    "CDNA3": DeviceClass.DATACENTER_GPU, "CDNA4": DeviceClass.DATACENTER_GPU,
}
# Instinct-only gfx targets (ROCm GPU architecture specifications): MI100 gfx908, MI200
# gfx90a, MI300 gfx940/gfx941 (early) and gfx942, MI350 gfx950.
DATACENTER_GFX: frozenset[str] = frozenset({"gfx908", "gfx90a", "gfx940", "gfx941", "gfx942",
                                            "gfx950"})
# No Radeon card has more than 48 GB (Radeon PRO W7900); an unnamed AMD GPU with more memory
# than this, or with HBM and at least 32 GB, is an Instinct accelerator.
CONSUMER_MAX_MEMORY_GIB = 48.0
HBM_DATACENTER_MIN_GIB = 32.0

# A model guess when neither a name nor a known id was read, from gfx target and memory size
# (datasheets: MI300X 192 GB, MI325X 256 GB, MI300A 128 GB unified; all gfx942). Sizes shared
# by several products (gfx90a 64 GB: MI210 or one MI250/MI250X GCD) make no guess.
MODEL_GUESSES: tuple[tuple[str, float, str], ...] = (
    ("gfx942", 192.0, "AMD Instinct MI300X"),
    ("gfx942", 256.0, "AMD Instinct MI325X"),
    ("gfx942", 128.0, "AMD Instinct MI300A"),
)

_HEX_ID = re.compile(r"^(0x)?[0-9a-fA-F]{1,4}$")
_GFX = re.compile(r"gfx[0-9a-f]+", re.IGNORECASE)
_BDF = re.compile(r"^(?:([0-9a-fA-F]{4,8}):)?([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])$")

Importer = Callable[[str], ModuleType]


# --- normalising -------------------------------------------------------------------------


def normalize_device_id(value: Any) -> str | None:
    """'0x74A1', '74a1' or 29857 -> '0x74a1'; None for anything else."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return f"0x{value:04x}" if 0 <= value <= 0xFFFF else None
    text = str(value).strip()
    if not _HEX_ID.match(text):
        return None
    return f"0x{int(text, 16):04x}"


def normalize_bus_id(value: Any) -> str | None:
    """'0000:0C:00.0', '0c:00.0' or '00000000:0c:00.0' -> '0000:0c:00.0'; None otherwise."""
    if not isinstance(value, str):
        return None
    found = _BDF.match(value.strip())
    if found is None:
        return None
    domain, bus, device, function = found.groups()
    return f"{int(domain or '0', 16):04x}:{bus.lower()}:{device.lower()}.{function}"


def normalize_gfx_target(value: Any) -> str | None:
    """'gfx942:sramecc+:xnack-' -> 'gfx942'; rocm-smi's 'gfx9010' -> 'gfx90a'; else None."""
    if not isinstance(value, str):
        return None
    found = _GFX.search(value)
    if found is None:
        return None
    target = found.group(0).lower()
    return GFX_ALIASES.get(target, target)


def gfx_from_kfd_version(version: int | None) -> str | None:
    """KFD's gfx_target_version (major*10000 + minor*100 + stepping) -> 'gfx90a' style name."""
    if not version or version <= 0:
        return None
    major, minor, stepping = version // 10000, version // 100 % 100, version % 100
    # The gfx name writes minor and stepping as one hex digit each (90010 -> gfx90a).
    return f"gfx{major}{minor:x}{stepping:x}"


def _is_generic(name: str | None) -> bool:
    if name is None:
        return True
    return name.strip().lower() in GENERIC_NAMES or bool(_HEX_ID.match(name.strip()))


def clean_product_name(raw: str | None) -> str | None:
    """Normalise a series string: 'Arcturus GL-XL [AMD Instinct MI100]' -> 'AMD Instinct MI100'.

    Returns None when the string names no product (empty, 'N/A', a raw id like '0x74a1').
    """
    if raw is None or _is_generic(raw):
        return None
    text = raw.strip()
    bracket = re.search(r"\[([^\]]+)\]", text)
    if bracket and not bracket.group(1).upper().startswith("AMD/ATI"):
        text = bracket.group(1).strip()  # lspci style 'Codename [Product]'
    text = re.sub(r"\bINSTINCT\b", "Instinct", text)
    text = re.sub(r"\bRADEON\b", "Radeon", text)
    if not text.upper().startswith("AMD"):
        text = f"AMD {text}"
    return " ".join(text.split())


def _names_a_product(name: str | None) -> bool:
    """Whether a cleaned series names one product ('AMD Instinct MI300X'), not a family."""
    if name is None:
        return False
    if "/" in name:
        return False  # 'Radeon RX 7900 XT/7900 XTX/7900 GRE': a list of products
    # A family-only series ('AMD Instinct MI200 (MCM) OAM LC MBA HPE C2') names no one model.
    return not re.search(r"\bMI\d00\b\s*\(", name)


def classify_device(name: str, architecture: str | None) -> DeviceClass:
    """datacenter-gpu for Instinct / MI-series / CDNA, consumer-gpu for Radeon and the rest."""
    for pattern, device_class in NAME_CLASS_RULES:
        if re.search(pattern, name, flags=re.IGNORECASE):
            return device_class
    if architecture is not None and architecture in ARCH_CLASSES:
        return ARCH_CLASSES[architecture]
    return DeviceClass.CONSUMER_GPU


@dataclass
class AmdReading:
    """What one source read about one GPU; None where it could not tell."""

    series: str | None = None
    device_id: str | None = None
    gfx_target: str | None = None
    memory_total_bytes: int | None = None
    memory_type: str | None = None
    compute_units: int | None = None
    bus_id: str | None = None
    source: str = ""
    # Which source gave each field, once readings are merged ('memory': 'amd-smi').
    origins: dict[str, str] = field(default_factory=dict)

    def has_data(self) -> bool:
        """Whether the source read anything at all about this GPU."""
        return any(getattr(self, name) is not None for name in MERGED_FIELDS)

    def is_complete(self) -> bool:
        """Whether another source could add nothing that decides the model or its class."""
        return (_names_a_product(clean_product_name(self.series)) and self.device_id is not None
                and self.gfx_target is not None and self.memory_total_bytes is not None)


MERGED_FIELDS: tuple[str, ...] = (
    "series", "device_id", "gfx_target", "memory_total_bytes", "memory_type", "compute_units",
    "bus_id",
)
FIELD_LABELS: dict[str, str] = {
    "series": "name", "device_id": "device id", "gfx_target": "gfx target",
    "memory_total_bytes": "memory", "memory_type": "memory type", "compute_units": "CUs",
    "bus_id": "bus id",
}


def _better_series(current: str | None, other: str | None) -> bool:
    """Whether `other` names the product better than `current` (a product over a family)."""
    if other is None or _is_generic(other):
        return False
    if current is None or _is_generic(current):
        return True
    return (not _names_a_product(clean_product_name(current))
            and _names_a_product(clean_product_name(other)))


def merge_into(base: AmdReading, other: AmdReading) -> AmdReading:
    """Fill base's gaps from another source's reading of the same GPU, field by field."""
    for name in MERGED_FIELDS:
        mine, theirs = getattr(base, name), getattr(other, name)
        take = _better_series(mine, theirs) if name == "series" else (
            mine is None and theirs is not None)
        if take:
            setattr(base, name, theirs)
            base.origins[name] = other.source
        elif mine is not None and name not in base.origins:
            base.origins[name] = base.source
    return base


def _pair(readings: list[AmdReading], others: list[AmdReading]) -> list[tuple[int, int]] | None:
    """Pair two sources' GPUs: by PCI bus id when both read it, else by order if counts agree."""
    mine = [r.bus_id for r in readings]
    theirs = [r.bus_id for r in others]
    if all(mine) and all(theirs):
        index = {bus: j for j, bus in enumerate(theirs)}
        return [(i, index[bus]) for i, bus in enumerate(mine) if bus in index]
    if len(readings) == len(others):
        return [(i, i) for i in range(len(readings))]
    return None


def merge_sources(sources: list[list[AmdReading]]) -> tuple[list[AmdReading], list[str]]:
    """Merge every source's readings field by field, the first source's GPU list leading."""
    notes: list[str] = []
    filled = [readings for readings in sources if readings]
    if not filled:
        return [], notes
    merged = [merge_into(AmdReading(source=r.source), r) for r in filled[0]]
    for other in filled[1:]:
        pairs = _pair(merged, other)
        if pairs is None:
            notes.append(f"amd: {other[0].source} sees {len(other)} GPU(s), {merged[0].source} "
                         f"{len(merged)}, and no bus ids pair them; its readings are not merged")
            continue
        for i, j in pairs:
            merge_into(merged[i], other[j])
    return merged, notes


@dataclass
class Identity:
    """The model a reading is taken to be, how sure that is, and why."""

    name: str
    guessed: bool
    device_class: DeviceClass
    notes: list[str]


def _pick_chip_name(chip: KnownChip, reading: AmdReading) -> tuple[ChipName, str | None]:
    """Pick among the products sharing a device id by the readings that tell them apart.

    Returns the product and the evidence used; evidence None means nothing told them apart
    and the default product is a guess. Only readings that were actually taken are named.
    """
    named = [c for c in chip.names if c.name is not None]
    if len(named) <= 1:
        return chip.names[0], "device id"
    if reading.compute_units is not None and any(c.compute_units for c in named):
        by_cu = [c for c in named if c.compute_units == reading.compute_units]
        if len(by_cu) == 1:
            return by_cu[0], f"its compute unit count ({reading.compute_units})"
    sized = [c for c in named if c.memory_gib is not None]
    if reading.memory_total_bytes and sized:
        gib = reading.memory_total_bytes / 2**30
        closest = min(sized, key=lambda c: abs((c.memory_gib or 0.0) - gib))
        ties = [c for c in sized if c.memory_gib == closest.memory_gib]
        if len(ties) == 1:
            return closest, f"its memory size ({gib:.1f} GiB)"
    return named[0], None


def _class_from_signals(reading: AmdReading, gfx: str | None) -> tuple[DeviceClass, list[str]]:
    """Classify an AMD GPU whose model is unknown from gfx target, memory size and type."""
    reasons: list[str] = []
    gib = reading.memory_total_bytes / 2**30 if reading.memory_total_bytes else None
    if gfx in DATACENTER_GFX:
        reasons.append(f"gfx target {gfx} is Instinct-only")
    if gib is not None and gib > CONSUMER_MAX_MEMORY_GIB:
        reasons.append(f"{gib:.0f} GiB is more than any Radeon card has")
    hbm = (reading.memory_type or "").upper().startswith("HBM")
    if hbm and gib is not None and gib >= HBM_DATACENTER_MIN_GIB:
        reasons.append(f"{gib:.0f} GiB of {reading.memory_type}")
    if reasons:
        return DeviceClass.DATACENTER_GPU, reasons
    return DeviceClass.CONSUMER_GPU, []


def _guess_model(gfx: str | None, reading: AmdReading) -> str | None:
    if gfx is None or not reading.memory_total_bytes:
        return None
    gib = reading.memory_total_bytes / 2**30
    hits = [name for target, size, name in MODEL_GUESSES
            if target == gfx and 0.9 <= gib / size <= 1.05]
    return hits[0] if len(hits) == 1 else None


def identify(reading: AmdReading, gfx: str | None, architecture: str | None) -> Identity:
    """Name and class a GPU from every signal: name, PCI id, gfx target, memory size and type."""
    notes: list[str] = []
    chip = KNOWN_DEVICE_IDS.get(reading.device_id or "")
    series = clean_product_name(reading.series)
    if _names_a_product(series) and series is not None:
        return Identity(series, False, classify_device(series, architecture), notes)
    if chip is not None:
        choice, evidence = _pick_chip_name(chip, reading)
        if choice.name is not None:
            shared = len([c for c in chip.names if c.name]) > 1
            if shared and evidence is not None:
                notes.append(f"device id {reading.device_id} is shared by several products; "
                             f"{choice.name} chosen by {evidence}")
            elif shared:
                notes.append(f"device id {reading.device_id} is shared by several products and "
                             f"nothing read tells them apart; {choice.name} is a guess")
            return Identity(choice.name, shared and evidence is None, chip.device_class, notes)
    device_class, reasons = _class_from_signals(reading, gfx)
    if chip is not None:
        device_class = chip.device_class
        reasons = [f"device id {reading.device_id} is an {chip.gfx_target} part"]
    guess = _guess_model(gfx, reading)
    read = reading.device_id or "no device id"
    if guess is not None:
        gib = (reading.memory_total_bytes or 0) / 2**30
        notes.append(f"model not read ({read}); {guess} is a guess from gfx target {gfx} and "
                     f"{gib:.0f} GiB memory")
        return Identity(guess, True, DeviceClass.DATACENTER_GPU, notes)
    if device_class == DeviceClass.DATACENTER_GPU:
        notes.append(f"model not read ({read}); classed datacenter-gpu because "
                     + "; ".join(reasons))
        label = f"AMD Instinct GPU ({gfx}, model unknown)" if gfx else (
            "AMD Instinct GPU (model unknown)")
        return Identity(label, True, device_class, notes)
    name = f"AMD GPU {reading.device_id}" if reading.device_id else "AMD GPU (unknown model)"
    if architecture in ARCH_CLASSES:
        device_class = ARCH_CLASSES[architecture]
    return Identity(name, False, device_class, notes)


def _origin_note(reading: AmdReading) -> str:
    by_source: dict[str, list[str]] = {}
    for field_name, source in reading.origins.items():
        if getattr(reading, field_name) is not None:
            by_source.setdefault(source, []).append(FIELD_LABELS[field_name])
    if len(by_source) <= 1:
        return f"read through {reading.source}"
    parts = [f"{source} ({', '.join(fields)})" for source, fields in by_source.items()]
    return "read through " + " and ".join(parts)


def build_device(index: int, reading: AmdReading) -> Device:
    """Turn one (merged) reading into a Device: name, class, gfx target and formats."""
    chip = KNOWN_DEVICE_IDS.get(reading.device_id or "")
    gfx = reading.gfx_target or (chip.gfx_target if chip is not None else None)
    target = GFX_TARGETS.get(gfx or "")
    architecture = target.architecture if target is not None else None
    identity = identify(reading, gfx, architecture)
    notes = list(identity.notes)
    if chip is not None and chip.note is not None:
        notes.append(chip.note)
    if gfx is not None and target is None:
        notes.append(f"gfx target {gfx} is not in the format table; formats left empty")
    notes.append(_origin_note(reading))
    return Device(
        index=index,
        vendor="amd",
        device_class=identity.device_class,
        name=identity.name,
        memory_total_bytes=reading.memory_total_bytes,
        memory_type=reading.memory_type,
        compute_capability=gfx,
        architecture=architecture,
        compute_units=reading.compute_units,
        pci_device_id=reading.device_id,
        formats=list(target.formats) if target is not None else [],
        source="probe",
        model_guessed=identity.guessed,
        notes=notes,
    )


# --- amdsmi Python library ----------------------------------------------------------------


def _vram_bytes_from_lib(amdsmi: Any, handle: Any) -> int | None:
    """VRAM total: amdsmi_get_gpu_memory_total (bytes), else amdsmi_get_gpu_vram_info (MiB)."""
    try:
        memory_type = amdsmi.AmdSmiMemoryType.VRAM
        total = amdsmi.amdsmi_get_gpu_memory_total(handle, memory_type)
        if isinstance(total, int) and total > 0:
            return total
    except Exception:  # amdsmi raises AmdSmiLibraryException and others
        pass
    try:
        info = amdsmi.amdsmi_get_gpu_vram_info(handle)
        # amdsmi reports vram_size in MB meaning MiB (the library divides bytes by 1024*1024).
        size = info.get("vram_size") if isinstance(info, dict) else None
        if isinstance(size, int) and size > 0:
            return size * MIB
    except Exception:  # not supported on this GPU or release
        pass
    return None


def _vram_type_from_lib(amdsmi: Any, handle: Any) -> str | None:
    """VRAM type name ('HBM3') from amdsmi_get_gpu_vram_info; None when not given."""
    try:
        info = amdsmi.amdsmi_get_gpu_vram_info(handle)
    except Exception:  # not supported on this GPU or release
        return None
    value = info.get("vram_type") if isinstance(info, dict) else None
    if isinstance(value, str):
        return _memory_type(value)
    enum = getattr(amdsmi, "AmdSmiVramType", None)
    if isinstance(value, int) and enum is not None:
        try:
            return _memory_type(str(enum(value).name))
        except Exception:  # a value this release's enum does not know
            return None
    return None


def _call(func: Callable[..., Any] | None, *args: Any) -> Any:
    """Call an optional amdsmi function; None when it is missing or fails."""
    if func is None:
        return None
    try:
        return func(*args)
    except Exception:  # amdsmi raises AmdSmiLibraryException for unsupported queries
        return None


def read_amdsmi(importer: Importer) -> tuple[list[AmdReading], str | None]:
    """Read GPUs through the amdsmi library; (readings, note on why none)."""
    try:
        amdsmi = importer("amdsmi")
    except Exception:  # ImportError, or an OSError when libamd_smi.so is missing
        return [], "amdsmi Python library not installed"
    try:
        amdsmi.amdsmi_init()
    except Exception as exc:  # the library loads but the driver does not answer
        return [], f"amdsmi_init failed ({exc}); is the amdgpu driver loaded?"
    readings: list[AmdReading] = []
    try:
        for handle in amdsmi.amdsmi_get_processor_handles():
            asic = _call(getattr(amdsmi, "amdsmi_get_gpu_asic_info", None), handle)
            asic = asic if isinstance(asic, dict) else {}
            bdf = _call(getattr(amdsmi, "amdsmi_get_gpu_device_bdf", None), handle)
            readings.append(AmdReading(
                series=_str_or_none(asic.get("market_name")),
                device_id=normalize_device_id(asic.get("device_id")),
                gfx_target=normalize_gfx_target(asic.get("target_graphics_version")),
                memory_total_bytes=_vram_bytes_from_lib(amdsmi, handle),
                memory_type=_vram_type_from_lib(amdsmi, handle),
                compute_units=_int_or_none(asic.get("num_compute_units")),
                bus_id=normalize_bus_id(bdf),
                source="amdsmi",
            ))
    except Exception as exc:  # a handle lost half-way: keep what was read
        return readings, f"amdsmi_get_processor_handles failed ({exc})"
    finally:
        try:
            amdsmi.amdsmi_shut_down()
        except Exception:  # shutting down must never fail the probe
            pass
    return readings, None if readings else "amdsmi found no AMD GPU"


# --- amd-smi / rocm-smi JSON ----------------------------------------------------------------


def load_json_after_noise(text: str | None) -> Any:
    """Parse the first JSON value in text, skipping WARNING lines before it; None if none."""
    if not text:
        return None
    decoder = json.JSONDecoder()
    offset = 0
    for line in text.splitlines(keepends=True):
        stripped = line.lstrip()
        if stripped[:1] in ("{", "["):
            start = offset + len(line) - len(stripped)
            try:
                return decoder.raw_decode(text, start)[0]
            except json.JSONDecodeError:
                pass
        offset += len(line)
    return None


def _str_or_none(value: Any) -> str | None:
    if not isinstance(value, str):
        return None
    text = value.strip()
    return None if text.lower() in ("", "n/a", "none") else text


def _int_or_none(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


def _memory_type(value: Any) -> str | None:
    """'HBM', 'hbm3', 'AMDSMI_VRAM_TYPE_HBM3' or 'GDDR6' -> 'HBM', 'HBM3', 'HBM3', 'GDDR6'."""
    text = _str_or_none(value)
    if text is None:
        return None
    text = text.upper().removeprefix("AMDSMI_VRAM_TYPE_")
    return None if text in ("UNKNOWN", "") else text


def _amd_smi_vram_bytes(vram: Any) -> int | None:
    """amd-smi's vram.size: {"value": 196592, "unit": "MB"} (JSON) or 196592; MB means MiB."""
    if not isinstance(vram, dict):
        return None
    size = vram.get("size", vram.get("vram_size"))
    if isinstance(size, dict):
        value, unit = _int_or_none(size.get("value")), str(size.get("unit", "MB")).upper()
    else:
        value, unit = _int_or_none(size), "MB"
    if value is None or value <= 0:
        return None
    factor = {"B": 1, "KB": 2**10, "MB": MIB, "GB": 2**30}.get(unit)
    return value * factor if factor is not None else None


def parse_amd_smi_static(text: str | None) -> list[AmdReading]:
    """Parse `amd-smi static --json`: a list of GPUs, or {"gpu_data": [...]} on newer releases."""
    data = load_json_after_noise(text)
    if isinstance(data, dict):
        data = data.get("gpu_data")
    if not isinstance(data, list):
        return []
    readings: list[AmdReading] = []
    for entry in data:
        if not isinstance(entry, dict):
            continue
        asic: dict[str, Any] = entry["asic"] if isinstance(entry.get("asic"), dict) else {}
        board: dict[str, Any] = entry["board"] if isinstance(entry.get("board"), dict) else {}
        bus: dict[str, Any] = entry["bus"] if isinstance(entry.get("bus"), dict) else {}
        vram: dict[str, Any] = entry["vram"] if isinstance(entry.get("vram"), dict) else {}
        series = _str_or_none(asic.get("market_name"))
        if _is_generic(series):
            # Newer amd-smi may put a generic string in market_name; the board's product
            # name is then the specific one (https://github.com/modular/rules_mojo/pull/45).
            series = _str_or_none(board.get("product_name")) or series
        readings.append(AmdReading(
            series=series,
            device_id=normalize_device_id(asic.get("device_id")),
            gfx_target=normalize_gfx_target(asic.get("target_graphics_version")),
            memory_total_bytes=_amd_smi_vram_bytes(vram),
            memory_type=_memory_type(vram.get("type", vram.get("vram_type"))),
            compute_units=_int_or_none(asic.get("num_compute_units")),
            bus_id=normalize_bus_id(bus.get("bdf")),
            source="amd-smi static --json",
        ))
    return readings


def _ci_get(card: Mapping[str, Any], *keys: str) -> Any:
    """Look keys up ignoring case: rocm-smi wrote "Card series" up to ROCm 5, then "Card Series"."""
    lowered = {str(k).lower(): v for k, v in card.items()}
    for key in keys:
        if key.lower() in lowered:
            return lowered[key.lower()]
    return None


def reading_from_rocm_smi_card(card: Mapping[str, Any], source: str) -> AmdReading:
    """One card's keys, as rocm-smi's JSON, CSV and text outputs all name them, to a reading."""
    series = _str_or_none(_ci_get(card, "Card Series", "Card series", "Device Name"))
    # ROCm 6's "Card Model" (capital M) is the PCI device id ("0x744c"); ROCm <= 5's
    # "Card model" (lower-case m) is the SUBSYSTEM id ("0x0c34" on an MI100, see
    # https://github.com/easybuilders/easybuild-framework/pull/3978) or even a marketing
    # name, so it is not used. Older releases may put the raw device id in the series itself.
    device_id = (normalize_device_id(_ci_get(card, "Device ID"))
                 or normalize_device_id(card.get("Card Model"))
                 or normalize_device_id(series))
    return AmdReading(
        series=series,
        device_id=device_id,
        gfx_target=normalize_gfx_target(_ci_get(card, "GFX Version")),
        memory_total_bytes=_int_or_none(_ci_get(card, "VRAM Total Memory (B)")),
        bus_id=normalize_bus_id(_ci_get(card, "PCI Bus")),
        source=source,
    )


def _card_key_order(key: str) -> int:
    return int(key[4:])


def parse_rocm_smi(text: str | None) -> list[AmdReading]:
    """Parse `rocm-smi --showproductname --showmeminfo vram --showbus --json`: {"card0": ...}."""
    data = load_json_after_noise(text)
    if not isinstance(data, dict):
        return []
    cards = sorted(
        (key for key in data if re.fullmatch(r"card\d+", str(key)) and isinstance(data[key], dict)),
        key=_card_key_order,
    )
    readings = [reading_from_rocm_smi_card(data[key], "rocm-smi --json") for key in cards]
    return [r for r in readings if r.has_data()]


def parse_rocm_smi_csv(text: str | None) -> list[AmdReading]:
    """Parse `rocm-smi ... --csv`: a 'device,Card Series,...' header, then one row per card."""
    lines = [line for line in (text or "").splitlines()
             if line.strip() and not line.startswith(("WARNING", "="))]
    start = next((i for i, line in enumerate(lines) if line.lower().startswith("device,")), None)
    if start is None:
        return []
    rows = csv.DictReader(lines[start:])
    cards = [row for row in rows if re.fullmatch(r"card\d+", (row.get("device") or "").strip())]
    cards.sort(key=lambda row: _card_key_order(row["device"].strip()))
    readings = [reading_from_rocm_smi_card(row, "rocm-smi --csv") for row in cards]
    return [r for r in readings if r.has_data()]


_TEXT_LINE = re.compile(r"^\s*GPU\[(\d+)\]\s*:\s*([^:]+?)\s*:\s*(.*?)\s*$")


def parse_rocm_smi_text(text: str | None) -> list[AmdReading]:
    """Parse rocm-smi's plain output (releases without --json): 'GPU[0] : Card series: X'.

    Lines of every section are gathered per GPU under their key, which is what the JSON
    output names them too; the key ends at the first colon, so a value such as a PCI bus id
    ('0000:C4:00.0') keeps its own colons.
    """
    cards: dict[int, dict[str, str]] = {}
    for line in (text or "").splitlines():
        found = _TEXT_LINE.match(line)
        if found is None:
            continue
        index, key, value = int(found.group(1)), found.group(2), found.group(3)
        cards.setdefault(index, {})[key] = value
    readings = [reading_from_rocm_smi_card(cards[i], "rocm-smi (text)") for i in sorted(cards)]
    return [r for r in readings if r.has_data()]


# --- sysfs ------------------------------------------------------------------------------------


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text(errors="replace").strip()
    except OSError:
        return None


def _kfd_targets(sys_root: Path) -> dict[str, str]:
    """PCI device id -> gfx target from KFD topology (/sys/class/kfd/kfd/topology/nodes)."""
    targets: dict[str, str] = {}
    nodes = sys_root / "class" / "kfd" / "kfd" / "topology" / "nodes"
    try:
        node_dirs = sorted(nodes.iterdir())
    except OSError:
        return targets
    for node in node_dirs:
        props: dict[str, int] = {}
        for line in (_read_text(node / "properties") or "").splitlines():
            key, _, value = line.partition(" ")
            if value.strip().isdigit():
                props[key] = int(value.strip())
        device_id = normalize_device_id(props.get("device_id"))
        gfx = gfx_from_kfd_version(props.get("gfx_target_version"))
        if device_id and gfx and props.get("vendor_id") == int(AMD_PCI_VENDOR_ID, 16):
            targets.setdefault(device_id, gfx)
    return targets


def _uevent_bus_id(device_dir: Path) -> str | None:
    """PCI_SLOT_NAME from the device's uevent file ('PCI_SLOT_NAME=0000:0c:00.0')."""
    for line in (_read_text(device_dir / "uevent") or "").splitlines():
        key, _, value = line.partition("=")
        if key == "PCI_SLOT_NAME":
            return normalize_bus_id(value)
    return None


def read_sysfs(sys_root: Path) -> list[AmdReading]:
    """Read AMD GPUs from /sys/class/drm/card*/device (vendor 0x1002) and KFD topology."""
    drm = sys_root / "class" / "drm"
    try:
        cards = sorted((p for p in drm.iterdir() if re.fullmatch(r"card\d+", p.name)),
                       key=lambda p: int(p.name[4:]))
    except OSError:
        return []
    targets = _kfd_targets(sys_root)
    readings: list[AmdReading] = []
    for card in cards:
        device_dir = card / "device"
        if (_read_text(device_dir / "vendor") or "").lower() != AMD_PCI_VENDOR_ID:
            continue
        device_id = normalize_device_id(_read_text(device_dir / "device"))
        readings.append(AmdReading(
            series=_str_or_none(_read_text(device_dir / "product_name")),
            device_id=device_id,
            gfx_target=targets.get(device_id or ""),
            memory_total_bytes=_int_or_none(_read_text(device_dir / "mem_info_vram_total")),
            bus_id=_uevent_bus_id(device_dir),
            source="sysfs",
        ))
    return readings


# --- torch (only when already imported) ------------------------------------------------------


def read_torch(modules: Mapping[str, ModuleType]) -> list[AmdReading]:
    """Read GPUs through torch, but only if torch is ALREADY imported.

    Importing torch takes seconds and hundreds of MB, far more than a probe should cost, so
    this source is used only when the caller (e.g. the validator) has loaded torch anyway.
    """
    torch: Any = modules.get("torch")
    if torch is None:
        return []
    try:
        if not getattr(torch.version, "hip", None) or not torch.cuda.is_available():
            return []
        readings = []
        for index in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(index)
            bus = None
            if getattr(props, "pci_bus_id", None) is not None:
                domain = int(getattr(props, "pci_domain_id", 0))
                slot = int(getattr(props, "pci_device_id", 0))
                bus = f"{domain:04x}:{int(props.pci_bus_id):02x}:{slot:02x}.0"
            readings.append(AmdReading(
                series=_str_or_none(getattr(props, "name", None)),
                gfx_target=normalize_gfx_target(getattr(props, "gcnArchName", None)),
                memory_total_bytes=_int_or_none(getattr(props, "total_memory", None)),
                compute_units=_int_or_none(getattr(props, "multi_processor_count", None)),
                bus_id=normalize_bus_id(bus),
                source="torch (ROCm build)",
            ))
        return readings
    except Exception:  # a broken HIP runtime must not break the probe
        return []


# --- the backend -------------------------------------------------------------------------------

ROCM_SMI_QUERY = ["rocm-smi", "--showproductname", "--showmeminfo", "vram", "--showbus"]


class AmdBackend:
    """AMD ROCm GPUs, merged field by field from amdsmi, amd-smi, rocm-smi, sysfs and torch.

    Sources are read in that order until every GPU's model, device id, gfx target and memory
    are known; each later source fills only what the earlier ones left empty (a name from
    rocm-smi, memory from amd-smi), its GPUs paired by PCI bus id, or by order when the counts
    agree. The first source that found GPUs sets the list.
    """

    name = "amd"

    def __init__(
        self,
        runner: Runner = run_command,
        importer: Importer = importlib.import_module,
        sys_root: Path = Path("/sys"),
        modules: Mapping[str, ModuleType] | None = None,
        timeout_s: float = CLI_TIMEOUT_S,
    ) -> None:
        self.runner = runner
        self.importer = importer
        self.sys_root = sys_root
        self.modules = modules
        self.timeout_s = timeout_s

    def _rocm_smi(self) -> list[AmdReading]:
        """rocm-smi as JSON, else CSV, else its plain text (releases without --json)."""
        for flag, parse in (("--json", parse_rocm_smi), ("--csv", parse_rocm_smi_csv),
                            (None, parse_rocm_smi_text)):
            argv = ROCM_SMI_QUERY + ([flag] if flag else [])
            readings = parse(self.runner(argv, self.timeout_s))
            if readings:
                return readings
        return []

    def _sources(self) -> Iterable[tuple[str, Callable[[], list[AmdReading]]]]:
        yield "amd-smi", lambda: parse_amd_smi_static(
            self.runner(["amd-smi", "static", "--json"], self.timeout_s))
        yield "rocm-smi", self._rocm_smi
        yield "sysfs", lambda: read_sysfs(self.sys_root)
        yield "torch", lambda: read_torch(sys.modules if self.modules is None else self.modules)

    def _read_all(self) -> tuple[list[AmdReading], list[str], list[str]]:
        """Read and merge the sources; return readings, why sources found nothing, merge notes."""
        try:
            first, note = read_amdsmi(self.importer)
        except Exception as exc:  # a broken library must not stop the CLI sources
            first, note = [], f"amdsmi failed ({exc})"
        tried = [f"amdsmi: {note}"] if note else []
        gathered = [first] if first else []
        merged, notes = merge_sources(gathered)
        for label, read in self._sources():
            if merged and all(r.is_complete() for r in merged):
                break
            try:
                readings = read()
            except Exception as exc:  # one broken source must not stop the rest
                tried.append(f"{label}: failed ({exc})")
                continue
            if not readings:
                tried.append(f"{label}: nothing found")
                continue
            gathered.append(readings)
            merged, notes = merge_sources(gathered)
        return merged, tried, notes

    def probe(self) -> BackendResult:
        """Return the AMD GPUs the sources see, merged; never raises."""
        readings, tried, merge_notes = self._read_all()
        if not readings:
            return BackendResult(notes=["amd: no AMD GPU found (" + "; ".join(tried) + ")"])
        notes: list[str] = list(merge_notes)
        kept = []
        for reading in readings:
            memory = reading.memory_total_bytes
            if memory is not None and memory < MIN_ACCELERATOR_VRAM_BYTES:
                notes.append(f"amd: skipped {reading.series or reading.device_id or 'a GPU'} "
                             f"with {memory / 2**20:.0f} MiB VRAM (integrated GPU)")
                continue
            kept.append(reading)
        devices = [build_device(index, reading) for index, reading in enumerate(kept)]
        return BackendResult(devices=devices, notes=notes)
