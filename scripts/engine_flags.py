"""Build the table of flags and keys each engine accepts, from the engine's own code.

For every engine hwadvisor emits configs for, this downloads the engine's wheel or sdist at the
version pinned below (from PyPI, without dependencies, sha256-checked), reads its source
statically (Python `ast` over argparse `add_argument` calls and dataclass / pydantic fields;
for llama.cpp a reader of `common_arg({...})` declarations in common/arg.cpp and of llama-bench's
own argument loop) and writes tests/fixtures/engine_flags/<engine>.json:

    {engine, package, version, files_read, extracted_at,
     commands: {command: {flags: {"--name": {type, choices, default, aliases, takes_value}}}}}

For TOML / JSON / Python-keyword configs the "flags" are dotted keys ("parallelism.tp_degree").
Nothing is imported from the engines: the tables come from reading their code.

Run: python scripts/engine_flags.py                 # (re)write every table
     python scripts/engine_flags.py --engine vllm   # one engine
     python scripts/engine_flags.py --check         # report drift against the committed tables
     python scripts/engine_flags.py --engine trtllm --trtllm-git DIR  # DIR: a clone of
         github.com/nctu6/vllm-tensorrt (TensorRT-LLM's package, vendored; see TRTLLM_GIT)

The pins must equal the versions the engine entries name; tests/engines/test_flags.py checks it.
"""

from __future__ import annotations

import argparse
import ast
import datetime
import hashlib
import json
import re
import subprocess
import sys
import tarfile
import urllib.parse
import urllib.request
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT_DIR = ROOT / "tests" / "fixtures" / "engine_flags"
CACHE = Path("/tmp/engine_flags_cache")
# mlc-llm publishes no PyPI release; its table is read from a git checkout of the pinned commit
# (pass --mlc-llm-git DIR, a clone or mirror of github.com/mlc-ai/mlc-llm).
MLC_LLM_COMMIT = "79d603f"
# TensorRT-LLM's PyPI releases (1.2.0rc2 to 1.4.0rc1) are stub sdists without the package (the
# wheels are on NVIDIA's own index) and its repository is too large to mirror here. Its table is
# read from a copy of the Python package that github.com/nctu6/vllm-tensorrt vendors, whole,
# under third_party/tensorrt_llm at the commit below: upstream main when tensorrt_llm/version.py
# said 1.3.0rc3 (the tree's CI image tags are of 2026-02-01; the vendoring commit is of
# 2026-02-07; 1.3.0rc3 was published on 2026-02-12). The repository's top-level tensorrt_llm/
# is that project's modified copy (extra serve flags) and is not read. Pass --trtllm-git DIR,
# a clone or mirror of that repository.
TRTLLM_GIT = ("https://github.com/nctu6/vllm-tensorrt",
              "95c8e29a28cb60170413e25671dffba8b68cd863", "third_party/tensorrt_llm/tensorrt_llm")

Flags = dict[str, dict[str, Any]]
# Older releases a plan may start from (`--engine vllm==0.6.0`) whose configs are said in that
# release's flags (the engine's [[history]] config_steps): their tables are written beside the
# pinned one as <engine>@<version>.json, read the same way from that release's sdist.
PAST: dict[str, tuple[str, ...]] = {"vllm": ("0.6.0",)}


@dataclass(frozen=True)
class Pin:
    """One engine's package at the version its engine entry names."""

    package: str
    version: str
    dist: str  # "sdist", "wheel", or a substring of the wheel file name to pick
    extra: tuple[tuple[str, str, str], ...] = ()  # more packages: (package, version, dist)


PINS: dict[str, Pin] = {
    "vllm": Pin("vllm", "0.33.0", "sdist"),
    "sglang": Pin("sglang", "0.5.23", "cp311-cp311-manylinux_2_34_x86_64"),
    "trtllm": Pin("tensorrt-llm", "1.3.0rc3", "git"),
    "llamacpp": Pin("llama-cpp-python", "0.3.36", "sdist"),
    "exllamav2": Pin("exllamav2", "0.3.2", "wheel"),
    "mlx": Pin("mlx-lm", "0.32.2", "wheel"),
    "executorch": Pin("executorch", "1.5.1", "cp311-cp311-manylinux_2_28_x86_64"),
    # qnn and coreml render ExecuTorch exports with the QNN / Core ML delegate: export_llm's
    # LlmConfig (backend.qnn.*, backend.coreml.*) at the same pin is their table.
    "qnn": Pin("executorch", "1.5.1", "cp311-cp311-manylinux_2_28_x86_64"),
    "coreml": Pin("executorch", "1.5.1", "cp311-cp311-manylinux_2_28_x86_64"),
    # The engines' other tools (other_configs in their data files): a coremltools conversion
    # for coreml, Genie's genie_config.json for qnn (keys as Qualcomm AI Hub's exporter writes
    # them: qai_hub_models' create_genie_config).
    "coremltools": Pin("coremltools", "9.0", "cp311-none-manylinux1_x86_64"),
    "genie": Pin("qai-hub-models", "0.65.0", "py3-none-any"),
    "mlc-llm": Pin("mlc-llm", MLC_LLM_COMMIT, "git"),
    "litert": Pin("litert-lm", "0.18.1", "wheel"),
    "torchtitan": Pin("torchtitan", "0.2.2", "wheel"),
    "megatron": Pin("megatron-core", "0.19.2", "sdist"),
    "deepspeed": Pin("deepspeed", "0.19.6", "sdist"),
    "hf": Pin("transformers", "5.24.0", "wheel", (("accelerate", "1.15.0", "wheel"),)),
    # torchrun, the launcher torchtitan, Megatron-LM and the HF Trainer start on several nodes
    # with: read from torch/distributed/run.py of the torch installed beside this script (PyPI's
    # torch wheels are CUDA builds of ~800 MB; the launcher's arguments are the same in the CPU
    # build), refused unless its version is the pin.
    "torchrun": Pin("torch", "2.13.0", "installed"),
}


# ---------------------------------------------------------------------------------------------
# Fetching


def _release_file(package: str, version: str, dist: str) -> dict[str, Any]:
    """Return PyPI's record of the file to fetch for one package version."""
    url = f"https://pypi.org/pypi/{package}/json"
    with urllib.request.urlopen(url, timeout=60) as resp:  # noqa: S310 - fixed https URL
        files = json.load(resp)["releases"].get(version)
    if not files:
        raise SystemExit(f"{package}=={version} is not on PyPI")
    if dist == "sdist":
        chosen = [f for f in files if f["packagetype"] == "sdist"]
    elif dist == "wheel":
        chosen = [f for f in files if f["packagetype"] == "bdist_wheel"]
    else:
        chosen = [f for f in files if dist in f["filename"]]
    if not chosen:
        raise SystemExit(f"{package}=={version}: no {dist} file")
    record = dict(chosen[0])
    record["url"] = urllib.parse.urljoin(url, record["url"])
    return record


def fetch(package: str, version: str, dist: str) -> Path:
    """Download (once) and unpack one release; return the folder it was unpacked into.

    The file is fetched as PyPI lists it and checked against PyPI's sha256. pip download is
    not used for sdists because it runs the package's build backend to read its metadata,
    which for vLLM or DeepSpeed needs torch and a CUDA toolchain; nothing here is built.
    """
    dest = CACHE / "src" / f"{package}-{version}"
    if dest.exists():
        return dest
    record = _release_file(package, version, dist)
    archive = CACHE / record["filename"]
    if not archive.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        print(f"downloading {record['filename']}", file=sys.stderr)
        urllib.request.urlretrieve(record["url"], archive)  # noqa: S310 - PyPI https URL
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    if digest != record["digests"]["sha256"]:
        archive.unlink()
        raise SystemExit(f"{record['filename']}: sha256 mismatch")
    tmp = dest.with_suffix(".part")
    if archive.name.endswith(".whl"):
        with zipfile.ZipFile(archive) as zf:
            zf.extractall(tmp)
    else:
        with tarfile.open(archive) as tf:
            tf.extractall(tmp, filter="data")
    tmp.rename(dest)
    return dest


def installed(package: str, version: str) -> Path:
    """Return the site-packages folder of an installed package at this version.

    Nothing is imported from it: importlib.metadata reads its dist-info.
    """
    import importlib.metadata

    try:
        dist = importlib.metadata.distribution(package)
    except importlib.metadata.PackageNotFoundError:
        raise SystemExit(f"{package} is not installed beside this script") from None
    if dist.version.split("+")[0] != version:
        raise SystemExit(f"{package} {dist.version} is installed, the pin is {version}")
    return Path(str(dist.locate_file("")))


def fetch_git(repo_dir: Path, commit: str, subdir: str, name: str) -> Path:
    """Export one folder of a git checkout at a commit into the cache; return it."""
    dest = CACHE / "src" / f"{name}-{commit}"
    if dest.exists():
        return dest
    tmp = dest.with_suffix(".part")
    tmp.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "--git-dir", str(repo_dir), "archive", commit, subdir],
                             check=True, capture_output=True).stdout
    tar_path = CACHE / f"{name}-{commit}.tar"
    tar_path.write_bytes(archive)
    with tarfile.open(tar_path) as tf:
        tf.extractall(tmp, filter="data")
    tmp.rename(dest)
    return dest


def find(root: Path, relative: str) -> Path:
    """Return the one file under root whose path ends with relative."""
    hits = sorted(p for p in root.rglob(Path(relative).name) if p.as_posix().endswith(relative))
    if not hits:
        raise SystemExit(f"{relative} not found under {root}")
    return hits[0]


# ---------------------------------------------------------------------------------------------
# Python source, read with ast


@dataclass
class PyIndex:
    """Every class, Literal alias and list constant of a package's Python files."""

    root: Path
    classes: dict[str, tuple[Path, ast.ClassDef]] = field(default_factory=dict)
    literals: dict[str, list[Any]] = field(default_factory=dict)
    constants: dict[str, Any] = field(default_factory=dict)
    read: set[Path] = field(default_factory=set)

    @classmethod
    def build(cls, root: Path, subdirs: tuple[str, ...] = ("",)) -> PyIndex:
        """Parse every .py file under root/subdir (files that do not parse are skipped)."""
        index = cls(root)
        paths = [p for sub in subdirs for p in sorted((root / sub).rglob("*.py"))]
        for _ in range(2):  # a second pass resolves aliases that name later ones
            for path in paths:
                index.add(path)
        return index

    def add(self, path: Path) -> None:
        """Index one file's classes and module-level Literal aliases and constants."""
        try:
            tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
        except SyntaxError:
            return
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                self.classes.setdefault(node.name, (path, node))
            target, value = _assigned(node)
            if target is None or value is None:
                continue
            choices = _literal_values(value, self)
            if choices is not None:
                self.literals[target] = choices
            else:
                constant = _constant(value, self)
                if constant is not None:
                    self.constants.setdefault(target, constant)

    def cls(self, name: str) -> ast.ClassDef | None:
        """Return a class by name, and remember its file as read."""
        hit = self.classes.get(name)
        if hit is None:
            return None
        self.read.add(hit[0])
        return hit[1]

    def files(self) -> list[str]:
        """Return the files read, relative to the package root."""
        return sorted(p.relative_to(self.root).as_posix() for p in self.read)


def _assigned(node: ast.stmt) -> tuple[str | None, ast.expr | None]:
    """Return (name, value) of a module-level `NAME = value` or `NAME: T = value`."""
    if isinstance(node, ast.Assign) and len(node.targets) == 1 \
            and isinstance(node.targets[0], ast.Name):
        return node.targets[0].id, node.value
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return node.target.id, node.value
    return None, None


def _literal_values(node: ast.expr, index: PyIndex | None) -> list[Any] | None:
    """Return the values of Literal[...] (or a union of Literals / aliases), else None."""
    if isinstance(node, ast.Subscript) and _name(node.value) == "Literal":
        items = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        values: list[Any] = []
        for item in items:
            value = _literal(item)
            if value is _UNKNOWN:  # Literal["a", OtherLiteralAlias]
                nested = _literal_values(item, index)
                if nested is None:
                    return None
                values.extend(nested)
            else:
                values.append(value)
        return values
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        left = _literal_values(node.left, index)
        right = _literal_values(node.right, index)
        if left is not None and right is not None:
            return left + right
    if isinstance(node, ast.Name) and index is not None and node.id in index.literals:
        return index.literals[node.id]
    return None


_UNKNOWN = object()


def _literal(node: ast.expr) -> Any:
    """Return a literal's value, or _UNKNOWN."""
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return _UNKNOWN


def _constant(node: ast.expr, index: PyIndex) -> Any:
    """Return a list/tuple/str constant (lists may add named lists), else None."""
    value = _literal(node)
    if value is not _UNKNOWN and isinstance(value, (list, tuple, set, str)):
        return list(value) if not isinstance(value, str) else value
    return _sum_of_lists(node, index)


def _name(node: ast.expr | None) -> str:
    """Return the last name of a Name or dotted Attribute (typing.Literal -> Literal)."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def _choices(node: ast.expr, index: PyIndex) -> list[Any] | None:
    """Return argparse choices when they are a literal or a named list constant."""
    value = _literal(node)
    if value is not _UNKNOWN and isinstance(value, (list, tuple, set)):
        return sorted(value, key=str) if isinstance(value, set) else list(value)
    if isinstance(node, ast.Name):
        const = index.constants.get(node.id)
        if isinstance(const, list):
            return const
        return index.literals.get(node.id)
    if isinstance(node, ast.Call) and _name(node.func) in {"list", "sorted", "tuple"} \
            and node.args:
        return _choices(node.args[0], index)
    return _sum_of_lists(node, index)


def _sum_of_lists(node: ast.expr, index: PyIndex) -> list[Any] | None:
    """Return `A + B` of two lists of choices, else None."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _choices(node.left, index), _choices(node.right, index)
        if left is not None and right is not None:
            return left + right
    return None


def _default(node: ast.expr | None) -> Any:
    """Return a default as JSON-able data: the literal, or its source text when not one."""
    if node is None:
        return None
    if isinstance(node, ast.Call) and _name(node.func) in {"field", "Field"}:
        for kw in node.keywords:
            if kw.arg == "default":
                return _default(kw.value)
            if kw.arg == "default_factory":
                return f"<factory {ast.unparse(kw.value)}>"
        if node.args and not (isinstance(node.args[0], ast.Constant)
                              and node.args[0].value is Ellipsis):
            return _default(node.args[0])
        return None
    value = _literal(node)
    if value is _UNKNOWN:
        return ast.unparse(node)
    if isinstance(value, (set, tuple)):
        return list(value)
    return value if isinstance(value, (str, int, float, bool, list, dict, type(None))) \
        else ast.unparse(node)


def _union_parts(node: ast.expr) -> list[ast.expr]:
    """Split X | Y, Optional[X] and Union[X, Y] into their parts."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return _union_parts(node.left) + _union_parts(node.right)
    if isinstance(node, ast.Subscript) and _name(node.value) in {"Optional", "Union"}:
        items = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        return [p for item in items for p in _union_parts(item)]
    if isinstance(node, ast.Subscript) and _name(node.value) == "Annotated":
        items = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        return _union_parts(items[0])
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        try:
            return _union_parts(ast.parse(node.value, mode="eval").body)
        except SyntaxError:
            return [node]
    return [node]


_SCALARS = {"bool": "bool", "int": "int", "float": "float", "str": "str", "Path": "str"}
_LISTS = {"list", "List", "tuple", "Tuple", "set", "Set", "Sequence"}
_DICTS = {"dict", "Dict", "Mapping"}


def annotation_type(node: ast.expr | None, index: PyIndex) -> tuple[str, list[Any] | None, str]:
    """Return (type, choices, class name for a nested config) of a field annotation.

    Types: bool, int, float, str, list, json (a dict), choice values' own type when only
    Literal values are allowed, "object" for anything else (an enum, a torch dtype ...).
    """
    if node is None:
        return "object", None, ""
    parts = [p for p in _union_parts(node) if not (_name(p) == "None"
                                                   or (isinstance(p, ast.Constant)
                                                       and p.value is None))]
    kinds: list[str] = []
    choices: list[Any] | None = None
    nested = ""
    for part in parts:
        values = _literal_values(part, index)
        if values is not None:
            choices = (choices or []) + values
            kinds.append(type(values[0]).__name__ if values else "str")
            continue
        head = _name(part.value) if isinstance(part, ast.Subscript) else _name(part)
        if head in _SCALARS:
            kinds.append(_SCALARS[head])
        elif head in _LISTS:
            kinds.append("list")
        elif head in _DICTS:
            kinds.append("json")
        elif head and index.cls(head) is not None and _is_config_class(index.cls(head)):
            kinds.append("section")
            nested = nested or head
        else:
            kinds.append("object")
    for kind in ("bool", "section", "list", "json", "int", "float", "str"):
        if kind in kinds:
            if kind == "str" and choices is not None and "object" not in kinds:
                return "str", choices, nested
            return kind, (choices if kind not in {"bool", "section"} else None), nested
    return "object", choices, nested


def _is_config_class(node: ast.ClassDef | None) -> bool:
    """Tell whether a class holds config fields (annotated class attributes)."""
    if node is None:
        return False
    return any(isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name) for s in node.body)


def class_fields(index: PyIndex, name: str, seen: frozenset[str] = frozenset()) \
        -> dict[str, tuple[ast.expr, ast.expr | None]]:
    """Return {field: (annotation, default)} of a dataclass / pydantic class and its bases."""
    node = index.cls(name)
    if node is None or name in seen:
        return {}
    out: dict[str, tuple[ast.expr, ast.expr | None]] = {}
    for base in node.bases:
        out.update(class_fields(index, _name(base), seen | {name}))
    for stmt in node.body:
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            if _name(stmt.annotation) == "ClassVar" or (
                    isinstance(stmt.annotation, ast.Subscript)
                    and _name(stmt.annotation.value) == "ClassVar"):
                continue
            out[stmt.target.id] = (stmt.annotation, stmt.value)
    return out


def field_aliases(default: ast.expr | None, name: str = "") -> list[str]:
    """Return the pydantic Field(alias=...) names of a field, if any.

    `validation_alias=AliasChoices("a", "b")` accepts each of its names; the field's own name
    among them is not an alias.
    """
    if isinstance(default, ast.Call) and _name(default.func) == "Field":
        for kw in default.keywords:
            if kw.arg in {"alias", "validation_alias"} and isinstance(kw.value, ast.Constant):
                return [str(kw.value.value)]
            if kw.arg == "validation_alias" and isinstance(kw.value, ast.Call) \
                    and _name(kw.value.func) == "AliasChoices":
                return [str(a.value) for a in kw.value.args
                        if isinstance(a, ast.Constant) and a.value != name]
    return []


def flag(type_: str, choices: list[Any] | None = None, default: Any = None,
         aliases: list[str] | None = None, takes_value: bool = True, **more: Any) -> dict[str, Any]:
    """Return one flag/key record of a table."""
    record = {"type": type_, "choices": choices, "default": default,
              "aliases": aliases or [], "takes_value": takes_value}
    record.update({k: v for k, v in more.items() if v is not None})
    return record


def config_keys(index: PyIndex, name: str, prefix: str = "",
                depth: int = 0) -> Flags:
    """Return the dotted keys of a config class tree (nested config classes become sections)."""
    keys: Flags = {}
    for fname, (ann, default) in class_fields(index, name).items():
        if fname.startswith("_"):
            continue
        type_, choices, nested = annotation_type(ann, index)
        key = f"{prefix}{fname}"
        keys[key] = flag(type_, choices, _default(default), field_aliases(default, fname))
        if nested and depth < 6:
            keys.update(config_keys(index, nested, key + ".", depth + 1))
    return keys


# ---------------------------------------------------------------------------------------------
# argparse


@dataclass
class ArgparseReader:
    """Reads `add_argument` calls; `**X_kwargs["field"]` resolves through get_kwargs(Cls)."""

    index: PyIndex
    kwargs_fn: str = "get_kwargs"

    def read(self, tree: ast.AST) -> Flags:
        """Return the flags of every add_argument call under tree."""
        flags: Flags = {}
        for scope in [tree, *[n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]]:
            sources = self._kwargs_sources(scope)
            for call in self._calls(scope):
                record = self._flag(call, sources)
                if record is not None:
                    names, rec = record
                    rec["aliases"] = names[1:] + rec["aliases"]
                    flags.setdefault(names[0], rec)
        return flags

    def _calls(self, scope: ast.AST) -> Iterator[ast.Call]:
        """Yield the add_argument calls of a scope, not of nested functions."""
        stack = list(ast.iter_child_nodes(scope))
        while stack:
            node = stack.pop(0)
            if isinstance(node, ast.FunctionDef) and node is not scope:
                continue
            if isinstance(node, ast.Call) and _name(node.func) == "add_argument":
                yield node
            stack.extend(ast.iter_child_nodes(node))

    def _kwargs_sources(self, scope: ast.AST) -> dict[str, str]:
        """Map `x_kwargs = get_kwargs(SomeConfig)` variable names to the config class."""
        out: dict[str, str] = {}
        for node in ast.walk(scope):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) \
                    and _name(node.value.func) == self.kwargs_fn and node.value.args:
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        out[target.id] = _name(node.value.args[0])
        return out

    def _flag(self, call: ast.Call, sources: dict[str, str]) \
            -> tuple[list[str], dict[str, Any]] | None:
        names = [a.value for a in call.args
                 if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        names = [n for n in names if n.startswith("-")]
        if not names:
            return None
        rec = flag("str")
        for kw in call.keywords:
            if kw.arg is None:
                rec.update(self._from_field(kw.value, sources))
        for kw in call.keywords:
            if kw.arg is not None:
                self._keyword(rec, kw.arg, kw.value, names)
        return names, rec

    def _from_field(self, node: ast.expr, sources: dict[str, str]) -> dict[str, Any]:
        """Resolve **x_kwargs["field"] (or **get_kwargs(Cls)["field"]) to a flag record."""
        if not (isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant)):
            return {}
        owner = node.value
        cls_name = sources.get(owner.id, "") if isinstance(owner, ast.Name) else (
            _name(owner.args[0]) if isinstance(owner, ast.Call) and owner.args else "")
        fields = class_fields(self.index, cls_name)
        name = str(node.slice.value)
        if name not in fields:
            return {"source": f"{cls_name}.{name}"}
        ann, default = fields[name]
        return dataclass_flag(ann, default, self.index, f"{cls_name}.{name}")

    def _keyword(self, rec: dict[str, Any], arg: str, value: ast.expr,
                 names: list[str]) -> None:
        """Apply one add_argument keyword to the record."""
        if arg == "action":
            action = _literal(value)
            if action in {"store_true", "store_false", "store_const", "count", "help", "version"}:
                rec.update(type="bool", takes_value=False, choices=None)
            elif _name(value) and ("StoreTrue" in _name(value) or "StoreFalse" in _name(value)):
                # an Action subclass named after store_true (SGLang's DeprecatedStoreTrueAction
                # for --enable-dp-attention): a switch, like the action it wraps
                rec.update(type="bool", takes_value=False, choices=None)
            elif _name(value) == "BooleanOptionalAction":
                rec.update(type="bool", takes_value=False, choices=None)
                rec["aliases"] = rec["aliases"] + [
                    "--no-" + n[2:] for n in names if n.startswith("--")]
            elif action == "append":
                rec["repeatable"] = True
        elif arg == "type":
            rec["type"] = _type_of(value)
        elif arg == "choices":
            rec["choices"] = _choices(value, self.index)
        elif arg == "default":
            rec["default"] = _default(value)
        elif arg == "nargs":
            nargs = _literal(value)
            rec["nargs"] = nargs if nargs is not _UNKNOWN else ast.unparse(value)
            if nargs == 0:
                rec["takes_value"] = False


_TYPE_FUNCS = {"int": "int", "float": "float", "str": "str", "loads": "json",
               "human_readable_int": "int", "human_readable_int_or_auto": "int",
               "positive_int": "int", "non_negative_int": "int"}


def _type_of(node: ast.expr) -> str:
    """Return the value type an argparse type= callable parses to."""
    if isinstance(node, ast.Call) and _name(node.func) == "optional_type" and node.args:
        return _type_of(node.args[0])
    return _TYPE_FUNCS.get(_name(node), "str")


def dataclass_flag(ann: ast.expr, default: ast.expr | None, index: PyIndex,
                   source: str) -> dict[str, Any]:
    """Return the flag record vLLM-style get_kwargs / Megatron's factory make from a field."""
    type_, choices, nested = annotation_type(ann, index)
    rec = flag(type_, choices, _default(default), source=source)
    if type_ == "bool":
        rec["takes_value"] = False
    if type_ == "section":
        rec["type"] = "json"  # a nested config given as one JSON string
    return rec


def argparse_table(path: Path, index: PyIndex) -> Flags:
    """Return the flags of every add_argument call of one file."""
    index.read.add(path)
    return ArgparseReader(index).read(ast.parse(path.read_text(encoding="utf-8")))


def generated_flags(index: PyIndex, cls_name: str, exclude: set[str],
                    bool_style: str) -> Flags:
    """Return flags generated from every field of a dataclass, named --field-name.

    bool_style "optional": --x / --no-x (vLLM's BooleanOptionalAction); "megatron": --x when
    the default is False, else --no-x / --disable-x (argument_utils.ArgumentGroupFactory).
    """
    flags: Flags = {}
    for fname, (ann, default) in class_fields(index, cls_name).items():
        if fname in exclude or fname.startswith("_"):
            continue
        rec = dataclass_flag(ann, default, index, f"{cls_name}.{fname}")
        name = "--" + fname.replace("_", "-")
        if rec["type"] == "bool":
            if bool_style == "optional":
                rec["aliases"] = ["--no-" + fname.replace("_", "-")]
            elif rec["default"] is True:
                name = "--no-" + fname.replace("_", "-")
                rec["aliases"] = ["--disable-" + fname.replace("_", "-")]
        meta_names = _argparse_meta_names(default)
        if meta_names:
            name, rec["aliases"] = meta_names[0], meta_names[1:]
        flags[name] = rec
    return flags


def _argparse_meta_names(default: ast.expr | None) -> list[str]:
    """Return field(metadata={"argparse_meta": {"arg_names": [...]}}) names, if literal."""
    if not isinstance(default, ast.Call):
        return []
    for kw in default.keywords:
        if kw.arg == "metadata":
            meta = _literal(kw.value)
            if isinstance(meta, dict):
                names = meta.get("argparse_meta", {}).get("arg_names")
                if isinstance(names, list):
                    return [str(n) for n in names]
    return []


def factory_calls(tree: ast.AST, factory: str) -> list[tuple[str, set[str]]]:
    """Return (config class, excluded fields) of every ArgumentGroupFactory(Cls, exclude=[...])."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _name(node.func) == factory and node.args:
            exclude: set[str] = set()
            for kw in node.keywords:
                if kw.arg == "exclude":
                    value = _literal(kw.value)
                    exclude = set(value) if isinstance(value, (list, tuple)) else set()
            out.append((_name(node.args[0]), exclude))
    return out


def callable_params(index: PyIndex, cls_name: str, method: str = "__init__") -> Flags:
    """Return the keyword parameters of a class's method (its __init__ by default)."""
    node = index.cls(cls_name)
    if node is None:
        return {}
    for stmt in node.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name == method:
            return _params(stmt, index)
    for base in node.bases:
        found = callable_params(index, _name(base), method)
        if found:
            return found
    return {}


def _params(fn: ast.FunctionDef | ast.AsyncFunctionDef, index: PyIndex) -> Flags:
    """Return a function's named parameters with their annotation type and default."""
    args = fn.args
    positional = args.posonlyargs + args.args
    defaults: list[ast.expr | None] = [None] * (len(positional) - len(args.defaults)) \
        + list(args.defaults)
    pairs = list(zip(positional, defaults, strict=True)) \
        + list(zip(args.kwonlyargs, args.kw_defaults, strict=True))
    out: Flags = {}
    for arg, default in pairs:
        if arg.arg in {"self", "cls"}:
            continue
        type_, choices, _ = annotation_type(arg.annotation, index)
        out[arg.arg] = flag(type_ if arg.annotation is not None else "object", choices,
                            _default(default))
    return out


# ---------------------------------------------------------------------------------------------
# The engines


def _command(flags: Flags, **meta: Any) -> dict[str, Any]:
    return {**meta, "flags": dict(sorted(flags.items()))}


def extract_vllm(root: Path) -> tuple[dict[str, Any], list[str]]:
    """`vllm serve`: EngineArgs.add_cli_args (flags from config dataclasses) + FrontendArgs."""
    pkg = find(root, "vllm/engine/arg_utils.py").parents[1]
    index = PyIndex.build(pkg, ("config", "engine", "entrypoints", "model_executor/layers/"
                                "quantization", "v1/attention", "compilation", "attention"))
    flags = argparse_table(pkg / "engine" / "arg_utils.py", index)
    # the server's own flags: entrypoints/common/ now, entrypoints/openai/ in older releases
    for cli_args in (pkg / "entrypoints" / "common" / "cli_args.py",
                     pkg / "entrypoints" / "openai" / "cli_args.py"):
        if cli_args.exists():
            flags.update(argparse_table(cli_args, index))
            break
    for cls in ("FrontendArgs", "BaseFrontendArgs"):
        if index.cls(cls) is not None:
            for name, rec in generated_flags(index, cls, set(), "optional").items():
                flags.setdefault(name, rec)
    commands = {"vllm serve": _command(flags, positional=["model_tag"])}
    # `vllm bench latency` (what `recommend --validate` runs): latency.add_cli_args, which
    # adds its own flags and then EngineArgs.add_cli_args (the engine flags of `vllm serve`).
    latency = pkg / "benchmarks" / "latency.py"
    if latency.exists():
        bench = argparse_table(latency, index)
        engine = argparse_table(pkg / "engine" / "arg_utils.py", index)
        commands["vllm bench latency"] = _command({**engine, **bench})
    # `vllm bench serve` (the serving benchmark engines/data/*.toml [bench_serve] emits): its
    # own add_cli_args, which starts with the data sets' (benchmarks/datasets/).
    serve = pkg / "benchmarks" / "serve.py"
    if serve.exists():
        flags = argparse_table(serve, index)
        for path in sorted((pkg / "benchmarks" / "datasets").glob("*.py")):
            for name, rec in argparse_table(path, index).items():
                flags.setdefault(name, rec)
        commands["vllm bench serve"] = _command(flags)
    return commands, index.files()


def extract_sglang(root: Path) -> tuple[dict[str, Any], list[str]]:
    """`python -m sglang.launch_server`: ServerArgs.add_cli_args."""
    path = find(root, "sglang/srt/server_args.py")
    index = PyIndex.build(path.parents[1], ("srt/arg_groups", "srt/utils", "srt/layers"))
    flags = argparse_table(path, index)
    namespaces = re.search(r"_INPUT_NAMESPACES\s*=\s*\[([^\]]*)\]", path.read_text())
    for cls_name in re.findall(r"\w+", namespaces.group(1)) if namespaces else []:
        for name, rec in sglang_fields(index, cls_name).items():
            flags.setdefault(name, rec)
    commands = {"python -m sglang.launch_server": _command(flags)}
    # The one-batch benchmark (what `recommend --validate` runs): BenchArgs.add_cli_args, then
    # ServerArgs.add_cli_args. It moved from sglang/bench_one_batch.py to
    # sglang/benchmark/one_batch.py; the table names the module the pinned release has.
    for module in ("benchmark/one_batch.py", "bench_one_batch.py"):
        bench_path = path.parents[1] / module
        if bench_path.exists():
            name = "python -m sglang." + module.removesuffix(".py").replace("/", ".")
            commands[name] = _command({**flags, **argparse_table(bench_path, index)})
            break
    # The serving benchmark ([bench_serve]): sglang.benchmark.serving (sglang.bench_serving
    # forwards to it in the pinned release).
    serving = path.parents[1] / "benchmark" / "serving.py"
    if serving.exists():
        commands["python -m sglang.benchmark.serving"] = _command(argparse_table(serving, index))
    return commands, index.files()


def sglang_fields(index: PyIndex, cls_name: str) -> Flags:
    """Return the flags arg_utils.add_cli_args_from_dataclass makes from A[T, Arg(...)] fields."""
    flags: Flags = {}
    for fname, (ann, default) in class_fields(index, cls_name).items():
        if not (isinstance(ann, ast.Subscript) and _name(ann.value) == "A"
                and isinstance(ann.slice, ast.Tuple) and len(ann.slice.elts) >= 2):
            continue
        type_node, meta = ann.slice.elts[0], ann.slice.elts[1]
        opts = {kw.arg: kw.value for kw in meta.keywords} \
            if isinstance(meta, ast.Call) and _name(meta.func) == "Arg" else {}
        if "no_cli" in opts and _literal(opts["no_cli"]) is True:
            continue
        type_, choices, _ = annotation_type(type_node, index)
        if "choices" in opts:
            choices = _choices(opts["choices"], index)
        name = _literal(opts["cli_name"]) if "cli_name" in opts else \
            "--" + fname.replace("_", "-")
        aliases = _literal(opts["aliases"]) if "aliases" in opts else []
        rec = flag(type_ if type_ != "section" else "json", choices, _default(default),
                   list(aliases) if isinstance(aliases, list) else [],
                   source=f"{cls_name}.{fname}")
        if "type_parser" in opts:
            rec["type"] = _type_of(opts["type_parser"])
        if type_ == "bool" and "action" not in opts:
            rec["takes_value"] = False
        if "nargs" in opts or (type_ == "list" and "type_parser" not in opts):
            rec["nargs"] = _literal(opts["nargs"]) if "nargs" in opts else "+"
        flags[str(name)] = rec
    return flags


def extract_mlx(root: Path) -> tuple[dict[str, Any], list[str]]:
    """mlx_lm.server / generate / lora / convert / benchmark: one argparse table per command."""
    pkg = find(root, "mlx_lm/server.py").parent
    index = PyIndex.build(pkg)
    commands = {}
    for module in ("server", "generate", "lora", "convert", "benchmark"):
        commands[f"mlx_lm.{module}"] = _command(argparse_table(pkg / f"{module}.py", index))
    return commands, index.files()


def extract_megatron(root: Path) -> tuple[dict[str, Any], list[str]]:
    """pretain_gpt.py: megatron/training/arguments.py, add_argument calls + config factories."""
    path = find(root, "megatron/training/arguments.py")
    index = PyIndex.build(path.parents[2], ("megatron/core", "megatron/training"))
    tree = ast.parse(path.read_text(encoding="utf-8"))
    index.read.add(path)
    flags = ArgparseReader(index).read(tree)
    for cls_name, exclude in factory_calls(tree, "ArgumentGroupFactory"):
        for name, rec in generated_flags(index, cls_name, exclude, "megatron").items():
            flags.setdefault(name, rec)
    return {"pretrain_gpt.py": _command(flags)}, index.files()


def extract_torchtitan(root: Path) -> tuple[dict[str, Any], list[str]]:
    """Read the TOML job config: JobConfig's dataclass tree as section.key."""
    path = find(root, "torchtitan/config/job_config.py")
    index = PyIndex.build(path.parents[1], ("config",))
    return {"job_config.toml": _command(config_keys(index, "JobConfig"))}, index.files()


def extract_executorch(root: Path) -> tuple[dict[str, Any], list[str]]:
    """export_llm: LlmConfig's dataclass tree as dotted override keys."""
    path = find(root, "extension/llm/export/config/llm_config.py")
    index = PyIndex.build(path.parent)
    keys = config_keys(index, "LlmConfig")
    return {"export_llm": _command(keys)}, index.files()


# DeepSpeed's JSON sections and the pydantic classes that read them (runtime/config.py builds
# each from param_dict[<section>]); top-level scalar keys are runtime/constants.py's names.
_DS_SECTIONS = {
    "zero_optimization": "DeepSpeedZeroConfig",
    "bf16": "DeepSpeedBF16Config",
    "fp16": "DeepSpeedFP16Config",
    "compile": "CompileConfig",
    "tensor_parallel": "TPTrainingConfig",
    "activation_checkpointing": "DeepSpeedActivationCheckpointingConfig",
}


def extract_deepspeed(root: Path) -> tuple[dict[str, Any], list[str]]:
    """Read the DeepSpeed JSON keys: runtime/constants.py names, sections from config classes."""
    pkg = find(root, "deepspeed/runtime/constants.py").parents[1]
    index = PyIndex.build(pkg, ("runtime", "compile", "utils"))
    constants = pkg / "runtime" / "constants.py"
    index.read.add(constants)
    keys: Flags = {}
    for node in ast.parse(constants.read_text(encoding="utf-8")).body:
        target, value = _assigned(node)
        if target and value is not None and not target.endswith(("_DEFAULT", "_FORMAT")) \
                and isinstance(value, ast.Constant) and isinstance(value.value, str) \
                and re.fullmatch(r"[a-z][a-z0-9_]*", value.value):
            keys.setdefault(value.value, flag("object"))
    keys["optimizer"] = flag("section")
    keys["optimizer.type"] = flag("str")
    keys["optimizer.params"] = flag("json")
    for section, cls_name in _DS_SECTIONS.items():
        keys[section] = flag("section")
        sub = config_keys(index, cls_name, section + ".")
        for key, rec in list(sub.items()):
            for alias in rec["aliases"]:
                sub.setdefault(key.rsplit(".", 1)[0] + "." + alias if "." in key else alias,
                               {**rec, "aliases": [key]})
        keys.update(sub)
    # the `deepspeed` launcher (launcher/runner.py parse_args): --hostfile, --num_nodes ...
    runner = pkg / "launcher" / "runner.py"
    launcher = argparse_table(runner, index)
    return {"ds_config.json": _command(keys), "deepspeed": _command(launcher)}, index.files()


def extract_torchrun(root: Path) -> tuple[dict[str, Any], list[str]]:
    """torchrun: the add_argument calls of torch/distributed/run.py's get_args_parser."""
    path = root / "torch" / "distributed" / "run.py"
    index = PyIndex(path.parent)  # its arguments name no class of torch's
    return {"torchrun": _command(argparse_table(path, index))}, ["torch/distributed/run.py"]


def extract_hf(root: Path, accelerate_root: Path) -> tuple[dict[str, Any], list[str]]:
    """TrainingArguments fields, generate()/GenerationConfig and from_pretrained() keywords."""
    pkg = find(root, "transformers/training_args.py").parent
    index = PyIndex.build(pkg, ("", ))
    commands: dict[str, Any] = {}
    commands["TrainingArguments"] = _command(config_keys(index, "TrainingArguments"))
    gen = pkg / "generation" / "configuration_utils.py"
    gen_flags = _popped_kwargs(gen, "GenerationConfig", "__init__")
    commands["generate()"] = _command(gen_flags)
    modeling = pkg / "modeling_utils.py"
    commands["from_pretrained()"] = _command(_popped_kwargs(modeling, "PreTrainedModel",
                                                            "from_pretrained"))
    index.read.update({gen, modeling})
    for cls_name in ("BitsAndBytesConfig", "FineGrainedFP8Config", "NVFP4Config"):
        params = callable_params(index, cls_name)
        if params:
            commands[cls_name] = _command(params)
    batch = _method_params(index, "generate_batch")
    if batch:
        commands["generate_batch"] = _command(batch)
    acc = find(accelerate_root, "accelerate/parallelism_config.py")
    acc_index = PyIndex.build(acc.parent, ("",))
    commands["ParallelismConfig"] = _command(config_keys(acc_index, "ParallelismConfig"))
    files = index.files() + [f"accelerate/{f}" for f in acc_index.files()]
    return commands, files


def _method_params(index: PyIndex, method: str) -> Flags:
    """Return the parameters of the first indexed class method with this name."""
    for name in sorted(index.classes):
        found = callable_params(index, name, method) if any(
            isinstance(s, ast.FunctionDef) and s.name == method
            for s in index.classes[name][1].body) else {}
        if found:
            return found
    return {}


def _popped_kwargs(path: Path, cls_name: str, method: str) -> Flags:
    """Return the keywords a method reads as kwargs.pop("name", default) (and its parameters)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out: Flags = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == cls_name:
            for stmt in node.body:
                if isinstance(stmt, ast.FunctionDef) and stmt.name == method:
                    out.update(_params(stmt, PyIndex(path.parent)))
                    out.pop("kwargs", None)
                    for call in ast.walk(stmt):
                        if isinstance(call, ast.Call) and _name(call.func) in {"pop", "get"} \
                                and isinstance(call.func, ast.Attribute) \
                                and _name(call.func.value) == "kwargs" and call.args \
                                and isinstance(call.args[0], ast.Constant):
                            default = call.args[1] if len(call.args) > 1 else None
                            out.setdefault(str(call.args[0].value),
                                           flag("object", None, _default(default)))
    return out


def extract_exllamav2(root: Path) -> tuple[dict[str, Any], list[str]]:
    """ExLlamaV2's Python API: generator and cache constructors, ExLlamaV2Config attributes."""
    pkg = find(root, "exllamav2/config.py").parent
    index = PyIndex.build(pkg)
    commands: dict[str, Any] = {}
    for cls_name in ("ExLlamaV2DynamicGenerator", "ExLlamaV2Cache", "ExLlamaV2Cache_Q4",
                     "ExLlamaV2Cache_Q6", "ExLlamaV2Cache_Q8", "ExLlamaV2Cache_TP"):
        commands[cls_name] = _command(callable_params(index, cls_name))
    attrs: Flags = {}
    config = index.cls("ExLlamaV2Config")
    for node in ast.walk(config) if config else []:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Attribute) \
                and _name(node.target.value) == "self" or isinstance(node, ast.AnnAssign) \
                and isinstance(node.target, ast.Name):
            name = node.target.attr if isinstance(node.target, ast.Attribute) else node.target.id
            type_, choices, _ = annotation_type(node.annotation, index)
            attrs.setdefault(f"config.{name}", flag(type_, choices, _default(node.value)))
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Attribute) and _name(target.value) == "self":
                    attrs.setdefault(f"config.{target.attr}", flag("object", None,
                                                                   _default(node.value)))
    commands["ExLlamaV2Config"] = _command(attrs)
    return commands, index.files()


def extract_litert(root: Path) -> tuple[dict[str, Any], list[str]]:
    """`litert-lm run` (and its other subcommands) from the CLI package's argparse/click code."""
    pkg = find(root, "litert_lm_cli/main.py").parent
    index = PyIndex.build(pkg)
    commands: dict[str, Any] = {}
    for path in sorted(pkg.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        flags = ArgparseReader(index).read(tree)
        flags.update(click_options(tree, index))
        if flags:
            index.read.add(path)
            commands[f"litert-lm {path.stem}"] = _command(flags)
    # common.py's options are decorators every subcommand applies (run, benchmark, serve)
    common = commands.pop("litert-lm common", {"flags": {}})["flags"]
    for name in ("litert-lm run", "litert-lm benchmark", "litert-lm module"):
        if name in commands:
            commands[name] = _command({**common, **commands[name]["flags"]})
    return commands, index.files()


def click_options(tree: ast.AST, index: PyIndex) -> Flags:
    """Return the flags of @click.option(...) decorators."""
    flags: Flags = {}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and _name(node.func) == "option"):
            continue
        names = [a.value for a in node.args if isinstance(a, ast.Constant)
                 and isinstance(a.value, str) and a.value.startswith("-")]
        if not names:
            continue
        rec = flag("str", aliases=names[1:])
        for kw in node.keywords:
            if kw.arg == "is_flag" and _literal(kw.value) is True:
                rec.update(type="bool", takes_value=False)
            elif kw.arg == "type":
                if isinstance(kw.value, ast.Call) and _name(kw.value.func) == "Choice" \
                        and kw.value.args:
                    rec["choices"] = _choices(kw.value.args[0], index)
                elif isinstance(kw.value, ast.Call) and \
                        _name(kw.value.func) == "ChoiceWithAlias" and len(kw.value.args) == 2:
                    # trtllm-serve's --backend: the choices, and aliases it maps onto them
                    aliases = _literal(kw.value.args[1])
                    rec["choices"] = (_choices(kw.value.args[0], index) or []) + \
                        (list(aliases) if isinstance(aliases, dict) else [])
                else:
                    rec["type"] = _type_of(kw.value)
            elif kw.arg == "default":
                rec["default"] = _default(kw.value)
        for name in names[0].split("/"):
            flags.setdefault(name.strip(), rec)
    return flags


def extract_mlc(root: Path) -> tuple[dict[str, Any], list[str]]:
    """`mlc_llm serve` (cli/serve.py, with its --overrides keys), and the phone route.

    The phone route's commands (convert_weight, gen_config, package) and the keys of
    mlc-package-config.json.
    """
    pkg = find(root, "mlc_llm/cli/serve.py").parents[1]
    index = PyIndex.build(pkg, ("cli", "support", "serve", "interface"))
    flags = argparse_table(pkg / "cli" / "serve.py", index)
    overrides = {}
    for cls_name in ("EngineConfigOverride",):
        for key, rec in config_keys(index, cls_name).items():
            overrides[key] = rec
    if "--overrides" in flags and overrides:
        flags["--overrides"]["subkeys"] = overrides
        flags["--overrides"]["subkey_separator"] = ";"
    if "--mode" in flags and flags["--mode"]["choices"] is None:
        flags["--mode"]["choices"] = ["local", "interactive", "server"]
    commands = {"mlc_llm serve": _command(flags, positional=["model"])}
    # The phone route (docs/deploy/android.rst, ios.rst, compilation/convert_weights.rst):
    # convert_weight and gen_config read a local checkpoint folder, package compiles the model
    # library into the MLCChat app from mlc-package-config.json.
    quantizations = _module_dict_keys(pkg / "quantization" / "quantization.py", "QUANTIZATION",
                                      index)
    for name in ("convert_weight", "gen_config", "package"):
        table_ = argparse_table(pkg / "cli" / f"{name}.py", index)
        if "--quantization" in table_ and table_["--quantization"]["choices"] is None:
            table_["--quantization"]["choices"] = quantizations
        if "--conv-template" in table_ and table_["--conv-template"]["choices"] is None:
            table_["--conv-template"]["choices"] = sorted(
                _set_constant(pkg / "interface" / "gen_config.py", "CONV_TEMPLATES", index))
        positional = ["config"] if name != "package" else []
        commands[f"mlc_llm {name}"] = _command(table_, positional=positional)
    commands["mlc-package-config.json"] = _command(_mlc_package_keys(pkg, index))
    return commands, index.files()


def _module_dict_keys(path: Path, name: str, index: PyIndex) -> list[str]:
    """Return the string keys of a module-level `NAME = {...}` dict of one file."""
    index.read.add(path)
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, ast.Dict):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(_name(t) == name for t in targets):
                return [k.value for k in node.value.keys
                        if isinstance(k, ast.Constant) and isinstance(k.value, str)]
    raise SystemExit(f"{name} not found in {path}")


def _set_constant(path: Path, name: str, index: PyIndex) -> list[str]:
    """Return the strings of a module-level `NAME = {...}` set (or list) of one file."""
    index.read.add(path)
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(_name(t) == name for t in node.targets):
            value = _literal(node.value)
            if value is not _UNKNOWN and isinstance(value, (set, list, tuple)):
                return [str(v) for v in value]
    raise SystemExit(f"{name} not found in {path}")


def _mlc_package_keys(pkg: Path, index: PyIndex) -> Flags:
    """Return the keys of mlc-package-config.json as interface/package.py reads them.

    The top-level keys package_config.get("...") / ["..."] and a model entry's
    model_entry["..."] / .get("...") (with the type its isinstance check demands); "device"
    takes SUPPORTED_DEVICES; a model entry's "overrides" takes ModelConfigOverride's fields
    (interface/jit.py passes them to the compile).
    """
    path = pkg / "interface" / "package.py"
    index.read.add(path)
    tree = ast.parse(path.read_text(encoding="utf-8"))
    types = {"str": "str", "bool": "bool", "dict": "object", "list": "list", "int": "int"}
    owner_of: dict[str, tuple[str, str]] = {}  # variable -> (mapping it is read from, key)
    keys: dict[str, dict[str, Any]] = {"package_config": {}, "model_entry": {}}
    for node in ast.walk(tree):
        read = _mapping_read(node)
        if read is not None and read[0] in keys:
            keys[read[0]].setdefault(read[1], flag("str"))
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and \
                isinstance(node.targets[0], ast.Name):
            read = _mapping_read(node.value)
            if read is not None:
                owner_of[node.targets[0].id] = read
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _name(node.func) == "isinstance" and \
                len(node.args) == 2 and isinstance(node.args[0], ast.Name):
            owner = owner_of.get(node.args[0].id)
            type_ = types.get(_name(node.args[1]))
            if owner is not None and owner[0] in keys and type_ is not None:
                keys[owner[0]][owner[1]]["type"] = type_
    devices = _set_constant(path, "SUPPORTED_DEVICES", index)
    out: Flags = dict(keys["package_config"].items())
    out["device"] = flag("str", devices)
    entry = keys["model_entry"]
    entry.setdefault("estimated_vram_bytes", flag("str"))["type"] = "int"  # bytes, as read
    if "overrides" in entry:
        # the compile's ModelConfigOverride (interface/compiler_flags.py, as jit.py imports it;
        # chat.py has another class of that name), and the "opt" key jit() pops first
        flags_file = pkg / "interface" / "compiler_flags.py"
        compiler = PyIndex(pkg)
        compiler.add(flags_file)
        index.read.add(flags_file)
        entry["overrides"]["type"] = "object"
        for key, rec in config_keys(compiler, "ModelConfigOverride").items():
            entry[f"overrides.{key}"] = rec
        entry["overrides.opt"] = flag("str")
    out["model_list"] = flag("list", items=dict(sorted(entry.items())))
    return out


def _mapping_read(node: ast.AST) -> tuple[str, str] | None:
    """Return (mapping, key) of `m["key"]` or `m.get("key", ...)`, else None."""
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and \
            isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str):
        return node.value.id, node.slice.value
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
            node.func.attr == "get" and isinstance(node.func.value, ast.Name) and node.args and \
            isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
        return node.func.value.id, node.args[0].value
    return None


def _decorator_options(path: Path, function: str, index: PyIndex) -> Flags:
    """Return the @click.option flags of one function of a file (not the file's other commands)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    index.read.add(path)
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == function:
            decorators = ast.Module(body=[ast.Expr(d) for d in node.decorator_list],
                                    type_ignores=[])
            return click_options(decorators, index)
    raise SystemExit(f"{path}: no function {function}")


def _union_classes(path: Path, alias: str) -> list[str]:
    """Return the classes of a module-level `Alias: TypeAlias = Optional[Union[A, B, ...]]`."""
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        name, value = _assigned(node)
        if name == alias and value is not None:
            return [_name(p) for p in _union_parts(value) if _name(p) not in {"", "None"}]
    raise SystemExit(f"{path}: no alias {alias}")


def _dispatch_keys(path: Path, cls_name: str, method: str, variable: str) -> list[str]:
    """Return the string keys of a dict literal assigned to `variable` in Cls.method."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ClassDef) and node.name == cls_name:
            for stmt in ast.walk(node):
                if isinstance(stmt, ast.FunctionDef) and stmt.name == method:
                    for sub in ast.walk(stmt):
                        target, value = _assigned(sub) if isinstance(sub, ast.stmt) \
                            else (None, None)
                        if target == variable and isinstance(value, ast.Dict):
                            return [k.value for k in value.keys
                                    if isinstance(k, ast.Constant) and isinstance(k.value, str)]
    raise SystemExit(f"{path}: no {cls_name}.{method} {variable}")


def _model_field_default(default: Any, index: PyIndex) -> Any:
    """Resolve a default written `Cls.model_fields['name'].default` to that field's default."""
    match = re.fullmatch(r"(\w+)\.model_fields\['(\w+)'\]\.default", str(default))
    if not match:
        return default
    field_ = class_fields(index, match.group(1)).get(match.group(2))
    return _default(field_[1]) if field_ is not None else default


def extract_trtllm(root: Path) -> tuple[dict[str, Any], list[str]]:
    """`trtllm-serve`: serve()'s click options; its YAML (--config / --extra_llm_api_options).

    The YAML file holds TorchLlmArgs fields (the PyTorch backend's, trtllm-serve's default):
    update_llm_args_with_extra_dict in llmapi/llm_args.py sets them on the LLM's arguments.
    speculative_config is a union of decoding configs picked by its decoding_type
    (DecodingBaseConfig.from_dict): its keys are those of every member, and decoding_type's
    choices the names from_dict maps.
    """
    pkg = find(root, "tensorrt_llm/commands/serve.py").parents[1]
    index = PyIndex.build(pkg, ("llmapi", "commands", "models"))
    serve = _decorator_options(pkg / "commands" / "serve.py", "serve", index)
    index.add(pkg / "builder.py")
    for rec in serve.values():
        rec["default"] = _model_field_default(rec["default"], index)
    llm_args = pkg / "llmapi" / "llm_args.py"
    keys = config_keys(index, "TorchLlmArgs")
    keys["speculative_config"] = flag("section")
    for member in _union_classes(llm_args, "SpeculativeConfig"):
        for key, rec in config_keys(index, member, "speculative_config.").items():
            # an alias is a sibling key (speculative_model_dir for speculative_model)
            rec["aliases"] = ["speculative_config." + a for a in rec["aliases"]]
            keys.setdefault(key, rec)
    keys["speculative_config.decoding_type"] = flag(
        "str", _dispatch_keys(llm_args, "DecodingBaseConfig", "from_dict", "config_classes"))
    commands = {"trtllm-serve": _command(serve, positional=["model"]),
                "extra_llm_api_options.yaml": _command(keys)}
    # The serving benchmark ([bench_serve]): TensorRT-LLM's copy of vLLM's benchmark_serving.
    bench = pkg / "serve" / "scripts" / "benchmark_serving.py"
    if bench.exists():
        commands["python -m tensorrt_llm.serve.scripts.benchmark_serving"] = _command(
            argparse_table(bench, index))
    return commands, index.files()


# ---------------------------------------------------------------------------------------------
# llama.cpp: common/arg.cpp and tools/llama-bench


_EXAMPLES = {"llama-server": "LLAMA_EXAMPLE_SERVER", "llama-cli": "LLAMA_EXAMPLE_CLI",
             "llama-completion": "LLAMA_EXAMPLE_COMPLETION"}


def _balanced(text: str, start: int, open_: str = "(", close: str = ")") -> int:
    """Return the index just past the bracket that closes text[start] (strings skipped)."""
    depth, i, quote = 0, start, ""
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == "\\":
                i += 2
                continue
            if ch == quote:
                quote = ""
        elif ch == "/" and text[i + 1:i + 2] == "/":
            i = text.find("\n", i)  # a // comment (its apostrophes are not quotes)
            continue
        elif ch == '"' or (ch == "'" and (text[i + 2:i + 3] == "'" or text[i + 1] == "\\")):
            quote = ch
        elif ch == open_:
            depth += 1
        elif ch == close:
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    raise ValueError("unbalanced")


def _brace_strings(text: str) -> list[str]:
    return re.findall(r'"([^"]*)"', text)


def llama_args(arg_cpp: Path) -> list[dict[str, Any]]:
    """Return every common_arg declaration of arg.cpp: names, value type, range, examples."""
    text = arg_cpp.read_text(encoding="utf-8")
    kv_types = re.search(r"kv_cache_types\s*=\s*\{([^}]*)\}", text)
    cache_choices = [t.lower() for t in re.findall(r"GGML_TYPE_(\w+)", kv_types.group(1))] \
        if kv_types else None
    spec_cpp = arg_cpp.parent / "speculative.cpp"
    spec_map = re.search(r"common_speculative_type_from_name_map\s*=\s*\{(.*?)\};",
                         spec_cpp.read_text(encoding="utf-8"), re.S) if spec_cpp.exists() else None
    spec_types = re.findall(r'\{"([\w-]+)"', spec_map.group(1)) if spec_map else None
    out = []
    for match in re.finditer(r"add_opt\(common_arg\(", text):
        start = match.end() - 1
        end = _balanced(text, start)
        body = text[start + 1:end - 1]
        tail_end = _balanced(text, match.start() + len("add_opt"))
        tail = text[end:tail_end]
        lists = re.findall(r"^\s*\{([^{}]*)\}", body) + []
        heads = re.findall(r"\{\s*(\"[^{}]*?)\}", body.split("[](")[0])
        names = _brace_strings(heads[0]) if heads else _brace_strings(lists[0] if lists else "")
        negs = _brace_strings(heads[1]) if len(heads) > 1 else []
        sig = re.search(r"\[\]\(common_params\s*&\s*\w*\s*(?:,([^)]*))?\)", body)
        params = [p.strip() for p in sig.group(1).split(",")] if sig and sig.group(1) else []
        rec = _llama_value(params, body, cache_choices, spec_types)
        examples = re.findall(r"LLAMA_EXAMPLE_\w+", " ".join(
            re.findall(r"set_examples\(\{([^}]*)\}", tail)))
        excludes = re.findall(r"LLAMA_EXAMPLE_\w+", " ".join(
            re.findall(r"set_excludes\(\{([^}]*)\}", tail)))
        rec.update(names=names, negs=negs, examples=examples or ["LLAMA_EXAMPLE_COMMON"],
                   excludes=excludes, env=(re.findall(r'set_env\("(\w+)"\)', tail) or [None])[0],
                   line=text.count("\n", 0, match.start()) + 1)
        out.append(rec)
    return out


def _llama_value(params: list[str], body: str, cache_choices: list[str] | None,
                 spec_types: list[str] | None = None) -> dict[str, Any]:
    """Return type/choices/range of a common_arg from its handler's signature and checks."""
    if not params:
        return {"type": "bool", "takes_value": False, "choices": None}
    kind = params[0]
    type_ = "int" if "int" in kind else "float" if "float" in kind else \
        "bool" if kind.startswith("bool") else "str"
    rec: dict[str, Any] = {"type": type_, "takes_value": type_ != "bool", "choices": None}
    if len(params) > 1:
        rec["values"] = len(params)
    if type_ == "str":
        literal = re.findall(r'value\s*==\s*"([^"]+)"', body)
        if literal and "throw" in body:
            rec["choices"] = sorted(set(literal))
        if "kv_cache_type_from_str" in body and cache_choices:
            rec["choices"] = cache_choices
        if "common_speculative_types_from_names" in body and spec_types:
            rec["choices"] = spec_types
            rec["list_separator"] = ","
    bounds = re.search(r"value\s*<\s*(-?\d+)\s*\|\|\s*value\s*>\s*(-?\d+)", body)
    if bounds:
        rec["min"], rec["max"] = int(bounds.group(1)), int(bounds.group(2))
    elif re.search(r"value\s*==\s*0\)\s*\{\s*throw", body):
        rec["not"] = [0]
    elif re.search(r"value\s*<\s*0\)\s*\{\s*throw", body):
        rec["min"] = 0
    return rec


def llama_command(args: list[dict[str, Any]], example: str) -> Flags:
    """Return the flags one llama.cpp tool accepts (arg.cpp's add_opt inheritance rule)."""
    flags: Flags = {}
    for arg in args:
        if example in arg["excludes"]:
            continue
        if example not in arg["examples"] and "LLAMA_EXAMPLE_COMMON" not in arg["examples"]:
            continue
        names = arg["names"]
        if not names:
            continue
        long = [n for n in names if n.startswith("--")]
        primary = long[0] if long else names[0]
        rec = flag(arg["type"], arg["choices"], None,
                   [n for n in names if n != primary] + arg["negs"], arg["takes_value"],
                   env=arg["env"], min=arg.get("min"), max=arg.get("max"),
                   values=arg.get("values"), list_separator=arg.get("list_separator"),
                   line=arg["line"])
        if arg.get("not"):
            rec["not"] = arg["not"]
        # a tool-specific declaration (set_examples naming this tool) wins over a common one
        if primary not in flags or example in arg["examples"]:
            flags[primary] = rec
    return flags


def llama_bench_flags(path: Path) -> Flags:
    """Return llama-bench's flags from its hand-written `arg == "..."` argument loop."""
    text = path.read_text(encoding="utf-8")
    flags: Flags = {}
    starts = [m for m in re.finditer(r'if \((arg == "[^"]+"(?:\s*\|\|\s*arg == "[^"]+")*)\)',
                                     text)]
    for i, match in enumerate(starts):
        names = re.findall(r'arg == "([^"]+)"', match.group(1))
        block = text[match.end(): starts[i + 1].start() if i + 1 < len(starts) else len(text)]
        takes = "++i" in block or "argv[i]" in block
        type_ = "str"
        if re.search(r"string_split<int>|parse_int_range|std::stoi", block):
            type_ = "int_list"
        elif re.search(r"string_split<bool>|parse_bool", block):
            type_ = "bool_list"
        elif "string_split<float>" in block or "std::stof" in block:
            type_ = "float_list"
        choices = sorted(set(re.findall(r'\b(?:s|value|arg)\s*==\s*"([^"]+)"', block))) or None
        long = [n for n in names if n.startswith("--")]
        primary = long[0] if long else names[0]
        flags.setdefault(primary, flag(type_, choices if type_ == "str" else None, None,
                                       [n for n in names if n != primary], takes,
                                       line=text.count("\n", 0, match.start()) + 1))
    return flags


def extract_llamacpp(root: Path) -> tuple[dict[str, Any], list[str]]:
    """llama-server and llama-cli (common/arg.cpp), llama-bench (its own loop)."""
    base = find(root, "vendor/llama.cpp/common/arg.cpp").parents[1]
    args = llama_args(base / "common" / "arg.cpp")
    commands = {tool: _command(llama_command(args, ex), example=ex)
                for tool, ex in _EXAMPLES.items()}
    commands["llama-bench"] = _command(
        llama_bench_flags(base / "tools" / "llama-bench" / "llama-bench.cpp"),
        note="values are comma-separated lists; each value is benchmarked")
    files = ["vendor/llama.cpp/common/arg.cpp", "vendor/llama.cpp/common/speculative.cpp",
             "vendor/llama.cpp/tools/llama-bench/llama-bench.cpp"]
    return commands, files


# ---------------------------------------------------------------------------------------------
# coremltools (ct.convert, ct.optimize.coreml) and Genie's genie_config.json


def _signature(func: ast.FunctionDef) -> Flags:
    """Return the keyword parameters of a function, with their literal defaults."""
    args = func.args
    positional = args.posonlyargs + args.args
    defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    flags: Flags = {}
    for arg, default in [*zip(positional, defaults, strict=True),
                         *zip(args.kwonlyargs, args.kw_defaults, strict=True)]:
        if arg.arg in ("self", "cls"):
            continue
        flags[arg.arg] = flag("object", None, _default(default) if default is not None else None)
    return flags


def _attrs_fields(cls: ast.ClassDef) -> Flags:
    """Return the public attrs fields of a class (`name: T = field(default=...)`)."""
    flags: Flags = {}
    for node in cls.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) \
                and not node.target.id.startswith("_") and isinstance(node.value, ast.Call):
            default = next((kw.value for kw in node.value.keywords if kw.arg == "default"), None)
            flags[node.target.id] = flag("object", None,
                                         _default(default) if default is not None else None)
    return flags


def _class_tuple(cls: ast.ClassDef, name: str) -> list[str]:
    """Return the names in a class-level tuple constant (_VALID_GRANULARITIES ...), lowercased."""
    for node in cls.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name
                                                for t in node.targets):
            return [(e.attr if isinstance(e, ast.Attribute) else str(_literal(e))).lower()
                    for e in getattr(node.value, "elts", [])]
    return []


def _enum_members(cls: ast.ClassDef) -> list[str]:
    """Return the member names of an Enum class body."""
    return [t.id for node in cls.body if isinstance(node, ast.Assign)
            for t in node.targets if isinstance(t, ast.Name) and not t.id.startswith("_")]


def _defs(path: Path) -> dict[str, ast.AST]:
    """Return the top-level functions and classes of a module by name."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}


def extract_coremltools(root: Path) -> tuple[dict[str, Any], list[str]]:
    """ct.convert, ct.optimize.coreml's quantisers and configs, ct.ComputeUnit and ct.target."""
    pkg = find(root, "coremltools/__init__.py").parent
    files = {"entry": "converters/_converters_entry.py", "init": "__init__.py",
             "targets": "converters/mil/_deployment_compatibility.py",
             "config": "optimize/coreml/_config.py",
             "ptq": "optimize/coreml/_post_training_quantization.py"}
    defs = {key: _defs(pkg / rel) for key, rel in files.items()}
    commands: dict[str, Any] = {"convert": _command(_signature(defs["entry"]["convert"]))}
    for name in ("linear_quantize_weights", "palettize_weights"):
        commands[name] = _command(_signature(defs["ptq"][name]))
    for name in ("OpLinearQuantizerConfig", "OpPalettizerConfig", "OptimizationConfig"):
        commands[name] = _command(_attrs_fields(defs["config"][name]))
    linear = defs["config"]["OpLinearQuantizerConfig"]
    rec = commands["OpLinearQuantizerConfig"]["flags"]
    # check_mode upper-cases the mode; check_dtype takes ints of bit width 4 or 8
    rec["mode"]["choices"] = _class_tuple(linear, "_WEIGHT_AFFINE_QUANTIZATION_MODES")
    rec["granularity"]["choices"] = _class_tuple(linear, "_VALID_GRANULARITIES")
    source = ast.unparse(linear)
    widths = re.search(r"get_bitwidth\(\) in \{([\d, ]+)\}", source)
    if widths:
        rec["dtype"]["choices"] = [f"{sign}int{w.strip()}" for sign in ("", "u")
                                   for w in widths.group(1).split(",")]
    enums = {"ct.ComputeUnit": _enum_members(defs["init"]["ComputeUnit"]),  # type: ignore[arg-type]
             "ct.target": _enum_members(defs["targets"]["AvailableTarget"])}  # type: ignore[arg-type]
    commands["enums"] = {"flags": {}, "enums": enums}
    return commands, [f"coremltools/{rel}" for rel in files.values()]


def _dict_keys(node: ast.AST, env: dict[str, ast.AST], prefix: str, types: dict[str, str],
               out: Flags) -> None:
    """Record the dotted keys of a dict literal (names resolved through env), recursively."""
    if isinstance(node, ast.Name) and node.id in env:
        node = env[node.id]
    if not isinstance(node, ast.Dict):
        value = _literal(node)
        if not isinstance(value, (str, int, float, bool, list, dict)):
            value = None  # not a literal (a parameter, a computed value)
        type_ = "list" if isinstance(node, ast.List) else types.get(
            node.id if isinstance(node, ast.Name) else "", type(value).__name__
            if value is not None and not isinstance(value, (list, dict)) else "object")
        out[prefix] = flag(type_, None, value if not isinstance(value, (list, dict)) else None)
        return
    if prefix:
        out[prefix] = flag("section", None, None)
    for key, value in zip(node.keys, node.values, strict=True):
        if isinstance(key, ast.Constant) and isinstance(key.value, str):
            _dict_keys(value, env, f"{prefix}.{key.value}" if prefix else key.value, types, out)


def extract_genie(root: Path) -> tuple[dict[str, Any], list[str]]:
    """genie_config.json: the keys qai_hub_models' create_genie_config writes (every branch)."""
    rel = "qai_hub_models/models/templates/llm/llm_helpers.py"
    func = _defs(find(root, rel))["create_genie_config"]
    assert isinstance(func, ast.FunctionDef)
    types = {a.arg: ast.unparse(a.annotation) for a in func.args.args if a.annotation}
    types = {k: ("int" if v == "int" else "object") for k, v in types.items()}
    env: dict[str, ast.AST] = {}
    late: list[tuple[list[str], ast.AST]] = []
    top = "dialog"  # top_level_key's default: "dialog" for standalone LLMs
    for node in ast.walk(func):
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            target = node.targets[0] if isinstance(node, ast.Assign) else node.target
            if isinstance(target, ast.Name) and isinstance(node.value, ast.Dict):
                env[target.id] = node.value
            elif isinstance(target, ast.Subscript) and node.value is not None:
                path: list[str] = []
                base: ast.AST = target
                while isinstance(base, ast.Subscript):
                    path.insert(0, str(_literal(base.slice)))
                    base = base.value
                if isinstance(base, ast.Name):
                    late.append(([base.id, *path], node.value))
    flags: Flags = {}
    _dict_keys(env["inner"], env, top, types, flags)
    for path, value in late:  # keys set after the literal (qnn_htp["rope-theta"] = ...)
        owner = {"inner": top, "qnn_htp": f"{top}.engine.backend.QnnHtp",
                 "sampler": f"{top}.sampler"}.get(path[0])
        if owner is not None:
            _dict_keys(value, env, ".".join([owner, *path[1:]]), types, flags)
    return {"genie_config.json": _command(flags)}, [rel]


# ---------------------------------------------------------------------------------------------
# Driver

Extractor = Callable[[Path], tuple[dict[str, Any], list[str]]]
EXTRACTORS: dict[str, Extractor] = {
    "vllm": extract_vllm, "sglang": extract_sglang, "mlx": extract_mlx,
    "megatron": extract_megatron, "torchtitan": extract_torchtitan,
    "executorch": extract_executorch, "qnn": extract_executorch,
    "coreml": extract_executorch, "deepspeed": extract_deepspeed,
    "exllamav2": extract_exllamav2, "litert": extract_litert, "llamacpp": extract_llamacpp,
    "coremltools": extract_coremltools, "genie": extract_genie, "torchrun": extract_torchrun,
}


def build(engine: str, mlc_git: Path | None,
          trtllm_git: Path | None = None, version: str | None = None) -> dict[str, Any] | None:
    """Return one engine's table, or None (with a message) when its source is out of reach.

    version: an older release of PAST instead of the pinned one (a PyPI package's).
    """
    pin = PINS[engine]
    if version is not None:
        pin = Pin(pin.package, version, pin.dist, pin.extra)
    source: dict[str, str] = {}
    if engine == "trtllm":
        if trtllm_git is None:
            print("trtllm: pass --trtllm-git DIR (PyPI has stubs only); skipped",
                  file=sys.stderr)
            return None
        url, commit, subdir = TRTLLM_GIT
        root = fetch_git(trtllm_git, commit, subdir, "tensorrt-llm")
        commands, files = extract_trtllm(root)
        source = {"repository": url, "commit": commit, "path": subdir}
    elif engine == "mlc-llm":
        if mlc_git is None:
            print("mlc-llm: pass --mlc-llm-git DIR (not on PyPI); skipped", file=sys.stderr)
            return None
        root = fetch_git(mlc_git, pin.version, "python/mlc_llm", "mlc-llm")
        commands, files = extract_mlc(root)
    elif engine == "hf":
        root = fetch(pin.package, pin.version, pin.dist)
        extra = pin.extra[0]
        commands, files = extract_hf(root, fetch(*extra))
    elif pin.dist == "installed":
        commands, files = EXTRACTORS[engine](installed(pin.package, pin.version))
    else:
        root = fetch(pin.package, pin.version, pin.dist)
        commands, files = EXTRACTORS[engine](root)
    package = pin.package + "".join(f", {p} {v}" for p, v, _ in pin.extra)
    table = {"engine": engine, "package": package, "version": pin.version,
             **({"source": source} if source else {}), "files_read": files,
             "extracted_at": datetime.date.today().isoformat(), "commands": commands}
    return table


def _comparable(table: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in table.items() if k != "extracted_at"}


def main() -> int:
    """Write the tables, or with --check report those that differ from the committed ones."""
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--engine", choices=sorted(PINS), action="append")
    parser.add_argument("--check", action="store_true", help="report drift; write nothing")
    parser.add_argument("--mlc-llm-git", type=Path, help="git dir of an mlc-llm clone")
    parser.add_argument("--trtllm-git", type=Path,
                        help=f"git dir of a clone of {TRTLLM_GIT[0]} (TensorRT-LLM's table)")
    args = parser.parse_args()
    drift = 0
    wanted = [(e, None) for e in args.engine or sorted(PINS)]
    wanted += [(e, v) for e, _ in list(wanted) for v in PAST.get(e, ())]
    for engine, version in wanted:
        table = build(engine, args.mlc_llm_git, args.trtllm_git, version)
        if table is None:
            continue
        path = OUT_DIR / (f"{engine}@{version}.json" if version else f"{engine}.json")
        text = json.dumps(table, indent=1, sort_keys=False, default=str) + "\n"
        if args.check:
            old = json.loads(path.read_text()) if path.exists() else {}
            if _comparable(old) != _comparable(json.loads(text)):
                drift += 1
                print(f"{engine}: differs from {path.relative_to(ROOT)}")
            continue
        OUT_DIR.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        n = sum(len(c["flags"]) for c in table["commands"].values())
        print(f"{engine} {table['version']}: {n} flags/keys in {len(table['commands'])} "
              "command(s) -> "
              f"{path.relative_to(ROOT)}")
    return 1 if drift else 0


if __name__ == "__main__":
    raise SystemExit(main())
