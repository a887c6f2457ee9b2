"""Verdicts for advice whose trial measures an input of the prediction, not its effect.

The `collectives` trial measures the bus bandwidth the sharding and tensor-parallel predictions
are built on; `host-transfer` measures the PCIe bandwidth that CPU offload streams weights over.
Such a prediction is checked by predicting again from the measured figure: the advice is
confirmed when the gain still holds with the measured input, refuted when it vanishes, and the
prediction error is the re-predicted factor against the original one.
"""

from __future__ import annotations

from collections.abc import Callable

from hwadvisor.models import (
    Device,
    Estimate,
    ModelOptions,
    Recommendation,
    Report,
    TrialResult,
    Validation,
    Workload,
)
from hwadvisor.validator.verdicts import Decision, decide, effect_interval, metric_kind

# Predicts a recommendation's factor again with a measured bus bandwidth (GB/s); None when the
# rule no longer fires. The pipeline passes the rules engine's (pipeline.repredict).
Repredict = Callable[[Report, Recommendation, float], "float | None"]


def _better(metric: str, factor: float) -> bool:
    """Tell whether after/before of the metric is a gain (rates up, times and bytes down)."""
    return factor > 1.0 if metric_kind(metric) == "rate" else factor < 1.0


def _repredicted(report: Report, rec: Recommendation, busbw: float,
                 repredict: Repredict) -> float | None:
    again = repredict(report, rec, busbw)
    return again if again is not None and _better(rec.predicted.metric, again) else None


def collectives_verdict(report: Report, rec: Recommendation, result: TrialResult,
                        repredict: Repredict) -> Validation:
    """Predict again from the measured bus bandwidth, at both ends of its 95% interval.

    Confirmed when the gain holds at both ends, refuted when it holds at neither (the rule
    stops firing or predicts no gain), inconclusive when only at one.
    """
    effect = result.effect_of("busbw_gbps")
    if effect is None or not effect.value:
        return Validation(status="error", detail="collectives ran but reported no busbw_gbps")
    busbw = effect.value
    ci, runs = effect_interval(result, effect)
    predicted = rec.predicted.factor
    again = repredict(report, rec, busbw)
    head = f"collectives: all-reduce bus bandwidth {busbw:.0f} GB/s measured (1 GiB)"
    if ci is None:
        ends = [again if again is not None and _better(rec.predicted.metric, again) else None]
    else:
        ends = [_repredicted(report, rec, ci[0], repredict),
                _repredicted(report, rec, ci[1], repredict)]
        head += f", 95% interval [{ci[0]:.0f}, {ci[1]:.0f}] GB/s"
    held = [e is not None for e in ends]
    status: Decision = "inconclusive"
    if ci is not None and all(held):
        status = "confirmed"
    elif not any(held):
        status = "refuted"
    factors = sorted(e for e in ends if e is not None)
    factor_ci = [factors[0], factors[-1]] if len(factors) == 2 else None
    if again is None or predicted is None:
        return Validation(status=status if status != "confirmed" else "inconclusive",
                          measured_factor=again, ci=factor_ci, threshold=1.0, runs=runs,
                          detail=f"{head}; with it the rule no longer predicts a gain")
    error = (again - predicted) / predicted
    return Validation(
        status=status,
        measured_factor=again,
        prediction_error=error,
        ci=factor_ci,
        threshold=1.0,
        runs=runs,
        detail=(f"{head}; predicted again with it: {rec.predicted.metric} factor {again:.3g} "
                f"(datasheet-based prediction {predicted:.3g})"
                + ("" if ci is not None else "; no interval: no decision")),
    )


# The offload prediction streams weights at the assumed rate; 20% under it is within the
# model's noise, more than that makes the predicted slowdown too optimistic.
TRANSFER_THRESHOLD = 0.8


def transfer_verdict(report: Report, rec: Recommendation, result: TrialResult) -> Validation:
    """Confirm CPU offload when pinned host-to-device copies reach the PCIe rate it assumed."""
    from hwadvisor.perfmodel.comm import pcie_gbps
    from hwadvisor.probe.target import primary_device

    effect = result.effect_of("pinned_gbps")
    if effect is None or not effect.value:
        return Validation(status="error", detail="host-transfer ran but reported no pinned_gbps")
    pinned = effect.value
    assumed, how = pcie_gbps(primary_device(report))
    ratio = pinned / assumed
    ci, runs = effect_interval(result, effect)
    ratio_ci = [ci[0] / assumed, ci[1] / assumed] if ci is not None else None
    status = decide(ratio_ci, TRANSFER_THRESHOLD, "higher")
    interval = (f", 95% interval [{ratio_ci[0]:.2f}, {ratio_ci[1]:.2f}]" if ratio_ci
                else "; no interval: no decision")
    return Validation(
        status=status,
        measured_factor=ratio,
        ci=ratio_ci,
        threshold=TRANSFER_THRESHOLD,
        runs=runs,
        detail=(f"host-transfer: pinned host-to-device {pinned:.1f} GB/s measured against the "
                f"{how} the offload prediction assumed ({ratio:.2f}x{interval}; "
                f"threshold {TRANSFER_THRESHOLD:g}x)"),
        holds_where=None if status != "refuted" else "only with a faster host link than this one",
    )


def input_verdict(report: Report, rec: Recommendation, result: TrialResult,
                  repredict: Repredict | None) -> Validation:
    """Return the verdict of advice whose trial measured an input of its prediction."""
    if result.id == "host-transfer":
        return transfer_verdict(report, rec, result)
    if result.id == "collectives" and repredict is not None:
        return collectives_verdict(report, rec, result, repredict)
    return Validation(status="inconclusive", detail=(
        f"{result.id} measured an input of this prediction; without predicting again from it "
        "there is no decision"))


def repredict(report: Report, rec: Recommendation, busbw_gbps: float) -> float | None:
    """Predict a recommendation's factor again with a measured bus bandwidth (GB/s).

    None when the rule no longer fires with that bandwidth. The validator calls this for
    advice whose trial measures an input of the prediction (the collectives trial).
    """
    from hwadvisor.perfmodel import estimate
    from hwadvisor.probe.target import primary_device
    from hwadvisor.rules.advise import recommend

    if report.workload is None or report.goal is None:
        return None
    device = primary_device(report)

    def measured(workload: Workload, dev: Device, options: ModelOptions) -> Estimate:
        return estimate(workload, dev, options, measured_busbw_gbps=busbw_gbps)

    outcome = recommend(report.workload, device, report.goal, host=report.host, estimator=measured)
    again = next((r for r in outcome.recommendations if r.id == rec.id), None)
    return again.predicted.factor if again is not None else None
