"""Planners that make room on the card without touching the weights or the layout.

The engine told to take more of the GPU's memory (memory-reservation), and the KV cache kept in
8 bits where the engine has an attention kernel for it on this GPU (kv-cache-quantization).
planners.py holds the rest; registry.py puts the tables together.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from hwadvisor.rules.playbooks.planners import Plan

if TYPE_CHECKING:
    from hwadvisor.rules.context import RuleContext

# The most of a GPU's memory a serving engine is told to take when the plan needs more than its
# default: vLLM's --gpu-memory-utilization is the share of the whole card the engine may use
# (weights, KV pool, activations, CUDA graphs; config/cache.py), and its docs' answer to a KV
# pool too small to start is to raise it. 0.95 keeps 4 GB of an 80 GB card for the CUDA
# context, NCCL and what PyTorch does not count (assumption: a card running nothing else).
RESERVATION_MOST = 0.95


def raise_reservation(ctx: RuleContext) -> Plan:
    """Tell the engine to take more of the card where its default share leaves the plan short."""
    from hwadvisor.engines import engine_for

    engine = engine_for(ctx.workload)
    current = engine.defaults.kv_memory_fraction
    if current is None or current >= RESERVATION_MOST:
        return Plan(reject=f"{ctx.facts.engine_name} already takes "
                    f"{(current or 1.0):.0%} of the GPU's memory")
    flag = engine.defaults.kv_memory_flag or "its memory fraction"
    options = {**ctx.workload.engine_options, "kv_memory_fraction": f"{RESERVATION_MOST}"}
    return Plan(workload={"engine_options": options},
                notes=[f"{flag} {RESERVATION_MOST} (the default is {current}): the card must "
                       "run nothing else"])


def quantize_kv(ctx: RuleContext) -> Plan:
    """Return an 8-bit KV cache in the engine's own type (llama.cpp q8_0, else FP8 e4m3)."""
    from hwadvisor.engines import engine_for

    engine = engine_for(ctx.workload)
    device = ctx.device
    for kind in ("fp8", "q8_0", "int8"):
        if engine.kv_format_runs(kind, device.vendor, device.compute_capability):
            return Plan(workload={"kv_dtype": kind}, notes=[f"KV cache in {kind}"])
    if any(k in engine.kv_cache_formats for k in ("fp8", "q8_0", "int8")):
        return Plan(reject=f"{ctx.facts.engine_name} has no attention kernel for an 8-bit KV "
                    f"cache on {device.name} (compute capability {device.compute_capability})")
    return Plan(reject=f"{ctx.facts.engine_name} keeps the KV cache in 16 bits only")



PLANNERS: dict[str, Callable[[RuleContext], Plan]] = {planner.__name__: planner for planner in (
    raise_reservation, quantize_kv)}
