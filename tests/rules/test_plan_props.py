"""Properties of the plan search over random workloads and profiles (hypothesis)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hwadvisor import profiles
from hwadvisor.engines import baseline
from hwadvisor.errors import UserError
from hwadvisor.pipeline import build_workload
from hwadvisor.probe.target import primary_device, resolve_target
from hwadvisor.rules.advise import recommend
from hwadvisor.rules.judge import default_estimator, new_context
from hwadvisor.workload import Sizing, WorkloadRequest

MODELS = ["llama-3.2-1b", "llama-3-8b", "qwen3-8b", "mixtral-8x7b", "llama-3-70b",
          "qwen3-30b-a3b"]
GOALS = ["training-throughput", "inference-latency", "memory-footprint"]
SETTINGS = settings(max_examples=40, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow])


@st.composite
def cases(draw):
    profile = draw(st.sampled_from(sorted(profiles.ids())))
    goal = draw(st.sampled_from(GOALS))
    phase = "training" if goal == "training-throughput" else draw(
        st.sampled_from(["inference", "inference", "training"]))
    workload = {
        "model": draw(st.sampled_from(MODELS)), "phase": phase,
        "batch": draw(st.sampled_from([1, 2, 8, 32])),
        "prompt_len": draw(st.sampled_from([256, 2048, 8192])),
        "gpus": draw(st.sampled_from([1, 1, 2, 8])),
    }
    return profile, goal, workload


def _outcome(profile: str, goal: str, workload: dict):
    report = resolve_target(profile, workload["gpus"])
    device = primary_device(report)
    try:
        built = build_workload(WorkloadRequest(**workload), Sizing.of(device))
    except UserError:
        return None, None, None  # an engine that cannot run this phase here: refused, fine
    return recommend(built, device, goal, host=report.host), built, report


@SETTINGS
@given(cases())
def test_plan_never_needs_more_memory_than_the_engine_default(case):
    """Only a drafter (its weights and KV cache) may add memory: the other steps never do."""
    out, _, _ = _outcome(*case)
    if out is None:
        return
    drafter = 0
    before = out.estimate.memory.total_bytes
    for step in out.plan.steps:
        if step.id == "speculative-decoding":
            drafter += max(0, step.memory_per_gpu_bytes_after - before)
        before = step.memory_per_gpu_bytes_after
    assert out.plan.memory_per_gpu_bytes <= out.estimate.memory.total_bytes * 1.001 + drafter


@SETTINGS
@given(cases())
def test_each_step_serves_the_metric_unless_it_was_needed_to_fit(case):
    out, _, _ = _outcome(*case)
    if out is None:
        return
    better = out.plan.metric.better
    previous = out.plan.metric.before
    for step in out.plan.steps:
        if not step.needed_to_fit and previous is not None and step.metric_after is not None:
            if better == "higher":
                assert step.metric_after >= previous * 0.999, step.id
            else:
                assert step.metric_after <= previous * 1.001, step.id
        previous = step.metric_after


@SETTINGS
@given(cases())
def test_max_batch_fits_and_one_more_does_not(case):
    out, built, report = _outcome(*case)
    if out is None or not out.plan.fits or out.plan.max_batch is None:
        return
    if out.plan.max_batch >= 1 << 16:
        return  # the search's ceiling, not a memory limit
    device = primary_device(report)
    start, options = baseline(built, device)
    # re-estimate the final plan's knobs at max_batch and max_batch + 1
    final = out.plan
    changes = {}
    for step in final.steps:
        changes.update(step.changes)
    workload_fields = set(type(built).model_fields)
    w = start.model_copy(update={k: v for k, v in changes.items() if k in workload_fields})
    o = options.model_copy(update={k: v for k, v in changes.items()
                                   if k in type(options).model_fields})
    ctx = new_context(w, device, report.host, o, default_estimator())
    limit = ctx.facts.limit_bytes
    at = ctx.estimate_with({"batch": final.max_batch}, {})
    over = ctx.estimate_with({"batch": final.max_batch + 1}, {})
    assert at.memory.total_bytes <= limit
    assert over.memory.total_bytes > limit


@pytest.mark.parametrize("profile, goal, workload", [
    ("rtx-4090", "inference-latency", {"model": "llama-3-70b", "gpus": 1, "engine": "vllm"}),
    ("h100-sxm", "training-throughput", {"model": "llama-3-70b", "phase": "training",
                                         "gpus": 1, "engine": "hf"}),
    ("a100-40gb", "inference-latency", {"model": "mixtral-8x7b", "gpus": 1}),
    ("l4", "training-throughput", {"model": "llama-3-8b", "phase": "training", "gpus": 1}),
])
def test_min_gpus_really_fits_when_planned_at_that_count(profile, goal, workload):
    out, _, _ = _outcome(profile, goal, {"batch": 1, "prompt_len": 2048, **workload})
    assert out is not None
    if out.plan.fits:
        assert out.plan.min_gpus is None
        return
    assert out.plan.min_gpus is not None
    again, _, _ = _outcome(profile, goal, {"batch": 1, "prompt_len": 2048, **workload,
                                           "gpus": out.plan.min_gpus})
    assert again is not None and again.plan.fits
