"""The memory-only path gives the whole estimate's memory, so the plan search can trust it."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hwadvisor import profiles
from hwadvisor.models import ModelOptions
from hwadvisor.perfmodel import PerfModel, estimate, estimate_memory
from hwadvisor.pipeline import build_workload
from hwadvisor.probe.target import primary_device, resolve_target
from hwadvisor.rules.judge import new_context
from hwadvisor.workload import Sizing, WorkloadRequest

MODELS = ["llama-3.2-1b", "llama-3-8b", "mixtral-8x7b", "qwen3-30b-a3b", "deepseek-v3"]
OPTIONS = [
    {}, {"sharding": "fsdp"}, {"sharding": "tp", "tp_size": 2}, {"pipeline_stages": 2},
    {"context_parallel": 2}, {"offload_fraction": 0.5}, {"optimizer_offload": True},
    {"finetune": "lora", "lora_rank": 16}, {"prefill_chunk_tokens": 2048},
    {"selective_checkpointing": True}, {"expert_parallel": True},
]


def _setup(profile: str, model: str, phase: str, gpus: int, batch: int):
    target = resolve_target(profile, min(gpus, 8))
    device = primary_device(target)
    request = WorkloadRequest(model=model, phase=phase, gpus=gpus, batch=batch)
    workload = build_workload(request, Sizing.of(device))
    return workload, device, target.host


@settings(max_examples=60, deadline=None, derandomize=True)
@given(profile=st.sampled_from(sorted(profiles.ids())), model=st.sampled_from(MODELS),
       phase=st.sampled_from(["training", "inference"]), gpus=st.sampled_from([1, 2, 8, 16]),
       batch=st.sampled_from([1, 8, 64]), change=st.sampled_from(OPTIONS))
def test_memory_alone_equals_the_whole_estimate(profile, model, phase, gpus, batch, change):
    workload, device, _ = _setup(profile, model, phase, gpus, batch)
    options = ModelOptions().model_copy(update=change)
    assert estimate_memory(workload, device, options) == estimate(workload, device,
                                                                  options).memory


def test_perf_model_and_the_context_agree() -> None:
    workload, device, host = _setup("h200-sxm", "deepseek-v3", "training", 8, 1)
    model = PerfModel()
    ctx = new_context(workload, device, host, ModelOptions(), model)
    change = ({"grad_accum": 4}, {"pipeline_stages": 2})
    assert ctx.memory_with(*change) == ctx.estimate_with(*change).memory
    assert ctx.fits_with(*change) == (ctx.estimate_with(*change).memory.total_bytes
                                      <= ctx.facts.limit_bytes)


def test_an_estimator_without_memory_is_asked_for_the_whole_estimate() -> None:
    """Estimators other than the performance model (tests, wrappers) keep working."""
    workload, device, host = _setup("h100-sxm", "llama-3-8b", "inference", 1, 8)
    calls: list[int] = []

    def plain(w, d, o):
        calls.append(1)
        return estimate(w, d, o)

    ctx = new_context(workload, device, host, ModelOptions(), plain)
    before = len(calls)
    memory = ctx.memory_with({"batch": 16}, {})
    assert len(calls) == before + 1
    assert memory == estimate(workload.model_copy(update={"batch": 16}), device,
                              ModelOptions()).memory


@pytest.mark.parametrize("goal", ["training-throughput", "inference-latency",
                                  "memory-footprint"])
def test_the_plan_is_the_same_with_a_plain_estimator(goal: str) -> None:
    """Memory first changes nothing in the plan: the same search with whole estimates only."""
    from hwadvisor.rules.advise import recommend

    phase = "training" if goal == "training-throughput" else "inference"
    workload, device, host = _setup("h200-sxm", "deepseek-v3", phase, 8, 1)

    def plain(w, d, o):
        return estimate(w, d, o)

    fast = recommend(workload, device, goal, host=host)
    slow = recommend(workload, device, goal, host=host, estimator=plain)
    assert fast.plan.model_dump() == slow.plan.model_dump()


def test_calibrated_memory_alone_equals_the_whole_estimate() -> None:
    """With a calibration (a real H200 run) both paths see the same calibrated device."""
    from pathlib import Path

    from hwadvisor.perfmodel.calibration import from_report
    from hwadvisor.report.io import load_report

    run = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / \
        "h200_validate_2026-12-01.json"
    workload, device, _ = _setup("h200-sxm", "llama-3-70b", "inference", 1, 32)
    calibration = from_report(load_report(run), device)
    assert calibration is not None
    model = PerfModel(calibration)
    for change in OPTIONS:
        options = ModelOptions().model_copy(update=change)
        assert model.memory(workload, device, options) == model(workload, device,
                                                                options).memory


# --- offload as each engine does it ------------------------------------------------------------

def _offloaded(engine: str, gpus: int = 8, grad_accum: int = 1):
    from hwadvisor import profiles
    from hwadvisor.models import ModelOptions
    from hwadvisor.perfmodel import estimate
    from hwadvisor.workload import build_workload

    wl = build_workload(WorkloadRequest(model="llama-3-8b", phase="training", batch=1,
                                        prompt_len=2048, gpus=gpus, engine=engine,
                                        grad_accum=grad_accum))
    device = profiles.device_from_profile("h100-sxm")
    base = ModelOptions(sharding="fsdp", fused_optimizer=True)
    return (estimate(wl, device, base),
            estimate(wl, device, base.model_copy(update={"optimizer_offload": True})))


def test_fsdp2_cpu_offload_moves_parameters_gradients_and_optimizer():
    plain, off = _offloaded("torchtitan")
    assert off.memory.optimizer_bytes == 0
    # the parameter and gradient shards leave too: only the gathered units stay
    assert off.memory.weights_bytes < plain.memory.weights_bytes
    assert off.memory.gradients_bytes < plain.memory.gradients_bytes
    assert any("CPUOffloadPolicy" in n for n in off.memory.notes)


def test_zero_offload_moves_the_optimizer_only():
    plain, off = _offloaded("deepspeed")
    assert off.memory.optimizer_bytes == 0
    assert off.memory.weights_bytes == plain.memory.weights_bytes
    assert off.memory.gradients_bytes == plain.memory.gradients_bytes


def test_fsdp2_cpu_offload_moves_shards_every_micro_batch():
    # parameters up for each all-gather and gradients down for each reduce-scatter: the PCIe
    # traffic grows with the micro-batches; ZeRO-Offload's is once a step
    one = _offloaded("torchtitan", grad_accum=1)[1].times.optimizer_s
    four = _offloaded("torchtitan", grad_accum=4)[1].times.optimizer_s
    assert four > 1.2 * one
    zero1 = _offloaded("deepspeed", grad_accum=1)[1].times.optimizer_s
    zero4 = _offloaded("deepspeed", grad_accum=4)[1].times.optimizer_s
    assert zero4 == pytest.approx(zero1)


def test_the_host_step_shares_the_nodes_memory_bandwidth():
    from hwadvisor.perfmodel import constants as C

    _, off = _offloaded("deepspeed", gpus=8)
    _, alone = _offloaded("deepspeed", gpus=1)
    params = off.params_total / 8
    # eight GPUs step their shards on one host at once: each gets an eighth of its bandwidth
    host = params * C.HOST_OPTIMIZER_BYTES_PER_PARAM / (C.HOST_OPTIMIZER_GBPS * C.GB / 8)
    assert off.times.optimizer_s >= host
    assert alone.times.optimizer_s > 0
