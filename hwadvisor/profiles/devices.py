"""Devices from profiles: a planned device built from its datasheet, a probed one's gaps filled.

Also the per-app memory limit of phones, the hardware rule that goes with their datasheets.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from hwadvisor.models import Device, DeviceClass, Interconnect, NvLinkInfo, PcieLink
from hwadvisor.models.hardware import NpuInfo
from hwadvisor.profiles.catalog import get, ids
from hwadvisor.profiles.match import match, memory_fits, resolve_variant
from hwadvisor.profiles.schema import GIB, Profile


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
                        gpu_link_domain=link.gpu_link_domain,
                        gpu_peer_access=link.gpu_peer_access)


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


def soc_part(profile: Profile) -> str | None:
    """Return the Qualcomm SoC part number (SM8750 ...) among the profile's name fragments."""
    return next((name for name in profile.match.names if re.fullmatch(r"SM\d{4}", name)), None)


def _profile_extras(profile: Profile) -> dict[str, Any]:
    """Return the Device fields every device built or enriched from a profile carries."""
    return {
        "soc_part": soc_part(profile),
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
        family=profile.family,
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


def _with_peer_access(link: Interconnect | None, profile: Profile) -> Interconnect | None:
    """Give the device the datasheet's word on peer access (the probe reads it per peer too)."""
    stated = profile.interconnect.gpu_peer_access if profile.interconnect else None
    if stated is None or (link is not None and link.gpu_peer_access is not None):
        return link
    return (link or Interconnect()).model_copy(update={"gpu_peer_access": stated})


def enrich_device(device: Device, profile: Profile, device_count: int = 1) -> Device:
    """Fill a probed device's gaps from its profile; what the probe read always wins."""
    notes = list(device.notes)
    effective, variant_name, variant_notes = resolve_variant(device, profile)
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
    update["interconnect"] = _with_peer_access(
        _enriched_interconnect(device, effective, device_count, notes), effective)
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


def with_family(device: Device) -> Device:
    """Return the device with its family set: guessed from what it carries when it has none.

    A probed device's family is guessed, not taken from its profile's file (the efficiency
    tables were fitted that way); the guess reads the figures the profile filled in too.
    """
    if device.family is not None:
        return device
    return device.model_copy(update={"family": device.guessed_family()})


def enrich_devices(devices: list[Device]) -> tuple[list[Device], list[str]]:
    """Match probed devices to profiles and fill datasheet figures; return devices and hints.

    Each device leaves with its family set (with_family), matched or not.
    """
    enriched: list[Device] = []
    hints: list[str] = []
    for device in devices:
        profile = match(device)
        if profile is None:
            enriched.append(with_family(device))
            hint = unknown_device_hint(device)
            if hint not in hints:
                hints.append(hint)
            continue
        enriched.append(with_family(enrich_device(device, profile, device_count=len(devices))))
    return enriched, hints


def restore_facts(device: Device) -> Device:
    """Give a device read back from a report the facts its JSON leaves out (family, SoC part).

    A planned device gets them from its profile's file, as device_from_profile set them; a
    probed one its SoC part from the profile it matched and its family by the probe's guess.
    An id no profile has any more leaves the SoC part unset (the engine's default applies).
    """
    if device.family is not None:
        return device
    update: dict[str, Any] = {}
    profile_id = device.profile_id
    if profile_id and device.source == "profile":
        # a variant id resolves; an id unknown here is a UserError, as planning it would be
        update["family"] = get(profile_id).family
    if profile_id in ids() and device.soc_part is None:
        update["soc_part"] = soc_part(get(profile_id))
    if profile_id in ids():
        update["interconnect"] = _with_peer_access(device.interconnect, get(profile_id))
    return with_family(device.model_copy(update=update))
