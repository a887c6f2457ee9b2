"""The search under latency targets: it meets them, it never needs fewer GPUs for more load,
its Pareto front is non-dominated, and it says how many GPUs would when none meets."""

from __future__ import annotations

import functools

import pytest

from hwadvisor.models import ModelOptions
from hwadvisor.models.serving import Lengths, Load, Targets
from hwadvisor.serving.candidates import Inputs
from hwadvisor.serving.plan import recommend_plan
from hwadvisor.serving.search import fewest_gpus, judge_all, search
from hwadvisor.workload import WorkloadRequest
from hwadvisor.workload.settle import on_engine_defaults


@functools.cache
def _planned(model: str, device: str, engine: str):  # type: ignore[no-untyped-def]
    from hwadvisor import pipeline

    request = WorkloadRequest(model=model, engine=engine, prompt_len=2048, gen_len=256)
    report = pipeline.estimate_report(request, device, ModelOptions())
    assert report.workload is not None
    device_ = report.devices[0]
    workload, options = on_engine_defaults(report.workload, device_, ModelOptions())
    return workload, device_, options


def _inputs(rate: float | None = 10.0, concurrency: int | None = None,
            gpus: int | None = None, per_node: int = 2, ttft: float = 1.0,
            tpot: float = 0.05, model: str = "llama-3-8b", engine: str = "vllm") -> Inputs:
    workload, device, options = _planned(model, "h100-sxm", engine)
    load = Load(rate_rps=rate, concurrency=concurrency, prompt=Lengths(mean=2048, spread=0.3),
                output=Lengths(mean=256, spread=0.3), requests=200, source="test")
    return Inputs(workload, device, options, load, Targets(ttft_s=ttft, tpot_s=tpot), gpus,
                  per_node)


def test_the_answer_meets_the_targets_in_the_simulation() -> None:
    plan = search(_inputs(rate=12.0))
    assert plan.best is not None and plan.best.meets_targets
    assert plan.best.source == "simulation"
    assert plan.checks and all(c.met and c.margin >= 0 for c in plan.checks)
    assert {c.figure for c in plan.checks} == {"ttft", "tpot"}
    assert plan.fewest_gpus == plan.best.config.gpus  # --gpus left out: the fewest
    assert plan.searched >= 100


def test_the_fewest_gpus_never_fall_when_the_rate_rises() -> None:
    counts = []
    for rate in (2.0, 8.0, 16.0, 24.0, 40.0, 64.0):
        counts.append(fewest_gpus(judge_all(_inputs(rate=rate))))
    assert None not in counts
    assert counts == sorted(counts), counts
    assert counts[-1] > counts[0]


def test_none_meets_on_too_few_gpus_and_the_plan_says_how_many_would() -> None:
    plan = recommend_plan(_inputs(rate=60.0, gpus=1))
    assert plan is not None and plan.best is None
    assert plan.fewest_gpus is not None and plan.fewest_gpus > 1
    assert plan.verdict.startswith("No config meets")
    assert f"the fewest GPUs that would: {plan.fewest_gpus}" in plan.verdict
    assert plan.top and not plan.top[0].meets_targets  # the closest, and by how much it misses
    assert "missed" in plan.verdict


def test_an_impossible_ttft_is_met_by_no_count_of_gpus() -> None:
    plan = search(_inputs(rate=1.0, ttft=0.001))  # a 2k-token prompt takes longer than 1 ms
    assert plan.best is None and plan.fewest_gpus is None


def test_the_pareto_front_is_non_dominated() -> None:
    front = search(_inputs(rate=10.0)).pareto
    assert len(front) >= 3
    for p in front:
        for q in front:
            dominates = (q.tokens_per_s_per_gpu >= p.tokens_per_s_per_gpu
                         and q.tokens_per_s_per_user >= p.tokens_per_s_per_user
                         and (q.tokens_per_s_per_gpu > p.tokens_per_s_per_gpu
                              or q.tokens_per_s_per_user > p.tokens_per_s_per_user))
            assert not dominates, (p.config, q.config)
    users = [p.tokens_per_s_per_user for p in front]
    assert users == sorted(users)


def test_a_closed_loop_load_is_searched_in_users() -> None:
    # 32 users who start together: the first prompts queue behind each other (the simulation
    # plays that burst; the screen's steady state does not), so the answer may scale out
    plan = search(_inputs(rate=None, concurrency=32, ttft=2.0))
    assert plan.best is not None and plan.best.meets_targets
    assert plan.best.capacity_users is not None and plan.best.capacity_users >= 1
    assert plan.fewest_gpus == plan.best.config.gpus


def test_formats_stay_within_the_quality_budget() -> None:
    inputs = _inputs(rate=10.0)
    lossless = inputs.workload.model_copy(update={"quality": "lossless"})
    searched = judge_all(Inputs(lossless, inputs.device, inputs.options, inputs.load,
                                inputs.targets, None, 2))
    dtypes = {(j.candidate.family.weights_dtype, j.candidate.family.kv_dtype)
              for j in searched.judged}
    assert dtypes == {("bf16", "bf16")}


@pytest.mark.parametrize("gpus", [2, 4])
def test_on_given_gpus_the_replicas_fill_them(gpus: int) -> None:
    plan = search(_inputs(rate=10.0, gpus=gpus))
    assert plan.best is not None and plan.best.config.gpus == gpus


def test_a_figure_within_its_target_on_a_saturated_server_says_so() -> None:
    from hwadvisor.models.serving import TargetCheck

    check = TargetCheck(figure="tpot", percentile=90, target_s=0.15, value_s=0.088, met=False,
                        margin=(0.15 - 0.088) / 0.15)
    words = check.words()
    assert "88 ms ≤ 150 ms" in words and "saturated" in words and "-" not in words.split(":")[-1]


def _on_4090(gpus: int | None, quality: str | None = None) -> Inputs:
    from hwadvisor import pipeline

    request = WorkloadRequest(model="llama-3-70b", engine="llamacpp", quality=quality)
    report = pipeline.estimate_report(request, "rtx-4090", ModelOptions())
    assert report.workload is not None
    device = report.devices[0]
    workload, options = on_engine_defaults(report.workload, device, ModelOptions())
    load = Load(rate_rps=0.2, prompt=Lengths(mean=1024, spread=0.5),
                output=Lengths(mean=256, spread=0.5), requests=100, source="test")
    return Inputs(workload, device, options, load, Targets(ttft_s=5.0, tpot_s=0.15), gpus, 4)


def test_llama_cpp_is_searched_in_its_own_formats_and_its_layer_split() -> None:
    # a 70B on RTX 4090s: llama.cpp's 8-bit weights are Q8_0, and the cards may hold the
    # layers one after another (its default --split-mode layer), not only split by rows
    searched = judge_all(_on_4090(None))
    families = {j.candidate.family for j in searched.judged}
    assert {f.weights_dtype for f in families} >= {"q8_0"}
    assert any(f.layers_over > 1 for f in families)
    plan = search(_on_4090(None))
    assert plan.best is not None and plan.best.meets_targets


def test_below_the_budget_only_when_nothing_within_it_holds_the_model() -> None:
    # two 24 GB cards cannot hold 70B in 8 bits; in Q4_K_M split over both they can: said
    searched = judge_all(_on_4090(2))
    assert searched.below_budget == "4-bit"
    assert {j.candidate.family.weights_dtype for j in searched.judged} == {"q4_k_m"}
    plan = search(_on_4090(2))
    assert any("below the budget" in n for n in plan.notes)
    layer_split = [p for p in plan.top if p.config.pipeline_parallel == 2]
    assert layer_split and "layers split over 2" in layer_split[0].config.words()
    assert judge_all(_on_4090(4)).below_budget is None  # four hold it in Q8_0
