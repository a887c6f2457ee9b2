"""Model-level trials on a CUDA GPU (skipped cleanly without one)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from hwadvisor.trials.base import TrialContext  # noqa: E402
from hwadvisor.trials.registry import get_trial  # noqa: E402

requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
pytestmark = [pytest.mark.gpu, requires_cuda]

FULL = TrialContext(budget_s=5.0)  # the workload-sized shapes (Llama-3-8B widths by default)
IDS = ["activation-checkpointing", "cuda-graphs", "attention-backends", "torch-compile",
       "kv-cache-quantization", "fused-adamw", "continuous-batching", "speculative-verify",
       "prefix-reuse"]


@pytest.mark.parametrize("trial_id", IDS)
def test_quick_mode_runs_on_gpu(trial_id):
    r = get_trial(trial_id).run(TrialContext(quick=True, budget_s=1.0))
    assert r.status == "ok", r.reason
    assert r.environment.device and "cpu" not in r.environment.device


def test_activation_checkpointing_gpu():
    r = get_trial("activation-checkpointing").run(FULL)
    assert r.status == "ok", r.reason
    assert r.effect["memory_factor"] < 0.8  # 4 blocks: kept inputs + one block's recompute
    assert r.effect["time_factor"] > 1.05  # the recompute is another forward
    assert r.measurements[0].params["memory_method"] == "cuda allocator peak"


def test_cuda_graphs_gpu():
    r = get_trial("cuda-graphs").run(FULL)
    assert r.status == "ok", r.reason
    assert r.max_error is not None and r.max_error <= 1e-2
    assert r.effect["speedup"] > 0.8  # a replay is never much slower than eager


def test_attention_backends_gpu():
    r = get_trial("attention-backends").run(FULL)
    assert r.status == "ok", r.reason
    by = {m.label: m for m in r.measurements}
    assert by["math"].params["status"] == "ok"
    if torch.cuda.get_device_capability() >= (8, 0):
        assert by["flash_attention"].params["status"] == "ok"
        assert by["math"].params["best_backend"] != "math"
        assert r.effect["speedup"] > 1.0
    for m in r.measurements:
        if m.params["status"] == "ok":
            assert m.error is not None and m.error < 3e-2


def test_torch_compile_gpu():
    r = get_trial("torch-compile").run(FULL)
    assert r.status == "ok", r.reason
    assert r.effect["compile_s"] > 0 and r.effect["speedup"] > 0


def test_kv_cache_quantization_gpu():
    r = get_trial("kv-cache-quantization").run(FULL)
    assert r.status == "ok", r.reason
    assert 0.5 <= r.effect["memory_factor"] < 0.51
    assert r.effect["output_rel_error"] < 0.3


def _with_interval(r, key):
    effect = r.effect_of(key)
    assert effect is not None and effect.ci is not None, key
    assert effect.ci[0] <= effect.value <= effect.ci[1]
    return effect


def test_interleaved_speedups_carry_intervals_gpu():
    for trial_id in ("cuda-graphs", "attention-backends", "activation-checkpointing"):
        r = get_trial(trial_id).run(FULL)
        assert r.status == "ok", r.reason
        _with_interval(r, "speedup")


def test_fused_adamw_gpu():
    r = get_trial("fused-adamw").run(FULL)
    assert r.status == "ok", r.reason
    assert _with_interval(r, "speedup").value > 0.8  # one kernel is never much slower


def test_serving_trials_gpu():
    from hwadvisor.models import Workload

    ctx = TrialContext(workload=Workload(model="llama-3-8b", batch=4, prompt_len=2048),
                       budget_s=5.0)
    batching = get_trial("continuous-batching").run(ctx)
    assert batching.status == "ok", batching.reason
    # a decode step of 4 sequences costs far less than 4 steps of one while weights dominate
    assert _with_interval(batching, "throughput_speedup").value > 2.0
    verify = get_trial("speculative-verify").run(ctx)
    assert verify.status == "ok", verify.reason
    assert _with_interval(verify, "verify_time_factor").value < 2.0
    prefix = get_trial("prefix-reuse").run(ctx)
    assert prefix.status == "ok", prefix.reason
    assert _with_interval(prefix, "speedup").value > 1.2  # half the tokens to prefill


@pytest.mark.skipif(torch.cuda.is_available()
                    and tuple(torch.cuda.get_device_capability(0)) < (8, 9),
                    reason="needs FP8 tensor cores")
def test_kv_cache_speed_on_fp8_gpu():
    r = get_trial("kv-cache-quantization").run(FULL)
    assert r.status == "ok", r.reason
    _with_interval(r, "speedup")
    assert r.kernel and "dequantised" in r.kernel


def _plan_step(request, quick=False):
    ctx = TrialContext(budget_s=3.0, quick=quick, plan_spec=request)
    return get_trial("plan-step").run(ctx)


def test_plan_step_decode_int4_with_graphs_gpu():
    """Batch 1 at Llama-3-8B widths: int4 weights read a quarter of the bytes; both graphed."""
    r = _plan_step({"phase": "inference", "batch": 1, "context_len": 2304,
                    "baseline": {"cuda_graphs": True}, "plan": {"cuda_graphs": True,
                                                                "weights": "int4"}})
    assert r.status == "ok", r.reason
    speedup = _with_interval(r, "speedup")
    assert speedup.value > 1.0
    assert r.effect_of("memory_factor").value < 0.6  # 4-layer weights shrink ~3.5x, cache not
    assert "_weight_int4pack_mm" in r.kernel


def test_plan_step_graphs_and_math_attention_gpu():
    r = _plan_step({"phase": "inference", "batch": 4, "context_len": 2048,
                    "baseline": {"attention": "math"}, "plan": {"cuda_graphs": True}})
    assert r.status == "ok", r.reason
    assert _with_interval(r, "speedup").value > 1.0


@pytest.mark.skipif(torch.cuda.is_available()
                    and tuple(torch.cuda.get_device_capability(0)) < (8, 9),
                    reason="needs FP8 tensor cores")
def test_plan_step_fp8_weights_and_kv_gpu():
    r = _plan_step({"phase": "inference", "batch": 16, "context_len": 2048,
                    "baseline": {"cuda_graphs": True},
                    "plan": {"cuda_graphs": True, "weights": "fp8", "kv": "fp8"}})
    assert r.status == "ok", r.reason
    _with_interval(r, "speedup")
    assert r.effect_of("memory_factor").value < 0.8


def test_plan_step_train_gpu():
    r = _plan_step({"phase": "training", "batch": 4, "seq_len": 2048,
                    "baseline": {"batch": 4, "checkpointing": "full"},
                    "plan": {"batch": 4, "checkpointing": "selective", "fused_optimizer": True,
                             "lora_rank": 16}})
    assert r.status == "ok", r.reason
    assert _with_interval(r, "speedup").value > 1.0  # less recompute, no weight gradients
    assert r.effect_of("memory_factor") is not None
