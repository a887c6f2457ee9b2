"""`matmul-peak`: dense matrix-product throughput per format at a size that fills the chip.

GPU: bf16, fp16, tf32 (a float32 product with allow_tf32, restored after) and fp8
(torch._scaled_mm, float8_e4m3fn, per-tensor scales, cc >= 8.9; e4m3fnuz on MI300) at 8192^3
(2048^3 quick). Apple GPU (MPS): fp16, fp32 (and bf16 where Metal has it) at 4096^3.
CPU: fp32 and bf16 at 1024^3 (384^3 quick). TFLOP/s = 2*m*n*k / median seconds / 1e12.
Each format is guarded on its own: one that fails to run is reported as skipped, with the reason.

Two rates per format: burst (`<fmt>_tflops`, one product per timing as triton's do_bench, so
the chip cools between products) and sustained (`<fmt>_sustained_tflops`, a back-to-back
stream long enough to reach the power limit; on the H200 ~14% lower at 8192^3 bf16).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

from hwadvisor.models import Measurement, TrialResult
from hwadvisor.trials.base import (
    RequiresTrial,
    TrialContext,
    has_fp8,
    release_memory,
    torch_device,
)
from hwadvisor.trials.kit.fp8_ops import dequantized, fp8_dtype, quantize_fp8, scaled_mm
from hwadvisor.trials.kit.timing import (
    bench,
    check_close,
    effects,
    guarded,
    poison,
    ran,
    rate,
    rel_error,
    rotation_sets,
    sustained,
    variants_result,
)

GPU_SIZE = 8192
GPU_SIZE_QUICK = 2048
MPS_SIZE = 4096
MPS_SIZE_QUICK = 1024
SUSTAINED_S = 0.3  # per format: 200+ back-to-back 8192^3 bf16 products on an H200
SUSTAINED_S_QUICK = 0.05
CPU_SIZE = 1024
CPU_SIZE_QUICK = 384
CHECK_ROWS = 256  # rows of the product checked against a float64 reference
# Relative-error bounds (METHOD.md: bf16 operands 1e-3..1e-2, tf32 ~3e-4, float32 far under
# 1e-3; fp8 e4m3 with per-tensor scales ~2e-2..5e-2 against the unquantized float32 product).
TOLERANCE = {"fp32": 1e-4, "tf32": 5e-3, "bf16": 2e-2, "fp16": 1e-2, "fp8": 0.1}


def matmul_size(device: str, quick: bool) -> int:
    """Return the square size m = n = k for this device."""
    if device.startswith("cuda"):
        return GPU_SIZE_QUICK if quick else GPU_SIZE
    if device.startswith("mps"):
        return MPS_SIZE_QUICK if quick else MPS_SIZE
    return CPU_SIZE_QUICK if quick else CPU_SIZE


def _randn(shape: tuple[int, ...], device: str, dtype: Any, gen: Any) -> Any:
    """Random normal data on device (drawn on the CPU for MPS, whose generator varies)."""
    import torch

    if device.startswith("mps"):
        return torch.randn(*shape, generator=gen).to(device=device, dtype=dtype)
    return torch.randn(*shape, device=device, dtype=dtype, generator=gen)


def _generator(device: str, seed: int) -> Any:
    import torch

    where = "cpu" if device.startswith("mps") else device
    return torch.Generator(device=where).manual_seed(seed)


def _reference_rows(a: Any, b_nk: Any) -> Any:
    """float64 product of the first CHECK_ROWS rows of a with b_nk.T (on a's device)."""
    import torch

    rows = a[:CHECK_ROWS].to(torch.float64)
    return rows @ b_nk.to(torch.float64).t()


def _measure_dense(fmt: str, device: str, size: int, repeats: int, budget_s: float,
                   sustain_s: float) -> list[Measurement]:
    """Time torch.mm for bf16/fp16/fp32/tf32 (burst, then sustained) after a float64 row check."""
    import torch

    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(fmt, torch.float32)
    elem = torch.tensor([], dtype=dtype).element_size()
    sets = rotation_sets(2 * size * size * elem, max_sets=8)
    gen = _generator(device, 1)
    a_sets = [_randn((size, size), device, dtype, gen) for _ in range(sets)]
    # b stored as (N, K) row-major and used as b.t(): the layout of a linear layer's weight.
    b_sets = [_randn((size, size), device, dtype, gen) for _ in range(sets)]
    out = torch.empty(size, size, device=device, dtype=dtype)
    previous = _set_tf32(device, fmt == "tf32")
    try:
        poison(out)
        torch.mm(a_sets[0], b_sets[0].t(), out=out)
        err = rel_error(out[:CHECK_ROWS], _reference_rows(a_sets[0], b_sets[0]))
        check_close(f"{fmt} matmul", err, TOLERANCE[fmt])

        def call(i: int) -> None:
            torch.mm(a_sets[i % sets], b_sets[i % sets].t(), out=out)  # noqa: F821

        shape: dict[str, float | int | str] = {"m": size, "n": size, "k": size,
                                               "input_sets": sets, "format": fmt}
        m = bench(call, device=device, label=fmt, repeats=repeats, budget_s=budget_s,
                  params={**shape, "mode": "burst"})
        s = sustained(call, device=device, label=f"{fmt} sustained", per_call_s=m.median or 1e-3,
                      seconds=sustain_s, params=shape)
    finally:
        _restore_tf32(device, previous)
        del a_sets, b_sets, out
    m.error = s.error = err
    return [rate(x, 2.0 * size**3, "TFLOP/s", scale=1e12) for x in (m, s)]


def _set_tf32(device: str, on: bool) -> bool | None:
    """Set torch's CUDA tf32 switch for float32 products; return the previous value."""
    if not device.startswith("cuda"):
        return None
    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # allow_tf32 is deprecated in favour of fp32_precision
        previous = bool(torch.backends.cuda.matmul.allow_tf32)
        torch.backends.cuda.matmul.allow_tf32 = on
    return previous


def _restore_tf32(device: str, previous: bool | None) -> None:
    if previous is None:
        return
    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.backends.cuda.matmul.allow_tf32 = previous


def _measure_fp8(device: str, size: int, repeats: int, budget_s: float,
                 sustain_s: float) -> list[Measurement]:
    """Time torch._scaled_mm (e4m3, per-tensor scales, fast accumulation, bf16 out)."""
    import torch

    sets = rotation_sets(2 * size * size, max_sets=8)
    gen = torch.Generator(device=device).manual_seed(2)
    a_src = [torch.randn(size, size, device=device, generator=gen) for _ in range(sets)]
    w_src = [torch.randn(size, size, device=device, generator=gen) for _ in range(sets)]
    dtype = fp8_dtype(device)
    qa = [quantize_fp8(a, rowwise=False, dtype=dtype) for a in a_src]
    qw = [quantize_fp8(w, rowwise=False, dtype=dtype) for w in w_src]
    ref = a_src[0][:CHECK_ROWS].double() @ w_src[0].double().t()
    del a_src, w_src
    out = scaled_mm(qa[0][0], qw[0][0], qa[0][1], qw[0][1], rowwise=False)
    err = rel_error(out[:CHECK_ROWS], ref)
    check_close("fp8 matmul (vs unquantized float64)", err, TOLERANCE["fp8"])
    kernel_err = rel_error(out[:CHECK_ROWS], dequantized(qa[0][0][:CHECK_ROWS], qa[0][1]).double()
                           @ dequantized(qw[0][0], qw[0][1]).double().t())
    check_close("fp8 matmul (vs dequantized operands)", kernel_err, 2e-2)

    def call(i: int) -> None:
        (a, sa), (w, sw) = qa[i % sets], qw[i % sets]  # noqa: F821
        scaled_mm(a, w, sa, sw, rowwise=False)

    shape: dict[str, float | int | str] = {
        "m": size, "n": size, "k": size, "input_sets": sets, "format": "fp8",
        "kernel": f"torch._scaled_mm {str(dtype).removeprefix('torch.')} per-tensor, "
                  "use_fast_accum"}
    m = bench(call, device=device, label="fp8", repeats=repeats, budget_s=budget_s,
              params={**shape, "mode": "burst"})
    s = sustained(call, device=device, label="fp8 sustained", per_call_s=m.median or 1e-3,
                  seconds=sustain_s, params=shape)
    m.error = s.error = err
    del qa, qw, out, ref
    return [rate(x, 2.0 * size**3, "TFLOP/s", scale=1e12) for x in (m, s)]


def _guarded_pair(fmt: str, job: Callable[[], list[Measurement]]) -> list[Measurement]:
    """Run one format's burst and sustained timings; a failure skips only this format."""
    found: list[list[Measurement]] = []

    def first() -> Measurement:
        pair = job()
        found.append(pair)
        return pair[0]

    burst = guarded(fmt, first)
    return found[0] if found else [burst]


class MatmulPeakTrial(RequiresTrial):
    """Dense matmul TFLOP/s per format (the measured compute ceiling)."""

    id = "matmul-peak"
    title = "Matmul peak (TFLOP/s per format)"
    needs = "torch; a GPU for bf16/fp16/tf32/fp8 (fp8: cc >= 8.9), else CPU fp32/bf16"

    def run(self, ctx: TrialContext) -> TrialResult:
        """Measure each format on its own; report the ones that could not run as skipped."""
        device = torch_device(ctx, mps=True)
        size = matmul_size(device, ctx.quick)
        repeats = 6 if ctx.quick else 20
        if device.startswith("cuda"):
            formats = ["bf16", "fp16", "tf32", "fp8"]
        elif device.startswith("mps"):
            formats = ["fp16", "fp32", "bf16"]
        else:
            formats = ["fp32", "bf16"]
        budget = ctx.budget_s / len(formats) / 2
        sustain_s = SUSTAINED_S_QUICK if ctx.quick or device.startswith("cpu") else SUSTAINED_S
        measurements: list[Measurement] = []
        for fmt in formats:
            job: Callable[[], list[Measurement]]
            if fmt == "fp8":
                if not has_fp8(device):
                    measurements.append(Measurement(
                        label="fp8", skipped="needs FP8 tensor cores (NVIDIA compute capability "
                        ">= 8.9, AMD MI300 or newer)"))
                    continue
                job = lambda: _measure_fp8(device, size, repeats, budget, sustain_s)  # noqa: E731
            else:
                job = lambda fmt=fmt: _measure_dense(fmt, device, size, repeats, budget,  # type: ignore[misc]  # noqa: E731
                                                     sustain_s)
            try:
                measurements.extend(_guarded_pair(fmt, job))
            finally:
                release_memory()
        done = ran(measurements)
        tflops = {f"{m.label.replace(' ', '_')}_tflops": m.value for m in done}
        summary = ", ".join(f"{m.label} {m.value:.1f}" for m in done if m.value is not None)
        return variants_result(
            self.id, measurements,
            ok=bool(done),
            effect=effects(**tflops),
            summary=f"{device} {size}^3 TFLOP/s: {summary or 'none measured'}",
        )
