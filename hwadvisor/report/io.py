"""Reading and writing reports: one write path for every file, loads that fail in one line.

Writes (`write_text`, `write_bytes`, `append_text`) look at what the path is first:

- a regular file, or a path that does not exist yet: written atomically (a temp file in the
  same folder, then a rename), so a crash or a full disk never leaves half a report. A new file
  gets the mode the umask gives (0666 & ~umask, like any shell redirect); a rewritten file keeps
  its mode (and, for root, its owner);
- a symlink: followed; its target is written as above (a dangling link creates its target);
- this process's own stdout or stderr (`-o /dev/stdout`): written through that stream;
- a character device or a fifo (`/dev/null`, a named pipe): opened and written directly,
  never replaced;
- a folder, a block device or a socket: refused (UserError, exit 2).
"""

from __future__ import annotations

import json
import math
import os
import stat
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError

from hwadvisor.errors import UserError
from hwadvisor.models import Report
from hwadvisor.report.text import one_line as shown

# A report is a few hundred kB; a file far larger is not one (and reading it would cost memory).
MAX_REPORT_BYTES = 64 * 2**20
# JSON integers beyond a 64-bit range are no reading hwadvisor writes (and Python refuses
# integers of over 4300 digits with a ValueError of its own).
MAX_INT_DIGITS = 19

TargetKind = Literal["new", "regular", "stream", "stdout", "stderr"]


@dataclass(frozen=True)
class Target:
    """Where a write goes, once symlinks are followed, and how it must be written."""

    kind: TargetKind
    path: Path  # new/regular: the real file path; stream: the path as given
    mode: int | None = None  # an existing regular file's permission bits
    uid: int | None = None
    gid: int | None = None


def _fail(path: Path, exc: OSError, hint: str) -> UserError:
    return UserError(f"cannot write {path}: {exc.strerror or exc}", hint=hint)


def _same_file(st: os.stat_result, fd: int) -> bool:
    try:
        other = os.fstat(fd)
    except (OSError, ValueError):
        return False
    return (st.st_dev, st.st_ino) == (other.st_dev, other.st_ino)


def resolve_target(path: Path | str) -> Target:
    """Tell what path is and how to write it; UserError (exit 2) for what cannot be written."""
    path = Path(path)
    if str(path) in ("", "."):
        raise UserError("cannot write an empty path", hint="pass a file path, e.g. -o report.json")
    try:
        st = os.stat(path)  # follows symlinks
    except FileNotFoundError:
        real = Path(os.path.realpath(path))  # a dangling symlink names the file to create
        folder = real.parent
        if not folder.is_dir():
            raise UserError(f"cannot write {path}: folder {folder} does not exist",
                            hint="create the folder first, or pass another output path") from None
        return Target("new", real)
    except OSError as exc:  # a loop of links, a file used as a folder, no permission
        raise _fail(path, exc, "check the path, or pass another output path") from None
    if stat.S_ISDIR(st.st_mode):
        raise UserError(f"cannot write {path}: it is a folder",
                        hint="pass a file path, e.g. -o report.json")
    if _same_file(st, 1):
        return Target("stdout", path)
    if _same_file(st, 2):
        return Target("stderr", path)
    if stat.S_ISCHR(st.st_mode) or stat.S_ISFIFO(st.st_mode):
        return Target("stream", path)
    if stat.S_ISREG(st.st_mode):
        real = Path(os.path.realpath(path))
        try:
            same = os.path.samestat(os.stat(real), st)
        except OSError:
            same = False
        if not same:  # a /proc/<pid>/fd link to a deleted file, say: write where it points
            return Target("stream", path)
        return Target("regular", real, stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid)
    raise UserError(f"cannot write {path}: not a regular file, character device or fifo",
                    hint="pass a file path, e.g. -o report.json")


def check_target(path: Path | str) -> None:
    """Refuse, before anything is written, a path that cannot be written (UserError, exit 2)."""
    resolve_target(path)


def _new_file_mode() -> int:
    """Return the mode a new file gets: 0666 less the umask (what open() and shells give)."""
    umask = os.umask(0o022)
    os.umask(umask)
    return 0o666 & ~umask


def _write_atomic(target: Target, data: bytes, shown: Path) -> None:
    folder = target.path.parent
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.path.name}.", suffix=".tmp", dir=folder)
    except OSError as exc:  # a read-only folder, no permission, disk full
        raise _fail(shown, exc, "check the folder's permissions and free space, or pass "
                    "another output path") from None
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
            _copy_mode(handle.fileno(), target)
        os.replace(tmp, target.path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise _fail(shown, exc, "check the path and free disk space, or pass another output "
                    "path") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _copy_mode(fd: int, target: Target) -> None:
    """Give the temp file the mode (and owner) the file it replaces had, or the umask's."""
    if not hasattr(os, "fchmod"):  # Windows: modes are not POSIX bits there
        return
    os.fchmod(fd, target.mode if target.mode is not None else _new_file_mode())
    if target.uid is not None and hasattr(os, "geteuid") and os.geteuid() == 0:
        try:
            os.fchown(fd, target.uid, target.gid if target.gid is not None else -1)
        except OSError:  # keeping the owner is a courtesy, not a reason to fail the write
            pass


def _write_stream(target: Target, data: bytes, append: bool, shown: Path) -> None:
    if target.kind in ("stdout", "stderr"):
        stream = sys.stdout if target.kind == "stdout" else sys.stderr
        stream.flush()
        buffer = getattr(stream, "buffer", None)
        if buffer is not None:
            buffer.write(data)
        else:
            stream.write(data.decode("utf-8"))
        stream.flush()
        return
    if append and target.kind in ("stream", "regular") and _is_regular(target.path):
        _append_whole(target.path, data, shown)
        return
    try:
        with open(target.path, "ab" if append else "wb") as handle:
            handle.write(data)
    except OSError as exc:
        raise _fail(shown, exc, "check the path and free disk space, or pass another output "
                    "path") from None


def _is_regular(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return True  # a new file: created by the append


def _append_whole(path: Path, data: bytes, shown: Path) -> None:
    """Append data to a regular file all or nothing: a full disk leaves the file as it was.

    A short write (ENOSPC midway) would leave half a summary in $GITHUB_STEP_SUMMARY; the
    file is cut back to its old size instead, and an empty file this call created is removed.
    """
    existed = path.exists()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    except OSError as exc:
        raise _fail(shown, exc, "check the path and free disk space, or pass another output "
                    "path") from None
    start = os.fstat(fd).st_size
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fsync(fd)
    except OSError as exc:
        _cut_back(fd, start)
        os.close(fd)
        if not existed and start == 0:
            path.unlink(missing_ok=True)
        raise _fail(shown, exc, "check the path and free disk space, or pass another output "
                    "path") from None
    except BaseException:
        _cut_back(fd, start)
        os.close(fd)
        raise
    os.close(fd)


def _cut_back(fd: int, size: int) -> None:
    try:
        os.ftruncate(fd, size)
    except OSError:  # nothing more can be done; the write's own error is reported
        pass


def write_bytes(path: Path | str, data: bytes) -> None:
    """Write data to path: atomically for a regular or new file, directly for a device or fifo."""
    target = resolve_target(path)
    if target.kind in ("new", "regular"):
        _write_atomic(target, data, Path(path))
    else:
        _write_stream(target, data, append=False, shown=Path(path))


def write_text(path: Path | str, text: str) -> None:
    """Write text (UTF-8) to path by the rules of write_bytes."""
    write_bytes(path, text.encode("utf-8"))


# The name callers have used since writes were atomic only; same behaviour as write_text.
write_text_atomic = write_text


def append_text(path: Path | str, text: str) -> None:
    """Append text (UTF-8) to path, creating it (umask mode) when it does not exist.

    GitHub's $GITHUB_STEP_SUMMARY is appended to: other steps' summaries must stay. A text
    already there that does not end in a blank line gets one, so sections do not run together.
    """
    target = resolve_target(path)
    if target.kind == "regular":
        text = _separator(target.path) + text
    if target.kind == "new":  # open() creates it with the umask's mode
        target = Target("stream", target.path)
    _write_stream(target, text.encode("utf-8"), append=True, shown=Path(path))


def _separator(path: Path) -> str:
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            if size == 0:
                return ""
            handle.seek(max(0, size - 2))
            tail = handle.read()
    except OSError:
        return ""
    if tail.endswith(b"\n\n") or tail == b"\n":
        return ""
    return "\n" if tail.endswith(b"\n") else "\n\n"


def report_json(report: Report) -> str:
    """Render the report as indented JSON (nulls kept: a missing reading is null, not absent)."""
    # without a load the report reads as before it could carry one: no "serving": null
    absent = {"serving"} if report.serving is None else None
    return report.model_dump_json(indent=2, exclude=absent) + "\n"


def write_report(path: Path | str, report: Report) -> None:
    """Write the report's JSON to path (write_text's rules: atomic for files)."""
    write_text(path, report_json(report))


# --- reading ----------------------------------------------------------------------------


class _NumberOutOfRange(ValueError):
    """A JSON number no hwadvisor report holds: NaN, infinity, or an integer past 64 bits."""


def _parse_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise _NumberOutOfRange(f"an integer of {len(text.lstrip('-'))} digits")
    value = int(text)
    if abs(value) >= 2**63:
        raise _NumberOutOfRange(f"the integer {text}")
    return value


def _parse_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NumberOutOfRange(f"the number {shown(text)} (beyond the range of a double)")
    return value


def _parse_constant(name: str) -> float:
    raise _NumberOutOfRange(f"{name} (not a number JSON allows)")


def _read_bytes(path: Path) -> bytes:
    try:
        st = os.stat(path)
        if stat.S_ISDIR(st.st_mode):
            raise UserError(f"cannot read report {path}: it is a folder",
                            hint="pass a file written by hwadvisor --output")
        if stat.S_ISREG(st.st_mode) and st.st_size > MAX_REPORT_BYTES:
            raise _too_large(path)
        with open(path, "rb") as handle:
            raw = handle.read(MAX_REPORT_BYTES + 1)
    except OSError as exc:
        raise UserError(f"cannot read report {path}: {exc.strerror or exc}",
                        hint="check the path") from None
    if len(raw) > MAX_REPORT_BYTES:
        raise _too_large(path)
    return raw


def _too_large(path: Path) -> UserError:
    return UserError(f"{path} is larger than {MAX_REPORT_BYTES // 2**20} MiB: not an hwadvisor "
                     "report", hint="pass a file written by hwadvisor --output")


def parse_report_json(raw: bytes, path: Path) -> Any:
    """Decode a report file's bytes into JSON data; UserError for anything no report holds."""
    try:
        text = raw.decode("utf-8-sig")  # a byte-order mark (an editor's) is not an error
    except UnicodeDecodeError:
        raise UserError(f"{path} is not a text file (not UTF-8): not an hwadvisor report",
                        hint="pass a file written by hwadvisor --output") from None
    try:
        return json.loads(text, parse_int=_parse_int, parse_float=_parse_float,
                          parse_constant=_parse_constant)
    except json.JSONDecodeError as exc:
        raise UserError(f"{path} is not valid JSON (line {exc.lineno}, column {exc.colno}): "
                        "the file may be truncated or corrupted",
                        hint="regenerate it with --output") from None
    except _NumberOutOfRange as exc:
        raise UserError(f"{path} holds {exc}: not an hwadvisor report",
                        hint="regenerate it with --output") from None
    except RecursionError:
        raise UserError(f"{path} nests too deeply to be an hwadvisor report",
                        hint="pass a file written by hwadvisor --output") from None
    except ValueError as exc:  # anything else the decoder refuses
        raise UserError(f"{path} is not valid JSON: {shown(exc)}",
                        hint="regenerate it with --output") from None


def read_json(path: Path | str) -> Any:
    """Read a report-sized JSON file through the hardened reader (UserError when it is not)."""
    path = Path(path)
    return parse_report_json(_read_bytes(path), path)


def is_comparison(path: Path | str) -> bool:
    """Tell whether a file is a comparison `hwadvisor compare -o` wrote (not a report)."""
    data = read_json(path)
    return (isinstance(data, dict) and "schema_version" not in data
            and "max_regression_pct" in data and "figures" in data)


def load_report(path: Path | str) -> Report:
    """Read a report, refusing unreadable, corrupt, odd or incompatible files with a UserError."""
    path = Path(path)
    data = parse_report_json(_read_bytes(path), path)
    if not isinstance(data, dict) or "schema_version" not in data:
        raise UserError(f"{path} is not an hwadvisor report (no schema_version)",
                        hint="pass a file written by hwadvisor --output")
    from hwadvisor.report.compat import upgrade_with_notes  # only on this path

    try:
        data, notes = upgrade_with_notes(data, path)
        report = Report.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise UserError(f"{path} does not match the report schema at '{shown(where)}': "
                        f"{shown(first['msg'])}",
                        hint="regenerate the report with this hwadvisor version") from None
    except RecursionError:
        raise UserError(f"{path} nests too deeply to be an hwadvisor report",
                        hint="pass a file written by hwadvisor --output") from None
    # What the reader dropped (keys of a newer minor) travels with the report, so the command
    # that loaded it can tell the user, and a re-written report keeps the trace.
    report.notes.extend(notes)
    return report

