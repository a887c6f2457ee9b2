"""The judge: whether one rule applies to one state of the plan, and what it predicts there.

A state is the workload and the knobs as the plan has them so far (the engine's defaults
first). Judging a rule on it: check its conditions against the facts of that state; if one
fails, the rule is rejected with its why-not. Otherwise run the performance model on the rule's
what-if (or its predictor) applied to the state, read the rule's metric before and after, and
return the candidate with the goal's metric after it too. rules/search.py searches over the
candidates; this module never ranks.
"""

from __future__ import annotations

import string
from dataclasses import dataclass, field
from typing import Any

from hwadvisor.engines import baseline, baseline_options  # noqa: F401 - re-exported
from hwadvisor.models import (
    Device,
    Estimate,
    HostInfo,
    ModelOptions,
    Prediction,
    Workload,
)
from hwadvisor.rules.context import Estimator, RuleContext, within_limit
from hwadvisor.rules.playbooks.conditions import (
    CONDITIONS,
    ENGINE_REASONS,
    expected_text,
    failed_conditions,
)
from hwadvisor.rules.playbooks.facts import MOBILE_APP_LIMIT, Facts, fit_text, gb
from hwadvisor.rules.playbooks.metrics import METRICS, gain, prediction, read_metric, tradeoff_text
from hwadvisor.rules.playbooks.planners import Plan
from hwadvisor.rules.playbooks.registry import PLANNERS, PREDICTORS
from hwadvisor.rules.playbooks.schema import Rule


class _Formatter(string.Formatter):
    """str.format that writes 'unknown' for a missing (None) fact instead of failing."""

    def format_field(self, value: Any, format_spec: str) -> str:
        if value is None:
            return "unknown"
        return super().format_field(value, format_spec)


_FORMATTER = _Formatter()


def render(template: str, facts: Facts, **extra: Any) -> str:
    """Fill a why / why-not template with facts (and extras such as `expected`)."""
    return _FORMATTER.vformat(template, (), {**facts.as_dict(), **extra})


def default_estimator() -> Estimator:
    """Return the performance model, as the judge calls it (imported on first use)."""
    from hwadvisor.perfmodel import PerfModel

    return PerfModel()


@dataclass
class State:
    """One point of the plan: workload and knobs, their estimate and facts."""

    ctx: RuleContext
    applied: tuple[str, ...] = ()

    @property
    def estimate(self) -> Estimate:
        """The estimate of this state."""
        return self.ctx.estimate

    @property
    def fits(self) -> bool:
        """Whether this state fits the memory limit."""
        return bool(self.ctx.facts.fits)


@dataclass
class Candidate:
    """A rule that passed its conditions on a state, with its predicted effect."""

    rule: Rule
    prediction: Prediction
    after: Estimate | None  # None for predictor rules (their metric is not an estimate field)
    workload: Workload | None
    options: ModelOptions | None
    changes: dict[str, Any]
    notes: list[str] = field(default_factory=list)
    fits_after: bool | None = None
    own_gain: float = 1.0  # on the rule's own metric
    caveats: list[str] = field(default_factory=list)  # the planner's, beside the rule's own
    min_gain: float | None = None  # the planner's threshold, where it overrides the rule's

    @property
    def plan_eligible(self) -> bool:
        """Whether a plan can take it as a step (an estimate-backed drop-in or fit change)."""
        return self.after is not None and not self.rule.needs_retraining


class Rejection(Exception):
    """A rule that did not pass on a state: the reason in words and the failed conditions."""

    def __init__(self, reason: str, conditions: list[str]) -> None:
        super().__init__(reason)
        self.reason = reason
        self.conditions = conditions


def why_not(rule: Rule, name: str, facts: Facts, **extra: Any) -> str:
    """Return the rule's why-not for a failed condition (its own template, else the default)."""
    template = rule.why_not.get(name)
    if template is None:
        template = CONDITIONS[name][1] if name in CONDITIONS else ENGINE_REASONS[name]
    return render(template, facts, **extra)


def variant_of(rule: Rule, facts: Facts) -> Any:
    """Return the first of the rule's platform variants whose conditions hold, else None."""
    for variant in rule.variants:
        if not failed_conditions(variant.when, facts):
            return variant
    return None


def after_fit_text(ctx: RuleContext, after: Estimate) -> str:
    """'after this: 38 GB needed of 80 GB: fits' (or how much it is still over)."""
    limit = _limit_after(after, ctx.facts)
    text = fit_text(after.memory.total_bytes, limit, ctx.facts.limit_source)
    if limit is not None and after.memory.total_bytes > limit:
        over = gb(after.memory.total_bytes - limit)
        return f"after this: {text} — still {over} over"
    return f"after this: {text}"


def _limit_after(estimate: Estimate, facts: Facts) -> int | None:
    """Return the memory limit after a change: the usable memory the estimate reads.

    A change may move it (the engine told to take more of the card: memory-reservation); a
    phone app's limit stays.
    """
    if facts.limit_source == MOBILE_APP_LIMIT or not estimate.memory.device_memory_bytes:
        return facts.limit_bytes
    return estimate.memory.device_memory_bytes


def fits_limit(estimate: Estimate, facts: Facts) -> bool:
    """Whether an estimate fits the memory limit after the change (the app limit on phones)."""
    limit = _limit_after(estimate, facts)
    return limit is None or estimate.memory.total_bytes <= limit


def _metric_for(rule: Rule, ctx: RuleContext) -> str:
    if not ctx.facts.fits and rule.metric_if_unfit:
        return rule.metric_if_unfit
    return rule.metric


def _predictor(rule: Rule, ctx: RuleContext, metric: str) -> Candidate:
    try:
        got = PREDICTORS[rule.predictor or ""](ctx)
    except ValueError:
        raise Rejection(why_not(rule, "no_metric", ctx.facts,
                                metric_label=METRICS[metric].label), ["no_metric"]) from None
    if got.reject is not None:
        raise Rejection(got.reject, ["predictor"])
    pred = prediction(metric, got.before, got.after)
    return Candidate(rule, pred, None, None, None, {}, got.notes,
                     own_gain=gain(METRICS[metric], got.before, got.after))


def _what_if(rule: Rule, ctx: RuleContext) -> tuple[dict[str, Any], dict[str, Any],
                                                    dict[str, Any], Plan]:
    """(workload changes, option changes, spec changes, planner's notes and caveats)."""
    assert rule.what_if is not None
    workload_changes = dict(rule.what_if.workload)
    option_changes = dict(rule.what_if.options)
    said = Plan()
    if rule.what_if.planner is not None:
        plan: Plan = PLANNERS[rule.what_if.planner](ctx)
        if plan.reject is not None:
            raise Rejection(plan.reject, ["planner"])
        workload_changes.update(plan.workload)
        option_changes.update(plan.options)
        said = plan
    return workload_changes, option_changes, dict(rule.what_if.spec), said


def _alternatives(rule: Rule, ctx: RuleContext, metric: str) -> Candidate:
    """Estimate each architecture alternative; the best is the prediction, all are listed."""
    spec = ctx.workload.spec
    before_v = read_metric(ctx.estimate, metric)
    if spec is None or before_v is None:
        raise Rejection(why_not(rule, "no_metric", ctx.facts,
                                metric_label=METRICS[metric].label), ["no_metric"])
    results: list[tuple[float, str, Estimate, dict[str, Any]]] = []
    for alt in rule.alternatives:
        spec_changes = dict(alt.spec)
        if "sliding_window_layers" in spec_changes:
            # a fraction (0 < x <= 1) of the layers, e.g. 0.5 = every other layer (Gemma 2)
            frac = float(spec_changes["sliding_window_layers"])
            if frac <= 1:
                spec_changes["sliding_window_layers"] = max(1, round(spec.num_layers * frac))
        if spec_changes.get("num_kv_heads", 0) >= spec.num_kv_heads:
            continue  # the model already has as few KV heads
        after = ctx.estimate_with({}, dict(rule.what_if.options if rule.what_if else {}),
                                  spec_changes)
        value = read_metric(after, metric)
        if value is None or value >= before_v:
            continue
        label = f"{alt.name} ({alt.text}): {METRICS[metric].label} {gb(value)}"
        results.append((value, label, after, spec_changes))
    if not results:
        raise Rejection(f"no alternative shrinks the {METRICS[metric].label} of "
                        f"{ctx.facts.model}", ["no_metric"])
    results.sort(key=lambda r: r[0])
    best_value, best_label, best_after, best_changes = results[0]
    notes = ["alternatives: " + "; ".join(r[1] for r in results)]
    pred = prediction(metric, before_v, best_value, extra=f"best: {best_label.split(' (')[0]}")
    return Candidate(rule, pred, best_after, None, None,
                     {f"spec.{k}": v for k, v in best_changes.items()}, notes,
                     fits_after=fits_limit(best_after, ctx.facts),
                     own_gain=gain(METRICS[metric], before_v, best_value))


def judge(rule: Rule, ctx: RuleContext, fit_cut: float | None = None) -> Candidate:
    """Judge one rule on a state: raise Rejection, or return the candidate with its effect.

    fit_cut: only changes that could serve a fit are wanted (the search for the fewest GPUs):
    one whose memory neither fits nor falls by this share is rejected from its memory alone,
    before the whole estimate is paid for. The fit search would not pick it either.
    """
    facts = ctx.facts
    failed = failed_conditions(rule.when, facts)
    if failed:
        expected = expected_text(getattr(rule.when, failed[0]))
        raise Rejection(why_not(rule, failed[0], facts, expected=expected), failed)
    metric = _metric_for(rule, ctx)
    if rule.predictor is not None:
        return _predictor(rule, ctx, metric)
    if rule.alternatives:
        return _alternatives(rule, ctx, metric)
    workload_changes, option_changes, spec_changes, said = _what_if(rule, ctx)
    if fit_cut is not None and not spec_changes:
        _helps_fit(ctx, workload_changes, option_changes, fit_cut)
    workload, options = ctx.what_if(workload_changes, option_changes, spec_changes)
    after = ctx.estimate_with(workload_changes, option_changes, spec_changes)
    before_v, after_v = read_metric(ctx.estimate, metric), read_metric(after, metric)
    if before_v is None or after_v is None:
        raise Rejection(why_not(rule, "no_metric", facts, metric_label=METRICS[metric].label),
                        ["no_metric"])
    pred = prediction(metric, before_v, after_v)
    if rule.tradeoff_metric and rule.tradeoff_metric != metric:
        side_b = read_metric(ctx.estimate, rule.tradeoff_metric)
        side_a = read_metric(after, rule.tradeoff_metric)
        if side_b is not None and side_a is not None:
            side = prediction(rule.tradeoff_metric, side_b, side_a)
            pred = pred.model_copy(update={"text": f"{tradeoff_text(pred, side)}: {pred.text}; "
                                                   f"{side.text}"})
    changes = {**workload_changes, **option_changes,
               **{f"spec.{k}": v for k, v in spec_changes.items()}}
    return Candidate(rule, pred, after, workload, options, changes, list(said.notes),
                     fits_after=fits_limit(after, facts),
                     own_gain=gain(METRICS[metric], before_v, after_v),
                     caveats=list(said.caveats), min_gain=said.min_gain)


def _helps_fit(ctx: RuleContext, workload_changes: dict[str, Any],
               option_changes: dict[str, Any], cut: float) -> None:
    """Raise Rejection when the change neither fits nor cuts memory by `cut`."""
    after = ctx.memory_with(workload_changes, option_changes).total_bytes
    if within_limit(after, ctx.facts) or after < ctx.estimate.memory.total_bytes * (1 - cut):
        return
    raise Rejection(f"neither fits nor cuts memory by {cut:.0%}", ["fit"])


def sentences(parts: list[str]) -> str:
    """Join clauses into sentences, each starting with a capital letter."""
    out = []
    for part in parts:
        part = part.strip().rstrip(".")
        if not part:
            continue
        first = part.split(" ", 1)[0]
        # "vLLM", "llama.cpp", "mlx-lm", "fused=True" keep their spelling
        if first.isalpha() and first.islower():
            part = part[0].upper() + part[1:]
        out.append(part)
    return ". ".join(out) + "." if out else ""


def why_text(candidate: Candidate, ctx: RuleContext) -> str:
    """Return the evidence that made the rule fire on this state, with its planner's notes."""
    rule, facts = candidate.rule, ctx.facts
    variant = variant_of(rule, facts)
    parts = [render(rule.why, facts)]
    if variant is not None and variant.note:
        parts.append(render(variant.note, facts))
    parts.extend(candidate.notes)
    if candidate.after is not None and not facts.fits:
        parts.append(after_fit_text(ctx, candidate.after))
    return sentences(parts)


def title_of(rule: Rule, facts: Facts) -> str:
    """Return the rule's title, or its platform variant's."""
    variant = variant_of(rule, facts)
    return variant.title if variant is not None and variant.title else rule.title


def caveats_of(rule: Rule, facts: Facts) -> list[str]:
    """Return the rule's caveats plus its platform variant's."""
    variant = variant_of(rule, facts)
    return [*rule.caveats, *(variant.caveats if variant is not None else [])]


def new_context(workload: Workload, device: Device, host: HostInfo | None,
                options: ModelOptions, estimator: Estimator,
                cache: dict[Any, Estimate] | None = None) -> RuleContext:
    """Return a RuleContext for one state (estimates cached across states in `cache`)."""
    from hwadvisor.rules.playbooks.facts import build_facts

    shared: dict[Any, Estimate] = cache if cache is not None else {}
    key = RuleContext.key_of(workload, options)
    estimate = shared.get(key)
    if estimate is None:
        estimate = estimator(workload, device, options)
        shared[key] = estimate
    facts = build_facts(workload, estimate, device, host, options)
    return RuleContext(workload=workload, device=device, host=host, options=options,
                       estimate=estimate, facts=facts, estimator=estimator, _cache=shared)
