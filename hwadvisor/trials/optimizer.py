"""Trial `fused-adamw`: torch.optim.AdamW(fused=True) against foreach=True (torch's default).

The parameters are a few decoder layers' worth of the workload's shapes (q, k, v, o, gate,
up, down and the two norms per layer; 2 layers at full widths on a GPU, tiny on a CPU), fp32
as mixed-precision training keeps its master weights, with fixed random gradients. Both
optimizers start from the same weights; one step of each must give the same weights (the
fused kernel does the same arithmetic in one launch per dtype). The steps are then timed
interleaved (timing.paired) until the ratio's 95% interval is within ±5%.

Fused AdamW runs on CUDA, ROCm, MPS (torch >= 2.4 there) and the CPU (torch >= 2.4).

Effect keys:
- speedup: foreach step time / fused step time, with its interval
- foreach_step_ms, fused_step_ms: the medians
"""

from __future__ import annotations

from typing import Any

from hwadvisor.models import TrialResult
from hwadvisor.trials.base import TrialContext, torch_device
from hwadvisor.trials.kit import common

TRIAL_ID = "fused-adamw"
LAYERS = 2
TOLERANCE = 1e-5  # fp32: the two implementations differ only in rounding order


def layer_shapes(shape: common.BlockShape) -> list[tuple[int, ...]]:
    """Return the parameter shapes of the workload's decoder layers (Llama layout)."""
    h, d = shape.hidden_size, shape.head_dim
    q, kv, inter = shape.num_heads * d, shape.num_kv_heads * d, shape.intermediate_size
    per_layer: list[tuple[int, ...]] = [(q, h), (kv, h), (kv, h), (h, q), (inter, h), (inter, h),
                                        (h, inter), (h,), (h,)]
    return per_layer * shape.layers


class FusedAdamWTrial(common.GuardedTrial):
    """One AdamW step over a few layers' parameters: fused vs foreach."""

    id = TRIAL_ID
    title = "Fused AdamW vs foreach AdamW (a few layers' parameters)"
    needs = "torch >= 2.4 with AdamW(fused=True) on this device"

    def also_needs(self, ctx: TrialContext) -> str | None:
        """Need a torch whose AdamW takes fused=True."""
        import inspect

        import torch

        if "fused" not in inspect.signature(torch.optim.AdamW).parameters:
            return f"torch {torch.__version__} has no AdamW(fused=True)"
        return None

    def body(self, ctx: TrialContext, started: float) -> TrialResult:
        """Check and time both optimizers; see the module docstring."""
        return _run(ctx, started)


def _params(shapes: list[tuple[int, ...]], device: str, seed: int) -> tuple[list[Any], list[Any]]:
    """Random weights and gradients of the given shapes (drawn on the device, fp32)."""
    import torch

    where = "cpu" if device.startswith("mps") else device
    gen = torch.Generator(device=where).manual_seed(seed)
    weights = [torch.randn(s, device=where, generator=gen).to(device) * 0.02 for s in shapes]
    grads = [torch.randn(s, device=where, generator=gen).to(device) * 1e-3 for s in shapes]
    return weights, grads


def _optimizer(weights: list[Any], grads: list[Any], fused: bool) -> tuple[Any, list[Any]]:
    import torch

    params = [torch.nn.Parameter(w.clone()) for w in weights]
    for p, g in zip(params, grads, strict=True):
        p.grad = g
    if fused:
        return torch.optim.AdamW(params, lr=1e-3, weight_decay=0.1, fused=True), params
    return torch.optim.AdamW(params, lr=1e-3, weight_decay=0.1, foreach=True), params


def _run(ctx: TrialContext, started: float) -> TrialResult:
    import torch

    from hwadvisor.trials.kit.timing import Variant, paired, rel_error

    device = torch_device(ctx, mps=True)
    if ctx.quick or device.startswith("cpu"):
        shape = common.scaled_shape(ctx.workload, max_heads=4, layers=LAYERS, batch=1,
                                    seq_len=1, quick_head_dim=32)
    else:
        shape = common.scaled_shape(ctx.workload, max_heads=64, layers=LAYERS, batch=1,
                                    seq_len=1)
    shapes = layer_shapes(shape)
    weights, grads = _params(shapes, device, seed=91)
    fused, fused_params = _optimizer(weights, grads, fused=True)
    foreach, foreach_params = _optimizer(weights, grads, fused=False)
    with torch.no_grad():
        fused.step()
        foreach.step()
    err = rel_error(torch.cat([p.detach().flatten() for p in fused_params]),
                    torch.cat([p.detach().flatten() for p in foreach_params]))
    del weights
    count = sum(p.numel() for p in fused_params)
    params: dict[str, float | int | str] = {**shape.params(), "parameters": count,
                                            "dtype": "fp32"}
    base, new, ratio = paired(
        Variant("AdamW foreach step", lambda _i: foreach.step(), {"impl": "foreach"}),
        Variant("AdamW fused step", lambda _i: fused.step(), {"impl": "fused"}),
        device=device, budget_s=max(0.5, ctx.budget_s * 0.4), params=params)
    new.error = err
    effect: dict[str, float] = {}
    intervals: dict[str, tuple[tuple[float, float] | None, int]] = {}
    if ratio is not None and base.median and new.median:
        effect = {"speedup": ratio.value, "foreach_step_ms": base.median * 1e3,
                  "fused_step_ms": new.median * 1e3}
        intervals["speedup"] = (ratio.ci, ratio.n)
    ok = err <= TOLERANCE and bool(effect)
    summary = (f"AdamW over {count / 1e6:.1f} M fp32 parameters ({shape.layers} layers of "
               f"{shape.source}, hidden {shape.hidden_size}) on {device}: foreach "
               f"{effect.get('foreach_step_ms', 0):.3f} ms, fused "
               f"{effect.get('fused_step_ms', 0):.3f} ms "
               f"(x{effect.get('speedup', float('nan')):.2f}); weights after one step differ by "
               f"{err:.1e}")
    return common.finished(
        TRIAL_ID, device, started, ok=ok,
        reason=None if err <= TOLERANCE else f"fused and foreach steps differ: {err:.2e}",
        measurements=[base, new], effect=effect, intervals=intervals, summary=summary,
        max_error=err if err != float("inf") else None,
        kernel="torch.optim.AdamW fused=True (one multi-tensor kernel) vs foreach=True",
    )
