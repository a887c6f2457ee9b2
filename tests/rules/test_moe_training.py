"""Expert parallelism for MoE training (issue 41, item 7: "no expert parallelism for MoE training").

Before: a MoE trained with torchtitan on 8 GPUs all-gathered every expert of every layer with
FSDP twice a step; the expert-parallel rule predicted +0% in training and would have emitted
expert_parallel_degree = 1, and TP 8 was planned for Qwen3-30B-A3B, whose 4 KV heads torchtitan
cannot split 8 ways.
"""

from __future__ import annotations

from functools import cache

import pytest

from hwadvisor.models import ModelOptions, Report
from hwadvisor.perfmodel import estimate
from hwadvisor.perfmodel.layout import resolve_layout, tp_fits_heads
from hwadvisor.pipeline import build_workload, recommend_report
from hwadvisor.probe.target import primary_device, resolve_target
from hwadvisor.workload import Sizing, WorkloadRequest


@cache
def _qwen3_plan() -> Report:
    return recommend_report("training-throughput", "h100-sxm", WorkloadRequest(
        model="qwen3-30b-a3b", phase="training", batch=1, prompt_len=2048, gpus=8))


def _estimate(model: str, gpus: int = 8, engine: str | None = None, **options: object):
    device = primary_device(resolve_target("h100-sxm", gpus))
    workload = build_workload(WorkloadRequest(model=model, phase="training", batch=1,
                                              prompt_len=2048, gpus=gpus, engine=engine),
                              Sizing.of(device))
    opts = ModelOptions(sharding="fsdp", compiled=True, **options)  # type: ignore[arg-type]
    return workload, opts, estimate(workload, device, opts)


def test_a_moe_on_a_node_of_h100s_trains_with_expert_parallelism_over_its_gpus() -> None:
    plan = _qwen3_plan().plan
    assert plan is not None and plan.fits
    assert "expert-parallel" in [step.id for step in plan.steps]
    assert plan.layout is not None and plan.layout.ep
    text = plan.engine_config.text if plan.engine_config else ""
    assert "expert_parallel_degree = 8" in text
    # whatever TP the plan adds splits the 4 KV heads whole (torchtitan views them as heads)
    tp = next((int(line.split("=")[1]) for line in text.splitlines()
               if line.startswith("tensor_parallel_degree")), 1)
    assert 4 % tp == 0


def test_expert_parallelism_trades_the_experts_all_gathers_for_token_all_to_alls() -> None:
    workload, _, fsdp = _estimate("qwen3-30b-a3b")
    _, _, ep = _estimate("qwen3-30b-a3b", expert_parallel=True)
    spec = workload.spec
    assert spec is not None and "ep_all_to_all_bytes" not in fsdp.communication
    # EP 8 on 8 GPUs: each GPU keeps its 16 experts whole, none is all-gathered; what FSDP still
    # gathers is the rest of the model (attention, embeddings, routers): under 10% of before
    assert ep.communication["fsdp_allgather_bytes"] < 0.1 * fsdp.communication[
        "fsdp_allgather_bytes"]
    # four all-to-alls per MoE layer (dispatch and combine, forward and backward) of the GPU's
    # 2048 tokens x 8 experts each x hidden in bf16, 7/8 of it leaving the GPU
    sent = 4 * spec.num_layers * 7 / 8 * 2048 * spec.experts_per_token * spec.hidden_size * 2
    assert ep.communication["ep_all_to_all_bytes"] == pytest.approx(sent, rel=1e-6)
    assert ep.tokens_per_s is not None and fsdp.tokens_per_s is not None
    assert ep.tokens_per_s > 2 * fsdp.tokens_per_s
    # the sharded state does not change: experts over EP hold what FSDP's shards held
    assert ep.memory.optimizer_bytes == fsdp.memory.optimizer_bytes


@pytest.mark.parametrize(("model", "gpus", "degree"), [
    ("qwen3-30b-a3b", 8, 8),    # 128 experts
    ("mixtral-8x7b", 16, 8),    # 8 experts, two nodes: the group stays in a node
    ("qwen1.5-moe-a2.7b", 8, 4),  # 60 experts do not split 8 ways (torchtitan views E / ep)
])
def test_the_expert_parallel_group_divides_the_experts_inside_a_node(
        model: str, gpus: int, degree: int) -> None:
    workload, opts, _ = _estimate(model, gpus, expert_parallel=True)
    assert resolve_layout(workload, opts).ep_degree == degree


def test_training_tensor_parallelism_copies_no_kv_head() -> None:
    # serving engines copy KV heads over TP ranks (vLLM); torchtitan and Megatron do not
    assert tp_fits_heads(8, (32, 4)) and not tp_fits_heads(8, (32, 4), copy_kv=False)
    assert tp_fits_heads(4, (32, 4), copy_kv=False)


def _routed_experts_s(engine: str, weights: str) -> float:
    from hwadvisor.perfmodel.compute import layer_gemms, rates
    from hwadvisor.perfmodel.core import _setup

    device = primary_device(resolve_target("h100-sxm", 8))
    workload = build_workload(WorkloadRequest(model="qwen3-30b-a3b", phase="training", batch=1,
                                              prompt_len=2048, gpus=8, engine=engine),
                              Sizing.of(device)).model_copy(update={"weights_dtype": weights})
    setup = _setup(workload, device, ModelOptions(sharding="fsdp", compiled=True), None)
    ops = layer_gemms(setup, rates(setup), 2048.0, 1.0)
    return sum(op.time_s * n for op, n in ops if op.name == "routed experts")


def test_torchtitans_fp8_training_leaves_the_experts_grouped_gemms_in_bf16() -> None:
    # quantize.linear.float8 converts nn.Linear only; torchtitan's GroupedExperts stay bf16
    # (their FP8 path is the prototype quantize.grouped_mm.float8, not emitted). Megatron's
    # Transformer Engine runs them in FP8.
    assert _routed_experts_s("torchtitan", "fp8") == pytest.approx(
        _routed_experts_s("torchtitan", "bf16"), rel=1e-9)
    assert _routed_experts_s("megatron", "fp8") < 0.8 * _routed_experts_s("megatron", "bf16")


def test_a_moe_trained_with_torchtitan_gets_no_fp8_step_for_its_linear_layers_alone() -> None:
    # Qwen3-30B-A3B's FLOPs are in its experts: FP8 attention projections gain under 5%
    plan = _qwen3_plan().plan
    assert plan is not None
    assert "fp8-training" not in [step.id for step in plan.steps]
    text = plan.engine_config.text if plan.engine_config else ""
    assert "quantize.linear.float8" not in text
