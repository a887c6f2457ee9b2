"""compare gates on evidence: intervals of repeated samples, lost figures, never on one reading.

Before (issue 30): eight same-code pairs of `validate` on an idle 2-core box exited 1 (1-29
"regressions" each), single-sample figures gated with "noise ±0.0%" (a compile time of 1.035 s
against 1.107 s), and a trial that turned unsupported or vanished passed with exit 0.
"""

from __future__ import annotations

import gzip
import json
import math
import random
from pathlib import Path

import pytest
import report_factory as factory
from typer.testing import CliRunner

from hwadvisor.cli.app import app
from hwadvisor.errors import ExitCode
from hwadvisor.models import Measured, Measurement, Report, TrialEnvironment, TrialResult
from hwadvisor.report.compare import compare_reports, measured_figures
from hwadvisor.report.io import write_report

# Relative offsets of a noisy CPU run's samples: interquartile range ~10% of the median.
NOISY = (0.88, 0.92, 0.94, 0.97, 1.0, 1.03, 1.06, 1.08, 1.12)
QUIET = (0.997, 0.998, 0.999, 1.0, 1.0, 1.001, 1.002, 1.003)
# One run a side gates a timing only when the user declares the drift between runs
# (--min-effect): these tests hold the one-run evidence (intervals apart) under a drift of 50%.
ONE_RUN = 50.0
# A real `hwadvisor validate --quick` report of this code on a 2-core x86 VM without a GPU
# (gzip'ed). Same-code pairs are drawn from it by scattering each measurement's raw samples by
# that measurement's own spread (see _rerun). Real back-to-back runs on that VM differed far
# more: 28 of 28 pairs of 8 runs tripped, copy bandwidth moving -83% to +365% between runs (CPU
# taken by the host), which no statistic of one run per side can tell from a regression; the
# gate is for a dedicated runner (docs/ci-github-actions.md).
RECORDED = (Path(__file__).parents[1] / "fixtures" / "reports" / "cpu-validate-quick"
            / "run-4.json.gz")


def _bandwidth(copy_gbps: float, spread: tuple[float, ...],
               device: str = "NVIDIA H200") -> TrialResult:
    moved = 2 * 2**30
    t = moved / (copy_gbps * 1e9)
    return TrialResult(
        id="memory-bandwidth", status="ok",
        measurements=[Measurement(label="copy", samples=[t * f for f in spread],
                                  value=copy_gbps, value_unit="GB/s")],
        effect={"copy_gbps": copy_gbps}, environment=TrialEnvironment(device=device))


def _compile(compile_s: float, samples: int = 1) -> TrialResult:
    return TrialResult(
        id="torch-compile", status="ok",
        measurements=[Measurement(label="first compiled call (compilation)",
                                  samples=[compile_s] * samples)],
        effect={"compile_s": compile_s})


def _report(*trials: TrialResult) -> Report:
    report = factory.validate_report()
    report.trials = list(trials)
    return report


def _by_key(comparison):
    return {f.key: f for f in comparison.figures}


def _cli(tmp_path: Path, base: Report, cur: Report, *args: str):
    b, c = tmp_path / "b.json", tmp_path / "c.json"
    write_report(b, base)
    write_report(c, cur)
    return CliRunner().invoke(app, ["compare", str(b), str(c), *args],
                              env={"COLUMNS": "200"})


def test_overlapping_intervals_do_not_regress() -> None:
    """8% apart, each run spread ~10%: the intervals overlap, so it is noise."""
    comparison = compare_reports(_report(_bandwidth(40.0, NOISY)),
                                 _report(_bandwidth(40.0 / 1.08, NOISY)), 5.0, ONE_RUN)
    copy = _by_key(comparison)["trials.memory-bandwidth.effect.copy_gbps"]
    assert copy.gated and 5 < copy.worse_pct < 10
    assert not copy.regressed and comparison.regressions == []


def test_intervals_apart_past_the_threshold_regress() -> None:
    comparison = compare_reports(_report(_bandwidth(4150.0, QUIET)),
                                 _report(_bandwidth(4150.0 * 0.9, QUIET)), 5.0, ONE_RUN)
    copy = _by_key(comparison)["trials.memory-bandwidth.effect.copy_gbps"]
    assert copy.regressed and copy.baseline_ci and copy.current_ci
    assert any("copy_gbps" in line for line in comparison.regressions)


def test_min_effect_gates_a_large_change_inside_overlapping_intervals() -> None:
    base, cur = _report(_bandwidth(40.0, NOISY)), _report(_bandwidth(40.0 / 1.15, NOISY))
    assert not _by_key(compare_reports(base, cur))[
        "trials.memory-bandwidth.effect.copy_gbps"].regressed
    assert _by_key(compare_reports(base, cur, min_effect_pct=10))[
        "trials.memory-bandwidth.effect.copy_gbps"].regressed


def test_a_single_sample_is_reported_not_gated() -> None:
    """Too few readings for an interval (here 3): shown with its change, never a regression."""
    few = (0.999, 1.0, 1.001)
    comparison = compare_reports(_report(_bandwidth(4150.0, few)),
                                 _report(_bandwidth(3000.0, few)), min_effect_pct=ONE_RUN)
    copy = _by_key(comparison)["trials.memory-bandwidth.effect.copy_gbps"]
    assert copy.change_pct == pytest.approx((3000 - 4150) / 4150 * 100)
    assert not copy.gated and not copy.regressed and "single sample" in copy.not_gated_why


def test_compile_times_never_gate_by_default() -> None:
    single = compare_reports(_report(_compile(1.035)), _report(_compile(1.107)))
    assert single.regressions == []
    repeated = (_report(_compile(1.0, 8)), _report(_compile(2.0, 8)))
    by_default = _by_key(compare_reports(*repeated))
    assert all(not f.regressed and "compile" in (f.not_gated_why or "")
               for f in by_default.values())
    asked = compare_reports(*repeated, gate_compile=True, min_effect_pct=ONE_RUN)
    assert asked.regressions  # --gate-compile: identical samples are an interval of one point


def test_a_lost_trial_is_a_regression_named_in_the_text(tmp_path: Path) -> None:
    base = factory.validate_report()
    cur = factory.validate_report()
    cur.trials[0] = TrialResult(id="matmul-peak", status="unsupported",
                                reason="torch has no FP8 kernel")
    result = _cli(tmp_path, base, cur)
    assert result.exit_code == ExitCode.GATE_TRIPPED, result.output
    assert "matmul-peak: ok → unsupported" in result.output
    allowed = _cli(tmp_path, base, cur, "--allow-missing")
    assert allowed.exit_code == ExitCode.OK, allowed.output
    assert "lost (allowed by --allow-missing)" in allowed.output


@pytest.mark.parametrize("lose", ["gone", "no-trials", "one-figure", "verdict"])
def test_every_kind_of_loss_exits_1(tmp_path: Path, lose: str) -> None:
    base, cur = factory.validate_report(), factory.validate_report()
    if lose == "gone":
        cur.trials = cur.trials[1:]
    elif lose == "no-trials":
        cur.trials = []
    elif lose == "one-figure":  # the FP8 kernel went away; bf16 still measured
        matmul = cur.trials[0]
        matmul.measurements = matmul.measurements[:1]
        matmul.effects = [e for e in matmul.effects if not e.name.startswith("fp8")]
    else:
        cur.recommendations[0].validation.status = "unsupported"
    result = _cli(tmp_path, base, cur)
    assert result.exit_code == ExitCode.GATE_TRIPPED, result.output
    assert "lost:" in result.output


def test_device_measured_figures_take_their_trials_interval() -> None:
    base = _report(_bandwidth(40.0, NOISY))
    cur = _report(_bandwidth(40.0 / 1.08, NOISY))
    for report, value in ((base, 40.0), (cur, 40.0 / 1.08)):
        report.devices[0].measured = Measured(memory_bandwidth_gbps=value,
                                              trial_ids=["memory-bandwidth"])
    assert measured_figures(base)["devices[0].measured.memory_bandwidth_gbps"].interval
    delta = _by_key(compare_reports(base, cur, min_effect_pct=ONE_RUN))[
        "devices[0].measured.memory_bandwidth_gbps"]
    assert delta.gated and not delta.regressed


def _recorded() -> Report:
    return Report.model_validate_json(gzip.decompress(RECORDED.read_bytes()))


def _rerun(report: Report, seed: int) -> Report:
    """The same run again with its own noise: each sample scattered by the run's spread.

    Every measurement's samples are multiplied by a log-normal factor whose sigma is that
    measurement's IQR / median / 1.35 (the IQR of a normal is 1.35 sigma): a re-run drawn from
    the same distribution, no quieter than the recorded one.
    """
    rng = random.Random(seed)
    copy = report.model_copy(deep=True)
    for trial in copy.trials:
        for m in trial.measurements:
            if len(m.samples) > 1 and m.median and m.spread is not None:
                sigma = m.spread / m.median / 1.35
                m.samples = [x * math.exp(rng.gauss(0.0, sigma)) for x in m.samples]
    return copy


def _slower(report: Report, trial_id: str, factor: float) -> Report:
    """The same report with one trial's timings `factor` x longer (its rates / factor)."""
    copy = report.model_copy(deep=True)
    trial = next(t for t in copy.trials if t.id == trial_id)
    for m in trial.measurements:
        m.samples = [s * factor for s in m.samples]
        if m.value is not None:
            m.value = m.value / factor
    for e in trial.effects:
        if e.unit == "GB/s":
            e.value = e.value / factor
    return copy


def test_recorded_same_code_pairs_pass_and_a_lost_trial_trips(tmp_path: Path) -> None:
    """20 resampled same-code pairs exit 0; one CPU run's 10% bandwidth drop is shown, not
    gated (CPU timings move between runs far beyond one run's noise); a lost trial exits 1.
    docs/benchmarks.md has the real pairs (benchmarks/gate_pairs.py)."""
    base = _recorded()
    for seed in range(20):
        comparison = compare_reports(_rerun(base, 2 * seed), _rerun(base, 2 * seed + 1))
        assert comparison.regressions == [], (seed, comparison.regressions)
    dropped = _slower(base, "memory-bandwidth", 1 / 0.9)
    result = _cli(tmp_path, base, dropped, "--json")
    assert result.exit_code == ExitCode.OK
    triad = next(f for f in json.loads(result.stdout)["figures"]
                 if f["key"] == "trials.memory-bandwidth.effect.triad_gbps")
    assert triad["worse_pct"] > 9 and "CPU timing" in triad["not_gated_why"]
    lost = base.model_copy(deep=True)
    lost.trials = [t for t in lost.trials if t.id != "int4-weight-only"]
    result = _cli(tmp_path, base, lost)
    assert result.exit_code == ExitCode.GATE_TRIPPED
    assert "int4-weight-only" in result.output


def test_cli_shows_the_noise_and_why_not_gated(tmp_path: Path) -> None:
    result = _cli(tmp_path, _report(_bandwidth(40.0, NOISY)),
                  _report(_bandwidth(40.0 / 1.08, NOISY)), "--json")
    assert result.exit_code == ExitCode.OK, result.output
    figure = next(f for f in json.loads(result.stdout)["figures"]
                  if f["key"].endswith("copy_gbps"))
    assert figure["noise_pct"] > 8 and figure["regressed"] is False
    table = _cli(tmp_path, _report(_compile(1.0)), _report(_compile(1.2)))
    assert "not gated" in table.stdout
