"""The load test in words: a sentence, lines for the terminal, and a markdown section."""

from __future__ import annotations

from hwadvisor.models import Report
from hwadvisor.models.loadtest import FigureCheck, LoadTest

NAMES = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "request_latency": "latency"}


def _ms(seconds: float | None) -> str:
    return "—" if seconds is None else f"{seconds * 1000:.1f} ms"


def _ci(check: FigureCheck) -> str:
    if check.ci_s is None:
        return "—"
    return f"{check.ci_s[0] * 1000:.1f}–{check.ci_s[1] * 1000:.1f} ms"


def load_test_line(test: LoadTest) -> str:
    """Return the one sentence of a load test: what ran, how many completed, the verdict."""
    done = f"{test.requests_completed} of {test.requests_sent} requests completed"
    line = f"Load test of {test.endpoint} ({test.load.words()}): {done}"
    if test.status == "error":
        return f"{line}; {test.detail}."
    if test.predicted is None:
        return f"{line}; measured only ({test.prediction})."
    return f"{line}; the prediction is {test.status}: {test.detail}."


def load_test_lines(report: Report) -> list[str]:
    """Return the load test as terminal lines: the figures, measured beside predicted."""
    test = report.load_test
    if test is None:
        return []
    lines = [f"load test: {test.endpoint}, {test.load.words()}, {test.requests_completed}/"
             f"{test.requests_sent} completed in {test.duration_s:.1f} s ({test.stopped_by})"]
    measured = test.measured
    if measured is not None:
        lines.append(f"  throughput: {measured.request_throughput_rps:.2f} requests/s, "
                     f"{measured.output_tokens_per_s:.1f} output tokens/s")
    for check in test.checks:
        ratio = f"{check.ratio:.2f}x" if check.ratio is not None else "—"
        mark = "" if check.judged else " (shown, not judged)"
        lines.append(f"  {NAMES[check.figure]} p{check.percentile}: measured "
                     f"{_ms(check.measured_s)} (95% {_ci(check)}), predicted "
                     f"{_ms(check.predicted_s)}, {ratio}: {check.status}{mark}")
    if not test.checks and measured is not None:
        for figure in ("ttft", "tpot", "itl", "request_latency"):
            lines.append(f"  {NAMES[figure]} p50 {_ms(measured.at(figure, 50))}, "
                         f"p90 {_ms(measured.at(figure, 90))}")
    if test.engine_tpot_p50_s is not None:
        lines.append(f"  the engine's own timings: prefill p50 {_ms(test.engine_prefill_p50_s)}, "
                     f"time per token p50 {_ms(test.engine_tpot_p50_s)}, p90 "
                     f"{_ms(test.engine_tpot_p90_s)}")
    lines += [f"  failed: {e}" for e in test.errors]
    lines += [f"  note: {n}" for n in test.notes]
    lines.append(f"  verdict: {test.status} — {test.detail}")
    if test.prediction:
        lines.append(f"  prediction: {test.prediction}")
    if test.bench_command:
        lines.append(f"  the engine's own benchmark for this load: {test.bench_command}")
    return lines


def load_test_markdown(report: Report) -> list[str]:
    """Return the load test as a markdown section."""
    test = report.load_test
    if test is None:
        return []
    lines = ["## Load test", "", load_test_line(test), ""]
    if test.checks:
        lines += ["| figure | measured | 95% interval | predicted | measured/predicted | verdict |",
                  "|---|---|---|---|---|---|"]
        for c in test.checks:
            name = f"{NAMES[c.figure]} p{c.percentile}" + ("" if c.judged else " (not judged)")
            ratio = f"{c.ratio:.2f}" if c.ratio is not None else "—"
            lines.append(f"| {name} | {_ms(c.measured_s)} | {_ci(c)} | {_ms(c.predicted_s)} | "
                         f"{ratio} | {c.status} |")
        lines.append("")
    lines.append(f"Intervals: {test.interval_method}.")
    lines += [f"- {n}" for n in test.notes + [f"failed: {e}" for e in test.errors]]
    if test.bench_command:
        lines += ["", "The engine's own benchmark for this load:", "", "```",
                  test.bench_command, "```"]
    return lines
