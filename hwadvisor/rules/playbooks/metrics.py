"""The metrics a rule may report, read from an Estimate, and predictions written in words."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from hwadvisor import units
from hwadvisor.models import Estimate, Prediction


@dataclass(frozen=True)
class Metric:
    """How one estimate field reads: its label, unit and which direction is better."""

    path: str
    label: str
    unit: Literal["s", "bytes", "tokens/s"]
    better: Literal["lower", "higher"] = "lower"


_METRICS = [
    Metric("estimate.times.request_latency_s", "request latency (TTFT + gen x TPOT)", "s"),
    Metric("estimate.times.ttft_s", "time to first token", "s"),
    Metric("estimate.times.tpot_s", "time per output token", "s"),
    Metric("estimate.times.decode_step_s", "decode step", "s"),
    Metric("estimate.times.prefill_s", "prefill (time to first token)", "s"),
    Metric("estimate.times.train_step_s", "train step", "s"),
    Metric("estimate.times.communication_exposed_s", "exposed communication", "s"),
    Metric("estimate.tokens_per_s", "throughput", "tokens/s", "higher"),
    Metric("estimate.memory.weights_bytes", "weights", "bytes"),
    Metric("estimate.memory.kv_cache_bytes", "KV cache", "bytes"),
    Metric("estimate.memory.activations_bytes", "activation memory", "bytes"),
    Metric("estimate.memory.optimizer_bytes", "optimizer state", "bytes"),
    Metric("estimate.memory.total_bytes", "memory per GPU", "bytes"),
    # Peak memory while loading weights: not an Estimate field; computed by a predictor.
    Metric("load.peak_memory_bytes", "peak memory while loading", "bytes"),
    # Worst inter-token latency when prefills share the decode GPU: computed by a predictor.
    Metric("serve.worst_inter_token_s", "worst inter-token latency", "s"),
]
METRICS: dict[str, Metric] = {m.path: m for m in _METRICS}


def read_metric(estimate: Estimate, path: str) -> float | None:
    """Read an `estimate.…` metric path; None when the estimate has no value there."""
    parts = path.split(".")
    if parts[0] != "estimate":
        raise KeyError(f"{path} is not read from an estimate")
    value: object = estimate
    for part in parts[1:]:
        value = getattr(value, part, None)
        if value is None:
            return None
    return float(value)  # type: ignore[arg-type]


def gain(metric: Metric, before: float, after: float) -> float:
    """How many times better `after` is (>1 better, <1 worse); inf when it drops to zero."""
    if metric.better == "lower":
        return before / after if after > 0 else float("inf")
    return after / before if before > 0 else float("inf")


def format_value(unit: str, value: float) -> str:
    """Format a value in the unit people read it in: ms/µs/s, GB/MB, tokens/s."""
    return units.quantity(value, unit)


def change_text(metric: Metric, before: float, after: float) -> str:
    """'(3.3× faster)', '(−70%)', '(+33%)' for a before → after change."""
    if before == 0:
        return ""
    ratio = after / before
    # "×" reads well from 1.1x on; smaller changes read better as a percentage
    if metric.unit == "s" and ratio < 1 / 1.1:
        return f"({before / after:.1f}× faster)" if after > 0 else "(removed)"
    if metric.unit == "tokens/s" and ratio > 1.1:
        return f"({ratio:.1f}× more)"
    if metric.unit == "s" and ratio >= 2:
        return f"({ratio:.1f}× slower)"
    pct = (ratio - 1) * 100
    sign = "+" if pct >= 0 else "−"
    return f"({sign}{abs(pct):.0f}%)"


def prediction(path: str, before: float, after: float, extra: str | None = None) -> Prediction:
    """Build a Prediction with its factor (after/before) and the change in words."""
    metric = METRICS[path]
    text = (f"{metric.label} {format_value(metric.unit, before)} → "
            f"{format_value(metric.unit, after)} {change_text(metric, before, after)}").strip()
    if extra:
        text = f"{text}; {extra}"
    return Prediction(
        metric=path,
        unit=metric.unit,
        before=before,
        after=after,
        factor=(after / before) if before else None,
        text=text,
    )


def tradeoff_text(main: Prediction, side: Prediction) -> str:
    """'train step +33% for −80% activation memory', or '… and throughput +90%' when both gain."""
    m_main, m_side = METRICS[main.metric], METRICS[side.metric]
    assert main.before is not None and main.after is not None
    assert side.before is not None and side.after is not None

    def pct(before: float, after: float) -> str:
        if before and after / before >= 2:
            return f"×{after / before:.1f}"
        value = (after / before - 1) * 100 if before else 0.0
        return f"{'+' if value >= 0 else '−'}{abs(value):.0f}%"

    main_text = f"{pct(main.before, main.after)} {m_main.label}"
    side_text = f"{m_side.label} {pct(side.before, side.after)}"
    if gain(m_side, side.before, side.after) > 1:
        return f"{main_text} and {side_text}"
    return f"{side_text} for {main_text}"
