"""The generic model reader: build a config's model on the meta device and describe it.

For a model_type the hand-written parsers (workload/configparse.py) do not know, transformers
builds the causal-LM model from the config on torch's meta device (shapes only: no weights, no
memory, no network, trust_remote_code off), and this module maps its module tree onto a
ModelSpec: exact parameter counts by part, the attention shapes, MoE experts, and the
per-sequence state of state-space and linear-attention layers. It lives in trials/ because it
needs torch; the pipeline hands it to the workload builder (validator/measure.read_any_model),
which calls it only when the fast path refuses a model_type.
"""

from __future__ import annotations

import difflib
import warnings
from dataclasses import dataclass, field
from typing import Any

from hwadvisor.errors import UserError
from hwadvisor.models.workload import ModelSpec
from hwadvisor.workload.native import native_weights_dtype

INSTALL_HINT = "pip install 'hwadvisor[hf]' (transformers and torch; no weights are downloaded)"
# Path words that place a decoder-layer parameter in a part (lower-case, whole path segments
# or their prefixes). Order matters: experts before MLP, attention before norms.
_MLP_WORDS = ("mlp", "feed_forward", "ffn", "ff", "block_sparse_moe", "moe", "fc1", "fc2",
              "c_fc", "dense_h_to_4h", "dense_4h_to_h", "fc_in", "fc_out", "mlp_block")
# Config keys for the MoE facts, in the spellings transformers' configs use.
_EXPERT_KEYS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts")
_TOPK_KEYS = ("num_experts_per_tok", "num_experts_per_token", "moe_topk", "top_k",
              "moe_k", "experts_per_token")


@dataclass
class _Tally:
    """Parameter counts by part, and what the decoder layers hold."""

    parts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(
        ("embedding", "lm_head", "attention", "dense_mlp", "router", "routed_experts",
         "shared_experts", "norms", "other", "routed_expert_params"), 0))
    attention_layers: int = 0
    moe_layers: int = 0
    recurrent_layers: int = 0
    state_elements: int = 0


def describe_config(data: dict[str, Any], source: str) -> ModelSpec:
    """Build the config's causal-LM model on the meta device and describe it as a ModelSpec."""
    torch, transformers = _libraries(source)
    from transformers import AutoModelForCausalLM
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    model_type = str(data.get("model_type"))
    version = transformers.__version__
    if model_type not in CONFIG_MAPPING:
        close = difflib.get_close_matches(model_type, list(CONFIG_MAPPING.keys()), n=3)
        hint = ("a newer transformers may know it; hwadvisor never runs a repo's own code "
                "(trust_remote_code)")
        raise UserError(
            f"{source}: model_type {model_type!r} is not supported: transformers {version} "
            "does not know it",
            hint=f"did you mean {', '.join(close)}? {hint}" if close else hint)
    if model_type not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        raise UserError(
            f"{source}: model_type {model_type!r} has no causal language-model head in "
            f"transformers {version} (an encoder-only, vision-only or speech model)",
            hint="hwadvisor plans decoder LLMs that generate text; pass such a model's config")
    kwargs = {k: _floats(v) for k, v in data.items()
              if not k.startswith("_") and k != "model_type"}
    kwargs.pop("quantization_config", None)  # the plan reads the format; build the shapes
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            config = CONFIG_MAPPING[model_type].from_dict(kwargs)
            with torch.device("meta"):
                model = AutoModelForCausalLM.from_config(config, trust_remote_code=False)
    except Exception as exc:  # noqa: BLE001 - any failure of a foreign build is the user's input
        raise UserError(
            f"{source}: transformers {version} could not build a {model_type} model from this "
            f"config ({type(exc).__name__}: {str(exc)[:160]})",
            hint="check the config.json against the model's original one") from None
    return _spec(model, config, data, source)


def _floats(value: Any) -> Any:
    """Undo transformers' JSON spelling of non-finite floats ({"__float__": "Infinity"})."""
    if isinstance(value, dict):
        if set(value) == {"__float__"}:
            return float(value["__float__"])
        return {k: _floats(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_floats(v) for v in value]
    return value


def _libraries(source: str) -> tuple[Any, Any]:
    try:
        import torch
        import transformers
    except ImportError:
        raise UserError(
            f"{source}: this model_type needs the generic reader, which builds the model's "
            "shapes with transformers", hint=INSTALL_HINT) from None
    return torch, transformers


def _decoder_layers(model: Any, layers: int) -> tuple[str, Any]:
    """Find the decoder layers: the largest ModuleList with num_hidden_layers blocks."""
    import torch

    best: tuple[str, Any] | None = None
    best_size = -1
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.ModuleList) and len(module) == layers:
            size = sum(p.numel() for p in module.parameters())
            if size > best_size:
                best, best_size = (name, module), size
    if best is None:
        raise UserError(
            f"the model has no list of {layers} decoder layers (num_hidden_layers)",
            hint="hwadvisor's generic reader knows decoder stacks; this architecture is not one")
    return best


def _segments(name: str) -> list[str]:
    return name.lower().split(".")


def _has_word(name: str, words: tuple[str, ...]) -> bool:
    return any(seg in words or any(seg.startswith(w) for w in words if len(w) > 3)
               for seg in _segments(name))


def _is_attention(name: str) -> bool:
    """self_attn, attention, multi_head_attention, rel_attn ... anywhere in the path."""
    return any("attn" in seg or "attention" in seg for seg in _segments(name))


def _parent(name: str) -> str:
    """Return the owning module's own name ('q_proj' for 'self_attn.q_proj.weight')."""
    segs = _segments(name)
    return segs[-2] if len(segs) > 1 else ""


def _attr(obj: Any, key: str) -> Any:
    """Getattr that treats a config's refusal (a per-layer attribute read globally) as absent."""
    try:
        return getattr(obj, key, None)
    except Exception:  # noqa: BLE001 - transformers raises its own errors for per-layer fields
        return None


def _tally_layer(layer: Any, tally: _Tally, experts_total: int, seen: set[int]) -> None:
    """Add one decoder layer's parameters to the parts; note its attention, experts, state.

    A block shared by several layers (Zamba's shared transformer) is counted once: `seen`
    holds the parameters already counted.
    """
    modules = dict(layer.named_modules())
    has_attention = has_experts = False
    other_before = tally.parts["other"]
    for name, param in layer.named_parameters(remove_duplicate=False):
        owner_name = name.rsplit(".", 1)[0] if "." in name else ""
        owner = modules.get(owner_name, layer)
        kind = type(owner).__name__
        in_mixer = _in_mixer(name, modules)
        # post_attention_layernorm is a norm, not attention: the owner's class decides first.
        attention = "norm" not in kind.lower() and (
            _is_attention(name) or _in_class(name, modules, ("Attention",)))
        if attention and not in_mixer:
            has_attention = True
        if id(param) in seen:
            continue
        seen.add(id(param))
        count = param.numel()
        if kind.endswith("Experts") or ".experts." in f".{name}":
            if "shared" in name.lower():
                tally.parts["shared_experts"] += count
            else:
                tally.parts["routed_experts"] += count
                has_experts = True
                n = getattr(owner, "num_experts", None) or experts_total
                if n and count % n == 0 and kind.endswith("Experts"):
                    tally.parts["routed_expert_params"] += count // n
        elif "shared_expert" in name.lower():
            tally.parts["shared_experts"] += count
        elif _has_word(name, ("router",)) or (
                experts_total and kind == "Linear" and getattr(owner, "out_features", 0)
                == experts_total and _segments(name)[-2] in ("gate", "router", "wg")):
            tally.parts["router"] += count
        elif in_mixer:
            tally.parts["other"] += count  # a Mamba / linear-attention mixer
        elif attention:
            tally.parts["attention"] += count
        elif "norm" in kind.lower() or _parent(name).endswith(("norm", "ln", "ln_1", "ln_2")):
            tally.parts["norms"] += count
        elif _has_word(name, _MLP_WORDS) or _in_class(name, modules, ("MLP", "FeedForward",
                                                                      "MoE", "Ffn", "FFN")):
            tally.parts["dense_mlp"] += count
        else:
            tally.parts["other"] += count
    state = _layer_state(layer)
    tally.attention_layers += int(has_attention)
    tally.moe_layers += int(has_experts)
    if state is not None:
        tally.recurrent_layers += 1
        tally.state_elements += state
    elif not has_attention and tally.parts["other"] > other_before:
        raise UserError(
            f"decoder layer {type(layer).__name__} mixes tokens without softmax attention "
            f"({_mixer_names(layer)}) and its per-sequence state is not one hwadvisor can size",
            hint="models with Mamba/SSM or gated-delta-net layers are sized; this block is not")


def _in_class(name: str, modules: dict[str, Any], words: tuple[str, ...]) -> bool:
    """Tell whether a module holding the parameter has one of `words` in its class name."""
    segs = name.split(".")[:-1]
    return any(any(w in type(modules.get(".".join(segs[:i]))).__name__ for w in words)
               for i in range(1, len(segs) + 1))


def _in_mixer(name: str, modules: dict[str, Any]) -> bool:
    """Tell whether the parameter sits inside a module that keeps recurrent state."""
    segs = name.split(".")[:-1]
    return any(_state_of(modules.get(".".join(segs[:i]))) is not None
               for i in range(1, len(segs) + 1))


def _state_of(module: Any) -> int | None:
    """Elements of constant state one sequence keeps in this module, when it is a known kind.

    Mamba-1/2 mixers (transformers' *Mixer modules keep ssm_state_size, conv_kernel_size): the
    convolution window (channels x (kernel - 1)) plus the SSM state (d_inner x d_state);
    gated delta-net / linear attention (num_v_heads, head_k_dim, head_v_dim): heads x d_k x
    d_v plus the convolution window. These are what vLLM's Mamba state cache holds.
    """
    if module is None:
        return None
    kernel = getattr(module, "conv_kernel_size", None)
    conv_dim = getattr(module, "conv_dim", None)
    if conv_dim is None:
        conv = getattr(module, "conv1d", None)
        conv_dim = getattr(conv, "in_channels", None) if conv is not None else None
    window = conv_dim * (kernel - 1) if isinstance(conv_dim, int) and isinstance(kernel, int) \
        else 0
    d_state = getattr(module, "ssm_state_size", None)
    if isinstance(d_state, int):
        heads, head_dim = getattr(module, "num_heads", None), getattr(module, "head_dim", None)
        if isinstance(heads, int) and isinstance(head_dim, int):
            inner: Any = heads * head_dim
        else:
            inner = getattr(module, "intermediate_size", None)
        if isinstance(inner, int):
            return int(inner) * d_state + window
    v_heads = getattr(module, "num_v_heads", None)
    k_dim, v_dim = getattr(module, "head_k_dim", None), getattr(module, "head_v_dim", None)
    if isinstance(v_heads, int) and isinstance(k_dim, int) and isinstance(v_dim, int):
        return v_heads * k_dim * v_dim + window
    return None


def _layer_state(layer: Any) -> int | None:
    states = [s for m in layer.modules() if (s := _state_of(m)) is not None]
    return sum(states) if states else None


def _mixer_names(layer: Any) -> str:
    names = sorted({type(m).__name__ for n, m in layer.named_children()
                    if not _is_attention(n) and not _has_word(n, _MLP_WORDS)
                    and "norm" not in type(m).__name__.lower()
                    and any(True for _ in m.parameters())})
    return ", ".join(names)


def _spec(model: Any, config: Any, data: dict[str, Any], source: str) -> ModelSpec:
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    # Decoders of encoder-decoder families (BlenderBot's ForCausalLM) count decoder_layers.
    layers_n = _first_int(text, ("decoder_layers", "num_hidden_layers"))
    if layers_n <= 0:
        raise UserError(f"{source}: the config names no decoder layers (num_hidden_layers)",
                        hint="pass the model's original config.json")
    tally = _Tally()
    embed = model.get_input_embeddings()
    head = model.get_output_embeddings()
    embed_ids = {id(p) for p in embed.parameters()}
    head_ids = {id(p) for p in head.parameters()} if head is not None else set()
    prefix, layer_list = _decoder_layers(model, layers_n)
    experts_total = _first_int(text, _EXPERT_KEYS)
    seen: set[int] = set()
    for layer in layer_list:
        _tally_layer(layer, tally, experts_total, seen)
    layer_ids = {id(p) for p in layer_list.parameters()}
    modules = dict(model.named_modules())
    for name, param in model.named_parameters():
        pid, count = id(param), param.numel()
        if pid in layer_ids:
            continue
        if pid in embed_ids:
            tally.parts["embedding"] += count
        elif pid in head_ids:
            tally.parts["lm_head"] += count
        elif "norm" in type(modules.get(name.rsplit(".", 1)[0], model)).__name__.lower():
            tally.parts["norms"] += count
        else:
            tally.parts["other"] += count
    # DeepSeek-V3's router bias is a buffer the checkpoint stores: count it as a weight.
    tally.parts["router"] += sum(b.numel() for n, b in model.named_buffers()
                                 if n.endswith("e_score_correction_bias"))
    if tally.moe_layers and tally.parts["routed_expert_params"]:
        tally.parts["routed_expert_params"] //= tally.moe_layers
    return _build(text, model, data, source, tally, layers_n, experts_total)


def _first_int(config: Any, keys: tuple[str, ...]) -> int:
    for key in keys:
        value = _attr(config, key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return 0


def _build(text: Any, model: Any, data: dict[str, Any], source: str, tally: _Tally,
           layers_n: int, experts_total: int) -> ModelSpec:
    embed = model.get_input_embeddings()
    vocab, hidden = (int(x) for x in embed.weight.shape[:2])
    heads = _first_int(text, ("num_attention_heads", "n_head", "num_heads")) or 1
    kv_heads = _first_int(text, ("num_key_value_heads", "num_kv_heads", "multi_query_group_num"))
    kv_heads = kv_heads if kv_heads and heads % kv_heads == 0 else heads
    head_dim = _first_int(text, ("head_dim", "attention_head_dim")) or max(hidden // heads, 1)
    intermediate = _first_int(text, ("intermediate_size", "ffn_hidden_size", "n_inner",
                                     "ffn_dim", "d_ff")) or 4 * hidden
    top_k = _first_int(text, _TOPK_KEYS) if tally.moe_layers else 0
    experts = experts_total if tally.moe_layers else 0
    one_expert = tally.parts["routed_expert_params"]
    gated = True
    fields: dict[str, Any] = {
        "name": str(data.get("_name_or_path") or source),
        "model_type": str(data.get("model_type")),
        "hidden_size": hidden, "num_layers": layers_n, "num_heads": heads,
        "num_kv_heads": kv_heads, "head_dim": head_dim, "intermediate_size": intermediate,
        "vocab_size": vocab, "gated_mlp": gated,
        "tied_embeddings": tally.parts["lm_head"] == 0,
        "attention": "mha" if kv_heads == heads else ("mqa" if kv_heads == 1 else "gqa"),
        "attention_layers": tally.attention_layers,
        "recurrent_layers": tally.recurrent_layers,
        "recurrent_state_elements": tally.state_elements,
        "param_parts": dict(tally.parts),
        "max_position_embeddings": _first_int(text, ("max_position_embeddings",)) or None,
        "source": f"{source} (read from the module tree transformers builds)",
    }
    if experts and top_k:
        fields.update(num_experts=experts, experts_per_token=min(top_k, experts),
                      moe_layers=tally.moe_layers,
                      moe_intermediate_size=max(one_expert // (3 * hidden), 1))
    kv_rank = _first_int(text, ("kv_lora_rank",))
    rope = _first_int(text, ("qk_rope_head_dim",))
    if kv_rank and rope:
        nope = _first_int(text, ("qk_nope_head_dim",))
        fields.update(attention="mla", kv_lora_rank=kv_rank, qk_rope_head_dim=rope,
                      qk_nope_head_dim=nope or None, head_dim=(nope or 0) + rope,
                      v_head_dim=_first_int(text, ("v_head_dim",)) or None,
                      num_kv_heads=heads)
    fields.update(_window(text, tally.attention_layers))
    native, where = native_weights_dtype(data)
    fields.update(native_weights_dtype=native, native_dtype_source=where)
    return ModelSpec(**fields)


def _window(text: Any, attention_layers: int) -> dict[str, Any]:
    """Sliding or chunked attention: the window and how many layers use it (layer_types)."""
    kinds = _attr(text, "layer_types")
    window = _first_int(text, ("sliding_window", "attention_chunk_size"))
    if not window:
        return {}
    if isinstance(kinds, list):
        count = sum(1 for k in kinds if k in ("sliding_attention", "chunked_attention"))
    else:
        count = attention_layers
    count = min(count, attention_layers)
    chunked = not _first_int(text, ("sliding_window",))  # attention_chunk_size alone
    return {"sliding_window": window, "sliding_window_layers": count,
            "attention_chunked": chunked} if count else {}
