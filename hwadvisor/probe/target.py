"""The hardware to plan for: a datasheet profile (--device ID) or what the probe finds here.

No torch on this path: planning for a device you do not have must stay fast and need no GPU.
"""

from __future__ import annotations

from typing import Any

from hwadvisor.errors import UserError
from hwadvisor.models import Device, DeviceClass, HostInfo, Report

MAX_PLANNED_DEVICES = 1024


def resolve_target(device_id: str | None, count: int = 1) -> Report:
    """Return a probe-kind report of the hardware to plan for.

    With a device id: `count` devices built from that profile (source "profile") on the real
    host. Without one: the probed report of this machine (`count` is then ignored, the probe
    says how many devices there are). Unknown ids and bad counts raise UserError (exit 2).
    """
    if device_id is None:
        from hwadvisor.probe import collect

        return collect()
    if not 1 <= count <= MAX_PLANNED_DEVICES:
        raise UserError(
            f"device count must be between 1 and {MAX_PLANNED_DEVICES}, got {count}",
            hint="pass the GPUs to plan for, e.g. --gpus 8, or --nodes 2 --gpus-per-node 8",
        )
    from hwadvisor import profiles
    from hwadvisor.probe.host import probe_host

    profile = profiles.get(device_id)
    devices = [profiles.device_from_profile(profile.id, index=i) for i in range(count)]
    host = probe_host()
    notes = [
        f"planning for {count} x {profile.name} from its datasheet profile ({profile.id}); "
        "these devices were not probed and the host is this machine"
    ]
    if profile.status == "announced":
        notes.append(f"{profile.name} is announced, not shipping: the plan uses announced figures")
    host, system_notes = _reference_host(host, profile)
    notes.extend(system_notes)
    limit = devices[0].app_memory_limit_bytes
    if limit is not None:
        # The per-app cap is what a phone plan must fit; probe/mobile.py computed it for the
        # device, and HostInfo carries it too by contract.
        host = host.model_copy(update={"mobile_app_memory_limit_bytes": limit})
        fraction = profile.mobile.app_memory_limit_fraction if profile.mobile else 0.0
        notes.append(
            f"per-app memory limit {limit / 2**30:.1f} GiB is an estimate ({fraction:.0%} of RAM); "
            f"'hwadvisor profiles show {profile.id}' gives its basis and sources"
        )
    return Report(
        kind="probe",
        host=host,
        devices=devices,
        device_class=profile.device_class,
        notes=notes,
    )


def _reference_host(host: HostInfo, profile: Any) -> tuple[HostInfo, list[str]]:
    """Give a planned report the host memory of the profile's reference system.

    Planning for hardware that is not here (an 8-GPU DGX from a laptop) should count on the
    memory of the machine the GPUs come in, not this one's; the rest of HostInfo stays this
    machine's, and the note says which is which. Phones and Macs are their own host: unchanged.
    """
    system = profile.system
    if system is None or profile.device_class.value in ("mobile-soc", "apple-silicon"):
        return host, []
    memory = int(system.host_memory_gib * 2**30)
    kind = "an assumption" if system.assumption else "the vendor's reference system"
    note = (f"host memory {system.host_memory_gib:g} GiB is {system.name}'s ({kind}, "
            f"{system.gpus_per_node} GPU(s) per node), not this machine's; the other host "
            "fields are this machine's")
    updated = host.model_copy(update={"memory_total_bytes": memory, "memory_available_bytes": None})
    return updated, [note]


def cpu_vendor(host: HostInfo) -> str:
    """'intel', 'amd', 'arm' or 'unknown' from the host's CPU model and architecture."""
    model = (host.cpu_model or "").lower()
    machine = (host.platform or "").lower()
    if "intel" in model or "xeon" in model:
        return "intel"
    if "amd" in model or "epyc" in model or "ryzen" in model:
        return "amd"
    if machine in ("arm64", "aarch64") or machine.startswith("armv") or "apple" in model:
        return "arm"
    return "unknown"


def cpu_device(host: HostInfo) -> Device:
    """Describe the CPU as the device to plan for when there is no accelerator.

    Memory is the host's RAM. Bandwidth and peak FLOP/s stay null: no CPU profiles ship; the
    probe's cores, SIMD flags and clock go with the device, and the perf model derives the
    matmul peaks from them (perfmodel/resources.py cpu_peaks) or states its fallbacks.
    """
    return Device(
        index=0,
        vendor=cpu_vendor(host),
        device_class=DeviceClass.CPU,
        name=host.cpu_model or "unknown CPU",
        memory_total_bytes=host.memory_total_bytes,
        memory_bandwidth_gbps=None,
        compute_units=host.cpu_cores,
        source="probe",
        family="cpu",  # the efficiency tables' row for CPUs (models/hardware.py guess_family)
        cpu_flags=list(host.cpu_flags),
        cpu_clock_mhz=host.cpu_clock_mhz,
        notes=[
            "no accelerator found: planning for the CPU with the host's RAM; memory bandwidth "
            "is unknown, the matmul peaks come from its cores, SIMD flags and clock"
        ],
    )


def primary_device(report: Report) -> Device:
    """Return the device to shape advice for: the first device, else the host CPU."""
    if report.devices:
        return report.devices[0]
    return cpu_device(report.host)
