"""compare against each figure's own measured spread, not only a fixed percentage.

Before: two identical back-to-back CPU `validate` runs compared at the default 5% tripped
with "regressions" of 7-9%: the runs' own spread was larger than the threshold. Now a figure
regresses only when the change exceeds both --max-regression and the two runs' noise.
"""

from __future__ import annotations

import json
from pathlib import Path

import report_factory as factory
from typer.testing import CliRunner

from hwadvisor.cli.app import app
from hwadvisor.errors import ExitCode
from hwadvisor.models import Measured, Measurement, TrialEnvironment, TrialResult
from hwadvisor.report.compare import compare_reports, measured_figures
from hwadvisor.report.io import write_report

# Relative offsets of a noisy CPU run's samples: interquartile range ~10% of the median.
NOISY = (0.88, 0.94, 0.97, 1.0, 1.03, 1.06, 1.12)
QUIET = (0.998, 0.999, 1.0, 1.001, 1.002)


def _bandwidth(copy_gbps: float, spread: tuple[float, ...]) -> TrialResult:
    moved = 2 * 2**30
    t = moved / (copy_gbps * 1e9)
    return TrialResult(
        id="memory-bandwidth", status="ok",
        measurements=[Measurement(label="copy", samples=[t * f for f in spread],
                                  value=copy_gbps, value_unit="GB/s")],
        effect={"copy_gbps": copy_gbps}, environment=TrialEnvironment(device="cpu"))


def _speedup(speedup: float, spread: tuple[float, ...]) -> TrialResult:
    graph = 0.002
    return TrialResult(
        id="cuda-graphs", status="ok",
        measurements=[Measurement(label="eager", samples=[graph * speedup * f for f in spread]),
                      Measurement(label="graph", samples=[graph * f for f in spread])],
        effect={"speedup": speedup})


def _report(*trials: TrialResult):
    report = factory.validate_report()
    report.trials = list(trials)
    return report


def _by_key(comparison):
    return {f.key: f for f in comparison.figures}


def test_identical_noisy_runs_do_not_regress() -> None:
    """8% apart, each run spread ~10%: noise, not a regression (it was 'REGRESSED' before)."""
    base = _report(_bandwidth(40.0, NOISY))
    cur = _report(_bandwidth(40.0 / 1.08, NOISY))
    comparison = compare_reports(base, cur, 5.0)
    figures = _by_key(comparison)
    copy = figures["trials.memory-bandwidth.effect.copy_gbps"]
    assert copy.worse_pct is not None and 5 < copy.worse_pct < 10
    assert copy.noise_pct > copy.worse_pct
    assert not copy.regressed and comparison.regressions == []
    assert not figures["trials.memory-bandwidth.copy.median"].regressed


def test_a_change_past_the_noise_still_regresses() -> None:
    base = _report(_bandwidth(40.0, NOISY))
    cur = _report(_bandwidth(40.0 / 1.6, NOISY))  # 37.5% worse, noise ~20%
    copy = _by_key(compare_reports(base, cur, 5.0))["trials.memory-bandwidth.effect.copy_gbps"]
    assert copy.regressed and copy.worse_pct > copy.noise_pct


def test_quiet_runs_gate_at_the_threshold() -> None:
    base = _report(_bandwidth(4150.0, QUIET))
    cur = _report(_bandwidth(4150.0 / 1.08, QUIET))
    comparison = compare_reports(base, cur, 5.0)
    copy = _by_key(comparison)["trials.memory-bandwidth.effect.copy_gbps"]
    assert copy.noise_pct < 1 and copy.regressed
    assert "noise ±" in comparison.regressions[0]


def test_an_effect_of_two_timings_adds_their_spreads() -> None:
    noisy = _by_key(compare_reports(_report(_speedup(1.8, NOISY)),
                                    _report(_speedup(1.6, NOISY)), 5.0))
    quiet = _by_key(compare_reports(_report(_speedup(1.8, QUIET)),
                                    _report(_speedup(1.6, QUIET)), 5.0))
    key = "trials.cuda-graphs.effect.speedup"
    assert not noisy[key].regressed and quiet[key].regressed
    # a ratio of two measurements: both runs' two spreads added
    assert noisy[key].noise_pct > 2 * noisy["trials.cuda-graphs.graph.median"].noise_pct * 0.99


def test_device_measured_figures_take_their_trials_noise() -> None:
    base = _report(_bandwidth(40.0, NOISY))
    cur = _report(_bandwidth(40.0 / 1.08, NOISY))
    for report, value in ((base, 40.0), (cur, 40.0 / 1.08)):
        report.devices[0].measured = Measured(memory_bandwidth_gbps=value,
                                              trial_ids=["memory-bandwidth"])
    figures = measured_figures(base)
    assert figures["devices[0].measured.memory_bandwidth_gbps"].spread > 0.05
    delta = _by_key(compare_reports(base, cur))["devices[0].measured.memory_bandwidth_gbps"]
    assert not delta.regressed


def test_cli_reports_the_noise(tmp_path: Path) -> None:
    b, c = tmp_path / "b.json", tmp_path / "c.json"
    write_report(b, _report(_bandwidth(40.0, NOISY)))
    write_report(c, _report(_bandwidth(40.0 / 1.08, NOISY)))
    result = CliRunner().invoke(app, ["compare", str(b), str(c), "--json"])
    assert result.exit_code == ExitCode.OK, result.output
    figure = next(f for f in json.loads(result.stdout)["figures"]
                  if f["key"].endswith("copy_gbps"))
    assert figure["noise_pct"] > 8 and figure["regressed"] is False
    table = CliRunner().invoke(app, ["compare", str(b), str(c)], env={"COLUMNS": "200"})
    assert "noise" in table.stdout and "±" in table.stdout
