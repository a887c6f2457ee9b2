"""Load a script of scripts/ or benchmarks/ as a module, for the tests that check it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def load_script(relative: str, name: str | None = None) -> ModuleType:
    """Import ROOT/relative (e.g. "scripts/scenarios.py") under its file name, or `name`.

    The module is registered in sys.modules before it runs: dataclasses look their module up
    while it loads.
    """
    path = ROOT / relative
    name = name or path.stem
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
