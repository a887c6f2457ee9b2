"""Datasheet profiles: load the TOML files in profiles/, match probed devices, build planned ones.

Each file in profiles/ (shipped as the package ``hwadvisor.profiles_data``) describes one device
with its vendor sources; :class:`Profile` is their schema. Peaks are DENSE figures (sparse
datasheet figures halved, said so in the file's notes); ``int8`` is in TOPS.
"""

from __future__ import annotations

import difflib
import functools
import re
import sys
from collections.abc import Iterable
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from hwadvisor.errors import UserError
from hwadvisor.models import Device, DeviceClass, Interconnect, NvLinkInfo, PcieLink

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

GIB = 2**30
# GPU and DRAM vendors count memory in binary units: the H200's "141 GB" reads 143771 MiB
# (140.4 GiB) in nvidia-smi, so memory_gib converts with 2**30.

PEAK_FORMATS = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "fp6", "fp4", "int8")
SOURCE_GROUPS = (
    "memory", "bandwidth", "compute", "power", "interconnect", "architecture", "match", "mobile",
)
_ID_RE = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
_PCI_HEX_RE = re.compile(r"^[0-9a-f]{4}$")
# A probed memory size counts as "this SKU" within this band of a profile's size: drivers
# reserve a little (80 GB H100 reads 79.6 GiB) and phones report less than the nominal RAM.
MEMORY_MATCH_BAND = (0.75, 1.10)


class _ProfileBase(BaseModel):
    # Built on first validation: the probe of a host without a GPU never needs a profile.
    model_config = ConfigDict(extra="forbid", defer_build=True)


class ProfileInterconnect(_ProfileBase):
    """Links of one device, as the datasheet states them."""

    pcie_generation: int | None = None
    pcie_lanes: int | None = None
    nvlink_version: int | None = None
    nvlink_gbps_bidirectional: float | None = Field(
        None, description="NVLink total per GPU, both directions, GB/s (NVIDIA's headline figure)"
    )
    fabric: str | None = Field(None, description="Other GPU-GPU fabric, e.g. AMD Infinity Fabric")
    fabric_gbps_bidirectional: float | None = None
    network_gbps_per_gpu: float | None = Field(
        None, gt=0, description="Scale-out network per GPU in the vendor's reference system, "
        "one direction, GB/s (planning across nodes uses it when --inter-node-gbps is not given)"
    )


class ProfileMatch(_ProfileBase):
    """How a probed device is recognised: PCI ids first, then name fragments."""

    names: list[str] = Field(default_factory=list, description="Name fragments, whole words")
    exclude_names: list[str] = Field(default_factory=list, description="Fragments that rule it out")
    pci_ids: list[str] = Field(default_factory=list, description="'vendor:device', lower-case hex")

    @field_validator("pci_ids")
    @classmethod
    def _pci_form(cls, value: list[str]) -> list[str]:
        for pci in value:
            vendor, _, device = pci.partition(":")
            if not (_PCI_HEX_RE.match(vendor) and _PCI_HEX_RE.match(device)):
                raise ValueError(f"pci id {pci!r} must read 'vvvv:dddd' in lower-case hex")
        return value


class ProfileMobile(_ProfileBase):
    """Per-app memory on a phone: an estimate, with the reasoning in `basis`."""

    app_memory_limit_fraction: float = Field(gt=0, le=1)
    basis: str


class Profile(_ProfileBase):
    """One device's datasheet figures, each group with its sources (the profiles/*.toml schema)."""

    id: str
    name: str
    vendor: str
    device_class: DeviceClass
    architecture: str | None = None
    compute_capability: str | None = Field(None, description="'9.0' (NVIDIA) or 'gfx942' (AMD)")
    compute_units: int | None = Field(None, description="SMs, CUs or GPU cores")
    memory_gib: float = Field(gt=0, description="The datasheet's memory 'GB' (binary units)")
    memory_options_gib: list[float] = Field(
        default_factory=list, description="Configurations sold, where memory_gib is one of several"
    )
    memory_type: str
    unified_memory: bool = False
    memory_bandwidth_gbps: float = Field(gt=0)
    power_w: float | None = Field(None, description="Typical board power / TDP")
    npu_tops: float | None = Field(None, description="NPU / Neural Engine figure, as stated")
    formats: list[str] = Field(default_factory=list)
    peak_tflops: dict[str, float] = Field(
        default_factory=dict, description="Dense peaks by format; int8 in TOPS"
    )
    derived_figures: list[str] = Field(
        default_factory=list, description="Figures computed rather than read from a datasheet"
    )
    interconnect: ProfileInterconnect | None = None
    match: ProfileMatch = Field(default_factory=ProfileMatch)
    mobile: ProfileMobile | None = None
    sources: dict[str, list[str]]
    notes: list[str] = Field(default_factory=list)

    @field_validator("id")
    @classmethod
    def _id_form(cls, value: str) -> str:
        if not _ID_RE.match(value):
            raise ValueError(f"id {value!r} must be lower-case words joined by dashes")
        return value

    @field_validator("peak_tflops")
    @classmethod
    def _peak_keys(cls, value: dict[str, float]) -> dict[str, float]:
        unknown = sorted(set(value) - set(PEAK_FORMATS))
        if unknown:
            raise ValueError(f"unknown peak formats {unknown}; use {', '.join(PEAK_FORMATS)}")
        if any(v <= 0 for v in value.values()):
            raise ValueError("peaks must be positive; leave a format out when it is unknown")
        return value

    @field_validator("sources")
    @classmethod
    def _source_urls(cls, value: dict[str, list[str]]) -> dict[str, list[str]]:
        unknown = sorted(set(value) - set(SOURCE_GROUPS))
        if unknown:
            raise ValueError(f"unknown source groups {unknown}; use {', '.join(SOURCE_GROUPS)}")
        for group, urls in value.items():
            if not urls or any(not url.startswith("https://") for url in urls):
                raise ValueError(f"sources.{group} needs one or more https:// URLs")
        return value

    @model_validator(mode="after")
    def _every_figure_sourced(self) -> Profile:
        needed = {"memory", "bandwidth"}
        if self.peak_tflops or self.npu_tops is not None:
            needed.add("compute")
        if self.power_w is not None:
            needed.add("power")
        if self.interconnect is not None:
            needed.add("interconnect")
        if self.compute_capability is not None:
            needed.add("architecture")
        if self.match.pci_ids:
            needed.add("match")
        if self.mobile is not None:
            needed.add("mobile")
        missing = sorted(needed - set(self.sources))
        if missing:
            raise ValueError(f"figures without sources: add sources.{', sources.'.join(missing)}")
        return self

    def is_derived(self, figure: str) -> bool:
        """Whether a figure ('memory_bandwidth_gbps', 'peak_tflops.fp32' ...) is computed."""
        return figure in self.derived_figures

    @property
    def memory_total_bytes(self) -> int:
        """The profile's memory in bytes."""
        return int(self.memory_gib * GIB)


# --- loading -------------------------------------------------------------------------------


def _profile_files() -> list[tuple[str, bytes]]:
    """(file name, bytes) of every profile: package data first, else the repo's profiles/."""
    try:
        root: Any = resources.files("hwadvisor.profiles_data")
        files = [(entry.name, entry.read_bytes()) for entry in root.iterdir()
                 if entry.name.endswith(".toml")]
        if files:
            return sorted(files)
    except (ModuleNotFoundError, FileNotFoundError, NotADirectoryError):
        pass
    # A plain checkout run without installing: profiles/ sits next to the package.
    repo_dir = Path(__file__).resolve().parent.parent / "profiles"
    return sorted((path.name, path.read_bytes()) for path in repo_dir.glob("*.toml"))


def parse_profile(file_name: str, data: bytes) -> Profile:
    """Parse and validate one profile file; the file name must be `<id>.toml`."""
    try:
        profile = Profile.model_validate(tomllib.loads(data.decode("utf-8")))
    except (tomllib.TOMLDecodeError, ValidationError, UnicodeDecodeError) as exc:
        raise ValueError(f"profile {file_name} is invalid: {exc}") from exc
    if file_name != f"{profile.id}.toml":
        raise ValueError(
            f"profile {file_name} has id {profile.id!r}; name the file {profile.id}.toml"
        )
    return profile


@functools.lru_cache(maxsize=1)
def load_all() -> tuple[Profile, ...]:
    """Every shipped profile, sorted by id (read once, cached)."""
    profiles = [parse_profile(name, data) for name, data in _profile_files()]
    ids = [p.id for p in profiles]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise ValueError(f"duplicate profile ids: {duplicates}")
    return tuple(sorted(profiles, key=lambda p: p.id))


def ids() -> list[str]:
    """Return the ids of every profile, sorted."""
    return [p.id for p in load_all()]


def suggest(text: str, limit: int = 3) -> list[str]:
    """Known ids close to text: ids containing it first ('h200' -> h200-sxm), then difflib's."""
    wanted = text.strip().lower()
    known = ids()
    containing = [i for i in known if wanted and wanted in i]
    similar = difflib.get_close_matches(wanted, known, n=limit, cutoff=0.4)
    return list(dict.fromkeys([*containing, *similar]))[:limit]


def get(profile_id: str) -> Profile:
    """Return the profile with this id; an unknown id is a UserError (exit 2) naming close ids."""
    wanted = profile_id.strip().lower()
    for profile in load_all():
        if profile.id == wanted:
            return profile
    close = suggest(wanted)
    hint = f"did you mean {', '.join(close)}? " if close else ""
    raise UserError(
        f"no device profile {profile_id!r}",
        hint=hint + "run 'hwadvisor profiles list' for the known ids",
    )


def by_class(device_class: DeviceClass | str | None) -> list[Profile]:
    """Return the profiles of one device class (all when None)."""
    if device_class is None:
        return list(load_all())
    wanted = DeviceClass(device_class).value
    return [p for p in load_all() if p.device_class.value == wanted]


# --- matching ------------------------------------------------------------------------------


def _normalize(text: str) -> str:
    """Lower-case words: punctuation becomes a space, except commas inside ids like iPhone16,1."""
    text = re.sub(r"[^a-z0-9,]+", " ", text.lower())
    text = re.sub(r",(?![a-z0-9])|(?<![a-z0-9]),", " ", text)
    return " ".join(text.split())


def _contains_words(haystack: str, needle: str) -> bool:
    """Whether needle's words appear as whole consecutive words in haystack."""
    needle = _normalize(needle)
    return bool(needle) and f" {needle} " in f" {_normalize(haystack)} "


def parse_pci_id(value: str | None) -> tuple[str | None, str] | None:
    """Parse '0x233510DE' (NVML), '10de:2335', '0x2335' or '2335' into (vendor, device) hex."""
    if not value:
        return None
    text = value.strip().lower()
    if ":" in text:
        vendor, _, device = text.partition(":")
        vendor, device = vendor.removeprefix("0x"), device.removeprefix("0x")
        if _PCI_HEX_RE.match(vendor) and _PCI_HEX_RE.match(device):
            return vendor, device
        return None
    text = text.removeprefix("0x")
    if len(text) == 8 and all(c in "0123456789abcdef" for c in text):
        # NVML packs (device << 16) | vendor: 0x233510DE is device 0x2335 of vendor 0x10de.
        return text[4:], text[:4]
    if _PCI_HEX_RE.match(text):
        return None, text
    return None


def _pci_ids_of(device: Device) -> list[str]:
    """Every PCI id string the probe recorded for a device."""
    found = [getattr(device, "pci_device_id", None)]  # a top-level field may be added later
    if device.nvidia is not None:
        found.append(device.nvidia.pci_device_id)
    return [pci for pci in found if isinstance(pci, str) and pci]


def _pci_match(device: Device, profile: Profile) -> bool:
    for raw in _pci_ids_of(device):
        parsed = parse_pci_id(raw)
        if parsed is None:
            continue
        vendor, dev = parsed
        for known in profile.match.pci_ids:
            known_vendor, _, known_dev = known.partition(":")
            if dev == known_dev and vendor in (None, known_vendor):
                return True
    return False


def _name_score(name: str, profile: Profile) -> int:
    """Length of the longest name fragment of the profile found in name; 0 for none or excluded."""
    if any(_contains_words(name, bad) for bad in profile.match.exclude_names):
        return 0
    hits = [len(_normalize(frag)) for frag in profile.match.names if _contains_words(name, frag)]
    return max(hits, default=0)


def _memory_ratio(device: Device, profile: Profile) -> float | None:
    """Probed memory over the closest profile size (1.0 is a perfect fit); None when unread."""
    if not device.memory_total_bytes:
        return None
    sizes = profile.memory_options_gib or [profile.memory_gib]
    ratios = [device.memory_total_bytes / (size * GIB) for size in sizes]
    return min(ratios, key=lambda r: abs(1.0 - r))


def memory_fits(device: Device, profile: Profile) -> bool | None:
    """Whether the probed memory is plausible for the profile's SKU; None when unread."""
    ratio = _memory_ratio(device, profile)
    if ratio is None:
        return None
    low, high = MEMORY_MATCH_BAND
    return low <= ratio <= high


def match(device: Device, profiles: Iterable[Profile] | None = None) -> Profile | None:
    """Find the profile of a probed device: by PCI id, then by name, then closest memory."""
    candidates = list(load_all() if profiles is None else profiles)
    by_pci = [p for p in candidates if _pci_match(device, p)]
    if by_pci:
        # Ids are unique per SKU in the shipped data; memory breaks any tie all the same.
        return min(by_pci, key=lambda p: abs(1.0 - (_memory_ratio(device, p) or 1.0)))
    scored = [(p, _name_score(device.name, p)) for p in candidates]
    named = [(p, score) for p, score in scored if score > 0]
    if not named:
        return None

    def rank(item: tuple[Profile, int]) -> tuple[int, int, float]:
        profile, score = item
        fits = memory_fits(device, profile)
        ratio = _memory_ratio(device, profile)
        # Plausible memory first (A100-SXM4 40 vs 80 GB), then the most specific name.
        return (0 if fits is False else 1, score, -abs(1.0 - ratio) if ratio is not None else 0.0)

    return max(named, key=rank)[0]


# --- devices from profiles -----------------------------------------------------------------


def _peak_source(profile: Profile) -> Literal["datasheet", "derived"] | None:
    if not profile.peak_tflops:
        return None
    derived = any(profile.is_derived(f"peak_tflops.{fmt}") for fmt in profile.peak_tflops)
    return "derived" if derived else "datasheet"


def _bandwidth_source(profile: Profile) -> Literal["datasheet", "derived"]:
    return "derived" if profile.is_derived("memory_bandwidth_gbps") else "datasheet"


def _nvlink_one_direction_gbps(profile: Profile) -> float | None:
    """NvLinkInfo.bandwidth_gbps is one direction: half NVIDIA's both-directions total."""
    link = profile.interconnect
    if link is None or link.nvlink_gbps_bidirectional is None:
        return None
    return link.nvlink_gbps_bidirectional / 2


def _interconnect_from(profile: Profile) -> Interconnect | None:
    link = profile.interconnect
    if link is None:
        return None
    pcie = None
    if link.pcie_generation is not None or link.pcie_lanes is not None:
        pcie = PcieLink(generation_max=link.pcie_generation, width_max=link.pcie_lanes)
    nvlink = None
    if link.nvlink_gbps_bidirectional is not None:
        one_way = _nvlink_one_direction_gbps(profile)
        nvlink = NvLinkInfo(version=link.nvlink_version, bandwidth_gbps=one_way)
    return Interconnect(pcie=pcie, nvlink=nvlink, network_gbps=link.network_gbps_per_gpu)


def device_from_profile(profile_id: str, index: int = 0) -> Device:
    """Build a planned device from a profile (source 'profile'); unknown ids raise UserError."""
    profile = get(profile_id)
    return Device(
        index=index,
        vendor=profile.vendor,
        device_class=profile.device_class,
        name=profile.name,
        memory_total_bytes=profile.memory_total_bytes,
        memory_type=profile.memory_type,
        unified_memory=profile.unified_memory,
        memory_bandwidth_gbps=profile.memory_bandwidth_gbps,
        memory_bandwidth_source=_bandwidth_source(profile),
        compute_capability=profile.compute_capability,
        architecture=profile.architecture,
        compute_units=profile.compute_units,
        formats=low_precision(profile.formats),
        peak_tflops=dict(profile.peak_tflops),
        peak_tflops_source=_peak_source(profile),
        power_w=profile.power_w,
        source="profile",
        profile_id=profile.id,
        interconnect=_interconnect_from(profile),
        notes=[f"planned from the datasheet profile {profile.id}; nothing was measured"]
        + list(profile.notes),
    )


def mobile_app_memory_limit_bytes(profile: Profile) -> int | None:
    """Estimate the per-app memory limit on a phone (None for other classes)."""
    if profile.mobile is None:
        return None
    return int(profile.memory_total_bytes * profile.mobile.app_memory_limit_fraction)


def _enriched_interconnect(device: Device, profile: Profile) -> Interconnect | None:
    """Fill a missing NVLink bandwidth of the probed interconnect from the datasheet.

    Only where the probe saw NVLink: a GPU with no NVLink entry (a single-GPU VM slice, or
    links NVML could not read) gets none invented, so no plan counts on links that are absent.
    """
    one_way = _nvlink_one_direction_gbps(profile)
    current = device.interconnect
    if one_way is None or current is None or current.nvlink is None:
        return current
    nvlink = current.nvlink
    if nvlink.bandwidth_gbps is not None or nvlink.links_active == 0:
        return current
    filled = nvlink.model_copy(update={"bandwidth_gbps": one_way})
    return current.model_copy(update={"nvlink": filled})


def enrich_device(device: Device, profile: Profile) -> Device:
    """Fill a probed device's gaps from its profile; what the probe read always wins."""
    update: dict[str, Any] = {"profile_id": profile.id}
    notes = list(device.notes)
    if profile.peak_tflops and not device.peak_tflops:
        update["peak_tflops"] = dict(profile.peak_tflops)
        update["peak_tflops_source"] = _peak_source(profile)
    if device.memory_bandwidth_gbps is None:
        update["memory_bandwidth_gbps"] = profile.memory_bandwidth_gbps
        update["memory_bandwidth_source"] = _bandwidth_source(profile)
    # what the probe read stays as read; the profile adds its formats below fp32
    update["formats"] = list(dict.fromkeys([*device.formats, *low_precision(profile.formats)]))
    for field in ("memory_type", "compute_capability", "architecture", "compute_units", "power_w"):
        if getattr(device, field) is None and getattr(profile, field) is not None:
            update[field] = getattr(profile, field)
    update["interconnect"] = _enriched_interconnect(device, profile)
    if memory_fits(device, profile) is False and device.memory_total_bytes:
        notes.append(
            f"memory {device.memory_total_bytes / GIB:.1f} GiB does not fit profile {profile.id} "
            f"({profile.memory_gib:g} GiB); its datasheet figures may not apply"
        )
    update["notes"] = notes
    return device.model_copy(update=update)


def unknown_device_hint(device: Device) -> str:
    """Return the hint line for a device no profile matches."""
    return (
        f"no profile matches {device.name!r}; pass --device ID to plan with a known profile "
        "(hwadvisor profiles list)"
    )


def low_precision(formats: list[str]) -> list[str]:
    """Return the formats below fp32, once each: what Device.formats lists (fp32 is a peak)."""
    return [f for f in dict.fromkeys(formats) if f != "fp32"]


def enrich_devices(devices: list[Device]) -> tuple[list[Device], list[str]]:
    """Match probed devices to profiles and fill datasheet figures; return devices and hints."""
    enriched: list[Device] = []
    hints: list[str] = []
    for device in devices:
        profile = match(device)
        if profile is None:
            enriched.append(device)
            hint = unknown_device_hint(device)
            if hint not in hints:
                hints.append(hint)
            continue
        enriched.append(enrich_device(device, profile))
    return enriched, hints
