"""The HTML report in a real headless browser (Chromium from the system packages).

Chromium renders the page (file://, network mapped to nowhere), its DOM after the page's script
ran is read back (--dump-dom), console messages come from its log (--enable-logging=stderr
prints each as 'INFO:CONSOLE'), and every number the page shows with a data-key is held to the
report's JSON. scripts/test installs Chromium with apt and sets HWADVISOR_REQUIRE_BROWSER=1, so
in CI a missing browser fails instead of skipping.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from hwadvisor import units
from hwadvisor.cli.app import build_app
from hwadvisor.report.html import render_html
from hwadvisor.report.io import load_report

BROWSERS = ("chromium", "chromium-browser", "google-chrome")


def _browser() -> str:
    for name in BROWSERS:
        found = shutil.which(name)
        if found:
            return found
    if os.environ.get("HWADVISOR_REQUIRE_BROWSER"):
        pytest.fail("HWADVISOR_REQUIRE_BROWSER is set but no Chromium is installed")
    pytest.skip("no Chromium here: scripts/test installs it with apt-get only when run as root "
                "on a system with apt (or install chromium yourself)")


def run_browser(page: Path, *extra: str) -> tuple[str, list[str]]:
    """Load the page headless; return the DOM after scripts ran and the console messages."""
    args = [_browser(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
            "--enable-logging=stderr", "--v=0", "--host-resolver-rules=MAP * ~NOTFOUND",
            f"--user-data-dir={page.parent / 'profile'}", *extra, page.as_uri()]
    done = subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    console = [line for line in done.stderr.splitlines() if ":CONSOLE" in line]
    return done.stdout, console


class _Keyed(HTMLParser):
    """Collect (data-key, data-value, text) of every element that carries a data-key."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[list[str]] = []
        self._open: list[str] | None = None
        self.body_attrs: dict[str, str | None] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "body":
            self.body_attrs = a
        if "data-key" in a:
            self._open = [a["data-key"] or "", a.get("data-value") or "", ""]

    def handle_data(self, data: str) -> None:
        if self._open is not None:
            self._open[2] += data

    def handle_endtag(self, tag: str) -> None:
        if self._open is not None:
            self.found.append(self._open)
            self._open = None


def json_value(data: object, key: str) -> object:
    """Follow a dotted path (list indices as numbers) through the report's JSON."""
    for part in key.split("."):
        data = data[int(part)] if isinstance(data, list) else data[part]  # type: ignore[index]
    return data


UNIT_OF = {"bytes": "bytes", "_s": "s", "tokens_per_s": "tokens/s"}


@pytest.fixture(scope="module")
def recommend_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from typer.testing import CliRunner

    out = tmp_path_factory.mktemp("rec") / "report.json"
    result = CliRunner().invoke(build_app(), [
        "recommend", "--device", "h100-sxm", "--model", "llama-3-8b", "-o", str(out)])
    assert result.exit_code == 0, result.output
    return out


def test_page_renders_without_console_errors_and_matches_the_json(
        recommend_report: Path, tmp_path: Path) -> None:
    report = load_report(recommend_report)
    page = tmp_path / "report.html"
    page.write_text(render_html(report), encoding="utf-8")
    dom, console = run_browser(page, "--dump-dom")
    assert console == [], console
    parser = _Keyed()
    parser.feed(dom)
    # the page's script ran and counted the keyed numbers it found
    assert parser.body_attrs.get("data-rendered") == str(len(parser.found))
    assert len(parser.found) >= 8
    data = json.loads(recommend_report.read_text())
    for key, raw, text in parser.found:
        expected = json_value(data, key)
        assert expected is not None, key
        assert float(raw) == pytest.approx(float(expected), rel=1e-9), key  # type: ignore[arg-type]
        # the text shown is the one formatter's rendering of the JSON's value
        unit = "bytes" if key.endswith("bytes") or "bytes_after" in key else None
        if unit:
            assert text == units.gb(float(expected)), key  # type: ignore[arg-type]
    shown = {key: text for key, _, text in parser.found}
    assert shown["plan.metric.after"] == units.seconds(data["plan"]["metric"]["after"])
    assert "Serve llama-3-8b with vLLM" in dom
    for section in ("plan", "config", "memory", "roofline", "glossary", "next"):
        assert f'id="{section}"' in dom


def test_page_loads_nothing_from_the_network(recommend_report: Path) -> None:
    page = render_html(load_report(recommend_report))
    assert not re.search(r"<(link|img|iframe)\b|\bsrc=|@import|url\(", page)


def test_the_console_check_catches_a_broken_page(tmp_path: Path) -> None:
    # the check above can fail: a page with a script error shows up in the console lines
    page = tmp_path / "bad.html"
    page.write_text("<html><body><script>notDefined();</script></body></html>")
    _, console = run_browser(page, "--dump-dom")
    assert any("notDefined" in line for line in console)


def test_report_command_and_compare_html(recommend_report: Path, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    page = tmp_path / "out.html"
    result = CliRunner().invoke(build_app(), ["report", str(recommend_report), "-o", str(page),
                                              "--baseline", str(recommend_report)])
    assert result.exit_code == 0, result.output
    dom, console = run_browser(page, "--dump-dom")
    assert console == []
    assert 'id="comparison"' in dom


WIDTH_PROBE = ("<script>addEventListener('load', () => document.body.setAttribute("
               "'data-page-width', document.documentElement.scrollWidth + ' ' + innerWidth));"
               "</script></body>")


@pytest.mark.parametrize("kind", ["validate", "compare"])
def test_pages_keep_a_phones_width(tmp_path: Path, kind: str) -> None:
    """Validate and compare pages were 946 px wide on a phone (issue 43): no sideways scroll.

    Headless Chromium lays out at least 500 px however small the window: the page must fit
    that viewport."""
    import report_factory as factory

    from hwadvisor.report.compare import compare_reports

    report = factory.validate_report()
    comparison = compare_reports(factory.validate_report(copy_gbps=3000.0), report) \
        if kind == "compare" else None
    page = tmp_path / f"{kind}.html"
    page.write_text(render_html(report, comparison).replace("</body>", WIDTH_PROBE),
                    encoding="utf-8")
    dom, _console = run_browser(page, "--dump-dom", "--window-size=390,844")
    parser = _Keyed()
    parser.feed(dom)
    page_width, viewport = (int(x) for x in (parser.body_attrs.get("data-page-width")
                                              or "0 0").split())
    assert viewport <= 520 and page_width <= viewport, parser.body_attrs
