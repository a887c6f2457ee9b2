"""The quality ladder: how much a weight or KV-cache format gives up, against --quality.

The budget names a loss class, not a number format, so an 8-bit format the hardware runs stays
within the default where FP8 units are missing (a 4090's Q8_0, a Mac's MLX 8-bit, an A100's
INT8). The classes, by measured loss against the 16-bit checkpoint:

- 0 lossless: the checkpoint's own bf16/fp16/fp32.
- 1 8-bit, near-lossless: FP8, INT8, Q8_0, MLX 8-bit. llama.cpp's own scoreboard on
  Llama-3-8B (tools/perplexity/README.md at 0c1e57098, KL divergence to FP16): q8_0 0.0014,
  ΔPPL +0.04%. Kurtic et al., "Give Me BF16 or Give Me Death? Accuracy-Performance Trade-Offs
  in LLM Quantization" (arXiv:2411.02355, 2024): FP8 W8A8 recovers the 16-bit accuracy across
  model scales; INT8 W8A8 within 1-3%.
- 2 5-6-bit: Q6_K (KLD 0.0055, ΔPPL +0.35%) and Q5_K_M (KLD 0.011, +0.9%), the same table.
- 3 4-bit: Q4_K_M (KLD 0.031, +2.8%), Q4_0 (0.072, +7.5%), IQ4_XS, INT4, NF4, FP4, MLX 4-bit.

The budget (--quality) is the lowest class a plan may pick for speed: lossless, 8-bit (the
default), 6-bit, 4-bit. The earlier names are read as their class: fp8 and int8 are 8-bit,
int4 is 4-bit. When something must give to fit, the smaller loss is taken first. The rules'
plan search and the serving search read the same ladder.
"""

from __future__ import annotations

from hwadvisor.models.workload import QUALITY_ALIASES

PRECISION_RANK: dict[str, int] = {
    "fp32": 0, "tf32": 0, "bf16": 0, "fp16": 0,
    "fp8": 1, "int8": 1, "q8_0": 1, "mlx-8bit": 1,
    "q6_k": 2, "q5_k_m": 2,
    "int4": 3, "fp4": 3, "nf4": 3, "q4_0": 3, "q4_k_m": 3, "iq4_xs": 3, "mlx-4bit": 3,
}
BUDGET_RANK: dict[str, int] = {"lossless": 0, "8-bit": 1, "6-bit": 2, "4-bit": 3}
LOOSEST = "4-bit"
# Phones default to the 4-bit class: the models' own on-device releases are 4-bit with their
# quality recovered in training (Meta's quantized Llama 3.2 1B/3B: QAT + LoRA and SpinQuant,
# ExecuTorch; Qualcomm AI Hub's w4a16 bundles; Apple's Core ML Llama 3.1 int4), and an app
# near its memory limit is the first one the OS ends.
BUDGET_BY_CLASS: dict[str, str] = {"mobile-soc": "4-bit"}


def budget(name: str) -> str:
    """Return the loss class a --quality value names (an earlier format name, or the class)."""
    return QUALITY_ALIASES.get(name, name)


def default_budget(device_class: object, otherwise: str) -> str:
    """Return the budget a workload takes when the user names none: its device class's."""
    cls = str(getattr(device_class, "value", device_class) or "")
    return BUDGET_BY_CLASS.get(cls, otherwise)


def class_of(dtype: str) -> str:
    """Return the loss class a format falls in ('q4_k_m' -> '4-bit')."""
    return next(name for name, r in BUDGET_RANK.items() if r == rank(dtype))


def rank(dtype: str) -> int:
    """Return how much a format gives up (0 for one the ladder does not know)."""
    return PRECISION_RANK.get(dtype, 0)


def within(dtype: str, own: str, quality: str) -> bool:
    """Tell whether a format may be picked for speed: the checkpoint's own, or within budget."""
    return rank(dtype) <= max(rank(own), BUDGET_RANK[budget(quality)])
