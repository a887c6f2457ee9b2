"""Odd, hostile or unphysical report files: one line and exit 2, or a plot that skips values.

Before: `"schema_version": "1.²"` raised ValueError (str.isdigit accepts superscripts), an
integer of 5,000 digits a ValueError, 3,000 levels of nesting a RecursionError; NaN, inf or
negative figures crashed `plot` (axis limits, a complex number from a negative bandwidth).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import report_factory as factory
from pydantic import ValidationError
from typer.testing import CliRunner

from hwadvisor.cli.app import app
from hwadvisor.errors import ExitCode, UserError
from hwadvisor.models import Device, Effect, Measured, Measurement, ModelOptions, Times
from hwadvisor.report.compat import parse_version
from hwadvisor.report.io import load_report, report_json, write_report
from hwadvisor.report.plot import roofline_data

runner = CliRunner()


def _report_text(**changes: object) -> str:
    data = json.loads(report_json(factory.validate_report()))
    data.update(changes)
    return json.dumps(data)


HOSTILE: dict[str, str] = {
    "superscript-version": _report_text(schema_version="1.\u00b2"),
    "arabic-digit-version": _report_text(schema_version="\u0661.\u0661"),
    "huge-version": _report_text(schema_version="1." + "9" * 5000),
    "version-object": _report_text(schema_version={"major": 1}),
    "int-5000-digits": _report_text(tool_version="x")[:-1] + ', "x": ' + "9" * 5000 + "}",
    "nested-3000": '{"schema_version": "1.2", "notes": ' + "[" * 3000 + "]" * 3000 + "}",
    "nested-dict-3000": '{"schema_version": "1.2", "host": ' + '{"a":' * 3000 + "1"
                        + "}" * 3000 + "}",
    "nan": _report_text()[:-1] + ', "x": NaN}',
    "infinity": _report_text().replace('"memory_bandwidth_gbps": 4800.0',
                                       '"memory_bandwidth_gbps": Infinity'),
    "float-overflow": _report_text().replace('"memory_bandwidth_gbps": 4800.0',
                                             '"memory_bandwidth_gbps": 1e999'),
    "negative-bandwidth": _report_text().replace('"memory_bandwidth_gbps": 4800.0',
                                                 '"memory_bandwidth_gbps": -4800.0'),
    "newline-in-key": _report_text()[:-1] + ', "evil\\nkey\\u001b[2J": 1}',
    "huge-key": _report_text()[:-1] + ', "' + "k" * 100_000 + '": 1}',
    "bare-string": '"schema_version"',
    "null": "null",
    "nul-bytes": "\x00" * 100,
}


@pytest.fixture(scope="module")
def hostile_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("hostile")
    files = {}
    for name, text in HOSTILE.items():
        files[name] = root / f"{name}.json"
        files[name].write_text(text, encoding="utf-8")
    good = root / "good.json"
    write_report(good, factory.validate_report())
    files["good"] = good
    return files


def _one_clean_line(result) -> None:
    assert result.exit_code == ExitCode.USAGE, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(
        result.exception)
    lines = [line for line in result.output.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error:")]
    assert len(errors) == 1, result.output
    assert "Traceback" not in result.output
    assert "\x1b" not in result.output  # a hostile key cannot reach the terminal raw
    assert len(errors[0]) < 600


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_reader_refuses_with_a_user_error(hostile_files: dict[str, Path], name: str) -> None:
    with pytest.raises(UserError) as caught:
        load_report(hostile_files[name])
    assert caught.value.code == ExitCode.USAGE and caught.value.hint
    assert "\n" not in caught.value.message


@pytest.mark.parametrize("name", sorted(HOSTILE))
@pytest.mark.parametrize("command", ["compare-baseline", "compare-current", "plot",
                                     "validate-report"])
def test_commands_give_one_line_and_exit_2(hostile_files: dict[str, Path], tmp_path: Path,
                                           name: str, command: str) -> None:
    bad, good = str(hostile_files[name]), str(hostile_files["good"])
    argv = {
        "compare-baseline": ["compare", bad, good],
        "compare-current": ["compare", good, bad],
        "plot": ["plot", bad, "-o", str(tmp_path / "r.png")],
        "validate-report": ["validate", "--report", bad],
    }[command]
    _one_clean_line(runner.invoke(app, argv))


@pytest.mark.parametrize("text, expected", [
    ("1.2", (1, 2)), (" 1.0 ", (1, 0)), ("1.\u00b2", None), ("\u0661.\u0661", None),
    ("1.2.3", None), ("1", None), ("a.b", None), ("1." + "9" * 5000, None), (None, None),
    (True, None), ({"a": 1}, None), (1.5, (1, 5)),
])
def test_parse_version(text: object, expected: tuple[int, int] | None) -> None:
    assert parse_version(text) == expected


def test_byte_order_mark_is_read(tmp_path: Path) -> None:
    path = tmp_path / "bom.json"
    path.write_bytes(b"\xef\xbb\xbf" + _report_text().encode())
    assert load_report(path).kind == "validate"


def test_large_file_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from hwadvisor.report import io as reportio

    monkeypatch.setattr(reportio, "MAX_REPORT_BYTES", 1000)
    path = tmp_path / "big.json"
    path.write_text(_report_text())
    with pytest.raises(UserError, match="larger than"):
        load_report(path)


# --------------------------------------------------------------------------- the schema


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_physical_fields_refuse_nan_and_inf(bad: float) -> None:
    with pytest.raises(ValidationError):
        Measured(memory_bandwidth_gbps=bad)
    with pytest.raises(ValidationError):
        Measurement(label="x", samples=[0.1, bad])
    with pytest.raises(ValidationError):
        Effect(name="speedup", value=bad)
    with pytest.raises(ValidationError):
        Times(prefill_s=bad)
    with pytest.raises(ValidationError):
        ModelOptions(speculative_tokens_per_step=bad)
    device = factory.h200().model_dump()
    device["peak_tflops"]["bf16"] = bad
    with pytest.raises(ValidationError):
        Device.model_validate(device)


def test_rates_refuse_negative_values() -> None:
    with pytest.raises(ValidationError):
        Measured(memory_bandwidth_gbps=-1.0)
    with pytest.raises(ValidationError):
        Measured(matmul_tflops={"bf16": -5.0})
    with pytest.raises(ValidationError):
        Measurement(label="x", samples=[-0.1])


def test_valid_reports_still_read() -> None:
    fixtures = Path(__file__).parents[1] / "fixtures" / "reports"
    for name in ("h200-validate.json", "h200-probe-measured.json",
                 "schema-1.99-newer-minor.json"):
        assert load_report(fixtures / name).devices


def test_schema_says_rates_are_not_negative() -> None:
    from hwadvisor.report.schema import report_schema

    device = report_schema()["$defs"]["Device"]["properties"]["memory_bandwidth_gbps"]
    assert {"minimum": 0} in [{k: v for k, v in a.items() if k == "minimum"}
                              for a in device["anyOf"] if "minimum" in a]


# --------------------------------------------------------------------------- plot


@pytest.mark.parametrize("bad", [math.nan, math.inf, -1.0, 0.0, 1e300, -math.inf])
def test_plot_skips_unusable_figures(bad: float) -> None:
    """Values that bypass the schema (built in process) are skipped with a note, not drawn."""
    report = factory.validate_report()
    device = report.devices[0]
    device.__dict__["memory_bandwidth_gbps"] = bad  # past validation, as a bug might
    device.__dict__["peak_tflops"] = {**device.peak_tflops, "fp16": bad}
    report.trials[0].measurements[0].__dict__["value"] = bad
    data = roofline_data(report)
    drawn = [data.datasheet_bandwidth_gbps, data.measured_bandwidth_gbps,
             *data.datasheet_tflops.values(), *data.measured_tflops.values(),
             *(p.tflops for p in data.trials), *(p.intensity for p in data.trials)]
    assert all(v is None or (math.isfinite(v) and 0 < v < 1e12) for v in drawn)
    assert data.skipped


@pytest.mark.parametrize("bad", [math.nan, math.inf, -1.0, 1e300])
def test_plot_command_survives_unusable_figures(tmp_path: Path, bad: float,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("matplotlib")
    report = factory.validate_report()
    report.devices[0].__dict__["peak_tflops"] = {**report.devices[0].peak_tflops, "fp16": bad}
    report.trials[0].measurements[0].__dict__["value"] = bad
    report.estimate.times.__dict__["prefill_s"] = bad  # type: ignore[union-attr]
    from hwadvisor.report import io as reportio

    monkeypatch.setattr(reportio, "load_report", lambda path: report)
    result = runner.invoke(app, ["plot", "whatever.json", "-o", str(tmp_path / "r.png")])
    assert result.exit_code == 0, result.output
    assert "note: left out of the plot" in result.output
    assert (tmp_path / "r.png").read_bytes()[:4] == b"\x89PNG"


def test_plot_with_nothing_usable_is_refused() -> None:
    report = factory.probe_report()
    report.devices[0].__dict__["memory_bandwidth_gbps"] = math.nan
    with pytest.raises(UserError, match="no memory bandwidth.*skipped"):
        roofline_data(report)
