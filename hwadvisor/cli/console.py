"""Where results go: JSON to stdout, atomic files, markdown summaries and the one stderr console.

Every command that produces a report takes the same output options (JsonOpt, OutputOpt,
MarkdownOpt below) and finishes the same way::

    def validate(..., as_json: JsonOpt = False, output: OutputOpt = None,
                 markdown: MarkdownOpt = None, fail_on: FailOnOpt = None,
                 min_bw: MinBandwidthFractionOpt = None) -> None:
        report = ...                                   # the run; raise UserError on failure
        print_notes(report.notes, "note: ")
        report.gates_tripped = apply_gates(report, fail_on, min_bw)
        publish(report, render, as_json, output, markdown)  # files only after a successful run
        exit_for_gates(report)                          # exit 1 when a gate tripped
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from hwadvisor.errors import ExitCode
from hwadvisor.models import Report
from hwadvisor.report.io import check_target, report_json, write_report, write_text_atomic

# The output options of every command that produces a report. They live here, not in
# cli/options.py, so that `probe` (whose start-up is a target) imports no workload code.
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the report as JSON on stdout.")]
OutputOpt = Annotated[
    Optional[Path],  # noqa: UP007, UP045
    typer.Option(
        "--output", "-o",
        help="Write the JSON report to this file (atomically; no file when the run fails).",
        dir_okay=False,
    ),
]
MarkdownOpt = Annotated[
    Optional[Path],  # noqa: UP007, UP045
    typer.Option(
        "--markdown",
        help="Write a markdown summary here, e.g. \"$GITHUB_STEP_SUMMARY\" in GitHub Actions.",
        dir_okay=False,
    ),
]


class _LazyConsole:
    """A rich Console made on first use: rich costs start-up time that --json never needs."""

    def __init__(self, stderr: bool) -> None:
        self._stderr = stderr
        self._console: Any = None

    def real(self) -> Any:
        """Return the rich Console itself, for rich objects that take one (Progress, Live)."""
        if self._console is None:
            from rich.console import Console

            self._console = Console(stderr=self._stderr)
        return self._console

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real(), name)


console: Any = _LazyConsole(stderr=False)
err_console: Any = _LazyConsole(stderr=True)

def emit_report(
    report: Report, as_json: bool, output: Path | None, markdown: Path | None = None
) -> None:
    """Write the report to --output and the summary to --markdown (atomically); JSON on --json.

    Call it only after the run succeeded: a failed run must leave no file behind.
    """
    # Check both targets first, so a bad --output does not leave the --markdown file behind.
    for path in (markdown, output):
        if path is not None:
            check_target(path)
    if markdown is not None:
        from hwadvisor.report.markdown import render_markdown

        text = render_markdown(report)
        if _is_append_target(markdown):
            _append(markdown, text)
        else:
            write_text_atomic(markdown, text)
    if output is not None:
        write_report(output, report)
    if as_json:
        sys.stdout.write(report_json(report))
        sys.stdout.flush()


def publish(
    report: Report,
    render: Callable[[Report], None],
    as_json: bool,
    output: Path | None,
    markdown: Path | None = None,
) -> None:
    """Write the report (emit_report), then, unless --json, render it for people on stdout."""
    emit_report(report, as_json, output, markdown)
    if not as_json:
        render(report)


def _is_append_target(path: Path) -> bool:
    """Tell whether path is GitHub's step-summary file, which is appended to, not replaced."""
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    return summary is not None and summary != "" and (
        Path(summary).resolve() == Path(path).resolve()
    )


def _append(path: Path, text: str) -> None:
    # GitHub collects $GITHUB_STEP_SUMMARY after the step; earlier writers' text must stay.
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(text)


def exit_for_gates(report: Report) -> None:
    """Print each tripped gate on stderr and exit 1 (ExitCode.GATE_TRIPPED); return when none."""
    if not report.gates_tripped:
        return
    for line in report.gates_tripped:
        from rich.markup import escape

        err_console.print(f"[bold red]gate tripped:[/] {escape(line)}", highlight=False)
    raise typer.Exit(int(ExitCode.GATE_TRIPPED))


def note(message: str) -> None:
    """Print a one-line note for people on stderr (never mixed into JSON on stdout).

    Plain print, not rich: a note is one unstyled line, and rich would cost the probe start-up.
    """
    print(message, file=sys.stderr, flush=True)


def print_notes(lines: Iterable[str], prefix: str = "") -> None:
    """Print each of a report's notes as a note on stderr, after prefix (e.g. "note: ")."""
    for line in lines:
        note(f"{prefix}{line}")


@contextmanager
def progress_bar(enabled: bool) -> Iterator[Callable[[str, int, int], None] | None]:
    """Yield a progress callback drawing a rich bar on stderr, or None when disabled.

    The validator calls it with (trial id, trials done, trials in all); id "" means done.
    """
    if not enabled:
        yield None
        return
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    bar = Progress(TextColumn("{task.description}"), BarColumn(),
                   TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn(),
                   console=err_console.real(), transient=True)
    task: list[Any] = []

    def update(trial_id: str, done: int, total: int) -> None:
        if not task:
            task.append(bar.add_task("trials", total=total))
        bar.update(task[0], completed=done, total=total,
                   description=f"trial {trial_id}" if trial_id else "trials")

    with bar:
        yield update
