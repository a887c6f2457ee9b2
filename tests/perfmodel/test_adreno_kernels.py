"""llama.cpp's OpenCL kernels on Adreno GPUs: per-format rates and the release that changed F16."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from types import ModuleType

import pytest
from script_loader import load_script

from hwadvisor.perfmodel import estimate

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture(scope="module")
def published() -> ModuleType:
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    return load_script("benchmarks/published.py")


def _rate(published: ModuleType, fig_id: str, **changes: object) -> float:
    figures = {f.id: f for f in published.load_figures()}
    fig = dataclasses.replace(figures[fig_id], **changes)
    workload, device, options = published.build(fig)
    return float(published.predicted_rate(fig, estimate(workload, device, options)))


def test_q4_0_decode_on_adreno_750_runs_at_the_published_rate(published: ModuleType) -> None:
    # llama.cpp issue #14337: Qwen 1.5B on an 8 Gen 3 phone, OpenCL, 27.34 tokens/s after a
    # 148-token prompt (742 generated): the Adreno Q4_0 GEMV reads ~27 of the 77 GB/s. A model
    # streaming at the general llama.cpp rate predicts ~42.
    rate = _rate(published, "llamacpp-adreno750-opencl-qwen2.5-1.5b-q4_0-fa1-tg128",
                 prompt_len=519, gen_len=1)
    assert rate == pytest.approx(27.34, rel=0.1)


def test_f16_prefill_on_adreno_830_before_and_after_the_tiled_kernel(
        published: ModuleType) -> None:
    # PR #14535 on an Adreno 830: Llama 3.2 1B F16 pp512 19.24 tokens/s on the old kernel; the
    # current release's tiled kernels run ~10x faster (the held-out fa 0 figure: 198.69).
    fig = "llamacpp-adreno830-opencl-llama3.2-1b-f16-fa0-pp512"
    old = _rate(published, fig, engine_version="b5000 (5000)")
    new = _rate(published, fig)
    assert old == pytest.approx(19.24, rel=0.15)
    assert new > 8 * old


def test_unfused_attention_on_adreno_runs_the_per_row_f16_kernel(published: ModuleType) -> None:
    # Without flash attention llama.cpp's OpenCL backend multiplies K x Q and scores x V in its
    # generic per-row F16 kernel, at the rate PR #14535's 'Master' table gives that kernel. On an
    # Adreno 830 a 512-token Llama 3.2 1B F16 prefill then runs ~28% slower than with the fused
    # kernel (PR #14987: 198.69 vs 274.75 tokens/s); attention as a batched GEMM at half the GPU
    # path's 16-bit rate made the unfused run as fast as the fused one (286.5 predicted).
    unfused = _rate(published, "llamacpp-adreno830-opencl-llama3.2-1b-f16-fa0-pp512")
    fused = _rate(published, "llamacpp-adreno830-opencl-llama3.2-1b-f16-fa1-pp512")
    assert unfused < 0.8 * fused
    assert unfused == pytest.approx(198.69, rel=0.15)



def test_the_q6_k_classifier_of_a_q4_0_file_ran_the_generic_kernel_before_pr_20089(
        published: ModuleType) -> None:
    # Xiaomi 14 (Adreno 750), Llama-3.2-1B Q4_0 (tied classifier in Q6_K), b4365: 23.1 tokens/s
    # measured. The generic Q6_K GEMV's rate comes from PR #20089's 'before' table on an X Elite
    # (another GPU and model); with the layers' Q4_0 rate for the classifier the model said +42%.
    fig = "llamacpp-xiaomi14-opencl-llama3.2-1b-q4_0-tg32"
    old = _rate(published, fig)
    assert old == pytest.approx(23.1, rel=0.15)
    assert _rate(published, fig, engine_version="") > 1.2 * old  # Adreno Q6_K kernels since
