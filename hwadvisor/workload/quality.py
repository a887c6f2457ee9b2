"""The quality ladder: how much a weight or KV-cache format gives up, against --quality.

Ranks: 0 lossless (the checkpoint's own bf16/fp16/fp32), 1 fp8, 2 int8 and the 5-8-bit GGUF
types, 3 the 4-bit formats. The --quality budget names the lowest rank a plan may pick for
speed (lossless 0, fp8 1, int8 2, int4 3); the rules' plan search and the serving search read
the same ladder.
"""

from __future__ import annotations

PRECISION_RANK: dict[str, int] = {
    "fp32": 0, "tf32": 0, "bf16": 0, "fp16": 0, "fp8": 1,
    "int8": 2, "q8_0": 2, "mlx-8bit": 2, "q6_k": 2, "q5_k_m": 2,
    "int4": 3, "fp4": 3, "nf4": 3, "q4_0": 3, "q4_k_m": 3, "iq4_xs": 3, "mlx-4bit": 3,
}
BUDGET_RANK: dict[str, int] = {"lossless": 0, "fp8": 1, "int8": 2, "int4": 3}


def rank(dtype: str) -> int:
    """Return how much a format gives up (0 for one the ladder does not know)."""
    return PRECISION_RANK.get(dtype, 0)


def within(dtype: str, own: str, quality: str) -> bool:
    """Tell whether a format may be picked for speed: the checkpoint's own, or within budget."""
    return rank(dtype) <= max(rank(own), BUDGET_RANK[quality])
