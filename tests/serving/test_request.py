"""The load and target options: what goes together, the ranges, and the Load they build."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hwadvisor.errors import UserError
from hwadvisor.models import Workload
from hwadvisor.serving.request import LoadRequest, build


def _workload(phase: str = "inference") -> Workload:
    return Workload(model="llama-3-8b", phase=phase, prompt_len=2048, gen_len=256)  # type: ignore[arg-type]


@pytest.mark.parametrize(("request_", "says"), [
    (LoadRequest(rate=5, concurrency=3), "--rate and --concurrency together"),
    (LoadRequest(ttft_ms=100), "a latency target without a load"),
    (LoadRequest(prefix_share=0.5), "a load option without a load"),
    (LoadRequest(rate=-1), "--rate must be a number above 0"),
    (LoadRequest(rate=0), "--rate must be a number above 0"),
    (LoadRequest(rate=5, tpot_ms=-50), "--tpot must be a number above 0"),
    (LoadRequest(concurrency=0), "--concurrency must be a number from 1"),
    (LoadRequest(rate=5, prompt_spread=-0.1), "--prompt-spread"),
    (LoadRequest(rate=5, percentile=80), "--percentile must be one of"),
    (LoadRequest(rate=5, tpot_definition="mean"), "--tpot-definition must be"),
    (LoadRequest(rate=5, dataset="nope"), "no such dataset shape"),
    (LoadRequest(rate=5, dataset="chat", trace=Path("x.jsonl")), "--dataset and --trace"),
    (LoadRequest(rate=float("nan")), "--rate must be a number"),
])
def test_bad_combinations_and_values_are_user_errors(request_: LoadRequest, says: str) -> None:
    with pytest.raises(UserError) as caught:
        build(request_, _workload())
    assert says in caught.value.message
    assert caught.value.hint


def test_a_load_is_for_serving() -> None:
    with pytest.raises(UserError, match="for serving, not training"):
        build(LoadRequest(rate=5), _workload("training"))


def test_no_option_no_load() -> None:
    assert build(LoadRequest(), _workload()) is None


def test_the_means_are_the_workloads_and_targets_are_seconds() -> None:
    built = build(LoadRequest(rate=20, prompt_spread=0.5, ttft_ms=1000, tpot_ms=50,
                              e2e_ms=20_000, percentile=99, tpot_definition="itl"), _workload())
    assert built is not None
    load, targets = built
    assert load.rate_rps == 20 and load.concurrency is None
    assert (load.prompt.mean, load.prompt.spread, load.output.mean) == (2048, 0.5, 256)
    assert (targets.ttft_s, targets.tpot_s, targets.request_latency_s) == (1.0, 0.05, 20.0)
    assert targets.percentile == 99 and targets.tpot_definition == "itl"


def test_a_dataset_sets_the_lengths() -> None:
    built = build(LoadRequest(concurrency=8, dataset="rag"), _workload())
    assert built is not None
    load, targets = built
    assert load.prompt.mean == 8192 and load.concurrency == 8 and load.dataset == "rag"
    assert targets.percentile == 90 and not targets.any()


def test_a_trace_with_arrivals_needs_no_rate(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    rows = [{"prompt_len": 100 + i, "gen_len": 10, "arrival_s": i * 0.5} for i in range(5)]
    trace.write_text("\n".join(json.dumps(r) for r in rows), encoding="utf-8")
    built = build(LoadRequest(trace=trace, ttft_ms=500), _workload())
    assert built is not None
    load, _ = built
    assert load.rate_rps == pytest.approx(2.0) and load.arrivals == "trace"
    assert load.requests == 5 and load.prompt.values == [100, 101, 102, 103, 104]
