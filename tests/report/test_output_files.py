"""The one write path (report/io.py): special files, symlinks, modes, appends, full disks.

Special files are made in a temp dir (a fifo, a character device node, symlinks), never
written in /dev: before the fix, `-o /dev/null` as root turned /dev/null into a regular file.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import report_factory as factory
from typer.testing import CliRunner

from hwadvisor.cli.app import app
from hwadvisor.errors import ExitCode, UserError
from hwadvisor.report import io as reportio
from hwadvisor.report.io import append_text, load_report, write_bytes, write_report, write_text

REPO = Path(__file__).resolve().parents[2]
posix_only = pytest.mark.skipif(os.name != "posix", reason="fifos, devices and modes are POSIX")
runner = CliRunner()


def _reader(fifo: Path, into: list[bytes]) -> threading.Thread:
    """Make `fifo` and read it whole into `into` on a thread (a writer blocks until then)."""
    os.mkfifo(fifo)

    def read() -> None:
        with open(fifo, "rb") as handle:
            into.append(handle.read())

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread


# --------------------------------------------------------------------------- special files


@posix_only
def test_fifo_is_written_not_replaced(tmp_path: Path) -> None:
    fifo, got = tmp_path / "pipe", []
    thread = _reader(fifo, got)
    write_report(fifo, factory.probe_report())
    thread.join(10)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode), "the fifo was replaced by a regular file"
    assert json.loads(got[0])["kind"] == "probe"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe"]  # no temp file left


@posix_only
def test_cli_output_into_a_fifo(tmp_path: Path) -> None:
    fifo, got = tmp_path / "pipe", []
    thread = _reader(fifo, got)
    result = runner.invoke(app, ["estimate", "--device", "h200-sxm", "--model", "llama-3.2-1b",
                                 "-o", str(fifo)])
    thread.join(10)
    assert result.exit_code == 0, result.output
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert json.loads(got[0])["kind"] == "estimate"


def _char_device(tmp_path: Path) -> Path:
    """A character device in tmp_path: a null device node (root), else a link to /dev/null.

    The link is safe even for a broken writer: replacing it replaces the link, not /dev/null.
    """
    node = tmp_path / "null"
    try:
        os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except (OSError, AttributeError):
        node.symlink_to(os.devnull)
    return node


@posix_only
def test_character_device_is_written_directly(tmp_path: Path) -> None:
    device = _char_device(tmp_path)
    write_report(device, factory.probe_report())
    assert stat.S_ISCHR(os.stat(device).st_mode), "the device was replaced by a regular file"
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["null"]


@posix_only
def test_symlink_is_followed_to_its_target(tmp_path: Path) -> None:
    target = tmp_path / "real.json"
    target.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(target.name)
    write_report(link, factory.probe_report())
    assert link.is_symlink(), "the symlink was replaced by a regular file"
    assert load_report(target).kind == "probe"


@posix_only
def test_dangling_symlink_creates_its_target(tmp_path: Path) -> None:
    link = tmp_path / "link.json"
    link.symlink_to("made.json")
    write_text(link, "{}")
    assert link.is_symlink() and (tmp_path / "made.json").read_text() == "{}"


@posix_only
def test_symlink_to_a_character_device(tmp_path: Path) -> None:
    device = _char_device(tmp_path)
    link = tmp_path / "out.json"
    link.symlink_to(device)
    write_text(link, "{}")
    assert link.is_symlink() and stat.S_ISCHR(os.stat(link).st_mode)


@posix_only
def test_output_to_own_stdout_through_a_link(tmp_path: Path) -> None:
    """`-o /dev/stdout`, emulated by a link in tmp_path to /proc/self/fd/1 (or /dev/fd/1)."""
    fd_dir = Path("/proc/self/fd") if Path("/proc/self/fd").is_dir() else Path("/dev/fd")
    if not fd_dir.is_dir():
        pytest.skip("no /proc/self/fd or /dev/fd")
    link = tmp_path / "stdout"
    link.symlink_to(fd_dir / "1")
    done = subprocess.run(
        [sys.executable, "-m", "hwadvisor", "estimate", "--device", "h200-sxm", "--model",
         "llama-3.2-1b", "-o", str(link), "--json"],
        capture_output=True, text=True, timeout=120, cwd=REPO, check=False)
    assert done.returncode == 0, done.stderr
    assert link.is_symlink(), "the link was replaced"
    # -o is stdout itself: the report is printed once, not once for -o and again for --json
    assert json.loads(done.stdout)["kind"] == "estimate"


def test_folder_is_refused_with_exit_2(tmp_path: Path) -> None:
    result = runner.invoke(app, ["estimate", "--device", "h200-sxm", "-o", str(tmp_path)])
    assert result.exit_code == ExitCode.USAGE
    assert "folder" in result.output and "Traceback" not in result.output
    with pytest.raises(UserError, match="is a folder"):
        write_text(tmp_path, "{}")


@posix_only
def test_socket_is_refused(tmp_path: Path) -> None:
    import socket

    path = tmp_path / "s"
    server = socket.socket(socket.AF_UNIX)
    try:
        server.bind(str(path))
        with pytest.raises(UserError, match="not a regular file"):
            write_text(path, "{}")
    finally:
        server.close()


def test_plot_writes_through_the_one_write_path(tmp_path: Path) -> None:
    """plot keeps a symlink (report/io.py's rules), and report/plot.py has no writer of its own."""
    pytest.importorskip("matplotlib")
    report_path = tmp_path / "r.json"
    write_report(report_path, factory.validate_report())
    target = tmp_path / "real.png"
    link = tmp_path / "roofline.png"
    link.symlink_to(target.name)
    result = runner.invoke(app, ["plot", str(report_path), "-o", str(link)])
    assert result.exit_code == 0, result.output
    assert link.is_symlink() and target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    source = (REPO / "hwadvisor" / "report" / "plot.py").read_text()
    assert "mkstemp" not in source and "os.replace" not in source


@posix_only
def test_plot_into_a_fifo(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    report_path = tmp_path / "r.json"
    write_report(report_path, factory.validate_report())
    fifo, got = tmp_path / "image", []
    thread = _reader(fifo, got)
    result = runner.invoke(app, ["plot", str(report_path), "-o", str(fifo)])
    thread.join(30)
    assert result.exit_code == 0, result.output
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and got[0][:4] == b"\x89PNG"


# --------------------------------------------------------------------------- modes


@posix_only
@pytest.mark.parametrize("umask, expected", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_new_files_honour_the_umask(tmp_path: Path, umask: int, expected: int) -> None:
    old = os.umask(umask)
    try:
        write_report(tmp_path / "r.json", factory.probe_report())
        append_text(tmp_path / "s.md", "x\n")
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "r.json").st_mode) == expected
    assert stat.S_IMODE(os.stat(tmp_path / "s.md").st_mode) == expected


@posix_only
@pytest.mark.parametrize("mode", [0o644, 0o640, 0o600, 0o664])
def test_rewritten_file_keeps_its_mode(tmp_path: Path, mode: int) -> None:
    path = tmp_path / "r.json"
    path.write_text("{}")
    os.chmod(path, mode)
    old = os.umask(0o077)
    try:
        write_report(path, factory.probe_report())
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(path).st_mode) == mode


# --------------------------------------------------------------------------- --markdown


def _summary_env(monkeypatch: pytest.MonkeyPatch, path: Path) -> None:
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(path))


def test_markdown_appends_under_another_spelling(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    summary = tmp_path / "summary.md"
    summary.write_text("## earlier step\n")
    _summary_env(monkeypatch, summary)
    spelled = tmp_path / "sub" / ".." / "summary.md"
    (tmp_path / "sub").mkdir()
    result = runner.invoke(app, ["probe", "--markdown", str(spelled)])
    assert result.exit_code == 0, result.output
    text = summary.read_text()
    assert text.startswith("## earlier step\n\n# hwadvisor probe report")


def test_markdown_appends_without_the_env_var(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    summary = tmp_path / "summary.md"
    summary.write_text("kept\n\n")
    for _ in range(2):
        assert runner.invoke(app, ["probe", "--markdown", str(summary)]).exit_code == 0
    text = summary.read_text()
    assert text.startswith("kept\n\n") and text.count("# hwadvisor probe report") == 2


def test_markdown_overwrite_replaces(tmp_path: Path) -> None:
    summary = tmp_path / "summary.md"
    summary.write_text("old text\n")
    result = runner.invoke(app, ["probe", "--markdown", str(summary), "--markdown-overwrite"])
    assert result.exit_code == 0, result.output
    assert summary.read_text().startswith("# hwadvisor probe report")


def test_compare_markdown_appends_too(tmp_path: Path) -> None:
    b, c = tmp_path / "b.json", tmp_path / "c.json"
    write_report(b, factory.validate_report())
    write_report(c, factory.validate_report())
    summary = tmp_path / "summary.md"
    summary.write_text("earlier\n")
    out = tmp_path / "comparison.json"
    result = runner.invoke(app, ["compare", str(b), str(c), "--markdown", str(summary),
                                 "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert summary.read_text().startswith("earlier\n")
    assert json.loads(out.read_text())["regressions"] == []


@posix_only
def test_full_disk_is_a_clean_error(tmp_path: Path) -> None:
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full")
    link = tmp_path / "summary.md"
    link.symlink_to("/dev/full")  # writes fail with ENOSPC, like a full disk
    for argv in (["probe", "--markdown", str(link)],
                 ["probe", "--markdown", str(link), "--markdown-overwrite"],
                 ["probe", "-o", str(link)]):
        result = runner.invoke(app, argv)
        assert result.exit_code == ExitCode.USAGE, (argv, result.output)
        assert "No space left" in result.output and "hint:" in result.output
        assert result.exception is None or isinstance(result.exception, SystemExit)


@pytest.mark.parametrize("overwrite", [False, True])
def test_read_only_summary_is_a_clean_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            overwrite: bool) -> None:
    """A read-only file system (EROFS; chmod does not stop root, so the error is injected)."""
    summary = tmp_path / "summary.md"
    summary.write_text("earlier\n")
    real_open, real_mkstemp = open, reportio.tempfile.mkstemp

    def read_only_open(file: object, mode: str = "r", *args: object, **kw: object) -> object:
        if str(file) == str(summary) and ("a" in mode or "w" in mode):
            raise OSError(errno.EROFS, "Read-only file system")
        return real_open(file, mode, *args, **kw)  # type: ignore[call-overload]

    def read_only_mkstemp(*args: object, **kw: object) -> object:
        raise OSError(errno.EROFS, "Read-only file system")

    real_os_open = reportio.os.open

    def read_only_os_open(file: object, flags: int, *args: object) -> int:
        # the append opens with os.open (all or nothing: it cuts back a short write)
        if str(file) == str(summary) and flags & (reportio.os.O_WRONLY | reportio.os.O_RDWR):
            raise OSError(errno.EROFS, "Read-only file system")
        return real_os_open(file, flags, *args)  # type: ignore[arg-type]

    monkeypatch.setattr("builtins.open", read_only_open)
    monkeypatch.setattr(reportio.os, "open", read_only_os_open)
    monkeypatch.setattr(reportio.tempfile, "mkstemp", read_only_mkstemp)
    argv = ["probe", "--markdown", str(summary)] + (["--markdown-overwrite"] if overwrite else [])
    result = runner.invoke(app, argv)
    monkeypatch.setattr("builtins.open", real_open)
    monkeypatch.setattr(reportio.os, "open", real_os_open)
    monkeypatch.setattr(reportio.tempfile, "mkstemp", real_mkstemp)
    assert result.exit_code == ExitCode.USAGE, result.output
    assert "Read-only file system" in result.output and "hint:" in result.output
    assert summary.read_text() == "earlier\n"


def test_write_bytes_and_text_agree(tmp_path: Path) -> None:
    write_bytes(tmp_path / "a", b"abc")
    write_text(tmp_path / "b", "abc")
    assert (tmp_path / "a").read_bytes() == (tmp_path / "b").read_bytes() == b"abc"
