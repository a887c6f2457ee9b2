"""FLOPs and memory traffic per phase (prefill, one decode forward, one training step), per GPU."""

from __future__ import annotations

from dataclasses import dataclass

from hwadvisor.perfmodel import constants as C
from hwadvisor.perfmodel.context import Setup
from hwadvisor.perfmodel.memory import (
    act_coeff_sum,
    expert_weight_bytes,
    grad_bytes_per_param,
    kv_bytes_per_token_per_layer,
    kv_cache_bytes,
    model_weight_bytes,
    score_bytes_per_layer,
    window_layers,
    working_weight_dtype,
)
from hwadvisor.workload.params import (
    expected_experts_touched,
    matmul_params_per_token,
)


@dataclass
class PhaseCost:
    """What one phase costs one GPU: FLOPs, bytes from device memory, bytes over PCIe."""

    flops: float
    device_bytes: float
    host_bytes: float = 0.0  # offloaded weights streamed from host RAM

    @property
    def intensity(self) -> float:
        """FLOP per byte of device-memory traffic."""
        return self.flops / self.device_bytes if self.device_bytes else 0.0


# --- FLOPs ------------------------------------------------------------------------------------

def attention_flops_per_pair(setup: Setup) -> float:
    """FLOPs per (query token, key token, layer): QK^T and PV, 2 x heads x (d_qk + d_v).

    MLA counted in its unabsorbed form (per-head nope+rope keys, v_head_dim values).
    """
    spec = setup.spec
    if spec.attention == "mla" and spec.kv_lora_rank:
        d_qk = (spec.qk_nope_head_dim or spec.head_dim) + (spec.qk_rope_head_dim or 0)
        d_v = spec.v_head_dim or spec.head_dim
    else:
        d_qk = d_v = spec.head_dim
    return 2.0 * spec.num_heads * (d_qk + d_v)


def _causal_sum(start: float, end: float, cap: float | None = None) -> float:
    """Sum over query positions start+1..end of the keys each attends (capped by a window)."""
    if end <= start:
        return 0.0
    if cap is None or cap >= end:
        return (end * (end + 1) - start * (start + 1)) / 2.0
    if cap <= start:
        return (end - start) * cap
    # positions up to cap attend all; beyond, the window
    return (cap * (cap + 1) - start * (start + 1)) / 2.0 + (end - cap) * cap


def attended_pairs(setup: Setup, start: float, end: float) -> float:
    """(query, key) pairs over all layers for one sequence's positions start+1..end.

    Flash kernels skip the masked upper triangle (causal) and windowed-out keys; the math kernel
    computes every row in full (end keys per query) and masks afterwards.
    """
    spec = setup.spec
    swa = window_layers(setup.spec)
    full = spec.num_layers - swa
    if setup.options.attention_kernel == "math" and end - start > 1:
        return spec.num_layers * (end - start) * end
    window = float(spec.sliding_window) if spec.sliding_window else None
    return full * _causal_sum(start, end) + swa * _causal_sum(start, end, window)


def forward_flops(setup: Setup, batch: float, start: float, end: float) -> float:
    """Forward FLOPs of the whole model for `batch` sequences at positions start+1..end."""
    tokens = batch * (end - start)
    matmul = 2.0 * matmul_params_per_token(setup.parts, setup.spec) * tokens
    return matmul + batch * attended_pairs(setup, start, end) * attention_flops_per_pair(setup)


def decode_forward_flops(setup: Setup, batch: float, context: float, tokens: float) -> float:
    """Forward FLOPs of one decode step: `tokens` new tokens per sequence at `context`."""
    spec = setup.spec
    matmul = 2.0 * matmul_params_per_token(setup.parts, spec) * batch * tokens
    swa = window_layers(spec)
    window = min(context, float(spec.sliding_window or context))
    pairs = (spec.num_layers - swa) * context + swa * window
    return matmul + batch * tokens * pairs * attention_flops_per_pair(setup)


def mean_decode_context(setup: Setup) -> float:
    """Average context over the generation: prompt plus half the generated tokens."""
    return setup.workload.prompt_len + setup.workload.gen_len / 2.0


def prefill_span(setup: Setup) -> tuple[float, float]:
    """(first uncached position, prompt length): the prefix cache serves the first share."""
    prompt = float(setup.workload.prompt_len)
    start = min(prompt - 1.0, prompt * setup.options.prefix_cache_hit)
    return start, prompt


# --- Bytes ------------------------------------------------------------------------------------

def weight_read_bytes(setup: Setup, tokens: float) -> tuple[float, float]:
    """(device, host) bytes of weights one forward reads with `tokens` tokens in flight, per GPU.

    MoE reads only the experts the tokens are routed to: k at one token, all as tokens grow
    (uniform routing). Under tp each GPU reads its shard; under fsdp the gathered full copy.
    """
    parts, spec = setup.parts, setup.spec
    full = model_weight_bytes(setup)
    if parts.moe_layers and spec.num_experts:
        experts = expert_weight_bytes(parts, spec, working_weight_dtype(setup))
        touched = expected_experts_touched(spec, tokens) / spec.num_experts
        full = full - experts + experts * touched
    per_gpu = full / setup.layout.tp
    host = per_gpu * setup.offload_fraction
    return per_gpu - host, host


def _act_traffic(setup: Setup, tokens: float, factor: float) -> float:
    coeff, _ = act_coeff_sum(setup)
    return coeff * tokens * setup.spec.hidden_size * setup.act_bytes / 2.0 * factor


def prefill_cost(setup: Setup) -> PhaseCost:
    """Prefill of the uncached prompt share for the whole batch, per GPU."""
    wl, spec, tp = setup.workload, setup.spec, setup.layout.tp
    start, end = prefill_span(setup)
    new = end - start
    tokens = setup.batch * new
    flops = forward_flops(setup, setup.batch, start, end) / tp
    device_w, host_w = weight_read_bytes(setup, tokens)
    kv = kv_cache_bytes(spec, wl.kv_dtype, setup.batch, end, tp)  # new KV written, prefix read
    act = _act_traffic(setup, tokens, C.INFER_ACT_TRAFFIC_FACTOR)
    scores = spec.num_layers * score_bytes_per_layer(setup, setup.batch, new, end)
    score_traffic = scores * C.SCORE_PASSES_FORWARD / 2.0
    logits = setup.batch * spec.vocab_size * C.INFER_LOGIT_BYTES_PER_ELEMENT / tp
    return PhaseCost(flops, device_w + kv + act + score_traffic + logits, host_w)


def decode_cost(setup: Setup) -> PhaseCost:
    """One decode forward (tokens_per_forward new tokens per sequence) at the mean context."""
    wl, spec, tp = setup.workload, setup.spec, setup.layout.tp
    t = setup.tokens_per_forward
    context = mean_decode_context(setup)
    flops = decode_forward_flops(setup, setup.batch, context, t) / tp
    device_w, host_w = weight_read_bytes(setup, setup.batch * t)
    kv_read = kv_cache_bytes(spec, wl.kv_dtype, setup.batch, context, tp)
    per_token_kv = spec.num_layers * kv_bytes_per_token_per_layer(spec, wl.kv_dtype, tp)
    kv_write = setup.batch * t * per_token_kv
    act = _act_traffic(setup, setup.batch * t, C.INFER_ACT_TRAFFIC_FACTOR)
    logits = setup.batch * t * spec.vocab_size * C.INFER_LOGIT_BYTES_PER_ELEMENT / tp
    return PhaseCost(flops, device_w + kv_read + kv_write + act + logits, host_w)


def train_cost(setup: Setup) -> PhaseCost:
    """Forward and backward of one optimizer step (grad_accum micro-batches), per GPU.

    FLOPs: 3 x forward (backward = 2 x forward), + 1 forward when checkpointing recomputes.
    """
    wl, spec, tp = setup.workload, setup.spec, setup.layout.tp
    seq = float(wl.prompt_len)
    recompute = 1.0 if wl.activation_checkpointing else 0.0
    fwd = forward_flops(setup, setup.batch, 0.0, seq)
    flops = fwd * (3.0 + recompute) / tp * wl.grad_accum
    device_w, host_w = weight_read_bytes(setup, setup.batch * seq)
    weights = (2.0 + recompute) * device_w
    host = (2.0 + recompute) * host_w
    grads = 2.0 * setup.parts.total * grad_bytes_per_param(setup) / tp
    tokens = setup.batch * seq
    act = _act_traffic(setup, tokens, C.TRAIN_ACT_TRAFFIC_FACTOR) * (1.0 + 0.5 * recompute)
    scores = spec.num_layers * score_bytes_per_layer(setup, setup.batch, seq, seq)
    score_traffic = scores * (C.SCORE_PASSES_FORWARD * (1.0 + recompute)
                              + C.SCORE_PASSES_BACKWARD) / 2.0
    logits = 2.0 * tokens * spec.vocab_size * C.TRAIN_LOGIT_BYTES_PER_ELEMENT / tp
    per_micro = weights + grads + act + score_traffic + logits
    return PhaseCost(flops, per_micro * wl.grad_accum, host * wl.grad_accum)


def optimizer_cost(setup: Setup) -> PhaseCost:
    """Return the optimizer step's memory traffic per GPU (fused or foreach), once per step."""
    table = C.OPT_BYTES_PER_PARAM_FUSED if setup.options.fused_optimizer \
        else C.OPT_BYTES_PER_PARAM_UNFUSED
    trained = setup.parts.total
    if setup.options.finetune in ("lora", "qlora"):
        from hwadvisor.perfmodel.memory import lora_params

        trained = lora_params(setup)  # LoRA steps the adapters only
    if setup.options.optimizer_offload:
        return PhaseCost(flops=0.0, device_bytes=0.0)  # the step runs on the host
    params = trained / setup.layout.weight_shards
    per_param = table[setup.workload.optimizer]
    return PhaseCost(flops=params * 10.0, device_bytes=params * per_param)
