"""Numbers a rule cannot hold as data: how much to offload, which grad-accum, which batch.

A planner looks at the baseline and returns extra workload/option changes and notes; a
predictor computes a before/after the estimate has no field for (peak load memory, the
inter-token stall behind a colocated prefill). Rules name them in their TOML.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from hwadvisor.rules.facts import gb

if TYPE_CHECKING:
    from hwadvisor.rules.context import RuleContext


@dataclass
class Plan:
    """Changes a planner adds to a rule's what-if, and what it says about them."""

    workload: dict[str, Any] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


@dataclass
class Predicted:
    """A predictor's before and after for the rule's metric, and its explanation."""

    before: float
    after: float
    notes: list[str] = field(default_factory=list)


# Margin over the strict minimum when sizing offload or batch: allocator slack and spikes.
_SAFETY = 1.05
# The smallest grad-accum whose throughput is within this share of the best one tried.
_ACCUM_WITHIN = 0.95
_GRAD_ACCUM_CHOICES = (1, 2, 4, 8, 16, 32)
# Continuous batching beyond this many sequences rarely lowers latency further (vLLM's default
# max_num_seqs is 256).
_MAX_SEQS = 256


def _offload_fraction(total: int, weights: int, limit: int) -> float:
    """Return the smallest share of the weights (5% steps) whose offload fits the limit."""
    excess = (total - limit) * _SAFETY
    return min(1.0, math.ceil(max(excess, 0) / weights * 20) / 20)


def offload_to_fit(ctx: RuleContext) -> Plan:
    """Offload the smallest share of the weights that makes the rest fit; say it with int4 too."""
    mem = ctx.estimate.memory
    limit = ctx.facts["limit_bytes"]
    if limit is None or mem.weights_bytes <= 0:
        return Plan(options={"offload_fraction": 1.0}, notes=["memory limit unknown: all weights "
                                                              "offloaded"])
    excess = (mem.total_bytes - limit) * _SAFETY
    fraction = _offload_fraction(mem.total_bytes, mem.weights_bytes, limit)
    moved = fraction * mem.weights_bytes
    notes = [f"keep {fraction:.0%} of the weights ({gb(moved)}) in pinned host RAM and stream "
             "them over the host link each step"]
    if fraction >= 1.0 and excess > mem.weights_bytes:
        rest = mem.total_bytes - mem.weights_bytes
        notes.append(f"even with all weights offloaded, KV cache, activations and runtime take "
                     f"{gb(rest)} of {gb(limit)}: lower the batch or the context too")
    host = ctx.host
    if host is not None and host.memory_total_bytes and moved > 0.9 * host.memory_total_bytes:
        notes.append(f"this host has {gb(host.memory_total_bytes)} RAM, short of the {gb(moved)} "
                     "offloaded: offload to NVMe (DeepSpeed ZeRO-Infinity) instead")
    notes.extend(_with_int4(ctx, limit))
    return Plan(options={"offload_fraction": fraction}, notes=notes)


def _with_int4(ctx: RuleContext, limit: int) -> list[str]:
    """Offload combined with 4-bit weights: usually far less crosses the host link."""
    if ctx.workload.weights_dtype in ("int4", "fp4"):
        return []
    q = ctx.estimate_with({"weights_dtype": "int4"}, {})
    if q.memory.total_bytes <= limit:
        return []  # int4 alone fits: int4-weights says so
    fraction = _offload_fraction(q.memory.total_bytes, q.memory.weights_bytes, limit)
    both = ctx.estimate_with({"weights_dtype": "int4"}, {"offload_fraction": fraction})
    step = both.times.decode_step_s or both.times.train_step_s
    still = "" if both.memory.total_bytes <= limit else (
        f"; still {gb(both.memory.total_bytes - limit)} over even then")
    return [f"combined with int4-weights: offload {fraction:.0%} of the 4-bit weights "
            f"({gb(fraction * q.memory.weights_bytes)}), {gb(both.memory.total_bytes)} on the "
            f"device, step {step * 1e3:.0f} ms{still}" if step else
            f"combined with int4-weights: offload {fraction:.0%} of the 4-bit weights{still}"]


def fsdp_plan(ctx: RuleContext) -> Plan:
    """FSDP2 with overlap; the smallest grad-accum that hides communication; bucket sizes."""
    spec = ctx.workload.spec
    options = {"sharding": "fsdp", "comm_overlap": True}
    # Throughput (tokens/s) per gradient-accumulation choice; the smallest within 5% of the
    # best wins: more accumulation only grows the global batch (an optimisation choice).
    tried: list[tuple[int, float, float]] = []
    for accum in _GRAD_ACCUM_CHOICES:
        if accum < ctx.workload.grad_accum:
            continue
        est = ctx.estimate_with({"grad_accum": accum}, options)
        if est.tokens_per_s is None or est.times.train_step_s is None:
            continue
        tried.append((accum, est.tokens_per_s, est.times.train_step_s))
    chosen, step_s = ctx.workload.grad_accum, None
    if tried:
        best = max(t[1] for t in tried)
        chosen, _, step_s = next(t for t in tried if t[1] >= _ACCUM_WITHIN * best)
    micro = ctx.workload.batch
    tokens = micro * ctx.workload.prompt_len * chosen * ctx.workload.gpus
    step_text = f", optimizer step {step_s:.2f} s" if step_s is not None else ""
    notes = [f"gradient accumulation {chosen} (micro-batch {micro} x {ctx.workload.gpus} GPUs = "
             f"{tokens:,} tokens per optimizer step{step_text}): gradient reduce-scatter is "
             "amortised and overlapped behind the backward pass"]
    if spec is not None:
        hidden = spec.hidden_size
        per_layer = (ctx.workload.params_total or 0) / spec.num_layers
        # FSDP2 shards each decoder block as one unit: its all-gather is one "bucket".
        notes.append(f"FSDP2: fully_shard each decoder layer (~{gb(per_layer * 2)} bf16 per "
                     "all-gather), reshard_after_forward=True, prefetch one layer ahead")
        # DeepSpeed's "auto" values, as the HF integration sets them (hidden_size based).
        notes.append(f"ZeRO-3 equivalent: reduce_bucket_size={hidden * hidden:,}, "
                     f"stage3_prefetch_bucket_size={int(0.9 * hidden * hidden):,}, "
                     f"stage3_param_persistence_threshold={10 * hidden:,}, overlap_comm=true")
    return Plan(workload={"grad_accum": chosen}, options=options, notes=notes)


def tp_plan(ctx: RuleContext) -> Plan:
    """Tensor parallel inside one node; data parallel (or FSDP) across nodes."""
    per_node = ctx.facts["gpus_per_node"]
    nodes = ctx.facts["nodes"]
    notes = [f"tensor-parallel size {per_node} (the GPUs of one {ctx.facts['link_text']} domain)"]
    if nodes > 1:
        notes.append(f"data parallel / FSDP across the {nodes} nodes: TP traffic never leaves "
                     "the node")
    return Plan(options={"sharding": "tp"}, notes=notes)


def max_batch_fit(ctx: RuleContext) -> Plan:
    """Grow the batch to what continuous batching keeps in flight in free memory (paged KV)."""
    mem = ctx.estimate.memory
    limit = ctx.facts["limit_bytes"]
    batch = ctx.workload.batch
    per_seq_kv = mem.kv_cache_bytes / batch if batch else 0
    if limit is None or per_seq_kv <= 0:
        return Plan(notes=["memory limit unknown: batch kept"])
    free = limit - mem.total_bytes
    extra = int(max(free, 0) / (per_seq_kv * _SAFETY))
    target = max(batch, min(_MAX_SEQS, batch + extra))
    notes = [f"{gb(per_seq_kv)} of KV per sequence; {gb(max(free, 0))} free holds {extra} more "
             f"in paged blocks: {target} sequences in flight"]
    spec = ctx.workload.spec
    max_ctx = spec.max_position_embeddings if spec else None
    seq = ctx.workload.prompt_len + ctx.workload.gen_len
    if max_ctx and max_ctx > seq:
        static = int((mem.kv_cache_bytes + max(free, 0)) / (per_seq_kv * max_ctx / seq))
        notes.append(f"a static allocator reserving the full {max_ctx:,}-token context per slot "
                     f"would hold only {max(static, 0)}")
    return Plan(workload={"batch": target}, notes=notes)


def pd_inter_token(ctx: RuleContext) -> Predicted:
    """Worst inter-token latency: a decode step stalled behind a colocated prefill, vs not."""
    times = ctx.estimate.times
    decode, prefill = times.decode_step_s, times.prefill_s
    if decode is None or prefill is None:
        raise ValueError("no decode or prefill time")
    kv_per_request = ctx.estimate.memory.kv_cache_bytes / max(ctx.workload.batch, 1)
    link = ctx.facts["link_text"]
    notes = [f"a colocated {ctx.workload.prompt_len}-token prefill stalls every decoding request "
             f"for {prefill * 1e3:.1f} ms; disaggregated, prefill runs on its own GPUs and ships "
             f"{gb(kv_per_request)} of KV per request over {link}"]
    return Predicted(before=decode + prefill, after=decode, notes=notes)


def mmap_load_peak(ctx: RuleContext) -> Predicted:
    """Peak memory while loading: read-and-copy holds the weights twice, mmap holds them once."""
    mem = ctx.estimate.memory
    notes = ["read()+copy keeps the file buffer and the device copy alive together; mmap "
             "(llama.cpp, MLX, safetensors) maps the file pages in place on unified memory"]
    return Predicted(before=mem.total_bytes + mem.weights_bytes, after=mem.total_bytes,
                     notes=notes)


PLANNERS: dict[str, Callable[[RuleContext], Plan]] = {
    "offload_to_fit": offload_to_fit,
    "fsdp_plan": fsdp_plan,
    "tp_plan": tp_plan,
    "max_batch_fit": max_batch_fit,
}
PREDICTORS: dict[str, Callable[[RuleContext], Predicted]] = {
    "pd_inter_token": pd_inter_token,
    "mmap_load_peak": mmap_load_peak,
}
