"""Parameter counts by part (embeddings, attention, MLP, experts), from a ModelSpec: the one home.

The exact counts (param_breakdown, count_params) match what transformers instantiates on the
meta device for every preset (tests/workload/test_build.py); the perf model reads them as a
ParamBreakdown.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hwadvisor.models import ModelSpec, Workload

# --- exact counts, as transformers instantiates the model ------------------------------------

def moe_layer_count(spec: ModelSpec) -> int:
    """How many decoder layers have an MoE MLP (the rest are dense)."""
    if spec.num_experts <= 0:
        return 0
    if spec.moe_layers is not None:
        return min(spec.moe_layers, spec.num_layers)
    freq = max(spec.moe_layer_freq, 1)
    start = min(spec.dense_layers, spec.num_layers)
    # DeepSeek's original rule: from first_k_dense_replace on, every moe_layer_freq-th layer.
    return sum(1 for i in range(start, spec.num_layers) if i % freq == 0)


def _mlp_params(hidden: int, width: int, gated: bool, bias: bool) -> int:
    mats = 3 if gated else 2
    params = mats * hidden * width
    if bias:
        params += (mats - 1) * width + hidden
    return params


def _attention_params(spec: ModelSpec) -> int:
    h = spec.hidden_size
    heads = spec.num_heads
    if spec.attention == "mla":
        rope = spec.qk_rope_head_dim or 0
        nope = spec.qk_nope_head_dim or 0
        v_dim = spec.v_head_dim or 0
        kv_rank = spec.kv_lora_rank or 0
        qk_dim = nope + rope
        params = 0
        if spec.q_lora_rank:
            q_rank = spec.q_lora_rank
            # q_a_proj (+bias) -> q_a_layernorm -> q_b_proj
            params += h * q_rank + (q_rank if spec.qkv_bias else 0) + q_rank
            params += q_rank * heads * qk_dim
        else:
            params += h * heads * qk_dim  # plain q_proj, never biased
        # kv_a_proj_with_mqa (+bias) -> kv_a_layernorm -> kv_b_proj
        params += h * (kv_rank + rope) + ((kv_rank + rope) if spec.qkv_bias else 0)
        params += kv_rank + kv_rank * heads * (nope + v_dim)
        params += heads * v_dim * h + (h if spec.o_bias else 0)
        return params
    d = spec.head_dim
    q_out = heads * d
    kv_out = spec.num_kv_heads * d
    params = h * q_out + 2 * h * kv_out + q_out * h
    if spec.qkv_bias:
        params += q_out + 2 * kv_out
    if spec.o_bias:
        params += h
    if spec.qk_norm:
        if spec.qk_norm_scope == "full":  # OLMo-2: q_norm over q_out, k_norm over kv_out
            params += (q_out + kv_out) * _norm_weights(spec)
        else:
            params += 2 * d * _norm_weights(spec)
    return params


def _norm_weights(spec: ModelSpec) -> int:
    """Parameters per normalised unit: layernorm has a weight and a bias, OLMo's none."""
    return {"rmsnorm": 1, "layernorm-nobias": 1, "layernorm": 2, "nonparametric": 0}[spec.norm]


def attention_layer_count(spec: ModelSpec) -> int:
    """Count the decoder layers with softmax attention (a KV cache); the rest are recurrent."""
    if spec.attention_layers is None:
        return spec.num_layers
    return min(spec.attention_layers, spec.num_layers)


def param_breakdown(spec: ModelSpec) -> dict[str, int]:
    """Count parameters by part, for the whole model.

    Keys: embedding, lm_head, attention, dense_mlp, router, routed_experts, shared_experts,
    norms, other (Mamba mixers, a vision tower: what the generic reader found outside those);
    and routed_expert_params, the size of one routed expert (not part of the total).
    """
    if spec.param_parts is not None:
        return _measured_parts(spec.param_parts)
    h = spec.hidden_size
    layers = spec.num_layers
    moe_layers = moe_layer_count(spec)
    dense_layers = layers - moe_layers
    expert_width = spec.moe_intermediate_size or spec.intermediate_size
    one_expert = _mlp_params(h, expert_width, spec.gated_mlp, bias=False)
    router = 0
    routed = 0
    shared = 0
    if moe_layers:
        router = spec.num_experts * h + (spec.num_experts if spec.router_score_bias else 0)
        routed = spec.num_experts * one_expert
        if spec.num_shared_experts and spec.shared_expert_intermediate_size:
            shared = _mlp_params(
                h, spec.shared_expert_intermediate_size, spec.gated_mlp, spec.mlp_bias
            )
        if spec.shared_expert_gate:
            shared += h
    norm_weights = _norm_weights(spec)
    head = 0 if spec.tied_embeddings else spec.vocab_size * h
    return {
        "embedding": spec.vocab_size * h,
        "lm_head": head + (spec.vocab_size if spec.lm_head_bias else 0),
        "attention": attention_layer_count(spec) * _attention_params(spec),
        "dense_mlp": dense_layers
        * _mlp_params(h, spec.intermediate_size, spec.gated_mlp, spec.mlp_bias),
        "router": moe_layers * router,
        "routed_experts": moe_layers * routed,
        "shared_experts": moe_layers * shared,
        "norms": (layers * spec.norms_per_layer + int(spec.final_norm)) * h * norm_weights,
        "other": 0,
        "routed_expert_params": one_expert,
    }


PART_KEYS = ("embedding", "lm_head", "attention", "dense_mlp", "router", "routed_experts",
             "shared_experts", "norms", "other", "routed_expert_params")


def _measured_parts(parts: dict[str, int]) -> dict[str, int]:
    """Return the generic reader's exact counts, every key present (a missing part is 0)."""
    return {key: int(parts.get(key, 0)) for key in PART_KEYS}


def count_params(spec: ModelSpec) -> tuple[int, int]:
    """(total, active per token) parameters, as transformers instantiates the model.

    Active = total minus the routed experts a token does not visit
    (num_experts - experts_per_token of them in every MoE layer).
    """
    parts = param_breakdown(spec)
    one_expert = parts.pop("routed_expert_params")
    total = sum(parts.values())
    idle = max(spec.num_experts - spec.experts_per_token, 0)
    active = total - moe_layer_count(spec) * idle * one_expert
    return total, active


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
    other: float = 0.0  # Mamba mixers, a vision tower: matmul weights outside the parts above

    @property
    def total(self) -> float:
        """All parameters."""
        return (self.embedding + self.lm_head + self.attention + self.dense_mlp
                + self.routed_experts + self.shared_experts_and_router + self.norms
                + self.other)

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
            self.moe_layers, self.per_expert * factor, self.other * factor,
        )


def attention_params_per_layer(spec: ModelSpec) -> float:
    """Q, K, V, O projections (and MLA's low-rank factors and norms) of one layer.

    For a model read from its module tree: its attention (or mixer) weights over its layers.
    """
    if spec.param_parts is not None:
        parts = _measured_parts(spec.param_parts)
        return float(parts["attention"] + parts["other"]) / max(spec.num_layers, 1)
    return float(_attention_params(spec))


def mlp_params(spec: ModelSpec, width: int) -> float:
    """One MLP of the given intermediate width (gated: gate, up, down; else up, down)."""
    return float(_mlp_params(spec.hidden_size, width, spec.gated_mlp, spec.mlp_bias))


def expert_width(spec: ModelSpec) -> int:
    """Intermediate width of one routed expert."""
    return spec.moe_intermediate_size or spec.intermediate_size


def shared_expert_width(spec: ModelSpec) -> int:
    """Total intermediate width of the shared expert(s) of one MoE layer (0 without)."""
    if spec.num_shared_experts and spec.shared_expert_intermediate_size:
        return spec.shared_expert_intermediate_size
    return 0


def breakdown(spec: ModelSpec) -> ParamBreakdown:
    """Count the parameters of a spec by part (the counts param_breakdown gives, as floats)."""
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
        other=float(parts["other"]),
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


def busiest_rank_experts(spec: ModelSpec, tokens: float, ranks: int) -> float:
    """Return the expected routed experts the busiest of `ranks` expert-parallel GPUs runs.

    Each rank holds E / ranks experts; each expert is touched with probability
    p = 1 - (1 - k/E)^tokens (uniform routing, experts taken as independent), so a rank's count
    is Binomial(E / ranks, p) and the busiest of `ranks` i.i.d. counts has the expectation
    sum over x of 1 - F(x)^ranks. The step waits for the busiest rank: at one token on 8 ranks
    DeepSeek-V3's 8 experts land 2.5 on the busiest GPU, where tensor parallelism reads one
    expert's worth on every GPU.
    """
    experts = spec.num_experts
    if experts <= 0 or ranks <= 1:
        return expected_experts_touched(spec, tokens)
    per_rank = max(1, round(experts / ranks))
    k = min(spec.experts_per_token, experts)
    p = 1.0 - (1.0 - k / experts) ** max(tokens, 1.0)
    cdf, busiest = 0.0, 0.0
    for x in range(per_rank):
        cdf += math.comb(per_rank, x) * p ** x * (1.0 - p) ** (per_rank - x)
        busiest += 1.0 - min(1.0, cdf) ** ranks
    return busiest
