"""How far single `validate` runs of the same code drift apart, figure by figure, on one machine.

One run's samples are taken back to back and cannot show what moves between processes, so
`hwadvisor compare` does not gate a timing from one run a side (report/compare.py). This
script measures that drift from reports of the same code run one after another, each a fresh
process, and holds `compare` against them:

    python benchmarks/gate_drift.py calibrate RUN.json ...   # each figure's worst drift
    python benchmarks/gate_drift.py check RUN.json ...       # every ordered pair, compared

calibrate: for each figure every run measured with an interval, the largest change for the
worse over all ordered pairs of runs, in percent, where it exceeds the figure kind's minimum
effect (report/compare.py MIN_EFFECT_PCT). check: `compare` of every ordered pair at the
default limit; prints the pairs that exit 1 and what tripped them. The H100 runs of
tests/fixtures/reports/h100-validate-quick (gunzip them first) are such a set.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

from hwadvisor.models import Report
from hwadvisor.report.compare import (
    MIN_EFFECT_PCT,
    compare_reports,
    figure_kind,
    measured_figures,
)


def _reports(paths: list[str]) -> list[Report]:
    return [Report.model_validate_json(Path(p).read_text(encoding="utf-8")) for p in paths]


def drift(reports: list[Report]) -> dict[str, float]:
    """Return each figure's worst change for the worse between two runs, percent."""
    figures = [measured_figures(r) for r in reports]
    common = set.intersection(*(set(f) for f in figures))
    out: dict[str, float] = {}
    for key in sorted(common):
        first = figures[0][key]
        kind = figure_kind(first)
        if kind in ("deterministic", "startup") or first.better is None:
            continue
        if any(f[key].interval is None or f[key].value <= 0 for f in figures):
            continue
        values = [f[key].value for f in figures]
        worst = 0.0
        for a, b in itertools.permutations(values, 2):
            change = (b - a) / a * 100.0
            worst = max(worst, -change if first.better == "higher" else change)
        if worst > MIN_EFFECT_PCT[kind]:
            out[key] = round(worst, 1)
    return out


def check(reports: list[Report], names: list[str]) -> int:
    """Compare every ordered pair; print the pairs that exit 1; return their count."""
    failed = 0
    pairs = list(itertools.permutations(range(len(reports)), 2))
    for a, b in pairs:
        result = compare_reports(reports[a], reports[b])
        if not result.passed:
            failed += 1
            print(f"exit 1: {names[a]} -> {names[b]}: {result.headline}")
    print(f"{len(pairs) - failed} of {len(pairs)} same-code pairs pass")
    return failed


def main() -> int:
    """Run the sub-command."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["calibrate", "check"])
    parser.add_argument("runs", nargs="+", help="validate reports of the same code")
    args = parser.parse_args()
    reports = _reports(args.runs)
    if args.what == "calibrate":
        for key, pct in drift(reports).items():
            print(f'"{key}" = {pct}')
        return 0
    return 1 if check(reports, [Path(p).stem for p in args.runs]) else 0


if __name__ == "__main__":
    sys.exit(main())
