"""The docs' profile and engine tables are generated from the data (scripts/doc_tables.py).

A profile or engine added to the data without `python scripts/doc_tables.py --write` fails
here, as does a table edited by hand.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

from script_loader import load_script

ROOT = Path(__file__).resolve().parents[2]


def _doc_tables() -> ModuleType:
    return load_script("scripts/doc_tables.py")


def test_docs_tables_match_the_data() -> None:
    stale = [str(path.relative_to(ROOT)) for path, _ in _doc_tables().stale()]
    assert not stale, f"run python scripts/doc_tables.py --write; stale: {stale}"


def test_every_profile_and_engine_has_a_row() -> None:
    from hwadvisor import profiles
    from hwadvisor.engines.catalog import load_engines

    tables = _doc_tables()
    profile_rows = "\n".join(tables.profile_table())
    engine_rows = "\n".join(tables.engine_table())
    assert all(f"| `{p.id}` |" in profile_rows for p in profiles.load_all())
    assert all(f"\n| {engine_id} |" in engine_rows for engine_id in load_engines())


def test_a_hand_edit_is_caught(tmp_path: Path) -> None:
    tables = _doc_tables()
    text = (ROOT / "docs" / "rules.md").read_text(encoding="utf-8")
    edited = text.replace("| vllm |", "| vllm-by-hand |", 1)
    assert edited != text
    assert tables.rewritten(edited, "engines", tables.engine_table()) == text
