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
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from hwadvisor.errors import UserError
from hwadvisor.models import Device, DeviceClass, Interconnect, NvLinkInfo, PcieLink
from hwadvisor.models.hardware import ComputePath, GpuLinkKind, NpuInfo

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
    "npu", "system", "variants",
)
_ID_RE = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
# The performance families the efficiency tables know (perfmodel/efficiency.py keys its rows
# by these; tests/probe/test_profiles.py checks the two agree). A profile states its own.
FAMILIES: tuple[str, ...] = (
    "nvidia-hopper", "nvidia-blackwell", "nvidia-ampere-hbm", "nvidia-ada-dc", "nvidia-ada",
    "nvidia-ampere-dc", "nvidia-ampere", "nvidia-older", "amd-cdna3", "amd-cdna2", "amd-rdna3",
    "apple-ultra", "apple-max", "apple-pro", "apple-base", "mobile", "cpu", "default",
)
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
    gpu_link_kind: GpuLinkKind | None = Field(
        None, description="How this GPU reaches its peers: nvlink, nvlink-bridge, xgmi or pcie"
    )
    gpu_link_gbps: float | None = Field(
        None, gt=0, description="That link's bandwidth per GPU, ONE direction, GB/s"
    )
    gpu_link_domain: int | None = Field(
        None, ge=1, description="How many GPUs the link joins in the reference system "
        "(8 on HGX/DGX/MI300X boards, 2 for bridged card pairs, 1 when there is none)"
    )

    @model_validator(mode="after")
    def _link_complete(self) -> ProfileInterconnect:
        given = [self.gpu_link_kind, self.gpu_link_gbps, self.gpu_link_domain]
        if any(v is not None for v in given) and any(v is None for v in given):
            raise ValueError("gpu_link_kind, gpu_link_gbps and gpu_link_domain go together")
        return self


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
    """Per-app memory and sustained performance on a phone, each with its reasoning."""

    app_memory_limit_fraction: float = Field(gt=0, le=1)
    basis: str
    sustained_fraction: float | None = Field(
        None, gt=0, le=1, description="Share of peak the phone sustains after minutes of load "
        "(phones throttle within minutes); from published stress tests"
    )
    sustained_basis: str | None = Field(
        None, description="Which published test the sustained fraction comes from"
    )

    @model_validator(mode="after")
    def _sustained_explained(self) -> ProfileMobile:
        if (self.sustained_fraction is None) != (self.sustained_basis is None):
            raise ValueError("mobile.sustained_fraction needs mobile.sustained_basis (and back)")
        return self


class ProfileNpu(_ProfileBase):
    """A neural engine / NPU, with the figures its vendor publishes (none invented)."""

    name: str
    int8_tops: float | None = Field(None, gt=0)
    int4_tops: float | None = Field(None, gt=0)
    fp16_tops: float | None = Field(None, gt=0)
    unstated_tops: float | None = Field(
        None, gt=0, description="A TOPS figure the vendor states without saying its precision"
    )
    note: str = Field(description="Where the figures come from, or why there are none")

    def tops(self) -> dict[str, float]:
        """Return the published TOPS by format ('unstated' when the vendor gives no precision)."""
        pairs = {"int8": self.int8_tops, "int4": self.int4_tops, "fp16": self.fp16_tops,
                 "unstated": self.unstated_tops}
        return {fmt: value for fmt, value in pairs.items() if value is not None}


class ProfileSystem(_ProfileBase):
    """The reference system planning assumes when the hardware is not present."""

    name: str = Field(description="e.g. 'NVIDIA DGX H100', or 'a typical desktop'")
    gpus_per_node: int = Field(ge=1)
    max_gpus_per_node: int | None = Field(
        None, ge=1, description="The most of these GPUs one machine takes, when more than the "
        "reference system's (a workstation's four x16 slots for a desktop card); --gpus up to "
        "it plans one machine")
    host_memory_gib: float = Field(gt=0)
    assumption: bool = Field(
        False, description="True when no vendor reference system exists and these are assumed"
    )
    basis: str

    @model_validator(mode="after")
    def _max_holds_the_reference(self) -> ProfileSystem:
        if self.max_gpus_per_node is not None and self.max_gpus_per_node < self.gpus_per_node:
            raise ValueError(f"max_gpus_per_node {self.max_gpus_per_node} is below "
                             f"gpus_per_node {self.gpus_per_node}")
        return self


class ProfileVariant(_ProfileBase):
    """One configuration of a chip sold in several (GPU cores, CPU cores, memory, bandwidth)."""

    id: str = Field(description="'<profile id>-<suffix>', e.g. m3-max-30c; --device accepts it")
    name: str = Field(description="What Device.variant says, e.g. '30-core GPU'")
    gpu_cores: int | None = Field(None, ge=1)
    cpu_cores: list[int] = Field(default_factory=list, description="CPU core counts sold with it")
    performance_cores: list[int] = Field(
        default_factory=list, description="Performance-core counts (sysctl hw.perflevel0)"
    )
    memory_options_gib: list[float] = Field(default_factory=list)
    memory_bandwidth_gbps: float = Field(gt=0)
    peak_tflops: dict[str, float] = Field(default_factory=dict)


class Profile(_ProfileBase):
    """One device's datasheet figures, each group with its sources (the profiles/*.toml schema)."""

    id: str
    name: str
    vendor: str
    device_class: DeviceClass
    family: str = Field(description="The performance family the efficiency tables key on "
                        "(perfmodel/efficiency.py), e.g. nvidia-hopper, apple-max")
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
    status: Literal["shipping", "announced"] = Field(
        "shipping", description="announced: planned from announced figures, not a shipping part"
    )
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
    npu: ProfileNpu | None = None
    compute: list[ComputePath] = Field(
        default_factory=list, description="On-device matmul rates by unit, delegate and dtype, "
        "each with its basis and source (peak where the vendor publishes one, else effective "
        "from a published run)")
    system: ProfileSystem | None = None
    variants: list[ProfileVariant] = Field(
        default_factory=list, description="Configurations sold; the top-level figures are the top"
    )
    variant_of: str | None = Field(
        None, description="Set (never in a file) on a profile resolved from another's variants"
    )
    variant_name: str | None = Field(None, description="That variant's name; never in a file")
    sources: dict[str, list[str]]
    notes: list[str] = Field(default_factory=list)

    @field_validator("id")
    @classmethod
    def _id_form(cls, value: str) -> str:
        if not _ID_RE.match(value):
            raise ValueError(f"id {value!r} must be lower-case words joined by dashes")
        return value

    @field_validator("family")
    @classmethod
    def _known_family(cls, value: str) -> str:
        if value not in FAMILIES:
            raise ValueError(f"family {value!r} is not one of {', '.join(FAMILIES)}")
        return value

    @field_validator("peak_tflops")
    @classmethod
    def _peak_keys(cls, value: dict[str, float]) -> dict[str, float]:
        return _checked_peaks(value)

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
        if self.peak_tflops:
            needed.add("compute")
        for optional, group in ((self.npu, "npu"), (self.system, "system")):
            if optional is not None:
                needed.add(group)
        if self.variants:
            needed.add("variants")
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

    @model_validator(mode="after")
    def _announced_says_so(self) -> Profile:
        if self.status == "announced" and not any("announced" in n.lower() for n in self.notes):
            raise ValueError("an announced part must say so in its notes (which announcement)")
        return self

    @model_validator(mode="after")
    def _variants_consistent(self) -> Profile:
        if not self.variants:
            return self
        ids = [v.id for v in self.variants]
        if len(set(ids)) != len(ids):
            raise ValueError(f"duplicate variant ids in {self.id}: {ids}")
        for variant in self.variants:
            if not (_ID_RE.match(variant.id) and variant.id.startswith(f"{self.id}-")):
                raise ValueError(f"variant id {variant.id!r} must read '{self.id}-<suffix>'")
            _checked_peaks(variant.peak_tflops)
        if self.top_variant() is None:
            raise ValueError(
                f"{self.id}: one variant must be the top configuration (its gpu_cores, bandwidth "
                "and peaks equal the profile's own figures)"
            )
        return self

    def top_variant(self) -> ProfileVariant | None:
        """Return the variant whose figures are the profile's own (the top configuration)."""
        for variant in self.variants:
            cores_agree = variant.gpu_cores is None or variant.gpu_cores == self.compute_units
            if (cores_agree and variant.memory_bandwidth_gbps == self.memory_bandwidth_gbps
                    and variant.peak_tflops == self.peak_tflops):
                return variant
        return None

    def variant(self, key: str) -> ProfileVariant | None:
        """Return the variant with this id or name (case ignored); None when there is none."""
        wanted = key.strip().lower()
        for variant in self.variants:
            if wanted in (variant.id, variant.name.lower()):
                return variant
        return None

    def for_variant(self, variant: ProfileVariant) -> Profile:
        """Return the profile with a variant's figures: what `--device <variant id>` plans with."""
        if variant is self.top_variant():
            return self
        sizes = variant.memory_options_gib or self.memory_options_gib
        update: dict[str, Any] = {
            "id": variant.id,
            "name": f"{self.name} ({variant.name})",
            "compute_units": variant.gpu_cores or self.compute_units,
            "memory_bandwidth_gbps": variant.memory_bandwidth_gbps,
            "peak_tflops": dict(variant.peak_tflops),
            "memory_options_gib": list(sizes),
            "memory_gib": max(sizes) if sizes else self.memory_gib,
            "variants": [],
            "variant_of": self.id,
            "variant_name": variant.name,
            "notes": [f"configuration {variant.name} of {self.name} (profile {self.id})",
                      *self.notes],
        }
        return self.model_copy(update=update)

    def is_derived(self, figure: str) -> bool:
        """Whether a figure ('memory_bandwidth_gbps', 'peak_tflops.fp32' ...) is computed."""
        return figure in self.derived_figures

    @property
    def memory_total_bytes(self) -> int:
        """The profile's memory in bytes."""
        return int(self.memory_gib * GIB)


def _checked_peaks(value: dict[str, float]) -> dict[str, float]:
    unknown = sorted(set(value) - set(PEAK_FORMATS))
    if unknown:
        raise ValueError(f"unknown peak formats {unknown}; use {', '.join(PEAK_FORMATS)}")
    if any(v <= 0 for v in value.values()):
        raise ValueError("peaks must be positive; leave a format out when it is unknown")
    return value


# --- loading -------------------------------------------------------------------------------


# No profile id is longer; a longer one is not looked up as a file (names over 255 bytes fail
# with ENAMETOOLONG on Linux file systems).
MAX_ID_CHARS = 100


def _profile_file(file_name: str) -> bytes | None:
    """Read one profile file (package data, else the repo's profiles/); None if absent."""
    try:
        entry: Any = resources.files("hwadvisor.profiles_data").joinpath(file_name)
        if entry.is_file():
            return bytes(entry.read_bytes())
    except (ModuleNotFoundError, FileNotFoundError, NotADirectoryError):
        pass
    path = Path(__file__).resolve().parent.parent / "profiles" / file_name
    return path.read_bytes() if path.is_file() else None


@functools.cache
def _load_one(profile_id: str) -> Profile | None:
    """Parse the profile in `<id>.toml` alone; None when there is no such file.

    `recommend --device h200-sxm` reads one file, not all of them (load_all, which also checks
    ids across files, reads the rest when asked).
    """
    if not profile_id.replace("-", "").replace("_", "").isalnum() \
            or len(profile_id) > MAX_ID_CHARS:
        return None  # not a file name: never a path (nor one the file system refuses)
    data = _profile_file(f"{profile_id}.toml")
    return None if data is None else parse_profile(f"{profile_id}.toml", data)


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
    if profile.variant_of is not None or profile.variant_name is not None:
        raise ValueError(f"profile {file_name}: variant_of/variant_name are set by hwadvisor only")
    return profile


@functools.lru_cache(maxsize=1)
def load_all() -> tuple[Profile, ...]:
    """Every shipped profile, sorted by id (read once, cached)."""
    profiles = [parse_profile(name, data) for name, data in _profile_files()]
    ids = [p.id for p in profiles] + [v.id for p in profiles for v in p.variants]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise ValueError(f"duplicate profile or variant ids: {duplicates}")
    return tuple(sorted(profiles, key=lambda p: p.id))


def ids() -> list[str]:
    """Return the ids of every profile file, sorted (variant ids: variant_ids())."""
    return [p.id for p in load_all()]


def variant_ids() -> list[str]:
    """Return the ids of every configuration listed under a profile's [[variants]], sorted."""
    return sorted(v.id for p in load_all() for v in p.variants)


def suggest(text: str, limit: int = 3) -> list[str]:
    """Known ids close to text: ids containing it first ('h200' -> h200-sxm), then difflib's."""
    wanted = text.strip().lower()
    known = ids() + variant_ids()
    containing = [i for i in known if wanted and wanted in i]
    similar = difflib.get_close_matches(wanted, known, n=limit, cutoff=0.4)
    return list(dict.fromkeys([*containing, *similar]))[:limit]


def get(profile_id: str) -> Profile:
    """Return the profile with this id, or a variant id resolved to that configuration.

    `m3-max` is the top configuration; `m3-max-30c` is the same profile with the 30-core GPU
    variant's figures. An unknown id is a UserError (exit 2) naming close ids.
    """
    wanted = profile_id.strip().lower()
    found = _load_one(wanted) if load_all.cache_info().currsize == 0 else None
    if found is not None:
        return found
    for profile in load_all():
        if profile.id == wanted:
            return profile
    for profile in load_all():
        variant = profile.variant(wanted)
        if variant is not None and variant.id == wanted:
            return profile.for_variant(variant)
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


# --- variants ------------------------------------------------------------------------------


@dataclass(frozen=True)
class VariantChoice:
    """The configuration a probed chip is taken to be, and the readings that chose it."""

    variant: ProfileVariant | None
    evidence: list[str]
    note: str


# macOS reports the RAM exactly (sysctl hw.memsize), so a configuration's memory size is told
# apart within a narrow band, not the wide SKU band used for matching GPUs.
VARIANT_MEMORY_BAND = (0.97, 1.03)


def _fits_memory(variant: ProfileVariant, memory_bytes: int) -> bool:
    low, high = VARIANT_MEMORY_BAND
    return any(low <= memory_bytes / (size * GIB) <= high for size in variant.memory_options_gib)


def choose_variant(
    profile: Profile,
    gpu_cores: int | None = None,
    cpu_cores: int | None = None,
    performance_cores: int | None = None,
    memory_bytes: int | None = None,
) -> VariantChoice:
    """Pick the configuration of a chip sold in several, from what was read.

    The GPU core count decides when it was read. Failing that, CPU core counts and the memory
    size narrow the configurations down; when several remain, the top one's figures are kept
    (the profile's own) and the note says the configuration is unknown. Only readings that
    were actually given are named as evidence.
    """
    top = profile.top_variant()
    if not profile.variants:
        return VariantChoice(None, [], "")
    if gpu_cores is not None:
        by_cores = [v for v in profile.variants if v.gpu_cores == gpu_cores]
        if len(by_cores) == 1:
            variant = by_cores[0]
            return VariantChoice(variant, [f"{gpu_cores} GPU cores"],
                                 f"configuration {variant.name} chosen by its GPU core count "
                                 f"({gpu_cores})")
        if not by_cores:
            return VariantChoice(None, [], f"configuration unknown: {gpu_cores} GPU cores match "
                                 f"no configuration of {profile.name}; the top configuration's "
                                 "figures are used")
    remaining = list(profile.variants)
    evidence: list[str] = []
    filters: list[tuple[str, Any]] = []
    if cpu_cores is not None:
        filters.append((f"{cpu_cores} CPU cores",
                        lambda v: not v.cpu_cores or cpu_cores in v.cpu_cores))
    if performance_cores is not None:
        filters.append((f"{performance_cores} performance cores",
                        lambda v: (not v.performance_cores
                                   or performance_cores in v.performance_cores)))
    if memory_bytes:
        filters.append((f"{memory_bytes / GIB:.0f} GiB memory",
                        lambda v: not v.memory_options_gib or _fits_memory(v, memory_bytes)))
    for label, keep in filters:
        narrowed = [v for v in remaining if keep(v)]
        if narrowed and len(narrowed) < len(remaining):
            evidence.append(label)
            remaining = narrowed
    if len(remaining) == 1:
        variant = remaining[0]
        return VariantChoice(variant, evidence, f"configuration {variant.name} chosen by "
                             f"{' and '.join(evidence)}")
    read = ", ".join(label for label, _ in filters) or "no core count or memory size"
    names = " or ".join(v.name for v in remaining)
    top_name = top.name if top is not None else "top"
    return VariantChoice(None, [], f"configuration unknown ({names}; read: {read}); the "
                         f"{top_name} configuration's figures are used, an upper bound")


def _resolved(device: Device, profile: Profile) -> tuple[Profile, str | None, list[str]]:
    """Return the profile (or variant) a probed device is planned with, its name and notes."""
    if not profile.variants:
        return profile, None, []
    if device.variant:
        chosen = profile.variant(device.variant)
        if chosen is not None:
            return profile.for_variant(chosen), chosen.name, []
    if any(note.startswith("configuration ") for note in device.notes):
        return profile, None, []  # the backend already weighed more readings and said why
    choice = choose_variant(profile, gpu_cores=device.compute_units,
                            memory_bytes=device.memory_total_bytes)
    notes = [choice.note] if choice.note else []
    if choice.variant is None:
        return profile, None, notes
    return profile.for_variant(choice.variant), choice.variant.name, notes


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
    return Interconnect(pcie=pcie, nvlink=nvlink, network_gbps=link.network_gbps_per_gpu,
                        gpu_link_kind=link.gpu_link_kind, gpu_link_gbps=link.gpu_link_gbps,
                        gpu_link_domain=link.gpu_link_domain)


def npu_info(profile: Profile) -> NpuInfo | None:
    """Return the profile's NPU as the report model carries it (None when it has none)."""
    if profile.npu is None:
        return None
    return NpuInfo(name=profile.npu.name, tops=profile.npu.tops(), note=profile.npu.note)


def _mobile_os(profile: Profile) -> str | None:
    if profile.device_class != DeviceClass.MOBILE_SOC:
        return None
    return "ios" if profile.vendor == "apple" else "android"


# --- the per-app memory limit of phones -------------------------------------------------

@dataclass(frozen=True)
class AppMemoryRule:
    """The share of RAM one app can count on, with why and where it comes from."""

    fraction: float
    basis: str
    sources: tuple[str, ...]


# Per-app memory rules by mobile OS. Neither Apple nor Google publishes a fixed limit, so
# these are estimates; the datasheet profiles (profiles/*.toml [mobile]) use the same figure
# and, when a phone matches one, its fraction wins (see app_memory_limit_bytes below).
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


def mobile_app_memory_limit_bytes(profile: Profile) -> int | None:
    """Estimate the per-app memory limit on a phone (None for other classes).

    The rule is APP_MEMORY_RULES above; this applies it to the profile's nominal RAM.
    """
    mobile_os = _mobile_os(profile)
    if mobile_os is None:
        return None
    fraction = profile.mobile.app_memory_limit_fraction if profile.mobile else None
    return app_memory_limit_for(profile.memory_total_bytes, mobile_os, fraction)


def _device_app_memory_limit(device: Device, profile: Profile) -> int | None:
    if _mobile_os(profile) is None or device.device_class != DeviceClass.MOBILE_SOC.value:
        return None
    fraction = profile.mobile.app_memory_limit_fraction if profile.mobile else None
    return app_memory_limit_bytes(device, profile_fraction=fraction)


def _profile_extras(profile: Profile) -> dict[str, Any]:
    """Return the Device fields every device built or enriched from a profile carries."""
    return {
        "status": profile.status if profile.status != "shipping" else None,
        "npu": npu_info(profile),
        "compute_paths": list(profile.compute),
        "sustained_fraction": profile.mobile.sustained_fraction if profile.mobile else None,
        "gpus_per_node": profile.system.gpus_per_node if profile.system else None,
        "max_gpus_per_node": profile.system.max_gpus_per_node if profile.system else None,
    }


def _status_notes(profile: Profile) -> list[str]:
    if profile.status == "announced":
        return [f"{profile.name} is announced, not shipping: its figures are the vendor's "
                "announced ones and may change"]
    return []


def device_from_profile(profile_id: str, index: int = 0) -> Device:
    """Build a planned device from a profile (source 'profile'); unknown ids raise UserError."""
    profile = get(profile_id)
    device = Device(
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
        variant=profile.variant_name,
        notes=[f"planned from the datasheet profile {profile.id}; nothing was measured",
               *_status_notes(profile), *profile.notes],
        **_profile_extras(profile),
    )
    limit = _device_app_memory_limit(device, profile)
    return device.model_copy(update={"app_memory_limit_bytes": limit}) if limit else device


def _probe_cannot_see_links(device: Device) -> bool:
    """AMD's sources give no GPU-to-GPU link facts; NVML reads NVLink (so none is invented)."""
    return device.vendor != "nvidia"


def _enriched_interconnect(device: Device, profile: Profile, device_count: int,
                           notes: list[str]) -> Interconnect | None:
    """Fill link facts the probe could not read from the datasheet, inventing no fast link.

    NVLink bandwidth is filled only where the probe saw NVLink links (a single-GPU VM slice,
    or links NVML could not read, get none, so no plan counts on links that are absent). The
    GPU link is taken from the profile where the probe cannot see links at all (AMD's xGMI),
    its domain capped at the GPUs present, or where the profile says PCIe (always there).
    """
    current = device.interconnect
    link = profile.interconnect
    one_way = _nvlink_one_direction_gbps(profile)
    if current is not None and current.nvlink is not None and one_way is not None:
        nvlink = current.nvlink
        if nvlink.bandwidth_gbps is None and nvlink.links_active != 0:
            current = current.model_copy(update={
                "nvlink": nvlink.model_copy(update={"bandwidth_gbps": one_way})})
            if current.gpu_link_kind == "nvlink" and current.gpu_link_gbps is None:
                current = current.model_copy(update={"gpu_link_gbps": one_way})
    if link is None or link.gpu_link_kind is None:
        return current
    if current is not None and current.gpu_link_kind is not None:
        if (current.gpu_link_domain is None and current.gpu_link_kind != "pcie"
                and link.gpu_link_kind != "pcie"):
            # NVLink seen, but not where it goes: the datasheet's domain, capped at the GPUs here.
            domain = min(link.gpu_link_domain or 1, max(device_count, 1))
            notes.append(f"GPU link domain {domain} is the datasheet's ({profile.id}, "
                         f"{link.gpu_link_domain}) capped at the {device_count} GPU(s) found; "
                         "the probe could not tell which GPUs the links reach")
            current = current.model_copy(update={"gpu_link_domain": domain})
        return current
    saw_nvlink = current is not None and current.nvlink is not None
    if not (link.gpu_link_kind == "pcie" or (_probe_cannot_see_links(device) and not saw_nvlink)):
        return current
    domain = min(link.gpu_link_domain or 1, max(device_count, 1))
    filled = (current or Interconnect()).model_copy(update={
        "gpu_link_kind": link.gpu_link_kind,
        "gpu_link_gbps": link.gpu_link_gbps,
        "gpu_link_domain": domain,
    })
    if link.gpu_link_kind != "pcie":
        notes.append(f"GPU link {link.gpu_link_kind} {link.gpu_link_gbps:g} GB/s per direction "
                     f"is the datasheet's (profile {profile.id}), not read; domain {domain} of "
                     f"{link.gpu_link_domain} as {device_count} GPU(s) were found")
    return filled


def enrich_device(device: Device, profile: Profile, device_count: int = 1) -> Device:
    """Fill a probed device's gaps from its profile; what the probe read always wins."""
    notes = list(device.notes)
    effective, variant_name, variant_notes = _resolved(device, profile)
    notes.extend(variant_notes)
    update: dict[str, Any] = {"profile_id": effective.id}
    if effective.peak_tflops and not device.peak_tflops:
        update["peak_tflops"] = dict(effective.peak_tflops)
        update["peak_tflops_source"] = _peak_source(effective)
    if device.memory_bandwidth_gbps is None:
        update["memory_bandwidth_gbps"] = effective.memory_bandwidth_gbps
        update["memory_bandwidth_source"] = _bandwidth_source(effective)
    # what the probe read stays as read; the profile adds its formats below fp32
    update["formats"] = list(dict.fromkeys([*device.formats, *low_precision(effective.formats)]))
    for field in ("memory_type", "compute_capability", "architecture", "compute_units", "power_w"):
        if getattr(device, field) is None and getattr(effective, field) is not None:
            update[field] = getattr(effective, field)
    update["interconnect"] = _enriched_interconnect(device, effective, device_count, notes)
    for field, value in _profile_extras(effective).items():
        if getattr(device, field) in (None, False) and value is not None:
            update[field] = value
    if variant_name is not None:
        update["variant"] = variant_name
    limit = _device_app_memory_limit(device.model_copy(update={"profile_id": effective.id}),
                                     effective)
    if limit is not None and device.app_memory_limit_bytes is None:
        update["app_memory_limit_bytes"] = limit
    notes.extend(_status_notes(effective))
    if memory_fits(device, effective) is False and device.memory_total_bytes:
        notes.append(
            f"memory {device.memory_total_bytes / GIB:.1f} GiB does not fit profile "
            f"{effective.id} ({effective.memory_gib:g} GiB); its datasheet figures may not apply"
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
        enriched.append(enrich_device(device, profile, device_count=len(devices)))
    return enriched, hints
