"""Rules-engine output: recommendations, their predictions and validation verdicts."""

from typing import Literal

from pydantic import Field

from hwadvisor.models.hardware import Strict
from hwadvisor.models.trial import Verdict

Goal = Literal["training-throughput", "inference-latency", "memory-footprint"]


class Prediction(Strict):
    """A predicted effect: metric before and after, and the factor after/before."""

    metric: str
    unit: str | None = None
    before: float | None = None
    after: float | None = None
    factor: float | None = None
    text: str | None = Field(None, description="The prediction in words, with numbers")


class Validation(Strict):
    """What a trial said about the prediction."""

    status: Verdict = "pending"
    measured_factor: float | None = None
    prediction_error: float | None = Field(
        None, description="(measured - predicted) / predicted of the factor"
    )
    ci: list[float] | None = Field(
        None, min_length=2, max_length=2,
        description="95% confidence interval [low, high] of measured_factor (same space)")
    threshold: float | None = Field(
        None, description="The value of measured_factor the interval was held against: "
        "confirmed when it lies wholly on the helpful side, refuted when wholly on the other")
    runs: int | None = Field(None, description="Samples behind the interval (A/B pairs, timings)")
    detail: str | None = None
    holds_where: str | None = Field(None, description="Where the advice holds, when narrowed")


class Recommendation(Strict):
    """One fired rule."""

    id: str
    goal: Goal
    title: str
    rank: int = 0
    why: str = Field(description="The evidence that made it fire, in numbers")
    predicted: Prediction
    trial: str | None = None
    caveats: list[str] = Field(default_factory=list)
    references: list[str] = Field(default_factory=list)
    validation: Validation = Field(default_factory=Validation)
    changes: dict[str, str | int | float | bool] = Field(
        default_factory=dict, description="The workload/option changes the prediction assumed"
    )
    fits_after: bool | None = Field(
        None, description="Whether the workload fits the memory limit after this change"
    )
    in_plan: bool = Field(False, description="The plan applies it (plan.steps, in order)")
    step: int | None = Field(None, description="Its place in plan.steps (1-based)")
    needs_retraining: bool = Field(
        False, description="Needs a model trained that way (an architecture change)")
    side_effects: list[str] = Field(
        default_factory=list, description="What else it changes, in words (never ranked on)")


class Rejected(Strict):
    """A rule of the goal that did not fire, and why not."""

    id: str
    why_not: str
    conditions_failed: list[str] = Field(
        default_factory=list, description="The rule's conditions that did not hold"
    )
