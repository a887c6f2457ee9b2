"""Trial `torch-compile`: one transformer block's forward, eager against torch.compile.

The workload's block (heads capped, batch x seq capped) runs forward under no_grad. The
compiled module uses mode "max-autotune-no-cudagraphs" when the budget allows it on a GPU
(ctx.budget_s >= MAX_AUTOTUNE_BUDGET_S; autotuning takes minutes), else "default";
ctx.compile_mode overrides. ctx.compile_backend (e.g. "eager", which runs
dynamo's graph capture without inductor) exists for fast tests of this harness; results name
the backend they used. The first compiled call (compilation plus one run) is
timed on its own and reported as compile_s; the timed samples start after it and after the
warm-up, so compilation never lands inside them.

Correctness: the compiled output against eager's on fresh random inputs of the same shape.

Eager and compiled forwards are timed interleaved (timing.paired) until the ratio's 95% interval
is within ±5% or the budget is spent.

Effect keys:
- speedup: eager time / compiled time (geometric mean of the paired ratios), with its interval
- compile_s: wall seconds of the first compiled call (compilation dominates it)
- eager_ms, compiled_ms: the two medians in milliseconds
"""

from __future__ import annotations

import time

from hwadvisor.models import Measurement, TrialResult
from hwadvisor.models.stats import LogEstimate
from hwadvisor.trials.base import Requires, TrialContext, torch_device
from hwadvisor.trials.kit import common

TRIAL_ID = "torch-compile"
MAX_AUTOTUNE_BUDGET_S = 120.0


class TorchCompileTrial(common.GuardedTrial):
    """A block's forward: eager vs. torch.compile."""

    id = TRIAL_ID
    title = "torch.compile: one transformer block, eager vs. compiled"
    needs = "torch >= 2.0 and a C/C++ compiler (inductor's CPU code and Triton's launcher)"

    requires = Requires(torch_features=(("compile", "needs >= 2.0"),), c_compiler=True)

    def body(self, ctx: TrialContext, started: float) -> TrialResult:
        """Compile and compare; see the module docstring."""
        return _run(ctx, started)

    def cleanup(self) -> None:
        """Reset torch.compile's caches for the next trial."""
        _reset_dynamo()


def _reset_dynamo() -> None:
    """Drop compiled graphs so later trials start clean."""
    try:
        import torch._dynamo

        torch._dynamo.reset()
    except Exception:  # nothing to reset when dynamo never loaded
        pass


def compile_mode(ctx: TrialContext, device: str) -> str:
    """Pick the torch.compile mode for this budget and device."""
    override = ctx.compile_mode
    if isinstance(override, str):
        return override
    if device.startswith("cuda") and ctx.budget_s >= MAX_AUTOTUNE_BUDGET_S and not ctx.quick:
        return "max-autotune-no-cudagraphs"
    return "default"


def _shape(ctx: TrialContext, device: str) -> common.BlockShape:
    wl = ctx.workload
    if ctx.quick or not device.startswith("cuda"):
        return common.scaled_shape(wl, max_heads=2, layers=1, batch=1, seq_len=32,
                                   quick_head_dim=16)
    seq = min(4096, wl.prompt_len if wl is not None else 2048)
    batch = max(1, min(wl.batch if wl is not None else 1, 4096 // seq))
    return common.scaled_shape(wl, max_heads=64, layers=1, batch=batch, seq_len=seq)


def _run(ctx: TrialContext, started: float) -> TrialResult:
    import torch

    from hwadvisor.trials.kit import blocks
    from hwadvisor.trials.kit.timing import Variant, paired, rel_error, sync

    device = torch_device(ctx)
    dtype_name = common.compute_dtype(device)
    dtype = common.torch_dtype(dtype_name)
    shape = _shape(ctx, device)
    mode = compile_mode(ctx, device)
    block = blocks.build_block(shape, device, dtype, seed=31).eval()
    x = blocks.random_hidden(shape, device, dtype, seed=32)

    backend = ctx.compile_backend
    _reset_dynamo()
    if isinstance(backend, str) and backend != "inductor":
        mode = "n/a"  # modes are inductor's; other backends take none
        compiled = torch.compile(block, backend=backend, dynamic=False)
    else:
        backend = "inductor"
        compiled = torch.compile(block, mode=mode, dynamic=False)
    with torch.no_grad():
        sync(device)
        t0 = time.perf_counter()
        compiled(x)
        sync(device)
        compile_s = time.perf_counter() - t0

        errors = []
        for seed in (33, 34):  # fresh inputs, same shape (no recompilation)
            xi = blocks.random_hidden(shape, device, dtype, seed=seed)
            errors.append(rel_error(compiled(xi), block(xi)))
        err = max(errors)

        params: dict[str, float | int | str] = {**shape.params(), "dtype": dtype_name,
                                                "mode": mode, "backend": backend}
        eager, comp, ratio = paired(
            Variant("eager block forward", lambda _i: block(x)),
            Variant("compiled block forward", lambda _i: compiled(x)),
            device=device, budget_s=max(0.4, ctx.budget_s / 2), warmup=2, params=params)
    comp.error = err
    compile_m = Measurement(label="first compiled call (compilation)", unit="s",
                            samples=[compile_s], params={"mode": mode, "backend": backend})
    return _result(device, shape, dtype_name, mode, (eager, comp, ratio), compile_m, err, started)


def _result(device: str, shape: common.BlockShape, dtype_name: str, mode: str,
            timed: tuple[Measurement, Measurement, LogEstimate | None], compile_m: Measurement,
            err: float, started: float) -> TrialResult:
    eager, comp, ratio = timed
    effect: dict[str, float] = {"compile_s": compile_m.samples[0]}
    intervals: dict[str, tuple[tuple[float, float] | None, int]] = {}
    if eager.median and comp.median and ratio is not None:
        effect.update({"speedup": ratio.value, "eager_ms": eager.median * 1e3,
                       "compiled_ms": comp.median * 1e3})
        intervals["speedup"] = (ratio.ci, ratio.n)
    tol = common.tolerance(dtype_name)
    summary = (
        f"block ({shape.source}, {shape.num_heads} heads, {shape.batch}x{shape.seq_len} tokens, "
        f"{dtype_name}), {comp.params.get('backend')} mode {mode}: "
        f"speedup x{effect.get('speedup', float('nan')):.2f}, "
        f"compile {effect['compile_s']:.1f} s; output error {err:.1e}"
    )
    check = common.Checked(err, tol, "compiled output differs from eager")
    return common.checked_result(TRIAL_ID, device, started, check,
                                 measurements=[eager, comp, compile_m],
                                 effect=effect, intervals=intervals, summary=summary)
