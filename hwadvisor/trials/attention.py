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

Effect keys:
- speedup: MATH median time / the fastest correct backend's median time
- speedup_<backend> (e.g. speedup_flash_attention): MATH time / that backend's time
- <backend>_ms: each backend's median in milliseconds
The best backend's name is in the summary and in every measurement's params (best_backend).
"""

from __future__ import annotations

import warnings
from typing import Any

from hwadvisor.models import Measurement, TrialResult
from hwadvisor.trials import _model_common as common
from hwadvisor.trials.base import TrialContext, torch_device, torch_missing

TRIAL_ID = "attention-backends"
BACKENDS = ("FLASH_ATTENTION", "CUDNN_ATTENTION", "EFFICIENT_ATTENTION", "MATH")
MAX_SEQ = 4096
MAX_TOKENS = 8192  # batch x seq; math at 64 heads x 4096^2 scores is ~2 GiB per bf16 copy


class AttentionBackendsTrial:
    """SDPA backends compared at the workload's attention shape."""

    id = TRIAL_ID
    title = "Attention backends: flash / cuDNN / memory-efficient / math SDPA"
    needs = "torch >= 2.3 (torch.nn.attention.sdpa_kernel); a CUDA GPU for the fused kernels"

    def unsupported_reason(self, ctx: TrialContext) -> str | None:
        """Need torch with torch.nn.attention."""
        missing = torch_missing()
        if missing:
            return missing
        try:
            from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: F401
        except ImportError:
            import torch

            return (f"torch {torch.__version__} has no torch.nn.attention.sdpa_kernel "
                    "(needs >= 2.3)")
        return None

    def run(self, ctx: TrialContext) -> TrialResult:
        """Run every backend; see the module docstring."""
        return common.run_guarded(self, ctx, _run)


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
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from hwadvisor.trials.timing import bench, rel_error

    device = torch_device(ctx)
    dtype_name = common.compute_dtype(device)
    dtype = common.torch_dtype(dtype_name)
    shape = _shape(ctx, device)
    b, h, s, d = shape.batch, shape.num_heads, shape.seq_len, shape.head_dim
    gen = torch.Generator(device="cpu").manual_seed(21)
    q, k, v = (torch.randn(b, h, s, d, generator=gen).to(device, dtype) for _ in range(3))

    # Reference: the math backend on upcast inputs (float64 on a CPU, fp32 on a GPU).
    ref_dtype = torch.float32 if device.startswith("cuda") else torch.float64
    ref, why = _call(SDPBackend.MATH, q.to(ref_dtype), k.to(ref_dtype), v.to(ref_dtype))
    if ref is None:
        raise RuntimeError(f"math reference failed: {why}")

    tol = common.tolerance(dtype_name)
    base_params: dict[str, float | int | str] = {
        "batch": b, "heads": h, "seq_len": s, "head_dim": d, "dtype": dtype_name,
        "causal": 1, "source": shape.source,
    }
    repeats = 5 if ctx.quick else 15
    per_backend_s = max(0.2, ctx.budget_s / (2 * len(BACKENDS)))
    results: dict[str, Measurement] = {}
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
        with sdpa_kernel([backend]):  # pinned once, so the timed call is the kernel alone
            m = bench(lambda _i: F.scaled_dot_product_attention(q, k, v, is_causal=True),
                      device=device, label=name.lower(), repeats=repeats, warmup=2,
                      budget_s=per_backend_s,
                      params={**base_params, "status": "ok" if err <= tol else "wrong"})
        m.error = err
        results[name] = m
    del ref
    return _result(ctx, device, shape, dtype_name, tol, results, started)


def _unsupported(name: str, why: str, params: dict[str, float | int | str]) -> Measurement:
    return Measurement(label=name.lower(), params={**params, "status": "unsupported",
                                                   "reason": why})


def _result(ctx: TrialContext, device: str, shape: common.BlockShape, dtype_name: str, tol: float,
            results: dict[str, Measurement], started: float) -> TrialResult:
    good = {n: m for n, m in results.items()
            if m.median and m.error is not None and m.error <= tol}
    wrong = [n for n, m in results.items() if m.median and (m.error is None or m.error > tol)]
    math_m = results.get("MATH")
    effect: dict[str, float] = {}
    best = min(good, key=lambda n: good[n].median or float("inf")) if good else None
    for n, m in good.items():
        effect[f"{n.lower()}_ms"] = (m.median or 0.0) * 1e3
        if math_m is not None and math_m.median and n != "MATH":
            effect[f"speedup_{n.lower()}"] = math_m.median / (m.median or 1.0)
    if best and math_m is not None and math_m.median and "MATH" in good:
        effect["speedup"] = math_m.median / (good[best].median or 1.0)
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
        summary=summary,
        max_error=max_error if max_error is not None and max_error != float("inf") else None,
    )
