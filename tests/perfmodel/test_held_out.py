"""The held-out discipline of the published-results benchmark (issue 42).

The check split is frozen (benchmarks/published_check.json): its figures may not change, appear
or go without a new freeze at a later date, and no class's check median or p90 may rise above
the recorded value. Every fitted constant names its tune figures (hwadvisor/perfmodel/fits.toml),
and none of them may be a check figure.
"""

from __future__ import annotations

import dataclasses
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import tomllib
from script_loader import load_script

from hwadvisor.perfmodel import constants

ROOT = Path(__file__).resolve().parents[2]
FITS = ROOT / "hwadvisor" / "perfmodel" / "fits.toml"


@pytest.fixture(scope="module")
def published() -> ModuleType:
    bench = str(ROOT / "benchmarks")
    if bench not in sys.path:
        sys.path.insert(0, bench)
    return load_script("benchmarks/published.py")


@pytest.fixture(scope="module")
def figures(published: ModuleType) -> list:
    return published.load_figures() + published.e2e_figures()


@pytest.fixture(scope="module")
def rows(published: ModuleType, figures: list) -> list:
    return published.evaluate(figures)


@pytest.fixture(scope="module")
def lock(published: ModuleType) -> dict[str, Any]:
    return published.load_lock()


def test_the_check_split_is_as_frozen(published: ModuleType, figures: list,
                                      lock: dict[str, Any]) -> None:
    drift = published.frozen_drift(figures, lock)
    assert not drift, (f"the check split frozen {lock['frozen']} changed: {drift}; a new check "
                       "split is made on purpose: python benchmarks/published.py --freeze DATE")


def test_no_class_is_worse_on_the_check_split_than_recorded(published: ModuleType, rows: list,
                                                            lock: dict[str, Any]) -> None:
    worse = published.worse_than_recorded(rows, lock)
    assert not worse, worse


def test_a_changed_or_new_check_figure_is_caught(published: ModuleType, figures: list,
                                                 lock: dict[str, Any]) -> None:
    check = next(f for f in figures if f.split == "check")
    moved = dataclasses.replace(check, value=check.value * 1.01)
    extra = dataclasses.replace(check, id=check.id + "-copy")
    changed = [moved if f is check else f for f in figures] + [extra]
    assert published.frozen_drift(changed, lock) == [f"added to check: {extra.id}",
                                                     f"changed: {check.id}"]
    # a note may be corrected without a new freeze
    noted = [dataclasses.replace(f, notes=f.notes + " more") for f in figures]
    assert published.frozen_drift(noted, lock) == []


def test_a_worse_check_split_is_caught_and_records_only_go_down(published: ModuleType,
                                                                rows: list,
                                                                lock: dict[str, Any]) -> None:
    worse = [dataclasses.replace(r, error=(r.error or 0.0) * 1.5 + 0.01)
             if r.fig.split == "check" and r.error is not None else r for r in rows]
    assert published.worse_than_recorded(worse, lock)
    assert published.record(worse, lock)["recorded"]["check"] == lock["recorded"]["check"]


def test_a_freeze_needs_a_later_date(published: ModuleType, rows: list, figures: list,
                                     lock: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="not later"):
        published.freeze(rows, figures, lock["frozen"], lock)
    later = published.freeze(rows, figures, "2999-01-01", lock)
    assert later["figures"] == lock["figures"]


def test_every_class_is_recorded(lock: dict[str, Any]) -> None:
    assert set(lock["recorded"]["check"]) >= {"datacenter", "consumer-gpu", "apple", "phone",
                                              "training"}


def _resolve(ref: str) -> Any:
    """The value a fits.toml reference names (KeyError / StopIteration when it does not)."""
    if ":" in ref:
        file, path = ref.split(":", 1)
        base = ROOT / file if file.startswith("profiles/") else ROOT / "hwadvisor" / file
        node: Any = tomllib.loads(base.read_text())
    else:
        name, path = ref.split(".", 1)
        node = getattr(constants, name)
    for part in path.split("."):
        pick = re.fullmatch(r"(.+)\[(.+)\]", part)
        if pick:
            wanted = dict(kv.split("=") for kv in pick.group(2).split(","))
            node = next(item for item in node[pick.group(1)]
                        if all(str(item.get(k)) == v for k, v in wanted.items()))
        elif isinstance(node, tuple | list):
            node = node[int(part)]
        else:
            node = node[part]
    return node


def _fits() -> list[dict[str, Any]]:
    return list(tomllib.loads(FITS.read_text())["fit"])


@pytest.mark.parametrize("fit", _fits(), ids=lambda f: f["values"][0])
def test_each_fit_names_values_that_exist_and_only_tune_figures(fit: dict[str, Any],
                                                                figures: list) -> None:
    for ref in fit["values"]:
        assert isinstance(_resolve(ref), int | float), ref
    split = {f.id: f.split for f in figures}
    assert fit["tune"] or fit.get("data"), "a fit names what it was fitted on"
    for fid in fit["tune"]:
        assert split.get(fid) == "tune", f"{fid} is {split.get(fid, 'not a figure')}"
    for where in fit.get("data", []):
        assert where.startswith("https://") or (ROOT / where).exists(), where


def test_constants_said_to_be_fitted_name_their_figures() -> None:
    """Every constants.py table whose comment says 'fit to the tune split' has a fit entry."""
    text = (ROOT / "hwadvisor" / "perfmodel" / "constants.py").read_text()
    named = {ref.split(".")[0] for fit in _fits() for ref in fit["values"] if ":" not in ref}
    said, comment = set(), []
    for line in text.splitlines():
        head = re.match(r"([A-Z_]+)(?::[^=]+)? = ", line)
        if head and "fit to the tune split" in " ".join(c.lstrip("# ") for c in comment):
            said.add(head.group(1))
        comment = comment + [line] if line.startswith("#") else []
    assert said, "the comment convention changed: update this test"
    assert said <= named, sorted(said - named)
