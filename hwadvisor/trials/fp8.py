"""`fp8-gemm`: FP8 (e4m3) torch._scaled_mm against bf16 torch.mm at the workload's linear shapes.

Two FP8 variants: per-tensor scales (0-dim float32) and row-wise scales ((M,1) and (1,N),
bf16 output; not every torch/GPU pair has it: it is then skipped with the reason). Each at
prefill M (batch x prompt_len, capped) and decode M (batch padded to 16). Correctness: the fp8
product against the float32 product of the unquantized inputs (expect ~1e-2..5e-2).
effect: prefill_speedup, decode_speedup (geometric means over shapes, per-tensor scales),
their _rowwise twins, and speedup = decode_speedup.
"""

from __future__ import annotations

from typing import Any

from hwadvisor.models import Measurement, TrialResult
from hwadvisor.trials.base import TrialContext, cuda_reason, release_memory, torch_device
from hwadvisor.trials.fp8_ops import FP8_MIN_CC, quantize_fp8, scaled_mm
from hwadvisor.trials.shapes import LinearShape, decode_tokens, linear_shapes, prefill_tokens
from hwadvisor.trials.timing import (
    bench,
    check_close,
    effects,
    geomean,
    guarded,
    poison,
    rel_error,
    rotation_sets,
    speedup,
    variants_result,
)

FP8_TOLERANCE = 0.1  # against the unquantized float32 product; e4m3 lands at ~2e-2..5e-2
BF16_TOLERANCE = 2e-2
CHECK_ROWS = 512


def _bench_shape(device: str, phase: str, m: int, shape: LinearShape, variant: str,
                 repeats: int, budget_s: float, max_sets: int = 16) -> Measurement:
    """Time one variant (bf16, fp8, fp8-rowwise) of one shape after checking its output."""
    import torch

    elem = 2 if variant == "bf16" else 1
    sets = rotation_sets((m * shape.k + shape.n * shape.k) * elem, max_sets=max_sets)
    gen = torch.Generator(device=device).manual_seed(hash((phase, shape.name)) & 0xFFFF)
    xs = [torch.randn(m, shape.k, device=device, generator=gen) for _ in range(sets)]
    ws = [torch.randn(shape.n, shape.k, device=device, generator=gen) / shape.k**0.5
          for _ in range(sets)]
    rows = min(m, CHECK_ROWS)
    ref = xs[0][:rows].double() @ ws[0].double().t()
    label = f"{phase} {shape.name} {variant} M={m} N={shape.n} K={shape.k}"
    params: dict[str, float | int | str] = {"phase": phase, "shape": shape.name, "variant": variant,
                                            "m": m, "n": shape.n, "k": shape.k, "input_sets": sets}
    if variant == "bf16":
        xb = [x.to(torch.bfloat16) for x in xs]
        wb = [w.to(torch.bfloat16) for w in ws]
        del xs, ws
        out = poison(torch.empty(m, shape.n, device=device, dtype=torch.bfloat16))
        torch.mm(xb[0], wb[0].t(), out=out)
        err = check_close(label, rel_error(out[:rows], ref), BF16_TOLERANCE)

        def call(i: int) -> Any:
            return torch.mm(xb[i % sets], wb[i % sets].t(), out=out)
    else:
        rowwise = variant == "fp8-rowwise"
        qx = [quantize_fp8(x, rowwise=rowwise) for x in xs]
        qw = [quantize_fp8(w, rowwise=rowwise) for w in ws]
        del xs, ws
        fast = True
        try:
            out = scaled_mm(qx[0][0], qw[0][0], qx[0][1], qw[0][1], rowwise=rowwise)
        except RuntimeError:
            # some torch/GPU pairs refuse fast accumulation with row-wise scales: retry without
            fast = False
            out = scaled_mm(qx[0][0], qw[0][0], qx[0][1], qw[0][1], rowwise=rowwise,
                            fast_accum=False)
        params["fast_accum"] = int(fast)
        err = check_close(label, rel_error(out[:rows], ref), FP8_TOLERANCE)

        def call(i: int) -> Any:
            (x, sx), (w, sw) = qx[i % sets], qw[i % sets]
            return scaled_mm(x, w, sx, sw, rowwise=rowwise, fast_accum=fast)

    measurement = bench(call, device=device, label=label, repeats=repeats, budget_s=budget_s,
                        params=params)
    measurement.error = err
    flops = 2.0 * m * shape.n * shape.k
    measurement.value = flops / measurement.median / 1e12 if measurement.median else None
    measurement.value_unit = "TFLOP/s"
    return measurement


class Fp8GemmTrial:
    """FP8 GEMM speedup over bf16 at the workload's prefill and decode shapes."""

    id = "fp8-gemm"
    title = "FP8 GEMM vs bf16 (workload shapes)"
    needs = "CUDA GPU with FP8 tensor cores (cc >= 8.9) and torch._scaled_mm"

    def unsupported_reason(self, ctx: TrialContext) -> str | None:
        """Needs torch, CUDA, cc >= 8.9 and torch._scaled_mm with float8_e4m3fn."""
        reason = cuda_reason(FP8_MIN_CC, "FP8 GEMM")
        if reason:
            return reason
        import torch

        if not hasattr(torch, "_scaled_mm") or not hasattr(torch, "float8_e4m3fn"):
            return f"torch {torch.__version__} has no torch._scaled_mm / float8_e4m3fn"
        return None

    def run(self, ctx: TrialContext) -> TrialResult:
        """Check and time bf16, fp8 per-tensor and fp8 row-wise per shape and phase."""
        device = torch_device(ctx)
        shapes = linear_shapes(ctx.workload)
        phases = {"prefill": prefill_tokens(ctx.workload, ctx.quick),
                  "decode": decode_tokens(ctx.workload)[1]}
        variants = ["bf16", "fp8", "fp8-rowwise"]
        repeats = 8 if ctx.quick else 20
        # The CPU path exists for tests (torch's CPU _scaled_mm is slow): few input sets there.
        max_sets = 16 if device.startswith("cuda") or not ctx.quick else 2
        budget = max(0.05, ctx.budget_s / (len(shapes) * len(phases) * len(variants)))
        measurements: list[Measurement] = []
        ratios: dict[str, list[float]] = {}
        rowwise_failed: str | None = None
        for phase, m in phases.items():
            for shape in shapes:
                timed: dict[str, Measurement] = {}
                for variant in variants:
                    if variant == "fp8-rowwise" and rowwise_failed:
                        measurements.append(Measurement(label=f"{phase} {shape.name} {variant}",
                                                        skipped=rowwise_failed))
                        continue
                    try:
                        result = guarded(f"{phase} {shape.name} {variant}", lambda v=variant:  # type: ignore[misc]
                                         _bench_shape(device, phase, m, shape, v, repeats, budget,  # noqa: B023
                                                      max_sets))
                    finally:
                        release_memory()
                    if variant == "fp8-rowwise" and result.skipped:
                        rowwise_failed = f"row-wise scales not supported here: {result.skipped}"
                        result.skipped = rowwise_failed
                    measurements.append(result)
                    if not result.skipped:
                        timed[variant] = result
                base = timed.get("bf16")
                for variant in ("fp8", "fp8-rowwise"):
                    if base is not None and variant in timed:
                        ratio = speedup(base, timed[variant])
                        if ratio is not None:
                            ratios.setdefault(f"{phase}/{variant}", []).append(ratio)
        prefill = geomean(ratios.get("prefill/fp8", []))
        decode = geomean(ratios.get("decode/fp8", []))
        found = effects(
            prefill_speedup=prefill,
            decode_speedup=decode,
            speedup=decode,
            prefill_speedup_rowwise=geomean(ratios.get("prefill/fp8-rowwise", [])),
            decode_speedup_rowwise=geomean(ratios.get("decode/fp8-rowwise", [])),
        )
        summary = ", ".join(f"{k} {v:.2f}x" for k, v in found.items() if k != "speedup")
        return variants_result(
            self.id, measurements,
            ok=prefill is not None or decode is not None,
            effect=found,
            summary=(f"fp8 vs bf16 at M={phases['prefill']} (prefill) and M={phases['decode']} "
                     f"(decode), shapes {', '.join(f'{s.name} {s.n}x{s.k}' for s in shapes)}: "
                     f"{summary or 'no speedup measured'}"),
        )
