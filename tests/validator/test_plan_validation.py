"""The plan validated as a whole: the stacked-step trial, its spec, its verdict, end to end."""

from __future__ import annotations

import math

import pytest

from hwadvisor.models import (
    Effect,
    Measurement,
    PlanTrialSpec,
    TrialResult,
)
from hwadvisor.rules import plan_step
from hwadvisor.validator.plan import PlanCheck, applied_from, plan_verdict

# --- the spec: knobs of the baseline and of the plan --------------------------------------


def _report(goal: str, device: str, **request):
    from hwadvisor.pipeline import recommend_report
    from hwadvisor.workload.request import WorkloadRequest

    return recommend_report(goal, device, WorkloadRequest(**request))


def test_spec_reads_the_plan_knobs_and_lists_what_it_cannot_run():
    # --quality int4 lets the plan take 4-bit weights (the default budget keeps FP8)
    report = _report("inference-latency", "h200-sxm", model="llama-3-8b", batch=1,
                     quality="int4")
    ids = [s.id for s in report.plan.steps]
    assert "int4-weights" in ids and "speculative-decoding" in ids
    from hwadvisor.probe.target import primary_device

    spec, unmeasured = plan_step.trial_spec(report.workload, primary_device(report), report.goal,
                                            report.plan)
    assert spec is not None and spec.phase == "inference" and spec.metric == "time"
    # vLLM's baseline: CUDA graphs and flash attention on, bf16 weights.
    assert spec.baseline["cuda_graphs"] is True and spec.baseline["weights"] == "bf16"
    assert spec.plan["weights"] == "int4" and spec.plan["cuda_graphs"] is True
    assert spec.steps["weights"] == ["int4-weights"]
    assert "speculative-decoding" in unmeasured and "draft" in unmeasured["speculative-decoding"]
    assert spec.batch == 1 and spec.context_len == 2048 + 256


def test_replay_applies_the_steps_in_order_on_the_baseline():
    report = _report("training-throughput", "h100-sxm", model="llama-3-8b", batch=8,
                     gpus=8)
    from hwadvisor.probe.target import primary_device

    base_wl, base_opts, wl, opts = plan_step.replay(report.workload, primary_device(report),
                                                    report.plan)
    for step in report.plan.steps:
        for key in step.changes:
            target = wl if key in type(wl).model_fields else opts
            if key in type(wl).model_fields or key in type(opts).model_fields:
                # the last step that sets a key wins
                last = [s.changes[key] for s in report.plan.steps if key in s.changes][-1]
                assert getattr(target, key) == last
    assert base_wl.engine == wl.engine


def test_unmeasured_reasons_are_specific():
    assert "GPUs" in plan_step._unmeasured_reason({"sharding": "fsdp"}, "training")
    assert "bitsandbytes" in plan_step._unmeasured_reason({"finetune": "qlora"}, "training")
    assert "kernels" in plan_step._unmeasured_reason({"weights_dtype": "int8"}, "training")
    assert "compile" in plan_step._unmeasured_reason({"compiled": True}, "inference")


def test_predicted_ratio_for_int4_decode_on_the_h200():
    """At full widths and batch 1 the decode step reads the weights: int4 predicts a gain."""
    report = _report("inference-latency", "h200-sxm", model="llama-3-8b", batch=1)
    from hwadvisor.probe.target import primary_device

    device = primary_device(report)
    shape = {"hidden_size": 4096, "num_heads": 32, "num_kv_heads": 8, "head_dim": 128,
             "intermediate_size": 14336, "layers": 4}
    knobs = dict(plan_step.knobs(report.workload, plan_step.replay(
        report.workload, device, report.plan)[1]))
    applied = {"baseline": knobs, "plan": {**knobs, "weights": "int4"}, "shape": shape,
               "baseline_batch": 1, "plan_batch": 1, "context_len": 2304, "device": "cuda:0"}
    ratio = plan_step.predicted_ratio(report.workload, device, "inference", "time", applied)
    assert ratio is not None and ratio > 1.2
    # Measured on the host CPU while planned for the H200: nothing to compare.
    assert plan_step.predicted_ratio(report.workload, device, "inference", "time",
                                     {**applied, "device": "cpu"}) is None


# --- the verdict on synthetic trial results ------------------------------------------------


def _spec(metric: str = "time") -> PlanTrialSpec:
    return PlanTrialSpec(phase="inference", metric=metric, batch=1, context_len=128,
                         baseline={"weights": "bf16"}, plan={"weights": "int4"},
                         steps={"weights": ["int4-weights"]})


def _result(key: str, value: float, ci: tuple[float, float], dropped: dict | None = None
            ) -> TrialResult:
    shape = {"hidden_size": 128, "num_heads": 4, "num_kv_heads": 1, "head_dim": 32,
             "intermediate_size": 512, "layers": 2, "batch": 1, "context_len": 128,
             "phase": "inference", "device": "cpu"}
    base = Measurement(label="baseline decode step", samples=[1.0, 1.0, 1.0],
                       params={**shape, "role": "baseline", "knob.weights": "bf16"})
    plan = Measurement(label="plan decode step", samples=[0.5, 0.5, 0.5],
                       params={**shape, "role": "variant", "knob.weights": "int4",
                               **{f"dropped.{k}": v for k, v in (dropped or {}).items()}})
    return TrialResult(id="plan-step", status="ok", measurements=[base, plan],
                       effects=[Effect.named(key, value, ci=list(ci), runs=12)],
                       summary="synthetic", kernel="torch int4")


def _check(predicted: float | None = 1.5, metric: str = "time", **extra) -> PlanCheck:
    return PlanCheck(spec=_spec(metric), unmeasured={"speculative-decoding": "needs a draft"},
                     predict=lambda applied: predicted, plan_ratio=2.4, metric="m", **extra)


def test_clear_win_confirms_with_the_prediction_error():
    v = plan_verdict(_check(1.5), _result("speedup", 1.8, (1.7, 1.9)))
    assert v.status == "confirmed" and v.ci == [1.7, 1.9] and v.runs == 12
    assert v.threshold == 1.0 and math.isclose(v.prediction_error, 1.8 / 1.5 - 1)
    assert v.measured_steps == ["int4-weights"]
    assert v.unmeasured_steps == ["speculative-decoding: needs a draft"]
    assert v.plan_ratio == 2.4 and v.kernel == "torch int4"


def test_clear_loss_refutes_and_a_straddle_is_inconclusive():
    assert plan_verdict(_check(1.5), _result("speedup", 0.8, (0.75, 0.85))).status == "refuted"
    assert plan_verdict(_check(1.5), _result("speedup", 1.02, (0.95, 1.09))).status == \
        "inconclusive"


def test_a_plan_that_costs_speed_is_held_to_its_predicted_cost():
    # Predicted 0.7x (recomputation to fit): 0.65x measured is within a quarter of it.
    v = plan_verdict(_check(0.7), _result("speedup", 0.65, (0.62, 0.68)))
    assert v.status == "confirmed" and math.isclose(v.threshold, 0.56)
    assert plan_verdict(_check(0.7), _result("speedup", 0.4, (0.38, 0.42))).status == "refuted"


def test_memory_plan_decides_on_the_memory_factor():
    v = plan_verdict(_check(0.5, metric="memory"), _result("memory_factor", 0.45, (0.45, 0.45)))
    assert v.status == "confirmed"
    no_memory = plan_verdict(_check(0.5, metric="memory"), _result("speedup", 1.2, (1.1, 1.3)))
    assert no_memory.status == "unsupported" and "CUDA" in no_memory.detail


def test_dropped_knobs_move_their_steps_to_unmeasured():
    v = plan_verdict(_check(None), _result("speedup", 1.3, (1.2, 1.4),
                                           dropped={"weights": "weights=int4: no kernel"}))
    assert v.measured_steps == [] and "int4-weights: weights=int4: no kernel" in \
        v.unmeasured_steps
    assert v.predicted_ratio is None and v.prediction_error is None


def test_unsupported_error_and_empty_plans():
    unsupported = TrialResult(id="plan-step", status="unsupported", reason="nothing here")
    v = plan_verdict(_check(), unsupported)
    assert v.status == "unsupported" and "int4-weights: nothing here" in v.unmeasured_steps
    err = plan_verdict(_check(), TrialResult(id="plan-step", status="error", reason="boom"))
    assert err.status == "error" and "boom" in err.detail
    empty = plan_verdict(PlanCheck(spec=None, no_steps=True), None)
    assert empty.status == "unsupported" and "no steps" in empty.detail
    none = plan_verdict(PlanCheck(spec=None, unmeasured={"tp": "GPUs"}), None)
    assert none.status == "unsupported" and none.unmeasured_steps == ["tp: GPUs"]


def test_applied_reads_back_knobs_shape_and_batches():
    applied = applied_from(_result("speedup", 1.0, (0.9, 1.1)))
    assert applied["baseline"] == {"weights": "bf16"} and applied["plan"] == {"weights": "int4"}
    assert applied["shape"]["layers"] == 2 and applied["baseline_batch"] == 1
    assert applied["device"] == "cpu"


# --- the trial on the CPU --------------------------------------------------------------------


torch_needed = pytest.mark.skipif(
    __import__("importlib").util.find_spec("torch") is None, reason="needs torch")


def _run(request: dict, **ctx_args) -> TrialResult:
    from hwadvisor.pipeline import build_workload
    from hwadvisor.trials.base import TrialContext
    from hwadvisor.trials.plan_step import PlanStepTrial
    from hwadvisor.workload.request import Sizing, WorkloadRequest

    wl = build_workload(WorkloadRequest(model="llama-3-8b"), Sizing(None, "cpu"))
    ctx = TrialContext(workload=wl, quick=True, budget_s=1.0, plan_spec=request,
                       **ctx_args)
    return PlanStepTrial().run(ctx)


@torch_needed
def test_trial_decode_step_int4_and_fp8_kv_on_cpu():
    result = _run({"phase": "inference", "batch": 2, "context_len": 512,
                   "baseline": {"weights": "bf16"}, "plan": {"weights": "int4", "kv": "fp8"}})
    assert result.status == "ok", result.reason
    speedup = result.effect_of("speedup")
    assert speedup is not None and speedup.ci is not None and speedup.value > 0
    assert result.effect_of("plan_output_rel_error").value < 0.5
    assert "int4" in result.kernel and "FP8 KV" in result.kernel
    applied = applied_from(result)
    assert applied["plan"]["weights"] == "int4" and applied["plan"]["kv"] == "fp8"
    assert applied["shape"]["intermediate_size"] % 128 == 0  # whole int4 groups


@torch_needed
def test_trial_train_step_with_checkpointing_fused_and_lora_on_cpu():
    result = _run({"phase": "training", "batch": 2, "seq_len": 64,
                   "baseline": {"batch": 2},
                   "plan": {"batch": 2, "checkpointing": "selective", "fused_optimizer": True,
                            "lora_rank": 8}})
    assert result.status == "ok", result.reason
    assert result.effect_of("speedup").ci is not None
    assert result.max_error == 0.0  # LoRA's B starts at zero: the forwards agree exactly


@torch_needed
def test_trial_batch_change_is_timed_per_token():
    result = _run({"phase": "training", "batch": 1, "seq_len": 64,
                   "baseline": {"batch": 1}, "plan": {"batch": 2}})
    assert result.status == "ok", result.reason
    applied = applied_from(result)
    assert applied["baseline_batch"] == 1 and applied["plan_batch"] == 2


@torch_needed
def test_trial_without_anything_it_can_run_is_unsupported():
    result = _run({"phase": "inference", "batch": 1, "context_len": 128,
                   "baseline": {}, "plan": {"cuda_graphs": True, "weights": "q4_k_m"}})
    assert result.status == "unsupported"
    assert "CUDA graphs need a CUDA GPU" in result.reason and "q4_k_m" in result.reason


@torch_needed
def test_trial_needs_a_plan():
    from hwadvisor.trials.base import TrialContext
    from hwadvisor.trials.plan_step import PlanStepTrial

    assert "recommend --validate" in PlanStepTrial().unsupported_reason(TrialContext())


@torch_needed
def test_a_broken_kernel_fails_the_check(monkeypatch):
    from hwadvisor.trials.kit import int4_ops

    real = int4_ops.int4_mm
    monkeypatch.setattr(int4_ops, "int4_mm", lambda *a, **k: real(*a, **k) * 0.5)
    result = _run({"phase": "inference", "batch": 1, "context_len": 128,
                   "baseline": {}, "plan": {"weights": "int4"}})
    assert result.status == "error" and "eager reference" in result.reason


@torch_needed
def test_recommend_validate_sets_plan_validation_on_cpu():
    from hwadvisor.pipeline import validate_recommendations

    # planned for this CPU (a GPU plan is not measured on a CPU: the next test), with an
    # engine and goal whose steps torch runs here (checkpointing's train step: at batch 2 the
    # activations need it on a host of a few tens of GB)
    report = _report("training-throughput", None, model="llama-3.2-1b", batch=2,
                     phase="training", engine="hf")
    report = validate_recommendations(report, quick=True)
    v = report.plan.validation
    assert v is not None
    assert v.status in ("confirmed", "refuted", "inconclusive")
    assert v.ci is not None and v.measured_steps
    assert any(t.id == "plan-step" for t in report.trials)
    assert all(r.validation.status != "pending" for r in report.recommendations)


@torch_needed
def test_a_gpu_plan_is_not_validated_on_this_cpu():
    """An H200 plan measured on a CPU-only torch would be CPU figures in the H200's name."""
    from hwadvisor.pipeline import validate_recommendations
    from hwadvisor.trials.base import cuda_available

    if cuda_available():
        pytest.skip("needs a torch that sees no GPU")
    report = _report("inference-latency", "h200-sxm", model="llama-3-8b", batch=1)
    report = validate_recommendations(report, quick=True)
    assert report.plan.validation.status == "unsupported"
    assert "torch sees no GPU" in (report.plan.validation.detail or "")
    assert not any(t.id == "plan-step" for t in report.trials)


def test_fp8_training_is_named_unmeasured_with_the_reason():
    # torchtitan trains in FP8 (Float8Linear); the Trainer has no FP8 switch, so no HF plan
    # takes the step
    report = _report("training-throughput", "h200-sxm", model="llama-3.2-1b", batch=4,
                     phase="training", engine="torchtitan")
    from hwadvisor.probe.target import primary_device

    assert "fp8-training" in [s.id for s in report.plan.steps]
    spec, unmeasured = plan_step.trial_spec(report.workload, primary_device(report), report.goal,
                                            report.plan)
    assert "torch.compile fuses its casts" in unmeasured["fp8-training"]


def test_predicted_memory_of_the_decode_step_is_weights_and_cache():
    """On the H200, 4 layers at Llama-3-8B widths, batch 16 x 2304: int4 weights and an FP8
    cache measured x0.32 of the bf16 step's bytes (docs/benchmarks.md); the model, on the
    tensors the step holds, says the same."""
    report = _report("memory-footprint", "h200-sxm", model="llama-3-8b", batch=16)
    from hwadvisor.probe.target import primary_device

    shape = {"hidden_size": 4096, "num_heads": 32, "num_kv_heads": 8, "head_dim": 128,
             "intermediate_size": 14336, "layers": 4}
    base = {"cuda_graphs": True, "weights": "bf16", "kv": "bf16", "attention": "flash",
            "checkpointing": "none", "fused_optimizer": False, "lora_rank": 0, "batch": 16}
    applied = {"baseline": base, "plan": {**base, "weights": "int4", "kv": "fp8"},
               "shape": shape, "baseline_batch": 16, "plan_batch": 16, "context_len": 2304,
               "device": "cuda:0"}
    ratio = plan_step.predicted_ratio(report.workload, primary_device(report), "inference",
                                      "memory", applied)
    assert ratio is not None and abs(ratio / 0.3226 - 1) < 0.1
