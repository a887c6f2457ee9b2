"""Trial `cuda-graphs`: one decode step at batch 1, eager launches against a CUDA graph replay.

A stack of the workload's blocks (full widths, a few layers) decodes one token against a
static KV cache of the workload's context (capped), with static input/position buffers so the
step can be captured. Capture follows the torch.cuda.graphs docs: warm up on a side stream,
then capture with torch.cuda.graph(g). The graph's output must match the eager step's on
fresh random input.

Eager steps and replays are timed interleaved (timing.paired) until the ratio's 95% interval is
within ±5% or the budget is spent.

Effect keys:
- speedup: eager step time / graph replay time (> 1: graphs help; launch-bound decode gains
  most), with its interval
- eager_step_ms, graph_step_ms: the two medians in milliseconds
"""

from __future__ import annotations

from typing import Any

from hwadvisor.models import TrialResult
from hwadvisor.trials.base import Requires, TrialContext, torch_device
from hwadvisor.trials.kit import common

TRIAL_ID = "cuda-graphs"
MAX_CONTEXT = 4096
LAYERS = 4


class CudaGraphsTrial(common.GuardedTrial):
    """Batch-1 decode step: eager vs. torch.cuda.CUDAGraph replay."""

    id = TRIAL_ID
    title = "CUDA graphs: batch-1 decode step, eager vs. graph replay"
    needs = "a CUDA GPU"

    requires = Requires(cuda=True, what="CUDA graphs")

    def body(self, ctx: TrialContext, started: float) -> TrialResult:
        """Measure both variants; see the module docstring."""
        return _run(ctx, started)


def _context_len(ctx: TrialContext) -> int:
    wl = ctx.workload
    if ctx.quick:
        return 256
    if wl is None:
        return 2048
    return max(16, min(MAX_CONTEXT, wl.prompt_len + wl.gen_len))


def _run(ctx: TrialContext, started: float) -> TrialResult:
    import torch

    from hwadvisor.trials.kit import blocks
    from hwadvisor.trials.kit.timing import Variant, paired, rel_error

    device = torch_device(ctx)
    dtype = torch.bfloat16
    ctx_len = _context_len(ctx)
    shape = common.scaled_shape(
        ctx.workload, max_heads=8 if ctx.quick else 64, layers=2 if ctx.quick else LAYERS,
        batch=1, seq_len=ctx_len,
    )
    stack = blocks.build_stack(shape, device, dtype, seed=11).eval()
    gen = torch.Generator(device="cpu").manual_seed(12)
    cache_shape = (1, shape.num_kv_heads, ctx_len, shape.head_dim)
    k_caches = [torch.randn(cache_shape, generator=gen).to(device, dtype) for _ in stack.blocks]
    v_caches = [torch.randn(cache_shape, generator=gen).to(device, dtype) for _ in stack.blocks]
    static_x = torch.randn(1, 1, shape.hidden_size, generator=gen).to(device, dtype)
    # The new token goes into the last slot; re-writing the same K/V there is idempotent, so
    # eager and replayed steps see the same cache.
    static_pos = torch.tensor([ctx_len - 1], device=device, dtype=torch.long)

    def eager_step() -> Any:
        return stack.decode(static_x, k_caches, v_caches, static_pos)

    # Capture and replay on the trial's GPU even when another one is the current device.
    with torch.cuda.device(torch.device(device)):
        with torch.no_grad():
            # Warm up on a side stream before capture (torch.cuda.graphs docs: "Warmup ... on a
            # side stream"), so lazy initialisation (cuBLAS handles, autotuning) stays out of it.
            side = torch.cuda.Stream(device=device)
            side.wait_stream(torch.cuda.current_stream(device))
            with torch.cuda.stream(side):
                for _ in range(3):
                    eager_step()
            torch.cuda.current_stream(device).wait_stream(side)
            torch.cuda.synchronize(device)

            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                static_out = eager_step()
            torch.cuda.synchronize(device)

            # Correctness on fresh random input: replay vs eager on the same static buffers.
            errors = []
            for seed in (13, 14):
                g2 = torch.Generator(device="cpu").manual_seed(seed)
                static_x.copy_(torch.randn(static_x.shape, generator=g2).to(device, dtype))
                ref = eager_step().clone()
                static_out.fill_(float("nan"))  # poison: replay must write every element
                graph.replay()
                torch.cuda.synchronize(device)
                errors.append(rel_error(static_out, ref))
            err = max(errors)

            params = {**shape.params(), "dtype": "bf16", "context_len": ctx_len}
            eager, replay, ratio = paired(
                Variant("eager decode step", lambda _i: eager_step()),
                Variant("cuda graph replay", lambda _i: graph.replay()),
                device=device, budget_s=max(0.5, ctx.budget_s * 0.6), warmup=3, params=params)
            replay.error = err

    effect: dict[str, float] = {}
    intervals: dict[str, tuple[tuple[float, float] | None, int]] = {}
    if eager.median and replay.median and ratio is not None:
        effect = {
            "speedup": ratio.value,
            "eager_step_ms": eager.median * 1e3,
            "graph_step_ms": replay.median * 1e3,
        }
        intervals["speedup"] = (ratio.ci, ratio.n)
    # Eager and replay run the very same kernels: anything beyond bf16 rounding is a bug.
    tol = common.tolerance("bf16")
    summary = (
        f"decode step, {shape.layers} layers ({shape.source}, hidden {shape.hidden_size}), "
        f"context {ctx_len}: eager {effect.get('eager_step_ms', float('nan')):.3f} ms, "
        f"graph {effect.get('graph_step_ms', float('nan')):.3f} ms, "
        f"speedup x{effect.get('speedup', float('nan')):.2f}; output error {err:.1e}"
    )
    check = common.Checked(err, tol, "graph output differs from eager")
    return common.checked_result(TRIAL_ID, device, started, check,
                                 measurements=[eager, replay],
                                 effect=effect, intervals=intervals, summary=summary)
