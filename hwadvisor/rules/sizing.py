"""Sizing the plan: what fits where, and how much of it.

The plan searched again at another GPU count (plan_at), the fewest GPUs it fits on (min_gpus),
the largest batch and context it holds (max_batch, max_context, longest_request), and whether
the host RAM an offload needs fits the planned host (host_fits, host_words).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from hwadvisor import units
from hwadvisor.engines import engine_for
from hwadvisor.models import Device, Estimate, ModelOptions, Workload
from hwadvisor.models.recommend import Goal
from hwadvisor.rules.context import RuleContext
from hwadvisor.rules.judge import baseline
from hwadvisor.rules.playbooks.schema import Rule
from hwadvisor.rules.search import search

MAX_SEARCH_GPUS = 1024


MAX_BATCH = 1 << 16


def _per_node(device: Device, workload: Workload) -> int:
    """GPUs per node of the planned system: the workload's, else the most one machine takes."""
    if workload.gpus_per_node:
        return workload.gpus_per_node
    return device.max_gpus_per_node or device.gpus_per_node or (
        8 if str(device.device_class) == "datacenter-gpu" else 1)


def _at_count(ctx: RuleContext, count: int, per_node: int) -> tuple[Workload, ModelOptions]:
    """Return the final plan spread over `count` GPUs: sharded (training) or tensor-parallel."""
    nodes = max(1, math.ceil(count / per_node))
    per = count if nodes == 1 else per_node
    workload = ctx.workload.model_copy(update={"gpus": nodes * per, "nodes": nodes,
                                               "gpus_per_node": per if nodes > 1 else None})
    update: dict[str, Any] = {}
    if ctx.workload.phase == "training":
        if ctx.options.sharding not in ("fsdp", "hsdp"):
            update["sharding"] = "fsdp"
    else:
        update.update(sharding="tp", tp_size=per if nodes > 1 else None,
                      pipeline_stages=nodes if nodes > 1 else 1)
    return workload, ctx.options.model_copy(update=update)


def _counts(current: int, per_node: int) -> list[int]:
    """GPU counts a plan may need, above the current one.

    Doubling inside a node, then any number of whole nodes up to MAX_SEARCH_GPUS.
    """
    counts = set()
    n = 1
    while n < per_node:
        n *= 2
        counts.add(min(n, per_node))
    counts.update(range(2 * per_node, MAX_SEARCH_GPUS + 1, per_node))
    return sorted(c for c in counts if c > current)


Probe = tuple[bool, Estimate]


FitAt = Callable[[int], Probe]


def plan_at(goal: Goal, rules: list[Rule], ctx: RuleContext) -> FitAt:
    """Return count -> (fits, estimate) of the plan searched again at that GPU count.

    The estimate is the plan's when it fits, the deepest memory cut found when not: a plan for
    16 GPUs may shard or split layers as one GPU's could not, so each count gets its own
    search (remembered: min_gpus asks for the answer's estimate again).
    """
    per_node = _per_node(ctx.device, ctx.workload)
    seen: dict[int, Probe] = {}

    def fit_at(count: int) -> Probe:
        if count not in seen:
            nodes = max(1, math.ceil(count / per_node))
            per = count if nodes == 1 else per_node
            workload = ctx.workload.model_copy(update={
                "gpus": nodes * per, "nodes": nodes,
                "gpus_per_node": per if nodes > 1 else None})
            start, options = baseline(workload, ctx.device)
            result = search(goal, rules, start, ctx.device, ctx.host, options, ctx.estimator,
                            fit_only=True)
            seen[count] = (bool(result.final.facts.fits), result.final.estimate)
        return seen[count]

    return fit_at


def min_gpus(ctx: RuleContext, fit_at: FitAt, seed: Estimate | None = None
             ) -> tuple[int, Estimate] | None:
    """Return the fewest GPUs (whole nodes past one) a plan fits on, with its estimate.

    None for devices that do not come in numbers (a phone, a laptop, a CPU host), and when
    even MAX_SEARCH_GPUS do not hold it. seed: the same search's deepest cut at the current
    count, when known, to guess the first count from.
    """
    if str(ctx.device.device_class) not in ("datacenter-gpu", "consumer-gpu"):
        return None
    counts = _counts(ctx.workload.gpus, _per_node(ctx.device, ctx.workload))
    misses = [] if seed is None else [(ctx.workload.gpus, float(seed.memory.total_bytes))]
    found = _fewest(counts, fit_at, ctx.facts.limit_bytes, misses)
    return (counts[found], fit_at(counts[found])[1]) if found is not None else None


def _fewest(counts: list[int], fit_at: FitAt, limit: float | None,
            misses: list[tuple[int, float]]) -> int | None:
    """Index of the fewest counts that fit (fits taken as monotone in the count).

    Each probe is a whole plan search, so the next count is guessed from the memory the
    misses (count, bytes per GPU) need; a guess that fits is checked one count below (it is
    usually right), any other bracket between a miss and a hit is bisected. The answer is the
    same as probing every count in turn.
    """
    miss, hit = -1, len(counts)  # the largest index known to miss, the smallest known to fit
    probe, guessed = _next_guess(counts, miss, misses, limit) if misses else (
        0 if counts else None, False)
    while probe is not None:
        fits, est = fit_at(counts[probe])
        if fits:
            hit = probe
        else:
            miss = probe
            misses.append((counts[probe], float(est.memory.total_bytes)))
        if hit == miss + 1:
            break
        if hit < len(counts):
            probe = hit - 1 if fits and guessed else (miss + hit) // 2
            guessed = False
        else:
            probe, guessed = _next_guess(counts, miss, misses, limit)
    return hit if hit < len(counts) else None


def _next_guess(counts: list[int], miss: int, misses: list[tuple[int, float]],
                limit: float | None) -> tuple[int | None, bool]:
    """Index of the next count to try above a miss, and whether a memory curve chose it.

    The curve: memory ~ a + b / count through the last two misses (one miss: all of it taken
    as sharded, a = 0), solved for the limit. A curve on which memory does not fall with the
    count, or that says the last miss should have fit, gives a doubling instead. None when no
    count is left.
    """
    if miss + 1 >= len(counts):
        return None, False
    last = misses[-1][0]
    wanted, guessed = 2.0 * last, False
    if limit:
        n1, m1 = misses[-1]
        a, b = 0.0, m1 * n1
        if len(misses) > 1:
            n0, m0 = misses[-2]
            b = (m0 - m1) / (1 / n0 - 1 / n1)
            a = m1 - b / n1
        if b > 0 and limit > a and b / (limit - a) > last:
            wanted, guessed = b / (limit - a), True
    return next((i for i in range(miss + 1, len(counts)) if counts[i] >= wanted),
                len(counts) - 1), guessed


def _largest(low: int, high: int, fits: Any) -> int | None:
    """Return the largest n in [low, high] with fits(n), fits monotone (None when not even low)."""
    if not fits(low):
        return None
    while low < high:
        mid = (low + high + 1) // 2
        if fits(mid):
            low = mid
        else:
            high = mid - 1
    return low


def max_batch(ctx: RuleContext) -> int | None:
    """Return the largest batch the final plan fits, within what the engine runs at once there.

    An on-device runtime decodes one conversation whatever the memory would hold (the
    engine's [defaults] max_sequences_on: ExecuTorch's llama runner, LiteRT-LM, Genie, MLC's
    phone app), so its largest batch is that limit, not what the memory holds.
    """
    def fits(batch: int) -> bool:
        return ctx.fits_with({"batch": batch}, {})

    wl = ctx.workload
    most = MAX_BATCH
    if wl.phase == "inference":
        cap = engine_for(wl).defaults.max_sequences_on.get(str(ctx.device.device_class))
        most = min(most, cap) if cap else most
    return _largest(1, most, fits)


def model_window(workload: Workload) -> int | None:
    """Return the longest sequence the model reads (None when its config states none).

    The config's window, RoPE scaling included as vLLM derives it, else max_position_embeddings.
    """
    return workload.spec.window if workload.spec is not None else None


def window_note(workload: Workload) -> str | None:
    """Say it when the request (prompt + generation) is longer than the model reads."""
    window = model_window(workload)
    request = workload.prompt_len + workload.gen_len
    if window is None or request <= window:
        return None
    name = workload.spec.name if workload.spec else workload.model
    room = window - workload.gen_len
    keep = (f"keep prompts to {room:,} tokens to generate {workload.gen_len:,}" if room > 0
            else f"the generation alone ({workload.gen_len:,} tokens) is longer than that")
    return (f"the request ({request:,} tokens: {workload.prompt_len:,} prompt + "
            f"{workload.gen_len:,} generated) is longer than {name} reads ({window:,} tokens, "
            f"its config's window): the config caps each request at {window:,}; {keep}")


def max_context(ctx: RuleContext, batch: int | None = None) -> int | None:
    """Inference: the longest prompt + generation that fits at the plan's batch (or `batch`).

    Never above the model's window (model_window).
    """
    if ctx.workload.phase != "inference":
        return None
    gen = ctx.workload.gen_len
    limit = model_window(ctx.workload)
    high = max(limit or 0, ctx.workload.prompt_len + gen, 1 << 17)

    def fits(total: int) -> bool:
        changes: dict[str, int] = {"prompt_len": max(1, total - gen)}
        if batch is not None:
            changes["batch"] = batch
        return ctx.fits_with(changes, {})

    found = _largest(gen + 1, high, fits)
    if found is not None and limit:
        found = min(found, limit)
    return found


def host_fits(ctx: RuleContext, needed: int | None) -> bool | None:
    """Whether host RAM needed per node fits the planned host (None: none needed, or unknown).

    The same share of the host's RAM the offload step counts on (planners.HOST_RAM_USABLE_SHARE).
    """
    from hwadvisor.rules.playbooks.planners import HOST_RAM_USABLE_SHARE

    have = ctx.facts.host_memory_bytes
    if not needed or not have:
        return None
    return needed <= HOST_RAM_USABLE_SHARE * have


def host_words(ctx: RuleContext, needed: int) -> str:
    """Say the host RAM an alternative needs per node, checked against the planned host's."""
    said = f"{units.gb(needed)} of host RAM per node"
    have = ctx.facts.host_memory_bytes
    if not have:
        return said
    if host_fits(ctx, needed):
        return f"{said}, within the planned host's {units.gb(have)}"
    return (f"{said}, more than the planned host's {units.gb(have)} can spare; "
            "--host-memory-gb plans another host")


def offloaded_host_bytes(ctx: RuleContext, gpus: int, est: Estimate,
                          params: float | None = None) -> int | None:
    """Host RAM per node a training plan at `gpus` needs for its offloaded optimizer, if any.

    A full fine-tune whose estimate holds no optimizer state on the GPU has moved it to host
    RAM (ZeRO-Offload, FSDP2's CPUOffloadPolicy): fp32 master weights, Adam's moments and the
    fp32 gradients, 16 bytes a parameter, split over the nodes (planners.optimizer_offload_plan).
    params: the model's parameters when it is not the plan's (a smaller preset).
    """
    if ctx.workload.phase != "training" or ctx.options.finetune != "full" or \
            est.memory.optimizer_bytes > 0:
        return None
    nodes = max(1, math.ceil(gpus / _per_node(ctx.device, ctx.workload)))
    return int(float(params if params is not None else ctx.workload.params_total or 0)
               * 16.0 / nodes)


def longest_request(ctx: RuleContext) -> int | None:
    """Inference: the longest prompt + generation one request may have (the KV pool at batch 1).

    Capped by the model's window; what a serving engine's --max-model-len should say: vLLM
    refuses to start above either (config/model.py _get_and_verify_max_len; the KV cache check
    of v1/core/kv_cache_utils.py, 0.33.0). None when not even one short request fits.
    """
    if ctx.workload.phase != "inference":
        return None
    return max_context(ctx, batch=1)


def per_gpu(device: Device) -> str:
    """Return " per GPU" for a GPU; nothing for a Mac, phone or CPU, whose memory is one pool."""
    return " per GPU" if str(device.device_class) in ("datacenter-gpu", "consumer-gpu") else ""
