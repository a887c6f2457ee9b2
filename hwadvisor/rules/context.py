"""What a rule's planner or predictor sees: the plan so far and a way to estimate a what-if."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hwadvisor.models import Device, Estimate, HostInfo, ModelOptions, Workload

Estimator = Callable[[Workload, Device, ModelOptions], Estimate]

# Workload fields that change the spec's shape: a what-if on them re-validates the workload.
_SPEC_FIELD = "spec"


@dataclass
class RuleContext:
    """One state of the plan: workload and knobs, their estimate and facts, and a what-if."""

    workload: Workload
    device: Device
    host: HostInfo | None
    options: ModelOptions
    estimate: Estimate
    facts: dict[str, Any]
    estimator: Estimator
    _cache: dict[str, Estimate] = field(default_factory=dict)

    @staticmethod
    def key_of(workload: Workload, options: ModelOptions) -> str:
        """Return a cache key for a (workload, options) state: the fields that move an estimate."""
        spec = workload.spec
        spec_key = None if spec is None else tuple(sorted(
            (k, v) for k, v in spec.__dict__.items() if not isinstance(v, (list, dict))))
        w = tuple(sorted((k, v) for k, v in workload.__dict__.items()
                         if k != _SPEC_FIELD and not isinstance(v, (list, dict))))
        return repr((w, spec_key, tuple(sorted(options.__dict__.items()))))

    def what_if(
        self, workload_changes: dict[str, Any], option_changes: dict[str, Any],
        spec_changes: dict[str, Any] | None = None,
    ) -> tuple[Workload, ModelOptions]:
        """Return the workload and options with the changes applied.

        Playbook values are validated when the TOML loads, and planners compute theirs, so a
        copy without re-validation is safe and keeps the plan search fast.
        """
        workload = self.workload.model_copy(update=workload_changes) if workload_changes \
            else self.workload
        if spec_changes and workload.spec is not None:
            workload = workload.model_copy(
                update={"spec": workload.spec.model_copy(update=spec_changes)})
        options = self.options.model_copy(update=option_changes) if option_changes \
            else self.options
        return workload, options

    def estimate_with(
        self, workload_changes: dict[str, Any], option_changes: dict[str, Any],
        spec_changes: dict[str, Any] | None = None,
    ) -> Estimate:
        """Estimate of this state with the changes applied; cached per resulting state."""
        workload, options = self.what_if(workload_changes, option_changes, spec_changes)
        key = self.key_of(workload, options)
        if key not in self._cache:
            self._cache[key] = self.estimator(workload, self.device, options)
        return self._cache[key]
