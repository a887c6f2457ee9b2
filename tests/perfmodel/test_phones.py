"""Phones, NPUs and Apple's other runtimes: compute by unit and dtype, recipes, engines."""

from __future__ import annotations

from hwadvisor import profiles
from hwadvisor.engines import baseline_options
from hwadvisor.models import Estimate, Plan
from hwadvisor.perfmodel import estimate
from hwadvisor.rules.advise import recommend
from hwadvisor.workload import Sizing, WorkloadRequest, build_workload

MIB = 2**20


def _run(device_id: str, model: str, engine: str, weights: str, prompt: int = 64,
         gen: int = 128) -> Estimate:
    device = profiles.device_from_profile(device_id)
    wl = build_workload(WorkloadRequest(model=model, weights_dtype=weights, prompt_len=prompt,
                                        gen_len=gen, engine=engine),
                        Sizing(device.memory_total_bytes, device.device_class))
    return estimate(wl, device, baseline_options(wl, device))


def _prefill_rate(est: Estimate, prompt: int = 64) -> float:
    assert est.times.ttft_s
    return prompt / est.times.ttft_s


def test_phone_prefill_depends_on_the_dtype_and_its_kernels() -> None:
    # ExecuTorch on a OnePlus 12: bf16 prefill 60.3 tokens/s, 8da4w 260.5 (XNNPACK int8 dot).
    bf16 = _prefill_rate(_run("snapdragon-8-gen-3", "llama-3.2-1b", "executorch", "bf16"))
    int4 = _prefill_rate(_run("snapdragon-8-gen-3", "llama-3.2-1b", "executorch", "int4"))
    assert 3.5 <= int4 / bf16 <= 5.0


def test_the_npu_prefills_an_order_of_magnitude_faster_than_the_cpu() -> None:
    npu = _prefill_rate(_run("snapdragon-8-elite", "llama-3.2-3b", "qnn", "int4", 128), 128)
    assert 1160 <= npu <= 1740  # Qualcomm AI Hub: 1,451 tokens/s (Genie, w4a16)
    cpu = _prefill_rate(_run("snapdragon-8-gen-3", "llama-3.2-3b", "executorch", "int4"))
    assert npu > 10 * cpu


def test_the_estimate_names_the_compute_path_it_used() -> None:
    est = _run("snapdragon-8-elite", "llama-3.2-3b", "qnn", "int4")
    assert any("npu via Hexagon HTP" in a for a in est.assumptions)


def test_executorch_int4_sizes_match_metas_published_files() -> None:
    # Published PTE files (ExecuTorch Llama README): 1B SpinQuant 1,083 MiB, 3B 2,435 MiB; Meta
    # ships these checkpoints prequantised, so their recipe is kept for them.
    for model, published_mib in (("llama-3.2-1b", 1083), ("llama-3.2-3b", 2435)):
        wl = build_workload(WorkloadRequest(model=model, weights_dtype="int4", engine="executorch"))
        est = estimate(wl, profiles.device_from_profile("snapdragon-8-gen-3"),
                       baseline_options(wl))
        assert abs(est.memory.weights_bytes / MIB / published_mib - 1) <= 0.003, model


def _llama3_8b_ptq_bytes() -> float:
    """Bytes ExecuTorch's PTQ recipe (README: Llama 3/3.1 8B) writes for Llama-3-8B.

    Shapes from meta-llama/Meta-Llama-3-8B config.json; the recipe: every linear (classifier
    included) 8da4w in groups of 128 with a bf16 scale each (XNNPACK serialises groupwise
    scales as bf16), the embedding 4-bit in groups of 32 with an fp32 scale each.
    """
    hidden, inter, layers, vocab, kv = 4096, 14336, 32, 128256, 8 * 128
    per_layer = 2 * hidden * hidden + 2 * hidden * kv + 3 * hidden * inter
    linears = layers * per_layer + vocab * hidden
    embedding = vocab * hidden
    return linears * (4 + 16 / 128) / 8 + embedding * (4 + 32 / 32) / 8  # ~4.20e9


def test_the_8b_takes_executorchs_ptq_recipe_not_the_prequantised_one() -> None:
    for model in ("llama-3-8b", "llama-3.1-8b"):
        wl = build_workload(WorkloadRequest(model=model, weights_dtype="int4", engine="executorch"))
        est = estimate(wl, profiles.device_from_profile("snapdragon-8-gen-3"),
                       baseline_options(wl))
        assert abs(est.memory.weights_bytes / _llama3_8b_ptq_bytes() - 1) <= 0.05, model


def test_the_8b_fits_a_12_gb_phone_in_4_bits() -> None:
    device = profiles.device_from_profile("snapdragon-8-gen-3")
    wl = build_workload(WorkloadRequest(model="llama-3-8b", weights_dtype="int4",
                                        engine="executorch", prompt_len=512, gen_len=256),
                        Sizing(device.memory_total_bytes, device.device_class))
    est = estimate(wl, device, baseline_options(wl, device))
    assert device.app_memory_limit_bytes and est.memory.total_bytes < \
        device.app_memory_limit_bytes


def _config_text(plan: Plan) -> str:
    assert plan.engine_config is not None
    return plan.engine_config.text


def test_the_emitted_export_follows_the_recipe_of_the_checkpoint() -> None:
    # The 8B (bf16 does not fit) is quantised at export with the README's PTQ recipe.
    eight = _plan("snapdragon-8-gen-3", "llama-3-8b", "executorch")
    assert "int4-weights" in {s.id for s in eight.steps}
    text = _config_text(eight)
    assert "quantization.group_size=128" in text
    assert 'quantization.embedding_quantize="4,32"' in text
    assert "preq_mode" not in text
    # The 3B on an A18 Pro is exported from Meta's prequantised SpinQuant checkpoint.
    three = _plan("a18-pro", "llama-3.2-3b", "executorch")
    step = next(s for s in three.steps if s.id == "int4-weights")
    assert "prequantised" in step.why
    text = _config_text(three)
    assert 'base.preq_mode="preq_8da4w_out_8da8w"' in text
    assert "base.preq_group_size=32" in text and 'quantization.use_spin_quant="native"' in text
    assert "quantization.qmode" not in text
    spin = "Llama-3.2-3B-Instruct-SpinQuant_INT4_EO8"
    assert any("prequantised SpinQuant checkpoint" in n and spin in n
               for n in three.engine_config.notes)


def _plan(device_id: str, model: str, engine: str | None = None,
          floor: float | None = None) -> Plan:
    device = profiles.device_from_profile(device_id)
    wl = build_workload(WorkloadRequest(model=model, engine=engine),
                        Sizing(device.memory_total_bytes, device.device_class))
    return recommend(wl, device, "inference-latency", min_tokens_per_s=floor).plan


def test_the_8b_on_an_a18_pro_offers_the_3b_and_every_smaller_preset_with_its_speed() -> None:
    plan = _plan("a18-pro", "llama-3-8b", "executorch")
    smaller = [a for a in plan.alternatives if a.id == "smaller-model"]
    assert smaller[0].changes["model"] == "llama-3.2-3b"
    assert {a.changes["model"] for a in smaller} >= {"llama-3.2-3b", "llama-3.2-1b"}
    assert all("tokens/s" in a.text for a in smaller)


def test_the_speed_floor_is_an_option() -> None:
    plan = _plan("a18-pro", "llama-3-8b", "executorch", floor=20.0)
    smaller = [a for a in plan.alternatives if a.id == "smaller-model"]
    assert smaller[0].changes["model"] != "llama-3.2-3b"
    three = next(a for a in smaller if a.changes["model"] == "llama-3.2-3b")
    assert "below the 20 tokens/s floor" in three.text


def test_qnn_on_snapdragon_and_coreml_on_apple_plan_and_emit_configs() -> None:
    for device_id, engine, key in (("snapdragon-8-elite", "qnn",
                                    'backend.qnn.soc_model="SM8750"'),
                                   ("snapdragon-8-gen-3", "qnn", "backend.qnn.enabled=True"),
                                   ("m1-max", "coreml", "backend.coreml.enabled=True"),
                                   ("a18-pro", "coreml", "backend.coreml.enable_state=True")):
        plan = _plan(device_id, "llama-3.2-1b", engine)
        assert plan.engine == engine
        assert plan.engine_config is not None and key in plan.engine_config.text, device_id
