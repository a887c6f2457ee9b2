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


# --- the Adreno GEMM's gate (llama.cpp's OpenCL use_adreno_kernels: both dims >= 512) -----------

S23_QWEN = "llamacpp-s23-opencl-qwen2.5-1.5b-q4_0-pp256"


def _no_gate(monkeypatch: pytest.MonkeyPatch) -> None:
    """Run the model as if no release stated a gate (every weight on the fast GEMM)."""
    from hwadvisor.perfmodel import compute

    monkeypatch.setattr(compute, "_gate", lambda *_: (0.0, 1.0, 2.0))


def _matmul_tflops(published: ModuleType, fig_id: str, **changes: object) -> float:
    """The prefill's effective rate: predicted tokens/s x FLOPs per token, TFLOP/s."""
    figures = {f.id: f for f in published.load_figures()}
    fig = dataclasses.replace(figures[fig_id], **changes)
    workload, device, options = published.build(fig)
    est = estimate(workload, device, options)
    return float(published.predicted_rate(fig, est)) * est.flops_per_token / 1e12


def test_qwen2_5_q4_0_prefill_on_adreno_740_runs_k_and_v_on_the_generic_gemm(
        published: ModuleType) -> None:
    # PocketPal's Galaxy S23 (b8827): SmolLM2-1.7B Q4_0 pp256 at 0.87 TFLOP/s of matmuls, the
    # DeepSeek-R1-Distill-Qwen-1.5B (Qwen2.5-1.5B's shapes) at 62.4 tokens/s = 0.20 TFLOP/s and
    # Qwen2.5-1.5B at 49.8 = 0.16: its [1536 x 256] attn_k/attn_v miss the Adreno GEMM's gate.
    # With every weight at the path's rate the model said 251 tokens/s (+405%).
    rate = _rate(published, S23_QWEN)
    assert rate == pytest.approx(62.42, rel=0.02)  # the tune row's fit
    assert rate == pytest.approx(49.79, rel=0.30)  # the held-out row
    slower = _matmul_tflops(published, S23_QWEN, model="llama-3.2-1b") / _matmul_tflops(
        published, S23_QWEN)
    assert 3.5 < slower < 6.0  # data: 0.87 / 0.20 = 4.4, 0.87 / 0.16 = 5.6


def test_the_redmi_k70_qwen2_5_0_5b_prefill_is_within_15_percent(published: ModuleType) -> None:
    # Held out (another phone, an older build, pp512): attn_k/attn_v [896 x 128] below the gate.
    # The model said 593 tokens/s (+179%) with every weight on the Adreno GEMM.
    assert _rate(published, "llamacpp-redmik70-opencl-qwen2.5-0.5b-q4_0-pp512") == \
        pytest.approx(212.38, rel=0.15)


@pytest.mark.parametrize("model", ["llama-3.2-1b", "qwen3-4b"])
def test_models_whose_weights_pass_the_gate_keep_the_path_rate(
        published: ModuleType, monkeypatch: pytest.MonkeyPatch, model: str) -> None:
    gated = _rate(published, S23_QWEN, model=model)
    _no_gate(monkeypatch)
    assert gated == pytest.approx(_rate(published, S23_QWEN, model=model), rel=1e-9)


@pytest.mark.parametrize(("fig_id", "changes"), [
    # decode: the matrix-vector kernels (one row, and eight: below the generic GEMM's 32 rows)
    ("llamacpp-s23-opencl-qwen2.5-1.5b-q4_0-tg64", {}),
    ("llamacpp-s23-opencl-qwen2.5-1.5b-q4_0-tg64", {"batch": 8}),
    # K-quants: their generic GEMMs are other kernels, not fitted, and do not inherit Q4_0's gate
    (S23_QWEN, {"weights_dtype": "q4_k_m"}),
    # the Adreno 750 (8 Gen 3): its own key, no gate stated
    ("llamacpp-adreno750-opencl-qwen2.5-1.5b-q4_0-fa1-tg128",
     {"phase": "prefill", "prompt_len": 512, "gen_len": 0}),
])
def test_the_gate_leaves_decode_k_quants_and_other_adrenos_alone(
        published: ModuleType, monkeypatch: pytest.MonkeyPatch, fig_id: str,
        changes: dict[str, object]) -> None:
    gated = _rate(published, fig_id, **changes)
    _no_gate(monkeypatch)
    assert gated == pytest.approx(_rate(published, fig_id, **changes), rel=1e-9)
