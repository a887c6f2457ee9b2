"""llama.cpp's CUDA GEMMs accumulate in FP16 (issue 42).

ggml-cuda at the pinned 0c1e57098 multiplies F16 weights (and quantised ones it dequantises to
F16 for cuBLAS) with CUBLAS_COMPUTE_16F, except on Volta (prefer_f32_output), and runs
quantised weights through MMQ on int8 tensor cores from Turing on. GeForce cards run FP16 with
FP16 accumulate at twice the FP32-accumulate rate their profiles list as fp16
(peak_tflops.fp16_acc16); professional and datacenter cards run both at one rate.
"""

from __future__ import annotations

import pytest

from hwadvisor.engines.catalog import get_engine
from hwadvisor.models import Device, ModelOptions
from hwadvisor.perfmodel import estimate
from hwadvisor.profiles.devices import device_from_profile
from hwadvisor.workload import WorkloadRequest, build_workload


def _prefill_tokens_per_s(device: Device, weights: str, engine: str = "llamacpp",
                          version: str | None = None) -> float:
    """llama-bench pp512 of Llama-3-8B as the model prices it (no server slots)."""
    options = ("server=false",) if engine == "llamacpp" else ()
    workload = build_workload(WorkloadRequest(
        model="llama-3-8b", phase="inference", batch=1, prompt_len=512, gen_len=0,
        weights_dtype=weights, engine=engine, engine_options=options))
    if version is not None:  # the engine as that build ran it (its [[history]])
        workload = workload.model_copy(update={"engine_version": version})
    est = estimate(workload, device, ModelOptions())
    assert est.times.ttft_s
    return 512 / est.times.ttft_s


def _without_acc16(device: Device) -> Device:
    peaks = {k: v for k, v in device.peak_tflops.items() if k != "fp16_acc16"}
    return device.model_copy(update={"peak_tflops": peaks})


def test_rtx_4090_llamacpp_f16_prefill_runs_at_the_fp16_accumulate_rate() -> None:
    rtx4090 = device_from_profile("rtx-4090")
    assert rtx4090.peak_tflops["fp16_acc16"] == pytest.approx(2 * rtx4090.peak_tflops["fp16"],
                                                              rel=0.01)
    with_figure = _prefill_tokens_per_s(rtx4090, "fp16")
    without = _prefill_tokens_per_s(_without_acc16(rtx4090), "fp16")
    # pp512 of an 8B model is compute-bound: the GEMMs' share of it runs twice as fast
    assert with_figure / without > 1.6


def test_engines_that_accumulate_in_fp32_keep_the_listed_rate() -> None:
    rtx4090 = device_from_profile("rtx-4090")
    vllm = _prefill_tokens_per_s(rtx4090, "fp16", engine="vllm")
    assert vllm == pytest.approx(_prefill_tokens_per_s(_without_acc16(rtx4090), "fp16",
                                                       engine="vllm"), rel=1e-9)


@pytest.mark.parametrize("card", ["l40s", "rtx-6000-ada"])
@pytest.mark.parametrize("weights", ["fp16", "q4_k_m"])
def test_workstation_ada_cards_are_not_priced_at_twice_a_4090(card: str, weights: str) -> None:
    # Both run 1024 FP16 FLOP per SM per clock (FP32 accumulate at the full rate) on 142 SMs
    # against the 4090's 128 with FP16 accumulate: ~1.1x at the same clock, not 2.2x; the
    # published multi-GPU llama.cpp runs have them slower than 4090s.
    ratio = (_prefill_tokens_per_s(device_from_profile(card), weights)
             / _prefill_tokens_per_s(device_from_profile("rtx-4090"), weights))
    assert ratio < 1.3


def _volta_like(compute_capability: str) -> Device:
    """A V100 whose profile stated a doubled FP16-accumulate rate, at a compute capability."""
    v100 = device_from_profile("v100-sxm2")
    peaks = {**v100.peak_tflops, "fp16_acc16": 2 * v100.peak_tflops["fp16"]}
    return v100.model_copy(update={"peak_tflops": peaks,
                                   "compute_capability": compute_capability})


def test_volta_keeps_fp32_output() -> None:
    volta = _volta_like("7.0")
    assert _prefill_tokens_per_s(volta, "fp16") == pytest.approx(
        _prefill_tokens_per_s(_without_acc16(volta), "fp16"), rel=1e-9)
    # the same card at another compute capability takes the figure
    assert _prefill_tokens_per_s(_volta_like("7.5"), "fp16") > \
        1.3 * _prefill_tokens_per_s(volta, "fp16")


def test_quantised_prefill_ran_cublas_before_mmq_became_the_default() -> None:
    assert get_engine("llamacpp", None, ()).defaults.cuda_quant_gemm == "mmq"
    assert get_engine("llamacpp", "b2843", ()).defaults.cuda_quant_gemm == "cublas"
    # May 2024 on a GeForce: dequantised to F16 for cuBLAS, at the FP16-accumulate rate
    rtx4090 = device_from_profile("rtx-4090")
    assert _prefill_tokens_per_s(rtx4090, "q4_k_m", version="b2843") > \
        1.5 * _prefill_tokens_per_s(_without_acc16(rtx4090), "q4_k_m", version="b2843")
