"""Every command's text view at 80 and 120 columns: no line too long, no word broken.

A word is broken when a token of the narrow view is not a token of the same view printed very
wide (400 columns), where nothing needs to wrap: 'inconcl usive', 'memory-bandwi…' and
'trials. memory-' all fail. The views are also kept as golden files
(tests/fixtures/views/*.txt); HWADVISOR_UPDATE_VIEWS=1 rewrites them after a deliberate change.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hwadvisor.cli import console as console_module
from hwadvisor.cli.app import build_app

FIXTURES = Path(__file__).parents[1] / "fixtures"
GOLDEN = FIXTURES / "views"
REPORTS = FIXTURES / "reports"
BOX = re.compile(r"[│┃┏┓┗┛┡┩┣┫╇╈╋━─┼├┤┬┴┌┐└┘╭╮╯╰═║╔╗╚╝╞╡╪╤╧┳┻•]+")

# name -> command line. Planning views use --device so they do not depend on this machine.
VIEWS: dict[str, list[str]] = {
    "recommend-h100": ["recommend", "--device", "h100-sxm", "--model", "llama-3-8b"],
    "recommend-4090-70b": ["recommend", "--device", "rtx-4090", "--model", "llama-3-70b"],
    "recommend-training": ["recommend", "--goal", "training-throughput", "--phase", "training",
                           "--device", "h100-sxm", "--gpus", "8", "--model", "llama-3-8b"],
    "estimate-h100": ["estimate", "--device", "h100-sxm", "--model", "llama-3-8b"],
    "validate-report": ["report-view", str(REPORTS / "h200-validate.json")],
    "probe-report": ["report-view", str(REPORTS / "h200-probe-measured.json")],
    "compare": ["compare", str(REPORTS / "h200-validate.json"),
                str(REPORTS / "h200-validate.json")],
    "profiles-list": ["profiles", "list"],
    "profiles-cpu": ["profiles", "list", "--class", "cpu"],
    "profiles-show": ["profiles", "show", "h200-sxm"],
    "help": ["--help"],
    "recommend-help": ["recommend", "--help"],
    "estimate-help": ["estimate", "--help"],
    "validate-help": ["validate", "--help"],
    "compare-help": ["compare", "--help"],
    "probe-help": ["probe", "--help"],
    "report-help": ["report", "--help"],
}


def _render_saved(path: str) -> str:
    """Render a saved report with its command's own view (validate or probe)."""
    from hwadvisor.cli.commands import probe, validate
    from hwadvisor.report.io import load_report

    report = load_report(Path(path))
    (validate.render if report.kind == "validate" else probe.render)(report)
    return console_module.console.export_text(clear=False)


def view(args: list[str], width: int, monkeypatch: pytest.MonkeyPatch) -> str:
    """Return what a command prints on stdout at this terminal width."""
    monkeypatch.setenv("COLUMNS", str(width))
    monkeypatch.setattr(shutil, "get_terminal_size",
                        lambda fallback=(80, 24): os.terminal_size((width, 24)))
    console_module.console._console = None  # a new console reads the new width
    if args[0] == "report-view":
        from rich.console import Console

        console_module.console._console = Console(width=width, record=True,
                                                  file=open(os.devnull, "w"))  # noqa: SIM115
        return _render_saved(args[1])
    result = CliRunner().invoke(build_app(), args, env={"COLUMNS": str(width)})
    assert result.exit_code in (0, 1), result.output
    return result.stdout


def tokens(text: str) -> set[str]:
    """The words of a view: box-drawing characters and the wrap's own hyphen breaks aside."""
    joined = re.sub(r"(\w-)\n\s*(?=\w)", r"\1", text)  # 'launch-' + 'latency' (click's wrap)
    return set(BOX.sub(" ", joined).split())


@pytest.fixture(autouse=True)
def _fresh_console() -> object:
    yield
    console_module.console._console = None


@pytest.mark.parametrize("name", sorted(VIEWS))
@pytest.mark.parametrize("width", [80, 120])
def test_view_fits_and_breaks_no_word(name: str, width: int,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    text = view(VIEWS[name], width, monkeypatch)
    assert text.strip(), name
    too_long = [line for line in text.splitlines() if len(line) > width]
    assert not too_long, f"{name} at {width}: {too_long[:3]}"
    from hwadvisor.cli import helpfmt

    if width < helpfmt.NARROW_COLUMNS:  # the reference in the same (plain) help layout
        monkeypatch.setattr(helpfmt, "NARROW_COLUMNS", 10**6)
    wide = tokens(view(VIEWS[name], 400, monkeypatch))
    broken = sorted(tokens(text) - wide)
    assert not broken, f"{name} at {width} columns breaks or cuts words: {broken[:10]}"
    assert "…" not in text, f"{name} at {width} columns cuts text short"
    golden = GOLDEN / f"{name}-{width}.txt"
    if os.environ.get("HWADVISOR_UPDATE_VIEWS") or not golden.exists():
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(_stable(text), encoding="utf-8")
    assert _stable(text) == golden.read_text(encoding="utf-8"), (
        f"{name} at {width} columns changed; HWADVISOR_UPDATE_VIEWS=1 rewrites the golden file")


def _stable(text: str) -> str:
    """The view without what changes from run to run (a timestamp, the tool's version)."""
    text = re.sub(r"\d{4}-\d\d-\d\dT[\d:.+]+", "<time>", text)
    return "\n".join(line.rstrip() for line in text.splitlines()) + "\n"


def test_the_broken_word_check_can_fail() -> None:
    wide = tokens("verdicts: refuted, inconclusive, error")
    narrow = tokens("verdicts: refuted, inconcl\nusive, error")
    assert narrow - wide == {"inconcl", "usive,"}


def test_cpu_box_table_does_not_say_per_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    import report_factory

    from hwadvisor.cli.commands.estimate import memory_table

    table = memory_table(report_factory.estimate(), per_gpu=False)
    assert table.title == "memory"


def test_qwen_72b_is_not_offered_the_7b_as_the_same_model() -> None:
    result = CliRunner().invoke(build_app(), ["estimate", "--model", "Qwen/Qwen2.5-72B"])
    assert result.exit_code == 2
    assert "qwen2.5-7b" not in result.output.lower()
