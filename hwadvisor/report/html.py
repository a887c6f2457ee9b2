"""One self-contained HTML page of a report: plan, memory bar, roofline, trials, config.

The page is rendered with Jinja2 (templates/report.html.j2, autoescaped) and draws its charts
as inline SVG whose geometry is computed here; CSS and the one small script are inline too,
so the file opens offline and nothing is fetched at view time.

Every number on the page that comes from the report carries `data-key` (its path in the
report's JSON) and `data-value` (the value itself), so a test can hold the page to the JSON.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from hwadvisor import units
from hwadvisor.errors import UserError
from hwadvisor.models import Report
from hwadvisor.report.plain import bottom_line, glossary_lines, next_step, on_gpu

if TYPE_CHECKING:
    from hwadvisor.report.compare import Comparison

MEMORY_PARTS = (("weights", "weights_bytes"), ("KV cache", "kv_cache_bytes"),
                ("activations", "activations_bytes"), ("gradients", "gradients_bytes"),
                ("optimizer", "optimizer_bytes"), ("runtime", "runtime_bytes"))
# Colour-blind-safe palette (Okabe & Ito 2008), one colour per memory part / ceiling.
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#999999", "#D55E00")
CHART_W, CHART_H, MARGIN = 640.0, 360.0, 56.0


@dataclass
class Figure:
    """One number shown on the page: its JSON path, raw value and formatted text."""

    key: str
    value: float | int | None
    text: str


@dataclass
class Segment:
    """One part of the memory bar."""

    label: str
    figure: Figure
    x: float
    width: float
    colour: str


@dataclass
class Roofline:
    """The roofline drawn as SVG: ceilings as polylines, workload and trial points."""

    lines: list[dict[str, Any]] = field(default_factory=list)
    points: list[dict[str, Any]] = field(default_factory=list)
    xticks: list[tuple[float, str]] = field(default_factory=list)
    yticks: list[tuple[float, str]] = field(default_factory=list)
    title: str = ""
    missing: str | None = None


def fig(key: str, value: float | int | None, unit: str) -> Figure:
    """Return a number for the page, formatted by the one formatter (units.quantity)."""
    return Figure(key, value, units.quantity(value, unit))


def memory_bar(report: Report) -> tuple[list[Segment], Figure | None, Figure | None]:
    """Split the memory bar by part, scaled to the larger of the total and device memory."""
    est = report.estimate
    if est is None:
        return [], None, None
    mem = est.memory
    scale = max(mem.total_bytes, mem.device_memory_bytes or 0) or 1
    segments, x = [], 0.0
    for i, (label, name) in enumerate(MEMORY_PARTS):
        value = getattr(mem, name)
        if not value:
            continue
        width = 100.0 * value / scale
        segments.append(Segment(label, fig(f"estimate.memory.{name}", value, "bytes"), x, width,
                                PALETTE[i]))
        x += width
    total = fig("estimate.memory.total_bytes", mem.total_bytes, "bytes")
    limit = (fig("estimate.memory.device_memory_bytes", mem.device_memory_bytes, "bytes")
             if mem.device_memory_bytes else None)
    return segments, total, limit


def _log_axis(lo: float, hi: float, length: float) -> Any:
    span = math.log10(hi) - math.log10(lo)

    def place(value: float) -> float:
        return length * (math.log10(value) - math.log10(lo)) / span

    return place


def _ticks(lo: float, hi: float) -> list[float]:
    return [10.0 ** e for e in range(math.ceil(math.log10(lo)), math.floor(math.log10(hi)) + 1)]


def roofline(report: Report) -> Roofline:
    """Compute the roofline's SVG geometry from report/plot.py's data (no matplotlib)."""
    from hwadvisor.report.plot import _x_range, roofline_data

    try:
        data = roofline_data(report)
    except UserError as exc:
        return Roofline(missing=exc.message)
    bws = [(k, b) for k, b in (("datasheet", data.datasheet_bandwidth_gbps),
                               ("measured", data.measured_bandwidth_gbps)) if b]
    peaks = [(f"{k} (datasheet)", v) for k, v in data.datasheet_tflops.items()] + \
        [(f"{k} (measured)", v) for k, v in data.measured_tflops.items()]
    x_lo, x_hi = _x_range(data)
    ys = [v for _, v in peaks] + [p.tflops for p in data.phases + data.trials]
    y_hi = max(ys) * 3
    y_lo = min([y_hi / 1e4] + [y / 3 for y in ys if y > 0])
    px = _log_axis(x_lo, x_hi, CHART_W - 2 * MARGIN)
    py = _log_axis(y_lo, y_hi, CHART_H - 2 * MARGIN)

    def xy(x: float, y: float) -> str:
        return f"{MARGIN + px(x):.1f},{CHART_H - MARGIN - py(min(max(y, y_lo), y_hi)):.1f}"

    out = Roofline(title=data.title)
    colour = iter(PALETTE)
    for name, peak in peaks:
        for kind, bw in bws[:1] if "datasheet" in name else bws[-1:]:
            ridge = peak * 1e3 / bw  # FLOP per byte where the bandwidth slope meets the ceiling
            pts = [xy(x_lo, x_lo * bw / 1e3), xy(ridge, peak), xy(x_hi, peak)]
            out.lines.append({"label": f"{name}: {units.tflops(peak)}, ridge "
                              f"{units.number(ridge)} FLOP/B ({kind} bandwidth)",
                              "points": " ".join(pts), "colour": next(colour, "#333"),
                              "dash": "6 4" if "datasheet" in name else ""})
    for kind, points in (("workload", data.phases), ("trial", data.trials)):
        for p in points:
            x, y = xy(p.intensity, p.tflops).split(",")
            out.points.append({"label": f"{p.label}: {units.number(p.intensity)} FLOP/B, "
                               f"{units.tflops(p.tflops)}", "x": x, "y": y, "kind": kind})
    out.xticks = [(MARGIN + px(t), units.number(t)) for t in _ticks(x_lo, x_hi)]
    out.yticks = [(CHART_H - MARGIN - py(t), units.number(t)) for t in _ticks(y_lo, y_hi)]
    return out


def pareto(report: Report) -> Roofline:
    """Compute the Pareto front's SVG geometry: tokens/s per GPU against tokens/s per user."""
    plan = report.serving
    points = [p for p in (plan.pareto if plan is not None else [])
              if p.tokens_per_s_per_user > 0 and p.tokens_per_s_per_gpu > 0]
    if not points:
        return Roofline(missing="no Pareto front (recommend with --rate or --concurrency)")
    xs = [p.tokens_per_s_per_user for p in points]
    ys = [p.tokens_per_s_per_gpu for p in points]
    x_lo, x_hi, y_lo, y_hi = min(xs) / 1.5, max(xs) * 1.5, min(ys) / 1.5, max(ys) * 1.5
    px = _log_axis(x_lo, x_hi, CHART_W - 2 * MARGIN)
    py = _log_axis(y_lo, y_hi, CHART_H - 2 * MARGIN)

    def xy(x: float, y: float) -> tuple[float, float]:
        return MARGIN + px(x), CHART_H - MARGIN - py(y)

    out = Roofline(title="Pareto front: tokens/s per GPU against tokens/s per user")
    path = [xy(x, y) for x, y in zip(xs, ys, strict=True)]
    out.lines.append({"label": "the front", "points": " ".join(f"{a:.1f},{b:.1f}"
                                                               for a, b in path),
                      "colour": PALETTE[0], "dash": ""})
    for p, (x, y) in zip(points, path, strict=True):
        c = p.config
        label = (f"TP {c.tensor_parallel}, {c.weights_dtype} weights, {c.kv_dtype} KV"
                 f"{', ' + c.speculative + ' drafts' if c.speculative else ''}, "
                 f"{c.max_sequences} sequences: {units.rate(p.tokens_per_s_per_gpu)} per GPU, "
                 f"{units.rate(p.tokens_per_s_per_user)} per user")
        out.points.append({"label": label, "x": f"{x:.1f}", "y": f"{y:.1f}",
                           "kind": "workload" if p.meets_targets else "trial"})
    best = plan.best if plan is not None else None
    if best is not None and best.tokens_per_s_per_user > 0:
        x, y = xy(min(max(best.tokens_per_s_per_user, x_lo), x_hi),
                  min(max(best.tokens_per_s_per_gpu, y_lo), y_hi))
        out.points.append({"label": f"the chosen config at the load: "
                           f"{units.rate(best.tokens_per_s_per_gpu)} per GPU, "
                           f"{units.rate(best.tokens_per_s_per_user)} per user",
                           "x": f"{x:.1f}", "y": f"{y:.1f}", "kind": "chosen"})
    out.xticks = [(MARGIN + px(t), units.number(t)) for t in _ticks(x_lo, x_hi)]
    out.yticks = [(CHART_H - MARGIN - py(t), units.number(t)) for t in _ticks(y_lo, y_hi)]
    return out


def serving_context(report: Report) -> dict[str, Any]:
    """Return the serving section's words and rows, from report/servingtext.py."""
    from hwadvisor.report.servingtext import (
        FIGURE_HEADER,
        FRONT_HEADER,
        figure_rows,
        front_rows,
        point_words,
        throughput_words,
        tpot_words,
    )

    plan = report.serving
    if plan is None:
        return {}
    return {
        "verdict": plan.verdict, "load": f"{plan.load.words()} ({plan.load.source})",
        "targets": plan.targets.words() or "none given",
        "checks": [(c.met, c.words()) for c in plan.checks],
        "config": plan.config.words() if plan.config is not None else None,
        "figure_header": FIGURE_HEADER,
        "figures": figure_rows(plan.figures) if plan.figures is not None else [],
        "throughput": throughput_words(plan.figures) if plan.figures is not None else None,
        "tpot": tpot_words(plan), "fewest": plan.fewest_gpus, "searched": plan.searched,
        "top": [point_words(p) for p in plan.top], "front_header": FRONT_HEADER,
        "front": front_rows(plan), "method": plan.method, "notes": plan.notes,
        "chart": pareto(report)}


def plan_figures(report: Report) -> list[tuple[str, Figure]]:
    """Return the plan's headline numbers, each tied to its JSON key."""
    plan = report.plan
    if plan is None:
        return []
    rows = [("before (engine defaults)", fig("plan.metric.before", plan.metric.before,
                                              plan.metric.unit)),
            ("with the plan", fig("plan.metric.after", plan.metric.after, plan.metric.unit)),
            ("memory" + (" per GPU" if on_gpu(report) else ""),
             fig("plan.memory_per_gpu_bytes", plan.memory_per_gpu_bytes, "bytes"))]
    for label, key, value, unit in (("time to first token (TTFT)", "plan.ttft_s", plan.ttft_s,
                                     "s"),
                                    ("time per output token (TPOT)", "plan.tpot_s",
                                     plan.tpot_s, "s"),
                                    ("throughput", "plan.tokens_per_s", plan.tokens_per_s,
                                     "tokens/s")):
        if value is not None:
            rows.append((label, fig(key, value, unit)))
    return rows


def trial_rows(report: Report) -> list[dict[str, Any]]:
    """Each trial's effects with their 95% intervals, drawn as bars on a log scale of ×."""
    rows = []
    for t_index, trial in enumerate(report.trials):
        effects = []
        for e_index, effect in enumerate(trial.effects):
            unit = "x" if effect.unit in ("x", "ratio") else (effect.unit or "")
            ci = effect.ci
            effects.append({
                "name": effect.name,
                "figure": fig(f"trials.{t_index}.effects.{e_index}.value", effect.value, unit),
                "ci": [units.quantity(c, unit) for c in ci] if ci else None,
                "bar": _interval_bar(effect.value, ci) if unit == "x" else None,
            })
        rows.append({"id": trial.id, "status": trial.status,
                     "text": trial.summary or trial.reason or "", "effects": effects})
    return rows


def _interval_bar(value: float, ci: list[float] | None) -> dict[str, float] | None:
    """Place a ratio and its interval on a 0.25×..4× log scale (1× in the middle), in %."""
    def pos(v: float) -> float:
        return 50.0 + 25.0 * math.log2(min(max(v, 0.25), 4.0))

    if value <= 0:
        return None
    lo, hi = (ci if ci and ci[0] > 0 else (value, value))
    return {"value": pos(value), "lo": pos(lo), "hi": pos(hi)}


def visible_text(page: str) -> str:
    """Return the page's text as a reader sees it: no style, script or tags (for the glossary)."""
    import re

    body = re.sub(r"<(style|script)\b.*?</\1>", " ", page, flags=re.S)
    return re.sub(r"<[^>]+>", " ", body)


def render_html(report: Report, comparison: Comparison | None = None) -> str:
    """Return the report as one self-contained HTML page."""
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("hwadvisor.report", "templates"),
        autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters["quantity"] = lambda value, unit: units.quantity(value, unit)
    from hwadvisor.report.plantext import config_lines, numbers_line, plan_lines

    segments, total, limit = memory_bar(report)
    lines = plan_lines(report)
    context = {
        "report": report,
        "bottom_line": bottom_line(report),
        "next_step": next_step(report),
        "plan_lines": lines[1:],
        "numbers": numbers_line(report),
        "plan_figures": plan_figures(report),
        "config": config_lines(report.plan) if report.plan is not None else [],
        "segments": segments, "total": total, "limit": limit,
        "roofline": roofline(report),
        "serving": serving_context(report),
        "trials": trial_rows(report),
        "comparison": comparison,
        "chart": {"w": CHART_W, "h": CHART_H, "m": MARGIN},
    }
    page = env.get_template("report.html.j2").render(**context, glossary=[])
    # the glossary covers the words the page itself uses
    terms = [line.strip().split(": ", 1) for line in glossary_lines(visible_text(page))[1:]]
    return env.get_template("report.html.j2").render(**context, glossary=terms)
