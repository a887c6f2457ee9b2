"""What a rule's planner or predictor sees: the plan so far and a way to estimate a what-if."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hwadvisor.models import Device, Estimate, HostInfo, MemoryEstimate, ModelOptions, Workload
from hwadvisor.rules.playbooks.facts import Facts

Estimator = Callable[[Workload, Device, ModelOptions], Estimate]


def within_limit(total_bytes: float, facts: Facts) -> bool:
    """Whether a state needing total_bytes per GPU fits its memory limit (no limit: it fits)."""
    limit = facts.limit_bytes
    return limit is None or total_bytes <= limit

# The workload fields an estimate depends on (all but the nested spec, keyed on its own).
# engine_defaults is text derived from the engine; engine_options (a dict) enters as a tuple.
_WORKLOAD_KEYS = tuple(k for k in Workload.model_fields
                       if k not in ("spec", "engine_defaults", "engine_options"))
# id(spec) -> (spec, its key): specs are shared by every what-if of a search, so their key is
# computed once; the spec itself is held so its id cannot be reused by another object.
_SPEC_KEYS: dict[int, tuple[Any, tuple[Any, ...]]] = {}


def _spec_key(spec: Any) -> tuple[Any, ...]:
    found = _SPEC_KEYS.get(id(spec))
    if found is not None and found[0] is spec:
        return found[1]
    # param_parts (a model read from its module tree) is a dict: keyed by its items.
    key = tuple(tuple(v.items()) if isinstance(v, dict) else v for v in spec.__dict__.values())
    if len(_SPEC_KEYS) > 4096:
        _SPEC_KEYS.clear()
    _SPEC_KEYS[id(spec)] = (spec, key)
    return key


@dataclass
class RuleContext:
    """One state of the plan: workload and knobs, their estimate and facts, and a what-if."""

    workload: Workload
    device: Device
    host: HostInfo | None
    options: ModelOptions
    estimate: Estimate
    facts: Facts
    estimator: Estimator
    _cache: dict[Any, Estimate] = field(default_factory=dict)

    @staticmethod
    def key_of(workload: Workload, options: ModelOptions) -> tuple[Any, ...]:
        """Return a cache key for a (workload, options) state: the fields that move an estimate.

        Plain tuples in the models' field order (no sorting, no repr): the plan search builds
        a key for every what-if it judges.
        """
        spec = workload.spec
        spec_key = None if spec is None else _spec_key(spec)
        w = tuple(workload.__dict__[k] for k in _WORKLOAD_KEYS)
        engine_options = tuple(workload.engine_options.items())
        return (w, engine_options, spec_key, tuple(options.__dict__.values()))

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

    def memory_with(
        self, workload_changes: dict[str, Any], option_changes: dict[str, Any],
    ) -> MemoryEstimate:
        """Memory of this state with the changes applied: what `fits` needs, cheaply.

        The estimator's memory() when it has one (the performance model does), the whole
        estimate's memory otherwise; a state already estimated is not computed again.
        """
        workload, options = self.what_if(workload_changes, option_changes)
        found = self._cache.get(self.key_of(workload, options))
        if found is not None:
            return found.memory
        memory = getattr(self.estimator, "memory", None)
        if memory is None:
            return self.estimate_with(workload_changes, option_changes).memory
        return memory(workload, self.device, options)  # type: ignore[no-any-return]

    def fits_with(self, workload_changes: dict[str, Any],
                  option_changes: dict[str, Any]) -> bool:
        """Whether this state with the changes fits the memory limit (no limit: it fits)."""
        return within_limit(self.memory_with(workload_changes, option_changes).total_bytes,
                            self.facts)

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
