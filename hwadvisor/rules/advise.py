"""From the plan search to the advice: the plan, its bottom line, and the items behind it.

recommend() runs the search (rules/search.py) on the engine's default setup, then says what a
practitioner needs next to the steps: whether it fits (rules/sizing.py: how many GPUs would
make it fit, the largest batch and context the plan holds), the other ways out
(rules/alternatives.py), and the plan in the engine's own words (rules/engine_config.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from hwadvisor import units
from hwadvisor.models import Device, Estimate, HostInfo, Plan, Recommendation, Rejected, Workload
from hwadvisor.models.recommend import Goal
from hwadvisor.models.serving import ServingPlan
from hwadvisor.rules.alternatives import (
    alternatives,
    keeps_floor,
    latency_plan,
    memory_plan_at_floor,
    order_words,
    speed_floor,
)
from hwadvisor.rules.context import Estimator, RuleContext
from hwadvisor.rules.engine_config import engine_config
from hwadvisor.rules.judge import Candidate, baseline, default_estimator
from hwadvisor.rules.playbooks.goals import goal_spec
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
    step_of,
    tier,
)
from hwadvisor.rules.sizing import max_batch, max_context, per_gpu, window_note


@dataclass
class Outcome:
    """What the engine found for one goal."""

    estimate: Estimate
    plan: Plan
    recommendations: list[Recommendation]
    rejected: list[Rejected]
    notes: list[str] = field(default_factory=list)


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
    serving: ServingPlan | None = None,
) -> Outcome:
    """Search the goal's playbook for the plan on this workload and device; say the rest.

    serving: the search under a load (serving/plan.py): its config is the one emitted and its
    sentence the summary.
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
    if goal_spec(goal).memory_first and start.phase == "inference":
        result = memory_plan_at_floor(goal, result, chosen, host, options, estimator, floor)
        below_floor = result.final.facts.fits and \
            not keeps_floor(result.final.estimate, start, floor)
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
    latency = latency_plan(goal, result, host, options, estimator) if below_floor else None
    if latency is not None:
        plan.alternatives.insert(0, latency)
    plan.alternatives_order = order_words(goal, plan, workload.model, latency is not None)
    plan.engine_config = engine_config(final, plan, serving.config if serving else None)
    plan.summary = _summary(goal, plan, final, floor if below_floor else None)
    if serving is not None:  # under a load, the bottom line is the load's answer
        plan.summary = serving.verdict
    capped = window_note(workload) if workload.phase == "inference" else None
    if capped is not None:
        # the bottom line says it: the model cannot read the whole request
        plan.summary += f" Note: {capped}."
    recs = _recommendations(goal, result)
    return Outcome(estimate=result.base.estimate, plan=plan, recommendations=recs,
                   rejected=_rejected(goal, result, recs), notes=[])
