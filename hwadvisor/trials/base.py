"""The one interface every trial meets, and the context it runs in."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from hwadvisor.models import Device, TrialResult, Workload


@dataclass
class TrialContext:
    """What a trial may use: the target device, the workload (for its shapes), a time budget."""

    device: Device | None = None
    workload: Workload | None = None
    budget_s: float = 5.0
    quick: bool = False  # smaller shapes and fewer repeats (tests on 2-core CI machines)
    extra: dict[str, object] = field(default_factory=dict)


class Trial(Protocol):
    """A short real measurement. `needs` says what it requires; `run` never leaks device memory."""

    id: str
    title: str
    needs: str  # in words: "CUDA GPU with FP8 tensor cores (cc >= 8.9)", "any torch device" ...

    def unsupported_reason(self, ctx: TrialContext) -> str | None:
        """Why this trial cannot run here, or None when it can."""
        ...

    def run(self, ctx: TrialContext) -> TrialResult:
        """Run the trial and return its result (status ok, or error with the message)."""
        ...
