"""llama.cpp's kernels as its pinned release runs them on Hopper, and as older builds did.

The figures are the H200 measurements of docs/benchmarks.md ("llama.cpp on the H200"); each
test fails when the release's rates in hwadvisor/engines/data/llamacpp.toml are not applied.
"""

from __future__ import annotations

import pytest

from hwadvisor.models import ModelOptions
from hwadvisor.pipeline import estimate_report
from hwadvisor.workload.request import WorkloadRequest


def _tokens_per_s(model: str, weights: str, batch: int, prompt: int, gen: int,
                  engine: str = "llamacpp") -> float:
    request = WorkloadRequest(model=model, phase="inference", batch=batch, prompt_len=prompt,
                              gen_len=gen, weights_dtype=weights, engine=engine)
    est = estimate_report(request, "h200-sxm", ModelOptions()).estimate
    assert est is not None
    if gen == 0:
        return batch * prompt / (est.times.ttft_s or 1.0)
    return batch / (est.times.tpot_s or 1.0)


@pytest.mark.parametrize(("weights", "batch", "measured"), [
    ("fp16", 1, 206.0),  # llama-bench tg128, 8B F16
    ("q4_k_m", 1, 277.0),  # llama-bench tg128, 8B Q4_K_M
    ("fp16", 8, 1000.0),  # llama-batched-bench P512/G128, 8 sequences
    ("q4_k_m", 8, 951.0),
])
def test_8b_decode_on_the_h200_is_within_15_percent_of_llamacpp_0c1e57098(
        weights: str, batch: int, measured: float) -> None:
    predicted = _tokens_per_s("llama-3-8b", weights, batch, 512, 128)
    assert measured / predicted == pytest.approx(1.0, abs=0.15)


def test_8b_q4_k_m_prefill_runs_at_the_measured_mmq_rate() -> None:
    predicted = _tokens_per_s("llama-3-8b", "q4_k_m", 1, 512, 0)
    assert 9680.0 / predicted == pytest.approx(1.0, abs=0.15)  # llama-bench pp512


def test_builds_before_the_f16_gemv_change_stream_f16_weights_slower() -> None:
    pinned = _tokens_per_s("llama-3-8b", "fp16", 1, 512, 128)
    may_2024 = _tokens_per_s("llama-3-8b", "fp16", 1, 512, 128, engine="llamacpp==b2843")
    # PR #9816 (b3916): 1.27x for 8B F16 at batch 1 on H100 SXM; b2843 also has no CUDA graphs
    assert pinned / may_2024 > 1.2


def test_few_sequences_run_on_the_vector_units_not_tensor_cores() -> None:
    one = _tokens_per_s("llama-3-8b", "fp16", 1, 512, 128)
    eight = _tokens_per_s("llama-3-8b", "fp16", 8, 512, 128)
    # measured 206 -> 1000 tokens/s (x4.9), not the x7+ a tensor-core GEMM at 8 rows would give
    assert eight / one < 6.0
