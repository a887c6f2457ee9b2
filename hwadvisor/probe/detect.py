"""Runs the vendor backends in a fixed, tested order and builds the probe report."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from hwadvisor.models import DeviceClass, Report
from hwadvisor.probe.base import Backend, BackendResult
from hwadvisor.probe.host import probe_host


def _nvidia() -> Backend:
    from hwadvisor.probe.nvidia import NvidiaBackend

    return NvidiaBackend()


# Detection order: discrete accelerators first (NVIDIA, then AMD), then SoCs with unified
# memory (Apple, then phones). The first backend that finds devices wins; none means cpu.
BACKEND_FACTORIES: dict[str, Callable[[], Backend]] = {"nvidia": _nvidia}
DETECTION_ORDER: tuple[str, ...] = ("nvidia",)


def run_backends(backends: Sequence[Backend]) -> BackendResult:
    """Try each backend in order; return the first that finds devices, with every note seen."""
    notes: list[str] = []
    for backend in backends:
        result = backend.probe()
        notes.extend(result.notes)
        if result.devices:
            return BackendResult(devices=result.devices, notes=notes)
    return BackendResult(devices=[], notes=notes)


def collect(backends: Sequence[Backend] | None = None) -> Report:
    """Probe the host and its accelerators; never raises for missing drivers or libraries."""
    if backends is None:
        backends = [BACKEND_FACTORIES[name]() for name in DETECTION_ORDER]
    found = run_backends(backends)
    from hwadvisor.profiles import enrich_devices

    devices, hints = enrich_devices(found.devices)
    found = BackendResult(devices=devices, notes=found.notes + hints)
    device_class = DeviceClass(found.devices[0].device_class) if found.devices else DeviceClass.CPU
    return Report(
        kind="probe",
        host=probe_host(),
        devices=found.devices,
        device_class=device_class,
        notes=found.notes,
    )
