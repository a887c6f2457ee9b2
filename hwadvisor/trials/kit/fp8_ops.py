"""FP8 helpers shared by matmul-peak and fp8-gemm: scaling, quantizing, and torch._scaled_mm.

torch._scaled_mm(a, b, scale_a, scale_b, out_dtype=..., use_fast_accum=...) wants a row-major
(M, K) and a column-major (K, N) operand: pass w.t() of a row-major (N, K) weight. M, K, N
must be multiples of 16. Per-tensor scales are 0-dim float32 tensors; row-wise scales are
(M, 1) for a and (1, N) for b, float32, and need a bf16 output. Older torch returned a tuple
(out, amax); newer returns the tensor.
"""

from __future__ import annotations

from typing import Any

E4M3_MAX = 448.0  # largest finite float8_e4m3fn value (OCP FP8 spec)
FP8_MIN_CC = (8, 9)  # Ada (8.9) and Hopper (9.0) have FP8 tensor cores
# MI300 (gfx942) computes in the FNUZ variants of FP8 (AMD CDNA3 ISA; hipBLASLt takes
# float8_e4m3fnuz there, max 240); MI350 and NVIDIA use the OCP e4m3fn format.
FNUZ_ARCHS = ("gfx942",)


def fp8_dtype(device: str) -> Any:
    """Return the e4m3 dtype the device's FP8 GEMM takes: float8_e4m3fnuz on MI300, else e4m3fn."""
    import torch

    from hwadvisor.trials.base import rocm_arch

    arch = rocm_arch(device)
    if arch in FNUZ_ARCHS and hasattr(torch, "float8_e4m3fnuz"):
        return torch.float8_e4m3fnuz
    return torch.float8_e4m3fn


def quantize_fp8(x: Any, rowwise: bool, dtype: Any = None) -> tuple[Any, Any]:
    """(x_fp8, scale) with x ~= x_fp8 * scale; scale per row (shape (rows, 1)) or per tensor."""
    import torch

    dtype = dtype or torch.float8_e4m3fn
    fmax = float(torch.finfo(dtype).max)
    xf = x.float()
    if rowwise:
        amax = xf.abs().amax(dim=-1, keepdim=True)
    else:
        amax = xf.abs().amax()
    scale = (amax / fmax).clamp(min=1e-12).float()
    q = (xf / scale).clamp(-fmax, fmax).to(dtype)
    return q, scale


def scaled_mm(a_q: Any, w_q: Any, scale_a: Any, scale_w: Any, rowwise: bool,
              fast_accum: bool = True, out: Any = None) -> Any:
    """a_q (M, K) @ w_q(N, K).T with scales; rowwise uses scale_w (N, 1) -> (1, N), bf16 output."""
    import torch

    scale_b = scale_w.reshape(1, -1) if rowwise else scale_w
    kwargs: dict[str, Any] = {"scale_a": scale_a, "scale_b": scale_b,
                              "out_dtype": torch.bfloat16, "use_fast_accum": fast_accum}
    if out is not None:
        kwargs["out"] = out
    result = torch._scaled_mm(a_q, w_q.t(), **kwargs)
    return result[0] if isinstance(result, tuple) else result


def dequantized(q: Any, scale: Any) -> Any:
    """Q * scale in float32 (the exact operand the fp8 kernel sees)."""
    return q.float() * scale
