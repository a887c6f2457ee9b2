"""The schema of the playbook files (hwadvisor/rules/playbooks/*.toml), and their loader.

Unknown keys are refused everywhere; every metric, trial, planner, predictor, condition and
template field a rule names must exist, so a typo fails at load time (and in the tests).
"""

from __future__ import annotations

import string
import sys
from functools import lru_cache
from importlib import resources
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from hwadvisor.models import ModelOptions, ModelSpec, Workload
from hwadvisor.models.recommend import Goal
from hwadvisor.rules.playbooks.conditions import CONDITIONS, ENGINE_REASONS, REASON_FIELDS, When
from hwadvisor.rules.playbooks.facts import FACT_FIELDS
from hwadvisor.rules.playbooks.metrics import METRICS

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


def template_fields(text: str) -> set[str]:
    """Return the field names a str.format template uses."""
    return {name.split(".")[0].split("[")[0]
            for _, name, _, _ in string.Formatter().parse(text) if name}


def _check_template(text: str) -> str:
    unknown = template_fields(text) - FACT_FIELDS - set(REASON_FIELDS)
    if unknown:
        raise ValueError(f"template names unknown facts {sorted(unknown)}: {text!r}")
    return text


class WhatIf(_Strict):
    """The change a rule predicts through: workload fields, ModelOptions knobs, spec fields."""

    workload: dict[str, Any] = Field(default_factory=dict)
    options: dict[str, Any] = Field(default_factory=dict)
    spec: dict[str, Any] = Field(default_factory=dict)
    planner: str | None = Field(
        None, description="A planner in registry.PLANNERS (planners.py, moves.py) adds changes")

    @model_validator(mode="after")
    def _known_keys(self) -> WhatIf:
        for part, model in (("workload", Workload), ("options", ModelOptions), ("spec", ModelSpec)):
            unknown = set(getattr(self, part)) - set(model.model_fields)
            if unknown:
                raise ValueError(f"what_if.{part} names unknown fields {sorted(unknown)}")
        if self.options:
            ModelOptions(**self.options)  # values must be valid knobs
        if self.planner is not None:
            from hwadvisor.rules.playbooks.registry import PLANNERS

            if self.planner not in PLANNERS:
                raise ValueError(f"unknown planner {self.planner!r}; known: {sorted(PLANNERS)}")
        return self


class Alternative(_Strict):
    """A named architecture change a rule compares (sliding-window-or-mla)."""

    name: str
    spec: dict[str, Any]
    text: str

    @field_validator("spec")
    @classmethod
    def _spec_keys(cls, value: dict[str, Any]) -> dict[str, Any]:
        unknown = set(value) - set(ModelSpec.model_fields)
        if unknown:
            raise ValueError(f"alternative spec names unknown fields {sorted(unknown)}")
        return value


class Variant(_Strict):
    """Text that applies on some hardware only (e.g. HIP graphs on ROCm); first match wins."""

    when: When
    title: str | None = None
    note: str | None = None
    caveats: list[str] = Field(default_factory=list)

    @field_validator("note")
    @classmethod
    def _note(cls, value: str | None) -> str | None:
        return None if value is None else _check_template(value)


class GoalOverride(_Strict):
    """What changes when the rule serves another of its goals."""

    title: str | None = None
    why: str | None = None
    when: When | None = None
    why_not: dict[str, str] | None = Field(None, description="Merged over the rule's why_not")
    metric: str | None = None
    metric_if_unfit: str | None = None
    tradeoff_metric: str | None = None
    min_gain: float | None = None
    only_to_fit: bool | None = None
    caveats: list[str] | None = None


class VerdictSpec(_Strict):
    """Which effect of which trial confirms or refutes a rule: the validator reads it.

    Trials are named by id only (tests/rules/test_rules_trials.py checks each id against the trial
    registry), so reading the playbooks never imports the validator or torch.
    """

    trial: str
    effect: str = Field("speedup", description="Effect key; '{batch}' picks the nearest batch")
    kind: Literal["speedup", "memory_factor", "info"] = Field(
        "speedup",
        description="info: the trial measures an input of the prediction, not its effect")
    ratio: tuple[str, list[str]] | None = Field(
        None, description="(numerator, denominators in order of preference) of effect keys")
    family: list[tuple[str, str]] = Field(
        default_factory=list, description="(effect key, where) pairs the advice may hold at")
    part: str | None = Field(
        None, description="What the trial times when it is only a part of the predicted metric")
    assumes: str | None = Field(
        None, description="The kernel or engine the advice assumes, when the trial may measure "
        "another (the verdict then names both): 'Marlin-class kernels'")


class Rule(_Strict):
    """One playbook entry."""

    id: str = Field(pattern=r"^[a-z0-9]+(-[a-z0-9]+)*$")
    goals: list[Goal] = Field(min_length=1)
    title: str
    why: str = Field(description="Template of the evidence; facts in braces")
    when: When = Field(default_factory=lambda: When())
    why_not: dict[str, str] = Field(default_factory=dict)
    what_if: WhatIf | None = None
    predictor: str | None = Field(None, description="A predictor in registry.PREDICTORS")
    alternatives: list[Alternative] = Field(default_factory=list)
    metric: str
    metric_if_unfit: str | None = Field(
        None, description="Reported instead when the workload does not fit (no time to speed up)")
    tradeoff_metric: str | None = None
    min_gain: float | None = Field(
        None, ge=0, description="Relative gain below which it is rejected")
    verdict: VerdictSpec | None = None
    only_to_fit: bool = Field(
        False, description="A plan takes it only to make the workload fit (offload, "
        "recomputation): never to speed up a workload that fits")
    changes_method: str | None = Field(
        None, description="It changes what is trained or served (LoRA, a smaller model): the "
        "plan takes it last, and says so")
    needs_retraining: bool = Field(
        False, description="An architecture change: needs a model trained that way; never a "
        "plan step, listed after the drop-in changes")
    complexity: int = Field(
        1, ge=1, le=3, description="What it asks of the user: 1 a flag or format, 2 a new "
        "parallel layout or a draft model, 3 a pipeline schedule; among changes that each "
        "make a workload fit, the simplest is taken")
    caveats: list[str] = Field(default_factory=list)
    references: list[str] = Field(default_factory=list)
    variants: list[Variant] = Field(default_factory=list)
    per_goal: dict[Goal, GoalOverride] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _consistent(self) -> Rule:
        metrics = [self.metric, self.metric_if_unfit, self.tradeoff_metric]
        for over in self.per_goal.values():
            metrics += [over.metric, over.metric_if_unfit, over.tradeoff_metric]
        for name in metrics:
            if name is not None and name not in METRICS:
                raise ValueError(f"{self.id}: unknown metric {name!r}; known: {sorted(METRICS)}")
        if (self.what_if is None) == (self.predictor is None):
            raise ValueError(f"{self.id}: give exactly one of what_if and predictor")
        if self.predictor is not None:
            from hwadvisor.rules.playbooks.registry import PREDICTORS

            if self.predictor not in PREDICTORS:
                raise ValueError(f"{self.id}: unknown predictor {self.predictor!r}")
        allowed = set(CONDITIONS) | set(ENGINE_REASONS)
        unknown = set(self.why_not) - allowed
        if unknown:
            raise ValueError(f"{self.id}: why_not names unknown conditions {sorted(unknown)}")
        texts = [self.why, *self.why_not.values()]
        for over in self.per_goal.values():
            texts += [over.why] if over.why else []
            texts += list((over.why_not or {}).values())
            unknown = set(over.why_not or {}) - allowed
            if unknown:
                raise ValueError(f"{self.id}: why_not names unknown conditions {sorted(unknown)}")
        for text in texts:
            _check_template(text)
        extra_goals = set(self.per_goal) - set(self.goals)
        if extra_goals:
            raise ValueError(f"{self.id}: per_goal for goals it lacks {sorted(extra_goals)}")
        return self

    @property
    def trial(self) -> str | None:
        """The id of the trial that checks this rule, if any."""
        return self.verdict.trial if self.verdict is not None else None

    def for_goal(self, goal: Goal) -> Rule:
        """Return the rule with the goal's overrides applied (conditions merged, rest replaced)."""
        over = self.per_goal.get(goal)
        if over is None:
            return self
        update: dict[str, Any] = {
            k: v for k, v in over.model_dump(exclude_none=True).items()
            if k not in ("when", "why_not")
        }
        if over.why_not:
            update["why_not"] = {**self.why_not, **over.why_not}
        if over.when is not None:
            merged = {**self.when.model_dump(exclude_none=True),
                      **over.when.model_dump(exclude_none=True)}
            update["when"] = When(**merged)
        return self.model_copy(update=update)


class Playbook(_Strict):
    """One TOML file: a list of rules."""

    rule: list[Rule]


def load_text(text: str, source: str = "<text>") -> list[Rule]:
    """Parse and validate one playbook file's text; ValueError names the file and the problem."""
    try:
        data = tomllib.loads(text)
        return Playbook.model_validate(data).rule
    except (tomllib.TOMLDecodeError, ValidationError) as exc:
        raise ValueError(f"{source}: {exc}") from exc


@lru_cache(maxsize=1)
def load_rules() -> tuple[Rule, ...]:
    """Every rule of the shipped playbooks, validated; ids are unique across files."""
    rules: list[Rule] = []
    folder = resources.files("hwadvisor.rules.playbooks")
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".toml"):
            rules.extend(load_text(entry.read_text(encoding="utf-8"), entry.name))
    ids = [r.id for r in rules]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise ValueError(f"duplicate rule ids {dupes}")
    return tuple(rules)


def rules_for_goal(goal: Goal) -> list[Rule]:
    """Return the rules of one goal, each with that goal's overrides applied, in file order."""
    return [r.for_goal(goal) for r in load_rules() if goal in r.goals]


def rule_by_id(rule_id: str) -> Rule | None:
    """Return the shipped rule with this id, or None."""
    return next((r for r in load_rules() if r.id == rule_id), None)
