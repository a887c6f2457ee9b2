"""What a rule's planner or predictor sees: the plan so far and a way to estimate a what-if."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hwadvisor.models import Device, Estimate, HostInfo, ModelOptions, Workload

Estimator = Callable[[Workload, Device, ModelOptions], Estimate]


@dataclass
class RuleContext:
    """What a planner or predictor sees: the baseline and a way to estimate a what-if."""

    workload: Workload
    device: Device
    host: HostInfo | None
    options: ModelOptions
    estimate: Estimate
    facts: dict[str, Any]
    estimator: Estimator
    _cache: dict[str, Estimate] = field(default_factory=dict)

    def what_if(
        self, workload_changes: dict[str, Any], option_changes: dict[str, Any],
        spec_changes: dict[str, Any] | None = None,
    ) -> tuple[Workload, ModelOptions]:
        """Return the workload and options with the changes applied (validated)."""
        data = self.workload.model_dump()
        data.update(workload_changes)
        if spec_changes and self.workload.spec is not None:
            data["spec"] = {**data["spec"], **spec_changes}
        workload = Workload.model_validate(data)
        options = ModelOptions.model_validate({**self.options.model_dump(), **option_changes})
        return workload, options

    def estimate_with(
        self, workload_changes: dict[str, Any], option_changes: dict[str, Any],
        spec_changes: dict[str, Any] | None = None,
    ) -> Estimate:
        """Estimate of the baseline with the changes applied; cached per change set."""
        key = repr((sorted(workload_changes.items()), sorted(option_changes.items()),
                    sorted((spec_changes or {}).items())))
        if key not in self._cache:
            workload, options = self.what_if(workload_changes, option_changes, spec_changes)
            self._cache[key] = self.estimator(workload, self.device, options)
        return self._cache[key]


