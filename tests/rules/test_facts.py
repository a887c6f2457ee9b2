"""The typed facts (rules/playbooks/facts.py): each a field with a doc, named by conditions."""

from __future__ import annotations

import ast
import inspect
from dataclasses import fields

import pytest

from hwadvisor.engines import baseline
from hwadvisor.pipeline import build_workload
from hwadvisor.probe.target import primary_device, resolve_target
from hwadvisor.rules.judge import default_estimator, new_context
from hwadvisor.rules.playbooks import conditions, facts
from hwadvisor.rules.playbooks.facts import FACT_FIELDS, Facts
from hwadvisor.workload import Sizing, WorkloadRequest


def _documented_fields() -> dict[str, str]:
    """Facts' annotated fields mapped to the string just under each (its attribute docstring)."""
    tree = ast.parse(inspect.getsource(facts))
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Facts")
    found: dict[str, str] = {}
    for node, after in zip(cls.body, [*cls.body[1:], None], strict=True):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            doc = ""
            if isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant):
                doc = str(after.value.value)
            found[node.target.id] = doc
    return found


def test_every_fact_is_a_typed_field_with_a_one_line_doc() -> None:
    documented = _documented_fields()
    assert set(documented) == FACT_FIELDS == {f.name for f in fields(Facts)}
    missing = [name for name, doc in documented.items() if not doc or "\n" in doc]
    assert not missing, f"facts without a one-line doc: {missing}"


def test_a_condition_on_a_fact_that_does_not_exist_fails() -> None:
    with pytest.raises(KeyError, match="not a field of Facts"):
        conditions._in("no_such_fact")


def test_every_condition_reads_the_facts_of_a_real_state() -> None:
    """Each condition runs on built facts without a missing field (values: the facts' own)."""
    report = resolve_target("h200-sxm")
    device = primary_device(report)
    workload = build_workload(WorkloadRequest(model="llama-3-8b"),
                              Sizing(device.memory_total_bytes, device.device_class))
    start, options = baseline(workload, device)
    ctx = new_context(start, device, report.host, options, default_estimator())
    assert isinstance(ctx.facts, Facts)
    for name in conditions.When.model_fields:
        check, _ = conditions.CONDITIONS[name]
        try:
            check(ctx.facts, ["x"])  # a list for the *_in conditions; flags compare with it too
        except TypeError:
            check(ctx.facts, 1)  # a numeric bound: a list does not compare with a number
