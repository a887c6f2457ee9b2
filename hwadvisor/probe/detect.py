"""Runs the vendor backends in a fixed, tested order and builds the probe report."""

from __future__ import annotations

import importlib
import platform
from collections.abc import Callable, Iterable, Sequence

from hwadvisor.models import Device, DeviceClass, Report
from hwadvisor.probe import presence
from hwadvisor.probe.base import Backend, BackendResult
from hwadvisor.probe.host import probe_host


def _nvidia() -> Backend:
    from hwadvisor.probe.nvml import get_nvml

    helper = get_nvml()
    if not helper.available():
        # The backend's own first answer, without loading its module (most hosts have no GPU).
        return _Found("nvidia", BackendResult(notes=[f"no NVIDIA GPU: {helper.reason}"]))
    from hwadvisor.probe.nvidia import NvidiaBackend

    return NvidiaBackend()


class _Found:
    """A backend whose answer is already known."""

    def __init__(self, name: str, result: BackendResult) -> None:
        self.name, self.result = name, result

    def probe(self) -> BackendResult:
        """Return the answer."""
        return self.result


def _after_check(name: str, absent: Callable[[], str | None],
                 path: str) -> Callable[[], Backend]:
    """Return a backend factory: its cheap "absent" answer, else its class ("module:Class").

    The module is imported only when the check finds something: no driver, tool or library
    means its module and tools are never loaded.
    """

    def make() -> Backend:
        reason = absent()
        if reason is not None:
            return _Found(name, BackendResult(notes=[reason]))
        module, _, cls = path.partition(":")
        return getattr(importlib.import_module(module), cls)()  # type: ignore[no-any-return]

    return make


# Detection order: discrete accelerators first (NVIDIA, then AMD), then SoCs with unified
# memory (Apple, then phones). The first backend that finds devices wins; none means cpu.
BACKEND_FACTORIES: dict[str, Callable[[], Backend]] = {
    "nvidia": _nvidia,
    # the lambdas look the checks up at call time (tests stand in for them)
    "amd": _after_check("amd", lambda: presence.amd_absent(), "hwadvisor.probe.amd:AmdBackend"),
    "apple": _after_check("apple", lambda: presence.not_macos(platform.system()),
                          "hwadvisor.probe.apple:AppleBackend"),
    "android": _after_check("android", lambda: presence.android_absent(),
                            "hwadvisor.probe.android:AndroidBackend"),
    "ios": _after_check("ios", lambda: presence.not_ios(platform.system()),
                        "hwadvisor.probe.ios:IosBackend"),
}
DETECTION_ORDER: tuple[str, ...] = ("nvidia", "amd", "apple", "android", "ios")


def run_backends(backends: Iterable[Backend]) -> BackendResult:
    """Try each backend in order; return the first that finds devices, with every note seen."""
    notes: list[str] = []
    for backend in backends:
        try:
            result = backend.probe()
        except Exception as exc:  # one broken backend must not stop the probe
            name = getattr(backend, "name", type(backend).__name__)
            notes.append(f"{name}: backend failed ({type(exc).__name__}: {exc})")
            continue
        notes.extend(result.notes)
        if result.devices:
            return BackendResult(devices=result.devices, notes=notes)
    return BackendResult(devices=[], notes=notes)


def collect(backends: Sequence[Backend] | None = None) -> Report:
    """Probe the host and its accelerators; never raises for missing drivers or libraries."""
    # Made one at a time: once NVIDIA finds a GPU the other backends' modules are never imported.
    found = run_backends(backends if backends is not None else
                         (BACKEND_FACTORIES[name]() for name in DETECTION_ORDER))
    if found.devices:  # the datasheets are read only when there is a device to match
        from hwadvisor.profiles import enrich_devices

        devices, hints = enrich_devices(found.devices)
        found = BackendResult(devices=devices, notes=found.notes + hints)
    device_class, class_notes = report_class(found.devices)
    host = probe_host()
    if device_class == DeviceClass.MOBILE_SOC:
        from hwadvisor.probe.mobile import app_memory_limit_bytes

        phone = next(d for d in found.devices if d.device_class == DeviceClass.MOBILE_SOC.value)
        limit = phone.app_memory_limit_bytes or app_memory_limit_bytes(phone)
        host = host.model_copy(update={"mobile_app_memory_limit_bytes": limit})
    notes = found.notes + class_notes if found.devices else _no_device_notes(found.notes)
    return Report(
        kind="probe",
        host=host,
        devices=found.devices,
        device_class=device_class,
        notes=notes,
    )


# Most capable first: the report's class is the most capable one among its devices, so an
# 8-GPU host whose GPU 0 a backend could not name still gets datacenter advice.
CLASS_RANK: tuple[DeviceClass, ...] = (
    DeviceClass.DATACENTER_GPU, DeviceClass.CONSUMER_GPU, DeviceClass.APPLE_SILICON,
    DeviceClass.MOBILE_SOC, DeviceClass.CPU,
)


def report_class(devices: Sequence[Device]) -> tuple[DeviceClass, list[str]]:
    """Derive the report's device class from every device: the most capable one present.

    A note names the devices' own classes when they differ; cpu when there is no device.
    """
    if not devices:
        return DeviceClass.CPU, []
    classes = [DeviceClass(d.device_class) for d in devices]
    chosen = min(classes, key=CLASS_RANK.index)
    if len(set(classes)) == 1:
        return chosen, []
    per_device = ", ".join(f"{d.index}: {c.value}" for d, c in zip(devices, classes, strict=True))
    return chosen, [f"devices differ in class ({per_device}); the report's class is the most "
                    f"capable present, {chosen.value}"]


def _no_device_notes(notes: list[str]) -> list[str]:
    """One line that says why there is no GPU (the first backend's reason), plus real failures.

    The other backends' "not macOS" / "not Android" lines are expected on a plain Linux host and
    would bury the one line that matters, so they are left out.
    """
    reason = notes[0] if notes else "no backend reported a device"
    failures = [line for line in notes[1:] if "failed" in line]
    return [f"{reason}; no other accelerator found, so the device class is cpu", *failures]
