"""The plan validated as a whole: its stacked step measured against the baseline's.

The pipeline hands over a PlanCheck: the trial's spec (the baseline's knobs and the plan's,
from rules/plan_step.py), the plan steps no knob of the step can set, and a callback that asks
the performance model for the step the trial ran. The trial (trials/plan_step.py) measures; this
module turns its result into plan.validation:

- the ratio (speedup per token for the speed goals, peak-bytes factor for memory) with its 95%
  interval, next to the model's ratio for the same step and the prediction error;
- the decision by the interval (verdicts.decide): a plan predicted to help must be faster than
  the baseline (threshold 1); a plan predicted to cost speed (recomputation taken to fit) must
  cost no more than a quarter beyond its prediction (threshold 0.8 x predicted); a memory plan
  must use less than the baseline;
- which steps ran and which could not, each with its reason.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hwadvisor.models import Plan, PlanTrialSpec, PlanValidation, Report, TrialResult
from hwadvisor.validator.verdicts import decide, effect_interval

# The model's ratio for the step the trial ran, from what it applied (see applied_from).
PlanPredict = Callable[[dict[str, Any]], "float | None"]
COST_SLACK = 0.8  # a plan predicted to cost speed may cost up to 1/0.8 = 1.25x its prediction
MEMORY_SLACK = 1.25  # a plan predicted to add memory may add up to 1.25x its prediction
SHAPE_KEYS = ("hidden_size", "num_heads", "num_kv_heads", "head_dim", "intermediate_size",
              "layers")


@dataclass
class PlanCheck:
    """What the validator needs to measure the plan: the spec, what it leaves out, the model."""

    spec: PlanTrialSpec | None
    unmeasured: dict[str, str] = field(default_factory=dict)
    predict: PlanPredict | None = None
    plan_ratio: float | None = None
    metric: str | None = None
    no_steps: bool = False


def applied_from(result: TrialResult) -> dict[str, Any] | None:
    """Read the knobs, shape and sizes the trial ran back from its two measurements."""
    timed = [m for m in result.measurements if m.params.get("role") in ("baseline", "variant")]
    if len(timed) != 2:
        return None
    base, plan = timed
    p = plan.params

    def side(params: dict[str, Any]) -> dict[str, Any]:
        return {k.removeprefix("knob."): v for k, v in params.items() if k.startswith("knob.")}

    training = p.get("phase") == "training"
    return {
        "baseline": side(base.params), "plan": side(p),
        "shape": {k: p[k] for k in SHAPE_KEYS if k in p},
        "baseline_batch": p.get("baseline_batch", p.get("batch", 1)) if training
        else p.get("batch", 1),
        "plan_batch": p.get("plan_batch", p.get("batch", 1)) if training else p.get("batch", 1),
        "context_len": p.get("context_len", 1), "seq_len": p.get("seq_len", 1),
        "device": str(p.get("device", "")),
        "dropped": {k.removeprefix("dropped."): str(v) for k, v in p.items()
                    if k.startswith("dropped.")},
    }


def _steps(check: PlanCheck, dropped: dict[str, str]) -> tuple[list[str], list[str]]:
    """(measured steps, unmeasured 'step: reason'), the trial's dropped knobs included."""
    spec = check.spec
    unmeasured = dict(check.unmeasured)
    measured: list[str] = []
    if spec is not None:
        for knob, ids in spec.steps.items():
            for step_id in ids:
                if knob in dropped:
                    unmeasured.setdefault(step_id, dropped[knob])
                elif step_id not in measured:
                    measured.append(step_id)
    measured = [s for s in measured if s not in unmeasured]
    return measured, [f"{s}: {why}" for s, why in unmeasured.items()]


def _threshold(metric: str, predicted: float | None) -> tuple[float, str]:
    """(threshold, better) the measured interval is decided against."""
    if metric == "memory":
        if predicted is not None and predicted > 1:
            return predicted * MEMORY_SLACK, "lower"
        return 1.0, "lower"
    if predicted is not None and predicted < 1:
        return predicted * COST_SLACK, "higher"
    return 1.0, "higher"


def _fmt(ratio: float | None) -> str:
    return "n/a" if ratio is None else f"x{ratio:.2f}"


def plan_verdict(check: PlanCheck, result: TrialResult | None) -> PlanValidation:
    """Turn the stacked-step trial's result into plan.validation."""
    spec = check.spec
    metric = check.metric
    if check.no_steps:
        return PlanValidation(status="unsupported", metric=metric, plan_ratio=check.plan_ratio,
                              detail="the plan has no steps: nothing to measure against the "
                                     "baseline")
    base_fields: dict[str, Any] = {"metric": metric, "plan_ratio": check.plan_ratio}
    if spec is None or result is None:
        _, unmeasured = _steps(check, {})
        return PlanValidation(
            status="unsupported", unmeasured_steps=unmeasured, **base_fields,
            detail="no step of the plan can be run on a few layers of one device")
    if result.status != "ok":
        why = result.reason or result.status
        _, unmeasured = _steps(check, {k: why for k in spec.steps})
        status = "unsupported" if result.status == "unsupported" else "error"
        return PlanValidation(status=status, unmeasured_steps=unmeasured, kernel=result.kernel,
                              detail=f"plan-step: {result.reason or result.status}",
                              **base_fields)
    applied = applied_from(result) or {}
    measured, unmeasured = _steps(check, applied.get("dropped", {}))
    key = "memory_factor" if spec.metric == "memory" else "speedup"
    effect = result.effect_of(key)
    if effect is None:
        why = ("peak memory is read from the CUDA caching allocator: not on this device"
               if key == "memory_factor" else "the trial reported no speedup")
        return PlanValidation(status="unsupported", measured_steps=measured,
                              unmeasured_steps=unmeasured, kernel=result.kernel,
                              detail=f"{why}; {result.summary}", **base_fields)
    ci, runs = effect_interval(result, effect)
    predicted = check.predict(applied) if check.predict is not None and applied else None
    threshold, better = _threshold(spec.metric, predicted)
    status = decide(ci, threshold, better)  # type: ignore[arg-type]
    error = effect.value / predicted - 1 if predicted else None
    detail = _detail(effect.value, ci, runs, predicted, error, check, result, threshold,
                     measured, status)
    return PlanValidation(
        status=status, predicted_ratio=predicted, measured_ratio=effect.value,
        ci=list(ci) if ci is not None else None, runs=runs, threshold=threshold,
        prediction_error=error, measured_steps=measured, unmeasured_steps=unmeasured,
        kernel=result.kernel, detail=detail, **base_fields)


def _detail(value: float, ci: tuple[float, float] | None, runs: int | None,
            predicted: float | None, error: float | None, check: PlanCheck,
            result: TrialResult, threshold: float, measured: list[str], status: str) -> str:
    interval = f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci is not None else ""
    rounds = f" over {runs} rounds" if runs else ""
    text = (f"{', '.join(measured) or 'the plan'} stacked: {_fmt(value)}{interval}{rounds} "
            f"({result.summary})")
    if predicted is not None:
        text += f"; the model predicts {_fmt(predicted)} for this step"
        if error is not None and math.isfinite(error):
            text += f" (measured {error:+.0%} off)"
    if check.plan_ratio is not None:
        text += f"; the whole plan is predicted {_fmt(check.plan_ratio)} on the full model"
    text += f"; {status} against {threshold:.2f}"
    return text


def plan_check(report: Report) -> PlanCheck | None:
    """Return what the validator needs to measure the plan as a whole (None without a plan).

    The plan's knobs, trial spec and re-prediction come from rules/plan_step.py (the plan as
    one measurable step); this turns them into the PlanCheck that plan_verdict reads.
    """
    from hwadvisor.probe.target import primary_device
    from hwadvisor.rules.plan_step import metric_words, predicted_ratio, trial_spec

    plan = report.plan
    if plan is None or report.workload is None or report.goal is None:
        return None
    ratio = plan_ratio(plan)
    if not plan.steps:
        return PlanCheck(spec=None, plan_ratio=ratio, no_steps=True)
    device = primary_device(report)
    workload = report.workload
    spec, unmeasured = trial_spec(workload, device, report.goal, plan)
    if spec is None:
        return PlanCheck(spec=None, unmeasured=unmeasured, plan_ratio=ratio)

    def predict(applied: dict[str, Any]) -> float | None:
        assert spec is not None
        return predicted_ratio(workload, device, spec.phase, spec.metric, applied)

    return PlanCheck(spec=spec, unmeasured=unmeasured, predict=predict, plan_ratio=ratio,
                     metric=metric_words(spec))


def plan_ratio(plan: Plan) -> float | None:
    """Return the whole plan's predicted ratio: a speedup for speed goals, a factor for memory."""
    before, after = plan.metric.before, plan.metric.after
    if not before or not after:
        return None
    if plan.metric.name == "memory_per_gpu_bytes":
        return after / before
    return after / before if plan.metric.better == "higher" else before / after
