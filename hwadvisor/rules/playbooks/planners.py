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

from hwadvisor.models import ModelOptions
from hwadvisor.perfmodel.drafters import DRAFTERS, Published, published_for_model
from hwadvisor.perfmodel.layout import resolve_layout, tp_fits_heads, tp_fits_node
from hwadvisor.perfmodel.memory import ordinal
from hwadvisor.rules.playbooks.facts import gb

if TYPE_CHECKING:
    from hwadvisor.rules.context import RuleContext


@dataclass
class Plan:
    """Changes a planner adds to a rule's what-if, and what it says about them.

    reject, when set, is why the rule cannot apply on this state (the engine has no such
    format, the host has too little RAM): the rule is rejected with it.
    """

    workload: dict[str, Any] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    reject: str | None = None
    caveats: list[str] = field(default_factory=list)  # assumptions of the planner's choice
    min_gain: float | None = None  # the gain it needs, if not its rule's (< 0: a small loss)


@dataclass
class Predicted:
    """A predictor's before and after for the rule's metric, and its explanation."""

    before: float
    after: float
    notes: list[str] = field(default_factory=list)
    reject: str | None = None


# Margin over the strict minimum when sizing offload or batch: allocator slack and spikes.
_SAFETY = 1.05
# The smallest grad-accum whose throughput is within this share of the best one tried.
_ACCUM_WITHIN = 0.95
_GRAD_ACCUM_CHOICES = (1, 2, 4, 8, 16, 32)
# Share of a host's RAM an offload may count on: the OS, the data loader's workers and the page
# cache keep the rest (assumption, stated; the plan and its alternatives check against it).
HOST_RAM_USABLE_SHARE = 0.9
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
    limit = ctx.facts.limit_bytes
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
    if host is not None and host.memory_total_bytes and \
            moved > HOST_RAM_USABLE_SHARE * host.memory_total_bytes:
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
    """Tensor parallel inside the fast-link domain, FSDP over the rest (2-D parallelism).

    The TP size is the one of 2, 4, 8 (up to the GPUs one fast link joins) with the best
    throughput that fits. The TP group takes its GPUs from data parallelism, so each remaining
    rank runs proportionally more sequences (held_split): the global batch stays.
    """
    domain = _link_domain(ctx)
    best: tuple[float, int, dict[str, int]] | None = None
    for size in (2, 4, 8):
        if size > domain or ctx.workload.gpus % size or not _splits_heads(ctx, size):
            continue
        change = {"sharding": "fsdp", "tp_size": size, "comm_overlap": True}
        split = _held_batch(ctx, change)
        if split is None:
            continue  # the memory alone says no: no need for the whole estimate
        est = ctx.estimate_with(split, change)
        if est.tokens_per_s and (best is None or est.tokens_per_s > best[0]):
            best = (est.tokens_per_s, size, split)
    if best is None:
        return Plan(reject=f"no tensor-parallel size of 2-8 inside one {ctx.facts.link_text} "
                           "domain fits")
    _, size, split = best
    change = {"sharding": "fsdp", "tp_size": size, "comm_overlap": True}
    notes = [f"tensor-parallel size {size} inside one {ctx.facts.link_text} domain, FSDP2 "
             f"over the other {ctx.workload.gpus // size} ranks (torchtitan-style 2-D): "
             + _held_batch_text(ctx, change, split)]
    return Plan(workload=split, options=change, notes=notes)


def expert_parallel_plan(ctx: RuleContext) -> Plan:
    """Spread the experts: over the TP group (serving), over a node's GPUs (training)."""
    if ctx.workload.phase != "training":
        return Plan()
    layout = resolve_layout(ctx.workload, ctx.options.model_copy(update={"expert_parallel": True}))
    ep, experts, rest = layout.ep_degree, layout.experts, layout.expert_shard_degree
    if ep <= 1:
        return Plan(reject=f"no group of a node's GPUs splits {experts} experts and FSDP's ranks")
    held = f"FSDP shards each over the {rest} ranks that hold it" if rest > 1 else \
        "no all-gather of expert weights"
    return Plan(notes=[f"expert parallel {ep} inside a node: each GPU holds {experts // ep} of "
                       f"the {experts} routed experts of a layer whole, with their gradients and "
                       f"optimizer state ({held}); each MoE layer sends the routed tokens to "
                       "them and back, two all-to-alls forward and two backward"])


def held_split(batch: int, accum: int, widen: int,
               fits: Callable[[int, int], bool]) -> tuple[int, int]:
    """Return (micro-batch, accumulation) for `widen` times the sequences per data-parallel rank.

    Tensor- and context-parallel groups take their GPUs from data parallelism: with `widen`
    times fewer ranks, each runs batch x accum x widen sequences per optimizer step so the
    global batch stays (torchtitan's and Megatron's global batch is the local batch x the
    data-parallel degree x the accumulation). The group splits each micro-batch's activations
    over its GPUs, so the micro-batch may widen too: the largest that fits (a divisor of the
    sequences, at most batch x widen), the rest as gradient accumulation.
    """
    total = batch * accum * widen
    for micro in sorted((d for d in range(1, batch * widen + 1) if total % d == 0),
                        reverse=True):
        if fits(micro, total // micro):
            return micro, total // micro
    return 1, total


def _held_batch(ctx: RuleContext, change: dict[str, Any]) -> dict[str, int] | None:
    """Return the batch and accumulation that hold the global batch under `change`, if one fits."""
    widen = _dp_shrink(ctx, change)
    batch, accum = ctx.workload.batch, ctx.workload.grad_accum

    def fits(micro: int, count: int) -> bool:
        return ctx.fits_with({"batch": micro, "grad_accum": count}, change)

    micro, count = held_split(batch, accum, widen, fits)
    if not fits(micro, count):
        return None
    return {"batch": micro, "grad_accum": count}


def _held_batch_text(ctx: RuleContext, change: dict[str, Any], split: dict[str, int]) -> str:
    """Say how the sequences per rank change and that the global batch does not."""
    batch, accum = ctx.workload.batch, ctx.workload.grad_accum
    ranks = resolve_layout(ctx.workload, ctx.options).dp
    after = ranks // _dp_shrink(ctx, change)
    micro, count = split["batch"], split["grad_accum"]
    return (f"{after} data-parallel rank{'s' if after > 1 else ''} of {micro * count} sequences "
            f"(micro-batch {micro} x {count} accumulation step{'s' if count > 1 else ''}) where "
            f"there were {ranks} of {batch * accum}, the global batch of {ranks * batch * accum} "
            "as before")


def _link_domain(ctx: RuleContext) -> int:
    """How many GPUs the fast GPU-to-GPU link joins (a node's GPUs when unknown)."""
    inter = ctx.device.interconnect
    domain = inter.gpu_link_domain if inter is not None else None
    per_node = int(ctx.facts.gpus_per_node)
    return min(per_node, domain) if domain else per_node


def checkpoint_plan(ctx: RuleContext) -> Plan:
    """Escalate checkpointing only as far as fitting needs: selective, every N-th layer, full.

    Selective (attention only, ~5%) where the engine has it (torchtitan, Megatron); then every
    N-th layer with the largest N that fits (the least recomputation) where the engine can
    checkpoint a share of the layers (torchtitan's layer SAC, Megatron's block method); then
    every layer. Hugging Face's gradient checkpointing, mlx_lm.lora's --grad-checkpoint and
    DeepSpeed's recompute all layers or none.
    """
    from hwadvisor.engines import engine_for

    limit = ctx.facts.limit_bytes
    engine = engine_for(ctx.workload)
    already = ctx.workload.activation_checkpointing and ctx.options.selective_checkpointing
    if not already and engine.says("activation-checkpointing", "selective") and (
            limit is None or ctx.memory_with({"activation_checkpointing": True},
                                             {"selective_checkpointing": True}).total_bytes
            <= limit):
        return Plan(workload={"activation_checkpointing": True},
                    options={"selective_checkpointing": True, "checkpoint_every": 1},
                    notes=["selective: recompute each layer's attention only (Korthikanti et "
                           "al.), the cheapest recomputation that fits"])
    every = _checkpoint_every(ctx, limit) if engine.says("activation-checkpointing", "layers") \
        else 1
    if every > 1:
        layers = ctx.workload.spec.num_layers if ctx.workload.spec else 0
        return Plan(workload={"activation_checkpointing": True},
                    options={"selective_checkpointing": False, "checkpoint_every": every},
                    notes=[f"checkpoint every {ordinal(every)} layer: {layers // every} of "
                           f"{layers} layers recompute, the least recomputation that fits"])
    first = "selective checkpointing was not enough; " if already else ""
    return Plan(workload={"activation_checkpointing": True},
                options={"selective_checkpointing": False, "checkpoint_every": 1},
                notes=[f"full: {first}keep only each decoder layer's input, recompute the rest"])


def _checkpoint_every(ctx: RuleContext, limit: float | None) -> int:
    """Return the largest N whose every-N-th-layer checkpointing fits, 1 when only all layers do.

    N runs from half the layers down to 2 (beyond half, fewer than two layers would recompute).
    """
    layers = ctx.workload.spec.num_layers if ctx.workload.spec else 0
    if limit is None:
        return 1
    for every in range(layers // 2, 1, -1):
        memory = ctx.memory_with({"activation_checkpointing": True},
                                 {"selective_checkpointing": False, "checkpoint_every": every})
        if memory.total_bytes <= limit:
            return every
    return 1


def cross_entropy_plan(ctx: RuleContext) -> Plan:
    """Plan the engine's memory-light loss: Liger's chunked linear cross-entropy, else fused."""
    from hwadvisor.engines import engine_for

    engine = engine_for(ctx.workload)
    for form, note in (("chunked", "the logits computed and reduced chunk by chunk (Liger's "
                        "fused linear cross-entropy): never held whole"),
                       ("fused", "one fused cross-entropy kernel on the bf16 logits: no fp32 "
                        "copies or saved log-softmax")):
        if engine.says("fused-cross-entropy", form):
            return Plan(options={"cross_entropy": form}, notes=[note])
    return Plan(reject=f"{ctx.facts.engine_name} has no fused or chunked cross-entropy")


def micro_batch_plan(ctx: RuleContext) -> Plan:
    """Split the batch into micro-batches (a divisor of it) with gradient accumulation.

    The largest micro-batch that fits: the global batch, and so the recipe, stays the same.
    """
    batch, accum = ctx.workload.batch, ctx.workload.grad_accum
    for micro in sorted((d for d in range(1, batch) if batch % d == 0), reverse=True):
        change = {"batch": micro, "grad_accum": accum * batch // micro}
        if ctx.fits_with(change, {}):
            return Plan(workload=change, notes=[
                f"micro-batch {micro} x {change['grad_accum']} accumulation steps: "
                f"{batch * accum} sequences per optimizer step, as before"])
    change = {"batch": 1, "grad_accum": accum * batch}
    return Plan(workload=change, notes=[f"micro-batch 1 x {accum * batch} accumulation steps "
                                        "(the smallest; not enough alone)"])


def _format_for(ctx: RuleContext, wanted: tuple[str, ...]) -> str | None:
    """Return the first of the wanted weight formats the engine runs (its native form first)."""
    from hwadvisor.engines import engine_for

    formats = engine_for(ctx.workload).weight_formats
    return next((f for f in wanted if f in formats), None)


def _own_format(ctx: RuleContext, kind: str) -> str | None:
    """Return the engine's own file format for 4- or 8-bit weights (GGUF, MLX), if it has one."""
    from hwadvisor.engines import engine_for

    return engine_for(ctx.workload).own_formats.get(kind)


def quantize_4bit(ctx: RuleContext) -> Plan:
    """4-bit weights in the engine's own format (GGUF, MLX), else AWQ/GPTQ int4, else NF4."""
    own = _own_format(ctx, "int4")
    chosen = own if own is not None else _format_for(ctx, ("int4", "nf4"))
    if chosen is None:
        return Plan(reject=f"{ctx.facts.engine_name} runs no 4-bit weight format")
    legacy = _legacy_4bit(ctx, chosen)
    if legacy is not None:
        return legacy
    return Plan(workload={"weights_dtype": chosen}, notes=[f"format {chosen}"])


def _legacy_4bit(ctx: RuleContext, chosen: str) -> Plan | None:
    """Q4_0 instead of a K-quant mix whose tensors would fall back to 5 and 8 bits.

    llama-quantize stores a K-quant tensor whose rows are not a multiple of 256 values in a
    32-block type (Q4_K -> Q5_0, Q6_K -> Q8_0): Qwen2.5-0.5B's Q4_K_M is 6.3 bits a weight, its
    Q4_0 4.5 (perfmodel/formats.py).
    """
    from hwadvisor.perfmodel import formats

    spec = ctx.workload.spec
    if spec is None or _format_for(ctx, ("q4_0",)) is None:
        return None
    bits = formats.k_quant_fallback_bits(chosen, spec)
    if bits is None or bits <= formats.FORMATS["q4_0"].layer_bits:
        return None
    return Plan(workload={"weights_dtype": "q4_0"}, notes=[
        f"format q4_0, not {chosen}: this model's rows of {spec.hidden_size} values are not a "
        f"multiple of the 256-value K-quant blocks, so {chosen} would store its layers at "
        f"{bits:.1f} bits a weight (Q5_0 / Q8_0 fallbacks) against Q4_0's 4.5"])


def quantize_8bit(ctx: RuleContext) -> Plan:
    """8-bit weights in the engine's own format (INT8 W8A8 on CUDA engines)."""
    own = _own_format(ctx, "int8")
    chosen = own if own is not None else _format_for(ctx, ("int8",))
    if chosen is None:
        return Plan(reject=f"{ctx.facts.engine_name} runs no 8-bit weight format")
    return Plan(workload={"weights_dtype": chosen}, notes=[f"format {chosen}"])


def lora_plan(ctx: RuleContext) -> Plan:
    """LoRA: frozen 16-bit base weights, rank-16 adapters on every linear layer."""
    return Plan(options={"finetune": "lora", "lora_rank": 16},
                notes=["rank 16 on q, k, v, o, gate, up, down; the base stays frozen in bf16"])


def qlora_plan(ctx: RuleContext) -> Plan:
    """QLoRA: the frozen base in 4-bit NF4, bf16 adapters, paged 8-bit optimizer not needed."""
    return Plan(workload={"weights_dtype": "nf4"}, options={"finetune": "qlora",
                                                              "lora_rank": 16},
                notes=["base weights NF4 with double quantisation (bitsandbytes), rank-16 "
                       "adapters in bf16 (Dettmers et al., QLoRA)"])


def optimizer_offload_plan(ctx: RuleContext) -> Plan:
    """Optimizer states, fp32 master weights and the step in host RAM; checks the host has it."""
    from hwadvisor.engines import engine_for

    params = float(ctx.workload.params_total or 0)
    layout = resolve_layout(ctx.workload, ctx.options)
    if engine_for(ctx.workload).costs.offload == "fsdp-cpu" and not (
            layout.strategy in ("fsdp", "hsdp") and layout.shard_degree > 1):
        return Plan(reject=f"{ctx.facts.engine_name}'s offload is FSDP2's CPUOffloadPolicy, "
                           "applied only where FSDP shards the parameters over several GPUs")
    # fp32 master + Adam m and v (12 B/param, ZeRO-Offload) plus the fp32 gradients the CPU
    # step reads (4 B/param), split over the GPUs' hosts when sharded; FSDP2's
    # CPUOffloadPolicy holds the same: fp32 parameter shards, their gradients, m and v.
    needed = params * 16.0 / max(ctx.facts.nodes, 1)
    host = ctx.facts.host_memory_bytes
    note = f"the host needs {gb(needed)} of RAM for them per node"
    if host is not None and needed > HOST_RAM_USABLE_SHARE * host:
        return Plan(reject=f"it needs {gb(needed)} of host RAM per node and the planned host "
                           f"has {gb(host)} (pass --host-memory-gb for another host)")
    return Plan(options={"optimizer_offload": True}, notes=[note])


def replicas_plan(ctx: RuleContext) -> Plan:
    """Plan serving: the tensor-parallel size (x replicas) with the best request latency that fits.

    The same concurrent requests are spread over the replicas: each replica of a TP group of t
    serves batch x (replicas before) / (replicas after) of them.
    """
    gpus = ctx.workload.gpus
    current_dp = max(1, gpus // max(_current_tp(ctx), 1))
    total = ctx.workload.batch * current_dp
    sizes = [size for size in (1, 2, 4, 8, 16) if size < _current_tp(ctx)
             and not gpus % size and _splits_heads(ctx, size)]
    per_node = ctx.workload.gpus_per_node or max(1, gpus // max(ctx.workload.nodes, 1))
    # a group within one node holds the model: the replicas stay inside their nodes
    inside = [s for s in sizes if s <= per_node and ctx.fits_with(
        {"batch": max(1, math.ceil(total / (gpus // s)))}, {"sharding": "tp", "tp_size": s})] \
        if _current_tp(ctx) > per_node else []
    across, sizes = bool(inside), inside or sizes
    best: tuple[float, int, int] | None = None
    for size in sizes:
        replicas = gpus // size
        batch = max(1, math.ceil(total / replicas))
        if not ctx.fits_with({"batch": batch}, {"sharding": "tp", "tp_size": size}):
            continue
        est = ctx.estimate_with({"batch": batch}, {"sharding": "tp", "tp_size": size})
        latency = est.times.request_latency_s
        if latency is None:
            continue
        if best is None or latency < best[0]:
            best = (latency, size, batch)
    if best is None:
        return Plan(reject="no smaller tensor-parallel group holds the model")
    _, size, batch = best
    notes = [f"TP {size} x {gpus // size} replicas, {batch} of the {total} concurrent requests "
             "each"]
    if across:
        notes.append(f"TP {_current_tp(ctx)} spans nodes, all-reducing over the network twice "
                     f"a layer; a group of {size} holds the model inside one node's NVLink "
                     "domain, so each node serves its own replicas (the engines' guidance: "
                     "tensor parallelism within a node, more nodes for more replicas)")
    return Plan(workload={"batch": batch}, options={"sharding": "tp", "tp_size": size},
                notes=notes, min_gain=-IN_NODE_TOLERANCE if across else None)


# TP across nodes goes back inside one at a loss below this: the network all-reduce's estimate
# (perfmodel/comm.py) is this uncertain; vLLM's docs keep TP in a node (parallelism_scaling.md).
IN_NODE_TOLERANCE = 0.05


def _current_tp(ctx: RuleContext) -> int:
    if ctx.options.sharding != "tp":
        return 1
    return resolve_layout(ctx.workload, ctx.options).tp


def _splits_heads(ctx: RuleContext, size: int) -> bool:
    """Tell whether TP `size` splits the model's heads and tiles the nodes (engines need both)."""
    spec, wl = ctx.workload.spec, ctx.workload
    per_node = wl.gpus_per_node or max(1, wl.gpus // max(wl.nodes, 1))
    heads = (spec.num_heads, spec.num_kv_heads) if spec else None
    return tp_fits_heads(size, heads, wl.phase != "training") \
        and tp_fits_node(size, per_node, wl.nodes)


def pipeline_split(batch: int, accum: int, stages: int, widen: int = 1) -> tuple[int, int]:
    """Return (micro-batch, micro-batches) that feed `stages` stages from the same sequences.

    Pipeline stages need micro-batches in flight: at least two per stage keeps the 1F1B bubble
    (stages - 1) / (micro-batches + stages - 1) under a third. The global batch stays what it
    was: the stages take GPUs from data parallelism, so each of the `widen` times fewer
    data-parallel ranks runs `widen` times the sequences (batch x accum x widen), cut into
    micro-batches (a divisor of the batch), never more. Where even micro-batches of one sequence
    are too few, they are all there is.
    """
    total = batch * accum * widen
    wanted = 2 * stages
    for micro in sorted((d for d in range(1, batch + 1) if batch % d == 0), reverse=True):
        if total // micro >= wanted:
            return micro, total // micro
    return 1, total


def _dp_shrink(ctx: RuleContext, change: dict[str, Any]) -> int:
    """Return how many times fewer data-parallel ranks the option `change` leaves."""
    before = resolve_layout(ctx.workload, ctx.options).dp
    after = resolve_layout(ctx.workload, ctx.options.model_copy(update=change)).dp
    return max(1, before // max(1, after))


def pipeline_plan(ctx: RuleContext) -> Plan:
    """Pipeline stages across nodes: the stage count (2, 4, 8) with the best throughput.

    The micro-batches come out of the local batch (pipeline_split): the step says how the
    gradient accumulation changes, and the sequences per step do not.
    """
    best: tuple[float, int] | None = None
    batch, accum = ctx.workload.batch, ctx.workload.grad_accum
    for stages in (2, 4, 8):
        if stages > ctx.workload.gpus or ctx.workload.gpus % stages:
            continue
        widen = _dp_shrink(ctx, {"pipeline_stages": stages})
        micro, count = pipeline_split(batch, accum, stages, widen)
        change = {"batch": micro, "grad_accum": count}
        if not ctx.fits_with(change, {"pipeline_stages": stages}):
            continue
        est = ctx.estimate_with(change, {"pipeline_stages": stages})
        if est.tokens_per_s and (best is None or est.tokens_per_s > best[0]):
            best = (est.tokens_per_s, stages)
    if best is None:
        return Plan(reject="no pipeline split of 2-8 stages fits")
    stages = best[1]
    widen = _dp_shrink(ctx, {"pipeline_stages": stages})
    micro, count = pipeline_split(batch, accum, stages, widen)
    bubble = (stages - 1) / (count + stages - 1)
    ranks = resolve_layout(ctx.workload, ctx.options).dp
    notes = [f"{stages} stages fed by {count} micro-batches of {micro} sequence"
             f"{'s' if micro > 1 else ''} (gradient accumulation {accum} -> {count}): "
             f"{ranks // widen} data-parallel ranks of {micro * count} sequences where there "
             f"were {ranks} of {batch * accum}, the global batch of {ranks * batch * accum} "
             f"as before; bubble {bubble:.0%}, 1F1B schedule"]
    if count < 2 * stages:
        notes.append(f"only {count} micro-batches for {stages} stages: a larger local batch "
                     "or an interleaved schedule shrinks the bubble")
    return Plan(workload={"batch": micro, "grad_accum": count},
                options={"pipeline_stages": stages}, notes=notes)


def context_plan(ctx: RuleContext) -> Plan:
    """Context parallelism: each sequence split over 2-8 GPUs (ring attention).

    The smallest split that fits. Like tensor parallelism, the group takes its GPUs from data
    parallelism, so each remaining rank runs more sequences (held_split): the global batch stays.
    """
    tokens = f"each {ctx.workload.prompt_len:,}-token sequence split over"
    for size in (2, 4, 8):
        if ctx.workload.gpus % size:
            continue
        change = {"context_parallel": size}
        split = _held_batch(ctx, change)
        if split is not None:
            return Plan(workload=split, options=change,
                        notes=[f"{tokens} {size} GPUs: " + _held_batch_text(ctx, change, split)])
    change = {"context_parallel": 8}
    micro, count = held_split(ctx.workload.batch, ctx.workload.grad_accum,
                              _dp_shrink(ctx, change), lambda _m, _c: False)
    split = {"batch": micro, "grad_accum": count}
    return Plan(workload=split, options=change,
                notes=[f"{tokens} 8 GPUs, the widest split tried: "
                       + _held_batch_text(ctx, change, split)])


def chunked_prefill_plan(ctx: RuleContext) -> Plan:
    """Prefill in chunks of the engine's token budget on this GPU (8192 when it names none)."""
    from hwadvisor.engines import engine_for

    chunk = engine_for(ctx.workload).defaults.chunk_on(ctx.device.memory_total_bytes) or 8192
    return Plan(options={"prefill_chunk_tokens": chunk},
                notes=[f"{chunk:,} prompt tokens per forward, mixed with the running decodes"])


def serving_engine_plan(ctx: RuleContext) -> Plan:
    """Move the workload to the device class's serving engine, with that engine's defaults."""
    from hwadvisor.engines import baseline_options, default_engine, get_engine

    target = default_engine(ctx.facts.device_class, "inference")
    if target == ctx.workload.engine or not get_engine(target).defaults.continuous_batching:
        return Plan(reject=f"{ctx.facts.engine_name} is already the serving engine here")
    # The user's version and options belonged to the engine they named, not to this one.
    switch: dict[str, object] = {"engine": target, "engine_version": None, "engine_options": {}}
    notes: list[str] = []
    weights = ctx.workload.weights_dtype
    if weights not in get_engine(target).weight_formats:
        twin = _gguf_twin(weights, get_engine(target).weight_formats)
        if twin is None:
            return Plan(reject=f"{get_engine(target).name} cannot run {weights} weights")
        # A GGUF quant has a checkpoint of the same width the serving engine runs natively
        # (AWQ/GPTQ 4-bit, W8A8): the move takes that copy of the model, not the GGUF file.
        switch["weights_dtype"] = twin
        notes.append(f"{get_engine(target).name} runs {_TWIN_WORDS[twin]} checkpoints, not "
                     f"GGUF {weights} files: serve that copy of the model")
    moved = ctx.workload.model_copy(update=switch)
    options = baseline_options(moved, ctx.device).model_dump()
    keep = {k: v for k, v in ctx.options.model_dump().items()
            if k in ("sharding", "tp_size", "speculative_tokens_per_step", "speculative_drafter",
                     "speculative_draft_tokens", "prefix_cache_hit")
            and v != ModelOptions.model_fields[k].default}
    server = ctx.estimate.times.server_host_s
    step = ctx.estimate.times.tpot_s
    if server and step and server > step / 4:
        notes.insert(0, f"{ctx.facts.engine_name} samples each sequence's next token on the "
                        f"CPU, one after another: {server * 1e3:.3g} ms of each "
                        f"{step * 1e3:.3g} ms decode step; {get_engine(target).name} samples "
                        "on the GPU")
    return Plan(workload=switch, options={**options, **keep},
                notes=[f"{get_engine(target).name} pages the KV cache, batches continuously "
                       "and replays CUDA graphs by default", *notes])


# The serving engine's native format for a GGUF quant's width (perfmodel/formats.py layer bits).
_TWIN_WORDS = {"int4": "AWQ/GPTQ 4-bit", "int8": "8-bit (W8A8)"}


def _gguf_twin(weights: str, runnable: list[str]) -> str | None:
    """Return the serving engine's format of a GGUF quant's width (None: not a GGUF quant)."""
    from hwadvisor.perfmodel import formats

    fmt = formats.FORMATS.get(weights)
    if fmt is None or fmt.family != "gguf":
        return None
    twin = "int4" if fmt.layer_bits <= 5.0 else "int8" if fmt.layer_bits <= 8.5 else None
    return twin if twin in runnable else None


def _drafters_here(ctx: RuleContext) -> list[str]:
    """Return the drafters the engine's config can run for this model, built-in ones first.

    A checkpoint's own MTP layers need nothing more, so when the model ships them the drafters
    that need another checkpoint are left out.
    """
    from hwadvisor.engines import engine_for

    engine = engine_for(ctx.workload)
    said = [d for d in DRAFTERS if engine.says("speculative-decoding", d, "inference")]
    if "mtp" in ctx.facts.features and "mtp" in said:
        return [d for d in said if not DRAFTERS[d].needs]
    # A drafter that needs a checkpoint is planned only where one is published for this model
    # in the engine's form, so the config runs as pasted (perfmodel/drafters.toml).
    return [d for d in said
            if d != "mtp" and (not DRAFTERS[d].needs or published_draft_for(ctx, d))]


def published_draft_for(ctx: RuleContext, drafter_id: str) -> Published | None:
    """Return the published checkpoint of a drafter for this model and engine, if any."""
    from hwadvisor.engines import engine_for

    form = engine_for(ctx.workload).config_for("inference").draft_source
    return published_for_model(drafter_id, ctx.workload.model, form)


def _unpublished(ctx: RuleContext) -> list[str]:
    """Return the checkpoint drafters the engine runs that nobody publishes for this model."""
    from hwadvisor.engines import engine_for

    engine = engine_for(ctx.workload)
    return [f"{DRAFTERS[d].name} (needs {DRAFTERS[d].needs})" for d in DRAFTERS
            if DRAFTERS[d].needs and d != "mtp"
            and engine.says("speculative-decoding", d, "inference")
            and not published_draft_for(ctx, d)]


def _drafter_options(drafter_id: str, ctx: RuleContext) -> dict[str, Any]:
    d = DRAFTERS[drafter_id]
    spec = ctx.workload.spec
    drafted = d.draft_tokens
    if drafter_id == "mtp" and spec is not None and spec.mtp_layers:
        drafted = spec.mtp_layers  # one token per MTP layer the checkpoint ships
    return {"speculative_drafter": drafter_id, "speculative_draft_tokens": drafted,
            "speculative_tokens_per_step": d.accepted_chat}


def speculative_plan(ctx: RuleContext) -> Plan:
    """Pick the drafter with the lowest request latency among those the engine runs for this model.

    When the best one needs a checkpoint the user may not have (EAGLE-3 or Medusa heads, a
    draft model), the n-gram drafter's figure is given beside it.
    """
    tried: list[tuple[float, str]] = []
    for drafter_id in _drafters_here(ctx):
        est = ctx.estimate_with({}, _drafter_options(drafter_id, ctx))
        latency = est.times.request_latency_s
        if latency is not None:
            tried.append((latency, drafter_id))
    if not tried:
        return Plan(reject=f"{ctx.facts.engine_name} runs no drafter for this model")
    before = ctx.estimate.times.request_latency_s or 0.0
    latency, best = min(tried)
    chosen, options = DRAFTERS[best], _drafter_options(best, ctx)
    notes = [f"drafter: {chosen.name}, {options['speculative_draft_tokens']} drafted and "
             f"{chosen.accepted_chat:g} accepted tokens per target forward assumed (chat); "
             f"request latency {latency:.3g} s"]
    published = published_draft_for(ctx, best) if chosen.needs else None
    if published is not None:
        ngram = next((t for t in tried if t[1] == "ngram"), None)
        beside = (f"; without it, n-gram drafting: request latency {ngram[0]:.3g} s "
                  f"({before / ngram[0]:.2f}x)" if ngram and before else "")
        notes.append(f"draft checkpoint: {published.id} ({published.source}){beside}")
    missing = _unpublished(ctx)
    if missing:
        notes.append(f"not planned: {'; '.join(missing)}: none is published for "
                     f"{ctx.workload.model} in the form this engine loads")
    others = [f"{DRAFTERS[d].name} {t:.3g} s" for t, d in sorted(tried) if d != best]
    if others:
        notes.append("other drafters: " + ", ".join(others))
    return Plan(options=options, notes=notes, caveats=[chosen.caveat()])


def max_batch_fit(ctx: RuleContext) -> Plan:
    """Grow the batch to what continuous batching keeps in flight in free memory (paged KV)."""
    mem = ctx.estimate.memory
    limit = ctx.facts.limit_bytes
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
    """Worst inter-token latency: a decode step sharing its GPUs with prefill chunks, vs not.

    Against a chunked-prefill baseline (vLLM/SGLang do it by default): the worst stall is one
    chunk's prefill, not the whole prompt's. Each pool must hold the model on half the GPUs.
    """
    times = ctx.estimate.times
    decode, prefill = times.decode_step_s, times.prefill_s
    if decode is None or prefill is None:
        raise ValueError("no decode or prefill time")
    half = max(1, ctx.workload.gpus // 2)
    pool = ctx.estimate_with({"gpus": half, "nodes": 1, "gpus_per_node": None},
                             {"tp_size": None})
    limit = ctx.facts.limit_bytes
    if limit is not None and pool.memory.total_bytes > limit:
        return Predicted(before=1.0, after=1.0, reject=(
            f"a pool of {half} GPU(s) would need {gb(pool.memory.total_bytes)} per GPU of "
            f"{gb(limit)}: each of the prefill and decode pools must hold the model"))
    chunk = ctx.options.prefill_chunk_tokens or 8192
    tokens = ctx.workload.batch * ctx.workload.prompt_len
    stall = prefill * min(1.0, chunk / max(tokens, 1))
    kv_per_request = ctx.estimate.memory.kv_cache_bytes / max(ctx.workload.batch, 1)
    link = ctx.facts.link_text
    notes = [f"colocated, a {chunk:,}-token prefill chunk shares each decode step "
             f"(+{stall * 1e3:.1f} ms); disaggregated on {half} + {half} GPUs, prefill runs on its "
             f"own pool and ships {gb(kv_per_request)} of KV per request over {link}"]
    return Predicted(before=decode + stall, after=decode, notes=notes)


def mmap_load_peak(ctx: RuleContext) -> Predicted:
    """Peak memory while loading: read-and-copy holds the weights twice, mmap holds them once."""
    mem = ctx.estimate.memory
    notes = ["read()+copy keeps the file buffer and the device copy alive together; mmap "
             "(llama.cpp, MLX, safetensors) maps the file pages in place on unified memory"]
    return Predicted(before=mem.total_bytes + mem.weights_bytes, after=mem.total_bytes,
                     notes=notes)


PLANNERS: dict[str, Callable[[RuleContext], Plan]] = {planner.__name__: planner for planner in (
    offload_to_fit, fsdp_plan, tp_plan, max_batch_fit, checkpoint_plan, micro_batch_plan,
    cross_entropy_plan, quantize_4bit, quantize_8bit, lora_plan, qlora_plan,
    optimizer_offload_plan, replicas_plan, pipeline_plan, context_plan, chunked_prefill_plan,
    serving_engine_plan, speculative_plan, expert_parallel_plan)}
PREDICTORS: dict[str, Callable[[RuleContext], Predicted]] = {
    "pd_inter_token": pd_inter_token,
    "mmap_load_peak": mmap_load_peak,
}
