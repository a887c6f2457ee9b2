"""Matching a probed device to its profile: PCI ids, then name fragments, then memory size.

Chips sold in several configurations (Apple's M-series) are then narrowed to one variant by
what the probe read (GPU cores, CPU cores, memory).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from hwadvisor.models import Device
from hwadvisor.profiles.catalog import load_all
from hwadvisor.profiles.schema import GIB, PCI_HEX_RE, Profile, ProfileVariant

# A probed memory size counts as "this SKU" within this band of a profile's size: drivers
# reserve a little (80 GB H100 reads 79.6 GiB) and phones report less than the nominal RAM.
MEMORY_MATCH_BAND = (0.75, 1.10)


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
        if PCI_HEX_RE.match(vendor) and PCI_HEX_RE.match(device):
            return vendor, device
        return None
    text = text.removeprefix("0x")
    if len(text) == 8 and all(c in "0123456789abcdef" for c in text):
        # NVML packs (device << 16) | vendor: 0x233510DE is device 0x2335 of vendor 0x10de.
        return text[4:], text[:4]
    if PCI_HEX_RE.match(text):
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


def resolve_variant(device: Device, profile: Profile) -> tuple[Profile, str | None, list[str]]:
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
