"""Verdicts: turn a trial's measured effect, with its interval, into a decision for one rule.

Which effect of which trial checks a rule is data in the rule's playbook entry (its `verdict`
table, rules.playbook.VerdictSpec).

The decision (`decide`). A trial's effect comes with a 95% confidence interval (paired,
interleaved timings: models/stats.py). The rule's threshold is its smallest gain worth having
(`min_gain` of the goal, MIN_EFFECT when the rule has none): a speedup of 1 + min_gain, a
memory factor of 1 - min_gain. The advice is `confirmed` when the whole interval lies on the
helpful side of the threshold, `refuted` when the whole interval lies on the other side, and
`inconclusive` when the interval straddles it (or the trial gave no interval). A point value
alone never decides.

How factors are compared. A recommendation's predicted.factor is after/before of its metric:
for a time metric (name ends in "_s") < 1 is faster; for bytes ("_bytes") < 1 is smaller; for
a rate ("per_s") > 1 is faster. Trials report `speedup` = baseline time / new time (> 1 faster)
or `memory_factor` = new bytes / baseline bytes (< 1 saves). The measured effect is converted
into the prediction's after/before space (a time metric: measured_factor = 1 / speedup; a rate
metric: measured_factor = speedup; bytes: measured_factor = memory_factor), and so are its
interval (`ci`) and the threshold, so validation.measured_factor, ci and threshold sit beside
predicted.factor and prediction_error = (measured_factor - predicted_factor) / predicted_factor.
When the trial measures another quantity than the prediction (a speed trial for a bytes
prediction), the verdict still follows the measured direction and prediction_error stays null.
A memory-factor rule serving a time or rate metric (an FP8 KV cache for latency) is judged on
the trial's `speedup`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from hwadvisor.models import Recommendation, TrialResult, Validation
from hwadvisor.models.stats import from_interval, median_interval, quotient_estimate
from hwadvisor.models.trial import Effect
from hwadvisor.rules.playbooks.metrics import METRICS
from hwadvisor.rules.playbooks.schema import VerdictSpec, rule_by_id

MIN_EFFECT = 0.03  # a gain under 3% is no gain when the rule names no min_gain

EffectKind = Literal["speedup", "memory_factor", "info"]
Decision = Literal["confirmed", "refuted", "inconclusive"]
Direction = Literal["higher", "lower"]


def decide(ci: tuple[float, float] | list[float] | None, threshold: float,
           better: Direction) -> Decision:
    """Decide by the rule: where the 95% interval lies against the threshold.

    better says which side helps ("higher": a speedup must exceed the threshold; "lower": a
    memory or time factor must stay under it). Touching the threshold is not clearing it.
    """
    if ci is None:
        return "inconclusive"
    low, high = min(ci), max(ci)
    if better == "higher":
        if low > threshold:
            return "confirmed"
        if high < threshold:
            return "refuted"
    else:
        if high < threshold:
            return "confirmed"
        if low > threshold:
            return "refuted"
    return "inconclusive"


_KIND_OF_UNIT: dict[str, Literal["time", "bytes", "rate"]] = {
    "s": "time", "bytes": "bytes", "tokens/s": "rate"}


def metric_kind(metric: str) -> Literal["time", "bytes", "rate", "other"]:
    """Classify a prediction's metric by its unit (rules.metrics), else by its name's suffix.

    The suffix reading is for metrics no longer in the table (reports of older versions).
    """
    known = METRICS.get(metric)
    if known is not None:
        return _KIND_OF_UNIT.get(known.unit, "other")
    if metric.endswith("per_s") or metric.endswith("_gbps") or metric.endswith("_tflops"):
        return "rate"
    if metric.endswith("_s"):
        return "time"
    if metric.endswith("_bytes"):
        return "bytes"
    return "other"


def nearest_batch_key(effect: dict[str, float], template: str,
                      batch: int) -> tuple[str, int] | None:
    """Return the effect key of the measured batch size nearest (in log scale) to batch."""
    prefix = template.split("{batch}")[0]
    measured: list[int] = []
    for key in effect:
        tail = key[len(prefix):]
        if key.startswith(prefix) and tail.isdigit():
            measured.append(int(tail))
    if not measured:
        return None
    best = min(measured, key=lambda b: (abs(math.log(b) - math.log(max(batch, 1))), b))
    return f"{prefix}{best}", best


@dataclass(frozen=True)
class Measured:
    """The effect measuring a recommendation: value, 95% interval, samples, and its name."""

    value: float
    ci: tuple[float, float] | None
    runs: int | None
    what: str


def effect_interval(result: TrialResult, effect: Effect) -> tuple[tuple[float, float] | None,
                                                                 int | None]:
    """Return the effect's interval: its own, else one derived from the measurement it came from.

    A rate (GB/s, TFLOP/s) is a Measurement's value: amount / median time. Its interval is the
    median's distribution-free one, scaled to the rate (a lower time is a higher rate).
    """
    if effect.ci is not None:
        return (effect.ci[0], effect.ci[1]), effect.runs
    for m in result.measurements:
        if m.value is None or m.skipped or not m.samples or not m.median:
            continue
        if math.isclose(m.value, effect.value, rel_tol=1e-9):
            found = median_interval(m.samples)
            if found is None:
                return None, len(m.samples)
            low_t, high_t = found
            if m.unit == "s" and low_t > 0:
                return (m.value * m.median / high_t, m.value * m.median / low_t), len(m.samples)
    return None, None


def _measured(result: TrialResult, name: str, what: str | None = None) -> Measured | None:
    effect = result.effect_of(name)
    if effect is None:
        return None
    ci, runs = effect_interval(result, effect)
    return Measured(effect.value, ci, runs, what or name)


def _measured_value(spec: VerdictSpec, result: TrialResult, batch: int) -> Measured | None:
    """Return the effect measuring the recommendation (with its interval), or None when absent."""
    effect = result.effect
    if spec.ratio is not None:
        numerator, denominators = spec.ratio
        for denominator in denominators:
            top, bottom = _measured(result, numerator), _measured(result, denominator)
            if top is None or bottom is None or not bottom.value:
                continue
            quotient = quotient_estimate(from_interval(top.value, top.ci, top.runs),
                                         from_interval(bottom.value, bottom.ci, bottom.runs))
            return Measured(top.value / bottom.value, quotient.ci,
                            min(top.runs or 0, bottom.runs or 0) or None,
                            f"{numerator} / {denominator}")
        return None
    if "{batch}" in spec.effect:
        found = nearest_batch_key(effect, spec.effect, batch)
        if found is None:
            return None
        key, measured_batch = found
        return _measured(result, key, f"{key} (nearest measured batch to {batch}: "
                                      f"{measured_batch})")
    return _measured(result, spec.effect)


def _good(kind: EffectKind, value: float, margin: float = MIN_EFFECT) -> bool:
    """Tell whether value is a gain beyond margin (default MIN_EFFECT) in its good direction."""
    if kind == "memory_factor":
        return value < 1.0 - margin
    return value > 1.0 + margin


def timing_noise(result: TrialResult) -> float:
    """Return the largest relative spread (IQR / median) of the trial's timed variants.

    Shown in the detail when timings were noisy; the decision itself rests on the interval.
    """
    spreads = [m.spread / m.median for m in result.measurements
               if not m.skipped and m.unit == "s" and m.median and m.spread is not None]
    return max(spreads, default=0.0)


def holds_where(spec: VerdictSpec, effect: dict[str, float],
                result: TrialResult | None = None, gain: float = MIN_EFFECT) -> str | None:
    """Where the advice holds when it holds at some members of the family and not others.

    With the result given, a member holds when its interval clears the threshold (confirmed);
    without it (or without an interval), when its point value does.
    """
    members = [(key, label) for key, label in spec.family if key in effect]
    threshold, better = _threshold(spec.kind, gain)

    def held(key: str) -> bool:
        if result is not None:
            found = _measured(result, key)
            if found is not None and found.ci is not None:
                return decide(found.ci, threshold, better) == "confirmed"
        return _good(spec.kind, effect[key], gain)

    holds = [label for key, label in members if held(key)]
    if not members or not holds or len(holds) == len(members):
        return None
    labels = [label for _, label in members]
    if all(label.startswith("batch ") for label in labels):
        sizes = [int(label.split()[1]) for label in holds]
        every = [int(label.split()[1]) for label in labels]
        below = [b for b in every if b <= max(sizes)]
        above = [b for b in every if b >= min(sizes)]
        if sorted(sizes) == below:
            return f"batch <= {max(sizes)}"
        if sorted(sizes) == above:
            return f"batch >= {min(sizes)}"
        return "batch " + ", ".join(str(b) for b in sorted(sizes))
    return ", ".join(holds) + " only"


def _threshold(kind: EffectKind, gain: float) -> tuple[float, Direction]:
    """Return the threshold of an effect and its helpful side for a rule's smallest gain."""
    if kind == "memory_factor":
        return 1.0 - gain, "lower"
    return 1.0 + gain, "higher"


def _to_prediction_space(kind: EffectKind, metric: str, value: float) -> float | None:
    """Return the measured effect as after/before of the metric; None when not comparable."""
    mkind = metric_kind(metric)
    if kind == "speedup":
        if mkind == "time":
            return 1.0 / value if value else None
        if mkind == "rate":
            return value
        return None
    if kind == "memory_factor" and mkind == "bytes":
        return value
    return None


def _flip(ci: tuple[float, float] | None) -> list[float] | None:
    """Return the interval of 1 / x."""
    if ci is None or ci[0] <= 0:
        return None
    return [1.0 / ci[1], 1.0 / ci[0]]


def min_gain_for(rec: Recommendation) -> float:
    """Return the rule's smallest worthwhile gain for the goal (MIN_EFFECT if none)."""
    rule = rule_by_id(rec.id)
    if rule is None or rec.goal not in rule.goals:
        return MIN_EFFECT
    gain = rule.for_goal(rec.goal).min_gain
    return gain if gain else MIN_EFFECT


def _interval_words(value: float, ci: list[float] | None, threshold: float,
                    decision: Decision, runs: int | None) -> str:
    if ci is None:
        return "no 95% interval (a point value only): no decision"
    n = f", {runs} runs" if runs else ""
    where = {"confirmed": "clears", "refuted": "falls short of",
             "inconclusive": "straddles"}[decision]
    return (f"95% interval [{ci[0]:.3g}, {ci[1]:.3g}]{n} {where} the threshold {threshold:.3g}")


def _speed_for_memory_rule(spec: VerdictSpec, rec: Recommendation) -> VerdictSpec:
    """Judge a memory-factor rule that predicts a time or rate on the trial's speedup."""
    if spec.kind == "memory_factor" and metric_kind(rec.predicted.metric) in ("time", "rate"):
        return spec.model_copy(update={"kind": "speedup", "effect": "speedup", "family": []})
    return spec


def verdict(rec: Recommendation, result: TrialResult | None, batch: int = 1) -> Validation:
    """Return the validation of one recommendation from its trial's result."""
    spec = spec_for(rec)
    if spec is None:
        return Validation(status="unsupported",
                          detail="no trial can measure this recommendation in this build")
    if result is None:
        return Validation(status="pending", detail=f"trial {spec.trial} was not run")
    if result.status == "unsupported":
        return Validation(status="unsupported", detail=f"{spec.trial}: {result.reason}")
    if result.status in ("error", "interrupted"):
        return Validation(status="error", detail=f"{spec.trial} {result.status}: {result.reason}")
    judged_on_speed = _speed_for_memory_rule(spec, rec)
    speed_instead = judged_on_speed is not spec
    spec = judged_on_speed
    measured = _measured_value(spec, result, batch)
    if measured is None:
        if spec.kind == "memory_factor" and "memory_factor" not in result.effect and \
                "speedup" in result.effect:
            spec = VerdictSpec(trial=spec.trial)
            measured = _measured_value(spec, result, batch)
        if measured is None:
            if speed_instead:
                return Validation(status="unsupported", detail=(
                    f"{spec.trial} measured no speed here: "
                    f"{result.reason or 'its speed part needs a GPU with FP8'}"))
            return Validation(status="error",
                              detail=f"{spec.trial} ran but reported no '{spec.effect}' effect "
                                     f"(it has: {', '.join(result.effect) or 'none'})")
    kind: EffectKind = "speedup" if spec.ratio is not None else spec.kind
    if kind == "info":
        return Validation(status="pending", detail=(
            f"{spec.trial} measured {measured.what} = {measured.value:.3g}: an input of this "
            "prediction, not its effect; no verdict"))
    return _judged(rec, spec, kind, measured, result)


def _judged(rec: Recommendation, spec: VerdictSpec, kind: EffectKind, measured: Measured,
            result: TrialResult) -> Validation:
    """Decide on the interval and say it in the prediction's after/before space."""
    gain = min_gain_for(rec)
    threshold, better = _threshold(kind, gain)
    decision = decide(measured.ci, threshold, better)
    value = measured.value
    predicted = rec.predicted.factor
    measured_factor = _to_prediction_space(kind, rec.predicted.metric, value)
    ci: list[float] | None = list(measured.ci) if measured.ci is not None else None
    shown_threshold = threshold
    if measured_factor is not None and kind == "speedup" and metric_kind(
            rec.predicted.metric) == "time":
        ci = _flip(measured.ci)
        shown_threshold = 1.0 / threshold
    prediction_error = None
    if measured_factor is not None and predicted:
        prediction_error = (measured_factor - predicted) / predicted
    word = "speedup" if kind == "speedup" else "memory factor"
    detail = (f"{spec.trial}: {word} {value:.3g} ({measured.what}); "
              + _interval_words(value, list(measured.ci) if measured.ci else None, threshold,
                                decision, measured.runs)
              + f" ({'+' if better == 'higher' else '-'}{gain:.1%}: the rule's smallest gain)")
    if spec.part is not None:
        detail += (f"; the trial times {spec.part} alone, a part of {rec.predicted.metric}, "
                   "so only the direction is checked")
        prediction_error = None
    elif measured_factor is not None and predicted:
        detail += f"; as after/before of {rec.predicted.metric}: measured {measured_factor:.3g}, " \
                  f"predicted {predicted:.3g}"
    elif predicted:
        detail += (f"; the prediction is of {rec.predicted.metric}, "
                   "which this trial does not measure")
    detail += _kernel_note(spec, result, kind)
    if any(m.noisy for m in result.measurements if not m.skipped):
        detail += (f"; some timings were noisy (spread up to {timing_noise(result):.0%} of the "
                   "median): the interval accounts for it")
    if result.busy_gpu:
        detail += "; other processes used the GPU"
    throttled = _throttled(result)
    if throttled:
        detail += f"; clocks were limited during the trial ({throttled})"
    return Validation(
        status=decision,
        measured_factor=measured_factor if measured_factor is not None else value,
        prediction_error=prediction_error,
        ci=ci,
        threshold=shown_threshold if measured_factor is not None else threshold,
        runs=measured.runs,
        detail=detail,
        holds_where=holds_where(spec, result.effect, result, gain),
    )


# Clock-event reasons that mean the trial ran below its clocks (NVML names, probe/nvml.py);
# gpu_idle and the settings reasons are the resting state, not a slowdown.
SLOWDOWN_REASONS = ("sw_power_cap", "hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown",
                    "hw_power_brake_slowdown")


def _throttled(result: TrialResult) -> str:
    """Return the slowdown reasons NVML showed right after the trial (empty when none)."""
    reasons = result.environment.throttle_reasons or []
    return ", ".join(r for r in reasons if r in SLOWDOWN_REASONS)


def _kernel_note(spec: VerdictSpec, result: TrialResult, kind: EffectKind) -> str:
    """Say which kernel was measured, and what the advice assumes (speed verdicts only)."""
    if kind != "speedup":
        return ""  # a counted memory factor does not depend on the kernel
    if result.kernel and spec.assumes:
        return f"; measured with {result.kernel}; the advice assumes {spec.assumes}"
    if spec.assumes:
        return f"; the advice assumes {spec.assumes}"
    if result.kernel:
        return f"; measured with {result.kernel}"
    return ""


def spec_for(rec: Recommendation) -> VerdictSpec | None:
    """Return how a recommendation is checked: its rule's verdict table, else a speedup."""
    rule = rule_by_id(rec.id)
    if rule is not None and rule.verdict is not None:
        return rule.verdict
    return VerdictSpec(trial=rec.trial) if rec.trial else None


def trial_for(rec: Recommendation) -> str | None:
    """Return the trial id that measures a recommendation, if any."""
    spec = spec_for(rec)
    return spec.trial if spec is not None else None
