"""A markdown summary of a report, for GitHub Actions step summaries and pull-request comments."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from hwadvisor import units
from hwadvisor.models import Measurement, Prediction, Report, TrialResult
from hwadvisor.report.figures import measured_bandwidth_gbps, measured_matmul_tflops
from hwadvisor.report.loadtext import load_test_markdown

if TYPE_CHECKING:
    from hwadvisor.report.compare import Comparison

DASH = "—"  # an unknown value: shown as a dash, never as 0

VERDICT_MARK = {
    "confirmed": "✅ confirmed",
    "refuted": "❌ refuted",
    "inconclusive": "❔ inconclusive",
    "unsupported": "⚪ unsupported",
    "error": "⚠️ error",
    "pending": "⏳ pending",
}


def cell(value: object) -> str:
    """Format a table cell: None as a dash; pipes and newlines escaped (the table holds)."""
    if value is None or value == "":
        return DASH
    return str(value).replace("|", "\\|").replace("\n", " ")


def num(value: float | int | None, digits: int = 3) -> str:
    """Format a number with `digits` significant digits; None as a dash."""
    return units.number(value, digits, DASH)


def gb(value: int | float | None) -> str:
    """Format bytes as GB (10^9), one decimal; None as a dash."""
    return units.gb(value, DASH)


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    """Build markdown table lines."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return lines


def _device_rows(report: Report) -> list[list[object]]:
    rows: list[list[object]] = []
    for d in report.devices:
        measured_bw = measured_bandwidth_gbps(report, d)
        measured_tf = measured_matmul_tflops(report, d)
        peaks = ", ".join(f"{k} {v:g}" for k, v in d.peak_tflops.items()) or None
        measured_peaks = ", ".join(f"{k} {v:.0f}" for k, v in measured_tf.items()) or None
        rows.append([
            d.index, d.name, d.device_class, gb(d.memory_total_bytes),
            num(d.memory_bandwidth_gbps, 4), num(measured_bw[0], 4) if measured_bw else None,
            peaks, measured_peaks, d.profile_id,
        ])
    return rows


def _devices(report: Report) -> list[str]:
    lines = ["## Device", ""]
    host = report.host
    lines.append(
        f"Host: {cell(host.cpu_model)}, {cell(host.cpu_cores)} cores, RAM "
        f"{gb(host.memory_total_bytes)}, {cell(host.os)}. "
        f"Advice shaped for **{report.device_class}**."
    )
    lines.append("")
    if not report.devices:
        lines.append("No accelerator found: CPU only.")
        return lines
    lines += table(
        ["#", "device", "class", "memory", "bandwidth GB/s (datasheet)", "measured GB/s",
         "peak TFLOP/s (datasheet)", "measured TFLOP/s", "profile"],
        _device_rows(report),
    )
    return lines


def _workload(report: Report) -> list[str]:
    w = report.workload
    if w is None:
        return []
    params = f"{num(w.params_total)} params" if w.params_total is not None else "params —"
    if w.params_active is not None and w.params_active != w.params_total:
        params += f" ({num(w.params_active)} active)"
    lines = ["## Workload", ""]
    lines.append(
        f"**{w.model}** · {w.phase} · batch {w.batch} · prompt {w.prompt_len} · gen {w.gen_len} · "
        f"weights {w.weights_dtype} · kv {w.kv_dtype} · {w.gpus} GPU(s) · {params}"
    )
    return lines


def _estimate(report: Report) -> list[str]:
    e = report.estimate
    if e is None:
        return []
    m = e.memory
    fit = "fits" if e.fits else "**does not fit**"
    lines = ["## Estimate", ""]
    lines.append(
        f"Memory: {gb(m.total_bytes)} needed of {gb(m.device_memory_bytes)} ({fit}; weights "
        f"{gb(m.weights_bytes)}, KV cache {gb(m.kv_cache_bytes)}, activations "
        f"{gb(m.activations_bytes)}, gradients {gb(m.gradients_bytes)}, optimizer "
        f"{gb(m.optimizer_bytes)})."
    )
    lines.append("")
    lines.append(f"**Bottleneck: {e.bottleneck}** — {e.bottleneck_why}")
    # Only the *_s fields are times (decode_tokens_per_forward is a count).
    times = [(k, v) for k, v in e.times.model_dump().items()
             if v is not None and k.endswith("_s")]
    if times:
        lines.append("")
        lines += table(["time", "ms"], [[k, num(v * 1e3)] for k, v in times])
    if e.tokens_per_s is not None:
        lines += ["", f"Predicted throughput: {num(e.tokens_per_s)} tokens/s."]
    return lines


def _prediction(p: Prediction) -> str:
    unit = f" {p.unit}" if p.unit else ""
    text = f"{p.metric}: {num(p.before)} → {num(p.after)}{unit}"
    if p.factor is not None:
        text += f" (×{p.factor:.2f})"
    return text


def _plan(report: Report) -> list[str]:
    """Render the plan first: the bottom line, its steps and numbers, then the engine's config."""
    from hwadvisor.report.plantext import (
        LAUNCH_HEADING,
        config_lines,
        file_fence,
        file_heading,
        other_config_blocks,
        plan_lines,
    )

    if report.plan is None:
        return []
    text = plan_lines(report)
    lines = [f"## Plan for {report.goal}", "", f"**{text[0]}**", ""]
    lines += [line if line[:1].isdigit() or line.startswith("   ") else f"{line}  "
              for line in text[1:]]
    config = config_lines(report.plan)
    if config:
        fence = "toml" if report.plan.engine_config and \
            report.plan.engine_config.format == "toml" else ""
        lines += ["", f"{config[0]}", "", f"```{fence}", *report.plan.engine_config.text
                  .splitlines(), "```"] if report.plan.engine_config else []
        if report.plan.engine_config and report.plan.engine_config.launch:
            lines += ["", LAUNCH_HEADING, "", "```", *report.plan.engine_config.launch
                      .splitlines(), "```"]
        for name, body in (report.plan.engine_config.files.items()
                           if report.plan.engine_config else []):
            lines += ["", file_heading(name), "", f"```{file_fence(name)}", *body.splitlines(),
                      "```"]
        lines += [f"- {line}" for line in config[1:] if line.startswith(("not in", "note:"))]
    for other, block in zip(report.plan.engine_config.also if report.plan.engine_config else [],
                            other_config_blocks(report.plan), strict=True):
        fence = "json" if other.format == "json" else "python"
        lines += ["", block[0], "", f"```{fence}", *other.text.splitlines(), "```"]
        lines += [f"- {line}" for line in block[1:] if line.startswith(("not in", "note:"))]
    return lines


def _recommendations(report: Report) -> list[str]:
    if not report.recommendations and not report.rejected:
        return []
    goal = f" for {report.goal}" if report.goal else ""
    lines = [f"## Recommendations{goal}", ""]
    ranked = sorted(report.recommendations, key=lambda r: (r.rank, r.id))
    if ranked:
        rows = []
        for r in ranked:
            v = r.validation
            measured = f"×{v.measured_factor:.2f}" if v.measured_factor is not None else None
            if measured and v.ci is not None:
                measured += f" [{v.ci[0]:.2f}, {v.ci[1]:.2f}]"
            rows.append([r.rank, r.id, r.title, _prediction(r.predicted), r.trial,
                         VERDICT_MARK.get(v.status, v.status), measured, v.detail])
        lines += table(["rank", "id", "title", "predicted", "trial", "verdict", "measured",
                        "detail"], rows)
    else:
        lines.append("No rule fired.")
    if report.rejected:
        lines += ["", f"<details><summary>{len(report.rejected)} rule(s) not fired</summary>", ""]
        lines += table(["id", "why not"], [[r.id, r.why_not] for r in report.rejected])
        lines += ["", "</details>"]
    return lines


def _headline(m: Measurement) -> str:
    if m.skipped:
        return f"{m.label}: skipped ({m.skipped})"
    if m.value is not None:
        return f"{m.label}: {num(m.value)} {m.value_unit or ''}".rstrip()
    if m.median is not None:
        noisy = " (noisy)" if m.noisy else ""
        return f"{m.label}: {num(m.median)} {m.unit}{noisy}"
    return m.label


def _trial_row(t: TrialResult) -> list[object]:
    figures = "; ".join(_headline(m) for m in t.measurements[:4]) or None
    effects = ", ".join(f"{e.name} {units.number(e.value)}" + (f" {e.unit}" if e.unit else "")
                        for e in t.effects) or None
    detail = t.summary or t.reason
    return [t.id, t.status, figures, effects, detail, num(t.wall_s)]


def _trials(report: Report) -> list[str]:
    if not report.trials:
        return []
    lines = ["## Trials", ""]
    lines += table(["trial", "status", "figures", "effect", "summary", "wall s"],
                   [_trial_row(t) for t in report.trials])
    return lines


def _gates(report: Report) -> list[str]:
    lines = ["## Gates", ""]
    if report.gates_tripped:
        lines += [f"- ❌ {g}" for g in report.gates_tripped]
    else:
        lines.append("✅ No gate tripped.")
    return lines


def _notes(report: Report) -> list[str]:
    if not report.notes:
        return []
    return ["## Notes", ""] + [f"- {n}" for n in report.notes]


def _serving(report: Report) -> list[str]:
    """Return the load planned for, the targets met or missed, the figures, the front."""
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
        return []
    lines = ["## Serving under load", "", f"**{plan.verdict}**", "",
             f"- Load planned for: {plan.load.words()} ({plan.load.source})",
             f"- Targets: {plan.targets.words() or 'none given'}"]
    lines += [f"  - {'✅' if c.met else '❌'} {c.words()}" for c in plan.checks]
    if plan.config is not None:
        lines.append(f"- Config: {plan.config.words()}")
    if plan.searched:
        lines.append(f"- Fewest GPUs for this load: {cell(plan.fewest_gpus)} "
                     f"({plan.searched} configs searched)")
    if plan.figures is not None:
        lines += ["", f"Figures ({plan.figures_words()}), ms:", ""]
        lines += table(FIGURE_HEADER, figure_rows(plan.figures))
        lines += ["", f"Throughput: {throughput_words(plan.figures)}. {tpot_words(plan)}."]
    if plan.top:
        lines += ["", "Top configs:", ""]
        lines += [f"{i}. {point_words(p)}" for i, p in enumerate(plan.top, start=1)]
    if plan.pareto:
        lines += ["", "Pareto front (tokens/s per GPU against tokens/s per user):", ""]
        lines += table(FRONT_HEADER, front_rows(plan))
    lines += ["", f"Method: {plan.method}."]
    lines += [f"- {n}" for n in plan.notes]
    return lines


def render_markdown(report: Report) -> str:
    """Render the report as a markdown summary.

    Sections: device, workload, estimate, recommendations, trials, gates and notes; sections
    without data are left out, gates are always shown.
    """
    lines = [f"# hwadvisor {report.kind} report", ""]
    lines.append(
        f"hwadvisor {report.tool_version} · schema {report.schema_version} · {report.generated_at}"
        + (" · **interrupted**" if report.interrupted else "")
    )
    for section in (_plan, load_test_markdown, _serving, _devices, _workload, _estimate,
                    _recommendations, _trials, _gates, _notes):
        part = section(report)
        if part:
            lines += [""] + part
    return "\n".join(lines) + "\n"



def render_comparison_markdown(comparison: Comparison) -> str:
    """`hwadvisor compare` as markdown: regressions first, then every figure and verdict."""
    lines = [f"**{comparison.headline}**", "", "# hwadvisor compare", ""]
    lines.append(f"Baseline `{comparison.baseline_path}` → current `{comparison.current_path}`, "
                 f"regression limit {comparison.max_regression_pct:g}%.")
    lines += ["", "## Regressions", ""]
    if comparison.regressions:
        lines += [f"- ❌ {r}" for r in comparison.regressions]
    else:
        lines.append("✅ No regression.")
    if comparison.figures:
        rows = []
        for f in comparison.figures:
            change = None if f.change_pct is None else f"{f.change_pct:+.1f}%"
            status = "❌ regressed" if f.regressed else (
                "direction unknown" if f.better is None
                else f"not gated: {f.not_gated_why}" if not f.gated else "ok")
            rows.append([f.key, f.unit, f.better, num(f.baseline, 4), num(f.current, 4), change,
                         status + (" (noisy)" if f.noisy else "")])
        lines += ["", "## Measured figures", ""]
        lines += table(["figure", "unit", "better", "baseline", "current", "change", "status"],
                       rows)
    if comparison.verdicts:
        lines += ["", "## Verdicts", ""]
        lines += table(["recommendation", "baseline", "current", "status"],
                       [[v.id, v.baseline, v.current, "❌ regressed" if v.regressed
                         else ("❔ no longer decided" if v.undecided else "ok")]
                        for v in comparison.verdicts])
    if comparison.lost and comparison.allow_missing:
        lines += ["", "## Lost (allowed by --allow-missing)", ""]
        lines += [f"- {line}" for line in comparison.lost]
    if comparison.notes:
        lines += ["", "## Notes", ""] + [f"- {n}" for n in comparison.notes]
    return "\n".join(lines) + "\n"
