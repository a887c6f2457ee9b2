"""benchmarks/probe_startup.py: the bytecode check that says when a timing includes compiling."""

from __future__ import annotations

import importlib.util
import py_compile
import sys
from pathlib import Path
from types import ModuleType

import pytest
from script_loader import load_script

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "probe_startup.py"


def _load_script() -> ModuleType:
    return load_script("benchmarks/probe_startup.py")


def _fake_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str) -> Path:
    """Make an importable package `name` (an __init__.py, no bytecode yet) under tmp_path."""
    package = tmp_path / name
    package.mkdir()
    (package / "__init__.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    return package


def test_without_bytecode_lists_a_package_until_it_is_compiled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = _load_script()
    package = _fake_package(tmp_path, monkeypatch, "hwa_fake_pkg")
    init = package / "__init__.py"
    single = tmp_path / "hwa_fake_mod.py"
    single.write_text("VALUE = 2\n")
    names = ("hwa_fake_pkg", "hwa_fake_mod", "hwa_not_installed")

    assert script.without_bytecode(names) == ["hwa_fake_pkg", "hwa_fake_mod"]

    py_compile.compile(str(init), cfile=importlib.util.cache_from_source(str(init)))
    py_compile.compile(str(single), cfile=importlib.util.cache_from_source(str(single)))
    assert script.without_bytecode(names) == []
    assert "hwa_fake_pkg" not in sys.modules  # checking never imports the package


def test_bytecompile_leaves_no_package_without_bytecode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = _load_script()
    package = _fake_package(tmp_path, monkeypatch, "hwa_fake_pkg2")
    (package / "part.py").write_text("VALUE = 2\n")
    names = ("hwa_fake_pkg2", "hwa_not_installed")

    assert script.without_bytecode(names) == ["hwa_fake_pkg2"]
    assert script.bytecompile(names) == []
    assert script.without_bytecode(names) == []
    assert Path(importlib.util.cache_from_source(str(package / "part.py"))).exists()


def test_reports_the_ratio_to_the_dependencies(monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str],
                                               tmp_path: Path) -> None:
    """The probe's start-up against merely importing its dependencies, with the floors."""
    script = _load_script()
    seconds = {"probe": 0.30, "collect_env": 3.0, "deps": 0.15, "deps_basemodel": 0.2,
               "models_floor": 0.25}

    def fake_time_once(argv: list[str], timeout_s: float) -> float:
        name = next(n for n, c in script.COMMANDS.items() if c == argv)
        return seconds[name]

    monkeypatch.setattr(script, "time_once", fake_time_once)
    out = tmp_path / "r.json"
    assert script.main(["--runs", "2", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "ratio probe/deps = 2.00, the median of 2 rounds' ratios (misses the 1.5x target" \
        in printed
    assert "models_floor/deps = 1.67" in printed
    import json

    record = json.loads(out.read_text())
    assert record["deps_ratio"] == pytest.approx(2.0)
    assert record["target_deps_ratio"] == 1.5


def test_paired_rounds_decide_with_their_interval(monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """A host whose speed drifts: each round's ratio is the same, so the interval is tight."""
    script = _load_script()
    speed = iter(x for _ in range(100) for x in (1.0, 1.3, 0.8, 1.6, 1.1, 0.9, 1.2, 1.0))
    base = {"probe": 0.14, "deps": 0.10, "deps_basemodel": 0.12, "models_floor": 0.2}
    ran: list[str] = []
    factor = [1.0]

    def fake_time_once(argv: list[str], timeout_s: float) -> float:
        name = next(n for n, c in script.COMMANDS.items() if c == argv)
        ran.append(name)
        if name == "probe":
            factor[0] = next(speed)  # the round's speed, shared by its commands
        return base[name] * factor[0]

    monkeypatch.setattr(script, "time_once", fake_time_once)
    assert script.main(["--runs", "8", "--no-collect-env"]) == 0
    printed = capsys.readouterr().out
    assert "collect_env" not in ran
    assert "ratio probe/collect_env: n/a (not run)" in printed
    assert "ratio probe/deps = 1.40 [1.40, 1.40], the median of 8 rounds' ratios " \
           "(meets, the whole interval below the 1.5x target" in printed
