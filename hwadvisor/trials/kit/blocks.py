"""A small, correct transformer block in plain torch for the model-level trials.

RMSNorm -> attention (F.scaled_dot_product_attention, grouped-query) -> residual ->
RMSNorm -> gated MLP (SiLU(x W_gate) * x W_up) W_down -> residual: the Llama block layout.
No rotary embedding: it changes no kernel shape or memory the trials measure.

This module imports torch at the top, so only import it inside a trial's run() (the trial
modules do); the probe path never loads it.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from hwadvisor.trials.kit.common import BlockShape


class RMSNorm(nn.Module):
    """Root-mean-square norm (Zhang & Sennrich 2019), computed in fp32 as Llama does."""

    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalize the last dimension."""
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (xf * self.weight.float()).to(x.dtype)


def expand_kv(t: torch.Tensor, group: int) -> torch.Tensor:
    """Repeat each KV head `group` times, (B, Hkv, S, D) -> (B, Hkv*group, S, D).

    Repeating instead of SDPA's enable_gqa keeps every backend eligible (the efficient and
    cuDNN kernels refuse enable_gqa on several torch versions). expand + reshape (as Hugging
    Face's repeat_kv does) rather than repeat_interleave, which may synchronise with the host
    and so break CUDA graph capture.
    """
    if group == 1:
        return t
    b, h, s, d = t.shape
    return t[:, :, None].expand(b, h, group, s, d).reshape(b, h * group, s, d)


class Attention(nn.Module):
    """Grouped-query self-attention through F.scaled_dot_product_attention."""

    def __init__(self, shape: BlockShape) -> None:
        super().__init__()
        self.h, self.hkv, self.d = shape.num_heads, shape.num_kv_heads, shape.head_dim
        self.q = nn.Linear(shape.hidden_size, self.h * self.d, bias=False)
        self.k = nn.Linear(shape.hidden_size, self.hkv * self.d, bias=False)
        self.v = nn.Linear(shape.hidden_size, self.hkv * self.d, bias=False)
        self.o = nn.Linear(self.h * self.d, shape.hidden_size, bias=False)

    def _heads(self, t: torch.Tensor, n: int) -> torch.Tensor:
        b, s, _ = t.shape
        return t.view(b, s, n, self.d).transpose(1, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Causal attention over the whole sequence x (B, S, hidden)."""
        b, s, _ = x.shape
        q = self._heads(self.q(x), self.h)
        k = expand_kv(self._heads(self.k(x), self.hkv), self.h // self.hkv)
        v = expand_kv(self._heads(self.v(x), self.hkv), self.h // self.hkv)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o(out.transpose(1, 2).reshape(b, s, self.h * self.d))

    def decode(
        self, x: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, pos: torch.Tensor,
        kv_scale: float | None = None,
    ) -> torch.Tensor:
        """Forward new tokens x (B, T, hidden) against static caches (B, Hkv, L, D).

        Their K/V are written at `pos` (T long positions, a tensor so a CUDA graph can replay
        the step). One token (decode) attends over all L slots; T > 1 tokens (verifying drafts,
        prefilling a suffix after a cached prefix) each attend to the slots up to their own.
        With kv_scale the caches hold FP8 (one per-tensor scale, as vLLM's FP8 KV cache): new
        K/V are written scaled and rounded, and the caches are dequantised to x's dtype before
        attention (plain torch has no attention kernel that reads FP8).
        """
        b, t, _ = x.shape
        q = self._heads(self.q(x), self.h)
        k_new = self._heads(self.k(x), self.hkv)
        v_new = self._heads(self.v(x), self.hkv)
        if kv_scale is not None:
            # Written through a byte view: index_copy_ has no FP8 kernel on every torch.
            # Clamped to e4m3's range: an out-of-range value would turn into NaN (no inf).
            fmax = float(torch.finfo(k_cache.dtype).max)
            k_new = (k_new.float() / kv_scale).clamp(-fmax, fmax).to(k_cache.dtype)
            v_new = (v_new.float() / kv_scale).clamp(-fmax, fmax).to(v_cache.dtype)
            k_new, v_new = k_new.view(torch.uint8), v_new.view(torch.uint8)
            k_cache.view(torch.uint8).index_copy_(2, pos, k_new)
            v_cache.view(torch.uint8).index_copy_(2, pos, v_new)
        else:
            k_cache.index_copy_(2, pos, k_new)
            v_cache.index_copy_(2, pos, v_new)
        k_all, v_all = k_cache, v_cache
        if kv_scale is not None:
            k_all = k_cache.to(x.dtype) * kv_scale
            v_all = v_cache.to(x.dtype) * kv_scale
        k = expand_kv(k_all, self.h // self.hkv)
        v = expand_kv(v_all, self.h // self.hkv)
        mask = None
        if t > 1:  # one query against every cached key needs no mask
            slots = torch.arange(k_cache.shape[2], device=x.device)
            mask = slots[None, :] <= pos[:, None]
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.o(out.transpose(1, 2).reshape(b, t, self.h * self.d))


class GatedMLP(nn.Module):
    """SwiGLU MLP: down(silu(gate(x)) * up(x))."""

    def __init__(self, shape: BlockShape) -> None:
        super().__init__()
        self.gate = nn.Linear(shape.hidden_size, shape.intermediate_size, bias=False)
        self.up = nn.Linear(shape.hidden_size, shape.intermediate_size, bias=False)
        self.down = nn.Linear(shape.intermediate_size, shape.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Apply the MLP."""
        return self.down(F.silu(self.gate(x)) * self.up(x))


class Block(nn.Module):
    """One pre-norm transformer block."""

    def __init__(self, shape: BlockShape) -> None:
        super().__init__()
        self.norm1 = RMSNorm(shape.hidden_size)
        self.attn = Attention(shape)
        self.norm2 = RMSNorm(shape.hidden_size)
        self.mlp = GatedMLP(shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Full-sequence forward."""
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))

    def decode(
        self, x: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, pos: torch.Tensor,
        kv_scale: float | None = None,
    ) -> torch.Tensor:
        """Forward of new tokens against this layer's KV cache (see Attention.decode)."""
        x = x + self.attn.decode(self.norm1(x), k_cache, v_cache, pos, kv_scale)
        return x + self.mlp(self.norm2(x))

    def attention_part(self, x: torch.Tensor) -> torch.Tensor:
        """Return the attention half's residual branch (what selective checkpointing recomputes)."""
        return self.attn(self.norm1(x))  # type: ignore[no-any-return]


class Stack(nn.Module):
    """`layers` blocks; forward optionally wraps each in torch.utils.checkpoint.

    checkpointing True recomputes every block in backward (full activation checkpointing);
    selective True recomputes the attention half only, keeping the MLP's activations (the
    selective recomputation of Korthikanti et al. 2022, which torchtitan's "selective" AC
    approximates by op).
    """

    def __init__(self, shape: BlockShape) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block(shape) for _ in range(shape.layers))
        self.checkpointing = False
        self.selective = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Run every block; with checkpointing, backward recomputes each block's activations."""
        from torch.utils.checkpoint import checkpoint

        for block in self.blocks:
            if self.checkpointing and self.selective:
                x = x + checkpoint(block.attention_part, x, use_reentrant=False)
                x = x + block.mlp(block.norm2(x))  # type: ignore[operator]  # ModuleList loses Block
            elif self.checkpointing:
                x = checkpoint(block, x, use_reentrant=False)
            else:
                x = block(x)
        return x

    def decode(
        self, x: torch.Tensor, k_caches: list[torch.Tensor], v_caches: list[torch.Tensor],
        pos: torch.Tensor, kv_scale: float | None = None,
    ) -> torch.Tensor:
        """One cached forward (a decode step, or T new tokens) through every layer."""
        for block, kc, vc in zip(self.blocks, k_caches, v_caches, strict=True):
            # ModuleList loses the Block type
            x = block.decode(x, kc, vc, pos, kv_scale)  # type: ignore[operator]
        return x


def init_weights(module: nn.Module, seed: int) -> None:
    """Random (never zero) weights: normal with std 1/sqrt(fan_in) so activations stay O(1).

    Drawn on the module's own device: billions of CPU draws would take longer than the trial.
    """
    first = next(module.parameters())
    gen = torch.Generator(device=first.device).manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            if name.endswith("norm1.weight") or name.endswith("norm2.weight"):
                # Norm gains near 1, not exactly 1, so a wrong gain path would show.
                p.normal_(1.0, 0.1, generator=gen)
            else:
                p.normal_(0.0, 1.0 / math.sqrt(p.shape[-1]), generator=gen)


def build_stack(shape: BlockShape, device: str, dtype: torch.dtype, seed: int = 0) -> Stack:
    """Build a Stack with random weights directly on device, in dtype."""
    with torch.device(device):
        stack = Stack(shape).to(dtype=dtype)
    init_weights(stack, seed)
    return stack


def build_block(shape: BlockShape, device: str, dtype: torch.dtype, seed: int = 0) -> Block:
    """Build one Block with random weights directly on device, in dtype."""
    with torch.device(device):
        block = Block(shape).to(dtype=dtype)
    init_weights(block, seed)
    return block


def random_hidden(shape: BlockShape, device: str, dtype: torch.dtype, seed: int) -> torch.Tensor:
    """Fresh random activations (B, S, hidden), drawn on the CPU so every device sees the same."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    x = torch.randn(shape.batch, shape.seq_len, shape.hidden_size, generator=gen)
    return x.to(device=device, dtype=dtype)
