"""Verdicts: turn a trial's measured effect into confirmed or refuted for one recommendation.

Which effect of which trial checks a rule is data in the rule's playbook entry (its `verdict`
table, rules.playbook.VerdictSpec).

How factors are compared. A recommendation's predicted.factor is after/before of its metric:
for a time metric (name ends in "_s") < 1 is faster; for bytes ("_bytes") < 1 is smaller; for
a rate ("per_s") > 1 is faster. Trials report `speedup` = baseline time / new time (> 1 faster)
or `memory_factor` = new bytes / baseline bytes (< 1 saves). The measured effect is converted
into the prediction's after/before space (a time metric: measured_factor = 1 / speedup; a rate
metric: measured_factor = speedup; bytes: measured_factor = memory_factor), so
validation.measured_factor sits beside predicted.factor and
prediction_error = (measured_factor - predicted_factor) / predicted_factor.
When the trial measures another quantity than the prediction (a speed trial for a bytes
prediction), the verdict still follows the measured direction and prediction_error stays null.
"""

from __future__ import annotations

import math
from typing import Literal

from hwadvisor.models import Recommendation, TrialResult, Validation
from hwadvisor.rules.metrics import METRICS
from hwadvisor.rules.playbook import VerdictSpec, rule_by_id

MIN_EFFECT = 0.03  # a measured gain under 3% is no gain (repeat-to-repeat noise is ~1-3%)

EffectKind = Literal["speedup", "memory_factor", "info"]


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


def _measured_value(spec: VerdictSpec, result: TrialResult, batch: int) -> tuple[float, str] | None:
    """(value, what) of the effect measuring the recommendation, or None when absent."""
    effect = result.effect
    if spec.ratio is not None:
        numerator, denominators = spec.ratio
        for denominator in denominators:
            if numerator in effect and effect.get(denominator):
                return effect[numerator] / effect[denominator], f"{numerator} / {denominator}"
        return None
    if "{batch}" in spec.effect:
        found = nearest_batch_key(effect, spec.effect, batch)
        if found is None:
            return None
        key, measured_batch = found
        return effect[key], f"{key} (nearest measured batch to {batch}: {measured_batch})"
    if spec.effect in effect:
        return effect[spec.effect], spec.effect
    return None


def _good(kind: EffectKind, value: float, margin: float = MIN_EFFECT) -> bool:
    """Tell whether value is a gain beyond margin (default MIN_EFFECT) in its good direction."""
    if kind == "memory_factor":
        return value < 1.0 - margin
    return value > 1.0 + margin


def timing_noise(result: TrialResult) -> float:
    """Return the largest relative spread (IQR / median) of the trial's timed variants.

    A speedup smaller than this is within the run-to-run noise of its own timings: seen on the
    H200 on 2026-11-30, where FP8 decode GEMMs of ~30 us measured 0.84x in one run and 1.2x
    in another.
    """
    spreads = [m.spread / m.median for m in result.measurements
               if not m.skipped and m.unit == "s" and m.median and m.spread is not None]
    return max(spreads, default=0.0)


def holds_where(spec: VerdictSpec, effect: dict[str, float]) -> str | None:
    """Where the advice holds when it holds at some members of the family and not others."""
    members = [(key, label) for key, label in spec.family if key in effect]
    holds = [label for key, label in members if _good(spec.kind, effect[key])]
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


def verdict(rec: Recommendation, result: TrialResult | None, batch: int = 1) -> Validation:
    """Return the validation of one recommendation from its trial's result."""
    spec = spec_for(rec)
    if spec is None:
        return Validation(status="pending", detail="no trial measures this recommendation")
    if result is None:
        return Validation(status="pending", detail=f"trial {spec.trial} was not run")
    if result.status == "unsupported":
        return Validation(status="unsupported", detail=f"{spec.trial}: {result.reason}")
    if result.status in ("error", "interrupted"):
        return Validation(status="error", detail=f"{spec.trial} {result.status}: {result.reason}")
    measured = _measured_value(spec, result, batch)
    if measured is None:
        if spec.kind == "memory_factor" and "memory_factor" not in result.effect and \
                "speedup" in result.effect:
            spec = VerdictSpec(trial=spec.trial)
            measured = _measured_value(spec, result, batch)
        if measured is None:
            return Validation(status="error",
                              detail=f"{spec.trial} ran but reported no '{spec.effect}' effect "
                                     f"(it has: {', '.join(result.effect) or 'none'})")
    value, what = measured
    kind: EffectKind = "speedup" if spec.ratio is not None else spec.kind
    if kind == "info":
        return Validation(status="pending", detail=(
            f"{spec.trial} measured {what} = {value:.3g}: an input of this prediction, not its "
            "effect; no verdict"))
    predicted = rec.predicted.factor
    measured_factor = _to_prediction_space(kind, rec.predicted.metric, value)
    prediction_error = None
    if measured_factor is not None and predicted:
        prediction_error = (measured_factor - predicted) / predicted
    margin = max(MIN_EFFECT, timing_noise(result)) if kind == "speedup" else MIN_EFFECT
    good = _good(kind, value, margin)
    noisy = any(m.noisy for m in result.measurements if not m.skipped)
    word = "speedup" if kind == "speedup" else "memory factor"
    detail = f"{spec.trial}: {word} {value:.3g} ({what})"
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
    if noisy:
        detail += (f"; some timings were noisy (spread > 10% of the median): a speedup must "
                   f"exceed {margin:.0%} to count")
    if result.busy_gpu:
        detail += "; other processes used the GPU"
    return Validation(
        status="confirmed" if good else "refuted",
        measured_factor=measured_factor if measured_factor is not None else value,
        prediction_error=prediction_error,
        detail=detail,
        holds_where=holds_where(spec, result.effect),
    )


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
