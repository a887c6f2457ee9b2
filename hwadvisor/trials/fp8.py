"""`fp8-gemm`: FP8 (e4m3) torch._scaled_mm against bf16 torch.mm at the workload's linear shapes.

Two FP8 variants: per-tensor scales (0-dim float32) and row-wise scales ((M,1) and (1,N),
bf16 output; not every torch/GPU pair has it: it is then skipped with the reason). Each at
prefill M (batch x prompt_len, capped) and decode M (batch padded to 16). Correctness: the fp8
product against the float32 product of the unquantized inputs (expect ~1e-2..5e-2).
bf16 and the two FP8 variants are timed interleaved, one shape and phase at a time
(timing.interleaved), until each ratio's 95% interval is within ±5% or the budget is spent;
on CUDA each variant is timed as a replayed graph of 16 calls (timing.graphed): eagerly, the
decode-sized GEMMs measured the host's launch rate, which moved from run to run.
effect: prefill_speedup, decode_speedup (geometric means over shapes, per-tensor scales, with
combined intervals), their _rowwise twins, and speedup = decode_speedup.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hwadvisor.models import Measurement, TrialResult
from hwadvisor.models.stats import LogEstimate
from hwadvisor.trials.base import (
    Requires,
    RequiresTrial,
    TrialContext,
    has_fp8,
    release_memory,
    torch_device,
)
from hwadvisor.trials.kit.fp8_ops import FP8_MIN_CC, fp8_dtype, quantize_fp8, scaled_mm
from hwadvisor.trials.kit.shapes import LinearShape, decode_tokens, linear_shapes, prefill_tokens
from hwadvisor.trials.kit.timing import (
    Variant,
    check_close,
    combined,
    effects,
    graphed,
    interleaved,
    poison,
    rel_error,
    rotation_sets,
    variants_result,
    with_interval,
)

KERNEL = "torch._scaled_mm (cuBLASLt / hipBLASLt FP8 GEMM)"

FP8_TOLERANCE = 0.1  # against the unquantized float32 product; e4m3 lands at ~2e-2..5e-2
BF16_TOLERANCE = 2e-2
CHECK_ROWS = 512


Params = dict[str, float | int | str]


def _prepare(device: str, phase: str, m: int, shape: LinearShape, variant: str,
             max_sets: int = 16) -> tuple[Callable[[int], Any], float, Params]:
    """Build one variant (bf16, fp8, fp8-rowwise) of one shape and check its output.

    Returns (call, relative error, params); a CorrectnessError voids the trial.
    """
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
    call: Callable[[int], Any]
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
        dtype = fp8_dtype(device)
        qx = [quantize_fp8(x, rowwise=rowwise, dtype=dtype) for x in xs]
        qw = [quantize_fp8(w, rowwise=rowwise, dtype=dtype) for w in ws]
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
        params["kernel"] = KERNEL
        err = check_close(label, rel_error(out[:rows], ref), FP8_TOLERANCE)

        def call(i: int) -> Any:
            (x, sx), (w, sw) = qx[i % sets], qw[i % sets]
            return scaled_mm(x, w, sx, sw, rowwise=rowwise, fast_accum=fast)

    params["label"] = label
    return call, err, params


def _bench_shape(device: str, phase: str, m: int, shape: LinearShape, budget_s: float,
                 max_sets: int, rowwise_failed: str | None
                 ) -> tuple[list[Measurement], dict[str, LogEstimate]]:
    """Check bf16, fp8 and fp8-rowwise at one shape and phase, then time them interleaved.

    A variant that cannot be built (row-wise scales unsupported) is reported as skipped and the
    others still run; a wrong output (CorrectnessError) propagates and voids the trial.
    """
    from hwadvisor.trials.kit.timing import CorrectnessError

    built: dict[str, tuple[Callable[[int], Any], float, dict[str, float | int | str]]] = {}
    skipped: list[Measurement] = []
    for variant in ("bf16", "fp8", "fp8-rowwise"):
        if variant == "fp8-rowwise" and rowwise_failed:
            skipped.append(Measurement(label=f"{phase} {shape.name} {variant}",
                                       skipped=rowwise_failed))
            continue
        try:
            built[variant] = _prepare(device, phase, m, shape, variant, max_sets)
        except CorrectnessError:
            raise
        except Exception as exc:  # a variant this torch/GPU cannot run is skipped on its own
            text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            skipped.append(Measurement(label=f"{phase} {shape.name} {variant}",
                                       skipped=f"{type(exc).__name__}: {text}"[:300]))
    if "bf16" not in built or len(built) < 2:
        return skipped, {}
    variants = [graphed(Variant(str(p["label"]), call, p), device)
                for call, _err, p in built.values()]
    timed = interleaved(variants[0], *variants[1:], device=device, budget_s=budget_s)
    ratios: dict[str, LogEstimate] = {}
    for (name, (_call, err, _p)), m_ in zip(built.items(), timed.measurements, strict=True):
        m_.error = err
        flops = 2.0 * m * shape.n * shape.k
        m_.value = flops / m_.median / 1e12 if m_.median else None
        m_.value_unit = "TFLOP/s"
        if name != "bf16":
            est = timed.ratio(m_.label)
            if est is not None:
                ratios[name] = est
    return timed.measurements + skipped, ratios


class Fp8GemmTrial(RequiresTrial):
    """FP8 GEMM speedup over bf16 at the workload's prefill and decode shapes."""

    id = "fp8-gemm"
    title = "FP8 GEMM vs bf16 (workload shapes)"
    needs = "CUDA GPU with FP8 tensor cores (cc >= 8.9) and torch._scaled_mm"

    requires = Requires(min_cc=FP8_MIN_CC, what="FP8 GEMM", torch_features=(
        ("_scaled_mm", "needs >= 2.1"), ("float8_e4m3fn", "needs >= 2.1")))

    def unsupported_reason(self, ctx: TrialContext) -> str | None:
        """Needs torch, CUDA, cc >= 8.9, FP8 matrix cores and torch._scaled_mm."""
        reason = self.requires.reason()
        if reason is None and not has_fp8("cuda:0"):
            return "this GPU has no FP8 matrix cores (NVIDIA cc >= 8.9, AMD MI300 or newer)"
        return reason

    def run(self, ctx: TrialContext) -> TrialResult:
        """Check and time bf16, fp8 per-tensor and fp8 row-wise per shape and phase."""
        device = torch_device(ctx)
        shapes = linear_shapes(ctx.workload)
        phases = {"prefill": prefill_tokens(ctx.workload, ctx.quick),
                  "decode": decode_tokens(ctx.workload)[1]}
        # The CPU path exists for tests (torch's CPU _scaled_mm is slow): few input sets there.
        max_sets = 16 if device.startswith("cuda") or not ctx.quick else 2
        budget = max(0.05, ctx.budget_s / (len(shapes) * len(phases)))
        measurements: list[Measurement] = []
        ratios: dict[str, list[LogEstimate]] = {}
        rowwise_failed: str | None = None
        for phase, m in phases.items():
            for shape in shapes:
                try:
                    found, shape_ratios = _bench_shape(device, phase, m, shape, budget, max_sets,
                                                       rowwise_failed)
                finally:
                    release_memory()
                for meas in found:
                    if meas.skipped and "rowwise" in meas.label and not rowwise_failed:
                        rowwise_failed = f"row-wise scales not supported here: {meas.skipped}"
                        meas.skipped = rowwise_failed
                measurements.extend(found)
                for variant, est in shape_ratios.items():
                    ratios.setdefault(f"{phase}/{variant}", []).append(est)
        intervals: dict[str, tuple[tuple[float, float] | None, int]] = {}

        def mean(key: str, name: str) -> float | None:
            return with_interval(name, combined(ratios.get(key, [])), intervals)

        prefill = mean("prefill/fp8", "prefill_speedup")
        decode = mean("decode/fp8", "decode_speedup")
        if "decode_speedup" in intervals:
            intervals["speedup"] = intervals["decode_speedup"]
        found_effects = effects(
            prefill_speedup=prefill,
            decode_speedup=decode,
            speedup=decode,
            prefill_speedup_rowwise=mean("prefill/fp8-rowwise", "prefill_speedup_rowwise"),
            decode_speedup_rowwise=mean("decode/fp8-rowwise", "decode_speedup_rowwise"),
        )
        summary = ", ".join(f"{k} {v:.2f}x" for k, v in found_effects.items() if k != "speedup")
        return variants_result(
            self.id, measurements,
            ok=prefill is not None or decode is not None,
            effect=found_effects,
            intervals=intervals,
            kernel=KERNEL,
            summary=(f"fp8 vs bf16 at M={phases['prefill']} (prefill) and M={phases['decode']} "
                     f"(decode), shapes {', '.join(f'{s.name} {s.n}x{s.k}' for s in shapes)}: "
                     f"{summary or 'no speedup measured'}"),
        )
