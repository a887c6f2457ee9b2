"""Validator models: a trial's raw samples, statistics and verdict."""

import statistics
from typing import Any, ClassVar, Literal

from pydantic import Field, computed_field, model_validator

from hwadvisor.models.hardware import Finite, NonNegative, Strict

TrialStatus = Literal["ok", "unsupported", "error", "interrupted"]
Better = Literal["higher", "lower"]
# inconclusive: the measurement's 95% interval straddles the rule's threshold (no decision).
Verdict = Literal["pending", "confirmed", "refuted", "inconclusive", "unsupported", "error"]

NOISY_SPREAD = 0.10  # spread over 10% of the median marks a measurement noisy
DERIVED_FIELDS = ("median", "spread", "noisy")


class Measurement(Strict):
    """One timed variant: raw samples kept; median and spread derived (torch.utils.benchmark style)."""  # noqa: E501

    label: str
    unit: str = "s"
    samples: list[NonNegative] = Field(
        default_factory=list, description="Raw readings (seconds, or bytes), finite and >= 0")
    value: NonNegative | None = Field(
        None, description="A derived figure: GB/s, TFLOP/s, bytes ...")
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


# The trials' naming convention for effects, in one place: suffix -> (unit, which way is better).
# A name matching none has no unit and no direction (it is shown, never gated on).
_EFFECT_SUFFIXES: tuple[tuple[str, str, Better | None], ...] = (
    ("_tflops", "TFLOP/s", "higher"),
    ("_tops", "TOPS", "higher"),
    ("_gbps", "GB/s", "higher"),
    ("_tokens_per_s", "tokens/s", "higher"),
    ("_bytes", "bytes", "lower"),
    ("_ms", "ms", "lower"),
    ("_us", "µs", "lower"),
    ("_s", "s", "lower"),
    ("_error", "ratio", "lower"),
    ("memory_factor", "ratio", "lower"),
    ("time_factor", "ratio", "lower"),
)


def effect_meaning(name: str) -> tuple[str | None, Better | None]:
    """Return the (unit, better) an effect's name implies: copy_gbps -> GB/s, higher is better."""
    lowered = name.lower()
    if lowered.startswith("speedup") or "_speedup" in lowered:
        return "x", "higher"
    for suffix, unit, better in _EFFECT_SUFFIXES:
        if lowered.endswith(suffix) or (suffix == "_bytes" and "_bytes_" in lowered):
            return unit, better
    for part, unit, better in _EFFECT_SUFFIXES:
        if part.endswith("_factor") and lowered.startswith(part):
            return unit, better
    return None, None


class Effect(Strict):
    """One measured effect of a trial: a named value with its unit and which way is better."""

    name: str
    value: Finite
    unit: str | None = Field(None, description="x, GB/s, TFLOP/s, s, ms, bytes, ratio ...")
    better: Better | None = Field(None, description="Which way is an improvement, if any")
    ci: list[float] | None = Field(
        None, min_length=2, max_length=2,
        description="95% confidence interval [low, high] of the value (models/stats.py)")
    runs: int | None = Field(
        None, description="Samples behind the interval: A/B pairs for a ratio, timings for a rate")

    @classmethod
    def named(cls, name: str, value: float, ci: tuple[float, float] | list[float] | None = None,
              runs: int | None = None) -> "Effect":
        """Build an effect whose unit and direction follow the trials' naming convention."""
        unit, better = effect_meaning(name)
        return cls(name=name, value=float(value), unit=unit, better=better,
                   ci=[float(ci[0]), float(ci[1])] if ci is not None else None, runs=runs)


def named_effects(values: dict[str, float],
                  intervals: dict[str, tuple[tuple[float, float] | None, int]] | None = None,
                  ) -> list[Effect]:
    """Effects from a name -> value dict, by the naming convention (see effect_meaning).

    intervals, when given, maps a name to (ci, runs) for the effects that carry an interval.
    """
    found = intervals or {}
    return [Effect.named(k, v, *found.get(k, (None, None))) for k, v in values.items()]


class TrialEnvironment(Strict):
    """Where a trial ran."""

    device: str | None = None
    device_index: int | None = Field(
        None, description="devices[].index (NVML's order, as nvidia-smi numbers them) of the "
        "GPU the trial ran on; null on the CPU or when it could not be told")
    torch_version: str | None = None
    sm_clock_mhz: int | None = Field(None, description="SM clock right after the trial")
    memory_clock_mhz: int | None = None
    sm_clock_mhz_before: int | None = Field(None, description="SM clock right before the trial")
    throttle_reasons_before: list[str] | None = Field(
        None, description="NVML clocks-event reasons active before the trial (null: unreadable)")
    throttle_reasons: list[str] | None = Field(
        None, description="NVML clocks-event reasons active right after the trial")
    other_processes: list[str] = Field(default_factory=list)


class TrialResult(Strict):
    """The outcome of one trial: measurements, derived effect, and the status."""

    # `effect` is computed now, but schema 1.0 reports hold only it: the reader keeps it as
    # input and _read_effect_dict turns it into typed effects.
    LEGACY_INPUTS: ClassVar[frozenset[str]] = frozenset({"effect"})

    id: str
    status: TrialStatus
    reason: str | None = Field(None, description="Why unsupported, or the error message")
    measurements: list[Measurement] = Field(default_factory=list)
    effects: list[Effect] = Field(
        default_factory=list, description="Measured effects with units, e.g. speedup_b1 = 2.1 x"
    )
    summary: str | None = None
    kernel: str | None = Field(
        None, description="The kernel (or library path) the trial measured, when it matters: "
        "'torch _weight_int4pack_mm', 'torch._scaled_mm' ...")
    max_error: float | None = None
    environment: TrialEnvironment = Field(default_factory=TrialEnvironment)
    wall_s: NonNegative | None = None
    busy_gpu: bool = Field(False, description="Other processes used the GPU during the trial")
    repeats: list[dict[str, Finite]] = Field(
        default_factory=list, description="validate --repeat N: each run's figures of this "
        "trial by name ('effect.NAME', 'LABEL.median', 'LABEL.value'; see figure_values), "
        "the result itself being the run nearest their medians; empty for a single run. "
        "compare gates on the runs' medians and their spread between runs")

    @model_validator(mode="before")
    @classmethod
    def _read_effect_dict(cls, data: Any) -> Any:
        """`effect` (name -> value) is derived: reports of schema 1.0 have only it, so read it."""
        if isinstance(data, dict) and "effect" in data:
            data = dict(data)
            legacy = data.pop("effect")
            if "effects" not in data and isinstance(legacy, dict):
                data["effects"] = [{"name": k, "value": v, **dict(zip(
                    ("unit", "better"), effect_meaning(str(k)), strict=True))}
                    for k, v in legacy.items()]
        return data

    @computed_field  # type: ignore[prop-decorator]
    @property
    def effect(self) -> dict[str, float]:
        """The effects by name (value only): what verdicts and comparisons look up."""
        return {e.name: e.value for e in self.effects}

    def effect_of(self, name: str) -> Effect | None:
        """Return the effect with this name, or None."""
        return next((e for e in self.effects if e.name == name), None)


def figure_values(trial: TrialResult) -> dict[str, float]:
    """Return a trial's figures by name: 'effect.NAME', 'LABEL.median' and 'LABEL.value'.

    A label seen again in the same trial reads 'LABEL#2'. The names compare uses for the
    trial's figures (trials.ID.NAME) and validate --repeat records for each run
    (TrialResult.repeats).
    """
    figures = {f"effect.{e.name}": e.value for e in trial.effects}
    seen: dict[str, int] = {}
    for m in trial.measurements:
        seen[m.label] = seen.get(m.label, 0) + 1
        label = m.label if seen[m.label] == 1 else f"{m.label}#{seen[m.label]}"
        if m.median is not None:
            figures[f"{label}.median"] = m.median
        if m.value is not None:
            figures[f"{label}.value"] = m.value
    return figures
