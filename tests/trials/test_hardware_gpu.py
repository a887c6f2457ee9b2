"""The hardware trials on a real CUDA GPU: correctness and sane figures (skipped without one).

Sanity bounds are wide on purpose: they catch a broken method (a cache-resident buffer reading
10x the datasheet, a unit slip of 1000x, a kernel that silently fell back), not a slow card.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from hwadvisor.models import Workload  # noqa: E402
from hwadvisor.trials.base import TrialContext  # noqa: E402
from hwadvisor.trials.registry import get_trial  # noqa: E402
from hwadvisor.validator.runner import run_trials  # noqa: E402

requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
pytestmark = [pytest.mark.gpu, requires_cuda]

# NVIDIA H200 SXM product brief: 4.8 TB/s HBM3e; dense BF16 989 TFLOP/s, FP8 1979 TFLOP/s.
H200_BANDWIDTH_GBPS = 4800.0
H200_BF16_TFLOPS = 989.0
H200_FP8_TFLOPS = 1979.0


def _is_h200() -> bool:
    return "H200" in torch.cuda.get_device_name(0)


def _cc() -> tuple[int, int]:
    return tuple(torch.cuda.get_device_capability(0))  # type: ignore[return-value]


def test_memory_bandwidth_gpu():
    result = get_trial("memory-bandwidth").run(TrialContext(quick=False))
    assert result.status == "ok", result.reason
    copy = result.effect["copy_gbps"]
    triad = result.effect["triad_gbps"]
    assert result.max_error is not None and result.max_error < 1e-6
    assert 100 < copy < 20000 and 100 < triad < 20000
    if _is_h200():
        # 50-100% of the datasheet: above 100% means the cache was measured
        assert 0.5 * H200_BANDWIDTH_GBPS < copy <= H200_BANDWIDTH_GBPS
        assert 0.5 * H200_BANDWIDTH_GBPS < triad <= H200_BANDWIDTH_GBPS


def test_matmul_peak_gpu():
    result = get_trial("matmul-peak").run(TrialContext(quick=False))
    assert result.status == "ok", result.reason
    labels = {m.label: m for m in result.measurements}
    for fmt in ("bf16", "fp16", "tf32"):
        assert not labels[fmt].skipped, labels[fmt].skipped
        assert labels[fmt].error is not None and labels[fmt].error < 2e-2
    assert 3e-5 < labels["tf32"].error < 5e-3  # tf32 really engaged (not full fp32)
    if _cc() >= (8, 9):
        assert not labels["fp8"].skipped, labels["fp8"].skipped
        assert labels["fp8"].error < 0.1
    # sustained (a back-to-back stream) never beats burst by much, and is not a collapse
    for fmt in ("bf16", "fp16", "tf32"):
        burst, stream = result.effect[f"{fmt}_tflops"], result.effect[f"{fmt}_sustained_tflops"]
        assert 0.5 * burst < stream < 1.05 * burst
    if _is_h200():
        bf16 = result.effect["bf16_tflops"]
        assert 0.4 * H200_BF16_TFLOPS < bf16 <= H200_BF16_TFLOPS
        assert result.effect["fp8_tflops"] <= H200_FP8_TFLOPS
        assert result.effect["fp8_tflops"] > bf16


def test_tf32_switch_restored():
    before = torch.backends.cuda.matmul.allow_tf32
    get_trial("matmul-peak").run(TrialContext(quick=True))
    assert torch.backends.cuda.matmul.allow_tf32 == before


@pytest.mark.skipif(torch.cuda.is_available()
                    and tuple(torch.cuda.get_device_capability(0)) < (8, 9),
                    reason="needs FP8 tensor cores")
def test_fp8_gemm_gpu():
    ctx = TrialContext(workload=Workload(model="llama-3-8b", batch=4, prompt_len=2048),
                       quick=False)
    result = get_trial("fp8-gemm").run(ctx)
    assert result.status == "ok", result.reason
    fp8 = [m for m in result.measurements if m.params.get("variant") == "fp8"]
    assert len(fp8) == 6 and all(m.error is not None and 1e-3 < m.error < 0.1 for m in fp8)
    assert result.effect["speedup"] == result.effect["decode_speedup"]
    # fp8 halves the bytes and doubles the rate: at prefill it must beat bf16 on Hopper
    if _is_h200():
        assert result.effect["prefill_speedup"] > 1.1
    rowwise = [m for m in result.measurements if m.params.get("variant") == "fp8-rowwise"]
    for m in rowwise:
        assert m.skipped or m.error < 0.1


def test_int4_weight_only_gpu():
    ctx = TrialContext(workload=Workload(model="llama-3-8b", batch=1), quick=False)
    trial = get_trial("int4-weight-only")
    reason = trial.unsupported_reason(ctx)
    if reason:
        pytest.skip(reason)
    result = trial.run(ctx)
    if result.status == "unsupported":
        pytest.skip(result.reason)
    assert result.status == "ok", result.reason
    for batch in (1, 4, 16, 64):
        assert f"speedup_b{batch}" in result.effect
        assert result.effect_of(f"speedup_b{batch}").ci is not None
    assert result.kernel == "torch _weight_int4pack_mm"
    assert result.max_error is not None and result.max_error < 2e-2
    # weight-only int4 reads a quarter of the bytes: at batch 1 it should not lose to bf16
    assert result.effect["speedup_b1"] > 0.8


def test_host_transfer_gpu():
    result = get_trial("host-transfer").run(TrialContext(quick=True))
    assert result.status == "ok", result.reason
    assert 0.5 < result.effect["pageable_gbps"] < 200
    assert 0.5 < result.effect["pinned_gbps"] < 200
    assert result.effect["speedup"] == pytest.approx(
        result.effect["pinned_gbps"] / result.effect["pageable_gbps"], rel=1e-6)


def test_runner_records_environment_on_gpu():
    results, interrupted = run_trials(["memory-bandwidth"], TrialContext(quick=True), None)
    assert not interrupted and results[0].status == "ok"
    env = results[0].environment
    assert env.device == torch.cuda.get_device_name(0)
    assert env.torch_version == torch.__version__
