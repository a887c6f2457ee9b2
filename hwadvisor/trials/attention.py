"""Trial `attention-backends`: each scaled_dot_product_attention backend at the workload's shape.

torch.nn.attention.sdpa_kernel pins one backend at a time (FLASH_ATTENTION, CUDNN_ATTENTION,
EFFICIENT_ATTENTION, MATH) for causal attention at the workload's head_dim, query heads and
sequence length (batch x seq capped so the math backend, which materialises the S x S scores,
fits and the trial stays short). GQA's KV heads are repeated to the query heads first, so every
backend sees the same MHA-shaped call. A backend that refuses the shape is reported on its own
as unsupported (the RuntimeError text and the warnings that explain it); the others still run.

Correctness: each backend's output against a higher-precision math reference (fp32 on a GPU,
float64 on a CPU) on the same random inputs.

Runs on a CPU too (bf16 on a GPU, fp32 on a CPU): the CPU has MATH and a flash kernel.

The backends that ran correctly are timed interleaved (timing.interleaved, MATH the baseline)
until every ratio's 95% interval is within ±5% or the budget is spent. On Apple's Metal GPU
(MPS) the trial runs in fp16 with the backends torch offers there.

Effect keys:
- speedup: MATH time / the fastest correct backend's time, with its interval
- speedup_<backend> (e.g. speedup_flash_attention): MATH time / that backend's time, with its
  interval
- <backend>_ms: each backend's median in milliseconds
The best backend's name is in the summary and in every measurement's params (best_backend).
"""

from __future__ import annotations

import warnings
from typing import Any

from hwadvisor.models import Measurement, TrialResult
from hwadvisor.trials.base import Requires, TrialContext, torch_device
from hwadvisor.trials.kit import common

TRIAL_ID = "attention-backends"
BACKENDS = ("FLASH_ATTENTION", "CUDNN_ATTENTION", "EFFICIENT_ATTENTION", "MATH")
MAX_SEQ = 4096
MAX_TOKENS = 8192  # batch x seq; math at 64 heads x 4096^2 scores is ~2 GiB per bf16 copy


class AttentionBackendsTrial(common.GuardedTrial):
    """SDPA backends compared at the workload's attention shape."""

    id = TRIAL_ID
    title = "Attention backends: flash / cuDNN / memory-efficient / math SDPA"
    needs = "torch >= 2.3 (torch.nn.attention.sdpa_kernel); a CUDA GPU for the fused kernels"

    requires = Requires(torch_features=(("nn.attention.sdpa_kernel", "needs >= 2.3"),))

    def body(self, ctx: TrialContext, started: float) -> TrialResult:
        """Run every backend; see the module docstring."""
        return _run(ctx, started)


def _shape(ctx: TrialContext, device: str) -> common.BlockShape:
    wl = ctx.workload
    if ctx.quick or not device.startswith("cuda"):
        return common.scaled_shape(wl, max_heads=4, layers=1, batch=1, seq_len=256,
                                   quick_head_dim=None if not ctx.quick else 64)
    seq = min(MAX_SEQ, wl.prompt_len if wl is not None else 2048)
    batch = max(1, min(wl.batch if wl is not None else 1, MAX_TOKENS // seq))
    return common.scaled_shape(wl, max_heads=64, layers=1, batch=batch, seq_len=seq)


def _call(backend: Any, q: Any, k: Any, v: Any) -> tuple[Any, str]:
    """SDPA pinned to one backend; returns (output or None, why it refused)."""
    import torch.nn.functional as F
    from torch.nn.attention import sdpa_kernel

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with sdpa_kernel([backend]):
                return F.scaled_dot_product_attention(q, k, v, is_causal=True), ""
        except RuntimeError as exc:
            # torch explains each refusal in a UserWarning ("Flash attention requires ...").
            why = [str(w.message).strip() for w in caught]
            return None, "; ".join([str(exc).strip(), *why])[:1500]


def _run(ctx: TrialContext, started: float) -> TrialResult:
    import torch
    from torch.nn.attention import SDPBackend

    from hwadvisor.trials.kit.timing import rel_error

    device = torch_device(ctx, mps=True)
    dtype_name = common.compute_dtype(device)
    dtype = common.torch_dtype(dtype_name)
    shape = _shape(ctx, device)
    b, h, s, d = shape.batch, shape.num_heads, shape.seq_len, shape.head_dim
    gen = torch.Generator(device="cpu").manual_seed(21)
    q, k, v = (torch.randn(b, h, s, d, generator=gen).to(device, dtype) for _ in range(3))

    # Reference: the math backend on upcast inputs (float64 on a CPU, fp32 on a GPU; MPS has
    # no float64).
    ref_dtype = torch.float64 if device.startswith("cpu") else torch.float32
    ref, why = _call(SDPBackend.MATH, q.to(ref_dtype), k.to(ref_dtype), v.to(ref_dtype))
    if ref is None:
        raise RuntimeError(f"math reference failed: {why}")

    tol = common.tolerance(dtype_name)
    base_params: dict[str, float | int | str] = {
        "batch": b, "heads": h, "seq_len": s, "head_dim": d, "dtype": dtype_name,
        "causal": 1, "source": shape.source,
    }
    results: dict[str, Measurement] = {}
    runnable: dict[str, tuple[Any, float]] = {}
    for name in BACKENDS:
        backend = getattr(SDPBackend, name, None)
        if backend is None:
            why = f"torch {torch.__version__} has no SDPBackend.{name}"
            results[name] = _unsupported(name, why, base_params)
            continue
        out, why = _call(backend, q, k, v)
        if out is None:
            results[name] = _unsupported(name, why, base_params)
            continue
        err = rel_error(out, ref)
        del out
        runnable[name] = (backend, err)
    del ref
    if runnable:
        results.update(_time_backends(runnable, q, k, v, device, base_params, tol,
                                      budget_s=max(0.4, ctx.budget_s * 0.6)))
    ordered = {n: results[n] for n in BACKENDS if n in results}
    return _result(ctx, device, shape, dtype_name, tol, ordered, started)


def _time_backends(runnable: dict[str, tuple[Any, float]], q: Any, k: Any, v: Any, device: str,
                   base_params: dict[str, float | int | str], tol: float,
                   budget_s: float) -> dict[str, Measurement]:
    """Time the backends that ran interleaved, MATH first (the baseline of every ratio).

    Each call pins its backend (sdpa_kernel costs microseconds of host time, far under the
    kernels' time); a backend with a wrong output is timed too but never counts as best.
    """
    import torch.nn.functional as F
    from torch.nn.attention import sdpa_kernel

    from hwadvisor.trials.kit.timing import Variant, interleaved

    def call_for(backend: Any) -> Any:
        def call(_i: int) -> Any:
            with sdpa_kernel([backend]):
                return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return call

    names = sorted(runnable, key=lambda n: n != "MATH")  # MATH first when it ran
    variants = [Variant(n.lower(), call_for(runnable[n][0]),
                        {**base_params, "status": "ok" if runnable[n][1] <= tol else "wrong"})
                for n in names]
    timed = interleaved(variants[0], *variants[1:], device=device, budget_s=budget_s, warmup=2)
    found: dict[str, Measurement] = {}
    for name, m in zip(names, timed.measurements, strict=True):
        m.error = runnable[name][1]
        found[name] = m
    return found


def _unsupported(name: str, why: str, params: dict[str, float | int | str]) -> Measurement:
    return Measurement(label=name.lower(), params={**params, "status": "unsupported",
                                                   "reason": why})


def _result(ctx: TrialContext, device: str, shape: common.BlockShape, dtype_name: str, tol: float,
            results: dict[str, Measurement], started: float) -> TrialResult:
    good = {n: m for n, m in results.items()
            if m.median and m.error is not None and m.error <= tol}
    wrong = [n for n, m in results.items() if m.median and (m.error is None or m.error > tol)]
    from hwadvisor.models.stats import ratio_estimate

    math_m = results.get("MATH")
    effect: dict[str, float] = {}
    intervals: dict[str, tuple[tuple[float, float] | None, int]] = {}
    best = min(good, key=lambda n: good[n].median or float("inf")) if good else None
    for n, m in good.items():
        effect[f"{n.lower()}_ms"] = (m.median or 0.0) * 1e3
        if math_m is not None and math_m.median and n != "MATH":
            est = ratio_estimate(math_m.samples, m.samples)  # paired by round
            if est is not None:
                effect[f"speedup_{n.lower()}"] = est.value
                intervals[f"speedup_{n.lower()}"] = (est.ci, est.n)
    if best and math_m is not None and math_m.median and "MATH" in good:
        if best == "MATH":
            effect["speedup"] = 1.0
            intervals["speedup"] = ((1.0, 1.0), len(math_m.samples))
        elif f"speedup_{best.lower()}" in effect:
            effect["speedup"] = effect[f"speedup_{best.lower()}"]
            intervals["speedup"] = intervals[f"speedup_{best.lower()}"]
    for m in results.values():
        m.params["best_backend"] = best.lower() if best else "none"
    errors = [m.error for m in results.values() if m.error is not None]
    max_error = max(errors) if errors else None
    unsupported = [n.lower() for n, m in results.items() if m.params.get("status") == "unsupported"]
    summary = (
        f"{shape.batch}x{shape.num_heads} heads x {shape.seq_len} tokens, head_dim "
        f"{shape.head_dim}, {dtype_name}, causal: best {best.lower() if best else 'none'}"
        + (f" (x{effect['speedup']:.2f} vs math)" if "speedup" in effect else "")
        + (f"; unsupported here: {', '.join(unsupported)}" if unsupported else "")
        + (f"; WRONG output: {', '.join(w.lower() for w in wrong)}" if wrong else "")
    )
    reason = None
    if wrong:
        reason = f"backend output beyond tolerance {tol:.0e}: {', '.join(w.lower() for w in wrong)}"
    elif not good:
        reason = "no backend ran"
    return common.finished(
        TRIAL_ID, device, started,
        ok=bool(good) and not wrong,
        reason=reason,
        measurements=list(results.values()),
        effect=effect,
        intervals=intervals,
        summary=summary,
        max_error=max_error if max_error is not None and max_error != float("inf") else None,
    )
