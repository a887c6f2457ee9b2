"""Validator models: a trial's raw samples, statistics and verdict."""

from __future__ import annotations

import statistics
from typing import Any, Literal

from pydantic import Field, computed_field, model_validator

from hwadvisor.models.hardware import Strict

TrialStatus = Literal["ok", "unsupported", "error", "interrupted"]
Verdict = Literal["pending", "confirmed", "refuted", "unsupported", "error"]

NOISY_SPREAD = 0.10  # spread over 10% of the median marks a measurement noisy
DERIVED_FIELDS = ("median", "spread", "noisy")


class Measurement(Strict):
    """One timed variant: raw samples kept; median and spread derived (torch.utils.benchmark style)."""  # noqa: E501

    label: str
    unit: str = "s"
    samples: list[float] = Field(default_factory=list)
    value: float | None = Field(None, description="A derived figure: GB/s, TFLOP/s, bytes ...")
    value_unit: str | None = None
    error: float | None = Field(None, description="Relative error against the reference")
    params: dict[str, float | int | str] = Field(default_factory=dict)
    skipped: str | None = Field(
        None, description="Why this variant did not run (unsupported here, or its error)"
    )

    @model_validator(mode="before")
    @classmethod
    def _drop_derived(cls, data: Any) -> Any:
        """median, spread and noisy are written to JSON but derived: recompute, never read them."""
        if isinstance(data, dict) and any(k in data for k in DERIVED_FIELDS):
            data = {k: val for k, val in data.items() if k not in DERIVED_FIELDS}
        return data

    @computed_field  # type: ignore[prop-decorator]
    @property
    def median(self) -> float | None:
        """Median of the samples."""
        return statistics.median(self.samples) if self.samples else None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def spread(self) -> float | None:
        """Interquartile range of the samples (0 for fewer than two)."""
        if len(self.samples) < 2:
            return 0.0 if self.samples else None
        q = statistics.quantiles(self.samples, n=4, method="inclusive")
        return q[2] - q[0]

    @computed_field  # type: ignore[prop-decorator]
    @property
    def noisy(self) -> bool:
        """True when the spread exceeds 10% of the median."""
        med, spread = self.median, self.spread
        return bool(med and spread is not None and spread > NOISY_SPREAD * abs(med))


class TrialEnvironment(Strict):
    """Where a trial ran."""

    device: str | None = None
    torch_version: str | None = None
    sm_clock_mhz: int | None = None
    memory_clock_mhz: int | None = None
    other_processes: list[str] = Field(default_factory=list)


class TrialResult(Strict):
    """The outcome of one trial: measurements, derived effect, and the status."""

    id: str
    status: TrialStatus
    reason: str | None = Field(None, description="Why unsupported, or the error message")
    measurements: list[Measurement] = Field(default_factory=list)
    effect: dict[str, float] = Field(
        default_factory=dict, description="Named measured effects, e.g. speedup_b1 = 2.1"
    )
    summary: str | None = None
    max_error: float | None = None
    environment: TrialEnvironment = Field(default_factory=TrialEnvironment)
    wall_s: float | None = None
    busy_gpu: bool = Field(False, description="Other processes used the GPU during the trial")
