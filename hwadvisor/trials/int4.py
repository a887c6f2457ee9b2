"""`int4-weight-only`: torch's int4 weight-only matmul against bf16 at decode shapes.

Batch sizes 1, 4, 16, 64 (and the workload's own batch), the workload's linear shapes, group
size 128. Both variants multiply by the same dequantized weight, so the comparison is of
kernels, not of models: the int4 output must match x @ dequant(W).T to ~1e-2. bf16 and int4
are timed interleaved (timing.interleaved) until the ratio's 95% interval is within ±5%, on
CUDA as replayed graphs of 16 calls (timing.graphed), the way serving engines run decode.
effect: speedup_b{batch} (geometric mean over shapes of bf16 time / int4 time, with the
combined interval) for each batch, and speedup at the workload's batch. The advice may hold at
one batch size and fail at another.

The kernel is torch's own (`_weight_int4pack_mm`, tinygemm-derived; `_for_cpu` on a CPU), not
Marlin: Marlin keeps its speedup to larger batches, so the result names the kernel it measured.
"""

from __future__ import annotations

from typing import Any

from hwadvisor.models import Measurement, TrialResult
from hwadvisor.models.stats import LogEstimate
from hwadvisor.trials.base import (
    RequiresTrial,
    TrialContext,
    compute_capability,
    cuda_available,
    release_memory,
    torch_device,
)
from hwadvisor.trials.kit.int4_ops import (
    GROUP_SIZE,
    INT4_MIN_CC,
    dequantize_int4,
    int4_mm,
    pack_weight,
    quantize_int4,
    scales_and_zeros,
)
from hwadvisor.trials.kit.shapes import LinearShape, linear_shapes
from hwadvisor.trials.kit.timing import (
    Variant,
    check_close,
    combined,
    effects,
    graphed,
    guarded,
    paired,
    rel_error,
    rotation_sets,
    variants_result,
    with_interval,
)

BATCHES = (1, 4, 16, 64)
MAX_EXTRA_BATCH = 256
INT4_TOLERANCE = 2e-2  # against x @ dequant(W).T in float32; the CPU kernel lands near 2e-3
BF16_TOLERANCE = 2e-2
CPU_QUICK_DIM = 1024  # CI's 2-core machines: cap N and K in quick mode on the CPU


def trial_batches(ctx: TrialContext) -> list[int]:
    """1, 4, 16, 64 and the workload's batch (when it is at most 256)."""
    batches = set(BATCHES)
    if ctx.workload is not None and ctx.workload.batch <= MAX_EXTRA_BATCH:
        batches.add(ctx.workload.batch)
    return sorted(batches)


def trial_shapes(ctx: TrialContext, device: str) -> list[LinearShape]:
    """Return the workload's linear shapes, rounded to 128; capped small on a CPU in quick mode."""
    shapes = linear_shapes(ctx.workload, multiple=GROUP_SIZE)
    if ctx.quick and not device.startswith("cuda"):
        shapes = [LinearShape(s.name, min(s.n, CPU_QUICK_DIM), min(s.k, CPU_QUICK_DIM))
                  for s in shapes]
    return shapes


class _Weights:
    """Several quantized copies of one shape's weight (rotated past the cache)."""

    def __init__(self, shape: LinearShape, device: str, seed: int) -> None:
        import torch

        # A CPU's last-level cache is smaller than an H200's L2 and quantizing a copy costs
        # ~0.1 s there: a few copies suffice on the CPU.
        max_sets = 32 if device.startswith("cuda") else 4
        self.sets = rotation_sets(shape.n * shape.k // 2, max_sets=max_sets)
        gen = torch.Generator(device=device).manual_seed(seed)
        self.packed: list[Any] = []
        self.sz: list[Any] = []
        self.bf16: list[Any] = []
        for _ in range(self.sets):
            w = torch.randn(shape.n, shape.k, device=device, generator=gen) / shape.k**0.5
            q, scales, zeros = quantize_int4(w)
            self.packed.append(pack_weight(q, device))
            self.sz.append(scales_and_zeros(scales, zeros))
            self.bf16.append(dequantize_int4(q, scales, zeros).to(torch.bfloat16))
        self.generator = gen


def kernel_name(device: str) -> str:
    """Return the int4 kernel this trial calls on device."""
    import torch

    if not device.startswith("cuda") and hasattr(torch.ops.aten, "_weight_int4pack_mm_for_cpu"):
        return "torch _weight_int4pack_mm_for_cpu"
    return "torch _weight_int4pack_mm"


def _bench_batch(weights: _Weights, shape: LinearShape, batch: int, device: str,
                 budget_s: float) -> tuple[Measurement, Measurement, LogEstimate | None]:
    """Check bf16 and int4 for one shape and batch size, then time them interleaved."""
    import torch

    sets = weights.sets
    xs = [torch.randn(batch, shape.k, device=device, generator=weights.generator).to(torch.bfloat16)
          for _ in range(sets)]
    ref = xs[0].float() @ weights.bf16[0].float().t()
    common: dict[str, float | int | str] = {"shape": shape.name, "batch": batch, "n": shape.n,
                                            "k": shape.k, "group": GROUP_SIZE, "input_sets": sets}
    base_label = f"{shape.name} b{batch}"
    out = torch.mm(xs[0], weights.bf16[0].t())
    bf16_err = check_close(f"{base_label} bf16", rel_error(out, ref), BF16_TOLERANCE)
    out4 = int4_mm(xs[0], weights.packed[0], weights.sz[0], device)
    int4_err = check_close(f"{base_label} int4", rel_error(out4, ref), INT4_TOLERANCE)

    def call_bf16(i: int) -> Any:
        return torch.mm(xs[i % sets], weights.bf16[i % sets].t())

    def call_int4(i: int) -> Any:
        return int4_mm(xs[i % sets], weights.packed[i % sets], weights.sz[i % sets], device)

    bf16, int4, ratio = paired(
        graphed(Variant(f"{base_label} bf16", call_bf16, {"variant": "bf16"}), device),
        graphed(Variant(f"{base_label} int4", call_int4, {"variant": "int4",
                                                          "kernel": kernel_name(device)}), device),
        device=device, budget_s=budget_s, params=common)
    bf16.error, int4.error = bf16_err, int4_err
    return bf16, int4, ratio


class Int4WeightOnlyTrial(RequiresTrial):
    """INT4 weight-only matmul speedup over bf16, per decode batch size."""

    id = "int4-weight-only"
    title = "INT4 weight-only matmul vs bf16 (decode batch sizes)"
    needs = "torch with an int4 weight-only kernel: CUDA cc >= 8.0, or a recent CPU build"

    def also_needs(self, ctx: TrialContext) -> str | None:
        """Need the int4 ops, and on CUDA compute capability >= 8.0."""
        import torch

        aten = torch.ops.aten
        if cuda_available():
            cc = compute_capability("cuda:0")
            if cc is not None and cc < INT4_MIN_CC:
                return ("torch's int4 kernel needs compute capability >= 8.0; "
                        f"this GPU is {cc[0]}.{cc[1]}")
            if not hasattr(aten, "_weight_int4pack_mm"):
                return f"torch {torch.__version__} has no _weight_int4pack_mm"
            return None
        if not hasattr(aten, "_weight_int4pack_mm_for_cpu"):
            return f"torch {torch.__version__} has no CPU int4 kernel (_weight_int4pack_mm_for_cpu)"
        return None

    def run(self, ctx: TrialContext) -> TrialResult:
        """Check and time bf16 and int4 per shape and batch size."""
        import torch

        device = torch_device(ctx)
        try:  # a tiny pack first: a build without a working packer is unsupported, not an error
            pack_weight(torch.randint(0, 16, (128, 256), dtype=torch.int32, device=device), device)
        except RuntimeError as exc:
            return TrialResult(id=self.id, status="unsupported", reason=str(exc)[:300])
        shapes = trial_shapes(ctx, device)
        batches = trial_batches(ctx)
        budget = max(0.03, ctx.budget_s / (len(shapes) * len(batches)))
        measurements: list[Measurement] = []
        ratios: dict[int, list[LogEstimate]] = {}
        for index, shape in enumerate(shapes):
            try:
                weights = _Weights(shape, device, seed=100 + index)
                for batch in batches:
                    pair: list[Measurement] = []
                    found_ratio: list[LogEstimate] = []

                    def job(b: int = batch) -> Measurement:
                        bf16, int4, ratio = _bench_batch(weights, shape, b, device, budget)  # noqa: B023
                        pair.append(bf16)  # noqa: B023
                        if ratio is not None:
                            found_ratio.append(ratio)  # noqa: B023
                        return int4

                    int4 = guarded(f"{shape.name} b{batch} int4", job)
                    measurements.extend(pair + [int4])
                    if pair and not int4.skipped and found_ratio:
                        ratios.setdefault(batch, []).append(found_ratio[0])
            finally:
                weights = None  # type: ignore[assignment]
                release_memory()
        intervals: dict[str, tuple[tuple[float, float] | None, int]] = {}
        per_batch = {f"speedup_b{b}": with_interval(f"speedup_b{b}", combined(ratios.get(b, [])),
                                                    intervals) for b in batches}
        own = ctx.workload.batch if ctx.workload is not None else 1
        if f"speedup_b{own}" in intervals:
            intervals["speedup"] = intervals[f"speedup_b{own}"]
        found = effects(**per_batch, speedup=per_batch.get(f"speedup_b{own}"))
        summary = ", ".join(f"b{b} {per_batch[f'speedup_b{b}']:.2f}x" for b in batches
                            if per_batch.get(f"speedup_b{b}") is not None)
        kernel = kernel_name(device)
        return variants_result(
            self.id, measurements,
            ok=bool(ratios),
            effect=found,
            intervals=intervals,
            kernel=kernel,
            summary=(f"int4 (group {GROUP_SIZE}, {kernel}) vs bf16 on {device}, shapes "
                     f"{', '.join(f'{s.name} {s.n}x{s.k}' for s in shapes)}: "
                     f"{summary or 'none measured'}"),
        )
