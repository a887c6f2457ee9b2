"""Where results go: JSON to stdout, atomic files, and the one stderr console."""

from __future__ import annotations

import sys
from pathlib import Path

from rich.console import Console

from hwadvisor.models import Report
from hwadvisor.reportio import report_json, write_report

console = Console()
err_console = Console(stderr=True)


def emit_report(report: Report, as_json: bool, output: Path | None) -> None:
    """Write the report to --output (atomically) and print it as JSON when --json is given."""
    if output is not None:
        write_report(output, report)
    if as_json:
        sys.stdout.write(report_json(report))
        sys.stdout.flush()


def note(message: str) -> None:
    """A one-line note for people on stderr (never mixed into JSON on stdout)."""
    err_console.print(message, highlight=False, markup=False)
