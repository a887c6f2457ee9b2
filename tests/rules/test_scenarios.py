"""The scenario gallery's key fields (tests/fixtures/scenarios.json) against the plans made now.

A change to the rules or the performance model that moves a plan shows up here: read the
regenerated docs/scenarios.md as a practitioner would, then `python scripts/scenarios.py
--write` to accept it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from script_loader import load_script

ROOT = Path(__file__).resolve().parents[2]
scenarios = load_script("scripts/scenarios.py")

GOLDEN = json.loads((ROOT / "tests" / "fixtures" / "scenarios.json").read_text())


def test_the_gallery_covers_the_device_classes_and_both_outcomes():
    assert len(scenarios.SCENARIOS) >= 30
    assert set(GOLDEN) == {s.id for s in scenarios.SCENARIOS}
    assert any(not v["fits"] for v in GOLDEN.values())
    # A plan that does not fit says what would: its steps so far, or alternatives (more GPUs,
    # another engine's offload, LoRA) when no change of this engine gets closer.
    assert all(v["steps"] or v["alternatives"] for v in GOLDEN.values() if not v["fits"])


@pytest.mark.parametrize("scenario", scenarios.SCENARIOS, ids=lambda s: s.id)
def test_plan_key_fields_match_the_golden_file(scenario):
    assert scenarios.key_fields(scenarios.run(scenario)) == GOLDEN[scenario.id]


def test_the_committed_gallery_is_current():
    text, _ = scenarios.render()
    committed = (ROOT / "docs" / "scenarios.md").read_text(encoding="utf-8")
    assert committed == text, "docs/scenarios.md is stale: run python scripts/scenarios.py --write"
