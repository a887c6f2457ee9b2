"""The goals a plan serves: one table of each goal's id, letter, phase and one metric.

Everything that speaks of goals reads this table: the CLI's `--goal` choices and completion,
the phase a goal implies, the metric the search ranks on and the name the report gives it.
`Goal` (models/recommend.py) is the report's spelling of the ids; a test holds the two equal.
"""

from __future__ import annotations

from dataclasses import dataclass

from hwadvisor.errors import UserError
from hwadvisor.models.recommend import Goal
from hwadvisor.models.workload import Phase
from hwadvisor.rules.playbooks.metrics import METRICS, Metric


@dataclass(frozen=True)
class GoalSpec:
    """One goal: its id, the playbook letter that also names it, its phase and its one metric."""

    id: Goal
    letter: str  # the playbooks' letters: A training, B inference, C memory
    phase: Phase  # the phase the goal implies when --phase is not given
    metric: str  # the METRICS path a plan is ranked and searched on (issue "plans, not lists")
    report_name: str  # the name plan.metric carries in the report

    @property
    def metric_spec(self) -> Metric:
        """The metric's label, unit and which way is better."""
        return METRICS[self.metric]


GOAL_TABLE: tuple[GoalSpec, ...] = (
    GoalSpec("training-throughput", "a", "training", "estimate.tokens_per_s", "tokens_per_s"),
    GoalSpec("inference-latency", "b", "inference", "estimate.times.request_latency_s",
             "request_latency_s"),
    GoalSpec("memory-footprint", "c", "inference", "estimate.memory.total_bytes",
             "memory_per_gpu_bytes"),
)
GOALS: tuple[Goal, ...] = tuple(spec.id for spec in GOAL_TABLE)
# Inference latency is the default goal: it applies on every device class (a phone, a laptop,
# a CPU-only host, an H200), while training advice only makes sense where people train.
DEFAULT_GOAL: Goal = "inference-latency"
_BY_ID: dict[str, GoalSpec] = {spec.id: spec for spec in GOAL_TABLE}


def goal_spec(goal: Goal) -> GoalSpec:
    """Return the table's row for a goal id."""
    return _BY_ID[goal]


def parse_goal(value: str | None) -> Goal:
    """Return the goal for a name or its letter (a, b, c); raise UserError listing the choices."""
    if value is None:
        return DEFAULT_GOAL
    wanted = value.strip().lower()
    for spec in GOAL_TABLE:
        if wanted in (spec.id, spec.letter):
            return spec.id
    choices = ", ".join(f"{spec.id} ({spec.letter})" for spec in GOAL_TABLE)
    raise UserError(f"unknown goal {value!r}", hint=f"valid goals: {choices}")
