"""Bad input leaves no file behind, and names in reports are text (issue 30, item 10).

Before: `recommend --emit` and `--markdown` were written before a bad `-o` failed (exit 2 with
files left); a full disk left half a summary appended to $GITHUB_STEP_SUMMARY; `plot` drew
`$...$` in a name as mathtext (a malformed one exited 70); a 251-character profile id exited 70.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
import report_factory as factory
from typer.testing import CliRunner

from hwadvisor.cli.app import app
from hwadvisor.errors import ExitCode, UserError
from hwadvisor.report import io as report_io
from hwadvisor.report.io import append_text, write_report

runner = CliRunner()


@pytest.mark.parametrize("bad", ["folder", "device"])
def test_recommend_writes_nothing_when_an_output_is_refused(tmp_path: Path, bad: str) -> None:
    emit, md = tmp_path / "serve.sh", tmp_path / "summary.md"
    target = tmp_path if bad == "folder" else Path("/dev/null/x")
    result = runner.invoke(app, ["recommend", "--device", "h200-sxm", "--model", "llama-3-8b",
                                 "--emit", str(emit), "--markdown", str(md), "-o", str(target)])
    assert result.exit_code == ExitCode.USAGE, result.output
    assert not emit.exists() and not md.exists()


def test_recommend_writes_nothing_when_emit_is_refused(tmp_path: Path) -> None:
    out, md = tmp_path / "r.json", tmp_path / "summary.md"
    result = runner.invoke(app, ["recommend", "--device", "h200-sxm", "--model", "llama-3-8b",
                                 "--emit", str(tmp_path), "--markdown", str(md), "-o", str(out)])
    assert result.exit_code == ExitCode.USAGE, result.output
    assert not out.exists() and not md.exists()


def test_compare_writes_nothing_when_an_output_is_refused(tmp_path: Path) -> None:
    base = tmp_path / "b.json"
    write_report(base, factory.validate_report())
    md = tmp_path / "summary.md"
    result = runner.invoke(app, ["compare", str(base), str(base), "--markdown", str(md),
                                 "-o", str(tmp_path)])
    assert result.exit_code == ExitCode.USAGE, result.output
    assert not md.exists()


def test_a_full_disk_leaves_no_half_summary(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    summary = tmp_path / "summary.md"
    summary.write_text("# earlier step\n\nits text\n")
    before = summary.read_bytes()
    real_write = os.write
    calls = {"n": 0}

    def half_then_full(fd: int, data: bytes) -> int:
        calls["n"] += 1
        if calls["n"] == 1:
            return real_write(fd, bytes(data[: len(data) // 2]))
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(report_io.os, "write", half_then_full)
    with pytest.raises(UserError, match="No space left"):
        append_text(summary, "# hwadvisor\n\n" + "a line of the summary\n" * 200)
    monkeypatch.undo()
    assert summary.read_bytes() == before


def test_plot_draws_dollar_signs_as_text(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    report = factory.validate_report()
    report.devices[0].name = "GPU $\\frac{1}{$ test $x^2$"  # malformed and well-formed TeX
    path = tmp_path / "r.json"
    write_report(path, report)
    png = tmp_path / "r.png"
    result = runner.invoke(app, ["plot", str(path), "-o", str(png)])
    assert result.exit_code == 0, result.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("length", [251, 255, 300, 5000])
def test_a_very_long_profile_id_is_exit_2(length: int) -> None:
    result = runner.invoke(app, ["estimate", "--device", "x" * length, "--model", "llama-3-8b"])
    assert result.exit_code == ExitCode.USAGE, result.output
    assert "no device profile" in result.output
