"""INT4 weight-only helpers: group quantization, packing and the matmul, across torch versions.

Layout the kernels expect (gpt-fast / torchao `groupwise_affine_quantize_tensor`, torch >= 2.5):
- per group of `group` input columns: scale = (max - min) / 15, zero = min + 8 * scale, and
  q = round((w - min) / scale) clamped to 0..15, so w ~= (q - 8) * scale + zero;
- scales_and_zeros: (K / group, N, 2) bf16, [..., 0] = scale, [..., 1] = zero;
- CUDA: torch.ops.aten._convert_weight_to_int4pack(uint8 (N, K/2), inner_k_tiles), the uint8
  holding two values (even column in the high nibble); torch < 2.5 took int32 (N, K) instead;
- CPU: torch.ops.aten._convert_weight_to_int4pack_for_cpu(int32 (N, K), inner_k_tiles) and
  _weight_int4pack_mm_for_cpu (torch >= 2.6); older CPU builds used the plain names.
"""

from __future__ import annotations

from typing import Any

GROUP_SIZE = 128
INNER_K_TILES = 8  # K must be a multiple of inner_k_tiles * 16 for the CUDA packer
INT4_MIN_CC = (8, 0)


def quantize_int4(w: Any, group: int = GROUP_SIZE) -> tuple[Any, Any, Any]:
    """(q int32 (N, K) in 0..15, scales (N, K/group), zeros (N, K/group)), both bf16."""
    import torch

    n, k = w.shape
    grouped = w.float().reshape(-1, group)
    max_val = grouped.amax(dim=1, keepdim=True)
    min_val = grouped.amin(dim=1, keepdim=True)
    scales = ((max_val - min_val).clamp(min=1e-6) / 15).to(torch.bfloat16)
    zeros = (min_val + scales.float() * 8).to(torch.bfloat16)
    # Use the rounded (bf16) scale and zero so the kernel and the reference dequantize alike.
    low = zeros.float() - scales.float() * 8
    q = grouped.sub(low).div(scales.float()).round().clamp(0, 15).to(torch.int32)
    return q.reshape(n, k), scales.reshape(n, -1), zeros.reshape(n, -1)


def dequantize_int4(q: Any, scales: Any, zeros: Any, group: int = GROUP_SIZE) -> Any:
    """Return the weight the int4 kernel computes with: (q - 8) * scale + zero, float32 (N, K)."""
    n, k = q.shape
    grouped = q.reshape(-1, group).float()
    s = scales.reshape(-1, 1).float()
    z = zeros.reshape(-1, 1).float()
    return ((grouped - 8) * s + z).reshape(n, k)


def scales_and_zeros(scales: Any, zeros: Any) -> Any:
    """Pack (N, K/group) scales and zeros into the (K/group, N, 2) bf16 tensor the kernel wants."""
    import torch

    packed = torch.stack([scales, zeros], dim=2)  # (N, K/group, 2)
    return packed.transpose(0, 1).contiguous().to(torch.bfloat16)


def pack_nibbles(q: Any) -> Any:
    """int32 (N, K) in 0..15 -> uint8 (N, K/2), even column in the high nibble."""
    import torch

    return ((q[:, ::2] << 4) | q[:, 1::2]).to(torch.uint8)


def unpack_nibbles(packed: Any) -> Any:
    """Inverse of pack_nibbles: uint8 (N, K/2) -> int32 (N, K)."""
    import torch

    hi = (packed.to(torch.int32) >> 4) & 0xF
    lo = packed.to(torch.int32) & 0xF
    return torch.stack([hi, lo], dim=2).reshape(packed.shape[0], -1)


def pack_weight(q: Any, device: str) -> Any:
    """Pack an int32 (N, K) 0..15 weight for this device's int4 kernel (tries each known API)."""
    import torch

    aten = torch.ops.aten
    errors: list[str] = []
    if device.startswith("cuda"):
        attempts = [("uint8", lambda: aten._convert_weight_to_int4pack(pack_nibbles(q),
                                                                       INNER_K_TILES)),
                    ("int32", lambda: aten._convert_weight_to_int4pack(q, INNER_K_TILES))]
    else:
        attempts = []
        if hasattr(aten, "_convert_weight_to_int4pack_for_cpu"):
            attempts.append(("cpu int32", lambda: aten._convert_weight_to_int4pack_for_cpu(
                q, INNER_K_TILES)))
        attempts.append(("int32", lambda: aten._convert_weight_to_int4pack(q, INNER_K_TILES)))
    for name, attempt in attempts:
        try:
            return attempt()
        except (RuntimeError, TypeError) as exc:
            errors.append(f"{name}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}")
    raise RuntimeError("no int4 packing API worked: " + "; ".join(errors))


def int4_mm(x: Any, packed: Any, sz: Any, device: str, group: int = GROUP_SIZE) -> Any:
    """X (M, K) bf16 @ dequant(W).T with torch's int4 weight-only kernel for this device."""
    import torch

    aten = torch.ops.aten
    if not device.startswith("cuda") and hasattr(aten, "_weight_int4pack_mm_for_cpu"):
        return aten._weight_int4pack_mm_for_cpu(x, packed, group, sz)
    return aten._weight_int4pack_mm(x, packed, group, sz)
