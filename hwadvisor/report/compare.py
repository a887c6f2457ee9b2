"""Compare two reports: measured figures (with a regression threshold) and verdicts.

Which way is better follows the unit: GB/s, TFLOP/s, tokens/s and speedups are better higher;
seconds are better lower. A figure whose direction cannot be told is shown but never gates.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, computed_field

from hwadvisor.models import Report, TrialResult

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
            f"({f.worse_pct:.1f}% worse, limit {self.max_regression_pct:g}%)".replace("  ", " ")
            for f in self.figures if f.regressed and f.worse_pct is not None
        ]
        out += [f"recommendation {v.id}: {v.baseline} → {v.current}"
                for v in self.verdicts if v.regressed]
        return out


Figure = tuple[float, str | None, Better | None, bool]  # value, unit, better, noisy


def _trial_figures(trial: TrialResult) -> dict[str, Figure]:
    figures: dict[str, Figure] = {}
    base = f"trials.{trial.id}"
    for effect in trial.effects:
        figures[f"{base}.effect.{effect.name}"] = (effect.value, effect.unit, effect.better, False)
    seen: dict[str, int] = {}
    for m in trial.measurements:
        label = m.label
        seen[label] = seen.get(label, 0) + 1
        if seen[label] > 1:
            label = f"{label}#{seen[label]}"
        if m.median is not None:
            figures[f"{base}.{label}.median"] = (
                m.median, m.unit, better_direction(m.unit, m.label), m.noisy)
        # A derived value the trial also reports as an effect (matmul's bf16_tflops) is shown
        # once, as the effect.
        if m.value is not None and m.value not in trial.effect.values():
            figures[f"{base}.{label}.value"] = (
                m.value, m.value_unit, better_direction(m.value_unit, m.label), m.noisy)
    return figures


def measured_figures(report: Report) -> dict[str, Figure]:
    """Every measured figure of a report by key (device.measured and ok trials)."""
    figures: dict[str, Figure] = {}
    for d in report.devices:
        if d.measured is None:
            continue
        base = f"devices[{d.index}].measured"
        if d.measured.memory_bandwidth_gbps is not None:
            figures[f"{base}.memory_bandwidth_gbps"] = (
                d.measured.memory_bandwidth_gbps, "GB/s", "higher", False)
        for fmt, value in d.measured.matmul_tflops.items():
            figures[f"{base}.matmul_tflops.{fmt}"] = (value, "TFLOP/s", "higher", False)
    for trial in report.trials:
        if trial.status == "ok":
            figures.update(_trial_figures(trial))
    return figures


def _delta(key: str, base: Figure, cur: Figure, max_regression_pct: float) -> FigureDelta:
    b_value, unit, better, b_noisy = base
    c_value, c_unit, c_better, c_noisy = cur
    unit = unit or c_unit
    better = better or c_better
    delta = FigureDelta(key=key, unit=unit, better=better, baseline=b_value, current=c_value,
                        noisy=b_noisy or c_noisy)
    if b_value == 0:
        return delta  # no relative change from zero; shown, never gates
    delta.change_pct = (c_value - b_value) / abs(b_value) * 100.0
    if better == "higher":
        delta.worse_pct = -delta.change_pct
    elif better == "lower":
        delta.worse_pct = delta.change_pct
    if delta.worse_pct is not None:
        delta.regressed = delta.worse_pct > max_regression_pct
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
    """Compare current with baseline; a figure worse by over max_regression_pct regresses."""
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
