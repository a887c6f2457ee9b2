"""Compare two reports: measured figures (gated on their intervals), lost figures and verdicts.

Which way is better follows the unit: GB/s, TFLOP/s, tokens/s and speedups are better higher;
seconds are better lower. A figure whose direction cannot be told is shown but never gates.

What gates (exit 1 in `hwadvisor compare`):

- a figure that got worse by more than the larger of the threshold (--max-regression) and its
  kind's minimum effect (MIN_EFFECT_PCT: a bandwidth or throughput 5%, a time or a speedup
  10%, a compile time 50%; a deterministic figure, bytes or a numerical error, 0%; with
  repeated runs REPEATED_MIN_EFFECT_PCT, a throughput or a time 15%: the drift between
  processes), *and* whose change is real by the evidence of the runs:
  - with repeated runs on both sides (`validate --repeat N`), the change of the runs' medians
    exceeds the variation between runs (BETWEEN_RUNS_K x the runs' median absolute deviations,
    added): one outlier run moves neither the median nor that deviation;
  - with one run a side a timing does not gate by default: its samples, taken back to back,
    cannot show the drift between processes (twelve same-code `validate --quick` runs on an
    H100: fp8 TFLOP/s up to 1.75x apart, a decode-step time 2.2x; gating on each run's own
    intervals failed 4 of 4 same-code pairs, docs/benchmarks.md). With --min-effect (the drift
    the user allows) a change larger than it gates, and so does one past the kind's minimum
    whose two 95% intervals (the median's distribution-free interval, or the effect's own) lie
    apart and exceed the two runs' spreads;
- on the CPU only what is stable there gates: deterministic figures. CPU timings, rates and
  speedups move far more between runs than within one when other processes share the cores,
  and between two invocations more than between the repeated runs of one (20 same-code pairs
  of `validate --quick` on a shared 2-core machine: a pair's timings 1.9x apart at the
  median, up to 800x; two `--repeat 5` runs a minute apart: 38-94% apart while each one's
  runs agreed within 20%; docs/benchmarks.md); they gate only with --min-effect, the drift
  the user declares;
- a figure only one run has an interval for, or neither (a single sample: a compile time, a
  first call), is reported with its change but never gates unless it is deterministic;
- compile and first-call times never gate unless asked (--gate-compile): they measure the
  compiler and the caches of the machine more than the code;
- a figure, trial or verdict the baseline had and the current report lost (the trial is now
  unsupported, failed, was interrupted or is gone; a confirmed recommendation is no longer
  decided by a measurement) is a regression, named in the headline, unless --allow-missing: a
  driver or torch upgrade that drops a kernel must not go green;
- a confirmed recommendation now refuted.

The noise column (each run's interquartile range over median, added; or the variation between
runs) is shown for people; the evidence above decides. The headline names what failed.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, Field, computed_field

from hwadvisor.models import Measurement, Report, TrialResult
from hwadvisor.models.stats import median_interval

Better = Literal["higher", "lower"]
FigureKind = Literal["deterministic", "bandwidth", "throughput", "time", "ratio", "startup"]

# The least change that counts as real between two single runs, by kind of figure (percent):
# the drift between runs that one run's samples cannot show. The gate's threshold is the larger
# of this and --max-regression; with repeated runs on both sides the measured variation
# between runs replaces it (the threshold is then --max-regression alone).
# - deterministic (bytes, memory factors, numerical errors): the same code computes the same
#   figure (0.0% apart over 12 CPU runs, docs/benchmarks.md), so any change is the code's;
# - bandwidth and throughput: a rate from many timed calls at a steady clock;
# - time and ratio (speedups, time factors): one kernel's time, or the quotient of two;
# - startup (compile, first call): the compiler's caches and the disk more than the code.
# One run a side gates a timing only with --min-effect (see the module docstring): between GPU
# processes figures drift far beyond these (an H100, docs/benchmarks.md 2026-12-07).
MIN_EFFECT_PCT: dict[str, float] = {
    "deterministic": 0.0,
    "bandwidth": 5.0,
    "throughput": 5.0,
    "time": 10.0,
    "ratio": 10.0,
    "startup": 50.0,
}
# With repeated runs on both sides, the least change that counts, by kind (percent): the runs
# of one process agree more than two processes do. Six `validate --quick --repeat 5` processes
# of the same code on an H200 (30 ordered pairs, docs/benchmarks.md 2026-12-07): a GEMM's
# TFLOP/s moved up to 10.3% and its time 11.5% between processes (cuBLAS picks per process),
# copy bandwidth 0.2%, a speedup 1.2%; a real 10% slowdown moved every bandwidth 16% or more.
REPEATED_MIN_EFFECT_PCT: dict[str, float] = {
    "deterministic": 0.0,
    "bandwidth": 5.0,
    "throughput": 15.0,
    "time": 15.0,
    "ratio": 10.0,
    "startup": 50.0,
}
# With repeated runs the medians' change must exceed this many robust deviations between runs
# (MAD x 1.4826, one standard deviation for normal noise), both sides' added, and every
# current run must be worse than every baseline run.
BETWEEN_RUNS_K = 2.0
MAD_TO_SIGMA = 1.4826

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
    baseline_ci: list[float] | None = Field(
        None, description="95% interval of the baseline figure (null: a single sample or too "
        "few to tell)")
    current_ci: list[float] | None = None
    kind: FigureKind | None = Field(None, description="What kind of figure it is; its minimum "
                                    "effect is MIN_EFFECT_PCT of report/compare.py")
    min_effect_pct: float | None = Field(
        None, description="The threshold it gated at: the larger of --max-regression and its "
        "kind's minimum effect")
    baseline_runs: list[float] = Field(
        default_factory=list, description="Each repeated run's value (validate --repeat); the "
        "baseline figure is their median")
    current_runs: list[float] = Field(default_factory=list)
    gated: bool = Field(False, description="The figure could gate: both runs carry the evidence "
                        "its kind needs (see not_gated_why when false)")
    not_gated_why: str | None = Field(None, description="Why the figure is shown but cannot gate")
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

    headline: str = Field("", description="One sentence: what got worse (or was lost), or that "
                          "nothing did; the first line of every view")
    passed: bool = Field(True, description="No regression: compare exits 0")
    baseline_path: str | None = None
    current_path: str | None = None
    max_regression_pct: float
    figures: list[FigureDelta] = Field(default_factory=list)
    verdicts: list[VerdictChange] = Field(default_factory=list)
    min_effect_pct: float | None = None
    allow_missing: bool = False
    only_in_baseline: list[str] = Field(default_factory=list)
    only_in_current: list[str] = Field(default_factory=list)
    lost: list[str] = Field(
        default_factory=list, description="What the baseline measured and the current report "
        "does not, in words: a regression unless --allow-missing")
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
        if not self.allow_missing:
            out += [f"lost: {line}" for line in self.lost]
        return out


@dataclass(frozen=True)
class Figure:
    """One measured figure of a report: value, unit, direction and relative noise."""

    value: float
    unit: str | None
    better: Better | None
    noisy: bool = False
    spread: float = 0.0  # relative: interquartile range / median of the samples behind it
    interval: tuple[float, float] | None = None  # 95%; None for a single sample or too few
    startup: bool = False  # a compile or first-call time: never gates by default
    runs: tuple[float, ...] = ()  # each repeated run's value (validate --repeat), else empty
    cpu: bool = False  # measured on the CPU
    name: str = ""  # the effect's name or the measurement's label: what its kind is read from


def figure_kind(figure: Figure) -> FigureKind:
    """Return what kind of figure this is, by its unit and name (see MIN_EFFECT_PCT)."""
    unit = (figure.unit or "").strip().lower()
    name = figure.name.lower()
    if figure.startup:
        return "startup"
    if unit == "bytes" or "memory_factor" in name or name.endswith("error") or "_error" in name:
        return "deterministic"
    if unit in ("gb/s", "gbps"):
        return "bandwidth"
    if unit in ("tflop/s", "tflops", "tops", "tokens/s"):
        return "throughput"
    if unit in LOWER_UNITS:
        return "time"
    return "ratio"


def _median_runs(runs: tuple[float, ...]) -> tuple[float, float]:
    """Return the runs' median and their relative spread (MAD x 1.4826 / median)."""
    med = statistics.median(runs)
    if not med:
        return med, 0.0
    mad = statistics.median(abs(v - med) for v in runs)
    return med, MAD_TO_SIGMA * mad / abs(med)


# Compile and first-call times: what a figure's label or name says when it is one of them.
STARTUP_WORDS = ("compil", "first call", "first_call", "first-call", "warmup", "cold start")


def _startup(*names: str) -> bool:
    """Tell whether a figure is a compile or first-call time (by its label or effect name)."""
    text = " ".join(names).lower()
    return any(word in text for word in STARTUP_WORDS)


def _relative_spread(m: Measurement) -> float:
    med, spread = m.median, m.spread
    if not med or spread is None or not math.isfinite(med) or not math.isfinite(spread):
        return 0.0
    return abs(spread / med)


def _median_ci(m: Measurement) -> tuple[float, float] | None:
    """95% interval of a measurement's median from its raw samples (None under 6 samples)."""
    return median_interval(list(m.samples)) if m.samples else None


def _value_ci(m: Measurement) -> tuple[float, float] | None:
    """95% interval of a measurement's derived rate (amount / median time), when it has one."""
    found = _median_ci(m)
    if found is None or m.value is None or not m.median or m.unit != "s":
        return None
    low_t, high_t = found
    if low_t <= 0 or high_t <= 0:
        return None
    scale = m.value * m.median
    return scale / high_t, scale / low_t


def _effect_noise(trial: TrialResult, name: str, value: float
                  ) -> tuple[float, tuple[float, float] | None, bool]:
    """(relative spread, 95% interval, startup) of an effect.

    Its own interval when the trial gave one; else that of the measurement whose value it is;
    else none (a figure derived from single readings, or from two medians without pairing).
    """
    effect = trial.effect_of(name)
    for m in trial.measurements:
        if m.value is not None and m.value == value:
            ci = (tuple(effect.ci) if effect is not None and effect.ci else _value_ci(m))
            return _relative_spread(m), ci, _startup(name, m.label)  # type: ignore[return-value]
    spreads = sorted((_relative_spread(m) for m in trial.measurements), reverse=True)
    ci = (float(effect.ci[0]), float(effect.ci[1])) if effect is not None and effect.ci else None
    matched = [m for m in trial.measurements if m.median is not None and m.median == value]
    startup = _startup(name, *(m.label for m in matched))
    return sum(spreads[:2]), ci, startup


def _runs(trial: TrialResult, name: str) -> tuple[float, ...]:
    """Each repeated run's value of the trial's figure `name` (empty without repeats)."""
    values = [run.get(name) for run in trial.repeats]
    if len(values) < 2 or any(v is None or not math.isfinite(v) for v in values):
        return ()
    return tuple(float(v) for v in values if v is not None)


def _trial_figures(trial: TrialResult) -> dict[str, Figure]:
    figures: dict[str, Figure] = {}
    base = f"trials.{trial.id}"
    cpu = trial.environment.device == "cpu"
    for effect in trial.effects:
        spread, ci, startup = _effect_noise(trial, effect.name, effect.value)
        figures[f"{base}.effect.{effect.name}"] = Figure(
            effect.value, effect.unit, effect.better, spread=spread, interval=ci,
            startup=startup, runs=_runs(trial, f"effect.{effect.name}"), cpu=cpu,
            name=effect.name)
    seen: dict[str, int] = {}
    effect_values = trial.effect.values()
    for m in trial.measurements:
        label = m.label
        seen[label] = seen.get(label, 0) + 1
        if seen[label] > 1:
            label = f"{label}#{seen[label]}"
        spread = _relative_spread(m)
        startup = _startup(m.label)
        if m.median is not None:
            figures[f"{base}.{label}.median"] = Figure(
                m.median, m.unit, better_direction(m.unit, m.label), m.noisy, spread,
                _median_ci(m), startup, _runs(trial, f"{label}.median"), cpu, m.label)
        # A derived value the trial also reports as an effect (matmul's bf16_tflops) is shown
        # once, as the effect.
        if m.value is not None and m.value not in effect_values:
            figures[f"{base}.{label}.value"] = Figure(
                m.value, m.value_unit, better_direction(m.value_unit, m.label), m.noisy, spread,
                _value_ci(m), startup, _runs(trial, f"{label}.value"), cpu, m.label)
    return figures


def _copied(report: Report, value: float, unit: str, name: str) -> Figure:
    """Return a device.measured figure with the noise and runs of the effect it came from."""
    for trial in report.trials:
        if trial.status == "ok":
            for effect_name, effect_value in trial.effect.items():
                if effect_value == value:
                    spread, ci, _ = _effect_noise(trial, effect_name, value)
                    return Figure(value, unit, "higher", spread=spread, interval=ci,
                                  runs=_runs(trial, f"effect.{effect_name}"),
                                  cpu=trial.environment.device == "cpu", name=name)
    return Figure(value, unit, "higher", name=name)


def measured_figures(report: Report) -> dict[str, Figure]:
    """Every measured figure of a report by key (device.measured and ok trials)."""
    figures: dict[str, Figure] = {}
    for d in report.devices:
        if d.measured is None:
            continue
        base = f"devices[{d.index}].measured"
        bandwidth = d.measured.memory_bandwidth_gbps
        if bandwidth is not None:
            figures[f"{base}.memory_bandwidth_gbps"] = _copied(
                report, bandwidth, "GB/s", "memory_bandwidth_gbps")
        for fmt, value in d.measured.matmul_tflops.items():
            figures[f"{base}.matmul_tflops.{fmt}"] = _copied(
                report, value, "TFLOP/s", f"{fmt}_tflops")
    for trial in report.trials:
        if trial.status == "ok":
            figures.update(_trial_figures(trial))
    return figures


def _finite(*values: float | None) -> bool:
    return all(v is not None and math.isfinite(v) for v in values)


def _apart(base: tuple[float, float], cur: tuple[float, float]) -> bool:
    """Tell whether two intervals are disjoint: each run lies outside the other's noise."""
    return max(cur) < min(base) or min(cur) > max(base)


def _all_worse(base: tuple[float, ...], cur: tuple[float, ...], better: Better | None) -> bool:
    """Tell whether every current run is worse than every baseline run (the ranges apart)."""
    if better == "higher":
        return max(cur) < min(base)
    return min(cur) > max(base)


@dataclass(frozen=True)
class Gate:
    """How a comparison gates: the threshold, the optional minimum effect, compile times."""

    max_regression_pct: float = 5.0
    min_effect_pct: float | None = None
    gate_compile: bool = False


def _repeated(base: Figure, cur: Figure) -> bool:
    """Tell whether both sides carry repeated runs of the figure (validate --repeat)."""
    return len(base.runs) >= 2 and len(cur.runs) >= 2


def _not_gated_why(base: Figure, cur: Figure, gate: Gate, kind: FigureKind) -> str | None:
    """Why a figure cannot gate (None when it can)."""
    if kind == "startup" and not gate.gate_compile:
        return "a compile or first-call time (--gate-compile gates it)"
    if kind == "deterministic":
        return None
    if (base.cpu or cur.cpu) and gate.min_effect_pct is None:
        return ("a CPU timing: it moves between runs far more than within one when other "
                "processes share the cores (--min-effect PCT, the drift you allow, gates it)")
    if _repeated(base, cur):
        return None
    if gate.min_effect_pct is None:
        return ("one run a side: a timing moves between runs of the same code more than its "
                "own samples show (validate --repeat N on both sides, or --min-effect PCT, "
                "gates it)")
    if base.interval is None or cur.interval is None:
        return "a single sample (or too few for an interval) in " + (
            "both runs" if base.interval is None and cur.interval is None
            else "the baseline" if base.interval is None else "the current run")
    return None


def _delta(key: str, base: Figure, cur: Figure, gate: Gate) -> FigureDelta:
    unit = base.unit or cur.unit
    better = base.better or cur.better
    kind = figure_kind(base if base.name else cur)
    base_value, base_dev = _median_runs(base.runs) if len(base.runs) >= 2 else (base.value, 0.0)
    cur_value, cur_dev = _median_runs(cur.runs) if len(cur.runs) >= 2 else (cur.value, 0.0)
    delta = FigureDelta(key=key, unit=unit, better=better, baseline=base_value,
                        current=cur_value, noisy=base.noisy or cur.noisy, kind=kind,
                        baseline_ci=list(base.interval) if base.interval else None,
                        current_ci=list(cur.interval) if cur.interval else None,
                        baseline_runs=list(base.runs), current_runs=list(cur.runs))
    if base_value == 0 or not _finite(base_value, cur_value):
        return delta  # no relative change from zero (or from a non-number); shown, never gates
    change = (cur_value - base_value) / abs(base_value) * 100.0
    repeated = _repeated(base, cur)
    if repeated:  # the variation between runs, robust to one outlier run a side
        noise = BETWEEN_RUNS_K * (base_dev + cur_dev) * 100.0
    else:
        noise = (base.spread + cur.spread) * 100.0
    if not _finite(change, noise):
        return delta
    delta.change_pct = change
    delta.noise_pct = noise
    if better == "higher":
        delta.worse_pct = -change
    elif better == "lower":
        delta.worse_pct = change
    if delta.worse_pct is None:
        delta.not_gated_why = "which way is better is unknown"
        return delta
    delta.not_gated_why = _not_gated_why(base, cur, gate, kind)
    delta.gated = delta.not_gated_why is None
    delta.min_effect_pct = max(gate.max_regression_pct, (
        REPEATED_MIN_EFFECT_PCT if repeated else MIN_EFFECT_PCT)[kind])
    if not delta.gated or delta.worse_pct <= delta.min_effect_pct:
        return delta
    if kind == "deterministic":
        delta.regressed = True  # the same code computes the same figure: the change is the code's
        return delta
    if repeated:
        evidence = delta.worse_pct > noise and _all_worse(base.runs, cur.runs, better)
    else:
        # Evidence of a real change within one run a side: the 95% intervals lie apart *and*
        # the change exceeds the two runs' spreads (IQR / median, added). Intervals of medians
        # narrow as samples grow, and a report has ~70 figures: with intervals alone, chance
        # alone trips a same-code pair now and then (2 in 20 resampled pairs of a CPU run did).
        evidence = (base.interval is not None and cur.interval is not None
                    and _apart(base.interval, cur.interval) and delta.worse_pct > noise)
    delta.regressed = evidence or (
        gate.min_effect_pct is not None and delta.worse_pct > gate.min_effect_pct)
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


_DECIDED = ("confirmed", "refuted")


def _lost_trials(baseline: Report, current: Report) -> tuple[list[str], set[str]]:
    """Trials ok in the baseline and not ok (or gone) now, in words; and their ids."""
    now = {t.id: t for t in current.trials}
    lines: list[str] = []
    ids: set[str] = set()
    for trial in baseline.trials:
        if trial.status != "ok" or trial.id in ids:
            continue
        after = now.get(trial.id)
        if after is not None and after.status == "ok":
            continue
        ids.add(trial.id)
        if after is None:
            lines.append(f"trial {trial.id} measured in the baseline is not in the current report")
        else:
            reason = f": {after.reason}" if after.reason else ""
            lines.append(f"trial {trial.id}: ok → {after.status}{reason}")
    return lines, ids


def _lost_verdicts(changes: list[VerdictChange]) -> list[str]:
    """Recommendations a measurement decided in the baseline and none decides now."""
    return [f"recommendation {v.id}: {v.baseline} → {v.current or 'absent'} (no longer "
            "decided by a measurement)"
            for v in changes if v.baseline in _DECIDED and v.current not in _DECIDED
            and v.current != "inconclusive"]


def _short(key: str) -> str:
    """Return a figure key as people read it: 'memory-bandwidth copy_gbps'."""
    parts = key.split(".")
    if len(parts) >= 3 and parts[0] == "trials":
        rest = parts[2:]
        if rest[0] == "effect":
            rest = rest[1:]
        return f"{parts[1]} {'.'.join(rest)}"
    return key


def headline(comparison: Comparison) -> str:
    """Say in one sentence what failed the comparison (the first of each kind named), or not."""
    worse = [f for f in comparison.figures if f.regressed]
    refuted = [v for v in comparison.verdicts if v.regressed]
    lost = [] if comparison.allow_missing else comparison.lost
    count = len(worse) + len(refuted) + len(lost)
    if count == 0:
        gated = sum(1 for f in comparison.figures if f.gated)
        if not comparison.figures:
            return "No regression, but no measured figure is in both reports: nothing compared."
        return (f"No regression: {len(comparison.figures)} figures compared ({gated} could "
                "gate), none worse beyond the limit and the runs' noise, nothing lost.")
    parts = []
    if lost:
        parts.append(f"lost {lost[0]}" + (f" (+{len(lost) - 1} more lost)" if len(lost) > 1
                                           else ""))
    if worse:
        first = worse[0]
        parts.append(f"{_short(first.key)} {first.worse_pct:.1f}% worse"
                     + (f" (+{len(worse) - 1} more figures)" if len(worse) > 1 else ""))
    if refuted:
        parts.append(f"recommendation {refuted[0].id} {refuted[0].baseline} → "
                     f"{refuted[0].current}")
    return f"REGRESSION ({count}): " + "; ".join(parts) + "."


def compare_reports(
    baseline: Report, current: Report, max_regression_pct: float = 5.0,
    min_effect_pct: float | None = None, gate_compile: bool = False,
    allow_missing: bool = False,
) -> Comparison:
    """Compare current with baseline (see the module docstring for what gates)."""
    gate = Gate(max_regression_pct, min_effect_pct, gate_compile)
    base_figs = measured_figures(baseline)
    cur_figs = measured_figures(current)
    figures = [
        _delta(key, base_figs[key], cur_figs[key], gate)
        for key in base_figs if key in cur_figs
    ]
    verdicts = _verdicts(baseline, current)
    lost, lost_ids = _lost_trials(baseline, current)
    only_in_baseline = [k for k in base_figs if k not in cur_figs]
    # A lost trial is named once; figures lost from trials that still ran are named each.
    lost += [f"figure {k} measured in the baseline is not in the current report"
             for k in only_in_baseline
             if not any(k.startswith(f"trials.{t}.") for t in lost_ids)]
    lost += _lost_verdicts(verdicts)
    comparison = Comparison(
        max_regression_pct=max_regression_pct,
        min_effect_pct=min_effect_pct,
        allow_missing=allow_missing,
        figures=figures,
        verdicts=verdicts,
        only_in_baseline=only_in_baseline,
        only_in_current=[k for k in cur_figs if k not in base_figs],
        lost=lost,
        notes=_device_notes(baseline, current),
    )
    comparison.headline = headline(comparison)
    comparison.passed = not comparison.regressions
    return comparison
