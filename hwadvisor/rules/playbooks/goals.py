"""The goals a plan serves: one table of each goal's id, letter, phase, metric and conduct.

Everything that speaks of goals reads this table: the CLI's `--goal` choices and completion,
the phase a goal implies, the metric the search ranks on and the name the report gives it, and
what a goal does beside its metric (memory first, its speed floor, what its trial measures),
so no stage tests a goal's id to learn it.
`Goal` (models/recommend.py) is the report's spelling of the ids; a test holds the two equal.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from hwadvisor.errors import UserError
from hwadvisor.models.recommend import Goal
from hwadvisor.models.workload import Phase
from hwadvisor.rules.playbooks.metrics import METRICS, Metric

# A model that fits but generates slower than this is no answer on a phone or laptop: people
# read at ~5 words (~7 tokens) a second; 10 tokens/s keeps ahead of them (assumption, stated).
# `recommend --min-tokens-per-s` replaces it; every smaller preset that fits is still shown.
USABLE_TOKENS_PER_S = 10.0


# The memory goal trades speed for memory by design, so its floor is lower: 5 tokens/s is still
# about reading speed (~4 words a second; assumption, stated, after issue 27's suggestion).
# Below it a plan is no answer when one above it fits. `--min-tokens-per-s` replaces both.
MEMORY_TOKENS_PER_S = 5.0


@dataclass(frozen=True)
class GoalSpec:
    """One goal: its id, letter, phase and one metric, and what it does beside its metric."""

    id: Goal
    letter: str  # the playbooks' letters: A training, B inference, C memory
    phase: Phase  # the phase the goal implies when --phase is not given
    metric: str  # the METRICS path a plan is ranked and searched on (issue "plans, not lists")
    report_name: str  # the name plan.metric carries in the report
    # The goal trades speed for memory: a serving plan is the smallest that keeps the speed
    # floor (memory_plan_at_floor), and a step re-sized after later steps is kept when it runs
    # faster (search._resized_faster).
    memory_first: bool = False
    # The generation speed (tokens/s a sequence) a plan's answer must keep, unless
    # --min-tokens-per-s says another.
    speed_floor_tokens_per_s: float = USABLE_TOKENS_PER_S
    # What the plan's stacked trial compares (trials/plan_step.py): memory or time.
    trial_metric: Literal["memory", "time"] = "time"
    # The goal plans any phase (a model's memory for training as for serving), so a workload
    # of the other phase is no mismatch worth a note.
    any_phase: bool = False

    @property
    def metric_spec(self) -> Metric:
        """The metric's label, unit and which way is better."""
        return METRICS[self.metric]


GOAL_TABLE: tuple[GoalSpec, ...] = (
    GoalSpec("training-throughput", "a", "training", "estimate.tokens_per_s", "tokens_per_s"),
    GoalSpec("inference-latency", "b", "inference", "estimate.times.request_latency_s",
             "request_latency_s"),
    GoalSpec("memory-footprint", "c", "inference", "estimate.memory.total_bytes",
             "memory_per_gpu_bytes", memory_first=True,
             speed_floor_tokens_per_s=MEMORY_TOKENS_PER_S, trial_metric="memory",
             any_phase=True),
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
