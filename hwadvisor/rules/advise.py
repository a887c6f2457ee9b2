"""From the plan search to the advice: the plan, its bottom line, and the items behind it.

recommend() runs the search (rules/search.py) on the engine's default setup, then says what a
practitioner needs next to the steps: whether it fits, how many GPUs would make it fit, the
largest batch and context the plan holds, the other ways out, and the plan in the engine's own
words (its flags or config).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hwadvisor import units
from hwadvisor.models import (
    Device,
    Estimate,
    HostInfo,
    ModelOptions,
    Plan,
    PlanAlternative,
    Recommendation,
    Rejected,
    Workload,
)
from hwadvisor.models.plan import EngineConfig, EngineLine
from hwadvisor.models.recommend import Goal
from hwadvisor.rules.context import Estimator, RuleContext
from hwadvisor.rules.judge import Candidate, baseline, default_estimator, fits_limit
from hwadvisor.rules.playbooks.schema import Rule, rules_for_goal
from hwadvisor.rules.search import (
    SearchResult,
    beyond_budget,
    fmt_metric,
    goal_gain,
    goal_value,
    layout_of,
    plan_metric,
    recommendation,
    search,
    search_steps,
    step_of,
    tier,
)

MAX_SEARCH_GPUS = 1024
MAX_BATCH = 1 << 16


@dataclass
class Outcome:
    """What the engine found for one goal."""

    estimate: Estimate
    plan: Plan
    recommendations: list[Recommendation]
    rejected: list[Rejected]
    notes: list[str] = field(default_factory=list)


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
    """Return the largest batch the final plan fits."""
    def fits(batch: int) -> bool:
        return ctx.fits_with({"batch": batch}, {})

    return _largest(1, MAX_BATCH, fits)


def max_context(ctx: RuleContext, batch: int | None = None) -> int | None:
    """Inference: the longest prompt + generation that fits at the plan's batch (or `batch`)."""
    if ctx.workload.phase != "inference":
        return None
    gen = ctx.workload.gen_len
    limit = ctx.workload.spec.max_position_embeddings if ctx.workload.spec else None
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


def _checkpointed(goal: Goal, ctx: RuleContext, alt_id: str, title: str,
                  workload_changes: dict, option_changes: dict, text: str) -> PlanAlternative:
    """Return an alternative as it is, or with full activation checkpointing when only that fits.

    PEFT recipes (LoRA, QLoRA) turn gradient checkpointing on as a matter of course.
    """
    plain = _alternative(goal, ctx, alt_id, title, workload_changes, option_changes, text)
    if plain.fits or ctx.workload.activation_checkpointing and \
            not ctx.options.selective_checkpointing and ctx.options.checkpoint_every <= 1:
        return plain
    checkpointed = _alternative(
        goal, ctx, alt_id, title, {**workload_changes, "activation_checkpointing": True},
        {**option_changes, "selective_checkpointing": False, "checkpoint_every": 1},
        f"{text}, with full activation checkpointing")
    return checkpointed if checkpointed.fits else plain


def _alternative(goal: Goal, ctx: RuleContext, alt_id: str, title: str, workload_changes: dict,
                 option_changes: dict, text: str, host_bytes: int | None = None
                 ) -> PlanAlternative:
    """Estimate one what-if on the plan: its memory, fit (GPU and host RAM) and goal metric."""
    est = ctx.estimate_with(workload_changes, option_changes)
    on_gpu = fits_limit(est, ctx.facts)
    on_host = host_fits(ctx, host_bytes)
    fits = on_gpu and on_host is not False
    verdict = "fits" if fits else (
        "fits on the GPU but not in the host's RAM" if on_gpu else "still does not fit")
    return PlanAlternative(
        id=alt_id, title=title, changes={**workload_changes, **option_changes}, fits=fits,
        metric=goal_value(goal, est), memory_per_gpu_bytes=est.memory.total_bytes,
        host_memory_bytes=host_bytes, host_memory_fits=on_host,
        text=f"{text}: {units.gb(est.memory.total_bytes)}{per_gpu(ctx.device)}, {verdict}"
        + (f", {metric_words(goal, est)}" if on_gpu else ""))


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


# A model that fits but generates slower than this is no answer on a phone or laptop: people
# read at ~5 words (~7 tokens) a second; 10 tokens/s keeps ahead of them (assumption, stated).
# `recommend --min-tokens-per-s` replaces it; every smaller preset that fits is still shown.
USABLE_TOKENS_PER_S = 10.0
# The memory goal trades speed for memory by design, so its floor is lower: 5 tokens/s is still
# about reading speed (~4 words a second; assumption, stated, after issue 27's suggestion).
# Below it a plan is no answer when one above it fits. `--min-tokens-per-s` replaces both.
MEMORY_TOKENS_PER_S = 5.0
# The inference-latency plan is named beside a memory plan below the floor when it generates at
# least this many times faster (a 10% difference is within the model's error).
LATENCY_PLAN_FASTER = 1.1


def speed_floor(goal: Goal, min_tokens_per_s: float | None) -> float:
    """Return the generation speed (tokens/s per sequence) a plan's answer must keep.

    --min-tokens-per-s when given; otherwise 5 tokens/s for the memory-footprint goal and
    10 for the others.
    """
    if min_tokens_per_s is not None:
        return min_tokens_per_s
    return MEMORY_TOKENS_PER_S if goal == "memory-footprint" else USABLE_TOKENS_PER_S


def _speed(est: Estimate) -> float | None:
    """Return the generation speed of one sequence (tokens/s), or None outside inference."""
    return 1.0 / est.times.tpot_s if est.times.tpot_s else None


def _usable(est: Estimate, workload: Workload, floor: float) -> bool:
    if workload.phase != "inference" or not est.times.tpot_s:
        return True
    return 1.0 / est.times.tpot_s >= floor


def smaller_model(goal: Goal, result: SearchResult, floor: float = USABLE_TOKENS_PER_S
                  ) -> list[PlanAlternative]:
    """Return every smaller preset of the family that fits with the plan, largest first.

    The first is the answer: the largest that fits at `floor` tokens/s or faster (same
    vocabulary first); the others follow with their predicted speed, those below the floor said
    so. Same family: the same model_type. Each is tried with the plan and without its fit-only
    steps and changes of method, and keeps the one that serves the goal better: a model that
    runs faster without offload runs without it, as anyone would; for the memory goal the
    plan's cuts stay.
    """
    ctx = result.final
    spec = ctx.workload.spec
    presets = _smaller_presets(ctx.workload)
    if spec is None or not presets:
        return []
    lean, dropped = _without_fit_steps(result)
    states: list[tuple[RuleContext, list[str]]] = [(ctx, [])]
    if lean is not None:
        states.append((lean, dropped))
    unloaded = _without_offload(result)
    fitting: list[tuple[bool, bool, int, str, Estimate, list[str]]] = []
    for preset, same_vocab, params in presets:
        best: tuple[Estimate, list[str]] | None = None
        tried = states
        if unloaded is not None:
            # The big model's offload was sized to fit the big model: a smaller one that fits
            # on the GPUs without it runs without it, whatever the goal.
            workload, est = _estimate_preset(unloaded[0], preset)
            if fits_limit(est, unloaded[0].facts):
                best = (est, unloaded[1])
                tried = [s for s in states if s[1]]  # the plan without its fit-only steps
        for state, without in tried:
            workload, est = _estimate_preset(state, preset)
            if not fits_limit(est, state.facts):
                continue
            if best is None or goal_gain(goal, best[0], est) > 1.0:
                best = (est, without)
        if best is not None:
            usable = _usable(best[0], ctx.workload, floor)
            fitting.append((usable, same_vocab, params, preset, *best))
    fitting.sort(key=lambda f: (f[0], f[1], f[2], f[3]), reverse=True)
    # Serving: every one that fits, with its speed (the trade-off is speed against size);
    # training: the one answer.
    shown = fitting if ctx.workload.phase == "inference" else fitting[:1]
    return [_smaller_alternative(goal, ctx, f, floor, first=i == 0)
            for i, f in enumerate(shown[:SMALLER_MODELS_SHOWN])]


def _smaller_alternative(goal: Goal, ctx: RuleContext,
                         found: tuple[bool, bool, int, str, Estimate, list[str]], floor: float,
                         first: bool) -> PlanAlternative:
    """Return one fitting smaller preset as an alternative, with its speed and the floor."""
    usable, _, params, preset, est, without = found
    spec = ctx.workload.spec
    speed = _speed(est)
    metric = metric_words(goal, est)
    speed_words = ""
    if speed is not None and ctx.workload.phase == "inference":
        below = "" if usable else f", below the {floor:g} tokens/s floor (--min-tokens-per-s)"
        said = units.rate(speed)
        # when the goal's metric is this speed already, say it once ('44 tokens/s' not twice)
        speed_words = below if said in metric else f", {said}{below}"
    plan_words = f"this plan without {', '.join(without)}" if without else "this plan"
    family = spec.model_type if spec is not None else "same-family"
    lead = (f"the largest {family} preset that fits with {plan_words}" if first and usable
            else f"also fits with {plan_words}")
    # kept with the plan's optimizer offload, the smaller model's state is in host RAM too
    host = _offloaded_host_bytes(ctx, ctx.workload.gpus, est, float(params))
    return PlanAlternative(
        id=SMALLER_MODEL, title=f"A smaller model: {preset} ({params / 1e9:.1f}B)",
        changes={"model": preset}, fits=host_fits(ctx, host) is not False,
        metric=goal_value(goal, est),
        memory_per_gpu_bytes=est.memory.total_bytes,
        host_memory_bytes=host, host_memory_fits=host_fits(ctx, host),
        text=f"{preset} ({params / 1e9:.1f}B, {lead}): {units.gb(est.memory.total_bytes)}"
             f"{per_gpu(ctx.device)}, {metric}{speed_words}"
             + (f", with the optimizer state in host RAM ({host_words(ctx, host)})"
                if host else ""))


# The id of a smaller-model alternative (ranked after those that keep the asked model).
SMALLER_MODEL = "smaller-model"

# At most this many smaller presets are listed (the family's presets step down 8B, 3B, 1B).
SMALLER_MODELS_SHOWN = 4


# A smaller model is an answer when it is a step down a practitioner would take (8B -> 3B,
# 70B -> 8B), not a variant a tenth smaller that changes nothing material (assumption, stated).
SMALLER_MODEL_MAX_FRACTION = 0.75


def _smaller_presets(asked: Workload) -> list[tuple[str, bool, int]]:
    """Return the presets of the asked model's family a step down in size.

    Each with whether it shares the asked model's vocabulary (its tokenizer generation), and
    its parameter count.
    """
    from hwadvisor.workload import count_params, list_presets, load_spec

    spec, total = asked.spec, asked.params_total or 0
    if spec is None:
        return []
    out = []
    for preset in list_presets():
        other = load_spec(preset)
        if other.model_type != spec.model_type:
            continue
        params = count_params(other)[0]
        if 0 < params <= SMALLER_MODEL_MAX_FRACTION * total:
            out.append((preset, other.vocab_size == spec.vocab_size, params))
    return out


def _estimate_preset(state: RuleContext, preset: str) -> tuple[Workload, Estimate]:
    """Return state's workload with another preset as the model, and its estimate.

    Every other setting stays: the dtypes, checkpointing, accumulation and layout the plan
    reached (rebuilding the workload from the options would drop the plan's workload changes).
    """
    from hwadvisor.workload import count_params, load_spec

    spec = load_spec(preset)
    total, active = count_params(spec)
    workload = state.workload.model_copy(update={
        "model": preset, "spec": spec, "params_total": total, "params_active": active,
        "is_default": False})
    return workload, state.estimator(workload, state.device, state.options)


# The plan step that keeps layers in host RAM (rules/memory.toml).
OFFLOAD_RULE = "cpu-offload"


def _without_offload(result: SearchResult) -> tuple[RuleContext, list[str]] | None:
    """Return the plan replayed without its weight offload and the step's id; None without one."""
    ids = [s.candidate.rule.id for s in result.steps]
    if OFFLOAD_RULE not in ids:
        return None
    return result.replay([i for i in ids if i != OFFLOAD_RULE]), [OFFLOAD_RULE]


def _without_fit_steps(result: SearchResult) -> tuple[RuleContext | None, list[str]]:
    """Return the plan replayed without its fit-only steps and changes of method, and their ids.

    None when the plan has no such step.
    """
    dropped = [s.candidate.rule.id for s in result.steps if tier(s.candidate.rule) > 1]
    if not dropped:
        return None, []
    kept = [s.candidate.rule.id for s in result.steps if tier(s.candidate.rule) == 1]
    return result.replay(kept), dropped


def metric_words(goal: Goal, est: Estimate) -> str:
    """Return the goal's metric of an estimate, named ('request latency 1.2 s')."""
    return f"{metric_name(goal)} {fmt_metric(goal, goal_value(goal, est))}"


def metric_name(goal: Goal) -> str:
    """Return the goal metric's short name: 'request latency (TTFT + gen x TPOT)' -> its head."""
    from hwadvisor.rules.playbooks.goals import goal_spec

    return goal_spec(goal).metric_spec.label.split(" (")[0]


def _offloaded_host_bytes(ctx: RuleContext, gpus: int, est: Estimate,
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


def alternatives(goal: Goal, result: SearchResult, rules: dict[str, Rule],
                 floor: float = USABLE_TOKENS_PER_S) -> tuple[list[PlanAlternative], int | None]:
    """Other ways out when the plan does not fit: more GPUs, offload, LoRA, a smaller model."""
    ctx = result.final
    out: list[PlanAlternative] = []
    pool = list(rules.values())
    if ctx.facts.fits:
        pool = [r for r in pool if tier(r) == 1]  # the plan fits: more GPUs instead of offload
    # Not fitting, the plan is the deepest cut this pool finds at the current count.
    found = min_gpus(ctx, plan_at(goal, pool, result.base),
                     seed=None if ctx.facts.fits else ctx.estimate)
    count = found[0] if found is not None else None
    if found is not None:
        gpus, est = found
        host = _offloaded_host_bytes(ctx, gpus, est)
        # The search at that count checked the host for its offload (optimizer_offload_plan).
        out.append(PlanAlternative(
            id="more-gpus", title=f"{gpus} x {ctx.device.name}", changes={"gpus": gpus},
            fits=True, metric=goal_value(goal, est), memory_per_gpu_bytes=est.memory.total_bytes,
            host_memory_bytes=host, host_memory_fits=host_fits(ctx, host),
            text=(f"the plan fits on {gpus} x {ctx.device.name}" if not ctx.facts.fits else
                  f"without offload or a change of method it fits on {gpus} x {ctx.device.name}")
            + f": {units.gb(est.memory.total_bytes)} per GPU, {metric_words(goal, est)}"
            + (f", with the optimizer state in host RAM ({host_words(ctx, host)})"
               if host else "")))
    in_plan = {s.candidate.rule.id for s in result.steps}
    method = [s for s in result.steps if s.candidate.rule.changes_method]
    if method:
        # The plan changes the method (LoRA, QLoRA): say what the unchanged method needs too.
        same = [r for r in rules.values() if not r.changes_method]
        found_plain = min_gpus(ctx, plan_at(goal, same, result.base))
        if found_plain is not None:
            gpus, est = found_plain
            # the method unchanged (a full fine-tune) may keep its optimizer in host RAM
            host = _offloaded_host_bytes(result.base, gpus, est)
            out.append(PlanAlternative(
                id="more-gpus-same-method",
                title=f"{gpus} x {ctx.device.name} without "
                      f"{', '.join(s.candidate.rule.id for s in method)}",
                changes={"gpus": gpus}, fits=True, metric=goal_value(goal, est),
                memory_per_gpu_bytes=est.memory.total_bytes,
                host_memory_bytes=host, host_memory_fits=host_fits(ctx, host),
                text=f"without {', '.join(s.candidate.rule.id for s in method)} it fits on "
                     f"{gpus} x {ctx.device.name}: {units.gb(est.memory.total_bytes)} per GPU, "
                     f"{metric_words(goal, est)}"
                     + (f", with the optimizer state in host RAM ({host_words(ctx, host)})"
                        if host else "")))
    training = ctx.workload.phase == "training"
    offloader = _offload_engine(ctx) if training else None
    if offloader is not None and "optimizer-offload" not in in_plan:
        # 16 bytes a parameter split over the nodes, as optimizer_offload_plan counts them
        needed = int(float(ctx.workload.params_total or 0) * 16.0 / max(ctx.facts.nodes, 1))
        title, what = ("Optimizer state in host RAM (ZeRO-Offload)", "the optimizer")
        if offloader == "" and _offloads_whole_shards(ctx):
            title, what = ("Parameters, gradients and optimizer in host RAM (FSDP2 "
                           "CPUOffloadPolicy)", "parameters, gradients and optimizer state")
        out.append(_alternative(goal, ctx, "optimizer-offload", title, {},
                                {"optimizer_offload": True},
                                f"offload {what} ({host_words(ctx, needed)})"
                                + offloader, host_bytes=needed))
    if training and ctx.options.finetune == "full":
        # The frozen base keeps the checkpoint's own dtype: the plan's FP8 training casts for
        # its GEMMs, which LoRA on a frozen bf16 model does not do.
        base_dtype = {"weights_dtype": result.base.workload.weights_dtype}
        out.append(_checkpointed(goal, ctx, "lora", "LoRA (fine-tuning only)", base_dtype,
                                 {"finetune": "lora", "lora_rank": 16},
                                 "LoRA rank 16 on the frozen bf16 model (fine-tunes; does not "
                                 "pre-train)"))
        out.append(_checkpointed(goal, ctx, "qlora", "QLoRA (fine-tuning only)",
                                 {"weights_dtype": "nf4"}, {"finetune": "qlora", "lora_rank": 16},
                                 "QLoRA: the frozen base in 4-bit NF4 with rank-16 adapters"))
    if not training and ctx.workload.weights_dtype in ("bf16", "fp16", "fp32", "fp8", "int8") \
            and "int4-weights" not in in_plan:
        out.append(_alternative(goal, ctx, "int4-weights", "4-bit weights",
                                {"weights_dtype": "int4"}, {}, "4-bit weights"))
    out.extend(smaller_model(goal, result, floor))
    # Listed: what fits, the more-GPUs answer, and what fits on the GPUs but not in the host's
    # RAM (the user may have a larger host); a what-if that does not fit the GPUs is no answer.
    shown = [a for a in out if a.fits or a.id == "more-gpus" or a.host_memory_fits is False]
    return rank_alternatives(goal, shown), count


def rank_alternatives(goal: Goal, found: list[PlanAlternative]) -> list[PlanAlternative]:
    """Order alternatives as order_words says: those that fit, best on the goal's metric first.

    Smaller models come after the alternatives that keep the asked model, largest first as
    smaller_model lists them: a smaller model wins on any speed metric without being what was
    asked for. Those that do not fit come last; ties keep the order they were built in.
    """
    from hwadvisor.rules.playbooks.goals import goal_spec

    higher = goal_spec(goal).metric_spec.better == "higher"

    def key(alt: PlanAlternative) -> tuple[int, float]:
        group = 2 if not alt.fits else 1 if alt.id == SMALLER_MODEL else 0
        if group or alt.metric is None:
            return group, math.inf
        return group, -alt.metric if higher else alt.metric

    return sorted(found, key=key)


def order_words(goal: Goal, plan: Plan, model: str, latency_first: bool) -> str:
    """Say why the plan's alternatives come in their order (plan.alternatives_order)."""
    from hwadvisor.rules.playbooks.goals import goal_spec

    alts = plan.alternatives
    if not alts:
        return ""
    metric = goal_spec(goal).metric_spec
    label = metric_name(goal)
    best = {"tokens/s": "highest", "s": "lowest", "bytes": "smallest"}[metric.unit]
    ranked = f"ranked by {label} ({best} first)"
    parts = [f"the inference-latency plan first (no memory plan reaches the speed floor), "
             f"then those that fit, {ranked}" if latency_first
             else f"those that fit first, {ranked}"]
    if any(a.id == SMALLER_MODEL for a in alts):
        parts.append(f"smaller models after those that keep {model}, largest first")
    if not all(a.fits for a in alts):
        parts.append("those that do not fit last")
    return "; ".join(parts)



# llama.cpp pads each slot's context to 256 tokens (llama-context.cpp GGML_PAD(n_ctx_seq, 256)).
_SLOT_PAD = 256


# The QNN SDK's default SoC when the device names none (executorch LlmConfig QNNConfig.soc_model).
_DEFAULT_SOC = "SM8650"


def _soc_model(device: Device) -> str:
    """Return the Qualcomm SoC part number (SM8750 ...) of the planned device, from its profile."""
    import re

    from hwadvisor import profiles

    if device.profile_id and device.profile_id in profiles.ids():
        for name in profiles.get(device.profile_id).match.names:
            if re.fullmatch(r"SM\d{4}", name):
                return name
    return _DEFAULT_SOC


def _checkpoint_form(options: ModelOptions) -> str:
    """Return the checkpointing level the model counted: selective, layers (every N-th), full."""
    if options.selective_checkpointing:
        return "selective"
    return "layers" if options.checkpoint_every > 1 else "full"


def _checkpoint_values(ctx: RuleContext, plan: Plan) -> dict[str, object]:
    """Return every-N-th-layer checkpointing's N and one pipeline stage's checkpointed layers.

    Megatron's block method checkpoints the first K layers of each stage
    (megatron/core/transformer/transformer_block.py _checkpointed_forward, core 0.19): K is
    rounded up so no stage keeps more than the model counted.
    """
    every = ctx.options.checkpoint_every
    layers = ctx.workload.spec.num_layers if ctx.workload.spec else 0
    stages = max(plan.layout.pp if plan.layout else 1, 1)
    return {"checkpoint_every": every, "recompute_layers": -(-(layers // every) // stages)}


def _step_tokens(ctx: RuleContext) -> int | None:
    """Return the engine's tokens per step on this GPU (its prefill chunk); None: not stated."""
    from hwadvisor.engines import engine_for

    return engine_for(ctx.workload).defaults.chunk_on(ctx.device.memory_total_bytes)


def _max_sequences(ctx: RuleContext, plan: Plan) -> int:
    """Return the sequences a paged engine may hold at once (vLLM --max-num-seqs).

    The KV pool's capacity, capped at the engine's tokens per step on this GPU (its prefill
    chunk): vLLM refuses to start when max_num_seqs exceeds max_num_batched_tokens
    (config/scheduler.py at 0.33.0, "must be greater than or equal to max_num_seqs"), which
    `vllm serve` sets to 8192 on an H100/H200 and 2048 on smaller GPUs. Never below the
    planned batch.
    """
    capacity = plan.max_batch or ctx.workload.batch
    chunk = _step_tokens(ctx)
    if chunk:
        capacity = min(capacity, chunk)
    return max(capacity, ctx.workload.batch)


def _draft(ctx: RuleContext) -> str | None:
    """Return the published checkpoint of the planned drafter, in the engine's form.

    speculative_plan plans a drafter that needs a checkpoint only where one is published; a
    drafter set any other way without one keeps a placeholder its step note names.
    """
    from hwadvisor.perfmodel.drafters import DRAFTERS
    from hwadvisor.rules.playbooks.planners import published_draft_for

    drafter = ctx.options.speculative_drafter
    if drafter is None or not DRAFTERS[drafter].needs:
        return None
    found = published_draft_for(ctx, drafter)
    return found.id if found is not None else "DRAFT_CHECKPOINT"


def _engine_values(ctx: RuleContext, plan: Plan) -> dict[str, object]:
    """Return the values the engine's flag templates are filled with.

    What each means is settled here, once for every engine: `max_model_len` is the longest
    single request (the model's limit, or what the KV pool holds at batch 1), never the
    per-sequence share at the planned batch; `slot_context` is one request (prompt +
    generation) for engines that allocate each slot up front (llama-server's slots, phones'
    static caches), and `kv_pool_tokens` the slots times that.
    """
    wl, opts = ctx.workload, ctx.options
    layout = plan.layout
    spec = wl.spec
    from hwadvisor.engines import engine_for

    # Engines that page the KV cache take a capacity (vLLM --max-num-seqs); slot-based ones
    # (llama-server --parallel, mlx) take the concurrency you serve.
    paged = engine_for(wl).defaults.paged_kv
    mtp_layers = max(spec.mtp_layers, 1) if spec else 1  # the MTP form's draft depth
    request = wl.prompt_len + wl.gen_len
    slot = -(-request // _SLOT_PAD) * _SLOT_PAD
    slots = wl.batch
    training = wl.phase == "training"
    half = wl.activation_dtype == "fp16" or "bf16" not in ctx.device.formats
    values: dict[str, object] = {
        "model": wl.model, "gpus": wl.gpus, "nodes": wl.nodes,
        "gpus_per_node": wl.gpus_per_node or wl.gpus // max(wl.nodes, 1),
        "batch": wl.batch, "max_batch": _max_sequences(ctx, plan) if paged else wl.batch,
        # the step's token budget, said only where the planned batch is above the engine's own
        "step_tokens": wl.batch if paged and wl.batch > (_step_tokens(ctx) or wl.batch) else None,
        "prompt_len": wl.prompt_len, "gen_len": wl.gen_len,
        "context": wl.prompt_len if training else max(longest_request(ctx) or request, request),
        "max_model_len": max(longest_request(ctx) or request, request),
        "slot_context": slot, "kv_pool_tokens": slot * slots,
        "precision_fp16": True if half and opts.mixed_precision and
        wl.activation_dtype not in ("fp32", "tf32") else None,
        "precision_bf16": True if training and opts.mixed_precision and not half and
        wl.activation_dtype == "bf16" else None,
        "fine_tune_type": "lora" if opts.finetune in ("lora", "qlora") else "full",
        "zero_stage": _zero_stage(plan, opts),
        # sequences per optimizer step over all data-parallel ranks (Megatron, torchtitan)
        "global_batch": wl.batch * wl.grad_accum * (layout.dp if layout is not None else 1),
        # what one data-parallel rank runs per pipeline schedule: the micro-batch, or with
        # pipeline stages all of its micro-batches (torchtitan cuts its local batch into them)
        "local_batch": wl.batch * wl.grad_accum if layout is not None and layout.pp > 1
        else wl.batch,
        "chunk": opts.prefill_chunk_tokens or 8192, "kv_dtype": wl.kv_dtype,
        "weights_dtype": wl.weights_dtype, "draft": _draft(ctx),
        "spec_tokens": opts.speculative_draft_tokens or 3,
        "spec_draft_tokens": (opts.speculative_draft_tokens or 3) + 1, "grad_accum": wl.grad_accum,
        "lora_rank": opts.lora_rank, "threads": 8, "offload_fraction": opts.offload_fraction,
        "gpu_layers": _gpu_layers(wl, opts),
        "mtp_layers": mtp_layers, "mtp_draft_tokens": mtp_layers + 1,
        "soc_model": _soc_model(ctx.device),
        **_checkpoint_values(ctx, plan),
    }
    if layout is not None:
        # dp is the count of full replicas; FSDP's ranks are its shard degree, not replicas.
        replicas = layout.replicas()
        # vLLM's DP+EP counts tensor parallelism per attention rank (1); SGLang's DP attention
        # keeps the group's --tp-size (the engine's config says which).
        config = engine_for(wl).config_for(wl.phase)
        tp = layout.tp // layout.attn_dp if config.dp_attention_tp == "attention" else layout.tp
        if layout.attn_dp > 1 and isinstance(values["max_batch"], int):
            # vLLM's --max-num-seqs and SGLang's --max-running-requests count per DP rank
            values["max_batch"] = -(-values["max_batch"] // layout.attn_dp)
        values.update(tp=tp, pp=layout.pp, dp=replicas, cp=layout.cp, attn_dp=layout.attn_dp,
                      ep=layout.gpus if layout.ep else 1,
                      dp_shard=layout.shard_degree(), dp_replicate=replicas)
    return values


def _offloads_whole_shards(ctx: RuleContext) -> bool:
    """Tell whether the engine's offload is FSDP2's CPUOffloadPolicy and the plan shards.

    torchtitan applies enable_cpu_offload only where FSDP shards the parameters
    (data_parallel_shard_degree > 1): elsewhere it does nothing.
    """
    from hwadvisor.engines import engine_for
    from hwadvisor.perfmodel.layout import resolve_layout

    if engine_for(ctx.workload).costs.offload != "fsdp-cpu":
        return False
    layout = resolve_layout(ctx.workload, ctx.options)
    return layout.strategy in ("fsdp", "hsdp") and layout.shard_degree > 1


def _offload_engine(ctx: RuleContext) -> str | None:
    """Say who offloads the optimizer alone: '' for the workload's engine, else DeepSpeed.

    None when neither can on this device (Apple's unified memory has nowhere to offload to).
    """
    from hwadvisor.engines import engine_for, get_engine

    engine = engine_for(ctx.workload)
    if not engine.cannot("optimizer-offload") and (
            engine.costs.offload != "fsdp-cpu" or _offloads_whole_shards(ctx)):
        return ""
    other = get_engine("deepspeed")
    if str(ctx.device.device_class) not in other.device_classes:
        return None
    why = engine.reasons.get("optimizer-offload", "no such option")
    if engine.costs.offload == "fsdp-cpu" and not engine.cannot("optimizer-offload"):
        why = ("its offload is FSDP2's CPUOffloadPolicy (parameters, gradients and optimizer "
               "together), applied only where FSDP shards the parameters over several GPUs")
    return f" with {other.name} (ZeRO-Offload); {engine.name} cannot: {why}"


def _zero_stage(plan: Plan, options: ModelOptions) -> int:
    """Return the plan's sharding as ZeRO counts it: 3 parameters, 2 gradients, 0 nothing."""
    steps = {s.id for s in plan.steps}
    if options.sharding in ("fsdp", "hsdp") or steps & {"fsdp2-zero3", "hsdp", "cpu-offload"}:
        return 3
    if options.optimizer_offload or "optimizer-offload" in steps:
        return 2  # ZeRO-Offload offloads the partitioned optimizer state (stage 1 or 2)
    return 0


def _gpu_layers(workload: Workload, options: ModelOptions) -> int:
    """llama.cpp --n-gpu-layers: all layers, or the share the offload step keeps on the GPU."""
    layers = workload.spec.num_layers if workload.spec else 999
    if not options.offload_fraction:
        return 999  # llama.cpp's "all of them"
    return max(0, int(layers * (1.0 - options.offload_fraction)))


def longest_request(ctx: RuleContext) -> int | None:
    """Inference: the longest prompt + generation one request may have (the KV pool at batch 1).

    Capped by the model's context limit; what a serving engine's --max-model-len should say.
    """
    if ctx.workload.phase != "inference":
        return None
    return max_context(ctx, batch=1)


def engine_config(ctx: RuleContext, plan: Plan) -> EngineConfig | None:
    """Return the plan in the engine's own words (its data file), each line traced to its step."""
    from hwadvisor.engines import (
        STEP_IDS,
        engine_for,
        render_config,
        render_other_configs,
        step_note,
    )

    engine = engine_for(ctx.workload)
    steps = [s.id for s in plan.steps if s.id in STEP_IDS]
    # A move to a serving engine that took the GGUF quant's twin format (serving_engine_plan)
    # needs that checkpoint: the format step's note says which.
    implied = f"{ctx.workload.weights_dtype}-weights"
    twin = ("paged-kv-continuous-batching" in steps and implied not in steps
            and ctx.workload.weights_dtype in ("int4", "int8"))
    # The drafter the plan modelled (speculative_plan), so its acceptance is the one assumed.
    drafter = ctx.options.speculative_drafter
    forms: dict[str, str] = {"speculative-decoding": drafter} if drafter is not None else {}
    if ctx.options.cross_entropy != "plain":
        forms["fused-cross-entropy"] = ctx.options.cross_entropy
    if ctx.workload.activation_checkpointing:
        # The checkpointing level the model counted, in the engine's words.
        forms["activation-checkpointing"] = _checkpoint_form(ctx.options)
    recipe = engine.quantization.get("int4")
    form = recipe.for_model(ctx.workload.model).config_form if recipe is not None else None
    if form is not None:
        # The 4-bit recipe the size was modelled with (a prequantised checkpoint's own export).
        forms["int4-weights"] = form
    elif ctx.workload.weights_dtype == "q4_0" and engine.own_formats.get("int4") != "q4_0":
        forms["int4-weights"] = "legacy"  # Q4_0 chosen over a K-quant mix that would fall back
    values = _engine_values(ctx, plan)
    device_class = str(ctx.device.device_class)
    rendered = render_config(engine, steps, values, device_class, forms, ctx.workload.phase)
    if twin:
        note = step_note(engine, implied, values)
        if note is not None:
            rendered = rendered.model_copy(update={"notes": [*rendered.notes, note]})
    others = render_other_configs(engine, steps, values, device_class, forms) \
        if ctx.workload.phase == "inference" else []
    return _said(engine.id, engine.version, rendered,
                 [_said(engine.id, engine.version, other) for other in others])


def _said(engine_id: str, version: str, rendered: Any,
          also: list[EngineConfig] | None = None) -> EngineConfig:
    """Return a rendered config as the report states it."""
    return EngineConfig(
        engine=engine_id, version=version, format=rendered.format, text=rendered.text,
        lines=[EngineLine(setting=line.setting, step=line.step) for line in rendered.lines],
        not_expressed=[f"{n.step}: {n.reason}" for n in rendered.not_expressed],
        notes=list(rendered.notes), tool=rendered.tool, also=also or [])


def per_gpu(device: Device) -> str:
    """Return " per GPU" for a GPU; nothing for a Mac, phone or CPU, whose memory is one pool."""
    return " per GPU" if str(device.device_class) in ("datacenter-gpu", "consumer-gpu") else ""


def memory_plan_at_floor(result: SearchResult, rules: list[Rule], host: HostInfo | None,
                         options: Any, estimator: Estimator, floor: float) -> SearchResult:
    """Return the memory plan that keeps the speed floor, or the fastest when none can.

    The rule: the memory goal's plan is the smallest-memory plan that fits at `floor`
    tokens/s or faster; when none reaches it, the fastest that fits. Tried: the plan within
    the --quality budget, and the plan 4-bit weights allow (below the budget, as when nothing
    within it fits: a plan that fits only below the floor does not fit a use; its steps carry
    the budget caveat).
    """
    workload = result.base.workload
    if _usable(result.final.estimate, workload, floor) or workload.quality == "int4":
        return result
    goal: Goal = "memory-footprint"
    device = result.base.device
    looser = search(goal, rules, workload.model_copy(update={"quality": "int4"}), device, host,
                    options, estimator)
    ids = [t.candidate.rule.id for t in looser.steps]
    tried = [result, search_steps(goal, rules, workload, device, host, options, estimator, ids)]
    fitting = [r for r in tried if r.final.facts.fits]
    if not fitting:
        return result
    above = [r for r in fitting if _usable(r.final.estimate, workload, floor)]
    if above:
        return min(above, key=lambda r: r.final.estimate.memory.total_bytes)
    return min(fitting, key=lambda r: r.final.estimate.times.tpot_s or math.inf)


def latency_plan(result: SearchResult, host: HostInfo | None, options: Any,
                 estimator: Estimator) -> PlanAlternative | None:
    """Name the inference-latency plan beside a memory plan below the floor, when faster."""
    ctx = result.final
    found = search("inference-latency", rules_for_goal("inference-latency"), result.base.workload,
                   ctx.device, host, options, estimator)
    est, mine = found.final.estimate, ctx.estimate
    if not found.final.facts.fits or not est.times.tpot_s or not mine.times.tpot_s:
        return None
    faster = mine.times.tpot_s / est.times.tpot_s
    if faster < LATENCY_PLAN_FASTER:
        return None
    steps = ", ".join(t.candidate.rule.id for t in found.steps) or "the engine's defaults"
    return PlanAlternative(
        id="latency-plan", title="The inference-latency plan",
        changes={"goal": "inference-latency"}, fits=True,
        metric=goal_value("memory-footprint", est), memory_per_gpu_bytes=est.memory.total_bytes,
        text=f"the inference-latency plan ({steps}) uses {units.gb(est.memory.total_bytes)}"
             f"{per_gpu(ctx.device)} and runs {units.ratio(faster)} faster: "
             f"{units.rate(1.0 / est.times.tpot_s)} (hwadvisor recommend --goal "
             "inference-latency)")


def _summary(goal: Goal, plan: Plan, ctx: RuleContext, below: float | None = None) -> str:
    device = f"{ctx.workload.gpus} x {ctx.device.name}"
    metric = plan.metric
    change = ""
    # the defaults fit unless some step was needed to fit (not only the first: a speed step
    # may come before the offload that makes the plan fit)
    base_fits = not any(s.needed_to_fit for s in plan.steps)
    if base_fits and metric.before and metric.after and metric.before != metric.after:
        ratio = metric.after / metric.before if metric.better == "higher" else \
            metric.before / metric.after
        # '1× the default' says nothing; the one formatter writes '380×', not '3.8e+02x'
        if not units.same_ratio(ratio):
            change = (f" ({units.ratio(ratio)} the engine's default)"
                      if metric.better == "higher" else
                      f" ({units.ratio(ratio)} better than the engine's default)")
    steps = (f"{len(plan.steps)} change{'s' if len(plan.steps) != 1 else ''}" if plan.steps
             else "the engine's defaults")
    limit = units.gb(plan.device_memory_bytes)
    per = per_gpu(ctx.device)
    if plan.fits and below is not None:
        # Bottom line first: it fits, but at no usable speed; what would is in the alternatives.
        ways = [a.text for a in plan.alternatives if a.fits][:3]
        return (f"Fits, but nothing that fits on {device} reaches {units.rate(below)} "
                f"(--min-tokens-per-s): {ctx.workload.model} with {steps} — the fastest memory "
                f"plan, {units.rate(1.0 / (ctx.estimate.times.tpot_s or math.inf))}, "
                f"{units.gb(plan.memory_per_gpu_bytes)}{per} of {limit}."
                + (f" Instead: {'; '.join(ways)}." if ways else ""))
    if plan.fits:
        return (f"Fits: {ctx.workload.model} on {device} with {steps} — "
                f"{fmt_metric(goal, metric.after)}{change}, "
                f"{units.gb(plan.memory_per_gpu_bytes)}{per} of {limit}{_margin(plan, ctx)}.")
    ways = [a.text for a in plan.alternatives if a.fits][:3]
    what = ("; ".join(ways)) if ways else "no alternative fits on this hardware"
    return (f"Does not fit: {ctx.workload.model} needs {units.gb(plan.memory_per_gpu_bytes)}{per} "
            f"on {device} (limit {limit}){' even with ' + steps if plan.steps else ''}. "
            f"What would: {what}.")


def _margin(plan: Plan, ctx: RuleContext) -> str:
    """Say what a plan that fits keeps spare, beyond the allowance the estimate already counts.

    The estimate's runtime allowance (the CUDA context and the caching allocator's unused
    blocks, perfmodel/memory.runtime_bytes) is the margin against the allocator's reserved peak;
    what is left of the device beyond it is said in numbers, so a thin fit reads as one.
    """
    limit, used = plan.device_memory_bytes, plan.memory_per_gpu_bytes
    runtime = ctx.estimate.memory.runtime_bytes if ctx.estimate.memory else None
    if not limit or not used or not runtime:
        return ""
    return (f" ({units.gb(limit - used)} spare, beyond {units.gb(runtime)} counted for the "
            "runtime and the allocator's cache)")


def _recommendations(goal: Goal, result: SearchResult) -> list[Recommendation]:
    """Return the plan's steps first (in order), then the options the plan did not take."""
    recs = [recommendation(goal, t.candidate, t.ctx, rank=i, step=i)
            for i, t in enumerate(result.steps, start=1)]
    others = sorted((c for c in result.unchosen.values() if _worth_listing(goal, c, result)),
                    key=lambda c: (c.rule.needs_retraining, -c.own_gain, c.rule.id))
    for c in others:
        recs.append(recommendation(goal, c, result.final, rank=len(recs) + 1, step=None))
    return recs


def _worth_listing(goal: Goal, c: Candidate, result: SearchResult) -> bool:
    """Return an option the plan did not take but a practitioner would want to hear of.

    Advice measured on another metric than the goal's (disaggregation's inter-token stall,
    mmap's load peak), architecture changes (labelled: they need retraining), and drop-in
    gains on the goal that the plan could not take because they do not fit.
    """
    if c.own_gain <= 1.0:
        return False
    if c.after is None or c.rule.needs_retraining:
        return True
    if tier(c.rule) != 1:
        return False
    gain_on_goal = goal_gain(goal, result.final.estimate, c.after)
    enough = gain_on_goal >= 1 + max(c.rule.min_gain or 0.0, 0.01)
    # below the quality budget, it is shown beside the plan (FP8 and int4 side by side)
    return enough and (not c.fits_after or beyond_budget(c, result.final) is not None)


def _not_enough(goal: Goal, result: SearchResult, c: Candidate) -> str:
    """Say why a candidate stayed out: its own effect, and the goal's metric when that differs."""
    from hwadvisor.rules.playbooks.goals import goal_spec
    from hwadvisor.rules.playbooks.metrics import prediction

    why = f"on the plan it would not help enough: {c.prediction.text}"
    metric = goal_spec(goal).metric
    before, after = goal_value(goal, result.final.estimate), None
    if c.after is not None:
        after = goal_value(goal, c.after)
    if c.prediction.metric != metric and before and after:
        why += f"; {prediction(metric, before, after).text}"
    return why


def _rejected(goal: Goal, result: SearchResult, recs: list[Recommendation]) -> list[Rejected]:
    shown = {r.id for r in recs}
    out = [Rejected(id=rule_id, why_not=f"{rule_id}: {why}", conditions_failed=["engine"])
           for rule_id, why in result.already.items()]
    out += [r for rule_id, r in result.rejected.items() if rule_id not in shown]
    for rule_id, c in result.unchosen.items():
        if rule_id in shown:
            continue
        if tier(c.rule) > 1 and result.final.facts.fits:
            why = "not needed: the plan fits without it"
        else:
            why = _not_enough(goal, result, c)
        out.append(Rejected(id=rule_id, why_not=f"{rule_id}: {why}",
                            conditions_failed=["min_gain"]))
    return sorted(out, key=lambda r: r.id)


def recommend(
    workload: Workload,
    device: Device,
    goal: Goal,
    host: HostInfo | None = None,
    estimator: Estimator | None = None,
    rules: list[Rule] | None = None,
    min_tokens_per_s: float | None = None,
) -> Outcome:
    """Search the goal's playbook for the plan on this workload and device; say the rest.

    min_tokens_per_s: the speed a plan's answer must keep (None: speed_floor's default): a
    smaller model must reach it to be the answer (smaller ones that fit are listed either
    way), and a memory plan below it is not the answer when one above it fits.
    """
    estimator = estimator or default_estimator()
    chosen = [r.for_goal(goal) for r in rules] if rules is not None else rules_for_goal(goal)
    start, options = baseline(workload, device)
    floor = speed_floor(goal, min_tokens_per_s)
    result = search(goal, chosen, start, device, host, options, estimator)
    below_floor = False
    if goal == "memory-footprint" and start.phase == "inference":
        result = memory_plan_at_floor(result, chosen, host, options, estimator, floor)
        below_floor = result.final.facts.fits and \
            not _usable(result.final.estimate, start, floor)
    final = result.final
    steps = [step_of(goal, t, i) for i, t in enumerate(result.steps, start=1)]
    fits = bool(final.facts.fits)
    plan = Plan(
        engine=workload.engine, steps=steps, fits=fits,
        memory_per_gpu_bytes=final.estimate.memory.total_bytes,
        device_memory_bytes=final.facts.limit_bytes,
        metric=plan_metric(goal, result.base.estimate, final.estimate),
        ttft_s=final.estimate.times.ttft_s, tpot_s=final.estimate.times.tpot_s,
        tokens_per_s=final.estimate.tokens_per_s, layout=layout_of(final),
        summary="")
    leans = [t for t in result.steps if t.needed_to_fit and tier(t.candidate.rule) > 1]
    if fits:
        plan.max_batch = max_batch(final)
        plan.max_context = max_context(final)
    if not fits or leans:
        # Without a fit, what would; with a fit that leans on offload or a change of method,
        # what it takes without them (more GPUs), so the trade-off is in plain sight.
        found, count = alternatives(goal, result, {r.id: r for r in chosen}, floor)
        plan.alternatives = found
        plan.min_gpus = None if fits else count
    latency = latency_plan(result, host, options, estimator) if below_floor else None
    if latency is not None:
        plan.alternatives.insert(0, latency)
    plan.alternatives_order = order_words(goal, plan, workload.model, latency is not None)
    plan.engine_config = engine_config(final, plan)
    plan.summary = _summary(goal, plan, final, floor if below_floor else None)
    recs = _recommendations(goal, result)
    return Outcome(estimate=result.base.estimate, plan=plan, recommendations=recs,
                   rejected=_rejected(goal, result, recs), notes=[])
