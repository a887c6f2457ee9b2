"""The report files: atomic writes, loads that fail cleanly, the CLI's output files."""

from __future__ import annotations

from pathlib import Path

import pytest
import report_factory as factory
from typer.testing import CliRunner

from hwadvisor.cli.app import app
from hwadvisor.errors import ExitCode, UserError
from hwadvisor.report.io import load_report, write_report

FIXTURES = Path(__file__).parents[1] / "fixtures" / "reports"


def test_round_trip_keeps_the_report(tmp_path: Path) -> None:
    report = factory.validate_report()
    path = tmp_path / "r.json"
    write_report(path, report)
    loaded = load_report(path)
    # Computed fields (median, spread, noisy) are written but recomputed on load.
    assert loaded == report
    assert loaded.trials[0].measurements[0].median == report.trials[0].measurements[0].median
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]  # no temp file left behind


def test_committed_fixtures_load() -> None:
    report = load_report(FIXTURES / "h200-validate.json")
    assert report.kind == "validate" and report.recommendations[0].validation.status == "confirmed"


@pytest.mark.parametrize("name, words", [
    ("truncated.json", "truncated or corrupted"),
    ("corrupted.json", "not valid JSON"),
    ("schema-2.0.json", "schema version 2.0"),
])
def test_bad_reports_raise_user_errors(name: str, words: str) -> None:
    with pytest.raises(UserError) as info:
        load_report(FIXTURES / name)
    assert words in info.value.message
    assert info.value.hint
    assert info.value.code == ExitCode.USAGE


def test_binary_and_missing_files_raise_user_errors(tmp_path: Path) -> None:
    binary = tmp_path / "r.json"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe")
    with pytest.raises(UserError, match="not a text file"):
        load_report(binary)
    with pytest.raises(UserError, match="cannot read"):
        load_report(tmp_path / "missing.json")
    (tmp_path / "list.json").write_text("[1, 2]")
    with pytest.raises(UserError, match="no schema_version"):
        load_report(tmp_path / "list.json")


def test_probe_output_and_markdown_files(tmp_path: Path) -> None:
    out, md = tmp_path / "probe.json", tmp_path / "probe.md"
    result = CliRunner().invoke(app, ["probe", "--output", str(out), "--markdown", str(md)])
    assert result.exit_code == 0, result.output
    assert load_report(out).kind == "probe"
    assert md.read_text().startswith("# hwadvisor probe report")


def test_failed_run_writes_no_output(tmp_path: Path) -> None:
    # compare fails on an unreadable input: its --markdown file must not appear.
    md = tmp_path / "summary.md"
    result = CliRunner().invoke(app, ["compare", str(FIXTURES / "truncated.json"),
                                      str(FIXTURES / "h200-validate.json"), "--markdown", str(md)])
    assert result.exit_code == ExitCode.USAGE
    assert not md.exists()
    # probe into a missing folder: exit 2, nothing written anywhere.
    target = tmp_path / "nope" / "probe.json"
    result = CliRunner().invoke(app, ["probe", "--output", str(target)])
    assert result.exit_code == ExitCode.USAGE
    assert not target.exists() and not target.parent.exists()


def test_step_summary_is_appended(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    summary = tmp_path / "step_summary.md"
    summary.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    result = CliRunner().invoke(app, ["probe", "--markdown", str(summary)])
    assert result.exit_code == 0, result.output
    text = summary.read_text()
    assert text.startswith("earlier step\n") and "# hwadvisor probe report" in text
