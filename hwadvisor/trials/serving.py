"""Serving trials on the workload's decoder layers (a few of them, full widths on a GPU).

Three cached forwards through `blocks.Stack.decode` against static KV caches, each an A/B pair
timed interleaved (timing.paired) until the ratio's 95% interval is within ±5%:

- `continuous-batching`: one decode step at batch 1 against one at batch B (the workload's
  batch, at least 2). Paged KV and continuous batching pay because a step of B sequences
  costs little more than a step of one while decode is bound by reading the weights.
  Effect `throughput_speedup` = tokens/s at batch B / tokens/s at batch 1 = B * t1 / tB.
- `speculative-verify`: a forward of k = 4 tokens (the drafts a target model verifies in one
  pass) against a forward of one token, at the workload's batch. Effect `verify_time_factor`
  = t(k) / t(1), and `speedup` = ACCEPTED_TOKENS / verify_time_factor: the decode speedup with
  the rule's stated acceptance (2.5 tokens per target forward), which this trial does not
  measure (it depends on the draft model, the task and the temperature).
- `prefix-reuse`: prefill of the uncached half of the prompt, attending to the cached KV of its
  first half, against prefill of the whole prompt. Effect `speedup` = t(whole) / t(suffix), at
  the 50% hit the rule assumes.

Correctness first, for all three: the cached forward (cache filled by a cached forward of the
leading tokens, then the new ones) must match the plain full-sequence forward at the same
positions, on fresh random data (bf16 on a GPU, fp32 on a CPU).

torch is imported only inside functions.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hwadvisor.models import Measurement, TrialResult
from hwadvisor.models.stats import LogEstimate
from hwadvisor.trials.base import TrialContext, torch_device
from hwadvisor.trials.kit import common

LAYERS = 4
LAYERS_QUICK = 2
MAX_CONTEXT = 4096
MAX_BATCH = 64
DRAFT_TOKENS = 4
ACCEPTED_TOKENS = 2.5  # the speculative-decoding rule's stated assumption (inference.toml)
CHECK_CONTEXT = 64  # the correctness check's sequence (a full forward is its reference)
PREFIX_SHARE = 0.5  # the prefix-caching rule's assumed hit rate (inference.toml)
MAX_PREFILL_TOKENS = 8192


def _shape(ctx: TrialContext, device: str, batch: int, seq_len: int) -> common.BlockShape:
    """Return the workload's block: full widths, a few layers on a GPU; tiny on a CPU."""
    if ctx.quick or not device.startswith("cuda"):
        return common.scaled_shape(ctx.workload, max_heads=4, layers=LAYERS_QUICK, batch=batch,
                                   seq_len=seq_len, quick_head_dim=16)
    return common.scaled_shape(ctx.workload, max_heads=64, layers=LAYERS, batch=batch,
                               seq_len=seq_len)


def _context_len(ctx: TrialContext, device: str) -> int:
    wl = ctx.workload
    if ctx.quick or not device.startswith("cuda"):
        return 128
    if wl is None:
        return 2048
    return max(16, min(MAX_CONTEXT, wl.prompt_len + wl.gen_len))


def _caches(shape: common.BlockShape, batch: int, length: int, device: str, dtype: Any,
            seed: int) -> tuple[list[Any], list[Any]]:
    """Random (never zero) K and V caches (batch, kv heads, length, head_dim), one per layer.

    Drawn on the device itself (batch 64 x 4096 tokens is billions of values: minutes on a
    host CPU); on MPS, whose generator varies by torch version, on the CPU.
    """
    import torch

    where = "cpu" if device.startswith("mps") else device
    gen = torch.Generator(device=where).manual_seed(seed)
    size = (batch, shape.num_kv_heads, length, shape.head_dim)
    ks = [torch.randn(size, generator=gen, device=where).to(device, dtype)
          for _ in range(shape.layers)]
    vs = [torch.randn(size, generator=gen, device=where).to(device, dtype)
          for _ in range(shape.layers)]
    return ks, vs


def _positions(start: int, count: int, device: str) -> Any:
    import torch

    return torch.arange(start, start + count, device=device, dtype=torch.long)


def check_cached_forward(stack: Any, shape: common.BlockShape, device: str, dtype: Any,
                         batch: int, length: int, new: int, seed: int) -> float:
    """Relative error of a cached forward of the last `new` tokens against the full forward.

    The cache is filled by a cached forward of the first length - new tokens, then the last
    `new` tokens run against it; the full forward of all `length` tokens is the reference.
    """
    import torch

    from hwadvisor.trials.kit.timing import rel_error

    gen = torch.Generator(device="cpu").manual_seed(seed)
    x = torch.randn(batch, length, shape.hidden_size, generator=gen).to(device, dtype)
    ks, vs = _caches(shape, batch, length, device, dtype, seed + 1)  # overwritten below
    with torch.no_grad():
        ref = stack(x)[:, length - new:]
        stack.decode(x[:, :length - new], ks, vs, _positions(0, length - new, device))
        out = stack.decode(x[:, length - new:], ks, vs, _positions(length - new, new, device))
    return rel_error(out, ref)


def _decode_call(stack: Any, x: Any, ks: list[Any], vs: list[Any],
                 pos: Any) -> Callable[[int], Any]:
    """Return a cached forward of x at pos as a timing call (it rewrites the same slots)."""
    import torch

    def call(_i: int) -> Any:
        with torch.no_grad():
            return stack.decode(x, ks, vs, pos)
    return call


def _finish(trial_id: str, device: str, started: float, shape: common.BlockShape, err: float,
            dtype_name: str, measurements: list[Measurement], effect: dict[str, float],
            intervals: dict[str, tuple[tuple[float, float] | None, int]],
            summary: str) -> TrialResult:
    tol = common.tolerance(dtype_name)
    ok = err <= tol and bool(effect)
    reason = None
    if err > tol:
        reason = f"cached forward differs from the full forward: {err:.2e} > {tol:.0e}"
    elif not effect:
        reason = "no timing came back"
    return common.finished(
        trial_id, device, started, ok=ok, reason=reason, measurements=measurements,
        effect=effect, intervals=intervals,
        summary=f"{summary}; {shape.layers} layers ({shape.source}, hidden {shape.hidden_size}, "
                f"{dtype_name}); cached-forward error {err:.1e}",
        max_error=err if err != float("inf") else None,
    )


def _setup(ctx: TrialContext, batch: int, seq_len: int, seed: int
           ) -> tuple[str, str, Any, common.BlockShape, Any, float]:
    """Device, dtype name, dtype, shape, the stack (eval) and its checked error."""
    from hwadvisor.trials.kit import blocks

    device = torch_device(ctx)
    dtype_name = common.compute_dtype(device)
    dtype = common.torch_dtype(dtype_name)
    shape = _shape(ctx, device, batch, seq_len)
    stack = blocks.build_stack(shape, device, dtype, seed=seed).eval()
    check_len = min(CHECK_CONTEXT, seq_len)
    err = max(check_cached_forward(stack, shape, device, dtype, min(batch, 2), check_len,
                                   new, seed + 10) for new in (1, min(DRAFT_TOKENS,
                                                                      check_len // 2)))
    return device, dtype_name, dtype, shape, stack, err


def _scaled(est: LogEstimate | None, factor: float,
            out: dict[str, tuple[tuple[float, float] | None, int]], name: str) -> float | None:
    """Factor x the estimate, its interval noted under name in out."""
    if est is None:
        return None
    ci = est.ci
    out[name] = ((ci[0] * factor, ci[1] * factor) if ci is not None else None, est.n)
    return est.value * factor


class _ServingTrial(common.GuardedTrial):
    """The shared guard: torch is all these trials need (they run on a CPU too)."""

    id = ""
    title = ""
    needs = "torch (a GPU for the workload's full widths; a CPU runs them small)"

    def body(self, ctx: TrialContext, started: float) -> TrialResult:
        """Check and time; see the module docstring."""
        return self._run(ctx, started)

    def _run(self, ctx: TrialContext, started: float) -> TrialResult:
        raise NotImplementedError


class ContinuousBatchingTrial(_ServingTrial):
    """Decode step at batch 1 against batch B: the tokens/s scaling batching relies on."""

    id = "continuous-batching"
    title = "Continuous batching: decode step time at batch 1 vs the workload's batch"

    def _run(self, ctx: TrialContext, started: float) -> TrialResult:
        import torch

        from hwadvisor.trials.kit.timing import Variant, paired

        wl_batch = ctx.workload.batch if ctx.workload is not None else 8
        batch = max(2, min(MAX_BATCH, wl_batch))
        if ctx.quick:
            batch = min(batch, 8)
        device = torch_device(ctx)
        ctx_len = _context_len(ctx, device)
        device, dtype_name, dtype, shape, stack, err = _setup(ctx, batch, ctx_len, seed=51)
        calls = {}
        for b in (1, batch):
            ks, vs = _caches(shape, b, ctx_len, device, dtype, seed=52 + b)
            gen = torch.Generator(device="cpu").manual_seed(60 + b)
            x = torch.randn(b, 1, shape.hidden_size, generator=gen).to(device, dtype)
            calls[b] = _decode_call(stack, x, ks, vs, _positions(ctx_len - 1, 1, device))
        params = {**shape.params(), "dtype": dtype_name, "context_len": ctx_len}
        one, many, ratio = paired(
            Variant("decode step batch 1", calls[1], {"batch": 1}),
            Variant(f"decode step batch {batch}", calls[batch], {"batch": batch}),
            device=device, budget_s=max(0.5, ctx.budget_s * 0.4), params=params)
        many.error = err
        intervals: dict[str, tuple[tuple[float, float] | None, int]] = {}
        factor = _scaled(ratio, float(batch), intervals, "throughput_speedup")
        effect: dict[str, float] = {}
        if factor is not None and one.median and many.median:
            effect = {"throughput_speedup": factor, "b1_step_ms": one.median * 1e3,
                      f"b{batch}_step_ms": many.median * 1e3,
                      "b1_tokens_per_s": 1.0 / one.median,
                      f"b{batch}_tokens_per_s": batch / many.median}
        summary = (f"decode step at context {ctx_len}: batch 1 {effect.get('b1_step_ms', 0):.3f}"
                   f" ms, batch {batch} {effect.get(f'b{batch}_step_ms', 0):.3f} ms: tokens/s "
                   f"x{effect.get('throughput_speedup', float('nan')):.2f}")
        return _finish(self.id, device, started, shape, err, dtype_name, [one, many], effect,
                       intervals, summary)


class SpeculativeVerifyTrial(_ServingTrial):
    """Forward of k draft tokens against one token: what verification costs."""

    id = "speculative-verify"
    title = "Speculative decoding: verifying k drafted tokens in one forward vs one token"

    def _run(self, ctx: TrialContext, started: float) -> TrialResult:
        import torch

        from hwadvisor.trials.kit.timing import Variant, paired

        batch = max(1, min(MAX_BATCH, ctx.workload.batch if ctx.workload is not None else 1))
        device = torch_device(ctx)
        ctx_len = _context_len(ctx, device)
        device, dtype_name, dtype, shape, stack, err = _setup(ctx, batch, ctx_len, seed=71)
        ks, vs = _caches(shape, batch, ctx_len, device, dtype, seed=72)
        gen = torch.Generator(device="cpu").manual_seed(73)
        x = torch.randn(batch, DRAFT_TOKENS, shape.hidden_size, generator=gen).to(device, dtype)
        one = _decode_call(stack, x[:, -1:], ks, vs, _positions(ctx_len - 1, 1, device))
        k_tok = _decode_call(stack, x, ks, vs,
                             _positions(ctx_len - DRAFT_TOKENS, DRAFT_TOKENS, device))
        params = {**shape.params(), "dtype": dtype_name, "context_len": ctx_len,
                  "draft_tokens": DRAFT_TOKENS}
        single, verify, ratio = paired(
            Variant("forward of 1 token", one, {"tokens": 1}),
            Variant(f"forward of {DRAFT_TOKENS} tokens", k_tok, {"tokens": DRAFT_TOKENS}),
            device=device, budget_s=max(0.5, ctx.budget_s * 0.4), params=params)
        verify.error = err
        intervals: dict[str, tuple[tuple[float, float] | None, int]] = {}
        effect: dict[str, float] = {}
        if ratio is not None:  # ratio = t(1) / t(k)
            cost = ratio.inverse()
            effect["verify_time_factor"] = cost.value
            intervals["verify_time_factor"] = (cost.ci, cost.n)
            effect["speedup"] = _scaled(ratio, ACCEPTED_TOKENS, intervals, "speedup") or 0.0
        summary = (f"batch {batch}, context {ctx_len}: a forward of {DRAFT_TOKENS} tokens costs "
                   f"x{effect.get('verify_time_factor', float('nan')):.2f} of one; with "
                   f"{ACCEPTED_TOKENS} accepted tokens per forward (the rule's assumption) "
                   f"decode runs x{effect.get('speedup', float('nan')):.2f}")
        return _finish(self.id, device, started, shape, err, dtype_name, [single, verify],
                       effect, intervals, summary)


class PrefixReuseTrial(_ServingTrial):
    """Prefill of the uncached suffix after a cached prefix vs prefill of the whole prompt."""

    id = "prefix-reuse"
    title = "Prefix caching: prefill of the uncached suffix vs the whole prompt"

    def _run(self, ctx: TrialContext, started: float) -> TrialResult:
        import torch

        from hwadvisor.trials.kit.timing import Variant, paired

        device = torch_device(ctx)
        wl = ctx.workload
        if ctx.quick or not device.startswith("cuda"):
            prompt, batch = 128, 1
        else:
            prompt = max(32, min(MAX_CONTEXT, wl.prompt_len if wl is not None else 2048))
            batch = max(1, min(wl.batch if wl is not None else 1, MAX_PREFILL_TOKENS // prompt))
        prefix = int(prompt * PREFIX_SHARE)
        suffix = prompt - prefix
        device, dtype_name, dtype, shape, stack, err = _setup(ctx, batch, prompt, seed=81)
        ks, vs = _caches(shape, batch, prompt, device, dtype, seed=82)
        gen = torch.Generator(device="cpu").manual_seed(83)
        x = torch.randn(batch, prompt, shape.hidden_size, generator=gen).to(device, dtype)

        def whole(_i: int) -> Any:
            with torch.no_grad():
                return stack(x)

        cached = _decode_call(stack, x[:, prefix:], ks, vs, _positions(prefix, suffix, device))
        params = {**shape.params(), "dtype": dtype_name, "prompt_len": prompt,
                  "cached_prefix": prefix}
        full, part, ratio = paired(
            Variant(f"prefill of {prompt} tokens", whole, {"tokens": prompt}),
            Variant(f"prefill of {suffix} tokens after a cached {prefix}", cached,
                    {"tokens": suffix}),
            device=device, budget_s=max(0.5, ctx.budget_s * 0.4), params=params)
        part.error = err
        intervals: dict[str, tuple[tuple[float, float] | None, int]] = {}
        effect: dict[str, float] = {}
        value = _scaled(ratio, 1.0, intervals, "speedup")
        if value is not None and full.median and part.median:
            effect = {"speedup": value, "full_prefill_ms": full.median * 1e3,
                      "suffix_prefill_ms": part.median * 1e3}
        summary = (f"batch {batch} x prompt {prompt}, {PREFIX_SHARE:.0%} cached: prefill "
                   f"{effect.get('full_prefill_ms', 0):.2f} -> "
                   f"{effect.get('suffix_prefill_ms', 0):.2f} ms "
                   f"(x{effect.get('speedup', float('nan')):.2f})")
        return _finish(self.id, device, started, shape, err, dtype_name, [full, part], effect,
                       intervals, summary)
