"""Where results go: JSON to stdout, report files, markdown summaries and the one stderr console.

Every command that produces a report takes the same output options (the `Output` group below,
declared once) and finishes the same way::

    @output_options()
    @gate_options
    def validate(..., out: Output = NO_OUTPUT, gates: Gates = NO_GATES) -> None:
        report = ...                                   # the run; raise UserError on failure
        print_notes(report.notes)                      # "note: ..." lines on stderr
        report.gates_tripped = apply_gates(report, gates.fail_on, gates.min_bandwidth_fraction)
        publish(report, render, out)                   # files after a good run
        exit_for_gates(report)                         # exit 1 when a gate tripped

Files go through hwadvisor.report.io's one write path (atomic for regular files, direct for
devices and fifos) with SIGINT/SIGTERM held back until the write is done (cli/signals.py).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from hwadvisor.cli import signals
from hwadvisor.cli.params import Param, default_of, file_option, flag_option, group_options
from hwadvisor.errors import ExitCode
from hwadvisor.models import Report
from hwadvisor.report.io import append_text, check_target, report_json, write_report, write_text
from hwadvisor.report.text import one_line

NOTE_PREFIX = "note: "
QUIET = False  # -q: no "note:" lines (errors, hints and gates still print)
OUTPUT_PANEL = "Output"

# The output options of every command that produces a report. They live here, not in
# cli/options.py, so that `probe` (whose start-up is a target) imports no workload code.
JsonOpt = flag_option("--json", help_text="Print the report as JSON on stdout.",
                      panel=OUTPUT_PANEL)
OutputOpt = file_option(
    "--output", "-o", panel=OUTPUT_PANEL,
    help_text="Write the JSON report to this file (atomically; no file when the run fails; "
    "a device or fifo such as /dev/stdout is written directly).")
MarkdownOpt = file_option(
    "--markdown", panel=OUTPUT_PANEL,
    help_text="Append a markdown summary to this file (created if missing), e.g. "
    "\"$GITHUB_STEP_SUMMARY\" in GitHub Actions, whose other steps' text stays.")
# -i/--gpu of probe and validate (here for the same reason: probe's start-up).
GpuOpt = Annotated[
    Optional[str],  # noqa: UP007, UP045
    typer.Option(
        "--gpu", "-i",
        help="Only these GPUs: an index or a comma list (-i 0,2), numbered as nvidia-smi "
        "does (NVML, PCI order; not CUDA_VISIBLE_DEVICES' renumbering).",
        show_default=False,
    ),
]
MarkdownOverwriteOpt = flag_option(
    "--markdown-overwrite", panel=OUTPUT_PANEL,
    help_text="Replace the --markdown file instead of appending to it.")


ExplainOpt = Annotated[
    Optional[bool],  # noqa: UP007, UP045
    typer.Option("--explain/--no-explain", show_default=False,
                 help="End the view with one line on each term it used (TTFT, KV cache, ...). "
                 "On by default in recommend and estimate.", rich_help_panel=OUTPUT_PANEL),
]
HtmlOpt = file_option(
    "--html", panel=OUTPUT_PANEL,
    help_text="Also write the report as one self-contained HTML page (plan, memory, roofline, "
    "trials, config; opens offline).")


@dataclass(frozen=True)
class Output:
    """Where a command's report goes: JSON on stdout, files, and how the view ends."""

    as_json: bool = False
    output: Path | None = None
    markdown: Path | None = None
    markdown_overwrite: bool = False
    html: Path | None = None
    explain: bool | None = None  # None: the command's own default


# The value a command's `out` parameter names as its default; the options replace it.
NO_OUTPUT = Output()

OUTPUT_PARAMS: tuple[Param, ...] = tuple(
    Param(name, option, default_of(Output, name)) for name, option in (
        ("as_json", JsonOpt), ("output", OutputOpt), ("markdown", MarkdownOpt),
        ("markdown_overwrite", MarkdownOverwriteOpt), ("html", HtmlOpt),
        ("explain", ExplainOpt)))


def output_options(*names: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Give a command its output options (all, or those named) as one `out: Output` value.

    --html and --explain close the command's option list, as every command has listed them.
    """
    return group_options(Output, OUTPUT_PARAMS, "out", names, last=("html", "explain"))


class _LazyConsole:
    """A rich Console made on first use: rich costs start-up time that --json never needs."""

    def __init__(self, stderr: bool) -> None:
        self._stderr = stderr
        self._console: Any = None

    def real(self) -> Any:
        """Return the rich Console itself, for rich objects that take one (Progress, Live)."""
        if self._console is None:
            from rich.console import Console

            # stdout records what it prints: the glossary defines the terms the view used
            self._console = Console(stderr=self._stderr, record=not self._stderr)
        return self._console

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real(), name)


console: Any = _LazyConsole(stderr=False)
err_console: Any = _LazyConsole(stderr=True)

def emit_report(
    report: Report, as_json: bool, output: Path | None, markdown: Path | None = None,
    markdown_overwrite: bool = False, extra: list[tuple[Path, str]] | None = None,
) -> None:
    """Write the report to --output, `extra` files, and the summary to --markdown; JSON on --json.

    Call it only after the run succeeded: a failed run must leave no file behind. Every target
    is checked before the first write; the whole files (--output, extra) are written before
    the --markdown append, and a failure on the way removes the files this call created.
    """
    files = list(extra or [])
    for path in [markdown, output, *(p for p, _ in files)]:
        if path is not None:
            check_target(path)
    created: list[Path] = []
    try:
        if output is not None:
            _write_new(output, report_json(report), created, report_file=report)
        for path, text in files:
            _write_new(path, text, created)
        if markdown is not None:
            from hwadvisor.report.markdown import render_markdown

            write_markdown(markdown, render_markdown(report), markdown_overwrite)
    except BaseException:
        for path in created:
            path.unlink(missing_ok=True)
        raise
    if as_json and not (output is not None and is_stdout(output)):
        sys.stdout.write(report_json(report))
        sys.stdout.flush()


def is_stdout(path: Path) -> bool:
    """Tell whether path is this process's stdout (-o /dev/stdout): then --json writes once."""
    try:
        target, ours = os.stat(path), os.fstat(sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # no such file, or stdout is no real file
        return False
    return (target.st_dev, target.st_ino) == (ours.st_dev, ours.st_ino)


def _write_new(path: Path, text: str, created: list[Path],
               report_file: Report | None = None) -> None:
    """Write one whole file (atomically); remember it in `created` when it did not exist."""
    existed = path.exists() or path.is_symlink()
    with signals.deferred():
        if report_file is not None:
            write_report(path, report_file)
        else:
            write_text(path, text)
    if not existed and path.is_file():
        created.append(path)


def write_markdown(path: Path, text: str, overwrite: bool = False) -> None:
    """Append text to the --markdown file (GitHub's step-summary convention), or replace it."""
    with signals.deferred():
        if overwrite:
            write_text(path, text)
        else:
            append_text(path, text)


def write_output(path: Path, text: str) -> None:
    """Write a command's --output file (not a report: compare's comparison) by the same rules."""
    with signals.deferred():
        write_text(path, text)


def publish(report: Report, render: Callable[[Report], None], out: Output,
            extra: list[tuple[Path, str]] | None = None) -> None:
    """Write the report (emit_report), then, unless --json, render it for people on stdout."""
    emit_report(report, out.as_json, out.output, out.markdown, out.markdown_overwrite, extra)
    if not out.as_json:
        render(report)


def keep_words(table: Any, cap: int = 32) -> Any:
    """Give each column at least the width of its longest word (up to cap); return the table.

    rich shortens a word longer than its column ('speculative-decodi…'); with this, columns
    wrap between words and the narrow ones give way first.
    """
    from rich.text import Text

    for column in table.columns:
        longest = 0
        for cell in column._cells:  # rich keeps a column's cells here (no public accessor)
            plain = Text.from_markup(cell).plain if isinstance(cell, str) else ""
            longest = max([longest, *(len(word) for word in plain.split())])
        column.min_width = max(column.min_width or 0, min(longest, cap))
    return table


def begin_view() -> None:
    """Forget what stdout printed before: the glossary covers this view only."""
    console.export_text(clear=True)


def print_wrapped(lines: Iterable[str], bold_first: bool = False) -> None:
    """Print plain lines wrapped at word boundaries to the terminal's width (never mid-word)."""
    from hwadvisor.report.plain import wrap

    for i, line in enumerate(lines):
        for piece in wrap(line, console.width):
            style = "bold" if bold_first and i == 0 else None
            console.print(piece, style=style, highlight=False, markup=False, soft_wrap=True)


def end_view(report: Report, explain: bool) -> None:
    """Print the next-step line and, when asked, the glossary of the terms this view used."""
    from hwadvisor.report.plain import glossary_lines, next_step

    print_wrapped([next_step(report)])
    if explain:
        print_wrapped(glossary_lines(console.export_text(clear=False)))


def write_html(report: Report, path: Path | None, comparison: Any = None) -> None:
    """Write the report as one self-contained HTML page (--html), atomically."""
    if path is None:
        return
    from hwadvisor.report.html import render_html

    check_target(path)
    with signals.deferred():
        write_text(path, render_html(report, comparison=comparison))


def html_file(report: Report, path: Path | None, comparison: Any = None) -> list[tuple[Path, str]]:
    """Return [(path, the report as one HTML page)] for --html, to write with the other files."""
    if path is None:
        return []
    from hwadvisor.report.html import render_html

    check_target(path)
    return [(path, render_html(report, comparison=comparison))]


def esc(value: object) -> str:
    """Return data as rich markup that prints as is: '[/]' and '[wip]' are escaped, not markup.

    Every piece of data that reaches rich (a model path, a GPU name, a report's text) goes
    through this; only the renderers' own styling is markup.
    """
    from rich.markup import escape

    return escape(str(value))


def exit_for_gates(report: Report) -> None:
    """Print each tripped gate on stderr and exit 1 (ExitCode.GATE_TRIPPED); return when none."""
    if not report.gates_tripped:
        return
    from rich.markup import escape

    for line in report.gates_tripped:
        err_console.print(f"[bold red]gate tripped:[/] {escape(one_line(line, 2000))}",
                          highlight=False, soft_wrap=True)
    raise typer.Exit(int(ExitCode.GATE_TRIPPED))


def note(message: str) -> None:
    """Print a one-line note for people on stderr ("note: ..."; never mixed into JSON on stdout).

    Plain print, not rich: a note is one unstyled line, and rich would cost the probe start-up.
    A note may quote a file (a model path, a GPU name): control characters are escaped.
    """
    if QUIET:
        return
    text = one_line(message, 4000)
    if not text.startswith(NOTE_PREFIX):
        text = NOTE_PREFIX + text
    say(text)


def say(message: str) -> None:
    """Print one plain line on stderr (an interruption, a trial's error); no prefix added."""
    print(one_line(message, 4000), file=sys.stderr, flush=True)


def print_error(message: str, hint: str | None = None) -> None:
    """Print `error: message` and `hint: hint` on stderr, each one line (data escaped)."""
    from rich.markup import escape

    err_console.print(f"[bold red]error:[/] {escape(one_line(message, 2000))}", highlight=False,
                      soft_wrap=True)
    if hint:
        err_console.print(f"hint: {one_line(hint, 2000)}", highlight=False, markup=False,
                          soft_wrap=True)


def exit_if_interrupted(report: Report) -> None:
    """Exit 130 (Ctrl-C) or 143 (SIGTERM) after a partial report was written; else return."""
    if not report.interrupted:
        return
    code = signals.exit_code()
    how = "SIGTERM" if code == ExitCode.TERMINATED else "Ctrl-C"
    note(f"interrupted by {how}: the report holds the trials that finished")
    raise typer.Exit(code)


def mark_interruption(report: Report) -> None:
    """Name the signal that cut the trials short (the validator writes Ctrl-C for both).

    A signal received while no trial could see it (its exception lost in C code) still marks
    the report interrupted: the run was asked to stop.
    """
    if signals.received() is not None:
        report.interrupted = True
    if report.interrupted and signals.exit_code() == ExitCode.TERMINATED:
        for trial in report.trials:
            if trial.status == "interrupted":
                trial.reason = "interrupted by SIGTERM"


def print_notes(lines: Iterable[str]) -> None:
    """Print each line as a "note: " line on stderr."""
    for line in lines:
        note(line)


def print_report_notes(report: Report) -> None:
    """Print a report's notes, host readings that failed first, as "note: " lines."""
    print_notes([*report.host.notes, *report.notes])


@contextmanager
def progress_bar(enabled: bool) -> Iterator[Callable[[str, int, int], None] | None]:
    """Yield a progress callback drawing a rich bar on stderr, or None when disabled.

    The validator calls it with (trial id, trials done, trials in all); id "" means done.
    Drawn or not, the callback first honours a signal whose exception was lost (signals.check):
    the validator calls it between trials.
    """
    if not enabled:
        yield lambda _trial_id, _done, _total: signals.check()
        return
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    bar = Progress(TextColumn("{task.description}"), BarColumn(),
                   TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn(),
                   console=err_console.real(), transient=True)
    task: list[Any] = []

    from rich.markup import escape

    def update(trial_id: str, done: int, total: int) -> None:
        signals.check()
        if not task:
            task.append(bar.add_task("trials", total=total))
        bar.update(task[0], completed=done, total=total,
                   description=f"trial {escape(one_line(trial_id))}" if trial_id else "trials")

    with bar:
        yield update
