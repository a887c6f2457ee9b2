"""The smaller defects of issue 43, one test each (all failed before)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from contextlib import redirect_stderr
from pathlib import Path

import pytest
import report_factory as factory
from test_fuzz import Cli

from hwadvisor import __version__
from hwadvisor.errors import UserError
from hwadvisor.models import TrialEnvironment
from hwadvisor.perfmodel.bottleneck import intensity_words
from hwadvisor.report.io import write_report
from hwadvisor.report.plain import bottom_line
from hwadvisor.validator.measure import saved_recommendations

REPO = Path(__file__).resolve().parents[2]


def test_hwadvisor_debug_0_prints_no_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    from hwadvisor.cli.app import internal_error

    for value, shown in (("0", False), ("false", False), ("", False), ("1", True)):
        monkeypatch.setenv("HWADVISOR_DEBUG", value)
        err = io.StringIO()
        with redirect_stderr(err):
            try:
                raise RuntimeError("boom")
            except RuntimeError as exc:
                internal_error(exc)
        assert ("Traceback" in err.getvalue()) is shown, (value, err.getvalue())


def test_quiet_verbose_and_version_also_after_the_command() -> None:
    cli = Cli()
    code, _out, err = cli.run(["profiles", "list", "-q"])
    assert code == 0 and "note:" not in err
    for argv in (["-V"], ["profiles", "list", "-V"]):
        code, out, _err = cli.run(argv)
        assert code == 0 and out.strip() == f"hwadvisor {__version__}"


def test_output_to_stdout_with_json_prints_the_report_once() -> None:
    done = subprocess.run([sys.executable, "-m", "hwadvisor", "probe", "--json", "-o",
                           "/dev/stdout"], cwd=REPO, capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count('"schema_version"') == 1
    json.loads(done.stdout)


def test_compare_leaves_no_output_file_when_a_later_write_fails(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from hwadvisor.cli.commands import reports

    base, cur, out = tmp_path / "b.json", tmp_path / "c.json", tmp_path / "cmp.json"
    write_report(base, factory.validate_report())
    write_report(cur, factory.validate_report())

    def full_disk(*_args: object, **_kwargs: object) -> None:
        raise UserError("cannot write summary.md: No space left on device", hint="free space")

    monkeypatch.setattr(reports, "write_markdown", full_disk)
    code, _out, err = Cli().run(["compare", str(base), str(cur), "-o", str(out),
                                 "--markdown", str(tmp_path / "summary.md")])
    assert code == 2 and "No space left" in err
    assert not out.exists()


def test_a_cpu_only_torch_run_says_the_trials_ran_on_the_cpu() -> None:
    report = factory.validate_report()
    for trial in report.trials:
        trial.environment = TrialEnvironment(device="cpu")
    line = bottom_line(report)
    assert "CPU" in line and "not NVIDIA H200" in line


def test_the_bottleneck_line_never_states_a_false_inequality() -> None:
    assert intensity_words(286, 295, ">").startswith("intensity 286 FLOP/B < ridge 295")
    assert "295.04 FLOP/B > ridge 295.01" in intensity_words(295.04, 295.01, ">")


def test_validate_report_does_not_replay_a_saved_interruption(tmp_path: Path) -> None:
    saved = factory.validate_report()
    saved.interrupted = True
    path = tmp_path / "r.json"
    write_report(path, saved)
    assert saved_recommendations(path).interrupted is False
    assert os.path.exists(path)


def test_a_signal_before_the_first_trial_still_writes_the_report(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C while validate probes, builds the workload or loads torch (before any trial)."""
    from hwadvisor import pipeline
    from hwadvisor.cli import signals

    def stopped(*_args: object, **_kwargs: object) -> None:
        signals._state.first = 2  # the handler recorded SIGINT, then raised
        raise signals.Interrupted(2)

    monkeypatch.setattr(pipeline, "validate_trials_report", stopped)
    out = tmp_path / "partial.json"
    code, _out, err = Cli().run(["validate", "--quick", "-o", str(out)])
    signals.reset()
    assert code == 130, err
    report = json.loads(out.read_text())
    assert report["interrupted"] is True and report["trials"] == []
    assert "before the first trial" in " ".join(report["notes"])
