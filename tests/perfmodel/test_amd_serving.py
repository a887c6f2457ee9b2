"""Serving on AMD Instinct GPUs as ROCm runs it: FP8 prefill at the FP8 peak, ROCm's kernels.

FP8 on CDNA 3 has twice bf16's peak and hipBLASLt reaches a share of it like Hopper's
(perfmodel/constants.py GEMM_PEAK_FRACTION, with its source); vLLM and SGLang run AWQ/GPTQ
through Triton / ExLlama kernels there, never Marlin, which is CUDA-only.
"""

from __future__ import annotations

import pytest

from hwadvisor import profiles
from hwadvisor.engines import engine_for
from hwadvisor.models import ModelOptions
from hwadvisor.perfmodel import efficiency as E
from hwadvisor.pipeline import estimate_report
from hwadvisor.rules.playbooks.facts import _four_bit_words
from hwadvisor.workload import WorkloadRequest, build_workload


def _ttft(device: str, weights: str) -> float:
    request = WorkloadRequest(model="llama-3.1-8b", phase="inference", batch=1, prompt_len=2048,
                              gen_len=0, weights_dtype=weights, engine="vllm")
    est = estimate_report(request, device, ModelOptions()).estimate
    assert est is not None and est.times.ttft_s is not None
    return est.times.ttft_s


@pytest.mark.parametrize("device", ["mi300x", "mi325x"])
def test_fp8_prefill_on_cdna3_runs_faster_than_bf16(device: str) -> None:
    assert _ttft(device, "bf16") / _ttft(device, "fp8") > 1.3


def test_fp8_prefill_gains_like_on_hopper() -> None:
    # the H200's measured FP8 GEMM gain at prefill shapes is ~1.8x (docs/benchmarks.md)
    amd = _ttft("mi300x", "bf16") / _ttft("mi300x", "fp8")
    nvidia = _ttft("h200-sxm", "bf16") / _ttft("h200-sxm", "fp8")
    assert amd == pytest.approx(nvidia, rel=0.25)


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_int4_on_rocm_is_not_called_marlin(engine: str) -> None:
    workload = build_workload(WorkloadRequest(model="llama-3.1-8b", phase="inference",
                                              engine=engine))
    words = _four_bit_words(workload, profiles.device_from_profile("mi300x"))
    assert not words.startswith("Marlin") and "Triton" in words
    nvidia = _four_bit_words(workload, profiles.device_from_profile("h100-sxm"))
    assert nvidia.startswith("Marlin")


def test_vllm_on_rocm_runs_its_own_int4_and_fp8_kernels() -> None:
    kernels = engine_for(build_workload(WorkloadRequest(model="llama-3.1-8b", phase="inference",
                                        engine="vllm"))).kernels
    assert E.quant_kernel("int4", kernels, "amd-cdna3", None) == "exllamav2"
    assert E.quant_kernel("fp8", kernels, "amd-cdna3", None) == "torch-scaled-mm"
    assert E.quant_kernel("int4", kernels, "nvidia-hopper", None) == "marlin"
