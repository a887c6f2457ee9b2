"""Percentiles of a run's requests: the figures a serving benchmark reports, from any source.

The same function turns a simulated run (serving/simulate.py) and a measured one (the load
generator) into `ServingFigures`, so a prediction and a measurement are computed alike:
percentiles by linear interpolation between order statistics (numpy's default, which vllm bench
serve and GuideLLM use), TPOT per request as (latency - TTFT) / (output tokens - 1) over the
requests with more than one output token, ITL over every gap between tokens.
"""

from __future__ import annotations

from collections.abc import Sequence

from hwadvisor.models.serving import ServingFigures, TargetCheck, Targets


def percentile(values: Sequence[float], q: float) -> float:
    """Return the q-th percentile (0-100) by linear interpolation; 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def weighted_percentile(samples: Sequence[tuple[float, float]], q: float) -> float:
    """Return the q-th percentile of (value, weight) samples (the weight is a count)."""
    points = sorted((v, w) for v, w in samples if w > 0)
    if not points:
        return 0.0
    total = sum(w for _, w in points)
    target = total * q / 100.0
    seen = 0.0
    for value, weight in points:
        seen += weight
        if seen >= target:
            return value
    return points[-1][0]


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def figures(ttft: Sequence[float], latency: Sequence[float], outputs: Sequence[int],
            itl: Sequence[tuple[float, float]], duration_s: float,
            saturated: bool = False) -> ServingFigures:
    """Build the figures from per-request TTFT, latency and output tokens, and the ITL samples.

    duration_s: from the first request sent to the last one done (throughputs are over it).
    """
    tpot = [(lat - first) / (out - 1)
            for first, lat, out in zip(ttft, latency, outputs, strict=True) if out > 1]
    itl_mean = (sum(v * w for v, w in itl) / sum(w for _, w in itl)) if itl else 0.0
    span = max(duration_s, 1e-9)
    values: dict[str, float] = {}
    for name, series in (("ttft", ttft), ("tpot", tpot), ("request_latency", latency)):
        for q in (50, 90, 99):
            values[f"{name}_p{q}_s"] = percentile(series, q)
        values[f"{name}_mean_s"] = _mean(series)
    for q in (50, 90, 99):
        values[f"itl_p{q}_s"] = weighted_percentile(itl, q)
    values["itl_mean_s"] = itl_mean
    return ServingFigures(
        **values, request_throughput_rps=len(latency) / span,
        output_tokens_per_s=sum(outputs) / span, requests=len(latency), saturated=saturated)


def checks_of(figures: ServingFigures, targets: Targets) -> list[TargetCheck]:
    """Each target against the figure it names, at the targets' percentile."""
    q = targets.percentile
    tpot = "itl" if targets.tpot_definition == "itl" else "tpot"
    out = []
    for name, target in (("ttft", targets.ttft_s), (tpot, targets.tpot_s),
                         ("request_latency", targets.request_latency_s)):
        if target is None:
            continue
        value = figures.at(name, q)
        met = value <= target and not figures.saturated
        out.append(TargetCheck(figure=name, percentile=q, target_s=target, value_s=value,  # type: ignore[arg-type]
                               met=met, margin=(target - value) / target))
    return out
