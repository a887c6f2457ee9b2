"""Trial `activation-checkpointing`: memory saved and step time paid by recomputing activations.

A stack of the workload's transformer blocks (heads capped, a few layers) runs forward +
backward with and without torch.utils.checkpoint (use_reentrant=False) around each block.

Memory: on CUDA, the peak allocated during the step minus what was allocated before it
(weights, gradients already allocated, the input), via torch.cuda.reset_peak_memory_stats /
max_memory_allocated. On a CPU there is no allocator peak, so the trial counts the bytes the
step keeps for backward: unique storages packed by torch.autograd.graph.saved_tensors_hooks
(weights excluded; views share a storage and count once). With checkpointing that is each
block's input (kept by checkpoint for the recompute) plus one block's saved bytes, because
backward recomputes one block at a time and holds its activations while it runs.

Correctness: the gradients (weights and input) of both variants must agree.

The two steps are timed interleaved (timing.paired) until the time ratio's 95% interval is within
±5% or the budget is spent. The byte counts are exact (a count, not a timing): their interval is
the point itself.

Effect keys:
- memory_factor: activation bytes with / without checkpointing (< 1 saves memory)
- time_factor: step time with / without (> 1: recompute costs time, e.g. 1.3), with its interval
- speedup: 1 / time_factor
- activation_bytes_without, activation_bytes_with: the two byte counts
- memory_factor_at_model_layers: memory_factor extrapolated from the measured per-block bytes to
  the model's layer count, (L*input + block) / (L*block) on a CPU; on CUDA
  (L*retained_per_block + transient) / (L*per_block) with the same measured terms.
  Checkpointing saves more the more layers there are, so this is the figure for the model.
"""

from __future__ import annotations

from typing import Any

from hwadvisor.models import Measurement, TrialResult
from hwadvisor.trials.base import TrialContext, torch_device
from hwadvisor.trials.kit import common

TRIAL_ID = "activation-checkpointing"


class ActivationCheckpointingTrial(common.GuardedTrial):
    """Forward + backward of a block stack with and without activation checkpointing."""

    id = TRIAL_ID
    title = "Activation checkpointing: activation memory saved vs. step time"
    needs = "torch; a CUDA GPU for allocator peaks (a CPU counts saved-tensor bytes)"

    def body(self, ctx: TrialContext, started: float) -> TrialResult:
        """Measure both variants; see the module docstring."""
        return _run(ctx, started)


def _shape(ctx: TrialContext, device: str) -> common.BlockShape:
    wl = ctx.workload
    if ctx.quick or not device.startswith("cuda"):
        return common.scaled_shape(wl, max_heads=4, layers=4, batch=1, seq_len=64,
                                   quick_head_dim=16)
    tokens = 4096
    if wl is not None:
        tokens = min(4096, wl.batch * wl.prompt_len)
    seq = min(tokens, wl.prompt_len if wl is not None else tokens)
    batch = max(1, tokens // seq)
    return common.scaled_shape(wl, max_heads=64, layers=4, batch=batch, seq_len=seq)


def _grads(stack: Any, x: Any) -> list[Any]:
    """Copy every gradient (weights, then the input): the next step overwrites .grad."""
    return [p.grad.detach().clone() for p in stack.parameters()] + [x.grad.detach().clone()]


def grads_rel_error(new: list[Any], ref: list[Any]) -> float:
    """Return ||new - ref|| / ||ref|| over all gradients; inf on NaN/Inf.

    Computed in float64 on their device: copying billions of gradient values to the host would
    take longer than the trial.
    """
    import math

    import torch

    num = torch.zeros((), dtype=torch.float64, device=ref[0].device)
    den = torch.zeros((), dtype=torch.float64, device=ref[0].device)
    for a, b in zip(new, ref, strict=True):
        a64, b64 = a.double(), b.double()
        num += (a64 - b64).pow(2).sum()
        den += b64.pow(2).sum()
    num_f, den_f = float(num), float(den)
    if not (math.isfinite(num_f) and math.isfinite(den_f)) or den_f == 0.0:
        return math.inf
    return math.sqrt(num_f / den_f)


def _step(stack: Any, x: Any, probe: Any) -> None:
    """One training step's compute: forward, a scalar loss with random weights, backward."""
    out = stack(x)
    loss = (out.float() * probe).mean()
    loss.backward()


def _zero(stack: Any, x: Any) -> None:
    # set_to_none=False keeps gradients allocated, so the peak measures activations only.
    stack.zero_grad(set_to_none=False)
    if x.grad is not None:
        x.grad.zero_()


def _cuda_activation_bytes(stack: Any, x: Any, probe: Any, device: str) -> int:
    import torch

    _zero(stack, x)
    torch.cuda.synchronize(device)
    base = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    _step(stack, x, probe)
    torch.cuda.synchronize(device)
    return int(torch.cuda.max_memory_allocated(device) - base)


def _saved_bytes(stack: Any, x: Any, probe: Any) -> int:
    """Bytes of unique storages autograd (and checkpoint) keep from forward to backward."""
    import torch

    weights = {p.untyped_storage().data_ptr() for p in stack.parameters()}
    seen: dict[int, int] = {}
    keep: list[Any] = []  # hold the tensors so no address is reused while we count

    def count(t: Any) -> None:
        storage = t.untyped_storage()
        ptr = storage.data_ptr()
        if ptr not in weights and ptr not in seen:
            seen[ptr] = storage.nbytes()
            keep.append(t)

    def pack(t: Any) -> Any:
        count(t)
        return t

    hooks = []
    if stack.checkpointing:
        # checkpoint's own hooks take precedence inside each block, and the block input it keeps
        # for the recompute is held by its closure: count that input explicitly.
        hooks = [b.register_forward_pre_hook(lambda _m, args: count(args[0]))
                 for b in stack.blocks]
    try:
        _zero(stack, x)
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            out = stack(x)
            loss = (out.float() * probe).mean()
    finally:
        for h in hooks:
            h.remove()
    loss.backward()
    keep.clear()
    return sum(seen.values())


def _run(ctx: TrialContext, started: float) -> TrialResult:
    import torch

    from hwadvisor.trials.kit import blocks
    from hwadvisor.trials.kit.timing import Variant, paired

    device = torch_device(ctx)
    dtype_name = common.compute_dtype(device)
    dtype = common.torch_dtype(dtype_name)
    shape = _shape(ctx, device)
    stack = blocks.build_stack(shape, device, dtype, seed=1)
    x = blocks.random_hidden(shape, device, dtype, seed=2).requires_grad_(True)
    gen = torch.Generator(device="cpu").manual_seed(3)
    probe = torch.randn(shape.batch, shape.seq_len, shape.hidden_size, generator=gen).to(device)

    # Correctness: the same step with both variants gives the same gradients.
    grads = {}
    for ckpt in (False, True):
        stack.checkpointing = ckpt
        _zero(stack, x)
        _step(stack, x, probe)
        grads[ckpt] = _grads(stack, x)
    err = grads_rel_error(grads[True], grads[False])
    tol = common.tolerance(dtype_name)
    del grads

    memory: dict[bool, int] = {}
    for ckpt in (False, True):
        stack.checkpointing = ckpt
        if device.startswith("cuda"):
            memory[ckpt] = _cuda_activation_bytes(stack, x, probe, device)
        else:
            memory[ckpt] = _saved_bytes(stack, x, probe)
    method = "cuda allocator peak" if device.startswith("cuda") else "saved-tensor bytes"
    per_block = memory[False] / shape.layers
    if not device.startswith("cuda"):
        # The recompute of one block during backward holds that block's activations.
        memory[True] += int(per_block)
    model_layers = common.spec_of(ctx.workload)[0]["num_layers"]

    params = {**shape.params(), "dtype": dtype_name, "memory_method": method}

    def step_with(ckpt: bool) -> Any:
        def fn(_i: int) -> None:
            stack.checkpointing = ckpt
            _zero(stack, x)
            _step(stack, x, probe)
        return fn

    plain, ckpt_m, ratio = paired(
        Variant("step without checkpointing", step_with(False)),
        Variant("step with checkpointing", step_with(True)),
        device=device, budget_s=max(0.5, ctx.budget_s * 0.6), warmup=2, params=params)
    timings = {False: plain, True: ckpt_m}
    timings[True].error = err

    mem_meas = [
        Measurement(label=f"activation memory {'with' if ckpt else 'without'} checkpointing",
                    unit="bytes", samples=[float(memory[ckpt])], value=float(memory[ckpt]),
                    value_unit="bytes", params={"memory_method": method})
        for ckpt in (False, True)
    ]
    effect: dict[str, float] = {
        "activation_bytes_without": float(memory[False]),
        "activation_bytes_with": float(memory[True]),
    }
    if memory[False] > 0:
        effect["memory_factor"] = memory[True] / memory[False]
        # Split the with-checkpointing bytes into a part that grows with the layers (the kept
        # inputs) and one transient block: with = L*kept + per_block, solved for kept.
        kept = max(0.0, (memory[True] - per_block) / shape.layers)
        effect["memory_factor_at_model_layers"] = (
            (model_layers * kept + per_block) / (model_layers * per_block)
        )
    intervals: dict[str, tuple[tuple[float, float] | None, int]] = {}
    if "memory_factor" in effect:  # counted bytes: exact
        for key in ("memory_factor", "memory_factor_at_model_layers"):
            intervals[key] = ((effect[key], effect[key]), 1)
    if ratio is not None:  # ratio = time without / time with
        effect["speedup"] = ratio.value
        effect["time_factor"] = ratio.inverse().value
        intervals["speedup"] = (ratio.ci, ratio.n)
        intervals["time_factor"] = (ratio.inverse().ci, ratio.n)

    summary = (
        f"{shape.layers} blocks ({shape.source}, {shape.num_heads} heads, "
        f"{shape.batch}x{shape.seq_len} tokens, {dtype_name}): activation memory x"
        f"{effect.get('memory_factor', float('nan')):.2f}, step time x"
        f"{effect.get('time_factor', float('nan')):.2f} ({method}); gradient error {err:.1e}"
    )
    check = common.Checked(err, tol, "gradients differ: relative error")
    return common.checked_result(TRIAL_ID, device, started, check,
                                 measurements=[timings[False], timings[True], *mem_meas],
                                 effect=effect, intervals=intervals, summary=summary)
