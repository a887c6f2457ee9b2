"""Trial `kv-cache-quantization`: bytes saved and attention error with an FP8 (e4m3) KV cache.

K and V of the workload's KV heads x context (capped) are quantised to torch.float8_e4m3fn
with one fp32 scale per KV head (scale = amax / 448, the e4m3 maximum) and, for comparison,
one scale per tensor; they are dequantised for attention. The attention output (queries of
the last tokens against the whole cache, computed in fp32) with the FP8 cache is compared to
the same attention with the bf16 cache, so the error is the quantisation's alone.

Data: synthetic, never zero: Gaussian K/V scaled per head (log-normal spread), with a few key
channels 4x larger, the outlier-channel pattern LLM keys show (KIVI, Liu et al. 2024, sec. 3).
e4m3 keeps 3 mantissa bits, so each element carries about 2-3% relative rounding error
whatever the scale; the scale only sets the range, which is why per-head and per-tensor scales
land close (vLLM's FP8 KV cache uses per-tensor scales). For scale the trial also reports the
bf16 cache's own error against an fp32 cache. Real activations may quantise better or worse.

Runs on a CPU too (float8 dtypes exist there since torch 2.1).

Speed, on GPUs with FP8 (NVIDIA cc >= 8.9, AMD MI300+): one decode step's attention (the
workload's batch, all query heads against the cache) with the bf16 cache against the same with
the FP8 cache, timed interleaved (timing.paired). Plain torch has no attention kernel that reads
an FP8 cache, so the FP8 side dequantises the cache to bf16 (one elementwise pass) and runs the
same SDPA: the result names that kernel, and the advice (vLLM's FP8 KV cache, FlashInfer, FA3
FP8) assumes a fused one that reads the FP8 bytes directly. Without FP8 the speed part is left
out, with the reason.

Effect keys:
- memory_factor: FP8 bytes incl. per-head scales / bf16 bytes (about 0.5)
- memory_factor_per_tensor: the same with one scale per tensor
- output_rel_error: ||out_fp8 - out_bf16|| / ||out_bf16||, per-head scales (also max_error)
- output_rel_error_per_tensor: the same with one scale per tensor
- k_rel_error, v_rel_error: the cache's own quantisation error (per-head scales)
- bf16_output_rel_error: the bf16 cache's output error against an fp32 cache (the floor)
- speedup (FP8 GPUs only): bf16-cache attention time / FP8-cache attention time, with its
  interval; bf16_attention_ms, fp8_attention_ms the medians
"""

from __future__ import annotations

from typing import Any

from hwadvisor.models import Measurement, TrialResult
from hwadvisor.trials.base import Requires, TrialContext, has_fp8, torch_device
from hwadvisor.trials.kit import common

TRIAL_ID = "kv-cache-quantization"
MAX_CONTEXT = 8192
MAX_DECODE_BATCH = 64
SPEED_KERNEL = ("torch SDPA on a bf16 copy dequantised from the FP8 cache each step "
                "(torch has no attention kernel that reads FP8 K/V)")
QUERIES = 16  # the last tokens' queries: a few decode steps' worth


class KvCacheQuantizationTrial(common.GuardedTrial):
    """FP8 KV cache: memory factor and attention output error against a bf16 cache."""

    id = TRIAL_ID
    title = "FP8 KV cache: bytes saved and attention output error"
    needs = "torch >= 2.1 (torch.float8_e4m3fn); any device"

    requires = Requires(torch_features=(("float8_e4m3fn", "needs >= 2.1"),))

    def body(self, ctx: TrialContext, started: float) -> TrialResult:
        """Quantise, attend, compare; see the module docstring."""
        return _run(ctx, started)


def quantize_fp8(t: Any, per_head: bool) -> tuple[Any, Any]:
    """Quantise t (B, H, S, D) to (float8_e4m3fn, fp32 scales (B, H, 1, 1) or a scalar)."""
    import torch

    fmax = torch.finfo(torch.float8_e4m3fn).max  # 448
    tf = t.float()
    amax = tf.abs().amax(dim=(2, 3), keepdim=True) if per_head else tf.abs().amax()
    scale = (amax / fmax).clamp(min=1e-12)
    q = (tf / scale).clamp(-fmax, fmax).to(torch.float8_e4m3fn)
    return q, scale


def dequantize_fp8(q: Any, scale: Any) -> Any:
    """Return the fp32 values a quantised cache stands for."""
    return q.float() * scale


def _synthetic_kv(b: int, h: int, s: int, d: int, device: str, seed: int) -> tuple[Any, Any]:
    import torch

    gen = torch.Generator(device="cpu").manual_seed(seed)
    head_scale = torch.exp(0.5 * torch.randn(1, h, 1, 1, generator=gen))
    channel = torch.ones(1, 1, 1, d)
    outliers = torch.randperm(d, generator=gen)[: max(1, d // 32)]
    channel[..., outliers] = 4.0  # a few key channels several times larger
    k = torch.randn(b, h, s, d, generator=gen) * head_scale * channel
    v = torch.randn(b, h, s, d, generator=gen) * head_scale
    return k.to(device), v.to(device)


def _attend(q: Any, k: Any, v: Any, group: int) -> Any:
    """fp32 attention of q (B, H, Q, D) over k, v (B, Hkv, S, D)."""
    import torch.nn.functional as F

    from hwadvisor.trials.kit.blocks import expand_kv

    return F.scaled_dot_product_attention(q.float(), expand_kv(k.float(), group),
                                          expand_kv(v.float(), group))


def _shape(ctx: TrialContext) -> tuple[int, int, int, int, int, str]:
    """(batch, q heads, kv heads, context, head_dim, source)."""
    widths, source = common.spec_of(ctx.workload)
    heads, kv, d = widths["num_heads"], widths["num_kv_heads"], widths["head_dim"]
    if ctx.quick:
        group = max(1, heads // kv)
        return 1, 2 * group, 2, 512, 64, source
    wl = ctx.workload
    s = 4096 if wl is None else max(QUERIES, min(MAX_CONTEXT, wl.prompt_len + wl.gen_len))
    return 1, heads, kv, s, d, source


def _run(ctx: TrialContext, started: float) -> TrialResult:
    import torch

    from hwadvisor.trials.kit.timing import rel_error

    device = torch_device(ctx)
    b, h, hkv, s, d, source = _shape(ctx)
    group = max(1, h // hkv)
    k32, v32 = _synthetic_kv(b, hkv, s, d, device, seed=41)
    k, v = k32.to(torch.bfloat16), v32.to(torch.bfloat16)
    gen = torch.Generator(device="cpu").manual_seed(42)
    q = torch.randn(b, h, QUERIES, d, generator=gen).to(device, torch.bfloat16)
    ref = _attend(q, k, v, group)
    bf16_err = rel_error(ref, _attend(q, k32, v32, group))
    del k32, v32
    bf16_bytes = (k.numel() + v.numel()) * k.element_size()

    measurements = [Measurement(label="bf16 KV cache (error vs an fp32 cache)", unit="bytes",
                                value=float(bf16_bytes), value_unit="bytes",
                                params={"kv_heads": hkv, "context_len": s, "head_dim": d})]
    figures: dict[str, dict[str, float]] = {}
    for per_head in (True, False):
        kq, ks = quantize_fp8(k, per_head)
        vq, vs = quantize_fp8(v, per_head)
        fp8_bytes = (kq.numel() + vq.numel()) * kq.element_size() + \
            (ks.numel() + vs.numel()) * ks.element_size()
        kd, vd = dequantize_fp8(kq, ks), dequantize_fp8(vq, vs)
        out = _attend(q, kd, vd, group)
        name = "per_head" if per_head else "per_tensor"
        figures[name] = {
            "bytes": float(fp8_bytes),
            "out_err": rel_error(out, ref),
            "k_err": rel_error(kd, k.float()),
            "v_err": rel_error(vd, v.float()),
        }
        measurements.append(Measurement(
            label=f"fp8 e4m3 KV cache, {name.replace('_', '-')} scales", unit="bytes",
            value=float(fp8_bytes), value_unit="bytes", error=figures[name]["out_err"],
            params={"kv_heads": hkv, "context_len": s, "head_dim": d, "scales": name,
                    "k_rel_error": figures[name]["k_err"], "v_rel_error": figures[name]["v_err"]},
        ))
        del kq, vq, kd, vd, out
    measurements[0].error = bf16_err
    figures["bf16"] = {"out_err": bf16_err}
    del k, v, q, ref
    speed: dict[str, Any] = {}
    if has_fp8(device):
        speed = _decode_speed(ctx, device, hkv, h, s, d)
        measurements.extend(speed.pop("measurements"))
    else:
        speed["skipped"] = "the speed part needs a GPU with FP8 (NVIDIA cc >= 8.9, AMD MI300+)"
    return _result(device, (b, h, hkv, s, d, source), bf16_bytes, figures, measurements, started,
                   speed)


def _decode_speed(ctx: TrialContext, device: str, hkv: int, h: int, s: int,
                  d: int) -> dict[str, Any]:
    """Time one decode step's attention over a bf16 cache against an FP8 cache (dequantised)."""
    import torch
    import torch.nn.functional as F

    from hwadvisor.trials.kit.blocks import expand_kv
    from hwadvisor.trials.kit.timing import Variant, paired, rel_error

    batch = max(1, min(MAX_DECODE_BATCH, ctx.workload.batch if ctx.workload else 1))
    group = max(1, h // hkv)
    # Drawn on the GPU (batch x context x heads can be billions of values): the timing does not
    # depend on the outlier pattern the accuracy check uses.
    gen_dev = torch.Generator(device=device).manual_seed(43)
    k = torch.randn(batch, hkv, s, d, device=device, generator=gen_dev).to(torch.bfloat16)
    v = torch.randn(batch, hkv, s, d, device=device, generator=gen_dev).to(torch.bfloat16)
    kq, ks = quantize_fp8(k, per_head=False)
    vq, vs = quantize_fp8(v, per_head=False)
    gen = torch.Generator(device="cpu").manual_seed(44)
    q = torch.randn(batch, h, 1, d, generator=gen).to(device, torch.bfloat16)
    kd = torch.empty_like(k)
    vd = torch.empty_like(v)

    def bf16_step(_i: int) -> Any:
        return F.scaled_dot_product_attention(q, expand_kv(k, group), expand_kv(v, group))

    def fp8_step(_i: int) -> Any:
        torch.mul(kq.to(torch.bfloat16), ks.to(torch.bfloat16), out=kd)
        torch.mul(vq.to(torch.bfloat16), vs.to(torch.bfloat16), out=vd)
        return F.scaled_dot_product_attention(q, expand_kv(kd, group), expand_kv(vd, group))

    err = rel_error(fp8_step(0).float(), bf16_step(0).float())
    params: dict[str, float | int | str] = {"batch": batch, "kv_heads": hkv, "heads": h,
                                            "context_len": s, "head_dim": d}
    base, new, ratio = paired(
        Variant("decode attention, bf16 KV cache", bf16_step, {"cache": "bf16"}),
        Variant("decode attention, fp8 KV cache", fp8_step,
                {"cache": "fp8 e4m3, per-tensor scale", "kernel": SPEED_KERNEL}),
        device=device, budget_s=max(0.5, ctx.budget_s * 0.4), params=params)
    new.error = err
    return {"measurements": [base, new], "ratio": ratio,
            "bf16_ms": (base.median or 0) * 1e3, "fp8_ms": (new.median or 0) * 1e3,
            "error": err}


def _result(device: str, shape: tuple[int, int, int, int, int, str], bf16_bytes: int,
            figures: dict[str, dict[str, float]], measurements: list[Measurement],
            started: float, speed: dict[str, Any] | None = None) -> TrialResult:
    ph, pt = figures["per_head"], figures["per_tensor"]
    effect = {
        "memory_factor": ph["bytes"] / bf16_bytes,
        "memory_factor_per_tensor": pt["bytes"] / bf16_bytes,
        "output_rel_error": ph["out_err"],
        "output_rel_error_per_tensor": pt["out_err"],
        "k_rel_error": ph["k_err"],
        "v_rel_error": ph["v_err"],
        "bf16_output_rel_error": figures["bf16"]["out_err"],
    }
    finite = all(v == v and v != float("inf") for v in effect.values())
    # Counted bytes: exact, so their interval is the point itself.
    intervals: dict[str, tuple[tuple[float, float] | None, int]] = {
        key: ((effect[key], effect[key]), 1)
        for key in ("memory_factor", "memory_factor_per_tensor")}
    speed = speed or {}
    ratio = speed.get("ratio")
    speed_note = f"; speed: {speed['skipped']}" if speed.get("skipped") else ""
    if ratio is not None:
        effect.update({"speedup": ratio.value, "bf16_attention_ms": speed["bf16_ms"],
                       "fp8_attention_ms": speed["fp8_ms"]})
        intervals["speedup"] = (ratio.ci, ratio.n)
        speed_note = (f"; decode attention bf16 {speed['bf16_ms']:.3f} ms, fp8 "
                      f"{speed['fp8_ms']:.3f} ms (x{ratio.value:.2f}, dequantised in torch)")
    b, h, hkv, s, d, source = shape
    summary = (
        f"{hkv} KV heads x {s} tokens x head_dim {d} ({source}): fp8 cache x"
        f"{effect['memory_factor']:.3f} bytes, attention output error {ph['out_err']:.1e} "
        f"(per-head scales) / {pt['out_err']:.1e} (one scale); bf16 cache's own error "
        f"{effect['bf16_output_rel_error']:.1e}" + speed_note
    )
    return common.finished(
        TRIAL_ID, device, started,
        ok=finite,
        reason=None if finite else "non-finite error: the FP8 cache produced NaN or Inf",
        measurements=measurements,
        effect=effect if finite else {},
        intervals=intervals if finite else None,
        summary=summary,
        kernel=SPEED_KERNEL if ratio is not None else None,
        max_error=ph["out_err"] if finite else None,
    )
