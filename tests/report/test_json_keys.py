"""Every key docs/json-keys.md documents exists in the report's JSON Schema (the models').

How the page names keys, and so what is read here:
- each `## ` section names its place in the report: `## Top level` is the root, ``## `host.*` ``
  the object under `host`, ``## `devices[]` `` each item of `devices`; `## Examples` is skipped;
- the first cell of a table row holds one or more backticked keys, dotted below the section
  (`measured.memory_bandwidth_gbps`), with `[]` for a list's items and `{a,b}` for several
  keys (`times.{prefill,decode,train}_compute_s`);
- a paragraph that starts with a backticked key, a bold one or "Also" lists keys: every
  backticked word outside parentheses is one (inside them stand values and examples).
Meaning cells mix sub-keys with values (`compute`, `memory-bandwidth`) and are not read.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import Any

import pytest

from hwadvisor.report.schema import report_schema

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "json-keys.md"
SKIPPED_SECTIONS = ("Examples",)
BACKTICKED = re.compile(r"`([^`]+)`")
KEY = re.compile(r"^[a-z_][a-z0-9_]*(\[\])?(\.[a-z_*][a-z0-9_]*(\[\])?)*(\.\*)?$")


def _section_prefix(title: str) -> str | None:
    """'Top level' -> ''; '`devices[]`' -> 'devices[]'; '`plan.*` (recommend)' -> 'plan'."""
    if title.startswith(SKIPPED_SECTIONS):
        return None
    found = BACKTICKED.search(title)
    if found is None:
        return ""
    return found.group(1).removesuffix(".*")


def _expand(key: str) -> list[str]:
    """'times.{prefill,decode}_s' -> ['times.prefill_s', 'times.decode_s']."""
    parts = re.split(r"\{([^}]*)\}", key)
    choices = [[p] if i % 2 == 0 else p.split(",") for i, p in enumerate(parts)]
    return ["".join(combo) for combo in itertools.product(*choices)]


def _outside_parentheses(text: str) -> str:
    """The text with every parenthesised part (nested too) removed."""
    kept, depth = [], 0
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth = max(0, depth - 1)
        elif depth == 0:
            kept.append(char)
    return "".join(kept)


def _keys_in(text: str) -> list[str]:
    return [k for raw in BACKTICKED.findall(text) for k in _expand(raw) if KEY.match(k)]


def _is_key_list(paragraph: str) -> bool:
    return paragraph.startswith(("`", "**`", "Also"))


def documented_keys(page: str) -> list[str]:
    """Every key the page documents, as a dotted path from the report's root."""
    keys: list[str] = []
    prefix: str | None = None
    for block in re.split(r"\n\s*\n", page):
        for line in block.splitlines():
            if line.startswith("## "):
                prefix = _section_prefix(line[3:].strip())
        if prefix is None:
            continue
        body = "\n".join(line for line in block.splitlines() if not line.startswith("#"))
        if body.lstrip().startswith("|"):
            found = [k for row in body.splitlines() if row.startswith("|")
                     for k in _keys_in(row.split("|")[1])]
        elif _is_key_list(body.lstrip()):
            found = _keys_in(_outside_parentheses(body))
        else:
            found = []
        keys += [f"{prefix}.{k}" if prefix else k for k in found]
    return keys


def _resolve(schema: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    ref = node.get("$ref")
    if ref is None:
        return node
    name = ref.removeprefix("#/$defs/")
    return _resolve(schema, schema["$defs"][name])


def _branches(schema: dict[str, Any], node: dict[str, Any]) -> list[dict[str, Any]]:
    """The node itself, or each of its anyOf/oneOf/allOf choices (a nullable object is one)."""
    node = _resolve(schema, node)
    choices = node.get("anyOf", []) + node.get("oneOf", []) + node.get("allOf", [])
    if not choices:
        return [node]
    return [b for c in choices for b in _branches(schema, c)]


Node = dict[str, Any]


def _step(schema: Node, nodes: list[Node], segment: str) -> list[Node]:
    """The schema nodes one segment ('devices[]', 'measured') leads to from these."""
    name, is_list = segment.removesuffix("[]"), segment.endswith("[]")
    found = []
    for node in (b for n in nodes for b in _branches(schema, n)):
        child = node.get("properties", {}).get(name)
        if child is None:
            continue
        if not is_list:
            found.append(child)
            continue
        found += [b["items"] for b in _branches(schema, child) if "items" in b]
    return found


def key_exists(schema: dict[str, Any], key: str) -> bool:
    """Whether a dotted path ('devices[].measured.matmul_tflops') names a key of the schema."""
    nodes: list[dict[str, Any]] = [schema]
    for segment in key.removesuffix(".*").split("."):
        nodes = _step(schema, nodes, segment)
        if not nodes:
            return False
    return True


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    return report_schema()


@pytest.fixture(scope="module")
def keys() -> list[str]:
    return documented_keys(PAGE.read_text(encoding="utf-8"))


def test_the_page_is_read_in_every_section(keys: list[str]) -> None:
    # A change to the page's layout that leaves a section unread must fail here, not pass empty.
    roots = {k.split(".")[0] for k in keys}
    for section in ("host", "devices[]", "workload", "estimate", "plan", "recommendations[]",
                    "rejected[]", "trials[]", "cluster", "schema_version"):
        assert section in roots, sorted(roots)
    assert len(keys) > 150, len(keys)


def test_every_documented_key_is_in_the_schema(schema: dict[str, Any], keys: list[str]) -> None:
    missing = sorted({k for k in keys if not key_exists(schema, k)})
    assert not missing, f"docs/json-keys.md documents keys the report does not have: {missing}"


@pytest.mark.parametrize("key", [
    "devices[].hbm_stacks",
    "workload.made_up_key",
    "plan.layout.zz",
    "estimate.times.prefill_compute_ms",
    "nodes[].hostname",  # a cluster key outside its section
])
def test_a_made_up_key_is_refused(schema: dict[str, Any], key: str) -> None:
    assert not key_exists(schema, key)


def test_a_made_up_key_on_the_page_fails_the_check(schema: dict[str, Any]) -> None:
    page = PAGE.read_text(encoding="utf-8").replace(
        "| `reason`                     |", "| `reason`, `reason_code`      |", 1)
    assert "trials[].reason_code" in documented_keys(page)
    assert not key_exists(schema, "trials[].reason_code")


def test_the_reader_expands_braces_and_skips_values_in_parentheses() -> None:
    page = ("## `workload.*`\n\n`model` (preset id, `not_a_key`), **`engine`** (`hf`, `vllm`)\n\n"
            "## `estimate.*`\n\n| key | meaning |\n|---|---|\n"
            "| `times.{prefill,decode}_s` | `compute` |\n\nIn a `recommend` report\n")
    assert documented_keys(page) == ["workload.model", "workload.engine",
                                     "estimate.times.prefill_s", "estimate.times.decode_s"]
