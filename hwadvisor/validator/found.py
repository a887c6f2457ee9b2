"""What the validator found for a report, handed back whole: the pipeline puts it in the report.

The validator's functions read the report and return a `Found`; none of them sets a field on
the report, its plan, its recommendations or its devices (pipeline.py assembles the report).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hwadvisor.models import Measured, PlanValidation, TrialResult, Validation
from hwadvisor.models.loadtest import LoadTest


@dataclass
class Found:
    """Trials run, their verdicts and figures, and the notes they call for."""

    trials: list[TrialResult] = field(default_factory=list)
    interrupted: bool = False
    notes: list[str] = field(default_factory=list)
    # One validation per recommendation, in the report's order; None: recommendations untouched.
    recommendations: list[Validation] | None = None
    plan: PlanValidation | None = None  # None: the plan's validation stays as it was
    measured: dict[int, Measured | None] = field(default_factory=dict)  # by device index
    # A cluster rank's figures from its own trials, its GPU's or, without one, the CPU's.
    rank_measured: Measured | None = None
    load_test: LoadTest | None = None  # a running endpoint under a load (validate --endpoint)

    def note(self, text: str | None) -> None:
        """Add a note once (the same busy-GPU note comes from every device's run)."""
        if text and text not in self.notes:
            self.notes.append(text)
