"""Roofline plot of a report: datasheet and measured ceilings, workload phases, trial points.

matplotlib is imported inside `plot_roofline` (Agg backend, no display needed): the rest of
hwadvisor never pays for it. The data gathering (`roofline_data`) is separate and testable.
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hwadvisor.errors import UserError
from hwadvisor.models import Device, Estimate, Report
from hwadvisor.models.serving import ServingPlan
from hwadvisor.report.figures import (
    MATMUL_PEAK_TRIALS,
    measured_bandwidth_gbps,
    measured_matmul_tflops,
)

# Bytes per element read (inputs) and written (output) by a matmul of each format; fp8 GEMMs
# (torch._scaled_mm) read e4m3 operands and write bf16.
MATMUL_IN_BYTES = {"fp8": 1, "int8": 1, "bf16": 2, "fp16": 2, "tf32": 4, "fp32": 4, "fp64": 8}
MATMUL_OUT_BYTES = {"fp8": 2, "int8": 4, "bf16": 2, "fp16": 2, "tf32": 4, "fp32": 4, "fp64": 8}

# Figures a log-log roofline can place: a rate (GB/s, TFLOP/s) or an intensity (FLOP/byte)
# outside this range is no reading of a real device (1 kB/s .. 1e9 GB/s) and would push the
# axes to limits matplotlib refuses; such a value is skipped with a note, never drawn.
PLOTTABLE = (1e-6, 1e9)

PHASES = (  # (label, total time, compute term, memory term) fields of Times
    ("prefill", "prefill_s", "prefill_compute_s", "prefill_memory_s"),
    ("decode step", "decode_step_s", "decode_compute_s", "decode_memory_s"),
    ("train step", "train_step_s", "train_compute_s", "train_memory_s"),
)


@dataclass
class Point:
    """A point on the roofline: arithmetic intensity (FLOP/byte) and attained TFLOP/s."""

    label: str
    intensity: float
    tflops: float


@dataclass
class RooflineData:
    """What the plot draws; every figure here came from the report."""

    device: str
    datasheet_bandwidth_gbps: float | None = None
    # "probe" when NVML's bus width x clock gave it (theoretical), else the profile's datasheet
    bandwidth_source: str = "datasheet"
    measured_bandwidth_gbps: float | None = None
    datasheet_tflops: dict[str, float] = field(default_factory=dict)
    measured_tflops: dict[str, float] = field(default_factory=dict)
    phases: list[Point] = field(default_factory=list)
    trials: list[Point] = field(default_factory=list)
    title: str = ""
    skipped: list[str] = field(default_factory=list)  # figures left out, in words


def plottable(value: object) -> bool:
    """Tell whether value is a finite, positive number inside PLOTTABLE (not NaN, inf, <= 0)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        number = float(value)
    except OverflowError:
        return False
    return math.isfinite(number) and PLOTTABLE[0] <= number <= PLOTTABLE[1]


def _keep(value: float | None, what: str, skipped: list[str]) -> float | None:
    """Return value when it can be plotted; else None, and say so in skipped (None is silent)."""
    if value is None:
        return None
    if plottable(value):
        return float(value)
    skipped.append(f"{what} = {value!r} (not a positive finite figure)")
    return None


def _keep_all(values: dict[str, float], what: str, skipped: list[str]) -> dict[str, float]:
    kept = {}
    for name, value in values.items():
        number = _keep(value, f"{what} {name}", skipped)
        if number is not None:
            kept[name] = number
    return kept


def phase_points(estimate: Estimate) -> list[Point]:
    """Workload phases from the estimate's roofline terms.

    The perf model's compute term is FLOPs / peak and its memory term bytes / bandwidth, so
    FLOPs = compute_s x peak_tflops_used and bytes = memory_s x bandwidth_gbps_used; the attained
    rate is FLOPs over the phase's total time (which includes the overheads). A perf model
    that derates the peak would put the points at its own derated FLOPs; that is the point:
    they show where the model places the phase, next to the measured ceilings.
    """
    return _phase_points(estimate, [])


def _positive(*values: float | None) -> bool:
    return all(v is not None and math.isfinite(v) and v > 0 for v in values)


def _phase_points(estimate: Estimate, skipped: list[str]) -> list[Point]:
    peak, bw = estimate.peak_tflops_used, estimate.bandwidth_gbps_used
    if not peak or not bw or not _positive(peak, bw):
        return []
    times = estimate.times
    points = []
    for label, total_f, compute_f, memory_f in PHASES:
        total, compute, memory = (getattr(times, f) for f in (total_f, compute_f, memory_f))
        if not total or not compute or not memory:
            continue
        per_forward = times.decode_tokens_per_forward
        if total_f == "decode_step_s" and per_forward:
            # decode_step_s is per token; the roofline terms are per forward (k tokens).
            total *= per_forward
        if not _positive(total, compute, memory):
            skipped.append(f"workload phase {label} (a time that is not a positive number)")
            continue
        flops = compute * peak * 1e12
        nbytes = memory * bw * 1e9
        if not _positive(flops, nbytes):  # a subnormal time times a rate can round to zero
            skipped.append(f"workload phase {label} (outside the plottable range)")
            continue
        point = Point(label, flops / nbytes, flops / total / 1e12)
        if plottable(point.intensity) and plottable(point.tflops):
            points.append(point)
        else:
            skipped.append(f"workload phase {label} (outside the plottable range)")
    return points


def _matmul_intensity(fmt: str, params: dict[str, float | int | str]) -> float | None:
    try:
        m, n, k = (float(params[key]) for key in ("m", "n", "k"))
    except (KeyError, TypeError, ValueError, OverflowError):
        return None
    b_in, b_out = MATMUL_IN_BYTES.get(fmt), MATMUL_OUT_BYTES.get(fmt)
    if b_in is None or b_out is None or not _positive(m, n, k):
        return None
    intensity = 2 * m * n * k / (b_in * (m * k + k * n) + b_out * m * n)
    return intensity if plottable(intensity) else None


def trial_points(report: Report, device: Device,
                 skipped: list[str] | None = None) -> list[Point]:
    """Matmul-trial measurements as points (intensity from their m, n, k and format)."""
    from hwadvisor.report.figures import trial_device

    skipped = [] if skipped is None else skipped
    points = []
    for trial in report.trials:
        if trial.status != "ok" or trial.id not in MATMUL_PEAK_TRIALS:
            continue
        ran_on = trial_device(report, trial)
        if ran_on is None or ran_on.index != device.index:
            continue
        for m in trial.measurements:
            if m.value is None or (m.value_unit or "").lower() not in {"tflop/s", "tflops"}:
                continue
            fmt = str(m.params.get("dtype") or m.params.get("format") or m.label)
            value = _keep(m.value, f"trial {trial.id} {fmt}", skipped)
            intensity = _matmul_intensity(fmt, m.params)
            if intensity and value is not None:
                points.append(Point(f"{trial.id} {fmt}", intensity, value))
    return points


def _pick_device(report: Report, index: int | None) -> Device:
    if not report.devices:
        raise UserError("the report has no device: there is no roofline to draw",
                        hint="plot a report probed on a machine with an accelerator")
    if index is None:
        return report.devices[0]
    for device in report.devices:
        if device.index == index:
            return device
    valid = ", ".join(str(d.index) for d in report.devices)
    raise UserError(f"the report has no device {index}", hint=f"pass --device-index {valid}")


def _bandwidth_kind(data: RooflineData, kind: str) -> str:
    """Label of a bandwidth line: measured, datasheet, or theoretical (read off the probe)."""
    if kind == "datasheet" and data.bandwidth_source == "probe":
        return "theoretical, probe"
    return kind


def roofline_data(report: Report, device_index: int | None = None) -> RooflineData:
    """Gather the ceilings and points to draw; UserError when there is no roofline to draw."""
    device = _pick_device(report, device_index)
    measured_bw = measured_bandwidth_gbps(report, device)
    skipped: list[str] = []
    data = RooflineData(
        device=device.name,
        datasheet_bandwidth_gbps=_keep(device.memory_bandwidth_gbps, "datasheet bandwidth",
                                       skipped),
        bandwidth_source=device.memory_bandwidth_source or "datasheet",
        measured_bandwidth_gbps=_keep(measured_bw[0] if measured_bw else None,
                                      "measured bandwidth", skipped),
        datasheet_tflops=_keep_all(device.peak_tflops, "datasheet TFLOP/s", skipped),
        measured_tflops=_keep_all(measured_matmul_tflops(report, device), "measured TFLOP/s",
                                  skipped),
        trials=trial_points(report, device, skipped),
        skipped=skipped,
    )
    if report.estimate is not None:
        data.phases = _phase_points(report.estimate, skipped)
    has_bw = data.datasheet_bandwidth_gbps or data.measured_bandwidth_gbps
    has_peak = data.datasheet_tflops or data.measured_tflops
    if not has_bw or not has_peak:
        missing = "memory bandwidth" if not has_bw else "peak TFLOP/s"
        unusable = f" ({len(skipped)} unusable figure(s) skipped: {skipped[0]})" if skipped else ""
        raise UserError(
            f"device {device.index} ({device.name}) has no {missing}, datasheet or measured: "
            f"no roofline to draw{unusable}",
            hint="use a report of a device with a datasheet profile, or run `hwadvisor validate` "
            "with the matmul-peak and memory-bandwidth trials",
        )
    workload = f" · {report.workload.model}" if report.workload else ""
    data.title = f"Roofline: {device.name}{workload}"
    return data


def _merge_equal(peaks: dict[str, float]) -> list[tuple[str, float]]:
    """Merge formats with the same ceiling into one line ('bf16/fp16 989')."""
    merged: dict[float, list[str]] = {}
    for fmt, value in peaks.items():
        merged.setdefault(round(value, 6), []).append(fmt)
    return sorted(((("/".join(f), v)) for v, f in merged.items()), key=lambda x: x[1])


def plot_roofline(report: Report, path: Path, device_index: int | None = None) -> RooflineData:
    """Draw the roofline of the report's device to path (PNG, or what the suffix says)."""
    from hwadvisor.report.io import check_target, write_bytes

    data = roofline_data(report, device_index)
    check_target(path)  # before drawing: a bad -o costs no rendering
    try:
        import matplotlib
    except ImportError:
        raise UserError("plotting needs matplotlib",
                        hint="pip install 'hwadvisor[plot]'") from None
    matplotlib.use("Agg")  # no display on CI runners and GPU servers
    import matplotlib.pyplot as plt

    # Names come from the report (a GPU, a model path): "$x$" in one is text, not mathtext,
    # which would render it as a formula or fail on a malformed one (text.parse_math:
    # matplotlib >= 3.5).
    with matplotlib.rc_context({"text.parse_math": False, "text.usetex": False}):
        front = report.serving.pareto if report.serving is not None else []
        if front:  # under a load: the Pareto front beside the roofline
            fig, (ax, right) = plt.subplots(1, 2, figsize=(17, 6.5), dpi=120)
        else:
            fig, ax = plt.subplots(figsize=(10, 6.5), dpi=120)
        try:
            fmt = _check_format(fig, Path(path))
            _draw(ax, data)
            if front and report.serving is not None:
                draw_pareto(right, report.serving)
            fig.tight_layout()
            image = io.BytesIO()
            fig.savefig(image, format=fmt)
        finally:
            plt.close(fig)
    write_bytes(path, image.getvalue())  # the one write path: atomic, devices and links handled
    return data


def _check_format(fig: Any, path: Path) -> str:
    """Return the image format of path's suffix; refuse one matplotlib cannot write.

    A suffix-less path (/dev/stdout, a fifo) is PNG.
    """
    fmt = path.suffix.lstrip(".").lower() or "png"
    supported = sorted(fig.canvas.get_supported_filetypes())
    if fmt not in supported:
        raise UserError(f"cannot write {path}: matplotlib has no '{fmt}' image format",
                        hint="end -o with .png, .svg or .pdf (also: " + ", ".join(supported) + ")")
    return fmt


def _x_range(data: RooflineData) -> tuple[float, float]:
    bws = [b for b in (data.datasheet_bandwidth_gbps, data.measured_bandwidth_gbps) if b]
    peaks = list(data.datasheet_tflops.values()) + list(data.measured_tflops.values())
    ridges = [p * 1e3 / b for p in peaks for b in bws]
    xs = ridges + [p.intensity for p in data.phases + data.trials]
    lo = min([0.1] + [x / 3 for x in xs])
    hi = max([1e3] + [x * 4 for x in xs])
    return lo, hi


def _short(value: float) -> str:
    """3 significant digits without scientific notation for the usual roofline range."""
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def _draw(a: Any, data: RooflineData) -> None:
    """Draw ceilings, phases and trial points on the Axes a (Any: matplotlib is optional).

    Bandwidth slopes are black (dashed datasheet, solid measured); each format's compute
    ceiling is a horizontal line in its colour from its ridge point on, named in the legend.
    """
    import numpy as np

    lo, hi = _x_range(data)
    palette = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2",
               "#17becf"]
    formats = list(dict.fromkeys(list(data.datasheet_tflops) + list(data.measured_tflops)))
    color = {fmt: palette[i % len(palette)] for i, fmt in enumerate(formats)}
    sheet_bw, meas_bw = data.datasheet_bandwidth_gbps, data.measured_bandwidth_gbps
    peaks = list(data.datasheet_tflops.values()) + list(data.measured_tflops.values())
    top = max(peaks)

    # Memory-bandwidth slopes (attainable TFLOP/s = GB/s x I / 1000) up to the highest ceiling
    # of their own kind, so each kind reads as one roofline.
    for bw, style, kind in ((sheet_bw, "--", "datasheet"), (meas_bw, "-", "measured")):
        if not bw:
            continue
        own = data.datasheet_tflops if kind == "datasheet" else data.measured_tflops
        x_end = max(own.values() or [top]) * 1e3 / bw
        xs = np.array([lo, x_end])
        a.plot(xs, bw * xs / 1e3, ls=style, lw=1.4 if kind == "datasheet" else 2.2,
               color="black", label=f"memory {bw:,.0f} GB/s ({_bandwidth_kind(data, kind)})")
    # Compute ceilings per format (formats with equal peaks share a line), from the ridge on.
    kinds = ((data.datasheet_tflops, "--", "datasheet", sheet_bw or meas_bw),
             (data.measured_tflops, "-", "measured", meas_bw or sheet_bw))
    for ceilings, style, kind, bw in kinds:
        for label, peak in _merge_equal(ceilings):
            assert bw is not None
            ridge = peak * 1e3 / bw
            a.plot([ridge, hi], [peak, peak], ls=style, lw=1.4 if kind == "datasheet" else 2.2,
                   color=color[label.split("/")[0]],
                   label=f"{label} {_short(peak)} TFLOP/s ({kind})")
    for p in data.phases:
        a.scatter([p.intensity], [p.tflops], s=90, marker="o", color="black", zorder=5)
        right = p.intensity < (lo * hi) ** 0.5  # text to the right on the left half, else left
        a.annotate(f"{p.label} (model)\n{_short(p.intensity)} FLOP/B, {_short(p.tflops)} TFLOP/s",
                   xy=(p.intensity, p.tflops), xytext=(10 if right else -10, -6),
                   textcoords="offset points", ha="left" if right else "right", va="top",
                   fontsize=8, bbox={"boxstyle": "round,pad=0.2", "fc": "white", "alpha": 0.5,
                                     "lw": 0})
    for p in data.trials:
        fmt = p.label.split()[-1]
        a.scatter([p.intensity], [p.tflops], s=70, marker="^", zorder=6,
                  color=color.get(fmt, "gray"), edgecolors="black", linewidths=0.7)
        a.annotate(f"{fmt} {_short(p.tflops)}", xy=(p.intensity, p.tflops), xytext=(7, 2),
                   textcoords="offset points", fontsize=7, ha="left", va="bottom")
    if data.phases:
        a.scatter([], [], s=90, marker="o", color="black", label="workload phase (perf model)")
    if data.trials:
        a.scatter([], [], s=70, marker="^", color="lightgray", edgecolors="black",
                  label="matmul trial (measured)")
    bws = [b for b in (sheet_bw, meas_bw) if b]
    bottoms = [p.tflops for p in data.phases + data.trials] + [min(bws) * lo / 1e3]
    a.set_xscale("log")
    a.set_yscale("log")
    a.set_xlim(lo, hi)
    a.set_ylim(max(min(bottoms) / 2, top / 1e5), top * 2.5)
    a.set_xlabel("Arithmetic intensity (FLOP per byte of memory traffic)")
    a.set_ylabel("Attainable throughput (TFLOP/s)")
    a.set_title(f"{data.title}\ndashed: datasheet · solid: measured", fontsize=11)
    a.grid(True, which="major", alpha=0.35)
    a.grid(True, which="minor", alpha=0.1)
    a.legend(loc="lower right", fontsize=8, framealpha=0.9)


def draw_pareto(a: Any, plan: ServingPlan) -> None:
    """Draw the Pareto front: tokens/s per GPU against tokens/s per user, the chosen config."""
    points = [p for p in plan.pareto if p.tokens_per_s_per_user > 0 and p.tokens_per_s_per_gpu > 0]
    xs = [p.tokens_per_s_per_user for p in points]
    ys = [p.tokens_per_s_per_gpu for p in points]
    a.plot(xs, ys, "-", color="#0072B2", linewidth=1.5, label="Pareto front (screen)")
    for meets, colour, label in ((True, "#009E73", "meets the targets there"),
                                 (False, "#999999", "misses a target there")):
        chosen = [p for p in points if p.meets_targets == meets]
        if chosen:
            a.scatter([p.tokens_per_s_per_user for p in chosen],
                      [p.tokens_per_s_per_gpu for p in chosen], color=colour, s=28, zorder=3,
                      label=label)
    for p in points:
        c = p.config
        drafts = f" {c.speculative}" if c.speculative else ""
        tag = f"TP{c.tensor_parallel} {c.weights_dtype}{drafts}"
        a.annotate(f"{tag} x{c.max_sequences}", (p.tokens_per_s_per_user, p.tokens_per_s_per_gpu),
                   fontsize=7, xytext=(4, 4), textcoords="offset points")
    best = plan.best
    if best is not None and best.tokens_per_s_per_user > 0:
        a.scatter([best.tokens_per_s_per_user], [best.tokens_per_s_per_gpu], marker="s",
                  color="#D55E00", s=60, zorder=4, label="the chosen config at the load")
    from matplotlib.ticker import FuncFormatter

    a.set_xscale("log")
    a.set_yscale("log")
    plain = FuncFormatter(lambda value, _: _short(value))  # no mathtext: text.parse_math is off
    for axis in (a.xaxis, a.yaxis):
        axis.set_major_formatter(plain)
        axis.set_minor_formatter(FuncFormatter(lambda value, _: ""))
    a.set_xlabel("tokens/s per user (1 / TPOT p50)")
    a.set_ylabel("output tokens/s per GPU")
    a.set_title(f"Serving: {plan.load.words()}", fontsize=10)
    a.grid(True, which="both", alpha=0.3)
    a.legend(fontsize=8)
