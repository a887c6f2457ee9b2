"""Compare two reports: measured figures (with a regression threshold and noise) and verdicts.

Which way is better follows the unit: GB/s, TFLOP/s, tokens/s and speedups are better higher;
seconds are better lower. A figure whose direction cannot be told is shown but never gates.

A figure regresses only when it got worse by more than the threshold (--max-regression) *and*
by more than the noise of the two runs: each run's relative spread (interquartile range over
median of the raw samples the figure comes from) added. Two runs of the same code on a busy
CPU differ by several percent; a change inside that spread is not evidence of a regression.
A figure's spread: a measurement's median and derived value use that measurement's samples;
an effect equal to a measurement's value uses that one; any other effect (a speedup, a ratio
of two timings) adds the two largest spreads of its trial's measurements, as relative errors
of a ratio add; device.measured figures use the trial effect they were copied from.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, Field, computed_field

from hwadvisor.models import Measurement, Report, TrialResult

Better = Literal["higher", "lower"]

HIGHER_UNITS = {"gb/s", "gbps", "tflop/s", "tflops", "tokens/s", "x", "×", "speedup"}
LOWER_UNITS = {"s", "ms", "us", "µs", "ns"}
# A measurement's label carries no unit when its value has none: then its name decides.
HIGHER_NAME_PARTS = ("speedup", "gbps", "tflops", "tokens_per_s", "throughput", "saved")
LOWER_NAME_SUFFIXES = ("_s", "_ms", "_us", "_ns", "latency", "error", "_bytes")


def better_direction(unit: str | None, name: str = "") -> Better | None:
    """'higher' or 'lower' is better for a figure of this unit (or, without one, this name)."""
    if unit:
        u = unit.strip().lower()
        if u in HIGHER_UNITS:
            return "higher"
        if u in LOWER_UNITS:
            return "lower"
    n = name.lower()
    if any(part in n for part in HIGHER_NAME_PARTS):
        return "higher"
    if n.endswith(LOWER_NAME_SUFFIXES):
        return "lower"
    return None


class FigureDelta(BaseModel):
    """One measured figure in both reports."""

    key: str = Field(description="Where the figure lives, e.g. trials.matmul-peak.bf16.value")
    unit: str | None = None
    better: Better | None = None
    baseline: float
    current: float
    change_pct: float | None = Field(None, description="(current - baseline) / baseline x 100")
    worse_pct: float | None = Field(None, description="How much worse, in % (negative = better)")
    noise_pct: float = Field(
        0.0, description="The two runs' relative spreads added, in %: a change within it is "
        "noise, not a regression")
    noisy: bool = False
    regressed: bool = False


class VerdictChange(BaseModel):
    """A recommendation's verdict in both reports.

    Only confirmed -> refuted regresses: the measurement now says the advice does not pay.
    confirmed -> inconclusive is `undecided`, not a regression: the interval widened (a noisy
    run, a busy GPU) and says neither; gate on it with --fail-on inconclusive if wanted.
    """

    id: str
    baseline: str | None = None
    current: str | None = None
    regressed: bool = False
    undecided: bool = Field(False, description="Decided in the baseline, inconclusive now")


class Comparison(BaseModel):
    """The outcome of `hwadvisor compare`."""

    baseline_path: str | None = None
    current_path: str | None = None
    max_regression_pct: float
    figures: list[FigureDelta] = Field(default_factory=list)
    verdicts: list[VerdictChange] = Field(default_factory=list)
    only_in_baseline: list[str] = Field(default_factory=list)
    only_in_current: list[str] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def regressions(self) -> list[str]:
        """Each regression in words; empty means the comparison passed."""
        out = [
            f"{f.key}: {f.baseline:.4g} → {f.current:.4g} {f.unit or ''} "
            f"({f.worse_pct:.1f}% worse, limit {self.max_regression_pct:g}%, noise "
            f"±{f.noise_pct:.1f}%)".replace("  ", " ")
            for f in self.figures if f.regressed and f.worse_pct is not None
        ]
        out += [f"recommendation {v.id}: {v.baseline} → {v.current}"
                for v in self.verdicts if v.regressed]
        return out


@dataclass(frozen=True)
class Figure:
    """One measured figure of a report: value, unit, direction and relative noise."""

    value: float
    unit: str | None
    better: Better | None
    noisy: bool = False
    spread: float = 0.0  # relative: interquartile range / median of the samples behind it


def _relative_spread(m: Measurement) -> float:
    med, spread = m.median, m.spread
    if not med or spread is None or not math.isfinite(med) or not math.isfinite(spread):
        return 0.0
    return abs(spread / med)


def _effect_spread(trial: TrialResult, value: float) -> float:
    """Relative noise of an effect: its measurement's, or a ratio's (two largest added)."""
    for m in trial.measurements:
        if m.value is not None and m.value == value:
            return _relative_spread(m)
    spreads = sorted((_relative_spread(m) for m in trial.measurements), reverse=True)
    return sum(spreads[:2])


def _trial_figures(trial: TrialResult) -> dict[str, Figure]:
    figures: dict[str, Figure] = {}
    base = f"trials.{trial.id}"
    for effect in trial.effects:
        figures[f"{base}.effect.{effect.name}"] = Figure(
            effect.value, effect.unit, effect.better, spread=_effect_spread(trial, effect.value))
    seen: dict[str, int] = {}
    effect_values = trial.effect.values()
    for m in trial.measurements:
        label = m.label
        seen[label] = seen.get(label, 0) + 1
        if seen[label] > 1:
            label = f"{label}#{seen[label]}"
        spread = _relative_spread(m)
        if m.median is not None:
            figures[f"{base}.{label}.median"] = Figure(
                m.median, m.unit, better_direction(m.unit, m.label), m.noisy, spread)
        # A derived value the trial also reports as an effect (matmul's bf16_tflops) is shown
        # once, as the effect.
        if m.value is not None and m.value not in effect_values:
            figures[f"{base}.{label}.value"] = Figure(
                m.value, m.value_unit, better_direction(m.value_unit, m.label), m.noisy, spread)
    return figures


def _copied_spread(report: Report, value: float) -> float:
    """Noise of a device.measured figure: that of the trial effect it was copied from."""
    for trial in report.trials:
        if trial.status == "ok" and value in trial.effect.values():
            return _effect_spread(trial, value)
    return 0.0


def measured_figures(report: Report) -> dict[str, Figure]:
    """Every measured figure of a report by key (device.measured and ok trials)."""
    figures: dict[str, Figure] = {}
    for d in report.devices:
        if d.measured is None:
            continue
        base = f"devices[{d.index}].measured"
        bandwidth = d.measured.memory_bandwidth_gbps
        if bandwidth is not None:
            figures[f"{base}.memory_bandwidth_gbps"] = Figure(
                bandwidth, "GB/s", "higher", spread=_copied_spread(report, bandwidth))
        for fmt, value in d.measured.matmul_tflops.items():
            figures[f"{base}.matmul_tflops.{fmt}"] = Figure(
                value, "TFLOP/s", "higher", spread=_copied_spread(report, value))
    for trial in report.trials:
        if trial.status == "ok":
            figures.update(_trial_figures(trial))
    return figures


def _finite(*values: float | None) -> bool:
    return all(v is not None and math.isfinite(v) for v in values)


def _delta(key: str, base: Figure, cur: Figure, max_regression_pct: float) -> FigureDelta:
    unit = base.unit or cur.unit
    better = base.better or cur.better
    delta = FigureDelta(key=key, unit=unit, better=better, baseline=base.value,
                        current=cur.value, noisy=base.noisy or cur.noisy)
    if base.value == 0 or not _finite(base.value, cur.value):
        return delta  # no relative change from zero (or from a non-number); shown, never gates
    change = (cur.value - base.value) / abs(base.value) * 100.0
    noise = (base.spread + cur.spread) * 100.0
    if not _finite(change, noise):
        return delta
    delta.change_pct = change
    delta.noise_pct = noise
    if better == "higher":
        delta.worse_pct = -change
    elif better == "lower":
        delta.worse_pct = change
    if delta.worse_pct is not None:
        delta.regressed = delta.worse_pct > max(max_regression_pct, noise)
    return delta


def _verdicts(baseline: Report, current: Report) -> list[VerdictChange]:
    before = {r.id: r.validation.status for r in baseline.recommendations}
    after = {r.id: r.validation.status for r in current.recommendations}
    changes = []
    for rec_id in list(before) + [i for i in after if i not in before]:
        b, c = before.get(rec_id), after.get(rec_id)
        changes.append(VerdictChange(
            id=rec_id, baseline=b, current=c,
            regressed=(b == "confirmed" and c == "refuted"),
            undecided=(b in ("confirmed", "refuted") and c == "inconclusive")))
    return changes


def _device_notes(baseline: Report, current: Report) -> list[str]:
    notes = []
    b_names = [d.name for d in baseline.devices]
    c_names = [d.name for d in current.devices]
    if b_names != c_names:
        notes.append(f"the devices differ: baseline {b_names or ['cpu']}, "
                     f"current {c_names or ['cpu']}; figures may not be comparable")
    if baseline.workload and current.workload and baseline.workload != current.workload:
        notes.append("the workloads differ: trial figures may not be comparable")
    return notes


def compare_reports(
    baseline: Report, current: Report, max_regression_pct: float = 5.0
) -> Comparison:
    """Compare current with baseline; a figure worse by over max_regression_pct regresses.

    ... and by more than the two runs' noise (see the module docstring).
    """
    base_figs = measured_figures(baseline)
    cur_figs = measured_figures(current)
    figures = [
        _delta(key, base_figs[key], cur_figs[key], max_regression_pct)
        for key in base_figs if key in cur_figs
    ]
    return Comparison(
        max_regression_pct=max_regression_pct,
        figures=figures,
        verdicts=_verdicts(baseline, current),
        only_in_baseline=[k for k in base_figs if k not in cur_figs],
        only_in_current=[k for k in cur_figs if k not in base_figs],
        notes=_device_notes(baseline, current),
    )
