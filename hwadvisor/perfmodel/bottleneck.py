"""The bottleneck of the deciding phase, and the numbers that decided it.

The phase's time is a sum over op groups (compute.py), so the bottleneck compares sums: the
time of the groups that are compute-bound against those that are memory-bound, the kernel
floors and host time beyond all rooflines (launch-overhead), and the exposed communication.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hwadvisor import units
from hwadvisor.models import Bottleneck, MemoryEstimate
from hwadvisor.perfmodel import constants as C


@dataclass
class PhaseTimes:
    """The terms of one phase's time, in seconds, and its traffic.

    compute_bound_s / memory_bound_s split the op groups' time by which term bounds each group;
    left None (a caller with whole-phase terms only) the larger of compute_s and memory_s
    takes it all.
    """

    name: str  # decode step, prefill, training step
    compute_s: float  # sum of the op groups' compute terms
    memory_s: float  # sum of the op groups' memory terms
    launch_s: float  # everything beyond the groups' rooflines (kernel floors, host)
    comm_exposed_s: float
    flops: float
    device_bytes: float
    host_bytes: float = 0.0
    compute_bound_s: float | None = None
    memory_bound_s: float = 0.0
    busy_s: float | None = None  # sum of the groups' rooflines
    floors_s: float = 0.0
    host_s: float = 0.0
    server_s: float = 0.0  # the serving engine's per-sequence host work (in launch_s too)
    kernels: float = 0.0
    kernel_floor_s: float = 0.0
    stream_gbps: float = 0.0
    gemm_tflops: float = 0.0
    top: list[tuple[str, float]] = field(default_factory=list)

    def __post_init__(self) -> None:
        """Fill the split and the busy time from the whole-phase terms when not given."""
        if self.compute_bound_s is None:
            bound = max(self.compute_s, self.memory_s)
            self.compute_bound_s = bound if self.compute_s >= self.memory_s else 0.0
            self.memory_bound_s = 0.0 if self.compute_s >= self.memory_s else bound
        if self.busy_s is None:
            self.busy_s = max(self.compute_s, self.memory_s)


def _ms(seconds: float) -> str:
    return units.seconds(seconds)


def _gb(nbytes: float) -> str:
    return units.gb(nbytes)


def capacity_why(memory: MemoryEstimate) -> str:
    """Why it does not fit: the total by part against the usable memory."""
    parts = [("weights", memory.weights_bytes), ("KV", memory.kv_cache_bytes),
             ("activations", memory.activations_bytes), ("gradients", memory.gradients_bytes),
             ("optimizer", memory.optimizer_bytes), ("runtime", memory.runtime_bytes)]
    listed = ", ".join(f"{name} {_gb(value)}" for name, value in parts if value)
    usable = memory.device_memory_bytes or 0
    return (f"needs {_gb(memory.total_bytes)} per GPU ({listed}) > {_gb(usable)} usable device "
            f"memory (short by {_gb(memory.total_bytes - usable)})")


def intensity_words(intensity: float, ridge: float, expected: str) -> str:
    """Say the phase's intensity against the ridge with the sign that holds for the numbers.

    The verdict weighs op groups one by one, so a phase can be compute-bound while its overall
    intensity sits under the ridge (286 < 295): then the line says so instead of "286 > 295".
    """
    sign = ">" if intensity > ridge else "<" if intensity < ridge else "="
    digits = 3
    while digits < 8 and sign != "=" and f"{intensity:.{digits}g}" == f"{ridge:.{digits}g}":
        digits += 1
    text = f"intensity {intensity:.{digits}g} FLOP/B {sign} ridge {ridge:.{digits}g}"
    if sign != expected:
        text += " for the phase as a whole (its op groups, weighed one by one, decide)"
    return text


def _largest(phase: PhaseTimes) -> str:
    if not phase.top:
        return ""
    return "; largest: " + ", ".join(f"{name} {_ms(seconds)}" for name, seconds in phase.top[:2])


def decide(phase: PhaseTimes, memory: MemoryEstimate, fits: bool, peak_tflops: float,
           bandwidth_gbps: float) -> tuple[Bottleneck, str]:
    """memory-capacity when it does not fit; otherwise the largest term of the phase's time."""
    if not fits:
        return "memory-capacity", capacity_why(memory)
    busy = phase.busy_s or 0.0
    compute_bound = phase.compute_bound_s or 0.0
    ridge = peak_tflops * 1e12 / (bandwidth_gbps * C.GB)
    intensity = phase.flops / phase.device_bytes if phase.device_bytes else float("inf")
    if phase.comm_exposed_s > max(busy, phase.launch_s):
        return "communication", (
            f"{phase.name}: exposed communication {_ms(phase.comm_exposed_s)} > op rooflines "
            f"{_ms(busy)} and launch overhead {_ms(phase.launch_s)}")
    if phase.launch_s > busy:
        floors = (f"{phase.kernels:.0f} kernels x {phase.kernel_floor_s * 1e6:.1f} us = "
                  f"{_ms(phase.floors_s)}" if phase.kernels else _ms(phase.floors_s))
        if phase.server_s > phase.launch_s / 2:
            return "launch-overhead", (
                f"{phase.name}: host work {_ms(phase.launch_s)}, of which the server's "
                f"per-sequence work {_ms(phase.server_s)} (it samples each sequence's next token "
                f"on the CPU, one after another) > op rooflines {_ms(busy)} (memory "
                f"{_ms(phase.memory_s)}, compute {_ms(phase.compute_s)})")
        return "launch-overhead", (
            f"{phase.name}: launch overhead {_ms(phase.launch_s)} (GPU floors {floors}; host "
            f"beyond the GPU {_ms(max(0.0, phase.launch_s - phase.floors_s))}) > op rooflines "
            f"{_ms(busy)} (memory {_ms(phase.memory_s)}, compute {_ms(phase.compute_s)})")
    stream = f" (achievable {phase.stream_gbps:.0f})" if phase.stream_gbps else ""
    traffic = f"{_gb(phase.device_bytes)} / {bandwidth_gbps:g} GB/s{stream}"
    if phase.host_bytes:
        traffic += f" + {_gb(phase.host_bytes)} from host RAM"
    if phase.memory_bound_s >= compute_bound:
        return "memory-bandwidth", (
            f"{phase.name}: memory-bound op groups {_ms(phase.memory_bound_s)} > compute-bound "
            f"{_ms(compute_bound)}; {traffic} = {_ms(phase.memory_s)}; "
            + intensity_words(intensity, ridge, "<") + _largest(phase))
    gemm = f" (large GEMMs {phase.gemm_tflops:.0f})" if phase.gemm_tflops else ""
    return "compute", (
        f"{phase.name}: compute-bound op groups {_ms(compute_bound)} > memory-bound "
        f"{_ms(phase.memory_bound_s)}; {phase.flops / 1e12:.3g} TFLOP / {peak_tflops:g} "
        f"TFLOP/s{gemm} = {_ms(phase.compute_s)}, memory {_ms(phase.memory_s)} ({traffic}); "
        + intensity_words(intensity, ridge, ">") + _largest(phase))
