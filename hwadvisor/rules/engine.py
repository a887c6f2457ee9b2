"""The rules engine: judge each rule of a goal, predict its effect, rank what fires.

For every rule of the goal: check its conditions against the facts (workload, estimate,
device); if one fails, reject it with its why-not. Otherwise run the performance model on the
rule's what-if (or its predictor), read the rule's metric before and after, and keep it when
the gain is worth it. What fires is ranked by predicted gain.
"""

from __future__ import annotations

import string
from dataclasses import dataclass, field
from typing import Any

from hwadvisor.models import (
    Device,
    Estimate,
    HostInfo,
    ModelOptions,
    Prediction,
    Recommendation,
    Rejected,
    Workload,
)
from hwadvisor.models.recommend import Goal
from hwadvisor.rules.conditions import CONDITIONS, ENGINE_REASONS, expected_text, failed_conditions
from hwadvisor.rules.context import Estimator, RuleContext
from hwadvisor.rules.facts import build_facts, fit_text, gb
from hwadvisor.rules.metrics import METRICS, gain, prediction, read_metric, tradeoff_text
from hwadvisor.rules.planners import PLANNERS, PREDICTORS, Plan
from hwadvisor.rules.playbook import Rule, rules_for_goal


class _Formatter(string.Formatter):
    """str.format that writes 'unknown' for a missing (None) fact instead of failing."""

    def format_field(self, value: Any, format_spec: str) -> str:
        if value is None:
            return "unknown"
        return super().format_field(value, format_spec)


_FORMATTER = _Formatter()


def render(template: str, facts: dict[str, Any], **extra: Any) -> str:
    """Fill a why / why-not template with facts (and extras such as `expected`)."""
    return _FORMATTER.vformat(template, (), {**facts, **extra})


def default_estimator() -> Estimator:
    """Return the performance model's estimate function (imported on first use)."""
    from hwadvisor.perfmodel import estimate

    return estimate  # type: ignore[no-any-return]


def baseline_options(workload: Workload, device: Device | None = None) -> ModelOptions:
    """Return the knobs as the workload's engine runs it by default (engines.toml).

    vLLM and SGLang start with fused attention, CUDA graphs, chunked prefill and tensor
    parallelism over several GPUs; plain transformers runs eagerly with SDPA attention;
    torchtitan shards with FSDP2. Training on several GPUs with an engine that names no
    strategy starts from data parallelism (DDP), what people reach for first; fp32 compute
    means no mixed precision.
    """
    from hwadvisor.rules.engines import get_engine

    defaults = get_engine(workload.engine).defaults
    training = workload.phase == "training"
    sharding = defaults.sharding if workload.gpus > 1 else "none"
    if sharding == "none" and workload.gpus > 1:
        sharding = "ddp" if training else "tp"
    on_gpu = device is None or str(device.device_class) in ("datacenter-gpu", "consumer-gpu")
    graphs = defaults.cuda_graphs and on_gpu and (device is None or device.vendor in (
        "nvidia", "amd"))
    chunk = defaults.prefill_chunk_tokens if defaults.chunked_prefill and not training else None
    return ModelOptions.model_validate({
        "sharding": sharding,
        "mixed_precision": workload.activation_dtype not in ("fp32", "tf32"),
        "attention_kernel": defaults.attention_kernel,
        "cuda_graphs": bool(graphs and not training),
        "compiled": defaults.compiled,
        "fused_optimizer": defaults.fused_optimizer and training,
        "prefill_chunk_tokens": chunk,
    })


@dataclass
class Outcome:
    """What the engine found for one goal."""

    estimate: Estimate
    recommendations: list[Recommendation]
    rejected: list[Rejected]
    notes: list[str] = field(default_factory=list)


@dataclass
class _Fired:
    rec: Recommendation
    gain: float


class _Rejection(Exception):
    def __init__(self, reason: str, conditions: list[str]) -> None:
        super().__init__(reason)
        self.reason = reason
        self.conditions = conditions


def _why_not(rule: Rule, name: str, facts: dict[str, Any], **extra: Any) -> str:
    template = rule.why_not.get(name)
    if template is None:
        template = CONDITIONS[name][1] if name in CONDITIONS else ENGINE_REASONS[name]
    return render(template, facts, **extra)


def _variant(rule: Rule, facts: dict[str, Any]) -> Any:
    for variant in rule.variants:
        if not failed_conditions(variant.when, facts):
            return variant
    return None


def _after_fit(ctx: RuleContext, after: Estimate) -> str:
    limit = ctx.facts["limit_bytes"]
    text = fit_text(after.memory.total_bytes, limit, ctx.facts["limit_source"])
    if limit is not None and after.memory.total_bytes > limit:
        over = gb(after.memory.total_bytes - limit)
        return f"after this: {text} — still {over} over"
    return f"after this: {text}"


def _predict(rule: Rule, ctx: RuleContext) -> tuple[Prediction, Estimate | None, list[str],
                                                   dict[str, Any]]:
    """Predict: the prediction, the after-estimate (None for predictors), notes, changes."""
    metric = rule.metric
    if not ctx.facts["fits"] and rule.metric_if_unfit:
        metric = rule.metric_if_unfit
    label = METRICS[metric].label
    if rule.predictor is not None:
        try:
            got = PREDICTORS[rule.predictor](ctx)
        except ValueError:
            raise _Rejection(_why_not(rule, "no_metric", ctx.facts, metric_label=label),
                             ["no_metric"]) from None
        return prediction(metric, got.before, got.after), None, got.notes, {}
    assert rule.what_if is not None
    notes: list[str] = []
    changes: dict[str, Any] = {}
    if rule.alternatives:
        return _predict_alternatives(rule, ctx, metric)
    workload_changes = dict(rule.what_if.workload)
    option_changes = dict(rule.what_if.options)
    if rule.what_if.planner is not None:
        plan: Plan = PLANNERS[rule.what_if.planner](ctx)
        workload_changes.update(plan.workload)
        option_changes.update(plan.options)
        notes.extend(plan.notes)
    changes.update(workload_changes)
    changes.update(option_changes)
    changes.update({f"spec.{k}": v for k, v in rule.what_if.spec.items()})
    after = ctx.estimate_with(workload_changes, option_changes, rule.what_if.spec)
    before_v, after_v = read_metric(ctx.estimate, metric), read_metric(after, metric)
    if before_v is None or after_v is None:
        raise _Rejection(_why_not(rule, "no_metric", ctx.facts, metric_label=label), ["no_metric"])
    pred = prediction(metric, before_v, after_v)
    if rule.tradeoff_metric and rule.tradeoff_metric != metric:
        side_b = read_metric(ctx.estimate, rule.tradeoff_metric)
        side_a = read_metric(after, rule.tradeoff_metric)
        if side_b is not None and side_a is not None:
            side = prediction(rule.tradeoff_metric, side_b, side_a)
            pred = pred.model_copy(update={"text": f"{tradeoff_text(pred, side)}: {pred.text}; "
                                                   f"{side.text}"})
    return pred, after, notes, changes


def _predict_alternatives(rule: Rule, ctx: RuleContext, metric: str) -> tuple[
        Prediction, Estimate | None, list[str], dict[str, Any]]:
    """Estimate each architecture alternative; the best is the prediction, all are listed."""
    spec = ctx.workload.spec
    before_v = read_metric(ctx.estimate, metric)
    if spec is None or before_v is None:
        raise _Rejection(_why_not(rule, "no_metric", ctx.facts,
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
        label = f"{alt.name} ({alt.text}): {METRICS[metric].label} {value / 1e9:.1f} GB"
        results.append((value, label, after, spec_changes))
    if not results:
        raise _Rejection(f"no alternative shrinks the {METRICS[metric].label} of "
                         f"{ctx.facts['model']}", ["no_metric"])
    results.sort(key=lambda r: r[0])
    best_value, best_label, best_after, best_changes = results[0]
    notes = ["alternatives: " + "; ".join(r[1] for r in results)]
    pred = prediction(metric, before_v, best_value, extra=f"best: {best_label.split(' (')[0]}")
    return pred, best_after, notes, {f"spec.{k}": v for k, v in best_changes.items()}


def _sentences(parts: list[str]) -> str:
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
    return ". ".join(out) + "."


def _judge(rule: Rule, goal: Goal, ctx: RuleContext) -> _Fired:
    facts = ctx.facts
    failed = failed_conditions(rule.when, facts)
    if failed:
        expected = expected_text(getattr(rule.when, failed[0]))
        raise _Rejection(_why_not(rule, failed[0], facts, expected=expected), failed)
    pred, after, notes, changes = _predict(rule, ctx)
    metric = METRICS[pred.metric]
    assert pred.before is not None and pred.after is not None
    g = gain(metric, pred.before, pred.after)
    if rule.min_gain is not None and g < 1 + rule.min_gain:
        pct = f"{(g - 1) * 100:+.1f}%"
        raise _Rejection(_why_not(rule, "min_gain", facts, expected=rule.min_gain, gain_pct=pct,
                                  prediction_text=pred.text), ["min_gain"])
    variant = _variant(rule, facts)
    why_parts = [render(rule.why, facts)]
    if variant is not None and variant.note:
        why_parts.append(render(variant.note, facts))
    why_parts.extend(notes)
    if after is not None and not facts["fits"]:
        why_parts.append(_after_fit(ctx, after))
    rec = Recommendation(
        id=rule.id,
        goal=goal,
        title=(variant.title if variant is not None and variant.title else rule.title),
        why=_sentences(why_parts),
        predicted=pred,
        trial=rule.trial,
        caveats=[*rule.caveats, *(variant.caveats if variant is not None else [])],
        references=list(rule.references),
        changes={k: v for k, v in changes.items() if isinstance(v, (str, int, float, bool))},
        fits_after=None if after is None else after.memory.total_bytes <= (
            facts["limit_bytes"] if facts["limit_bytes"] is not None else float("inf")),
    )
    return _Fired(rec=rec, gain=g)


def recommend(
    workload: Workload,
    device: Device,
    goal: Goal,
    host: HostInfo | None = None,
    estimator: Estimator | None = None,
    rules: list[Rule] | None = None,
) -> Outcome:
    """Judge every rule of the goal on this workload and device; rank what fires."""
    estimator = estimator or default_estimator()
    options = baseline_options(workload, device)
    base = estimator(workload, device, options)
    facts = build_facts(workload, base, device, host)
    ctx = RuleContext(workload=workload, device=device, host=host, options=options,
                      estimate=base, facts=facts, estimator=estimator)
    fired: list[_Fired] = []
    rejected: list[Rejected] = []
    chosen = [r.for_goal(goal) for r in rules] if rules is not None else rules_for_goal(goal)
    for rule in chosen:
        try:
            fired.append(_judge(rule, goal, ctx))
        except _Rejection as no:
            rejected.append(Rejected(id=rule.id, why_not=f"{rule.id}: {no.reason}",
                                     conditions_failed=no.conditions))
    # When the workload does not fit, what makes it fit comes first: no speed-up matters before.
    fired.sort(key=lambda f: (not (f.rec.fits_after and not facts["fits"]), -f.gain, f.rec.id))
    recs = [f.rec.model_copy(update={"rank": i}) for i, f in enumerate(fired, start=1)]
    return Outcome(estimate=base, recommendations=recs, rejected=rejected)
