"""Phones, NPUs and Apple's other runtimes: compute by unit and dtype, recipes, engines."""

from __future__ import annotations

from hwadvisor import profiles
from hwadvisor.engines import baseline_options
from hwadvisor.models import Estimate, Plan
from hwadvisor.perfmodel import estimate
from hwadvisor.rules.advise import recommend
from hwadvisor.workload import build_workload

MIB = 2**20


def _run(device_id: str, model: str, engine: str, weights: str, prompt: int = 64,
         gen: int = 128) -> Estimate:
    device = profiles.device_from_profile(device_id)
    wl = build_workload(model, weights_dtype=weights, prompt_len=prompt, gen_len=gen,
                        engine=engine, device_memory_bytes=device.memory_total_bytes,
                        device_class=device.device_class)
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
    # Published PTE files (ExecuTorch Llama README): 1B SpinQuant 1,083 MiB, 3B 2,435 MiB.
    for model, published_mib in (("llama-3.2-1b", 1083), ("llama-3.2-3b", 2435)):
        wl = build_workload(model, weights_dtype="int4", engine="executorch")
        est = estimate(wl, profiles.device_from_profile("snapdragon-8-gen-3"),
                       baseline_options(wl))
        assert abs(est.memory.weights_bytes / MIB / published_mib - 1) <= 0.05, model


def test_the_8b_in_metas_recipe_keeps_8_bit_embeddings_and_fits_a_12_gb_phone() -> None:
    device = profiles.device_from_profile("snapdragon-8-gen-3")
    wl = build_workload("llama-3-8b", weights_dtype="int4", engine="executorch",
                        prompt_len=512, gen_len=256, device_memory_bytes=device.memory_total_bytes,
                        device_class=device.device_class)
    est = estimate(wl, device, baseline_options(wl, device))
    # 6.98e9 decoder weights x 5.0 bits + 2 x 0.525e9 at 8 bits = 5.41 GB (not 5.73 with bf16)
    assert 5.2e9 <= est.memory.weights_bytes <= 5.6e9
    assert device.app_memory_limit_bytes and est.memory.total_bytes < \
        device.app_memory_limit_bytes


def _plan(device_id: str, model: str, engine: str | None = None,
          floor: float | None = None) -> Plan:
    device = profiles.device_from_profile(device_id)
    wl = build_workload(model, engine=engine, device_memory_bytes=device.memory_total_bytes,
                        device_class=device.device_class)
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
