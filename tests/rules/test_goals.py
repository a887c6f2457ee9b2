"""The goal table (rules/playbooks/goals.py): one row per goal, read by every user of goals."""

from __future__ import annotations

from typing import get_args

import pytest

from hwadvisor.errors import UserError
from hwadvisor.models.recommend import Goal
from hwadvisor.rules.playbooks.goals import (
    DEFAULT_GOAL,
    GOAL_TABLE,
    GOALS,
    GoalSpec,
    goal_spec,
    parse_goal,
)
from hwadvisor.rules.playbooks.metrics import METRICS
from hwadvisor.rules.playbooks.schema import load_rules


def test_the_table_spells_the_reports_goals() -> None:
    assert set(GOALS) == set(get_args(Goal))
    assert DEFAULT_GOAL in GOALS


def test_letters_and_ids_are_unique() -> None:
    names = [spec.id for spec in GOAL_TABLE] + [spec.letter for spec in GOAL_TABLE]
    assert len(names) == len(set(names))


@pytest.mark.parametrize("spec", GOAL_TABLE, ids=lambda s: s.id)
def test_each_goal_ranks_on_a_known_metric(spec: GoalSpec) -> None:
    assert goal_spec(spec.id) is spec
    assert spec.metric in METRICS


@pytest.mark.parametrize(("value", "goal"), [
    ("a", "training-throughput"), (" B ", "inference-latency"),
    ("memory-footprint", "memory-footprint"), (None, DEFAULT_GOAL)])
def test_parse_goal_takes_ids_and_letters(value: str | None, goal: str) -> None:
    assert parse_goal(value) == goal


def test_an_unknown_goal_lists_the_choices() -> None:
    with pytest.raises(UserError) as caught:
        parse_goal("z")
    assert caught.value.hint == ("valid goals: training-throughput (a), inference-latency (b), "
                                 "memory-footprint (c)")


def test_every_goal_has_rules() -> None:
    for goal in GOALS:
        assert any(goal in rule.goals for rule in load_rules()), goal


def test_what_a_goal_does_is_in_its_row() -> None:
    memory = goal_spec("memory-footprint")
    assert memory.memory_first and memory.any_phase and memory.trial_metric == "memory"
    assert memory.speed_floor_tokens_per_s == 5.0
    for goal in ("training-throughput", "inference-latency"):
        spec = goal_spec(goal)
        assert not spec.memory_first and not spec.any_phase and spec.trial_metric == "time"
        assert spec.speed_floor_tokens_per_s == 10.0


def test_a_memory_metric_is_measured_as_memory() -> None:
    # plain.py says the memory in use where the plan's metric is in bytes: the memory goal's
    for spec in GOAL_TABLE:
        assert (spec.metric_spec.unit == "bytes") == (spec.trial_metric == "memory"), spec.id


def test_a_workload_off_the_goals_phase_is_noted_unless_the_goal_plans_any() -> None:
    from types import SimpleNamespace

    from hwadvisor.workload.settle import workload_notes

    training = SimpleNamespace(is_default=False, phase="training")  # what the notes read
    assert any("most rules of the goal are rejected" in note
               for note in workload_notes(training, "H100", "inference-latency", "inference"))
    assert workload_notes(training, "H100", "memory-footprint", None) == []
