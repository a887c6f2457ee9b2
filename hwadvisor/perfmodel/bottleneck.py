"""The bottleneck of the deciding phase, and the numbers that decided it."""

from __future__ import annotations

from dataclasses import dataclass

from hwadvisor import units
from hwadvisor.models import Bottleneck, MemoryEstimate
from hwadvisor.perfmodel import constants as C


@dataclass
class PhaseTimes:
    """The terms of one phase's time, in seconds, and its traffic."""

    name: str  # decode step, prefill, training step
    compute_s: float
    memory_s: float
    launch_s: float
    comm_exposed_s: float
    flops: float
    device_bytes: float
    host_bytes: float = 0.0


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


def decide(phase: PhaseTimes, memory: MemoryEstimate, fits: bool, peak_tflops: float,
           bandwidth_gbps: float) -> tuple[Bottleneck, str]:
    """memory-capacity when it does not fit; otherwise the largest term of the phase's time."""
    if not fits:
        return "memory-capacity", capacity_why(memory)
    roofline = max(phase.compute_s, phase.memory_s)
    ridge = peak_tflops * 1e12 / (bandwidth_gbps * C.GB)
    intensity = phase.flops / phase.device_bytes if phase.device_bytes else float("inf")
    if phase.comm_exposed_s > max(roofline, phase.launch_s):
        return "communication", (
            f"{phase.name}: exposed communication {_ms(phase.comm_exposed_s)} > roofline "
            f"{_ms(roofline)} and launch overhead {_ms(phase.launch_s)}")
    if phase.launch_s > roofline:
        return "launch-overhead", (
            f"{phase.name}: kernel launches {_ms(phase.launch_s)} > roofline {_ms(roofline)} "
            f"(memory {_ms(phase.memory_s)}, compute {_ms(phase.compute_s)})")
    traffic = f"{_gb(phase.device_bytes)} / {bandwidth_gbps:g} GB/s"
    if phase.host_bytes:
        traffic += f" + {_gb(phase.host_bytes)} from host RAM"
    if phase.memory_s >= phase.compute_s:
        return "memory-bandwidth", (
            f"{phase.name}: {traffic} = {_ms(phase.memory_s)} > compute {_ms(phase.compute_s)}; "
            f"intensity {intensity:.3g} FLOP/B < ridge {ridge:.3g}")
    return "compute", (
        f"{phase.name}: {phase.flops / 1e12:.3g} TFLOP / {peak_tflops:g} TFLOP/s = "
        f"{_ms(phase.compute_s)} > memory {_ms(phase.memory_s)} ({traffic}); "
        f"intensity {intensity:.3g} FLOP/B > ridge {ridge:.3g}")
