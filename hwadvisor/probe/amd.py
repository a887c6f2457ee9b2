"""AMD ROCm backend: amdsmi library, then amd-smi / rocm-smi JSON, then Linux sysfs, then torch.

Sources are tried in that order; the first that finds a GPU wins and the others only leave a
note. Output formats vary across ROCm releases (a series name may be a raw PCI id, a WARNING
line may precede the JSON, amd-smi >= 6.4 nests its list under "gpu_data"), so every parser
takes what it can and leaves the rest None. Tables below are data, each with its source.
"""

from __future__ import annotations

import importlib
import json
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
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
class KnownChip:
    """A PCI device id's product: name variants (with memory to tell them apart) and gfx target."""

    names: tuple[tuple[str, float | None], ...]  # (name, memory GiB); first is the default
    gfx_target: str
    note: str | None = None


# MI250X / MI250 carry two graphics compute dies; ROCm shows each as its own GPU.
_MI200_GCD_NOTE = (
    "MI250X/MI250 is two GCDs in one package; each appears as its own GPU with half the package "
    "memory (64 GB) and half the package's datasheet peaks"
)

# PCI device ids (vendor 0x1002) -> product. Sources: https://pci-ids.ucw.cz/read/PC/1002 and
# the ROCm GPU architecture table above. 0x744c is shared by RX 7900 XTX / XT / GRE, which
# differ in memory (24 / 20 / 16 GB), so the memory read decides between them.
KNOWN_DEVICE_IDS: dict[str, KnownChip] = {
    "0x738c": KnownChip((("AMD Instinct MI100", None),), "gfx908"),
    "0x7408": KnownChip((("AMD Instinct MI250X", None),), "gfx90a", _MI200_GCD_NOTE),
    "0x740c": KnownChip((("AMD Instinct MI250X/MI250", None),), "gfx90a", _MI200_GCD_NOTE),
    "0x74a1": KnownChip((("AMD Instinct MI300X", None),), "gfx942"),
    "0x74a5": KnownChip((("AMD Instinct MI325X", None),), "gfx942"),
    "0x744c": KnownChip(
        (("AMD Radeon RX 7900 XTX", 24.0), ("AMD Radeon RX 7900 XT", 20.0),
         ("AMD Radeon RX 7900 GRE", 16.0)),
        "gfx1100",
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

_HEX_ID = re.compile(r"^(0x)?[0-9a-fA-F]{1,4}$")
_GFX = re.compile(r"gfx[0-9a-f]+", re.IGNORECASE)

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


def _pick_known_name(chip: KnownChip, memory_total_bytes: int | None) -> str:
    """Pick the variant of a shared device id whose memory is closest to the memory read."""
    sized = [(name, gib) for name, gib in chip.names if gib is not None]
    if memory_total_bytes and sized:
        gib_read = memory_total_bytes / 2**30
        return min(sized, key=lambda item: abs(item[1] - gib_read))[0]
    return chip.names[0][0]


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
    compute_units: int | None = None
    source: str = ""


def build_device(index: int, reading: AmdReading) -> Device:
    """Turn one reading into a Device: normalised name, class, gfx target and formats."""
    notes: list[str] = []
    chip = KNOWN_DEVICE_IDS.get(reading.device_id or "")
    name = clean_product_name(reading.series)
    if chip is not None and len(chip.names) == 1:
        # A one-product id is the most specific signal: series strings may name only the
        # family ("AMD INSTINCT MI200 (MCM) OAM LC MBA HPE C2" for an MI250X).
        name = chip.names[0][0]
    elif chip is not None and (name is None or "/" in name):
        # A shared id (or a series listing several products): memory tells them apart.
        name = _pick_known_name(chip, reading.memory_total_bytes)
        notes.append(f"device id {reading.device_id} is shared by several products; "
                     f"{name} chosen by its memory size")
    if chip is not None and chip.note is not None:
        notes.append(chip.note)
    if name is None:
        name = f"AMD GPU {reading.device_id}" if reading.device_id else "AMD GPU (unknown model)"
    gfx = reading.gfx_target or (chip.gfx_target if chip is not None else None)
    target = GFX_TARGETS.get(gfx or "")
    architecture = target.architecture if target is not None else None
    if gfx is not None and target is None:
        notes.append(f"gfx target {gfx} is not in the format table; formats left empty")
    notes.append(f"read through {reading.source}")
    return Device(
        index=index,
        vendor="amd",
        device_class=classify_device(name, architecture),
        name=name,
        memory_total_bytes=reading.memory_total_bytes,
        compute_capability=gfx,
        architecture=architecture,
        compute_units=reading.compute_units,
        pci_device_id=reading.device_id,
        formats=list(target.formats) if target is not None else [],
        source="probe",
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
    except Exception:  # noqa: BLE001 - amdsmi raises AmdSmiLibraryException and others
        pass
    try:
        info = amdsmi.amdsmi_get_gpu_vram_info(handle)
        # amdsmi reports vram_size in MB meaning MiB (the library divides bytes by 1024*1024).
        size = info.get("vram_size") if isinstance(info, dict) else None
        if isinstance(size, int) and size > 0:
            return size * MIB
    except Exception:  # noqa: BLE001
        pass
    return None


def read_amdsmi(importer: Importer) -> tuple[list[AmdReading], str | None]:
    """Read GPUs through the amdsmi library; (readings, note on why none)."""
    try:
        amdsmi = importer("amdsmi")
    except Exception:  # noqa: BLE001 - ImportError, or an OSError when libamd_smi.so is missing
        return [], "amdsmi Python library not installed"
    try:
        amdsmi.amdsmi_init()
    except Exception as exc:  # noqa: BLE001
        return [], f"amdsmi_init failed ({exc}); is the amdgpu driver loaded?"
    readings: list[AmdReading] = []
    try:
        for handle in amdsmi.amdsmi_get_processor_handles():
            try:
                asic = amdsmi.amdsmi_get_gpu_asic_info(handle)
            except Exception:  # noqa: BLE001
                asic = {}
            asic = asic if isinstance(asic, dict) else {}
            readings.append(AmdReading(
                series=_str_or_none(asic.get("market_name")),
                device_id=normalize_device_id(asic.get("device_id")),
                gfx_target=normalize_gfx_target(asic.get("target_graphics_version")),
                memory_total_bytes=_vram_bytes_from_lib(amdsmi, handle),
                compute_units=_int_or_none(asic.get("num_compute_units")),
                source="amdsmi",
            ))
    except Exception as exc:  # noqa: BLE001
        return readings, f"amdsmi_get_processor_handles failed ({exc})"
    finally:
        try:
            amdsmi.amdsmi_shut_down()
        except Exception:  # noqa: BLE001
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
        series = _str_or_none(asic.get("market_name"))
        if _is_generic(series):
            # Newer amd-smi may put a generic string in market_name; the board's product
            # name is then the specific one (https://github.com/modular/rules_mojo/pull/45).
            series = _str_or_none(board.get("product_name")) or series
        readings.append(AmdReading(
            series=series,
            device_id=normalize_device_id(asic.get("device_id")),
            gfx_target=normalize_gfx_target(asic.get("target_graphics_version")),
            memory_total_bytes=_amd_smi_vram_bytes(entry.get("vram")),
            compute_units=_int_or_none(asic.get("num_compute_units")),
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


def parse_rocm_smi(text: str | None) -> list[AmdReading]:
    """Parse `rocm-smi --showproductname --showmeminfo vram --json`: {"card0": {...}, ...}."""
    data = load_json_after_noise(text)
    if not isinstance(data, dict):
        return []
    cards = sorted(
        (key for key in data if re.fullmatch(r"card\d+", str(key)) and isinstance(data[key], dict)),
        key=lambda key: int(key[4:]),
    )
    readings: list[AmdReading] = []
    for key in cards:
        card = data[key]
        series = _str_or_none(_ci_get(card, "Card Series", "Card series", "Device Name"))
        # ROCm 6's "Card Model" (capital M) is the PCI device id ("0x744c"); ROCm <= 5's
        # "Card model" (lower-case m) is the SUBSYSTEM id ("0x0c34" on an MI100, see
        # https://github.com/easybuilders/easybuild-framework/pull/3978), so it is not used.
        # Older releases may put the raw device id in the series itself ("0x738c").
        device_id = (normalize_device_id(_ci_get(card, "Device ID"))
                     or normalize_device_id(card.get("Card Model"))
                     or normalize_device_id(series))
        readings.append(AmdReading(
            series=series,
            device_id=device_id,
            gfx_target=normalize_gfx_target(_ci_get(card, "GFX Version")),
            memory_total_bytes=_int_or_none(_ci_get(card, "VRAM Total Memory (B)")),
            source="rocm-smi --json",
        ))
    return readings


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
            readings.append(AmdReading(
                series=_str_or_none(getattr(props, "name", None)),
                gfx_target=normalize_gfx_target(getattr(props, "gcnArchName", None)),
                memory_total_bytes=_int_or_none(getattr(props, "total_memory", None)),
                compute_units=_int_or_none(getattr(props, "multi_processor_count", None)),
                source="torch (ROCm build)",
            ))
        return readings
    except Exception:  # noqa: BLE001 - a broken HIP runtime must not break the probe
        return []


# --- the backend -------------------------------------------------------------------------------


class AmdBackend:
    """AMD ROCm GPUs: amdsmi library, amd-smi, rocm-smi, sysfs, then torch if already imported."""

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

    def _sources(self) -> Iterable[tuple[str, Callable[[], list[AmdReading]]]]:
        yield "amd-smi", lambda: parse_amd_smi_static(
            self.runner(["amd-smi", "static", "--json"], self.timeout_s))
        yield "rocm-smi", lambda: parse_rocm_smi(self.runner(
            ["rocm-smi", "--showproductname", "--showmeminfo", "vram", "--json"], self.timeout_s))
        yield "sysfs", lambda: read_sysfs(self.sys_root)
        yield "torch", lambda: read_torch(sys.modules if self.modules is None else self.modules)

    def probe(self) -> BackendResult:
        """Return the AMD GPUs the first working source sees; never raises."""
        try:
            readings, note = read_amdsmi(self.importer)
        except Exception as exc:  # noqa: BLE001
            readings, note = [], f"amdsmi failed ({exc})"
        tried = [f"amdsmi: {note}"] if note else []
        if not readings:
            for label, read in self._sources():
                try:
                    readings = read()
                except Exception as exc:  # noqa: BLE001 - one broken source must not stop the rest
                    tried.append(f"{label}: failed ({exc})")
                    readings = []
                if readings:
                    break
                tried.append(f"{label}: nothing found")
        if not readings:
            return BackendResult(notes=["amd: no AMD GPU found (" + "; ".join(tried) + ")"])
        notes: list[str] = []
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
