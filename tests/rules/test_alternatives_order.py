"""A plan's alternatives: ranked by the goal's metric among those that fit, host RAM checked."""

from __future__ import annotations

from functools import cache

from hwadvisor.models import Plan, PlanAlternative, Report
from hwadvisor.pipeline import recommend_report
from hwadvisor.workload import WorkloadRequest

A, B = "training-throughput", "inference-latency"


@cache
def _plan(device: str, goal: str, items: tuple[tuple[str, object], ...]) -> Report:
    return recommend_report(goal, device, WorkloadRequest(**dict(items)))  # type: ignore[arg-type]


def plan(device: str, goal: str, **workload: object) -> Plan:
    report = _plan(device, goal, tuple(sorted(workload.items())))
    assert report.plan is not None
    return report.plan


def _groups(plan: Plan) -> list[int]:
    """0: fits and keeps the model, 1: a smaller model, 2: does not fit."""
    return [2 if not a.fits else 1 if a.id == "smaller-model" else 0 for a in plan.alternatives]


def _kept(plan: Plan) -> list[PlanAlternative]:
    return [a for a in plan.alternatives if a.fits and a.id != "smaller-model"]


def test_70b_on_one_h100_lists_qlora_before_the_slower_two_gpu_offload():
    # QLoRA trains at ~1,500 tokens/s on one H100; two H100 with the optimizer in host RAM
    # at ~130: the faster way out comes first, not the more-GPUs one by habit.
    found = plan("h100-sxm", A, model="llama-3.1-70b", phase="training", batch=1,
                 prompt_len=2048)
    assert not found.fits
    ids = [a.id for a in found.alternatives]
    assert ids.index("qlora") < ids.index("more-gpus") < ids.index("smaller-model")
    assert "ranked by throughput (highest first)" in found.alternatives_order
    assert found.summary.split("What would: ")[1].startswith("QLoRA")


def test_training_alternatives_fit_first_by_throughput_then_smaller_models():
    found = plan("h100-sxm", A, model="llama-3-8b", phase="training", batch=4, prompt_len=2048,
                 engine="hf")
    assert _groups(found) == sorted(_groups(found))
    speeds = [a.metric for a in _kept(found)]
    assert len(speeds) >= 2 and speeds == sorted(speeds, reverse=True)  # type: ignore[type-var]


def test_serving_alternatives_rank_by_request_latency():
    found = plan("h100-sxm", B, model="llama-3.1-405b", phase="inference")
    assert _groups(found) == sorted(_groups(found))
    assert "ranked by request latency (lowest first)" in found.alternatives_order
    assert "smaller models after those that keep llama-3.1-405b" in found.alternatives_order


def test_an_offload_the_host_cannot_hold_does_not_fit_and_comes_last():
    # ZeRO-Offload of an 8B full fine-tune keeps 128 GB (16 B a parameter) in host RAM: a
    # 100 GB host cannot, though the GPU side fits at ~62 GB.
    found = plan("h100-sxm", A, model="llama-3-8b", phase="training", batch=4, prompt_len=2048,
                 engine="hf", host_memory_gb=100)
    offload = next(a for a in found.alternatives if a.id == "optimizer-offload")
    assert offload.host_memory_bytes is not None and offload.host_memory_bytes > 100e9
    assert offload.host_memory_fits is False and not offload.fits
    assert offload.memory_per_gpu_bytes is not None and offload.memory_per_gpu_bytes < 80e9
    assert found.alternatives[-1].id == "optimizer-offload"
    assert "more than the planned host's 100.0 GB" in offload.text
    assert "those that do not fit last" in found.alternatives_order
    assert "offload" not in found.summary.split("What would")[-1]


def test_an_offload_the_host_holds_says_so():
    found = plan("h100-sxm", A, model="llama-3-8b", phase="training", batch=4, prompt_len=2048,
                 engine="hf", host_memory_gb=512)
    offload = next(a for a in found.alternatives if a.id == "optimizer-offload")
    assert offload.fits and offload.host_memory_fits is True
    assert "within the planned host's 512.0 GB" in offload.text


def test_the_readable_plan_states_the_order():
    from hwadvisor.report.plantext import plan_lines

    report = _plan("h100-sxm", A, tuple(sorted(dict(
        model="llama-3.1-70b", phase="training", batch=1, prompt_len=2048).items())))
    lines = plan_lines(report)
    head = next(i for i, line in enumerate(lines) if line.startswith("alternatives, "))
    assert "ranked by throughput" in lines[head]
    assert lines[head + 1].startswith("alternative (qlora)")
