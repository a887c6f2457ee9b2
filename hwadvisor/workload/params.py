"""Parameter counts by part (embeddings, attention, MLP, experts), from a ModelSpec."""

from __future__ import annotations

from dataclasses import dataclass

from hwadvisor.models import ModelSpec, Workload


@dataclass(frozen=True)
class ParamBreakdown:
    """Parameters of one model by part; experts counted in full (all of them)."""

    embedding: float
    lm_head: float  # 0 when tied to the embedding
    attention: float  # all layers
    dense_mlp: float  # dense MLP layers
    routed_experts: float  # all routed experts of all MoE layers
    shared_experts_and_router: float
    norms: float
    moe_layers: int
    per_expert: float  # one routed expert of one layer

    @property
    def total(self) -> float:
        """All parameters."""
        return (self.embedding + self.lm_head + self.attention + self.dense_mlp
                + self.routed_experts + self.shared_experts_and_router + self.norms)

    @property
    def embeddings(self) -> float:
        """Embedding table plus an untied lm_head (kept 16-bit under low-bit quantization)."""
        return self.embedding + self.lm_head

    def scaled(self, factor: float) -> ParamBreakdown:
        """Return the breakdown with every part scaled (to match an authoritative total)."""
        return ParamBreakdown(
            self.embedding * factor, self.lm_head * factor, self.attention * factor,
            self.dense_mlp * factor, self.routed_experts * factor,
            self.shared_experts_and_router * factor, self.norms * factor,
            self.moe_layers, self.per_expert * factor,
        )


def attention_params_per_layer(spec: ModelSpec) -> float:
    """Q, K, V, O projections (and MLA's low-rank factors) of one layer."""
    h = spec.hidden_size
    if spec.attention == "mla" and spec.kv_lora_rank:
        rope = spec.qk_rope_head_dim or 0
        nope = spec.qk_nope_head_dim or spec.head_dim
        v_dim = spec.v_head_dim or spec.head_dim
        q_dim = spec.num_heads * (nope + rope)
        if spec.q_lora_rank:
            q = h * spec.q_lora_rank + spec.q_lora_rank + spec.q_lora_rank * q_dim
        else:
            q = h * q_dim
        kv_a = h * (spec.kv_lora_rank + rope) + spec.kv_lora_rank
        kv_b = spec.kv_lora_rank * spec.num_heads * (nope + v_dim)
        o = spec.num_heads * v_dim * h
        return float(q + kv_a + kv_b + o)
    q_dim = spec.num_heads * spec.head_dim
    kv_dim = spec.num_kv_heads * spec.head_dim
    params = h * q_dim + 2 * h * kv_dim + q_dim * h
    if spec.qkv_bias:
        params += q_dim + 2 * kv_dim
    if spec.o_bias:
        params += h
    return float(params)


def mlp_params(spec: ModelSpec, width: int) -> float:
    """One MLP of the given intermediate width (gated: gate, up, down; else up, down)."""
    h = spec.hidden_size
    mats = 3 if spec.gated_mlp else 2
    params = mats * h * width
    if spec.mlp_bias:
        params += (mats - 1) * width + h
    return float(params)


def expert_width(spec: ModelSpec) -> int:
    """Intermediate width of one routed expert."""
    return spec.moe_intermediate_size or spec.intermediate_size


def shared_expert_width(spec: ModelSpec) -> int:
    """Total intermediate width of the shared expert(s) of one MoE layer (0 without)."""
    if spec.num_shared_experts and spec.shared_expert_intermediate_size:
        return spec.shared_expert_intermediate_size
    return 0


def breakdown(spec: ModelSpec) -> ParamBreakdown:
    """Count the parameters of a spec by part (hwadvisor.workload's count, one source of truth)."""
    from hwadvisor.workload import moe_layer_count, param_breakdown

    parts = param_breakdown(spec)
    return ParamBreakdown(
        embedding=float(parts["embedding"]),
        lm_head=float(parts["lm_head"]),
        attention=float(parts["attention"]),
        dense_mlp=float(parts["dense_mlp"]),
        routed_experts=float(parts["routed_experts"]),
        shared_experts_and_router=float(parts["shared_experts"] + parts["router"]),
        norms=float(parts["norms"]),
        moe_layers=moe_layer_count(spec),
        per_expert=float(parts["routed_expert_params"]),
    )


def workload_breakdown(workload: Workload, spec: ModelSpec) -> ParamBreakdown:
    """Return the spec's breakdown, scaled to the workload's params_total when given."""
    parts = breakdown(spec)
    if workload.params_total and parts.total > 0:
        factor = workload.params_total / parts.total
        if abs(factor - 1.0) > 1e-9:
            return parts.scaled(factor)
    return parts


def active_params(parts: ParamBreakdown, spec: ModelSpec) -> float:
    """Parameters one token touches: all but the routed experts it is not sent to."""
    if not parts.moe_layers or spec.num_experts <= 0:
        return parts.total
    share = min(1.0, spec.experts_per_token / spec.num_experts)
    return parts.total - parts.routed_experts * (1.0 - share)


def matmul_params_per_token(parts: ParamBreakdown, spec: ModelSpec) -> float:
    """Parameters in matmuls per token.

    Active params minus the embedding lookup and norms (no matmul FLOPs), plus the lm_head
    matmul when it is tied to the embedding.
    """
    tied_head = parts.embedding if spec.tied_embeddings else 0.0
    return active_params(parts, spec) - parts.embedding - parts.norms + tied_head


def expected_experts_touched(spec: ModelSpec, tokens: float) -> float:
    """Return the expected distinct routed experts per MoE layer hit by `tokens` tokens.

    Uniform routing assumed: each expert is missed by one token with probability 1 - k/E, so
    E * (1 - (1 - k/E)^tokens) are touched (k at one token, all E as tokens grow).
    """
    experts = spec.num_experts
    if experts <= 0:
        return 0.0
    k = min(spec.experts_per_token, experts)
    return experts * (1.0 - (1.0 - k / experts) ** max(tokens, 1.0))
