"""The committed JSON Schema matches the models; real and crafted reports validate against it."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import report_factory as factory
from typer.testing import CliRunner

from hwadvisor.cli.app import app
from hwadvisor.models import SCHEMA_VERSION
from hwadvisor.report.io import report_json
from hwadvisor.report.schema import report_schema

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "docs" / "report.schema.json"
REGENERATE = "hwadvisor schema > docs/report.schema.json"


@pytest.fixture(scope="module")
def committed() -> dict:
    return json.loads(COMMITTED.read_text(encoding="utf-8"))


def test_committed_schema_matches_the_models(committed: dict) -> None:
    assert committed == report_schema(), (
        f"docs/report.schema.json is out of date with hwadvisor/models; regenerate it with "
        f"`{REGENERATE}` (and bump SCHEMA_VERSION per docs/schema-versioning.md if a key was "
        "removed, renamed or changed meaning)"
    )


def test_schema_command_prints_the_schema_with_id_and_version() -> None:
    result = CliRunner().invoke(app, ["schema"])
    assert result.exit_code == 0, result.output
    printed = json.loads(result.stdout)
    assert printed == report_schema()
    assert printed["x-schema-version"] == SCHEMA_VERSION
    assert printed["$id"].endswith(SCHEMA_VERSION)
    assert printed["title"] == "hwadvisor report"
    jsonschema.Draft202012Validator.check_schema(printed)


def _validate(instance: dict, schema: dict) -> None:
    jsonschema.Draft202012Validator(schema).validate(instance)


def test_real_probe_report_validates(committed: dict) -> None:
    result = CliRunner().invoke(app, ["probe", "--json"])
    assert result.exit_code == 0, result.output
    _validate(json.loads(result.stdout), committed)


@pytest.mark.parametrize("build", [factory.validate_report, factory.probe_report,
                                   lambda: factory.validate_report(device_measured=True)])
def test_crafted_reports_validate(committed: dict, build) -> None:
    _validate(json.loads(report_json(build())), committed)


def test_schema_rejects_unknown_keys_and_wrong_types(committed: dict) -> None:
    data = json.loads(report_json(factory.validate_report()))
    data["devices"][0]["memory_total_bytes"] = "141 GB"
    with pytest.raises(jsonschema.ValidationError):
        _validate(data, committed)
    data = json.loads(report_json(factory.validate_report()))
    data["surprise"] = 1
    with pytest.raises(jsonschema.ValidationError):
        _validate(data, committed)


def test_schema_version_is_major_minor() -> None:
    major, minor = SCHEMA_VERSION.split(".")
    assert major.isdigit() and minor.isdigit()


def test_real_recommend_report_validates(committed: dict, tmp_path: Path) -> None:
    # A datasheet-profile plan: no GPU needed, exercises the estimate and rules sections.
    out = tmp_path / "rec.json"
    result = CliRunner().invoke(app, ["recommend", "--device", "h200-sxm", "--model", "llama-3-8b",
                                      "--goal", "inference-latency", "--output", str(out)])
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["kind"] == "recommend" and data["recommendations"]
    _validate(data, committed)
