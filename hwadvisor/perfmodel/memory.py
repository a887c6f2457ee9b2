"""Memory per GPU by part: weights, KV cache, activations, gradients, optimizer, runtime."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from hwadvisor.models import MemoryEstimate, ModelSpec
from hwadvisor.perfmodel import constants as C
from hwadvisor.perfmodel import efficiency as E
from hwadvisor.perfmodel import formats
from hwadvisor.perfmodel.constants import bytes_per_element
from hwadvisor.perfmodel.context import Setup

if TYPE_CHECKING:
    from hwadvisor.engines.schema import Recipe, Reservation
    from hwadvisor.perfmodel.drafters import DraftMemory, Published
from hwadvisor.workload.params import (
    ParamBreakdown,
    attention_layer_count,
    attention_params_per_layer,
    expert_width,
    mlp_params,
    shared_expert_width,
)


def weight_bytes(parts: ParamBreakdown, spec: ModelSpec, dtype: str) -> float:
    """Bytes of all weights in this format (perfmodel/formats.py: embeddings, mixes)."""
    return formats.weight_bytes(parts, spec, dtype)


def expert_weight_bytes(parts: ParamBreakdown, spec: ModelSpec, dtype: str) -> float:
    """Bytes of all routed experts (quantized like the other layer weights)."""
    return formats.routed_expert_bytes(parts, spec, dtype)


# Recurrent state sized at 4 bytes an element: the mamba_ssm selective-scan kernels accumulate
# the state in fp32 and engines may keep it so; transformers' caches use the model's dtype
# (2 bytes), so this is the conservative end. An assumption, not yet measured here.
RECURRENT_STATE_BYTES = 4.0


# --- KV cache ---------------------------------------------------------------------------------

def kv_bytes_per_token_per_layer(spec: ModelSpec, dtype: str, tp: int = 1) -> float:
    """KV bytes one token adds to one layer on one GPU.

    MHA/GQA/MQA: K and V, 2 x kv_heads x head_dim x bytes, the heads split by the TP degree
    (at least one per GPU: heads are replicated when fewer than GPUs).
    MLA: one compressed latent plus the decoupled RoPE key, (kv_lora_rank + qk_rope_head_dim) x
    bytes, not K and V; it is replicated on every TP rank (vLLM / SGLang do so).
    """
    size = bytes_per_element(dtype)
    if spec.attention == "mla" and spec.kv_lora_rank:
        return (spec.kv_lora_rank + (spec.qk_rope_head_dim or 0)) * size
    heads = math.ceil(spec.num_kv_heads / max(tp, 1))
    return 2.0 * heads * spec.head_dim * size


def window_layers(spec: ModelSpec) -> int:
    """Attention layers using a sliding window (all of them when only the window is given)."""
    if not spec.sliding_window:
        return 0
    attention = attention_layer_count(spec)
    if spec.sliding_window_layers is None:
        return attention
    return min(spec.sliding_window_layers, attention)


def recurrent_state_bytes(spec: ModelSpec, batch: float, tp: int = 1) -> float:
    """Constant per-sequence state of Mamba/SSM and linear-attention layers, `batch` sequences.

    It does not grow with the context. Sized in fp32 (RECURRENT_STATE_BYTES) and split over TP
    like the heads it belongs to.
    """
    if not spec.recurrent_state_elements:
        return 0.0
    return batch * spec.recurrent_state_elements * RECURRENT_STATE_BYTES / max(tp, 1)


def kv_cache_bytes(spec: ModelSpec, dtype: str, batch: float, tokens: float, tp: int = 1) -> float:
    """KV cache of `batch` sequences of `tokens` tokens; sliding-window layers hold the window.

    Only attention layers keep a KV cache; recurrent layers' constant state is added
    (recurrent_state_bytes), so a hybrid model carries both.
    """
    per = kv_bytes_per_token_per_layer(spec, dtype, tp)
    swa = window_layers(spec)
    full = attention_layer_count(spec) - swa
    windowed = min(tokens, float(spec.sliding_window or tokens))
    return batch * per * (full * tokens + swa * windowed) + recurrent_state_bytes(spec, batch, tp)


# --- The drafter --------------------------------------------------------------------------------

def draft_memory(setup: Setup) -> DraftMemory | None:
    """Return what the planned drafter adds per replica: its weights and its KV per token.

    An EAGLE-3 head is sized from the target (drafters.head_params; its embedding is the
    target's); the checkpoint's MTP layers are one more decoder layer each (plus the projection
    of the embedding and hidden state) the engine loads beside the model; a draft model is the
    published checkpoint the config names (drafters.toml: parameters, format, KV per token).
    n-gram drafting holds nothing; Medusa is never planned.
    """
    from hwadvisor.perfmodel import drafters as D

    drafter_id = setup.options.speculative_drafter
    if setup.training or drafter_id not in ("eagle3", "mtp", "draft-model"):
        return None
    spec, parts = setup.spec, setup.parts
    layer_kv = kv_bytes_per_token_per_layer(spec, "bf16")
    if drafter_id == "eagle3":
        q_dim = spec.num_heads * spec.head_dim
        kv_dim = spec.num_kv_heads * spec.head_dim
        params = D.head_params(spec.hidden_size, q_dim, kv_dim,
                               mlp_params(spec, spec.intermediate_size),
                               min(D.EAGLE3_DRAFT_VOCAB, spec.vocab_size))
        return D.DraftMemory(params * 2.0, layer_kv,
                             f"EAGLE-3 head {params / 1e9:.2f}B parameters in 16 bits")
    if drafter_id == "mtp":
        layers = max(spec.mtp_layers, 1)
        body = parts.attention + parts.dense_mlp + parts.routed_experts + \
            parts.shared_experts_and_router
        params = layers * (body / max(spec.num_layers, 1) + 2 * spec.hidden_size ** 2)
        size = bytes_per_element(stored_weight_dtype(setup))
        return D.DraftMemory(params * size, layers * layer_kv,
                             f"{layers} MTP layer(s), {params / 1e9:.1f}B parameters")
    published = _published_draft(setup)
    if published is not None and published.params:
        size = bytes_per_element(published.weights_dtype or "bf16")
        return D.DraftMemory(published.params * size, float(published.kv_bytes_per_token or 0),
                             f"{published.id}, {published.params / 1e9:.2f}B parameters")
    # no checkpoint named: about a 1B model, never more than an eighth of the target
    share = min(1.0, parts.total / 8.0 / D.FALLBACK_DRAFT_PARAMS)
    params = D.FALLBACK_DRAFT_PARAMS * share
    return D.DraftMemory(params * 2.0, D.FALLBACK_DRAFT_KV_BYTES * share,
                         f"a {params / 1e9:.2f}B draft model in 16 bits (assumed: no checkpoint "
                         "named)")


def _published_draft(setup: Setup) -> Published | None:
    """Return the draft checkpoint the engine's config would name for this model, if any."""
    from hwadvisor.engines import engine_for
    from hwadvisor.perfmodel.drafters import published_for_model

    form = engine_for(setup.workload).config.draft_source
    return published_for_model("draft-model", setup.workload.model, form)


# --- Activations ------------------------------------------------------------------------------

def mlp_act_coeff(spec: ModelSpec, width: float, compiled: bool, autocast: bool = False) -> float:
    """Return saved bytes per token per hidden unit (16-bit) of an MLP of `width`.

    Gated: input 2 + gate, up and activation outputs 3 x 2 x width/h; compiled recomputes the
    activation (2 x 2 x width/h). Non-gated: input 2 + 2 x 2 x width/h + a dropout mask 1
    (Korthikanti's 19 for width 4h); compiled drops the activation output. Under autocast over
    fp32 weights (eager), a gated MLP saves gate, up, activation and product (the down
    projection's input), 4 x 2 x width/h, its inputs counted in AUTOCAST_ACT_HIDDEN_COEFF.
    """
    ratio = width / spec.hidden_size
    if spec.gated_mlp:
        if autocast and not compiled:
            return C.AUTOCAST_ACT_GATED_MLP_COEFF * ratio
        return 2.0 + (4.0 if compiled else 6.0) * ratio
    return 2.0 + (2.0 if compiled else 4.0) * ratio + 1.0


def layer_act_coeffs(spec: ModelSpec, compiled: bool,
                     autocast: bool = False) -> tuple[float, float]:
    """Return saved bytes per token per hidden (16-bit, no scores) of a dense and an MoE layer.

    autocast: the engine trains fp32 weights under torch.autocast (transformers' Trainer), so
    the residual stream and norms are fp32 and each linear keeps its own 16-bit cast of its
    input (AUTOCAST_ACT_HIDDEN_COEFF), measured on the H200 (docs/benchmarks.md).
    """
    norms = C.ACT_NORM_COEFF_COMPILED if compiled else C.ACT_NORM_COEFF
    base = C.ACT_ATTENTION_COEFF + norms
    if autocast and not compiled:
        base = C.AUTOCAST_ACT_HIDDEN_COEFF
    dense = base + mlp_act_coeff(spec, spec.intermediate_size, compiled, autocast)
    if spec.num_experts <= 0:
        return dense, dense
    k = spec.experts_per_token
    moe = base + k * mlp_act_coeff(spec, expert_width(spec), compiled, autocast)
    shared = shared_expert_width(spec)
    if shared:
        moe += mlp_act_coeff(spec, shared, compiled, autocast)
    return dense, moe


def autocast_fp32(setup: Setup) -> bool:
    """Tell whether the engine trains fp32 weights under autocast (engine data [costs]).

    Not on a model loaded in bf16 without a master copy (pure 16-bit): its weights are bf16.
    """
    return setup.training and setup.options.mixed_precision and \
        setup.options.finetune == "full" and setup.options.master_weights and \
        E.engine_time(setup.workload, setup.res.family).autocast_fp32_weights


def pure_16bit(setup: Setup) -> bool:
    """Tell whether full training keeps no fp32 master copy (ModelOptions.master_weights off).

    The 16-bit weights are then the optimizer's parameters: no fp32 copy, the optimizer state
    in their dtype or 8 bits (OPTIMIZER_BYTES_PURE16). Under fp32 training (no mixed
    precision) the fp32 weights are the master copy anyway.
    """
    return setup.training and setup.options.mixed_precision and \
        setup.options.finetune == "full" and not setup.options.master_weights


def act_coeff_sum(setup: Setup) -> tuple[float, float]:
    """Sum over layers of the per-layer coefficient per GPU, and the largest layer's."""
    spec, tp = setup.spec, setup.layout.tp
    dense, moe = layer_act_coeffs(spec, setup.options.compiled, autocast_fp32(setup))
    sequence_parallel = setup.training  # Megatron-style SP assumed with TP in training
    dense = _tp_split(dense, tp, sequence_parallel)
    moe = _tp_split(moe, tp, sequence_parallel)
    moe_layers = setup.parts.moe_layers
    total = dense * (spec.num_layers - moe_layers) + moe * moe_layers
    return total, max(dense, moe) if moe_layers else dense


def score_bytes_per_layer(setup: Setup, batch: float, queries: float, keys: float) -> float:
    """Bytes of one layer's materialized score matrix (math attention only; flash streams it)."""
    if setup.options.attention_kernel == "flash":
        return 0.0
    heads = setup.spec.num_heads / setup.layout.tp
    return batch * heads * queries * keys * C.ACT_SCORE_BYTES_PER_ELEMENT * setup.act_bytes / 2.0


def _tp_split(coeff: float, tp: int, sequence_parallel: bool) -> float:
    """Per-GPU share of a layer coefficient under TP.

    Without sequence parallelism 10 sbh (norm and dropout inputs) stays replicated; with it
    everything splits (Korthikanti et al. 2022, eqs. 2 and 4).
    """
    if tp <= 1 or sequence_parallel:
        return coeff / max(tp, 1)
    replicated = min(C.ACT_TP_REPLICATED_COEFF, coeff)
    return replicated + (coeff - replicated) / tp


def training_activation_bytes(setup: Setup) -> float:
    """Activations held at the loss's backward of one micro-batch, per GPU (its peak).

    Without checkpointing: every layer's saved tensors (Korthikanti et al. 2022 with the MLP
    sized to its width; the 4*a*s/h score term only with math attention), plus the logits.
    Selective checkpointing (Korthikanti et al., sec. 5) recomputes the attention core only: the
    same minus the score term (which flash attention never stores anyway).
    Full checkpointing: each layer's input (fp32 under autocast over fp32 weights) plus the
    logits; no layer is recomputed yet at the loss's backward (the last layer's recomputation
    is a peak of its own, training_peak_bytes).
    """
    per_element = C.TRAIN_LOGIT_BYTES_LOSS_PARALLEL if loss_parallel(setup) \
        else C.TRAIN_LOGIT_BYTES_PER_ELEMENT
    layers = _layer_activation_bytes(setup)
    loss = _logit_bytes(setup, per_element) + _head_input_bytes(setup)
    pp = setup.layout.pp
    if pp > 1:
        # Different GPUs: the first stage holds the most micro-batches in flight (one whole
        # model's worth of layer inputs) and no logits; the last holds about one micro-batch's
        # layers and the loss. Measured with torchtitan's own 405B ranks (PP 8, interleaved
        # 1F1B; benchmarks/data/torchtitan_memory_405b_h200.json): first stage 57.6 GiB,
        # last 53.5 GiB allocated.
        return max(layers, layers / pp + loss)
    return layers + loss


def loss_parallel(setup: Setup) -> bool:
    """Tell whether the loss runs on vocabulary-sharded logits (engine data [costs])."""
    return setup.training and setup.layout.tp > 1 and \
        setup.options.cross_entropy == "plain" and \
        E.engine_time(setup.workload, setup.res.family).loss_parallel


def _head_input_bytes(setup: Setup) -> float:
    """Return the output projection's saved input under loss parallelism (0 otherwise).

    With sequence parallelism the final norm's output is sharded by sequence and all-gathered
    for the colwise output projection, which saves the gathered copy, every token's hidden
    state in 16 bits on each TP rank (torchtitan 0.2.2 parallelize.py apply_tp). Without TP
    it is tokens x h x 2, under 1% of the logits' bytes, and left in the calibrated terms.
    """
    if not loss_parallel(setup):
        return 0.0
    return _tokens(setup) * setup.spec.hidden_size * setup.act_bytes


def _tokens(setup: Setup) -> float:
    """Tokens of one micro-batch on one GPU (context parallelism splits each sequence)."""
    return float(setup.batch * setup.workload.prompt_len) / setup.layout.cp


def _layer_activation_bytes(setup: Setup) -> float:
    """Return the layers' saved activations at the loss's backward (training_activation_bytes)."""
    wl, spec, tp = setup.workload, setup.spec, setup.layout.tp
    # pipeline stages keep the activations of as many micro-batches in flight as there are
    # stages (1F1B), i.e. one whole model's worth
    tokens = _tokens(setup)
    scale = setup.act_bytes / 2.0  # the coefficients are 16-bit bytes
    total_coeff, _ = act_coeff_sum(setup)
    scores = score_bytes_per_layer(setup, setup.batch, wl.prompt_len, wl.prompt_len)
    h = spec.hidden_size
    if wl.activation_checkpointing and setup.options.selective_checkpointing:
        if selective_policy(setup) == "op-every-other-mm":
            return spec.num_layers * op_sac_bytes_per_token(setup) * tokens * scale / tp
        return total_coeff * tokens * h * scale
    kept = total_coeff * tokens * h * scale + scores * spec.num_layers
    if wl.activation_checkpointing:
        # the checkpointed share keeps each layer's input only, the rest all they save
        share = checkpointed_share(setup)
        residual = 4.0 if autocast_fp32(setup) else 2.0 * scale
        inputs = spec.num_layers * residual * tokens * h / tp  # sharded by SP under TP
        return share * inputs + (1.0 - share) * kept
    return kept


def checkpointed_share(setup: Setup) -> float:
    """Share of the decoder layers whose whole forward is recomputed (full checkpointing).

    Every N-th layer of L (checkpoint_every = N): floor(L / N) of them, as torchtitan's layer
    SAC wraps a block when its 1-based count is a multiple of N
    (torchtitan/distributed/activation_checkpoint.py _apply_layer_sac, v0.2.2). Zero without
    checkpointing or with selective checkpointing (attention only, counted apart).
    """
    wl, opts = setup.workload, setup.options
    if not wl.activation_checkpointing or opts.selective_checkpointing:
        return 0.0
    layers = max(setup.spec.num_layers, 1)
    return (layers // opts.checkpoint_every) / layers


def _full_words(setup: Setup) -> str:
    """Say what full checkpointing keeps: every layer's input, or every N-th layer's."""
    every = setup.options.checkpoint_every
    if every <= 1:
        return "layer inputs kept, one layer recomputed"
    layers = setup.spec.num_layers
    return (f"every {ordinal(every)} layer checkpointed ({layers // every} of {layers} "
            "recompute, the others keep their activations)")


def ordinal(n: int) -> str:
    """Return 2nd, 3rd, 4th ... (the layer interval as the step text says it)."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def selective_policy(setup: Setup) -> str:
    """Return what the engine's selective checkpointing keeps (engine data [costs]).

    Per-op SAC is counted for dense layers; MoE layers fall back to the attention-core count.
    """
    if setup.spec.num_experts > 0:
        return "attention-core"
    return E.engine_time(setup.workload, setup.res.family).selective_checkpointing


def op_sac_bytes_per_token(setup: Setup) -> float:
    """Bytes one dense layer keeps per token under per-op SAC that saves every other mm (16-bit).

    The block's input (h), the outputs of wq (q), wv (kv), w1 (intermediate) and w2 (h), and
    SDPA's output (q), 2 bytes each; the rest is recomputed in the backward. torchtitan 0.2.2
    (distributed/activation_checkpoint.py _apply_op_sac) counts mms per block from 1 and skips
    the even ones: wq 1, wk 2, wv 3, wo 4, w1 5, w3 6, w2 7 keep 1, 3, 5 and 7. Measured on the
    H200 (benchmarks/data/torchtitan_memory_h200.json, 8B FSDP 8): ~64 kB a token and layer
    against the 63.5 kB counted here.
    """
    spec = setup.spec
    kv = spec.num_kv_heads * spec.head_dim
    q = spec.num_heads * spec.head_dim
    return 2.0 * (2.0 * spec.hidden_size + 2.0 * q + kv + spec.intermediate_size)


def checkpoint_working_bytes(setup: Setup) -> float:
    """One layer's activations recomputed at once in the backward under full checkpointing."""
    if not setup.workload.activation_checkpointing or setup.options.selective_checkpointing:
        return 0.0
    wl = setup.workload
    _, largest = act_coeff_sum(setup)
    scores = score_bytes_per_layer(setup, setup.batch, wl.prompt_len, wl.prompt_len)
    return largest * _tokens(setup) * setup.spec.hidden_size * setup.act_bytes / 2.0 + scores


def _logit_bytes(setup: Setup, per_element: float) -> float:
    """Return the loss's bytes on the logits: per (token, vocab) element, or Liger's chunks."""
    tokens, tp, loss = _tokens(setup), setup.layout.tp, setup.options.cross_entropy
    if loss == "chunked":
        return tokens * setup.spec.hidden_size * C.TRAIN_LOGIT_CHUNK_BYTES_PER_HIDDEN / tp
    if loss == "fused":
        per_element = C.TRAIN_LOGIT_BYTES_FUSED
    return tokens * setup.spec.vocab_size * per_element / tp


def training_peak_bytes(setup: Setup, weights: float, act: float, grads: float, opt: float,
                        notes: list[str]) -> float:
    """Tensors at the training step's peak: the larger of its two (or three) high points.

    - the loss's backward: weights, optimizer state and the activations, but gradients only
      when earlier micro-batches left theirs (zero_grad(set_to_none=True), torch's default,
      frees them after each step); under autocast over fp32 weights with checkpointing, the
      16-bit weight copies autocast made are gone by then (its cache is dropped on leaving the
      autocast region and checkpointing kept no reference);
    - the end of the forward (autocast and checkpointing only): the copies still cached, the
      layers' inputs and the forward's logits (TRAIN_LOGIT_BYTES_FORWARD);
    - the optimizer step (and the last layers' backward): weights, full gradients, optimizer
      state and one checkpointed layer's recomputation.
    Measured on the H200 (benchmarks/train_memory.py): the 8B at 2k tokens peaks at the step,
    the 1B and 3B at the loss or the forward's end.
    """
    held = grads if setup.workload.grad_accum > 1 else 0.0
    working = checkpoint_working_bytes(setup)
    peaks = {"the loss's backward": weights + opt + held + act,
             "the optimizer step": weights + grads + opt + working}
    if working:
        # the last layer recomputes once the logits' gradients are gone: every layer's input
        inputs = _layer_activation_bytes(setup)
        peaks["the last layer's recomputation"] = weights + opt + held + inputs + working
    if autocast_fp32(setup) and setup.workload.activation_checkpointing:
        forward = act - _logit_bytes(setup, C.TRAIN_LOGIT_BYTES_PER_ELEMENT) + \
            _logit_bytes(setup, C.TRAIN_LOGIT_BYTES_FORWARD)
        peaks["the loss's backward"] -= weights
        peaks["the forward's end"] = weights + opt + held + forward
    where = max(peaks, key=lambda k: peaks[k])
    notes.append(f"training peak at {where} (" + ", ".join(
        f"{k} {v / C.GB:.1f} GB" for k, v in peaks.items()) + ")")
    return peaks[where]


def inference_activation_bytes(setup: Setup) -> float:
    """Return the largest layer's prefill working set plus the last token's logits.

    The uncached prompts of the batch prefill in one forward, or in chunks of
    prefill_chunk_tokens where the engine chunks: residual and normed input (2h) plus the
    widest MLP's intermediates, in the activation dtype; math attention adds the score matrix
    of one layer.
    """
    wl, spec, tp = setup.workload, setup.spec, setup.layout.tp
    new_tokens = max(1.0, wl.prompt_len * (1.0 - setup.options.prefix_cache_hit))
    tokens = setup.batch * new_tokens
    chunk = setup.options.prefill_chunk_tokens
    if chunk is not None and tokens > chunk:
        # Chunked prefill (vLLM/SGLang): one forward holds at most the chunk's tokens.
        tokens = float(chunk)
        new_tokens = min(new_tokens, float(chunk))
    widths = [spec.intermediate_size]
    if spec.num_experts > 0:
        widths.append(spec.experts_per_token * expert_width(spec) + shared_expert_width(spec))
    mats = 3 if spec.gated_mlp else 2
    per_token = (2 * spec.hidden_size + (mats * max(widths)) / tp) * setup.act_bytes
    scores = score_bytes_per_layer(setup, setup.batch, new_tokens, wl.prompt_len)
    logits = setup.batch * spec.vocab_size * C.INFER_LOGIT_BYTES_PER_ELEMENT / tp
    return tokens * per_token + scores + logits


# --- Training states --------------------------------------------------------------------------

def grad_bytes_per_param(setup: Setup) -> float:
    """Gradient bytes per parameter: bf16 under mixed precision, fp32 otherwise.

    FSDP over fp32 shards reduce-scatters into fp32 gradient shards (fsdp_fp32_shards).
    """
    if fsdp_fp32_shards(setup):
        return C.GRAD_BYTES_FP32
    return C.GRAD_BYTES_MIXED if setup.options.mixed_precision else C.GRAD_BYTES_FP32


def fsdp_fp32_shards(setup: Setup) -> bool:
    """Tell whether FSDP's parameter shards are the fp32 master copy (engine data [costs]).

    Then the optimizer's master weights are the shards themselves and the GPU holds 16-bit
    weights only while FSDP has them gathered.
    An fp32 shard is a master copy: pure 16-bit training (master_weights off) has none.
    """
    return setup.training and setup.layout.strategy == "fsdp" and \
        setup.options.finetune == "full" and setup.options.mixed_precision and \
        setup.options.master_weights and \
        E.engine_time(setup.workload, setup.res.family).fsdp_fp32_shards


def optimizer_bytes_per_param(setup: Setup) -> float:
    """Optimizer bytes per parameter (master copy included under mixed precision, unless pure)."""
    if pure_16bit(setup):
        return C.OPTIMIZER_BYTES_PURE16[setup.workload.optimizer]
    table = C.OPTIMIZER_BYTES_MIXED if setup.options.mixed_precision else C.OPTIMIZER_BYTES_FP32
    return table[setup.workload.optimizer]


def training_weight_dtype(setup: Setup) -> str:
    """Return the dtype the working weights are held in during training."""
    return setup.workload.weights_dtype if setup.options.mixed_precision else "fp32"


def lora_params(setup: Setup) -> float:
    """Parameters of rank-r adapters on every linear layer of attention and the dense MLP.

    A LoRA adapter on a (in -> out) projection adds r x (in + out) parameters (Hu et al. 2021);
    PEFT's target_modules="all-linear" puts one on q, k, v, o, gate, up and down. Routed experts
    keep no adapters (the usual MoE recipe).
    """
    spec, r = setup.spec, setup.options.lora_rank
    h = spec.hidden_size
    q_out = spec.num_heads * spec.head_dim
    kv_out = spec.num_kv_heads * spec.head_dim
    attention = (h + q_out) + 2 * (h + kv_out) + (q_out + h)
    width = spec.intermediate_size
    mlp = (3 if spec.gated_mlp else 2) * (h + width)
    dense_layers = spec.num_layers - setup.parts.moe_layers
    return float(r * (spec.num_layers * attention + dense_layers * mlp))


def working_weight_dtype(setup: Setup) -> str:
    """Return the dtype weights are held and read in (fp32 for fp32 training)."""
    return training_weight_dtype(setup) if setup.training else setup.workload.weights_dtype


def model_weight_bytes(setup: Setup) -> float:
    """Bytes of the whole model's weights in the working dtype (unsharded), as stored."""
    dtype = working_weight_dtype(setup)
    return formats.weight_bytes(setup.parts, setup.spec, dtype, engine_recipe(setup, dtype))


def engine_recipe(setup: Setup, dtype: str) -> Recipe | None:
    """Return the engine's published recipe for the working weights (inference only)."""
    if setup.training:
        return None
    return E.engine_recipe(setup.workload, dtype)


# FP8/FP4 training (torchao float8, Transformer Engine) keeps the trained weights in high
# precision and casts them for each GEMM (torchao float8 README: "the high precision weights
# are kept"); only a frozen base (LoRA / QLoRA) is held in its low-bit format.
_COMPUTE_ONLY_FORMATS = ("fp8", "fp4")


def stored_weight_dtype(setup: Setup) -> str:
    """Return the dtype the weights occupy memory in: what training keeps, not what it casts."""
    dtype = working_weight_dtype(setup)
    if setup.training and setup.options.finetune == "full" and dtype in _COMPUTE_ONLY_FORMATS:
        activation = setup.workload.activation_dtype
        return activation if activation in ("bf16", "fp16") else "bf16"
    return dtype


def stored_weight_bytes(setup: Setup) -> float:
    """Bytes of the whole model's weights as held in memory (unsharded)."""
    dtype = stored_weight_dtype(setup)
    return formats.weight_bytes(setup.parts, setup.spec, dtype, engine_recipe(setup, dtype))


def largest_layer_weight_bytes(setup: Setup) -> float:
    """Bytes of the largest transformer layer (what FSDP gathers at once).

    Under training EP a GPU gathers only its E / ep experts, whole: the callers divide by the
    TP size, which does not slice them (expert_tensor_parallel_degree 1), so they count tp x.
    """
    spec, layout = setup.spec, setup.layout
    dtype = working_weight_dtype(setup)
    attention = attention_params_per_layer(spec)
    dense = mlp_params(spec, spec.intermediate_size)
    moe = 0.0
    if setup.parts.moe_layers:
        routed = setup.parts.per_expert * spec.num_experts
        if setup.training and layout.ep_degree > 1:
            routed = routed / layout.ep_degree * layout.tp
        moe = routed + setup.parts.shared_experts_and_router / setup.parts.moe_layers
    fmt = formats.weight_format(dtype, engine_recipe(setup, dtype))
    bits = formats.layer_bits(fmt, setup.parts, spec)
    return (attention + max(dense, moe)) * bits / 8.0


def gathered_weight_bytes(setup: Setup) -> float:
    """Bytes FSDP holds gathered at once on one GPU: two layers and the output projection.

    The layer in use and the one prefetched (FSDP_GATHERED_LAYERS), and the norm and output
    projection, which torchtitan does not reshard after the forward (0.2.2 parallelize.py
    apply_fsdp: "do not reshard_after_forward the last layers"), so they stay gathered from
    the loss to their backward. FSDP gathers over its data-parallel shards only: under TP each
    rank gathers its TP slice.
    """
    head = setup.parts.lm_head * bytes_per_element(working_weight_dtype(setup))
    layers = C.FSDP_GATHERED_LAYERS * largest_layer_weight_bytes(setup)
    return (layers + head) / max(setup.layout.tp, 1)


def training_state_bytes(setup: Setup, notes: list[str]) -> tuple[float, float]:
    """(gradient bytes, optimizer bytes) per GPU: full training, or LoRA's adapters only.

    LoRA/QLoRA train only the adapters: their gradients and optimizer state (fp32 adapters with
    AdamW, 16 bytes a parameter in all, as PEFT keeps them under autocast). Optimizer offload
    moves the optimizer state (and its fp32 master copy) to host RAM.
    """
    shards = setup.layout.weight_shards
    if setup.options.finetune in ("lora", "qlora"):
        adapters = lora_params(setup)
        notes.append(f"{setup.options.finetune}: rank-{setup.options.lora_rank} adapters "
                     f"({adapters / 1e6:.0f}M parameters) trained, the base frozen")
        grads = adapters * C.GRAD_BYTES_FP32 / shards
        opt = adapters * C.OPTIMIZER_BYTES_FP32[setup.workload.optimizer] / shards
    else:
        params = setup.parts.total
        grads = params * grad_bytes_per_param(setup) / shards
        opt = params * optimizer_bytes_per_param(setup) / shards
    kind = offload_kind(setup)
    if kind == "fsdp-cpu":
        # FSDP2 reduce-scatters one unit's gradients at a time and copies the shard to the host
        notes.append(f"FSDP2 CPUOffloadPolicy: sharded parameters, gradients ({grads / C.GB:.1f}"
                     f" GB) and optimizer state ({opt / C.GB:.1f} GB per GPU) in host RAM")
        grads = C.FSDP_GATHERED_LAYERS * largest_layer_weight_bytes(setup) / setup.layout.tp * \
            grad_bytes_per_param(setup) / bytes_per_element(working_weight_dtype(setup))
        opt = 0.0
    elif kind == "optimizer":
        notes.append(f"optimizer state ({opt / C.GB:.1f} GB per GPU) in host RAM")
        opt = 0.0
    return grads, opt


def offload_kind(setup: Setup) -> str | None:
    """Return what the training offload moves: "optimizer" or "fsdp-cpu" (None without it).

    The engine decides (engines/data/<id>.toml [costs] offload): ZeRO-Offload moves the
    optimizer state and step; FSDP2's CPUOffloadPolicy moves parameters, gradients and
    optimizer state, and only where FSDP shards them (otherwise the optimizer-only form).
    """
    if not (setup.training and setup.options.optimizer_offload) or setup.unified_memory:
        return None
    kind = E.engine_time(setup.workload, setup.res.family).offload
    if kind == "fsdp-cpu" and setup.layout.strategy in ("fsdp", "hsdp"):
        return "fsdp-cpu"
    return "optimizer"


def offloaded_host_bytes(setup: Setup) -> float:
    """Host RAM the offload takes, per GPU (0 without offload).

    Both forms keep the fp32 master weights, the Adam moments and fp32 gradients for the CPU
    step in host RAM (ZeRO-Offload: Ren et al. 2021, sec. 4; FSDP2: the sharded fp32
    parameters and their gradients): the optimizer's bytes plus 4 a parameter, over the shards.
    """
    if offload_kind(setup) is None:
        return 0.0
    per_param = optimizer_bytes_per_param(setup) + C.GRAD_BYTES_FP32
    return setup.parts.total * per_param / setup.layout.weight_shards


# --- The whole picture ------------------------------------------------------------------------

def replicated_attention_bytes(setup: Setup) -> float:
    """Extra attention-weight bytes per GPU when attention runs data-parallel (not sliced)."""
    from hwadvisor.workload.params import attention_layer_count, attention_params_per_layer

    dtype = working_weight_dtype(setup)
    params = attention_params_per_layer(setup.spec) * attention_layer_count(setup.spec)
    return params * bytes_per_element(dtype) * (1.0 - 1.0 / setup.layout.tp)


def runtime_bytes(setup: Setup, tensors: float) -> float:
    """Return the stated allowance: runtime context plus allocator fragmentation."""
    cls = setup.res.device_class
    fixed = C.RUNTIME_FIXED_BYTES.get(cls, 0.5 * C.GB)
    return fixed + C.FRAGMENTATION_FRACTION.get(cls, 0.05) * tensors


def engine_reservation(setup: Setup) -> Reservation | None:
    """Return the serving engine's memory reservation on this GPU (None: it takes what fits)."""
    if setup.training or setup.res.device_class not in ("datacenter-gpu", "consumer-gpu"):
        return None
    from hwadvisor.engines import engine_for

    return engine_for(setup.workload).defaults.reservation(setup.res.memory_total_bytes)


def _within_reservation(setup: Setup, held: Reservation, usable: int, runtime: float,
                        act: float, kv: float, notes: list[str]) -> tuple[int, float]:
    """Return (usable memory, runtime allowance) as the engine's reservation leaves them.

    all (vLLM): weights, activations, CUDA graphs and the KV pool fit within the fraction of
    the GPU; static (SGLang): weights and the KV pool do, and the rest (1 - fraction) is kept
    for activations and graphs whether they need it or not; free (TensorRT-LLM): the KV pool
    is the fraction of what is free after the weights and activations, so the rest of that
    free memory stays unused.
    """
    from hwadvisor.engines import engine_for

    engine = engine_for(setup.workload)
    memory = float(setup.res.memory_total_bytes or usable)
    said = f"{engine.name} {engine.release} ({held.flag} {held.fraction:g})"
    if held.scope == "all":
        notes.append(f"{said}: weights, activations, CUDA graphs and the KV pool within "
                     f"{held.fraction:.0%} of {memory / C.GB:.1f} GB")
        return min(usable, int(held.fraction * memory)), runtime
    if held.scope == "static":
        kept = (1.0 - held.fraction) * memory
        notes.append(f"{said}: weights and the KV pool within {held.fraction:.0%} of "
                     f"{memory / C.GB:.1f} GB; {kept / C.GB:.1f} GB kept for activations and "
                     "CUDA graphs")
        return usable, max(runtime, kept - act)
    unused = kv * (1.0 / held.fraction - 1.0)
    notes.append(f"{said}: the KV pool takes {held.fraction:.0%} of the memory free after the "
                 f"weights and activations; {unused / C.GB:.1f} GB of it stays unused")
    return usable, runtime + unused


def reserved_peak_range(tensors_bytes: float, checkpointing: bool,
                        sharded: bool = False) -> tuple[float, float]:
    """Return the range the allocator's reserved peak lies in, for a tensors' peak.

    `tensors_bytes` is the allocated peak (MemoryEstimate's total less its runtime allowance);
    the reserved peak (torch.cuda.max_memory_reserved, what torchtitan's logs print as
    "memory") adds the caching allocator's unused blocks: RESERVED_OVER_ALLOCATED, measured on
    one GPU, or RESERVED_OVER_ALLOCATED_SHARDED when the layout shards the model (FSDP or TP
    training, `sharded`), measured on torchtitan's ranks. The CUDA context and NCCL's own
    buffers are outside both.
    """
    low, high = C.RESERVED_OVER_ALLOCATED_SHARDED if sharded \
        else C.RESERVED_OVER_ALLOCATED[checkpointing]
    return tensors_bytes * (1.0 + low), tensors_bytes * (1.0 + high)


def _fsdp_stage_unsharded(setup: Setup, whole: float, notes: list[str]) -> float:
    """Extra bytes per GPU when FSDP keeps a pipeline stage unsharded across micro-batches.

    With pipeline stages torchtitan does not reshard after the forward (parallelize_llama
    apply_fsdp: "For PP, do not reshard after forward to avoid per-microbatch all-gathers") and
    torch.distributed.pipelining syncs gradients on the last backward only, so FSDP2 holds the
    stage's parameters gathered, and accumulates its gradients unsharded, for the whole step:
    whole (the model's bytes of that kind) / (tp x pp) on top of the 1/shard share.
    """
    layout = setup.layout
    shard = max(1, layout.shard_degree)
    if shard <= 1:
        return 0.0
    stage = whole / (layout.tp * layout.pp)
    notes.append(f"fsdp with {layout.pp} pipeline stages: the stage's parameters and "
                 "gradients stay unsharded across the micro-batches")
    return stage * (1.0 - 1.0 / shard)


def _fsdp_weight_bytes(setup: Setup, sharded: float, notes: list[str]) -> float:
    """Weight bytes per GPU under FSDP: the shard (unless it is the fp32 master) and the gathered.

    Measured on the H200 (benchmarks/data/torchtitan_memory_h200.json): torchtitan's ranks hold
    16 bytes a local parameter after the step (fp32 shard, fp32 gradient, two moments), no
    16-bit shard beside them.
    """
    shard = max(1, setup.layout.shard_degree)
    gathered = gathered_weight_bytes(setup) * (1 - 1 / shard)
    if fsdp_fp32_shards(setup):
        notes.append(f"fsdp: fp32 shards (1/{setup.layout.weight_shards} of the model, counted "
                     f"as the optimizer's master weights) plus {C.FSDP_GATHERED_LAYERS} "
                     "gathered layers and the output projection in 16 bits")
        return gathered
    notes.append(f"fsdp: 1/{setup.layout.weight_shards} of the weights per GPU plus "
                 f"{C.FSDP_GATHERED_LAYERS} gathered layers and the output projection")
    return sharded + gathered


def _selective_words(setup: Setup) -> str:
    """Say what selective checkpointing keeps, as the engine does it."""
    if selective_policy(setup) == "op-every-other-mm":
        return ("per op: the block input, every other matmul's output and attention's output "
                "kept, the rest recomputed")
    return "attention recomputed, the rest kept"


def memory_estimate(setup: Setup) -> MemoryEstimate:
    """Bytes per GPU by part, the total and whether it fits the usable device memory."""
    wl, layout = setup.workload, setup.layout
    notes: list[str] = []
    shards = layout.weight_shards
    full_weights = stored_weight_bytes(setup)
    weights = full_weights / shards
    if offload_kind(setup) == "fsdp-cpu":
        # the shards live in host RAM: the GPU holds only the units FSDP has gathered
        weights = C.FSDP_GATHERED_LAYERS * largest_layer_weight_bytes(setup) / layout.tp
    elif layout.strategy == "fsdp" and setup.training and layout.pp > 1:
        weights += _fsdp_stage_unsharded(setup, full_weights, notes)
    elif layout.strategy == "fsdp":
        weights = _fsdp_weight_bytes(setup, weights, notes)
    if layout.attn_dp > 1:
        weights += replicated_attention_bytes(setup)
        notes.append(f"data-parallel attention: the attention weights on every GPU, the KV "
                     f"cache of 1/{layout.attn_dp} of the sequences")
    if setup.offload_fraction:
        weights *= 1.0 - setup.offload_fraction
        notes.append(f"{setup.offload_fraction:.0%} of the weights kept in host RAM")
    elif setup.options.offload_fraction and setup.unified_memory:
        notes.append("offload ignored: host and device share memory here")

    kv = act = grads = opt = 0.0
    if setup.training:
        act = training_activation_bytes(setup)
        grads, opt = training_state_bytes(setup, notes)
        if layout.strategy == "fsdp" and layout.pp > 1 and setup.options.finetune == "full":
            grads += _fsdp_stage_unsharded(setup, setup.parts.total * grad_bytes_per_param(setup),
                                           [])
        if wl.activation_checkpointing:
            notes.append("activation checkpointing: " + (
                _selective_words(setup) if setup.options.selective_checkpointing
                else _full_words(setup)))
    else:
        kv = kv_cache_bytes(setup.spec, wl.kv_dtype, setup.batch / layout.attn_dp,
                            wl.prompt_len + wl.gen_len, layout.attn_tp) / layout.pp
        act = inference_activation_bytes(setup)
        draft = draft_memory(setup)
        if draft is not None:
            # the engine shards the drafter over the target's tensor-parallel group (vLLM's
            # draft_tensor_parallel_size defaults to it) and keeps its KV in the same pool
            weights += draft.weight_bytes / layout.tp
            kv += (setup.batch / layout.attn_dp * (wl.prompt_len + wl.gen_len)
                   * draft.kv_bytes_per_token * bytes_per_element(wl.kv_dtype) / 2.0
                   / layout.attn_tp)
            notes.append(f"the drafter's weights and KV cache: {draft.words}")
    if setup.training:
        tensors = training_peak_bytes(setup, weights, act, grads, opt, notes)
    else:
        tensors = weights + kv + act + grads + opt
    runtime = runtime_bytes(setup, tensors)
    usable = setup.res.usable_memory_bytes
    held = engine_reservation(setup)
    if held is not None and usable:
        usable, runtime = _within_reservation(setup, held, usable, runtime, act, kv, notes)
    total = tensors + runtime
    headroom = None if usable is None else int(usable - total)
    return MemoryEstimate(
        weights_bytes=int(weights),
        kv_cache_bytes=int(kv),
        activations_bytes=int(act),
        gradients_bytes=int(grads),
        optimizer_bytes=int(opt),
        runtime_bytes=int(runtime),
        total_bytes=int(total),
        device_memory_bytes=usable,
        headroom_bytes=headroom,
        notes=notes,
    )
