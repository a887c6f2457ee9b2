"""Model-level trials on a CPU, run for real at tiny shapes (quick mode)."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from hwadvisor.models import Measurement, ModelSpec, Workload  # noqa: E402
from hwadvisor.trials import attention, checkpointing, compile, cuda_graphs, kv_quant  # noqa: E402
from hwadvisor.trials.base import TORCH_MISSING, TrialContext  # noqa: E402
from hwadvisor.trials.kit import common  # noqa: E402
from hwadvisor.trials.registry import get_trial  # noqa: E402

QUICK = TrialContext(quick=True, budget_s=1.0)
MODEL_TRIALS = {
    "activation-checkpointing": checkpointing.ActivationCheckpointingTrial,
    "cuda-graphs": cuda_graphs.CudaGraphsTrial,
    "attention-backends": attention.AttentionBackendsTrial,
    "torch-compile": compile.TorchCompileTrial,
    "kv-cache-quantization": kv_quant.KvCacheQuantizationTrial,
}


def _workload(heads: int = 64, kv: int = 8, head_dim: int = 128) -> Workload:
    spec = ModelSpec(name="test-70b-like", model_type="llama", hidden_size=heads * head_dim,
                     num_layers=80, num_heads=heads, num_kv_heads=kv, head_dim=head_dim,
                     intermediate_size=28672, vocab_size=128256)
    return Workload(model="test", spec=spec)


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Tiny shapes gain nothing from intra-op threads, and on a busy 2-core CI machine the
    threads' spinning slows every op ten-fold; one thread keeps the trials at ~1 s."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# -- shapes and the block itself ---------------------------------------------------------------

def test_scaled_shape_keeps_gqa_ratio_and_head_dim():
    shape = common.scaled_shape(_workload(), max_heads=16, layers=4, batch=1, seq_len=128)
    assert (shape.num_heads, shape.num_kv_heads, shape.head_dim) == (16, 2, 128)
    assert shape.hidden_size == 16 * 128
    # 28672 / 8192 = 3.5: the MLP keeps the model's width ratio
    assert shape.intermediate_size == 3.5 * shape.hidden_size
    assert shape.layers == 4 and shape.source == "test-70b-like"


def test_scaled_shape_without_spec_uses_documented_default():
    shape = common.scaled_shape(None, max_heads=64, layers=2, batch=1, seq_len=8)
    assert (shape.num_heads, shape.num_kv_heads, shape.head_dim) == (32, 8, 128)
    assert "default" in shape.source


def _naive_attention(x, attn):
    """Causal GQA attention written out in float64, independent of SDPA."""
    b, s, _ = x.shape
    h, hkv, d = attn.h, attn.hkv, attn.d
    q = (x @ attn.q.weight.T).view(b, s, h, d).transpose(1, 2)
    k = (x @ attn.k.weight.T).view(b, s, hkv, d).transpose(1, 2)
    v = (x @ attn.v.weight.T).view(b, s, hkv, d).transpose(1, 2)
    k = torch.stack([k[:, i // (h // hkv)] for i in range(h)], dim=1)
    v = torch.stack([v[:, i // (h // hkv)] for i in range(h)], dim=1)
    scores = q @ k.transpose(-1, -2) / math.sqrt(d)
    mask = torch.ones(s, s, dtype=torch.bool).triu(1)
    scores = scores.masked_fill(mask, float("-inf"))
    out = torch.softmax(scores, -1) @ v
    return out.transpose(1, 2).reshape(b, s, h * d) @ attn.o.weight.T


def test_block_attention_matches_naive_reference():
    from hwadvisor.trials.kit import blocks

    shape = common.scaled_shape(None, max_heads=8, layers=1, batch=2, seq_len=16, quick_head_dim=8)
    block = blocks.build_block(shape, "cpu", torch.float64, seed=5)
    x = blocks.random_hidden(shape, "cpu", torch.float64, seed=6)
    got = block.attn(x)
    want = _naive_attention(x, block.attn)
    assert torch.allclose(got, want, rtol=1e-10, atol=1e-10)


def test_decode_step_matches_full_forward_last_token():
    """The KV-cache decode path (used by cuda-graphs) computes what the full forward does."""
    from hwadvisor.trials.kit import blocks

    shape = common.scaled_shape(None, max_heads=8, layers=1, batch=1, seq_len=12, quick_head_dim=8)
    block = blocks.build_block(shape, "cpu", torch.float64, seed=7)
    x = blocks.random_hidden(shape, "cpu", torch.float64, seed=8)
    full = block(x)
    h = block.norm1(x)
    attn = block.attn
    k_cache = attn._heads(attn.k(h), attn.hkv).clone()
    v_cache = attn._heads(attn.v(h), attn.hkv).clone()
    k_cache[:, :, -1].normal_()  # the slot decode must overwrite
    v_cache[:, :, -1].normal_()
    pos = torch.tensor([shape.seq_len - 1])
    step = block.decode(x[:, -1:], k_cache, v_cache, pos)
    assert torch.allclose(step[:, 0], full[:, -1], rtol=1e-10, atol=1e-10)


def test_weights_are_random_not_zero():
    from hwadvisor.trials.kit import blocks

    shape = common.scaled_shape(None, max_heads=4, layers=2, batch=1, seq_len=4, quick_head_dim=8)
    stack = blocks.build_stack(shape, "cpu", torch.float32, seed=1)
    for name, p in stack.named_parameters():
        assert p.std() > 0.01, name


# -- activation checkpointing ------------------------------------------------------------------

def test_activation_checkpointing_cpu_saves_memory_and_gradients_match():
    r = checkpointing.ActivationCheckpointingTrial().run(QUICK)
    assert r.status == "ok", r.reason
    assert r.max_error is not None and r.max_error <= 1e-4
    assert 0 < r.effect["memory_factor"] < 1
    assert r.effect["memory_factor_at_model_layers"] < r.effect["memory_factor"]
    assert r.effect["activation_bytes_with"] < r.effect["activation_bytes_without"]
    assert math.isclose(r.effect["speedup"] * r.effect["time_factor"], 1.0, rel_tol=1e-9)
    timed = [m for m in r.measurements if m.unit == "s"]
    assert len(timed) == 2 and all(len(m.samples) >= 3 for m in timed)


def test_saved_bytes_grow_with_layers_and_count_each_storage_once():
    from hwadvisor.trials.kit import blocks

    counts = {}
    for layers in (1, 3):
        shape = common.scaled_shape(None, max_heads=4, layers=layers, batch=1, seq_len=16,
                                    quick_head_dim=8)
        stack = blocks.build_stack(shape, "cpu", torch.float32, seed=1)
        x = blocks.random_hidden(shape, "cpu", torch.float32, seed=2).requires_grad_(True)
        probe = torch.randn(1, 16, shape.hidden_size)
        counts[layers] = checkpointing._saved_bytes(stack, x, probe)
    # identical blocks save identical bytes; the loss head's few tensors are shared
    per_block = counts[3] - counts[1]
    assert per_block > 0
    assert abs(counts[3] - 3 * per_block / 2) <= counts[1]
    # each block keeps at least its input and the MLP's wide activations
    itemsize = 4
    assert per_block / 2 >= (16 * shape.hidden_size + 3 * 16 * shape.intermediate_size) * itemsize


# -- attention backends ------------------------------------------------------------------------

def test_attention_backends_cpu_math_and_flash():
    r = attention.AttentionBackendsTrial().run(QUICK)
    assert r.status == "ok", r.reason
    by = {m.label: m for m in r.measurements}
    assert set(by) == {"flash_attention", "cudnn_attention", "efficient_attention", "math"}
    for name in ("flash_attention", "math"):
        assert by[name].params["status"] == "ok"
        assert by[name].error is not None and by[name].error < 1e-5
        assert len(by[name].samples) >= 3
    # the CUDA-only kernels refuse on a CPU, each with its own reason, without stopping the rest
    for name in ("cudnn_attention", "efficient_attention"):
        assert by[name].params["status"] == "unsupported"
        assert by[name].params["reason"]
        assert not by[name].samples
    assert r.effect["speedup"] > 0
    best = by["math"].params["best_backend"]
    assert best in ("flash_attention", "math") and best in (r.summary or "")


def test_attention_wrong_backend_fails_the_trial():
    shape = common.scaled_shape(None, max_heads=4, layers=1, batch=1, seq_len=8)
    good = Measurement(label="math", samples=[2.0, 2.0, 2.0], error=1e-7, params={"status": "ok"})
    bad = Measurement(label="flash_attention", samples=[1.0] * 3, error=0.5,
                      params={"status": "wrong"})
    r = attention._result(QUICK, "cpu", shape, "fp32", 1e-4, {"FLASH_ATTENTION": bad,
                                                               "MATH": good}, 0.0)
    assert r.status == "error" and "flash_attention" in (r.reason or "")
    assert r.measurements[0].params["best_backend"] == "math"  # a wrong kernel is never best


# -- FP8 KV cache ------------------------------------------------------------------------------

def test_kv_cache_quantization_cpu():
    r = kv_quant.KvCacheQuantizationTrial().run(QUICK)
    assert r.status == "ok", r.reason
    # 1 byte per element plus one fp32 scale per head, against 2 bytes per element
    assert 0.5 <= r.effect["memory_factor"] < 0.51
    # e4m3 keeps 3 mantissa bits: elementwise errors of a few percent, never zero
    assert 0.005 < r.effect["k_rel_error"] < 0.06
    assert r.effect["bf16_output_rel_error"] < r.effect["output_rel_error"] < 0.3
    assert r.max_error == r.effect["output_rel_error"]


def test_fp8_quantize_roundtrip_and_scales():
    x = torch.randn(2, 3, 64, 16) * torch.tensor([1.0, 100.0, 0.01]).view(1, 3, 1, 1)
    q, scale = kv_quant.quantize_fp8(x, per_head=True)
    assert q.dtype == torch.float8_e4m3fn and scale.shape == (2, 3, 1, 1)
    back = kv_quant.dequantize_fp8(q, scale)
    rel = (back - x).norm() / x.norm()
    assert 0 < rel < 0.06
    # the largest magnitude of each head maps to e4m3's maximum, 448
    assert torch.allclose(q.float().abs().amax(dim=(2, 3)), torch.full((2, 3), 448.0))


# -- torch.compile -----------------------------------------------------------------------------

def test_torch_compile_harness_with_eager_backend():
    """The harness (compile timing kept apart, correctness, speedup) with dynamo's eager
    backend: it traces the block but generates no code, so this is fast on a 2-core CI machine.
    It does not measure inductor; test_torch_compile_inductor_cpu (slow) does."""
    ctx = TrialContext(quick=True, budget_s=1.0, compile_backend="eager")
    r = compile.TorchCompileTrial().run(ctx)
    assert r.status == "ok", r.reason
    assert r.max_error is not None and r.max_error <= 1e-6
    assert r.effect["compile_s"] > 0 and r.effect["speedup"] > 0
    timed = {m.label: m for m in r.measurements}
    assert timed["compiled block forward"].params["backend"] == "eager"
    # compilation is kept out of the timed samples: the first call is its own measurement
    assert len(timed["first compiled call (compilation)"].samples) == 1


@pytest.mark.slow
def test_torch_compile_inductor_cpu():
    r = compile.TorchCompileTrial().run(TrialContext(quick=True, budget_s=1.0))
    assert r.status == "ok", r.reason
    assert r.max_error is not None and r.max_error <= 1e-4
    assert r.effect["compile_s"] > 0 and r.effect["speedup"] > 0


def test_compile_mode_follows_budget():
    assert compile.compile_mode(TrialContext(budget_s=5), "cuda:0") == "default"
    assert compile.compile_mode(TrialContext(budget_s=600), "cuda:0") == \
        "max-autotune-no-cudagraphs"
    assert compile.compile_mode(TrialContext(budget_s=600), "cpu") == "default"


# -- unsupported paths -------------------------------------------------------------------------

@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA path")
def test_cuda_graphs_unsupported_without_cuda():
    r = cuda_graphs.CudaGraphsTrial().run(QUICK)
    assert r.status == "unsupported"
    assert "CUDA" in (r.reason or "")
    assert not r.measurements


@pytest.mark.parametrize("trial_id", sorted(MODEL_TRIALS))
def test_without_torch_every_trial_is_unsupported(trial_id, monkeypatch):
    from hwadvisor.trials import base

    monkeypatch.setattr(base, "torch_missing", lambda: TORCH_MISSING)
    module = __import__(MODEL_TRIALS[trial_id].__module__, fromlist=["x"])
    if hasattr(module, "torch_missing"):
        monkeypatch.setattr(module, "torch_missing", lambda: TORCH_MISSING)
    r = MODEL_TRIALS[trial_id]().run(QUICK)
    assert r.status == "unsupported" and r.reason == TORCH_MISSING


@pytest.mark.parametrize("trial_id", sorted(MODEL_TRIALS) + ["collectives"])
def test_registered(trial_id):
    trial = get_trial(trial_id)
    assert trial.id == trial_id and trial.title and trial.needs


def test_gradient_comparison_catches_a_difference_and_nan():
    a = [torch.randn(10, 10), torch.randn(5)]
    assert checkpointing.grads_rel_error(a, a) == 0.0
    b = [a[0].clone(), a[1] * 1.1]
    err = checkpointing.grads_rel_error(b, a)
    assert err == pytest.approx(0.1 * a[1].norm().item() / math.sqrt(
        a[0].norm().item() ** 2 + a[1].norm().item() ** 2), rel=1e-6)
    c = [a[0].clone(), a[1].clone()]
    c[0][3, 3] = float("nan")
    assert checkpointing.grads_rel_error(c, a) == math.inf
