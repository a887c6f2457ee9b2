"""`hwadvisor compare`: regressions by unit direction, verdict changes, and exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import report_factory as factory
from typer.testing import CliRunner

from hwadvisor.cli.app import app
from hwadvisor.errors import ExitCode
from hwadvisor.models import Report
from hwadvisor.report.compare import better_direction, compare_reports
from hwadvisor.report.io import write_report

FIXTURES = Path(__file__).parents[1] / "fixtures" / "reports"


def _run(tmp_path: Path, baseline: Report, current: Report, *args: str):
    b, c = tmp_path / "baseline.json", tmp_path / "current.json"
    write_report(b, baseline)
    write_report(c, current)
    return CliRunner().invoke(app, ["compare", str(b), str(c), "--json", *args])


@pytest.mark.parametrize("unit, name, expected", [
    ("GB/s", "", "higher"), ("TFLOP/s", "", "higher"), ("s", "", "lower"), ("ms", "", "lower"),
    (None, "speedup", "higher"), (None, "copy_gbps", "higher"), (None, "bf16_tflops", "higher"),
    (None, "decode_step_s", "lower"), (None, "memory_saved_bytes", "higher"),
    (None, "peak_memory_bytes", "lower"), (None, "mystery", None),
])
def test_better_direction(unit: str | None, name: str, expected: str | None) -> None:
    assert better_direction(unit, name) == expected


def test_bandwidth_regression_past_threshold_exits_1(tmp_path: Path) -> None:
    # one run a side gates a timing only with the drift declared (--min-effect)
    result = _run(tmp_path, factory.validate_report(copy_gbps=4150.0),
                  factory.validate_report(copy_gbps=3900.0), "--min-effect", "50")  # -6.0%
    assert result.exit_code == ExitCode.GATE_TRIPPED, result.output
    data = json.loads(result.stdout)
    regressed = {f["key"] for f in data["figures"] if f["regressed"]}
    assert "trials.memory-bandwidth.effect.copy_gbps" in regressed
    # Seconds got longer by the same ratio, but one run's time needs 10% (MIN_EFFECT_PCT).
    assert "trials.memory-bandwidth.copy.median" not in regressed
    assert data["regressions"]


def test_regression_within_threshold_exits_0(tmp_path: Path) -> None:
    result = _run(tmp_path, factory.validate_report(copy_gbps=4150.0),
                  factory.validate_report(copy_gbps=4000.0))  # -3.6%
    assert result.exit_code == ExitCode.OK, result.output
    data = json.loads(result.stdout)
    assert data["regressions"] == []
    delta = next(f for f in data["figures"] if f["key"].endswith("copy_gbps"))
    assert delta["change_pct"] == pytest.approx((4000 - 4150) / 4150 * 100)


def test_max_regression_option_changes_the_verdict(tmp_path: Path) -> None:
    base, cur = factory.validate_report(copy_gbps=4150.0), factory.validate_report(copy_gbps=3900.0)
    declared = ("--min-effect", "50")
    assert _run(tmp_path, base, cur, *declared).exit_code == ExitCode.GATE_TRIPPED  # 6% worse
    assert _run(tmp_path, base, cur, "--max-regression", "10",
                *declared).exit_code == ExitCode.OK
    assert _run(tmp_path, base, cur).exit_code == ExitCode.OK  # one run a side: not gated


def test_improvement_is_not_a_regression(tmp_path: Path) -> None:
    base = factory.validate_report(bf16_tflops=700.0, speedup=1.5)
    cur = factory.validate_report(bf16_tflops=800.0)
    # Same eager time, faster graph replay: a higher speedup and a shorter graph median.
    cur.trials[2] = factory.cuda_graphs_trial(speedup=1.9, graph_s=0.0021 * 1.5 / 1.9)
    result = _run(tmp_path, base, cur)
    assert result.exit_code == ExitCode.OK, result.output


def test_slower_trial_seconds_regress(tmp_path: Path) -> None:
    # cuda-graphs: same speedup, but both variants 10% slower.
    base = factory.validate_report()
    cur = factory.validate_report()
    cur.trials[2] = factory.cuda_graphs_trial(speedup=1.8, graph_s=0.0021 * 1.1)
    comparison = compare_reports(base, cur, 5.0, min_effect_pct=50.0)
    regressed = {f.key for f in comparison.figures if f.regressed}
    assert regressed == {"trials.cuda-graphs.eager.median", "trials.cuda-graphs.graph.median"}


def test_confirmed_to_refuted_exits_1(tmp_path: Path) -> None:
    result = _run(tmp_path, factory.validate_report(graphs_status="confirmed"),
                  factory.validate_report(graphs_status="refuted"))
    assert result.exit_code == ExitCode.GATE_TRIPPED
    data = json.loads(result.stdout)
    assert any(v["id"] == "cuda-graphs" and v["regressed"] for v in data["verdicts"])


def test_refuted_to_confirmed_is_fine(tmp_path: Path) -> None:
    result = _run(tmp_path, factory.validate_report(graphs_status="refuted"),
                  factory.validate_report(graphs_status="confirmed"))
    assert result.exit_code == ExitCode.OK


def test_device_measured_figures_are_compared(tmp_path: Path) -> None:
    """probe --measure copies its trials' figures to device.measured: they gate on the trials'
    intervals; without the trials behind them they are single readings, shown, not gated."""
    base = factory.probe_report(measured_bw_gbps=4150.0, measured_tflops={"bf16": 760.0})
    cur = factory.probe_report(measured_bw_gbps=4150.0, measured_tflops={"bf16": 700.0})
    alone = json.loads(_run(tmp_path, base, cur, "--min-effect", "50").stdout)
    bf16 = next(f for f in alone["figures"] if f["key"].endswith("matmul_tflops.bf16"))
    assert not bf16["regressed"] and "single sample" in bf16["not_gated_why"]
    base.trials = [factory.matmul_trial(760.0)]
    cur.trials = [factory.matmul_trial(700.0)]
    result = _run(tmp_path, base, cur, "--min-effect", "50")
    assert result.exit_code == ExitCode.GATE_TRIPPED
    data = json.loads(result.stdout)
    assert "devices[0].measured.matmul_tflops.bf16" in [
        f["key"] for f in data["figures"] if f["regressed"]]


def test_different_devices_are_noted(tmp_path: Path) -> None:
    base = factory.validate_report()
    cur = factory.validate_report()
    cur.devices[0].name = "NVIDIA H100 80GB HBM3"
    assert any("devices differ" in n for n in compare_reports(base, cur).notes)


@pytest.mark.parametrize("name, words", [
    ("truncated.json", "truncated"), ("corrupted.json", "not valid JSON"),
    ("schema-2.0.json", "schema version 2.0"),
])
def test_unreadable_or_incompatible_exits_2(name: str, words: str) -> None:
    result = CliRunner().invoke(app, ["compare", str(FIXTURES / "h200-validate.json"),
                                      str(FIXTURES / name)])
    assert result.exit_code == ExitCode.USAGE
    assert words in result.output
    assert "Traceback" not in result.output
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit)


def test_newer_minor_is_compared_with_a_note() -> None:
    result = CliRunner().invoke(app, ["compare", str(FIXTURES / "h200-validate.json"),
                                      str(FIXTURES / "schema-1.99-newer-minor.json"), "--json"])
    assert result.exit_code == ExitCode.OK, result.output
    data = json.loads(result.stdout)
    assert any("energy_joules" in n for n in data["notes"])
    assert data["figures"]


def test_compare_markdown(tmp_path: Path) -> None:
    md = tmp_path / "compare.md"
    result = _run(tmp_path, factory.validate_report(copy_gbps=4150.0),
                  factory.validate_report(copy_gbps=3000.0), "--markdown", str(md),
                  "--min-effect", "20")
    assert result.exit_code == ExitCode.GATE_TRIPPED
    text = md.read_text()
    assert "## Regressions" in text and "copy_gbps" in text and "❌" in text


def test_missing_file_exits_2(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["compare", str(tmp_path / "a.json"),
                                      str(FIXTURES / "h200-validate.json")])
    assert result.exit_code == ExitCode.USAGE
