"""The import rules of the house (docs/architecture.md), checked on the real import graph.

Every import counts, also those inside functions: a lazy import still makes one module need
another, and a lazy import that hides a cycle is the kind of tangle this test is here to stop.
"""

from __future__ import annotations

import ast
from functools import lru_cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "hwadvisor"

# package -> packages (and top modules) it must never import
FORBIDDEN: dict[str, tuple[str, ...]] = {
    "probe": ("trials", "cli", "rules", "validator", "report", "cluster"),
    # the advice reads what it needs of a datasheet (SoC part, family) from the Device
    "rules": ("trials", "validator", "cli", "report", "cluster", "profiles"),
    # a device carries what the model needs from its datasheet (family, figures): no lookup by id
    "perfmodel": ("rules", "trials", "validator", "cli", "probe", "cluster", "profiles"),
    # serving under load: reads the performance model and the engines, the rules read it
    "serving": ("rules", "trials", "validator", "cli", "report", "cluster", "probe"),
    "trials": ("cli", "rules", "validator", "report", "cluster"),
    "workload": ("rules", "trials", "validator", "cli", "cluster"),
    "report": ("cli", "rules", "trials", "validator", "cluster"),
    # the job under torchrun or srun: the pipeline hands it each rank's work
    "cluster": ("cli", "rules", "validator", "report", "workload", "perfmodel"),
    # datasheets and the hardware rules that go with them (phones' per-app memory)
    "profiles": ("probe", "workload", "perfmodel", "rules", "validator", "trials", "report",
                 "cli", "cluster", "pipeline", "engines"),
    # an engine is data and its renderer: every stage reads it, it reads none of them
    "engines": ("probe", "workload", "perfmodel", "rules", "validator", "trials", "report",
                "cli", "cluster", "pipeline"),
    # the pipeline only chains the stages; trials are reached through validator/measure.py
    "pipeline": ("trials", "cli"),
    # runs trials and turns their samples into verdicts; progress goes out as a callback
    "validator": ("cli",),
    # the CLI parses and prints: it reaches trials (torch) through the validator only
    "cli": ("trials",),
}
# rooms inside a package -> the modules of that package the room must never import. The
# playbooks are data and their vocabulary: the judge, the search and the advice read them.
# The advice runs one way: sizing (what fits where) under the alternatives and the engine's
# config, which know nothing of each other, and advise (the plan and its summary) on top.
ROOMS: dict[str, tuple[str, ...]] = {
    "rules/playbooks": ("judge", "search", "advise", "plan_step", "sizing", "alternatives",
                        "engine_config"),
    "rules/sizing": ("alternatives", "engine_config", "advise"),
    "rules/alternatives": ("engine_config", "advise"),
    "rules/engine_config": ("alternatives", "advise"),
    # the datasheets: the schema, then the files, then matching, then devices built from them
    "profiles/schema": ("catalog", "match", "devices"),
    "profiles/catalog": ("match", "devices"),
    "profiles/match": ("devices",),
}
# No module of these packages grows past this many lines: a module that does several jobs is
# split into rooms, as rules/advise.py was.
MAX_MODULE_LINES = 800
TOP = "(the top of hwadvisor/)"
LINE_CAPPED = ("rules", "serving", TOP)
# models is the contract at the ground floor: it may lean on nothing above it. The root
# package (hwadvisor/__init__.py) holds only the version string the report carries.
MODELS_MAY_IMPORT = ("models", "errors", "units", "")
# third-party libraries and the one package allowed to import each
CONFINED = {"typer": "cli", "rich": "cli", "torch": "trials"}
MAX_LOOSE_MODULES = 6
# The pipeline chains at most this many stage packages; the ground floor (models, errors,
# units) is the contract every stage speaks and does not count. Seven: probe, workload,
# perfmodel, serving, rules, validator and the cluster job.
MAX_PIPELINE_STAGES = 7
GROUND_FLOOR = ("models", "errors", "units", "")
# errors.py and units.py are the floor models stands on: they import no hwadvisor module.
BEDROCK = ("errors", "units")
ARCHITECTURE = ROOT / "docs" / "architecture.md"
MAX_PIPELINE_LINES = 260  # 250, and the load's two calls (estimate and recommend)


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


@lru_cache(maxsize=1)
def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in PACKAGE.rglob("*.py")}


def _resolve(module: str, level: int, current: str, is_package: bool) -> str:
    if level == 0:
        return module
    base = current.split(".") if is_package else current.split(".")[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([module] if module else []))


@lru_cache(maxsize=1)
def _imports() -> dict[str, set[str]]:
    """Module -> every module it imports (hwadvisor modules by name, others by top name)."""
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        found: set[str] = set()
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                target = _resolve(node.module or "", node.level, name, is_package)
                for alias in node.names:
                    sub = f"{target}.{alias.name}"
                    found.add(sub if sub in modules else target)
        graph[name] = found
    return graph


def _package_of(module: str) -> str:
    """'hwadvisor.rules.judge' -> 'rules'; 'hwadvisor.errors' -> 'errors'; root -> ''."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _internal(module: str) -> bool:
    return module == "hwadvisor" or module.startswith("hwadvisor.")


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_package_imports_run_one_way(package: str) -> None:
    bad = []
    for module, imported in _imports().items():
        if _package_of(module) != package:
            continue
        for target in imported:
            if _internal(target) and _package_of(target) in FORBIDDEN[package]:
                bad.append(f"{module} imports {target}")
    assert not bad, "\n".join(sorted(bad))


def _room_breaches(graph: dict[str, set[str]], room: str, banned: tuple[str, ...]) -> list[str]:
    """Imports from modules inside `room` ('rules/playbooks') of its package's `banned` modules."""
    package = room.split("/")[0]
    inside = "hwadvisor." + room.replace("/", ".")
    targets = tuple(f"hwadvisor.{package}.{name}" for name in banned)
    return sorted(
        f"{module} imports {target}"
        for module, imported in graph.items()
        if module == inside or module.startswith(inside + ".")
        for target in imported
        if any(target == t or target.startswith(t + ".") for t in targets))


@pytest.mark.parametrize("room", sorted(ROOMS))
def test_rooms_import_one_way(room: str) -> None:
    bad = _room_breaches(_imports(), room, ROOMS[room])
    assert not bad, "\n".join(bad)


def _in_capped(module: str, package: str) -> bool:
    """Tell whether a module is in `package`, or loose at the top of hwadvisor for TOP."""
    if package == TOP:
        return module.count(".") == 1 and not _modules()[module].name == "__init__.py" \
            and not _modules()[module].with_suffix("").is_dir()
    return _package_of(module) == package


@pytest.mark.parametrize("package", LINE_CAPPED)
def test_no_module_does_several_jobs(package: str) -> None:
    long = [f"{name}: {lines} lines" for name, path in sorted(_modules().items())
            if _in_capped(name, package)
            for lines in [len(path.read_text(encoding="utf-8").splitlines())]
            if lines > MAX_MODULE_LINES]
    assert not long, "\n".join(long)


def test_the_room_check_finds_a_breach() -> None:
    graph = {"hwadvisor.rules.playbooks.schema": {"hwadvisor.rules.judge"},
             "hwadvisor.rules.search": {"hwadvisor.rules.playbooks.schema"}}
    assert _room_breaches(graph, "rules/playbooks", ("judge",)) == [
        "hwadvisor.rules.playbooks.schema imports hwadvisor.rules.judge"]


def test_models_import_only_the_ground_floor() -> None:
    bad = [
        f"{module} imports {target}"
        for module, imported in _imports().items()
        if _package_of(module) == "models"
        for target in imported
        if _internal(target) and _package_of(target) not in MODELS_MAY_IMPORT
    ]
    assert not bad, "\n".join(sorted(bad))


@pytest.mark.parametrize("library", sorted(CONFINED))
def test_heavy_libraries_stay_in_their_package(library: str) -> None:
    home = CONFINED[library]
    bad = [
        f"{module} imports {target}"
        for module, imported in _imports().items()
        if _package_of(module) != home
        for target in imported
        if target == library or target.startswith(library + ".")
    ]
    assert not bad, "\n".join(sorted(bad))


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(node: str) -> None:
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in graph:
                continue
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_cycles() -> None:
    graph = {m: {t for t in imported if t in _modules()} for m, imported in _imports().items()}
    # A package's __init__ re-exporting its own modules is not a cycle of dependencies.
    for module in graph:
        graph[module] = {t for t in graph[module] if not (
            module.startswith(t + ".") and _modules()[t].name == "__init__.py")}
    assert _cycles(graph) == []


def _stages_of(module: str) -> set[str]:
    return {_package_of(t) for t in _imports()[module]
            if _internal(t) and _package_of(t) not in GROUND_FLOOR}


def _package_graph() -> dict[str, set[str]]:
    """Package -> the other packages (and top modules) its modules import."""
    graph: dict[str, set[str]] = {}
    for module, imported in _imports().items():
        package = _package_of(module)
        targets = {_package_of(t) for t in imported if _internal(t)}
        graph.setdefault(package, set()).update(targets - {package})
    return graph


def test_no_import_cycles_between_packages() -> None:
    # Stricter than modules: rules -> perfmodel -> rules through two different modules is a
    # tangle of the house even when no single chain of modules closes.
    assert _cycles(_package_graph()) == []


@pytest.mark.parametrize("module", BEDROCK)
def test_errors_and_units_import_nothing_of_hwadvisor(module: str) -> None:
    imported = _imports()[f"hwadvisor.{module}"]
    assert not [t for t in imported if _internal(t)], sorted(imported)


def _table_rows() -> dict[str, str]:
    """docs/architecture.md's package table: package -> its "must not import" cell."""
    rows: dict[str, str] = {}
    for line in ARCHITECTURE.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not cells[0].startswith("`"):
            continue
        name = cells[0].split("`")[1].removesuffix("/").removesuffix(".py")
        rows[name] = cells[2]
    return rows


def test_every_row_of_the_architecture_table_is_enforced() -> None:
    rows = _table_rows()
    assert {"probe", "workload", "perfmodel", "rules", "validator", "trials", "cluster", "report",
            "engines", "pipeline", "cli", "models", "profiles"} <= set(rows), sorted(rows)
    unchecked = []
    for package, cell in rows.items():
        if cell == "—":
            continue
        if cell.startswith("anything but"):
            allowed = {w.strip().strip("`") for w in cell.removeprefix("anything but").split(",")}
            assert allowed | {""} == set(MODELS_MAY_IMPORT), (package, cell)
            continue
        stated = {w.strip() for w in cell.split("(")[0].split(",")}
        unchecked += [f"{package} must not import {w}" for w in stated
                      if w not in FORBIDDEN.get(package, ROOMS.get(package, ()))]
    assert not unchecked, "docs/architecture.md states, FORBIDDEN lacks:\n" + "\n".join(unchecked)


def test_the_table_reader_reads_a_row() -> None:
    assert _table_rows()["validator"] == "cli"


def test_the_pipeline_only_chains() -> None:
    stages = _stages_of("hwadvisor.pipeline")
    assert len(stages) <= MAX_PIPELINE_STAGES, sorted(stages)
    lines = len((PACKAGE / "pipeline.py").read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_PIPELINE_LINES, f"pipeline.py has {lines} lines: move stage work out"


def test_few_loose_modules_at_the_top() -> None:
    loose = sorted(p.name for p in PACKAGE.glob("*.py") if not p.name.startswith("__"))
    assert len(loose) <= MAX_LOOSE_MODULES, loose


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]
