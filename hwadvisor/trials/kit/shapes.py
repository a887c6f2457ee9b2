"""The workload's linear-layer shapes and token counts, as the GEMM trials use them."""

from __future__ import annotations

from dataclasses import dataclass

from hwadvisor.models import Workload

# Llama-3-8B's shapes (hidden 4096, 32 q heads / 8 kv heads of 128, MLP 14336; its config.json)
# stand in when no workload with a spec is given.
DEFAULT_HIDDEN = 4096
DEFAULT_QKV = 4096 + 2 * 8 * 128
DEFAULT_INTERMEDIATE = 14336
PREFILL_TOKENS_CAP = 8192
PREFILL_TOKENS_CAP_QUICK = 1024


@dataclass(frozen=True)
class LinearShape:
    """One linear layer: y (M, N) = x (M, K) @ W(N, K).T."""

    name: str
    n: int
    k: int


def round_up(value: int, multiple: int) -> int:
    """Value rounded up to a multiple (FP8/INT4 kernels want multiples of 16, 128 ...)."""
    return max(multiple, -(-value // multiple) * multiple)


def linear_shapes(workload: Workload | None, multiple: int = 16) -> list[LinearShape]:
    """hidden->(q+k+v), hidden->intermediate (gate/up), intermediate->hidden (down)."""
    spec = workload.spec if workload is not None else None
    if spec is None:
        hidden, qkv, inter = DEFAULT_HIDDEN, DEFAULT_QKV, DEFAULT_INTERMEDIATE
    else:
        hidden = spec.hidden_size
        qkv = (spec.num_heads + 2 * spec.num_kv_heads) * spec.head_dim
        inter = spec.intermediate_size
        if spec.num_experts and spec.moe_intermediate_size:
            inter = spec.moe_intermediate_size  # each routed expert's MLP
    hidden, qkv, inter = (round_up(v, multiple) for v in (hidden, qkv, inter))
    return [
        LinearShape("qkv", n=qkv, k=hidden),
        LinearShape("gate_up", n=inter, k=hidden),
        LinearShape("down", n=hidden, k=inter),
    ]


def prefill_tokens(workload: Workload | None, quick: bool, multiple: int = 16) -> int:
    """M for prefill/training: batch x prompt_len, capped (the rate is flat beyond the cap)."""
    cap = PREFILL_TOKENS_CAP_QUICK if quick else PREFILL_TOKENS_CAP
    tokens = workload.batch * workload.prompt_len if workload is not None else cap
    return round_up(min(tokens, cap), multiple)


def decode_tokens(workload: Workload | None, multiple: int = 16) -> tuple[int, int]:
    """(batch, M) for one decode step: M is the batch padded to the kernel's multiple."""
    batch = workload.batch if workload is not None else 1
    return batch, round_up(batch, multiple)
