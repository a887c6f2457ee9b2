"""Verdicts for advice whose trial measures an input of the prediction, not its effect.

The `collectives` trial measures the bus bandwidth the sharding and tensor-parallel predictions
are built on; `host-transfer` measures the PCIe bandwidth that CPU offload streams weights over.
Such a prediction is checked by predicting again from the measured figure: the advice is
confirmed when the gain still holds with the measured input, refuted when it vanishes, and the
prediction error is the re-predicted factor against the original one.
"""

from __future__ import annotations

from collections.abc import Callable

from hwadvisor.models import Recommendation, Report, TrialResult, Validation
from hwadvisor.validator.verdicts import metric_kind

# Predicts a recommendation's factor again with a measured bus bandwidth (GB/s); None when the
# rule no longer fires. The pipeline passes the rules engine's (pipeline.repredict).
Repredict = Callable[[Report, Recommendation, float], "float | None"]


def _better(metric: str, factor: float) -> bool:
    """Tell whether after/before of the metric is a gain (rates up, times and bytes down)."""
    return factor > 1.0 if metric_kind(metric) == "rate" else factor < 1.0


def collectives_verdict(report: Report, rec: Recommendation, result: TrialResult,
                        repredict: Repredict) -> Validation:
    """Confirm or refute a communication-bound prediction from the measured bus bandwidth."""
    busbw = result.effect.get("busbw_gbps")
    if not busbw:
        return Validation(status="error", detail="collectives ran but reported no busbw_gbps")
    predicted = rec.predicted.factor
    again = repredict(report, rec, busbw)
    head = f"collectives: all-reduce bus bandwidth {busbw:.0f} GB/s measured (1 GiB)"
    if again is None or predicted is None:
        return Validation(status="refuted", measured_factor=again, detail=(
            f"{head}; with it the rule no longer predicts a gain"))
    error = (again - predicted) / predicted
    good = _better(rec.predicted.metric, again)
    return Validation(
        status="confirmed" if good else "refuted",
        measured_factor=again,
        prediction_error=error,
        detail=(f"{head}; predicted again with it: {rec.predicted.metric} factor {again:.3g} "
                f"(datasheet-based prediction {predicted:.3g})"),
    )


def transfer_verdict(report: Report, rec: Recommendation, result: TrialResult) -> Validation:
    """Confirm CPU offload when pinned host-to-device copies reach the PCIe rate it assumed."""
    from hwadvisor.perfmodel.comm import pcie_gbps
    from hwadvisor.probe.target import primary_device

    pinned = result.effect.get("pinned_gbps")
    if not pinned:
        return Validation(status="error", detail="host-transfer ran but reported no pinned_gbps")
    assumed, how = pcie_gbps(primary_device(report))
    ratio = pinned / assumed
    # The offload prediction streams weights at the assumed rate; 20% under it is within the
    # model's noise, more than that makes the predicted slowdown too optimistic.
    good = ratio >= 0.8
    return Validation(
        status="confirmed" if good else "refuted",
        measured_factor=ratio,
        detail=(f"host-transfer: pinned host-to-device {pinned:.1f} GB/s measured against the "
                f"{how} the offload prediction assumed ({ratio:.2f}x)"),
        holds_where=None if good else "only with a faster host link than this one",
    )


def input_verdict(report: Report, rec: Recommendation, result: TrialResult,
                  repredict: Repredict | None) -> Validation:
    """Return the verdict of advice whose trial measured an input of its prediction."""
    if result.id == "host-transfer":
        return transfer_verdict(report, rec, result)
    if result.id == "collectives" and repredict is not None:
        return collectives_verdict(report, rec, result, repredict)
    return rec.validation
