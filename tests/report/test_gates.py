"""CI gates: --fail-on verdicts and --min-bandwidth-fraction."""

from __future__ import annotations

import json

import pytest
import report_factory as factory
import typer
from typer.testing import CliRunner

# Module level: typer resolves these (string) annotations in this module's globals.
from hwadvisor.cli.console import JsonOpt, MarkdownOpt, OutputOpt, emit_report, exit_for_gates
from hwadvisor.cli.options import (
    FailOnOpt,
    MinBandwidthFractionOpt,
)
from hwadvisor.report.gates import FailOn, apply_gates


def test_no_gate_asked_trips_nothing() -> None:
    assert apply_gates(factory.validate_report()) == []


def test_fail_on_refuted_names_the_recommendation() -> None:
    tripped = apply_gates(factory.validate_report(), [FailOn.REFUTED])
    assert len(tripped) == 1 and "fp8-weights" in tripped[0]


def test_fail_on_error_reports_trials_no_recommendation_tripped_for() -> None:
    tripped = apply_gates(factory.validate_report(), ["error"])
    assert len(tripped) == 1 and "trial fp8-linear" in tripped[0]


def test_fail_on_unsupported_with_all_confirmed_passes() -> None:
    assert apply_gates(factory.validate_report(), [FailOn.UNSUPPORTED]) == []


def test_bandwidth_fraction_from_trial() -> None:
    report = factory.validate_report(copy_gbps=4150.0)  # 86.5% of 4800
    assert apply_gates(report, min_bw_fraction=0.85) == []
    tripped = apply_gates(report, min_bw_fraction=0.9)
    assert len(tripped) == 1 and "86.5%" in tripped[0] and "trial memory-bandwidth" in tripped[0]


def test_bandwidth_fraction_prefers_device_measured() -> None:
    report = factory.probe_report(measured_bw_gbps=3000.0)
    report.trials = [factory.bandwidth_trial(4500.0)]
    tripped = apply_gates(report, min_bw_fraction=0.85)
    assert len(tripped) == 1 and "device.measured" in tripped[0] and "62.5%" in tripped[0]


def test_bandwidth_gate_fails_closed_without_data() -> None:
    tripped = apply_gates(factory.probe_report(), min_bw_fraction=0.85)
    assert len(tripped) == 1 and "could not be checked" in tripped[0]


@pytest.mark.parametrize("fraction, count", [(0.5, 0), (0.99, 1)])
def test_gates_combine(fraction: float, count: int) -> None:
    report = factory.validate_report()
    assert len(apply_gates(report, ["refuted"], fraction)) == 1 + count


def _gated_app(report_builder):
    """A one-command app wired the way recommend/validate use the shared options."""
    app = typer.Typer()

    @app.command()
    def run(as_json: JsonOpt = False, output: OutputOpt = None, markdown: MarkdownOpt = None,
            fail_on: FailOnOpt = None, min_bw: MinBandwidthFractionOpt = None) -> None:
        report = report_builder()
        report.gates_tripped = apply_gates(report, fail_on, min_bw)
        emit_report(report, as_json, output, markdown)
        exit_for_gates(report)

    return app


def test_gate_options_exit_1_and_still_write_the_report(tmp_path) -> None:
    out, md = tmp_path / "v.json", tmp_path / "v.md"
    app = _gated_app(factory.validate_report)
    result = CliRunner().invoke(app, ["--fail-on", "refuted", "--fail-on", "error",
                                      "--min-bandwidth-fraction", "0.85", "--output", str(out),
                                      "--markdown", str(md)])
    assert result.exit_code == 1, result.output
    tripped = json.loads(out.read_text())["gates_tripped"]
    assert len(tripped) == 1 and "fp8-weights" in tripped[0]
    assert "fp8-weights" in md.read_text()


def test_gate_options_pass_and_refuse_bad_values() -> None:
    app = _gated_app(factory.validate_report)
    assert CliRunner().invoke(app, ["--fail-on", "unsupported"]).exit_code == 0
    assert CliRunner().invoke(app, ["--fail-on", "sometimes"]).exit_code == 2
    assert CliRunner().invoke(app, ["--min-bandwidth-fraction", "1.5"]).exit_code == 2
