"""Published serving runs: they load and rebuild, the check split is frozen, the script runs."""

from __future__ import annotations

import dataclasses
import math
import sys
from pathlib import Path
from types import ModuleType

import pytest
from script_loader import load_script

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"

# The check split as frozen, by the date in the data file's check_frozen_on. The check runs are
# held out: nothing is fitted on them. Changing one (a figure, its load, adding or removing a
# run) means a new freeze: add a line with the new date and fingerprint here and set
# check_frozen_on to it, and say why in the commit. Never edit a line that is already here.
FROZEN = {
    "2026-12-06": "3e728ef78cb19f275e3a559faea5cdcf281c27aa9c19836d0834f937a42525bd",
}


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    return load_script("benchmarks/serving_published.py")


@pytest.fixture(scope="module")
def runs(bench: ModuleType) -> list:
    return bench.load_runs()


def test_the_check_split_is_the_frozen_one(bench: ModuleType, runs: list) -> None:
    date = bench.frozen_on()
    assert date in FROZEN, f"check_frozen_on {date} has no fingerprint in FROZEN"
    assert date == max(FROZEN), "check_frozen_on must be the newest freeze"
    assert bench.check_fingerprint(runs) == FROZEN[date], (
        "a check run or figure changed: the check split is held out; freeze it anew on purpose "
        "(a new date in the data file and in FROZEN)")


def test_the_fingerprint_sees_a_changed_figure_a_changed_load_and_a_new_run(
        bench: ModuleType, runs: list) -> None:
    before = bench.check_fingerprint(runs)
    check = next(r for r in runs if r.split == "check")
    key = next(iter(check.figures))
    figure = dataclasses.replace(check, figures={**check.figures, key: check.figures[key] * 1.01})
    load = dataclasses.replace(check, prompt_mean=check.prompt_mean + 1)
    extra = dataclasses.replace(check, id=check.id + "-copy")
    for changed in (figure, load):
        assert bench.check_fingerprint([changed if r is check else r for r in runs]) != before
    assert bench.check_fingerprint([*runs, extra]) != before
    tune = dataclasses.replace(check, id=check.id + "-tune", split="tune")
    assert bench.check_fingerprint([*runs, tune]) == before  # tune runs are free to change


def test_splits_take_whole_sources_and_hold_out_a_third_or_more(runs: list) -> None:
    assert len(runs) >= 40
    assert len({r.id for r in runs}) == len(runs)
    by_source: dict[str, set[str]] = {}
    for run in runs:
        by_source.setdefault(run.source_id, set()).add(run.split)
    assert all(len(splits) == 1 for splits in by_source.values()), by_source
    tune = sum(r.split == "tune" for r in runs) / len(runs)
    # the frozen check split stays whole while tune sources are added: at least a third of the
    # runs held out (25 check of 65 runs after the 2026 figure hunt's tune runs)
    assert 0.3 <= tune <= 2 / 3
    assert {r.split for r in runs} == {"tune", "check"}


def test_every_run_rebuilds_on_a_profile_a_preset_and_its_engine(bench: ModuleType,
                                                                 runs: list) -> None:
    for run in runs:
        workload, device, options = bench.build(run)
        assert workload.engine == run.engine
        assert (options.tp_size or 1) == run.tp
        assert run.figures, run.id
        assert all(v > 0 for v in run.figures.values()), run.id


def test_every_run_states_a_rate_or_a_concurrency(runs: list) -> None:
    for run in runs:
        assert (run.rate_rps is None) != (run.concurrency is None), run.id


def test_an_infinite_rate_is_every_request_at_once(bench: ModuleType, runs: list) -> None:
    burst = next(r for r in runs if r.rate_rps is not None and math.isinf(r.rate_rps))
    load = bench.load_of(burst)
    assert load.rate_rps is None and load.concurrency == load.requests == burst.num_prompts
    paced = next(r for r in runs if r.rate_rps is not None and not math.isinf(r.rate_rps))
    assert bench.load_of(paced).rate_rps == paced.rate_rps


def test_one_run_compares_each_figure_with_the_same_statistic(bench: ModuleType,
                                                              runs: list) -> None:
    run = next(r for r in runs if r.id == "nim1.8-h100x2-llama3.3-70b-fp8-5000in-500out-c1")
    [row] = bench.evaluate([run])
    assert not row.skipped
    assert set(row.errors) == set(run.figures) == {"ttft_mean_s", "tpot_mean_s",
                                                   "output_tokens_per_s"}
    assert set(row.baseline) == set(run.figures) and row.baseline_batch == 1
    summaries = bench.summarise([row], "tune")
    assert {s.kind for s in summaries} == {"ttft", "tpot", "output_tokens_per_s"}
