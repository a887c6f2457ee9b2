"""`hwadvisor schema`, `compare` and `plot`: the commands that work on written reports."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from hwadvisor import units
from hwadvisor.cli.console import (
    OUTPUT_PANEL,
    HtmlOpt,
    MarkdownOpt,
    MarkdownOverwriteOpt,
    console,
    err_console,
    is_stdout,
    note,
    print_wrapped,
    write_html,
    write_markdown,
    write_output,
)
from hwadvisor.errors import ExitCode, UserError
from hwadvisor.report.text import one_line

if TYPE_CHECKING:
    from hwadvisor.report.compare import Comparison

ReportArg = Annotated[Path, typer.Argument(help="A report written by hwadvisor --output.",
                                           dir_okay=False)]


def schema() -> None:
    """Print the JSON Schema of the report (committed as docs/report.schema.json)."""
    from hwadvisor.report.schema import schema_json

    sys.stdout.write(schema_json())


def _fmt(value: float | None, digits: int = 4) -> str:
    return units.number(value, digits, "—")


# How compare's table shortens a figure's key (the legend printed under the table says it).
KEY_LEGEND = ("keys shortened: figures are grouped by trial ID; NAME is trials.ID.effect.NAME, "
              "'LABEL median' is trials.ID.LABEL.median (a timing); ↑ higher is better, ↓ lower")


def short_key(key: str) -> tuple[str, str]:
    """Split a figure key into its group (the trial) and a short name read under it."""
    parts = key.split(".")
    if len(parts) >= 3 and parts[0] == "trials":
        group, rest = parts[1], parts[2:]
        if rest[0] == "effect" and len(rest) == 2:
            return group, rest[1]
        if rest[-1] == "median":
            return group, f"{'.'.join(rest[:-1])} median"
        return group, ".".join(rest)
    head, _, tail = key.partition(".")
    return head, tail or key


def _scale(unit: str | None, baseline: float) -> tuple[str, float]:
    """Return the unit a figure's values are shown in and the factor to it (s as ms/µs)."""
    if unit == "s":
        if abs(baseline) < 1e-3:
            return "µs", 1e6
        return ("ms", 1e3) if abs(baseline) < 1 else ("s", 1.0)
    if unit == "x":
        return "×", 1.0
    return unit or "", 1.0


def _status(f: Any) -> str:
    if f.regressed:
        status = "[bold red]REGRESSED[/]"
    elif f.better is None:
        status = "[dim]direction unknown[/]"
    elif not f.gated:
        status = "[dim]not gated[/]"
    elif f.worse_pct is not None and f.worse_pct < 0:
        status = "[green]better[/]"
    else:
        status = "ok"
    return status + (" [yellow](noisy)[/]" if f.noisy else "")


def compare_line(comparison: Comparison) -> str:
    """Say in one sentence what got worse or was lost (named), or that nothing did."""
    return comparison.headline


def _comparison_tables(comparison: Comparison) -> list[Table]:
    figures = Table(title=f"measured figures (regression limit {comparison.max_regression_pct:g}% "
                    "and beyond the runs' noise)", show_edge=False)
    figures.add_column("figure (unit)", ratio=3, min_width=22)
    for col in ("baseline", "current", "change", "noise"):
        figures.add_column(col, justify="right", no_wrap=True)
    figures.add_column("status", ratio=1, min_width=6)
    group = None
    for f in comparison.figures:
        trial, name = short_key(f.key)
        if trial != group:
            figures.add_row(f"[bold]{escape(trial)}[/]", "", "", "", "", "")
            group = trial
        unit, factor = _scale(f.unit, f.baseline)
        arrow = {"higher": " ↑", "lower": " ↓"}.get(f.better or "", "")
        label = f"  {name}" + (f" ({unit})" if unit else "") + arrow
        change = "—" if f.change_pct is None else f"{f.change_pct:+.1f}%"
        noise = "—" if not f.noise_pct else f"±{f.noise_pct:.1f}%"
        figures.add_row(escape(label), units.number(f.baseline * factor, 3, "—"),
                        units.number(f.current * factor, 3, "—"), change, noise, _status(f))
    tables = [figures]
    if comparison.verdicts:
        verdicts = Table(title="recommendation verdicts")
        for col in ("recommendation", "baseline", "current", "status"):
            verdicts.add_column(col)
        for v in comparison.verdicts:
            status = "[bold red]REGRESSED[/]" if v.regressed else (
                "ok" if v.baseline == v.current else "changed")
            verdicts.add_row(escape(v.id), escape(v.baseline or "—"), escape(v.current or "—"),
                             status)
        tables.append(verdicts)
    return tables


def _limit(option: str) -> Any:
    """Return workload/limits.py's range check as a typer callback (imported when it runs)."""

    def checked(value: float | None) -> float | None:
        from hwadvisor.workload import limits

        try:
            limits.check(option, value)
        except UserError as exc:  # a usage error, as click's own range checks give
            raise typer.BadParameter(exc.message.removeprefix(f"{option} ")) from None
        return value

    return checked


def compare(
    baseline: ReportArg,
    current: ReportArg,
    max_regression: Annotated[float, typer.Option(
        "--max-regression", callback=_limit("--max-regression"),
        help="Percent a measured figure may get worse before exit 1 (0-10,000); the two runs' "
        "95% intervals must also lie apart.")] = 5.0,
    min_effect: Annotated[float | None, typer.Option(
        "--min-effect", callback=_limit("--min-effect"), show_default=False,
        help="Percent worse that counts as a real change even where the runs' intervals "
        "overlap (0-10,000); default: the intervals alone decide.")] = None,
    allow_missing: Annotated[bool, typer.Option(
        "--allow-missing", help="Do not fail when figures, trials or verdicts of the baseline "
        "are missing, unsupported or failed now (they are still listed).")] = False,
    gate_compile: Annotated[bool, typer.Option(
        "--gate-compile", help="Gate compile and first-call times too (by default they are "
        "shown, never gated).")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the comparison as JSON.",
                                          rich_help_panel=OUTPUT_PANEL)] = False,
    output: Annotated[Path | None, typer.Option(
        "--output", "-o", dir_okay=False, show_default=False, rich_help_panel=OUTPUT_PANEL,
        help="Write the comparison as JSON to this file (atomically).")] = None,
    markdown: MarkdownOpt = None,
    markdown_overwrite: MarkdownOverwriteOpt = False,
    html: HtmlOpt = None,
) -> None:
    """Compare CURRENT against BASELINE: measured figures and verdicts.

    Exit 1 when a measured figure got worse by more than --max-regression percent and the
    two runs' 95% intervals lie apart (both runs need repeated samples: a single reading is
    shown, never gated), when a figure, trial or verdict of the baseline is lost (unsupported,
    failed or gone; --allow-missing accepts that), or when a confirmed recommendation is now
    refuted; 2 for unreadable or incompatible reports.
    """
    from hwadvisor.report.compare import compare_reports
    from hwadvisor.report.io import check_target, load_report

    for path in (output, markdown, html):  # before any file is written: exit 2 leaves none
        if path is not None:
            check_target(path)
    base = load_report(baseline)
    cur = load_report(current)
    comparison = compare_reports(base, cur, max_regression, min_effect_pct=min_effect,
                                 gate_compile=gate_compile, allow_missing=allow_missing)
    comparison.baseline_path, comparison.current_path = str(baseline), str(current)
    loader_notes = [n for n in base.notes + cur.notes if "does not know" in n]
    comparison.notes = loader_notes + comparison.notes
    for line in comparison.notes:
        note(line)
    comparison_json = comparison.model_dump_json(indent=2) + "\n"
    _write_comparison(comparison, comparison_json, cur, output, markdown, markdown_overwrite,
                      html)
    if as_json and not (output is not None and is_stdout(output)):
        sys.stdout.write(comparison_json)
    else:
        print_wrapped([compare_line(comparison)], bold_first=True)
        for table in _comparison_tables(comparison):
            console.print(table)
        print_wrapped([KEY_LEGEND])
        if not comparison.figures:
            note("no measured figure is in both reports (run validate or probe --measure)")
    if comparison.allow_missing:
        for line in comparison.lost:
            note(f"lost (allowed by --allow-missing): {line}")
    if comparison.regressions:
        for line in comparison.regressions:
            err_console.print(f"[bold red]regression:[/] {escape(one_line(line, 2000))}",
                              highlight=False, soft_wrap=True)
        raise typer.Exit(int(ExitCode.GATE_TRIPPED))


def _write_comparison(comparison: Comparison, comparison_json: str, cur: Any,
                      output: Path | None, markdown: Path | None, markdown_overwrite: bool,
                      html: Path | None) -> None:
    """Write -o, --html, then the --markdown append; a failure removes the files this created."""
    created: list[Path] = []

    def new(path: Path) -> None:
        if not (path.exists() or path.is_symlink()):
            created.append(path)

    try:
        if output is not None:  # the whole files first; the append last (see emit_report)
            new(output)
            write_output(output, comparison_json)
        if html is not None:
            new(html)
            write_html(cur, html, comparison=comparison)
        if markdown is not None:
            from hwadvisor.report.markdown import render_comparison_markdown

            write_markdown(markdown, render_comparison_markdown(comparison), markdown_overwrite)
    except BaseException:
        for path in created:
            path.unlink(missing_ok=True)
        raise


def plot(
    report: ReportArg,
    output: Annotated[Path, typer.Option(
        "--output", "-o", dir_okay=False, help="Image to write (PNG; .svg and .pdf work too).")
    ] = Path("roofline.png"),
    device_index: Annotated[int | None, typer.Option(
        "--device-index", min=0, show_default=False,
        help="Index of the report's device to plot (devices[].index) \\[default: the first].")
    ] = None,
    old_device: Annotated[str | None, typer.Option(
        "--device", hidden=True, show_default=False,
        help="Deprecated spelling of --device-index.")] = None,
) -> None:
    """Draw the roofline: datasheet and measured ceilings, workload phases and trial points."""
    from hwadvisor.report.io import load_report
    from hwadvisor.report.plot import plot_roofline

    index = _device_index(device_index, old_device)
    loaded = load_report(report)
    data = plot_roofline(loaded, output, index)
    for line in data.skipped:
        note(f"left out of the plot: {line}")
    note(f"wrote {output}: {len(data.phases)} workload phase(s), {len(data.trials)} trial point(s)")


def _device_index(device_index: int | None, old_device: str | None) -> int | None:
    """Read --device-index, or the deprecated `plot --device N` (with a note)."""
    if old_device is None:
        return device_index
    if device_index is not None:
        raise UserError("pass --device-index alone (--device is its old spelling)",
                        hint="e.g. hwadvisor plot report.json --device-index 1")
    text = old_device.strip()
    if not text.isascii() or not text.isdigit() or len(text) > 9:
        raise UserError(f"plot --device takes a device index, got {one_line(old_device, 40)!r}; "
                        "in plot it is now --device-index (elsewhere --device is a profile id)",
                        hint="pass --device-index N, the index of a device in the report")
    note("plot --device is deprecated: it is --device-index now (--device is a profile id in "
         "estimate and recommend)")
    return int(text)


def html_report(
    report: ReportArg,
    output: Annotated[Path, typer.Option(
        "--output", "-o", dir_okay=False, help="The HTML file to write (atomically).")
    ] = Path("report.html"),
    baseline: Annotated[Path | None, typer.Option(
        "--baseline", dir_okay=False, show_default=False,
        help="A report to compare against; its comparison is part of the page.")] = None,
) -> None:
    """Write a report as one self-contained HTML page: plan, memory, roofline, trials, config.

    The page opens offline (CSS, charts and script are inline) and can be mailed or attached
    to a CI run as is.
    """
    from hwadvisor.cli.console import write_html
    from hwadvisor.report.io import is_comparison, load_report

    if baseline is None and is_comparison(report):
        saved_report, saved = _saved_comparison(report)
        write_html(saved_report, output, comparison=saved)
        note(f"wrote {output}")
        return
    loaded = load_report(report)
    base = load_report(baseline) if baseline is not None else None
    comparison = None
    if base is not None:
        from hwadvisor.report.compare import compare_reports

        comparison = compare_reports(base, loaded, 5.0)
        comparison.baseline_path, comparison.current_path = str(baseline), str(report)
    write_html(loaded, output, comparison=comparison)
    note(f"wrote {output}")


def _saved_comparison(path: Path) -> tuple[Any, Comparison]:
    """Read `compare -o`'s file and the current report it names; UserError when unreadable."""
    from pydantic import ValidationError

    from hwadvisor.report.compare import Comparison
    from hwadvisor.report.io import load_report, read_json

    try:
        comparison = Comparison.model_validate(read_json(path))
    except ValidationError as exc:
        where = ".".join(str(p) for p in exc.errors()[0]["loc"])
        raise UserError(f"{path} looks like a comparison but does not match one at "
                        f"'{one_line(where, 80)}'",
                        hint="write it again with hwadvisor compare BASELINE CURRENT -o FILE"
                        ) from None
    current = comparison.current_path
    if not current or not Path(current).is_file():
        raise UserError(f"{path} is a comparison; its current report "
                        f"{one_line(str(current), 200)!r} is not there to draw the page from",
                        hint="pass the reports: hwadvisor report CURRENT.json --baseline "
                        "BASELINE.json -o page.html")
    return load_report(current), comparison


def register(app: typer.Typer) -> None:
    """Register `schema`, `compare`, `plot` and `report`."""
    app.command("report")(html_report)
    app.command("schema")(schema)
    app.command("compare")(compare)
    app.command("plot")(plot)
