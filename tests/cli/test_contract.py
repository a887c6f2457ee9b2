"""The CLI's contract: data printed as is, exit codes, --help, limits, validate without trials.

Before: a model path or GPU name with `[/]` crashed the human output (MarkupError) and
`[wip]` vanished; any unexpected exception exited 1 (the CI-gate code) with a traceback, and
`| head` exited 1; --help dropped `[default: 1]`, showed `<bool>` after flags and
`{baseline} {current}`; `-h` was refused; notes were prefixed in some commands only;
`recommend --gpus 2048` was refused with a hint naming a missing --device-count option;
`validate` without torch exited 0 with every trial unsupported.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import report_factory as factory
from typer.testing import CliRunner

from hwadvisor import pipeline
from hwadvisor.cli.app import app
from hwadvisor.errors import ExitCode
from hwadvisor.models import Rejected, TrialResult
from hwadvisor.report.io import write_report

REPO = Path(__file__).resolve().parents[2]
PRESET = REPO / "hwadvisor" / "workload" / "presets" / "llama-3.2-1b.json"
runner = CliRunner()
MARKUP = "[/] [wip] [bold]x[/bold] \\"


def _clean(result, code: int = 0) -> None:
    assert result.exit_code == code, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(
        result.exception)


# --------------------------------------------------------------------------- 4: markup


def test_model_path_with_markup_prints_as_is(tmp_path: Path) -> None:
    folder = tmp_path / "[wip] llama [" / "] x"  # the path holds '[/]'
    folder.mkdir(parents=True)
    shutil.copy(PRESET, folder / "config.json")
    for command in ("estimate", "recommend"):
        result = runner.invoke(app, [command, "--device", "h200-sxm", "--model", str(folder)],
                               env={"COLUMNS": "400"})
        _clean(result)
        assert "[wip] llama [/] x" in result.stdout


def _marked_report():
    report = factory.validate_report()
    report.devices[0].name = f"GPU {MARKUP}"
    report.host.cpu_model = f"CPU {MARKUP}"
    report.workload.model = f"model {MARKUP}"  # type: ignore[union-attr]
    report.estimate.bottleneck_why = f"why {MARKUP}"  # type: ignore[union-attr]
    report.estimate.assumptions = [f"assume {MARKUP}"]  # type: ignore[union-attr]
    report.recommendations[0].id = f"rec {MARKUP}"
    report.recommendations[0].validation.status = "confirmed"
    report.rejected = [Rejected(id=f"rej {MARKUP}", why_not=f"because {MARKUP}")]
    report.trials.append(TrialResult(id=f"trial {MARKUP}", status="unsupported",
                                     reason=f"reason {MARKUP}"))
    report.notes = [f"note {MARKUP}"]
    return report


@pytest.mark.parametrize("command", ["probe", "estimate", "recommend", "validate"])
def test_renderers_print_data_as_is(command: str, monkeypatch: pytest.MonkeyPatch) -> None:
    report = _marked_report()
    report.kind = command if command != "probe" else "probe"
    monkeypatch.setattr(pipeline, "probe_report", lambda *a, **k: report)
    monkeypatch.setattr(pipeline, "estimate_report", lambda *a, **k: report)
    monkeypatch.setattr(pipeline, "recommend_report", lambda *a, **k: report)
    monkeypatch.setattr(pipeline, "validate_trials_report", lambda *a, **k: report)
    argv = [command] + (["--allow-unsupported"] if command == "validate" else [])
    result = runner.invoke(app, argv, env={"COLUMNS": "400"})
    assert result.exit_code in (0, ExitCode.TRIALS_FAILED), result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(
        result.exception)
    out = result.stdout
    assert "[/]" in out and "[wip]" in out, out
    assert f"note: note {MARKUP}" in result.stderr


def test_compare_and_profiles_print_data_as_is(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    base, cur = factory.validate_report(), factory.validate_report(copy_gbps=3000.0)
    for report in (base, cur):
        report.trials[1].measurements[0].label = f"copy {MARKUP}"
    b, c = tmp_path / "b.json", tmp_path / "c.json"
    write_report(b, base)
    write_report(c, cur)
    result = runner.invoke(app, ["compare", str(b), str(c), "--min-effect", "20"],
                           env={"COLUMNS": "300"})
    assert result.exit_code == ExitCode.GATE_TRIPPED, result.output
    # the table shows the key shortened under its trial (trials.ID.LABEL.median -> LABEL median)
    assert f"copy {MARKUP} median" in result.stdout
    assert "[wip]" in result.stderr  # the regression line

    from hwadvisor import profiles

    real = profiles.get("h200-sxm")
    marked = real.model_copy(update={"name": f"H200 {MARKUP}", "notes": [f"n {MARKUP}"]})
    monkeypatch.setattr(profiles, "get", lambda profile_id: marked)
    monkeypatch.setattr(profiles, "by_class", lambda klass: [marked])
    for argv in (["profiles", "show", "h200-sxm"], ["profiles", "list"]):
        result = runner.invoke(app, argv, env={"COLUMNS": "300"})
        _clean(result)
        assert "[wip]" in result.stdout


def test_progress_and_gate_lines_escape(monkeypatch: pytest.MonkeyPatch) -> None:
    from hwadvisor.cli import console

    report = factory.validate_report()
    report.gates_tripped = [f"gate {MARKUP}"]
    result = runner.invoke(app, ["schema"])  # a console in CliRunner's streams
    assert result.exit_code == 0
    with pytest.raises(Exception) as caught:
        console.exit_for_gates(report)
    assert "Exit" in type(caught.value).__name__


# --------------------------------------------------------------------------- 9: exit codes


def test_internal_error_exits_70_with_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: object, **kwargs: object) -> object:
        raise ZeroDivisionError("float division by zero")

    monkeypatch.setattr(pipeline, "estimate_report", broken)
    monkeypatch.delenv("HWADVISOR_DEBUG", raising=False)
    result = runner.invoke(app, ["estimate", "--device", "h200-sxm"])
    assert result.exit_code == ExitCode.INTERNAL == 70
    assert "error: internal error: ZeroDivisionError: float division by zero" in result.stderr
    assert "bug" in result.stderr and "HWADVISOR_DEBUG=1" in result.stderr
    assert "Traceback" not in result.output
    monkeypatch.setenv("HWADVISOR_DEBUG", "1")
    result = runner.invoke(app, ["estimate", "--device", "h200-sxm"])
    assert result.exit_code == 70 and "Traceback" in result.stderr


def test_gate_code_stays_1() -> None:
    assert ExitCode.GATE_TRIPPED == 1 and ExitCode.INTERNAL != 1


def test_broken_pipe_in_process(monkeypatch: pytest.MonkeyPatch) -> None:
    def closed(*args: object, **kwargs: object) -> object:
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(sys.stdout, "write", closed, raising=False)
    from hwadvisor.cli.commands import reports

    monkeypatch.setattr(reports.sys.stdout, "write", closed, raising=False)
    result = runner.invoke(app, ["schema"])
    assert result.exit_code in (0, ExitCode.BROKEN_PIPE), result.output


@pytest.mark.parametrize("argv", [["schema"], ["profiles", "list", "--json"], ["--help"],
                                  ["estimate", "--help"]])
def test_broken_pipe_into_head(argv: list[str]) -> None:
    """`hwadvisor ... | head -c 1`: exit 141 quietly (or 0 when the output fit the pipe)."""
    proc = subprocess.Popen([sys.executable, "-m", "hwadvisor", *argv], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "COLUMNS": "80"})
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.read(1)
    proc.stdout.close()
    stderr = proc.stderr.read().decode()
    rc = proc.wait(60)
    assert rc in (0, ExitCode.BROKEN_PIPE), (rc, stderr)
    assert stderr == "", stderr


# --------------------------------------------------------------------------- 11: --help


def test_help_shows_defaults_and_no_bool() -> None:
    result = runner.invoke(app, ["estimate", "--help"], env={"COLUMNS": "200"})
    _clean(result)
    text = result.stdout
    for default in ("[default: 1]", "[default: 2048]", "[default: inference]",
                    "[default: bf16]", "[default: adamw]"):
        assert default in text, default
    assert "<bool>" not in text
    assert "(1-65,536)" in text and "(1-64)" in text  # the ranges of workload/limits.py


def test_arguments_read_as_names() -> None:
    result = runner.invoke(app, ["compare", "--help"], env={"COLUMNS": "200"})
    _clean(result)
    assert "compare [OPTIONS] BASELINE CURRENT" in result.stdout
    assert "{" not in result.stdout and "<bool>" not in result.stdout


@pytest.mark.parametrize("argv", [["-h"], ["probe", "-h"], ["profiles", "-h"],
                                  ["profiles", "list", "-h"], ["validate", "-h"]])
def test_dash_h_is_help(argv: list[str]) -> None:
    result = runner.invoke(app, argv)
    _clean(result)
    assert "Usage" in result.stdout


def test_completion_is_offered() -> None:
    result = runner.invoke(app, ["--help"], env={"COLUMNS": "200"})
    assert "--install-completion" in result.stdout and "--show-completion" in result.stdout


def test_plot_device_index_and_the_old_spelling(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    report = tmp_path / "r.json"
    write_report(report, factory.validate_report())
    result = runner.invoke(app, ["plot", str(report), "--device-index", "0", "-o",
                                 str(tmp_path / "a.png")])
    _clean(result)
    result = runner.invoke(app, ["plot", str(report), "--device", "0", "-o",
                                 str(tmp_path / "b.png")])
    _clean(result)
    assert "note: plot --device is deprecated" in result.stderr
    result = runner.invoke(app, ["plot", str(report), "--device", "h200-sxm"])
    _clean(result, ExitCode.USAGE)
    assert "--device-index" in result.stderr


@pytest.mark.parametrize("argv", [
    ["estimate", "--device", "h200-sxm"],
    ["recommend", "--device", "h200-sxm"],
    ["probe"],
])
def test_every_note_is_prefixed(argv: list[str]) -> None:
    result = runner.invoke(app, argv)
    _clean(result)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines and all(line.startswith("note: ") for line in lines), lines


def test_compare_has_output(tmp_path: Path) -> None:
    b = tmp_path / "b.json"
    write_report(b, factory.validate_report())
    out = tmp_path / "comparison.json"
    _clean(runner.invoke(app, ["compare", str(b), str(b), "-o", str(out)]))
    assert json.loads(out.read_text())["figures"]


# --------------------------------------------------------------------------- 12: limits


@pytest.mark.parametrize("command", ["estimate", "recommend"])
def test_many_gpus_are_planned_alike(command: str) -> None:
    result = runner.invoke(app, [command, "--device", "h100-sxm", "--gpus", "2048", "--json"])
    _clean(result)
    assert json.loads(result.stdout)["workload"]["gpus"] == 2048


@pytest.mark.parametrize("command", ["estimate", "recommend", "validate"])
@pytest.mark.parametrize("option, value", [
    ("--gpus", "2000000"), ("--batch", "70000"), ("--prompt-len", "0"),
    ("--inter-node-gbps", "1e-300"), ("--nodes", "100000"), ("--gpus-per-node", "2048"),
])
def test_same_limits_on_every_command(command: str, option: str, value: str) -> None:
    argv = [command, option, value] + (["--device", "h100-sxm"] if command != "validate"
                                       else ["--trial", "memory-bandwidth", "--quick"])
    result = runner.invoke(app, argv)
    _clean(result, ExitCode.USAGE)
    assert f"{option} must be" in result.stderr
    assert "--device-count" not in result.output


@pytest.mark.parametrize("value", ["1e308", "inf", "nan", "0.5", "65"])
def test_speculative_tokens_bounded_end_to_end(value: str) -> None:
    result = runner.invoke(app, ["estimate", "--device", "h100-sxm", "--speculative-tokens",
                                 value, "--json"])
    _clean(result, ExitCode.USAGE)
    assert "--speculative-tokens must be a number in 1-64" in result.stderr


def test_speculative_tokens_at_the_bound_gives_figures() -> None:
    result = runner.invoke(app, ["estimate", "--device", "h100-sxm", "--speculative-tokens",
                                 "64", "--json"])
    _clean(result)
    estimate = json.loads(result.stdout)["estimate"]
    assert estimate["tokens_per_s"] and estimate["tokens_per_s"] > 1
    assert all(v is None or v < 1e6 for v in estimate["times"].values())


def test_device_count_hint_names_a_real_option() -> None:
    from hwadvisor.errors import UserError
    from hwadvisor.probe.target import resolve_target

    with pytest.raises(UserError) as caught:
        resolve_target("h100-sxm", 5000)
    assert "--device-count" not in (caught.value.hint or "")
    assert "--gpus" in (caught.value.hint or "")


# --------------------------------------------------------------------------- 15: no trial ran


def test_validate_without_torch_exits_4(monkeypatch: pytest.MonkeyPatch,
                                        tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # find_spec('torch') is None: not installed
    out = tmp_path / "r.json"
    result = runner.invoke(app, ["validate", "--quick", "-o", str(out)])
    assert result.exit_code == ExitCode.TRIALS_FAILED, result.output
    assert "no trial could run here" in result.stderr
    assert "hwadvisor[validate]" in result.stderr and "--allow-unsupported" in result.stderr
    assert {t["status"] for t in json.loads(out.read_text())["trials"]} == {"unsupported"}
    result = runner.invoke(app, ["validate", "--quick", "--allow-unsupported"])
    assert result.exit_code == 0, result.output


def test_validate_that_ran_a_trial_exits_0() -> None:
    pytest.importorskip("torch")
    result = runner.invoke(app, ["validate", "--trial", "memory-bandwidth", "--quick"])
    assert result.exit_code == 0, result.output


def test_every_exit_code_is_documented() -> None:
    from hwadvisor.errors import EXIT_CODES_HELP

    table = (REPO / "docs" / "exit-codes.md").read_text()
    readme = (REPO / "README.md").read_text()
    for code in ExitCode:
        assert f"| {int(code)} " in table and f"`{code.name}`" in table, code
        assert str(int(code)) in EXIT_CODES_HELP and str(int(code)) in readme, code


@pytest.mark.parametrize("argv", [
    ["compare", "@R", "@R", "--max-regression", "nan"],
    ["compare", "@R", "@R", "--max-regression", "inf"],
    ["compare", "@R", "@R", "--max-regression", "-1"],
    ["recommend", "--device", "h200-sxm", "--min-bandwidth-fraction", "nan"],
    ["validate", "--quick", "--min-bandwidth-fraction", "1.5"],
])
def test_gate_values_are_bounded(argv: list[str]) -> None:
    """NaN passed typer's min=/max= checks and turned a gate off; the limits table refuses it."""
    report = str(REPO / "tests" / "fixtures" / "reports" / "h200-validate.json")
    result = runner.invoke(app, [report if a == "@R" else a for a in argv])
    _clean(result, ExitCode.USAGE)
    assert "must be a number in" in result.stderr and "hint:" in result.stderr


def test_profiles_show_lists_the_on_device_rates_and_their_sources() -> None:
    # a phone has no datasheet peak: the plan runs on the [[compute]] rates, which the user
    # should see with where each came from
    result = runner.invoke(app, ["profiles", "show", "snapdragon-8-gen-2"],
                           env={"COLUMNS": "300"})
    assert result.exit_code == 0, result.output
    assert "gpu compute (effective)" in result.stdout
    assert "0.87 TFLOP/s fp16" in result.stdout
    assert "gpu compute: https://github.com/a-ghorbani/pocketpal-ai" in result.stdout
