"""Reading and writing reports: atomic JSON writes, and loads that fail with a clear message."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from pydantic import ValidationError

from hwadvisor.errors import UserError
from hwadvisor.models import Report


def check_target(path: Path) -> Path:
    """Return the folder path will be written in; UserError when it is missing or path is one."""
    path = Path(path)
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise UserError(f"cannot write {path}: folder {folder} does not exist",
                        hint="create the folder first, or pass another --output path")
    if path.is_dir():
        raise UserError(f"cannot write {path}: it is a folder",
                        hint="pass a file path, e.g. --output report.json")
    return folder


def write_text_atomic(path: Path, text: str) -> None:
    """Write text to path via a temp file in the same folder and a rename: never half-written."""
    path = Path(path)
    folder = check_target(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
    except OSError as exc:  # a read-only folder, no permission, disk full
        raise UserError(f"cannot write {path}: {exc.strerror or exc}",
                        hint="check the folder's permissions, or pass another --output path"
                        ) from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise UserError(f"cannot write {path}: {exc.strerror or exc}",
                        hint="check the path and free disk space, or pass another --output path"
                        ) from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def report_json(report: Report) -> str:
    """Render the report as indented JSON (nulls kept: a missing reading is null, not absent)."""
    return report.model_dump_json(indent=2) + "\n"


def write_report(path: Path, report: Report) -> None:
    """Write the report's JSON to path atomically."""
    write_text_atomic(path, report_json(report))


def load_report(path: Path) -> Report:
    """Read a report, refusing unreadable, corrupt or incompatible files with a UserError."""
    path = Path(path)
    try:
        raw = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UserError(f"cannot read report {path}: {exc.strerror or exc}",
                        hint="check the path") from None
    except UnicodeDecodeError:
        raise UserError(f"{path} is not a text file (not UTF-8): not an hwadvisor report",
                        hint="pass a file written by hwadvisor --output") from None
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise UserError(f"{path} is not valid JSON (line {exc.lineno}, column {exc.colno}): "
                        "the file may be truncated or corrupted",
                        hint="regenerate it with --output") from None
    if not isinstance(data, dict) or "schema_version" not in data:
        raise UserError(f"{path} is not an hwadvisor report (no schema_version)",
                        hint="pass a file written by hwadvisor --output")
    from hwadvisor.report.compat import upgrade_with_notes  # only on this path

    data, notes = upgrade_with_notes(data, path)
    try:
        report = Report.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise UserError(f"{path} does not match the report schema at '{where}': {first['msg']}",
                        hint="regenerate the report with this hwadvisor version") from None
    # What the reader dropped (keys of a newer minor) travels with the report, so the command
    # that loaded it can tell the user, and a re-written report keeps the trace.
    report.notes.extend(notes)
    return report
