"""What the engine checks at start-up, held on the plans: the model's window, the KV pool the
engine allocates within its memory reservation, and the drafter's memory."""

from __future__ import annotations

import re

import pytest

from hwadvisor.engines import get_engine
from hwadvisor.perfmodel import estimate_memory
from hwadvisor.pipeline import build_workload
from hwadvisor.probe.target import primary_device, resolve_target
from hwadvisor.rules.advise import Outcome, recommend
from hwadvisor.workload import Sizing, WorkloadRequest
from hwadvisor.workload.configparse import context_window

B = "inference-latency"


def _plan(profile: str, gpus: int = 1, spec_update: dict | None = None,
          **workload: object) -> Outcome:
    report = resolve_target(profile, gpus)
    device = primary_device(report)
    built = build_workload(WorkloadRequest(gpus=gpus, **workload),
                           Sizing(device.memory_total_bytes, device.device_class))
    if spec_update:
        assert built.spec is not None
        built = built.model_copy(update={"spec": built.spec.model_copy(update=spec_update)})
    return recommend(built, device, B, host=report.host)


def _flag(text: str, flag: str) -> int:
    found = re.search(rf"{flag} (\d+)", text)
    assert found, text
    return int(found.group(1))


# ---- the model's window

def test_max_model_len_never_above_the_models_window_and_the_plan_says_so():
    # a 128k prompt + 512 generated on Llama-3.1-8B (131,072 positions): vLLM refuses
    # --max-model-len 131584 (config/model.py _get_and_verify_max_len)
    out = _plan("h100-sxm", model="llama-3.1-8b", prompt_len=131072, gen_len=512)
    config = out.plan.engine_config
    assert config is not None
    assert _flag(config.text, "--max-model-len") == 131072
    assert "longer than llama-3.1-8b reads (131,072 tokens" in out.plan.summary
    assert any("keep prompts to 130,560 tokens" in n for n in config.notes)


def test_a_llama_server_slot_never_holds_more_than_the_model_reads():
    # 8 slots of 8,192 + 256 on Llama-3-8B (8,192 positions): each slot is the window
    out = _plan("rtx-4090", model="llama-3-8b", batch=8, prompt_len=8192, engine="llamacpp")
    config = out.plan.engine_config
    assert config is not None and "--parallel 8" in config.text
    assert _flag(config.text, "--ctx-size") == 8 * 8192


@pytest.mark.parametrize(("config", "window"), [
    ({"max_position_embeddings": 4096}, 4096),
    # linear and dynamic RoPE scaling stretch the window; vLLM multiplies by the factor
    ({"max_position_embeddings": 4096, "rope_scaling": {"type": "linear", "factor": 4.0}},
     16384),
    # llama3 and YaRN configs state the scaled window already (vLLM 0.33.0)
    ({"max_position_embeddings": 131072, "rope_scaling": {"rope_type": "llama3",
                                                          "factor": 8.0}}, 131072),
    ({"max_position_embeddings": 163840, "rope_scaling": {
        "type": "yarn", "factor": 40, "original_max_position_embeddings": 4096}}, 163840),
    # the smallest length key wins; a multimodal config's text_config is read
    ({"max_position_embeddings": 32768, "seq_length": 8192}, 8192),
    ({"text_config": {"max_position_embeddings": 10485760}}, 10485760),
    ({}, None),
])
def test_the_window_is_read_as_vllm_derives_it(config: dict, window: int | None) -> None:
    assert context_window(config) == window


def test_max_model_len_within_the_kv_pool_vllm_allocates_for_chunked_attention():
    # Llama-4-style chunked local attention: vLLM 0.33.0 turns its hybrid KV cache manager off
    # for it, so every layer's cache is allocated at full length; --max-model-len is what that
    # pool holds at batch 1, not the config's 10,485,760 (which vLLM refuses to start with)
    chunked = {"sliding_window": 8192, "sliding_window_layers": 24, "attention_chunked": True,
               "max_position_embeddings": 10485760, "context_window": 10485760}
    out = _plan("h100-sxm", model="llama-3.1-8b", spec_update=chunked)
    config = out.plan.engine_config
    assert config is not None
    longest = _flag(config.text, "--max-model-len")
    assert longest < 1_000_000
    # the same layers in an engine that keeps only the chunk would hold far more
    report = resolve_target("h100-sxm", 1)
    device = primary_device(report)
    built = build_workload(WorkloadRequest(model="llama-3.1-8b", prompt_len=longest),
                           Sizing(device.memory_total_bytes, device.device_class))
    assert built.spec is not None
    spec = built.spec.model_copy(update=chunked)
    vllm = estimate_memory(built.model_copy(update={"spec": spec, "engine": "vllm"}), device)
    chunk = estimate_memory(built.model_copy(update={"spec": spec, "engine": "sglang"}), device)
    assert vllm.kv_cache_bytes > 2.5 * chunk.kv_cache_bytes


# ---- memory as the engine sees it

def test_a_vllm_plan_fits_within_its_gpu_memory_utilization():
    # 70B FP8 on one H100 with a drafter needed 79.7 GB: above vLLM's 0.92 x 85.9 GB; the plan
    # now fits within the reservation or plans otherwise
    out = _plan("h100-sxm", model="llama-3.3-70b", weights_dtype="fp8")
    assert out.plan.fits and out.plan.device_memory_bytes is not None
    assert out.plan.memory_per_gpu_bytes <= out.plan.device_memory_bytes
    # 721 MB short of 0.92 of the card: vLLM is told to take 0.95 (what the plan fits in), not
    # the FP8 the user asked for traded for 4-bit weights
    assert [s.id for s in out.plan.steps][:1] == ["memory-reservation"]
    assert "--gpu-memory-utilization 0.95" in out.plan.engine_config.text  # type: ignore[union-attr]
    assert "int4-weights" not in [s.id for s in out.plan.steps]
    assert out.plan.device_memory_bytes <= 0.951 * 85.9e9


@pytest.mark.parametrize(("profile", "gpus", "workload"), [
    ("a100-80gb", 1, {"model": "llama-3.1-8b", "prompt_len": 131072, "batch": 8}),
    ("a100-40gb", 4, {"model": "llama-3-70b", "quality": "lossless", "batch": 4}),
])
def test_the_issues_thin_fits_now_fit_the_reservation(profile: str, gpus: int,
                                                      workload: dict) -> None:
    out = _plan(profile, gpus, **workload)
    assert out.plan.device_memory_bytes is not None
    assert out.plan.memory_per_gpu_bytes <= out.plan.device_memory_bytes
    report = resolve_target(profile, gpus)
    total = primary_device(report).memory_total_bytes
    # within vLLM's default 0.92 of the card, or the 0.95 the plan then tells it to take
    raised = "--gpu-memory-utilization 0.95" in out.plan.engine_config.text  # type: ignore[union-attr]
    assert "memory-reservation" in [s.id for s in out.plan.steps] or not raised
    share = 0.951 if raised else 0.921
    assert total is not None and out.plan.device_memory_bytes <= share * total


def test_each_engine_states_its_reservation_with_what_it_covers():
    gib = 2**30
    vllm = get_engine("vllm").defaults.reservation(80 * gib)
    assert vllm is not None and (vllm.scope, vllm.fraction) == ("all", 0.92)
    old = get_engine("vllm", "0.6.0").defaults.reservation(80 * gib)
    assert old is not None and old.fraction == 0.9  # 0.9 up to 0.19.0
    sglang = get_engine("sglang").defaults.reservation(80 * gib)
    # memory_hook.py: (80 GiB - 13,440 MB) / 80 GiB on an 80 GB GPU at TP 1
    assert sglang is not None and sglang.scope == "static"
    assert sglang.fraction == pytest.approx(1 - 13440 / 1024 / 80, abs=0.001)
    trt = get_engine("trtllm").defaults.reservation(80 * gib)
    assert trt is not None and (trt.scope, trt.fraction) == ("free", 0.9)
    assert get_engine("llamacpp").defaults.reservation(80 * gib) is None


def test_a_fraction_the_user_sets_is_planned_and_said():
    out = _plan("h100-sxm", model="llama-3.1-8b", engine="vllm",
                engine_options=("kv_memory_fraction=0.8",))
    assert out.plan.device_memory_bytes is not None
    assert out.plan.device_memory_bytes <= 0.801 * 85.9e9
    assert out.plan.engine_config is not None
    assert "--gpu-memory-utilization 0.8" in out.plan.engine_config.text


@pytest.mark.parametrize(("drafter", "low", "high"), [
    # an EAGLE-3 head for Llama-3.1-8B: fusion, one layer with 2h-wide QKV, MLP and a 32k
    # draft head, ~0.42B parameters in 16 bits
    ("eagle3", 0.8e9, 0.9e9),
    # Llama-3.2-1B-Instruct drafting: 1.24B parameters in bf16
    ("draft-model", 2.4e9, 2.6e9),
    ("ngram", 0.0, 1.0),
])
def test_the_drafters_weights_count_per_gpu(drafter: str, low: float, high: float) -> None:
    from hwadvisor.models import ModelOptions

    report = resolve_target("h100-sxm", 1)
    device = primary_device(report)
    built = build_workload(WorkloadRequest(model="llama-3.1-8b", gen_len=1, prompt_len=1),
                           Sizing(device.memory_total_bytes, device.device_class))
    base = estimate_memory(built, device, ModelOptions())
    with_draft = estimate_memory(built, device, ModelOptions(speculative_drafter=drafter))
    assert low <= with_draft.weights_bytes - base.weights_bytes <= high


# ---- combinations the engine refuses

def test_qlora_computes_in_fp16_on_a_gpu_without_bf16():
    # bitsandbytes' bnb_4bit_compute_dtype=torch.bfloat16 fails on a T4 (no bf16)
    report = resolve_target("t4", 1)
    device = primary_device(report)
    built = build_workload(WorkloadRequest(model="llama-3-8b", phase="training", batch=1,
                                           prompt_len=1024, engine="hf"), Sizing.of(device))
    out = recommend(built, device, "training-throughput", host=report.host)
    assert "qlora" in {s.id for s in out.plan.steps}
    assert out.plan.engine_config is not None
    assert "bnb_4bit_compute_dtype=torch.float16" in out.plan.engine_config.text


def test_expert_parallelism_stays_inside_one_replicas_tensor_parallel_group():
    # SGLang takes --ep-size 1 or --tp-size (moe_hook.py): with two replicas of TP 8 the EP
    # degree is 8, not the 16 GPUs of both
    from types import SimpleNamespace

    from hwadvisor.models import ModelOptions
    from hwadvisor.models.plan import Plan, PlanLayout, PlanMetric
    from hwadvisor.rules.engine_config import plan_values

    report = resolve_target("h100-sxm", 16)
    device = primary_device(report)
    built = build_workload(WorkloadRequest(model="qwen3-30b-a3b", gpus=16, engine="sglang"),
                           Sizing(device.memory_total_bytes, device.device_class))
    layout = PlanLayout(tp=8, pp=1, cp=1, dp=2, gpus=16, nodes=2, sharding="tp", ep=True)
    plan = Plan(engine="sglang", steps=[], fits=True, memory_per_gpu_bytes=1,
                metric=PlanMetric(name="request_latency_s", unit="s", better="lower"),
                layout=layout, summary="")
    ctx = SimpleNamespace(workload=built, options=ModelOptions(expert_parallel=True),
                          device=device, fits_with=lambda *_: True)
    values = plan_values(ctx, plan)  # type: ignore[arg-type]
    assert (values.tp, values.dp, values.ep) == (8, 2, 8)
