"""Atomic writes, loads that fail cleanly, and reading other schema versions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import report_factory as factory
from typer.testing import CliRunner

from hwadvisor.cli.app import app
from hwadvisor.errors import ExitCode, UserError
from hwadvisor.report import compat as schema_compat
from hwadvisor.report.io import load_report, report_json, write_report

FIXTURES = Path(__file__).parent / "fixtures" / "reports"


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


def test_unparsable_schema_version_is_refused(tmp_path: Path) -> None:
    data = json.loads(report_json(factory.probe_report()))
    data["schema_version"] = "one"
    (tmp_path / "r.json").write_text(json.dumps(data))
    with pytest.raises(UserError, match="MAJOR.MINOR"):
        load_report(tmp_path / "r.json")


def test_newer_minor_drops_unknown_keys_with_a_note() -> None:
    report = load_report(FIXTURES / "schema-1.99-newer-minor.json")
    note = report.notes[-1]
    for key in ("energy_joules", "devices[0].hbm_stacks", "trials[0].measurements[0].clock_mhz"):
        assert key in note
    assert report.devices[0].name == "NVIDIA H200"


def test_same_minor_unknown_key_is_still_refused(tmp_path: Path) -> None:
    data = json.loads(report_json(factory.probe_report()))
    data["devices"][0]["typo_field"] = 1
    (tmp_path / "r.json").write_text(json.dumps(data))
    with pytest.raises(UserError, match="devices.0.typo_field"):
        load_report(tmp_path / "r.json")


def test_older_minor_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Pretend this reader is 1.5: a 1.0 report (an older minor) must load, unknown keys absent.
    monkeypatch.setattr(schema_compat, "SCHEMA_VERSION", "1.5")
    report = load_report(FIXTURES / "h200-validate.json")
    assert report.schema_version == "1.0"
    assert not any("does not know" in n for n in report.notes)


def test_older_major_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(schema_compat, "SCHEMA_VERSION", "2.0")
    with pytest.raises(UserError, match="older major"):
        load_report(FIXTURES / "h200-validate.json")


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


def test_a_1_0_report_effect_dict_reads_as_typed_effects() -> None:
    # Schema 1.0 kept trial effects as name -> value; 1.1 reads them with unit and direction.
    report = load_report(FIXTURES / "h200-validate.json")
    bandwidth = next(t for t in report.trials if t.id == "memory-bandwidth")
    copy = bandwidth.effect_of("copy_gbps")
    assert copy is not None and copy.unit == "GB/s" and copy.better == "higher"
    assert bandwidth.effect["copy_gbps"] == copy.value
