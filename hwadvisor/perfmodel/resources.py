"""What the device offers the model: bandwidth, peak FLOP/s for the compute dtype, usable memory.

Prefers measured figures (device.measured, from the validator's trials) over datasheet ones,
and datasheet ones over stated fallbacks; every choice is written into the assumptions.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hwadvisor.models import Device, ModelOptions, Workload
from hwadvisor.perfmodel import constants as C


@dataclass
class Resources:
    """The device figures one estimate uses, with the reasons they were chosen."""

    device_class: str
    bandwidth_gbps: float
    peak_tflops: float
    compute_dtype: str
    memory_total_bytes: int | None
    usable_memory_bytes: int | None
    assumptions: list[str] = field(default_factory=list)

    @property
    def ridge_flop_per_byte(self) -> float:
        """FLOP per byte at which compute and memory time are equal."""
        return self.peak_tflops * 1e12 / (self.bandwidth_gbps * C.GB)


def _device_class(device: Device) -> str:
    value = device.device_class
    return value.value if hasattr(value, "value") else str(value)


def compute_dtype(workload: Workload, options: ModelOptions, device: Device) -> str:
    """Return the dtype the matmuls run in.

    fp8/int8/fp4 weights run their matmuls in that format when the device has it (W8A8 /
    FP8 training with Transformer Engine / NVFP4); int4 is weight-only (dequantized to the
    activation dtype, so it saves bytes, not FLOPs). Training without mixed precision is fp32.
    """
    weights = workload.weights_dtype
    has = set(device.formats) | set(device.peak_tflops) | set(
        device.measured.matmul_tflops if device.measured else {})
    if workload.phase == "training" and not options.mixed_precision:
        return "fp32"
    if weights in ("fp8", "int8", "fp4") and weights in has:
        return weights
    if weights in ("fp32", "tf32"):
        return weights
    act = workload.activation_dtype
    return act if act in ("bf16", "fp16", "fp32") else "bf16"


# When the device lists no peak for the dtype, the next one tried (a stated fallback).
_PEAK_FALLBACK: dict[str, list[str]] = {
    "bf16": ["fp16"],
    "fp16": ["bf16"],
    "fp8": ["bf16", "fp16"],
    "int8": ["bf16", "fp16"],
    "fp4": ["fp8", "bf16", "fp16"],
    "tf32": ["fp32"],
    "fp32": ["tf32"],
}


def _peak(device: Device, dtype: str, notes: list[str]) -> tuple[float | None, str]:
    measured = device.measured.matmul_tflops if device.measured else {}
    for candidate in [dtype, *_PEAK_FALLBACK.get(dtype, [])]:
        if measured.get(candidate):
            notes.append(f"compute peak: measured {candidate} matmul "
                         f"{measured[candidate]:.0f} TFLOP/s (device.measured)")
            return float(measured[candidate]), candidate
        if device.peak_tflops.get(candidate):
            notes.append(f"compute peak: datasheet {candidate} dense "
                         f"{device.peak_tflops[candidate]:g} TFLOP/s")
            return float(device.peak_tflops[candidate]), candidate
    return None, dtype


def resolve(workload: Workload, device: Device, options: ModelOptions) -> Resources:
    """Bandwidth, peak and usable memory for this workload on this device, with assumptions."""
    notes: list[str] = []
    cls = _device_class(device)
    measured_bw = device.measured.memory_bandwidth_gbps if device.measured else None
    if measured_bw:
        bandwidth = float(measured_bw)
        notes.append(f"memory bandwidth: measured {bandwidth:.0f} GB/s (device.measured)")
    elif device.memory_bandwidth_gbps:
        bandwidth = float(device.memory_bandwidth_gbps)
        src = device.memory_bandwidth_source or "device"
        notes.append(f"memory bandwidth: {src} {bandwidth:g} GB/s (theoretical peak)")
    else:
        bandwidth = C.FALLBACK_BANDWIDTH_GBPS.get(cls, 50.0)
        notes.append(f"memory bandwidth unknown: assumed {bandwidth:g} GB/s for a {cls} "
                     "(stated assumption, not a reading)")

    dtype = compute_dtype(workload, options, device)
    peak, used = _peak(device, dtype, notes)
    if peak is None:
        peak = C.FALLBACK_TFLOPS.get(cls, 1.0)
        notes.append(f"compute peak unknown: assumed {peak:g} TFLOP/s for a {cls} "
                     "(stated assumption, not a reading)")
    elif used != dtype:
        notes.append(f"no {dtype} peak listed for {device.name}: used the {used} peak")
        dtype = used

    total = device.memory_total_bytes
    usable: int | None = None
    if device.app_memory_limit_bytes:
        # A phone: the OS caps one app far below its RAM (probe/mobile.py computes the cap).
        usable = int(device.app_memory_limit_bytes)
        notes.append(f"usable memory: the per-app limit {usable / C.GB:.1f} GB of "
                     f"{(total or 0) / C.GB:.1f} GB RAM (mobile OS)")
    elif total:
        fraction = C.USABLE_MEMORY_FRACTION.get(cls, 1.0)
        usable = int(total * fraction)
        if fraction < 1.0:
            notes.append(f"usable memory: {fraction:.0%} of {total / C.GB:.1f} GB on a {cls} "
                         "(OS / Metal working-set / app limits)")
    else:
        notes.append("device memory unknown: the fit is not checked")
    return Resources(cls, bandwidth, peak, dtype, total, usable, notes)
