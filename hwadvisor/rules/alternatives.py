"""The other ways out beside the plan: more GPUs, offload, LoRA, 4-bit weights, a smaller model.

Also the speed a plan's answer must keep (speed_floor), the memory plan that keeps it
(memory_plan_at_floor) and the inference-latency plan named beside a memory plan below it
(latency_plan), and the order the alternatives are listed in (rank_alternatives, order_words).
"""

from __future__ import annotations

import math
from typing import Any

from hwadvisor import units
from hwadvisor.models import Estimate, HostInfo, Plan, PlanAlternative, Workload
from hwadvisor.models.recommend import Goal
from hwadvisor.rules.context import Estimator, RuleContext
from hwadvisor.rules.judge import fits_limit
from hwadvisor.rules.playbooks.goals import USABLE_TOKENS_PER_S, goal_spec
from hwadvisor.rules.playbooks.schema import Rule, rules_for_goal
from hwadvisor.rules.search import (
    SearchResult,
    fmt_metric,
    goal_gain,
    goal_value,
    search,
    search_steps,
    tier,
)
from hwadvisor.rules.sizing import (
    host_fits,
    host_words,
    min_gpus,
    offloaded_host_bytes,
    per_gpu,
    plan_at,
)
from hwadvisor.workload.quality import LOOSEST


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


# The inference-latency plan is named beside a memory plan below the floor when it generates at
# least this many times faster (a 10% difference is within the model's error).
LATENCY_PLAN_FASTER = 1.1


def speed_floor(goal: Goal, min_tokens_per_s: float | None) -> float:
    """Return the generation speed (tokens/s per sequence) a plan's answer must keep.

    --min-tokens-per-s when given; otherwise the goal's own (the goal table: 5 tokens/s for
    the memory goal, 10 for the others).
    """
    if min_tokens_per_s is not None:
        return min_tokens_per_s
    return goal_spec(goal).speed_floor_tokens_per_s


def _speed(est: Estimate) -> float | None:
    """Return the generation speed of one sequence (tokens/s), or None outside inference."""
    return 1.0 / est.times.tpot_s if est.times.tpot_s else None


def keeps_floor(est: Estimate, workload: Workload, floor: float) -> bool:
    """Tell whether a plan generates at `floor` tokens/s or faster (always, outside inference)."""
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
            usable = keeps_floor(best[0], ctx.workload, floor)
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
    host = offloaded_host_bytes(ctx, ctx.workload.gpus, est, float(params))
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
    return goal_spec(goal).metric_spec.label.split(" (")[0]


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
        host = offloaded_host_bytes(ctx, gpus, est)
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
            host = offloaded_host_bytes(result.base, gpus, est)
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
    higher = goal_spec(goal).metric_spec.better == "higher"

    def key(alt: PlanAlternative) -> tuple[int, float]:
        group = 2 if not alt.fits else 1 if alt.id == SMALLER_MODEL else 0
        if group or alt.metric is None:
            return group, math.inf
        return group, -alt.metric if higher else alt.metric

    return sorted(found, key=key)


def order_words(goal: Goal, plan: Plan, model: str, latency_first: bool) -> str:
    """Say why the plan's alternatives come in their order (plan.alternatives_order)."""
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


def memory_plan_at_floor(goal: Goal, result: SearchResult, rules: list[Rule],
                         host: HostInfo | None, options: Any, estimator: Estimator,
                         floor: float) -> SearchResult:
    """Return the memory plan that keeps the speed floor, or the fastest when none can.

    The rule: a memory-first goal's plan is the smallest-memory plan that fits at `floor`
    tokens/s or faster; when none reaches it, the fastest that fits. Tried: the plan within
    the --quality budget, and the plan 4-bit weights allow (below the budget, as when nothing
    within it fits: a plan that fits only below the floor does not fit a use; its steps carry
    the budget caveat).
    """
    workload = result.base.workload
    if keeps_floor(result.final.estimate, workload, floor) or workload.quality == LOOSEST:
        return result
    device = result.base.device
    looser = search(goal, rules, workload.model_copy(update={"quality": LOOSEST}), device, host,
                    options, estimator)
    ids = [t.candidate.rule.id for t in looser.steps]
    tried = [result, search_steps(goal, rules, workload, device, host, options, estimator, ids)]
    fitting = [r for r in tried if r.final.facts.fits]
    if not fitting:
        return result
    above = [r for r in fitting if keeps_floor(r.final.estimate, workload, floor)]
    if above:
        return min(above, key=lambda r: r.final.estimate.memory.total_bytes)
    return min(fitting, key=lambda r: r.final.estimate.times.tpot_s or math.inf)


def latency_plan(goal: Goal, result: SearchResult, host: HostInfo | None, options: Any,
                 estimator: Estimator) -> PlanAlternative | None:
    """Name the inference-latency plan beside a memory plan below the floor, when faster.

    goal: the memory plan's, on whose metric the latency plan is stated.
    """
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
        metric=goal_value(goal, est), memory_per_gpu_bytes=est.memory.total_bytes,
        text=f"the inference-latency plan ({steps}) uses {units.gb(est.memory.total_bytes)}"
             f"{per_gpu(ctx.device)} and runs {units.ratio(faster)} faster: "
             f"{units.rate(1.0 / est.times.tpot_s)} (hwadvisor recommend --goal "
             "inference-latency)")
