"""compare on real back-to-back `validate --quick` runs of the same code on an H100.

Twelve runs, each a fresh process, on one lent NVIDIA H100 80GB HBM3 (2026-12-07, torch
2.11.0+cu130; docs/benchmarks.md). Between those processes figures moved far more than within
one run: fp8 TFLOP/s up to 1.75x, a decode-step time 2.2x, pageable host copies 1.5x. Gating
one run a side on its own samples failed 4 of 4 same-code pairs there (and, with per-figure
drift allowances fitted on six runs, 13 of 30 pairs of the other six): one run a side does not
gate a timing; deterministic figures and lost trials do, and timings gate with --repeat or a
declared --min-effect.
"""

from __future__ import annotations

import gzip
import itertools
from functools import cache
from pathlib import Path

import pytest

from hwadvisor.models import Report
from hwadvisor.report.compare import compare_reports

RUNS = Path(__file__).parents[1] / "fixtures" / "reports" / "h100-validate-quick"


@cache
def _run(name: str) -> Report:
    return Report.model_validate_json(gzip.decompress((RUNS / f"{name}.json.gz").read_bytes()))


SAME = [f"run-{i}" for i in range(1, 13)]


@pytest.mark.parametrize("a, b", list(itertools.permutations(SAME[:6], 2))[::3]
                         + list(itertools.permutations(SAME[6:], 2))[::3])
def test_same_code_runs_on_an_h100_pass_at_the_default_limit(a: str, b: str) -> None:
    comparison = compare_reports(_run(a), _run(b))
    assert comparison.passed, comparison.headline


def test_a_lost_trial_on_the_h100_exits_1_and_is_named_first() -> None:
    # the same run with the int4-weight-only trial failing (an injected error)
    comparison = compare_reports(_run("run-9"), _run("lost"))
    assert not comparison.passed
    assert comparison.headline.startswith("REGRESSION")
    assert "lost trial int4-weight-only" in comparison.headline


def test_activation_memory_regression_on_the_h100_exits_1_and_the_same_code_does_not() -> None:
    # activation-checkpointing runs: as is twice, and one block in four not checkpointed
    assert compare_reports(_run("ckpt-base"), _run("ckpt-same")).passed
    worse = compare_reports(_run("ckpt-base"), _run("ckpt-partial"))
    assert not worse.passed and "activation_bytes_with" in worse.headline


def test_a_declared_drift_gates_what_moved_beyond_it() -> None:
    # --min-effect 10 on the same-code pair whose fp8 matmul rate moved 43% between processes
    declared = compare_reports(_run("run-9"), _run("run-10"), min_effect_pct=10.0)
    plain = compare_reports(_run("run-9"), _run("run-10"))
    assert plain.passed and not declared.passed


# Six `validate --quick --repeat 5 -t matmul-peak -t memory-bandwidth -t fp8-gemm` processes of
# the same code on an H200, and two with a real 10% slowdown (the device idles a tenth of the
# timed work inside each timed window: benchmarks/gate_pairs.py's throttle), 2026-12-07.
REPEATED = Path(__file__).parents[1] / "fixtures" / "reports" / "h200-validate-repeat"


@cache
def _repeated(name: str) -> Report:
    return Report.model_validate_json(
        gzip.decompress((REPEATED / f"{name}.json.gz").read_bytes()))


@pytest.mark.parametrize("a, b", list(itertools.permutations(range(1, 7), 2)))
def test_repeated_same_code_runs_on_an_h200_pass(a: int, b: int) -> None:
    comparison = compare_reports(_repeated(f"same-{a}"), _repeated(f"same-{b}"))
    assert comparison.passed, comparison.headline
    assert any(f.gated for f in comparison.figures)  # timings do gate with repeats


@pytest.mark.parametrize("base", range(1, 7))
def test_a_real_ten_percent_slowdown_on_an_h200_exits_1_named_first(base: int) -> None:
    for slow in ("slow-1", "slow-2"):
        comparison = compare_reports(_repeated(f"same-{base}"), _repeated(slow))
        assert not comparison.passed
        assert comparison.headline.startswith("REGRESSION")
