"""Reading other schema versions (report/compat.py): newer minors, older minors, majors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import report_factory as factory

from hwadvisor.errors import UserError
from hwadvisor.report import compat as schema_compat
from hwadvisor.report.io import load_report, report_json

FIXTURES = Path(__file__).parents[1] / "fixtures" / "reports"


def test_unparsable_schema_version_is_refused(tmp_path: Path) -> None:
    data = json.loads(report_json(factory.probe_report()))
    data["schema_version"] = "one"
    (tmp_path / "r.json").write_text(json.dumps(data))
    with pytest.raises(UserError, match="MAJOR.MINOR"):
        load_report(tmp_path / "r.json")


def test_newer_minor_drops_unknown_keys_with_a_note() -> None:
    report = load_report(FIXTURES / "schema-1.99-newer-minor.json")
    note = report.notes[-1]
    for key in ("energy_joules", "devices[0].hbm_stacks", "trials[0].measurements[0].clock_mhz"):
        assert key in note
    assert report.devices[0].name == "NVIDIA H200"


def test_same_minor_unknown_key_is_still_refused(tmp_path: Path) -> None:
    data = json.loads(report_json(factory.probe_report()))
    data["devices"][0]["typo_field"] = 1
    (tmp_path / "r.json").write_text(json.dumps(data))
    with pytest.raises(UserError, match="devices.0.typo_field"):
        load_report(tmp_path / "r.json")


def test_older_minor_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Pretend this reader is 1.5: a 1.0 report (an older minor) must load, unknown keys absent.
    monkeypatch.setattr(schema_compat, "SCHEMA_VERSION", "1.5")
    report = load_report(FIXTURES / "h200-validate.json")
    assert report.schema_version == "1.0"
    assert not any("does not know" in n for n in report.notes)


def test_older_major_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(schema_compat, "SCHEMA_VERSION", "2.0")
    with pytest.raises(UserError, match="older major"):
        load_report(FIXTURES / "h200-validate.json")


def test_a_1_0_report_effect_dict_reads_as_typed_effects() -> None:
    # Schema 1.0 kept trial effects as name -> value; 1.1 reads them with unit and direction.
    report = load_report(FIXTURES / "h200-validate.json")
    bandwidth = next(t for t in report.trials if t.id == "memory-bandwidth")
    copy = bandwidth.effect_of("copy_gbps")
    assert copy is not None and copy.unit == "GB/s" and copy.better == "higher"
    assert bandwidth.effect["copy_gbps"] == copy.value
