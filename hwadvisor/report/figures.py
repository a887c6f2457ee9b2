"""Measured figures of a report, wherever they were recorded (device.measured or trial results).

gates, compare and plot all need "the measured memory bandwidth of device N" and "the measured
matmul TFLOP/s by format"; probe --measure writes them to device.measured, while validate keeps
them in its trial results. This module is the one place that knows both spots.
"""

from __future__ import annotations

from hwadvisor.models import Device, Report, TrialResult

# Trial ids whose GB/s figures are device-memory bandwidth (not PCIe or NVLink transfers).
MEMORY_BANDWIDTH_TRIALS: tuple[str, ...] = ("memory-bandwidth", "mem-bandwidth", "hbm-bandwidth")
# Trial ids whose TFLOP/s figures are dense-matmul peaks, one measurement per format.
MATMUL_PEAK_TRIALS: tuple[str, ...] = ("matmul-peak", "matmul", "gemm-peak")

GBPS_UNITS = {"gb/s", "gbps"}
TFLOPS_UNITS = {"tflop/s", "tflops"}


def _unit_is(unit: str | None, units: set[str]) -> bool:
    return unit is not None and unit.strip().lower() in units


def trial_device(report: Report, trial: TrialResult) -> Device | None:
    """Find the device a trial ran on: by its recorded index, by name, else the first device.

    Reports of schema 1.2 record the index (environment.device_index, NVML's numbering);
    older ones only the name, which cannot tell two GPUs of one model apart.
    """
    if not report.devices:
        return None
    index = trial.environment.device_index
    if index is not None:
        for device in report.devices:
            if device.index == index:
                return device
        return None  # it ran on a GPU this report does not list: attribute it to none
    where = (trial.environment.device or "").lower()
    if where.startswith("cpu"):
        # torch ran it on the CPU (older reports wrote 'cpu (<planned device>)'): its
        # figures belong to no GPU of the report.
        return None
    for device in report.devices:
        if where and device.name.lower() in where:
            return device
    return report.devices[0]


def _trials_on(report: Report, device: Device, ids: tuple[str, ...]) -> list[TrialResult]:
    found = []
    for trial in report.trials:
        if trial.status != "ok" or trial.id not in ids:
            continue
        ran_on = trial_device(report, trial)
        if ran_on is not None and ran_on.index == device.index:
            found.append(trial)
    return found


def measured_bandwidth_gbps(report: Report, device: Device) -> tuple[float, str] | None:
    """Return the measured memory bandwidth of device and its source; None if not measured."""
    if device.measured and device.measured.memory_bandwidth_gbps:
        return device.measured.memory_bandwidth_gbps, "device.measured"
    best: tuple[float, str] | None = None
    for trial in _trials_on(report, device, MEMORY_BANDWIDTH_TRIALS):
        for m in trial.measurements:
            if m.value is not None and _unit_is(m.value_unit, GBPS_UNITS):
                if best is None or m.value > best[0]:
                    best = (m.value, f"trial {trial.id}")
    return best


def _format_of(label: str, params: dict[str, float | int | str]) -> str:
    fmt = params.get("dtype") or params.get("format")
    return str(fmt) if fmt is not None else label


def measured_matmul_tflops(report: Report, device: Device) -> dict[str, float]:
    """Measured dense-matmul TFLOP/s by format: device.measured, then matmul-peak trials."""
    out: dict[str, float] = {}
    if device.measured:
        out.update(device.measured.matmul_tflops)
    for trial in _trials_on(report, device, MATMUL_PEAK_TRIALS):
        for m in trial.measurements:
            if m.value is not None and _unit_is(m.value_unit, TFLOPS_UNITS):
                fmt = _format_of(m.label, m.params)
                out[fmt] = max(out.get(fmt, 0.0), m.value)
    return out
