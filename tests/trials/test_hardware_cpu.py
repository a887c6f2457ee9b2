"""CPU tests of the measuring method and the hardware trials: they run for real, in quick mode."""

from __future__ import annotations

import importlib.util
import math

import pytest

from hwadvisor.models import Measurement, ModelSpec, Workload
from hwadvisor.trials import base as trial_base
from hwadvisor.trials.base import NO_CUDA, TORCH_MISSING, TrialContext
from hwadvisor.trials.registry import TRIALS, get_trial

torch = pytest.importorskip("torch")

from hwadvisor.trials.kit import int4_ops, timing  # noqa: E402
from hwadvisor.trials.kit.fp8_ops import quantize_fp8, scaled_mm  # noqa: E402
from hwadvisor.trials.kit.shapes import decode_tokens, linear_shapes, prefill_tokens  # noqa: E402

HAS_CUDA = torch.cuda.is_available()


@pytest.fixture(autouse=True, scope="module")
def _two_threads():
    """CI has 2 cores: more intra-op threads than cores only spin."""
    before = torch.get_num_threads()
    torch.set_num_threads(min(2, before))
    yield
    torch.set_num_threads(before)


def tiny_workload(batch: int = 2, hidden: int = 256, prompt_len: int = 64) -> Workload:
    spec = ModelSpec(name="tiny", model_type="llama", hidden_size=hidden, num_layers=2,
                     num_heads=hidden // 64, num_kv_heads=max(1, hidden // 128), head_dim=64,
                     intermediate_size=2 * hidden, vocab_size=1000)
    return Workload(model="tiny", batch=batch, prompt_len=prompt_len, spec=spec)


# --- Measurement statistics -------------------------------------------------------------


def test_measurement_stats_on_crafted_samples():
    m = Measurement(label="x", samples=[1.0, 2.0, 3.0, 4.0, 5.0])
    assert m.median == 3.0
    assert m.spread == pytest.approx(2.0)  # IQR: 4 - 2
    assert m.noisy is True  # 2.0 > 10% of 3.0


def test_measurement_quiet_when_spread_small():
    m = Measurement(label="x", samples=[1.00, 1.01, 0.99, 1.00, 1.02])
    assert m.median == pytest.approx(1.0)
    assert m.spread is not None and m.spread < 0.1
    assert m.noisy is False


def test_measurement_empty_and_single():
    assert Measurement(label="x").median is None
    assert Measurement(label="x").noisy is False
    single = Measurement(label="x", samples=[2.0])
    assert single.median == 2.0 and single.spread == 0.0 and single.noisy is False


def test_measurement_json_keeps_samples_and_derived():
    m = Measurement(label="x", samples=[1.0, 3.0])
    data = m.model_dump()
    assert data["samples"] == [1.0, 3.0]
    assert data["median"] == 2.0 and "spread" in data and "noisy" in data


# --- timing helpers ----------------------------------------------------------------------


def test_rel_error_values_and_nan():
    ref = torch.tensor([3.0, 4.0])
    assert timing.rel_error(ref.clone(), ref) == 0.0
    assert timing.rel_error(torch.tensor([3.0, 4.5]), ref) == pytest.approx(0.5 / 5.0)
    assert timing.rel_error(torch.tensor([float("nan"), 4.0]), ref) == math.inf
    assert timing.rel_error(torch.ones(3), ref) == math.inf  # shape mismatch


def test_poison_marks_every_element():
    f = timing.poison(torch.zeros(8))
    assert torch.isnan(f).all()
    i = timing.poison(torch.zeros(4, dtype=torch.int32))
    assert (i == torch.iinfo(torch.int32).max).all()


def test_check_close_raises_on_nan_and_excess():
    assert timing.check_close("ok", 1e-4, 1e-3) == 1e-4
    with pytest.raises(timing.CorrectnessError):
        timing.check_close("nan", math.nan, 1.0)
    with pytest.raises(timing.CorrectnessError):
        timing.check_close("big", 0.5, 0.1)


def test_rotation_sets_exceed_cache():
    sets = timing.rotation_sets(10 * 1024 * 1024)
    assert sets * 10 * 1024 * 1024 >= timing.ROTATION_FACTOR * timing.DEFAULT_CACHE_BYTES
    assert timing.rotation_sets(10**12) == 1
    assert timing.rotation_sets(1, max_sets=8) == 8


def test_bench_rotates_inputs_and_batches_short_calls():
    seen: list[int] = []

    def fn(i: int) -> None:
        seen.append(i)

    m = timing.bench(fn, device="cpu", label="noop", repeats=5, warmup=2, min_sample_s=1e-4)
    assert len(m.samples) == 5
    assert m.params["inner"] > 1  # a call of ~100 ns is batched
    assert seen == list(range(len(seen)))  # the counter advances on every call
    assert all(s > 0 for s in m.samples)


def test_bench_respects_budget():
    import time

    m = timing.bench(lambda _i: time.sleep(0.01), device="cpu", label="sleep", repeats=50,
                     warmup=1, budget_s=0.05)
    assert 3 <= len(m.samples) <= 6
    assert m.median == pytest.approx(0.01, rel=0.5)


def test_geomean_and_effects_drop_missing():
    assert timing.geomean([2.0, 8.0]) == pytest.approx(4.0)
    assert timing.geomean([]) is None
    assert timing.effects(a=1.0, b=None, c=math.nan) == {"a": 1.0}


def test_guarded_skips_only_the_variant():
    def boom() -> Measurement:
        raise RuntimeError("not supported here\nsecond line")

    m = timing.guarded("v", boom)
    assert m.skipped == "RuntimeError: not supported here"
    with pytest.raises(timing.CorrectnessError):
        timing.guarded("v", lambda: (_ for _ in ()).throw(timing.CorrectnessError("bad")))


# --- shapes --------------------------------------------------------------------------------


def test_linear_shapes_from_spec_and_padding():
    wl = tiny_workload(batch=3)
    shapes = {s.name: (s.n, s.k) for s in linear_shapes(wl)}
    assert shapes == {"qkv": ((4 + 2 * 2) * 64, 256), "gate_up": (512, 256), "down": (256, 512)}
    assert decode_tokens(wl) == (3, 16)
    assert prefill_tokens(wl, quick=False) == 3 * 64
    big = Workload(model="x", batch=64, prompt_len=4096)
    assert prefill_tokens(big, quick=True) == 1024


# --- the trials, for real ------------------------------------------------------------------


def test_registry_lists_the_hardware_trials():
    for trial_id in ("memory-bandwidth", "matmul-peak", "fp8-gemm", "int4-weight-only",
                     "host-transfer"):
        assert trial_id in TRIALS
        trial = get_trial(trial_id)
        assert trial.id == trial_id and trial.title and trial.needs


def test_memory_bandwidth_cpu_quick():
    ctx = TrialContext(quick=True, budget_s=1.0)
    result = get_trial("memory-bandwidth").run(ctx)
    assert result.status == "ok", result.reason
    copy, triad = result.measurements
    assert copy.label == "copy" and triad.label == "triad"
    assert copy.error == 0.0 and triad.error is not None and triad.error < 1e-6
    for m, factor in ((copy, 2), (triad, 3)):
        assert m.params["bytes_moved"] == factor * m.params["buffer_bytes"]
        assert m.value == pytest.approx(m.params["bytes_moved"] / m.median / 1e9)
        assert len(m.samples) >= 3
    assert result.effect["copy_gbps"] == copy.value > 0
    assert result.effect["triad_gbps"] == triad.value > 0
    if not HAS_CUDA:
        assert "host memory" in (result.summary or "")


def test_matmul_peak_cpu_quick():
    if HAS_CUDA:
        pytest.skip("measures the GPU here; see tests/trials/test_hardware_gpu.py")
    result = get_trial("matmul-peak").run(TrialContext(quick=True, budget_s=1.0))
    assert result.status == "ok", result.reason
    labels = {m.label: m for m in result.measurements}
    assert set(labels) == {"fp32", "bf16", "fp32 sustained", "bf16 sustained"}
    fp32 = labels["fp32"]
    assert fp32.error is not None and fp32.error < 1e-4
    n = fp32.params["m"]
    assert fp32.value == pytest.approx(2 * n**3 / fp32.median / 1e12)
    assert result.effect["fp32_tflops"] == fp32.value
    # burst (one product per timing) and sustained (a back-to-back stream) are both reported
    stream = labels["fp32 sustained"]
    assert stream.params["mode"] == "sustained" and fp32.params["mode"] == "burst"
    assert len(stream.samples) >= 6
    assert result.effect["fp32_sustained_tflops"] == stream.value
    if not labels["bf16"].skipped:
        assert labels["bf16"].error < 2e-2


def test_int4_quantize_round_trip_and_layout():
    w = torch.randn(256, 512)
    q, scales, zeros = int4_ops.quantize_int4(w)
    assert q.dtype == torch.int32 and int(q.min()) >= 0 and int(q.max()) <= 15
    assert scales.shape == (256, 512 // 128) and zeros.shape == scales.shape
    deq = int4_ops.dequantize_int4(q, scales, zeros)
    err = timing.rel_error(deq, w)
    # 4-bit, group 128: step = range/15, error ~ step/sqrt(12) ~ 0.1 of a Gaussian's RMS
    assert 0.02 < err < 0.15
    # each element is within half a step (plus bf16 rounding of scale/zero) of the original
    step = scales.float().repeat_interleave(128, dim=1)
    assert bool(((deq - w).abs() <= 0.5 * step + 0.02 * w.abs().max()).all())
    sz = int4_ops.scales_and_zeros(scales, zeros)
    assert sz.shape == (512 // 128, 256, 2) and sz.dtype == torch.bfloat16
    assert torch.equal(sz[:, :, 0].t(), scales) and torch.equal(sz[:, :, 1].t(), zeros)
    assert torch.equal(int4_ops.unpack_nibbles(int4_ops.pack_nibbles(q)), q)


@pytest.mark.skipif(not hasattr(torch.ops.aten, "_weight_int4pack_mm_for_cpu"),
                    reason="this torch has no CPU int4 kernel")
def test_int4_cpu_kernel_matches_dequantized_reference():
    w = torch.randn(256, 512) / 512**0.5
    q, scales, zeros = int4_ops.quantize_int4(w)
    packed = int4_ops.pack_weight(q, "cpu")
    sz = int4_ops.scales_and_zeros(scales, zeros)
    x = torch.randn(5, 512).to(torch.bfloat16)
    out = int4_ops.int4_mm(x, packed, sz, "cpu")
    ref = x.float() @ int4_ops.dequantize_int4(q, scales, zeros).t()
    assert out.shape == (5, 256)
    assert timing.rel_error(out, ref) < 1e-2
    # a wrong weight (one nibble flipped everywhere) must not pass
    wrong = int4_ops.pack_weight((q + 1).clamp(max=15), "cpu")
    assert timing.rel_error(int4_ops.int4_mm(x, wrong, sz, "cpu"), ref) > 1e-2


@pytest.mark.skipif(not hasattr(torch.ops.aten, "_weight_int4pack_mm_for_cpu"),
                    reason="this torch has no CPU int4 kernel")
def test_int4_trial_cpu_quick():
    if HAS_CUDA:
        pytest.skip("measures the GPU here; see tests/trials/test_hardware_gpu.py")
    ctx = TrialContext(workload=tiny_workload(batch=2), quick=True, budget_s=1.0)
    result = get_trial("int4-weight-only").run(ctx)
    assert result.status == "ok", result.reason
    for batch in (1, 2, 4, 16, 64):
        assert f"speedup_b{batch}" in result.effect
    assert result.effect["speedup"] == result.effect["speedup_b2"]
    assert result.max_error is not None and result.max_error < 2e-2
    int4 = [m for m in result.measurements if m.params.get("variant") == "int4"]
    assert len(int4) == 3 * 5 and all(m.error < 2e-2 for m in int4)


def test_fp8_quantize_and_scaled_mm_on_cpu():
    """torch._scaled_mm has a CPU path in recent torch: check the scaling convention for real."""
    x = torch.randn(32, 256)
    w = torch.randn(64, 256)
    ref = x @ w.t()
    for rowwise in (False, True):
        qx, sx = quantize_fp8(x, rowwise)
        qw, sw = quantize_fp8(w, rowwise)
        assert qx.dtype == torch.float8_e4m3fn
        assert sx.shape == ((32, 1) if rowwise else ())
        try:
            out = scaled_mm(qx, qw, sx, sw, rowwise=rowwise)
        except (RuntimeError, NotImplementedError) as exc:
            pytest.skip(f"no CPU _scaled_mm here: {exc}")
        err = timing.rel_error(out, ref)
        assert 1e-3 < err < 0.1  # e4m3 with proper scaling: a few percent


def test_fp8_trial_code_path_on_cpu():
    """The trial's unsupported without CUDA, but its code runs on the CPU _scaled_mm: check it."""
    ctx = TrialContext(workload=tiny_workload(batch=2, hidden=128, prompt_len=8), quick=True,
                       budget_s=0.5)
    trial = get_trial("fp8-gemm")
    if not HAS_CUDA:
        assert trial.unsupported_reason(ctx) == NO_CUDA
    try:
        scaled_mm(*quantize_fp8(torch.randn(16, 128), False)[:1],
                  quantize_fp8(torch.randn(16, 128), False)[0],
                  torch.tensor(1.0), torch.tensor(1.0), rowwise=False)
    except (RuntimeError, NotImplementedError) as exc:
        pytest.skip(f"no CPU _scaled_mm here: {exc}")
    if HAS_CUDA:
        pytest.skip("runs on the GPU here; see tests/trials/test_hardware_gpu.py")
    result = trial.run(ctx)
    assert result.status == "ok", result.reason
    for key in ("prefill_speedup", "decode_speedup", "speedup"):
        assert key in result.effect
    assert result.effect["speedup"] == result.effect["decode_speedup"]
    fp8 = [m for m in result.measurements if m.params.get("variant") == "fp8"]
    assert len(fp8) == 6 and all(1e-3 < m.error < 0.1 for m in fp8)
    decode = [m for m in fp8 if m.params["phase"] == "decode"]
    assert all(m.params["m"] == 16 for m in decode)


@pytest.mark.skipif(HAS_CUDA, reason="checks the no-CUDA path")
def test_cuda_only_trials_unsupported_without_cuda():
    ctx = TrialContext(quick=True)
    for trial_id in ("fp8-gemm", "host-transfer"):
        assert get_trial(trial_id).unsupported_reason(ctx) == NO_CUDA


def test_trials_unsupported_without_torch(monkeypatch):
    real = importlib.util.find_spec

    def no_torch(name, *args, **kwargs):
        return None if name == "torch" else real(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", no_torch)
    assert trial_base.torch_missing() == TORCH_MISSING
    ctx = TrialContext()
    for trial_id in ("memory-bandwidth", "matmul-peak", "fp8-gemm", "int4-weight-only",
                     "host-transfer"):
        assert get_trial(trial_id).unsupported_reason(ctx) == TORCH_MISSING
