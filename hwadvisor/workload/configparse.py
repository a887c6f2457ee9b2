"""Hugging Face config.json -> ModelSpec, for the model families hwadvisor knows.

The rules follow what `transformers` instantiates (its configuration_*.py defaults and the
modules its modeling_*.py builds), so that parameter counts match the real model. Every
problem with the input becomes a UserError that names the field; nothing else escapes.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from hwadvisor.errors import UserError
from hwadvisor.models.workload import ModelSpec
from hwadvisor.workload.native import native_weights_dtype

# The generic model reader, for model types the hand-written parsers lack: (config, source) ->
# spec. It builds the model's shapes with transformers on torch's meta device, so it lives with
# the other torch code (trials/meta_model.py, reached through validator/measure.read_any_model);
# the workload package may not import it. The caller hands it in, as perfmodel's calibrate is
# handed the cluster's network reader, so `recommend` and `estimate` on a known family never
# import transformers or torch (the fast path); without one, such a model type is refused.
ModelReader = Callable[[dict[str, Any], str], ModelSpec]

# A config.json is a few KB; refuse anything absurd before reading it into memory.
MAX_CONFIG_BYTES = 8 * 1024 * 1024
# Upper bound for any size or count field: far above every real model (the largest vocab is
# ~256k, hidden sizes ~16k), low enough that counts and FLOPs stay meaningful.
MAX_FIELD = 1 << 24

AttnBias = Literal["attention_bias", "qkv_always", "qkv_bias_key", "use_bias", "all_always",
                   "none"]
Sliding = Literal["none", "all", "qwen2", "qwen2_moe", "alternate"]
Moe = Literal["none", "mixtral", "qwen2_moe", "qwen3_moe", "deepseek"]


@dataclass(frozen=True)
class Family:
    """How one model_type maps onto ModelSpec: the defaults and modules transformers uses."""

    tie_default: bool = False
    head_dim_default: int | None = None  # None: hidden_size // num_attention_heads
    attn_bias: AttnBias = "attention_bias"
    mlp_bias_key: bool = False  # the config's mlp_bias flag is honoured
    norms_per_layer: int = 2
    sliding: Sliding = "none"
    sliding_default: int | None = None
    sliding_needs_flag: bool = False  # the window applies only with use_sliding_window: true
    qk_norm: bool = False
    qk_norm_scope: Literal["head", "full"] = "head"
    qk_norm_key: str | None = None  # the flag that turns qk_norm on (cohere, phi)
    norm: Literal["rmsnorm", "layernorm", "layernorm-nobias"] = "rmsnorm"
    gated: bool = True
    mlp_bias_always: bool = False
    mlp_bias_use_bias: bool = False  # starcoder2: one use_bias flag for attention and MLP
    lm_head_bias: bool = False
    moe: Moe = "none"
    mla: bool = False
    router_score_bias: bool = False
    first_k_dense_default: int = 0
    shared_experts_default: int = 0
    q_lora_rank_default: int | None = None


# Defaults cite transformers 5.x models/<type>/configuration_<type>.py.
FAMILIES: dict[str, Family] = {
    "llama": Family(mlp_bias_key=True),
    # granite: llama's modules; its embedding/residual/logit multipliers change no shapes.
    "granite": Family(mlp_bias_key=True),
    # olmo2: RMSNorm over all q heads and all k heads (q_norm, k_norm), norms after attention
    # and MLP instead of before (still two per layer).
    "olmo2": Family(qk_norm=True, qk_norm_scope="full"),
    # cohere: one weight-only LayerNorm per layer (attention and MLP run in parallel);
    # use_qk_norm adds LayerNorms over (heads, head_dim) for q and (kv_heads, head_dim) for k.
    "cohere": Family(tie_default=True, norm="layernorm-nobias", norms_per_layer=1,
                     qk_norm_key="use_qk_norm", qk_norm_scope="full"),
    # starcoder2: LayerNorm with bias, a plain (not gated) MLP, use_bias on every linear.
    "starcoder2": Family(tie_default=True, attn_bias="use_bias", norm="layernorm", gated=False,
                         mlp_bias_use_bias=True, sliding="all"),
    # phi (phi-1/1.5/2): parallel block with one LayerNorm, biased q/k/v/dense, fc1/fc2 and
    # lm_head; qk_layernorm adds a LayerNorm over head_dim for q and k.
    "phi": Family(attn_bias="all_always", norm="layernorm", norms_per_layer=1, gated=False,
                  mlp_bias_always=True, lm_head_bias=True, qk_norm_key="qk_layernorm"),
    # mistral/mixtral/phi3 build q/k/v/o without bias whatever attention_bias says.
    "mistral": Family(attn_bias="none", sliding="all", sliding_default=4096),
    "mixtral": Family(attn_bias="none", sliding="all", moe="mixtral"),
    "phi3": Family(attn_bias="none", sliding="all"),
    # qwen2 always has q/k/v biases (modeling_qwen2.py: bias=True), never on o_proj.
    "qwen2": Family(
        attn_bias="qkv_always", sliding="qwen2", sliding_default=4096, sliding_needs_flag=True
    ),
    "qwen2_moe": Family(
        attn_bias="qkv_bias_key",
        sliding="qwen2_moe",
        sliding_default=4096,
        sliding_needs_flag=True,
        moe="qwen2_moe",
    ),
    # qwen3: per-head q_norm/k_norm, no q/k/v biases unless attention_bias.
    "qwen3": Family(
        head_dim_default=128,
        qk_norm=True,
        sliding="qwen2",
        sliding_default=4096,
        sliding_needs_flag=True,
    ),
    # transformers 5's Qwen3MoeConfig has head_dim None (hidden // heads); releases set it.
    "qwen3_moe": Family(
        qk_norm=True,
        sliding="all",  # modeling_qwen3_moe.py applies config.sliding_window on every layer
        sliding_default=4096,
        sliding_needs_flag=True,
        moe="qwen3_moe",
    ),
    "gemma": Family(tie_default=True, head_dim_default=256),
    # gemma2: pre/post norms around both attention and MLP; even layers use the window.
    "gemma2": Family(
        tie_default=True,
        head_dim_default=256,
        norms_per_layer=4,
        sliding="alternate",
        sliding_default=4096,
    ),
    "deepseek_v2": Family(
        attn_bias="attention_bias",
        mlp_bias_key=True,
        moe="deepseek",
        mla=True,
        first_k_dense_default=0,
        shared_experts_default=2,
        q_lora_rank_default=1536,
    ),
    "deepseek_v3": Family(
        attn_bias="attention_bias",
        moe="deepseek",
        mla=True,
        router_score_bias=True,
        first_k_dense_default=3,
        shared_experts_default=1,
        q_lora_rank_default=1536,
    ),
}

_MISSING = object()


def supported_model_types() -> list[str]:
    """Return the config.json model_type values hwadvisor can parse."""
    return sorted(FAMILIES)


class _Fields:
    """Typed, range-checked access to one config dict; errors name the field and the file."""

    def __init__(self, data: dict[str, Any], label: str, model_type: str) -> None:
        self.data = data
        self.label = label
        self.model_type = model_type

    def _fail(self, key: str, expected: str, value: object) -> UserError:
        shown = repr(value)
        if len(shown) > 60:
            shown = shown[:57] + "..."
        return UserError(
            f"{self.label}: field '{key}' must be {expected}, got {shown}",
            hint=f"fix '{key}' in the config.json (a {self.model_type} model); "
            "copy it from the model's Hugging Face repo if unsure",
        )

    def _missing(self, key: str) -> UserError:
        return UserError(
            f"{self.label}: required field '{key}' is missing",
            hint=f"a config.json for model_type '{self.model_type}' must set '{key}'; "
            "use the model's original config.json from Hugging Face",
        )

    def get(self, key: str) -> object:
        """Return the raw value, or _MISSING when the key is absent."""
        return self.data.get(key, _MISSING)

    def int_(self, key: str, default: object = _MISSING, minimum: int = 1) -> int:
        """Read a required (no default) or optional int in [minimum, MAX_FIELD]; null: default."""
        value = self.get(key)
        if value is _MISSING or value is None:
            if default is _MISSING:
                raise self._missing(key)
            return default  # type: ignore[return-value]
        expected = "a positive integer" if minimum >= 1 else "a non-negative integer"
        # bool is an int in Python; true/false for a size is a mistake, not 1/0.
        if isinstance(value, bool) or not isinstance(value, int):
            raise self._fail(key, expected, value)
        if value < minimum:
            raise self._fail(key, expected, value)
        if value > MAX_FIELD:
            raise self._fail(key, f"at most {MAX_FIELD}", value)
        return value

    def opt_int(self, key: str, default: int | None, minimum: int = 1) -> int | None:
        """Read an optional int where null means None (e.g. q_lora_rank, sliding_window)."""
        value = self.get(key)
        if value is _MISSING:
            return default
        if value is None:
            return None
        return self.int_(key, minimum=minimum)

    def bool_(self, key: str, default: bool) -> bool:
        """Read an optional true/false flag; null means default."""
        value = self.get(key)
        if value is _MISSING or value is None:
            return default
        if not isinstance(value, bool):
            raise self._fail(key, "true or false", value)
        return value

    def int_list(self, key: str) -> list[int]:
        """Read an optional list of non-negative ints (e.g. mlp_only_layers)."""
        value = self.get(key)
        if value is _MISSING or value is None:
            return []
        if not isinstance(value, list) or any(
            isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in value
        ):
            raise self._fail(key, "a list of non-negative integers", value)
        return value

    def layer_types(self, num_layers: int) -> list[str] | None:
        """Read transformers' optional per-layer attention kinds (one per layer)."""
        value = self.get("layer_types")
        if value is _MISSING or value is None:
            return None
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self._fail("layer_types", "a list of strings", value)
        if len(value) != num_layers:
            raise self._fail(
                "layer_types", f"a list of {num_layers} entries (num_hidden_layers)", value
            )
        return value


# The keys vLLM reads a model's window from, the smallest winning, and the RoPE types whose
# config already states the scaled window (vllm/transformers_utils/model_arch_config_convertor.py
# derive_max_model_len_and_key and vllm/config/model.py _get_and_verify_max_len, v0.33.0;
# `vllm serve --max-model-len` above it refuses to start).
_WINDOW_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length",
                "model_max_length", "max_target_positions", "max_sequence_length",
                "max_seq_length", "seq_len")
_SCALED_ROPE = ("su", "longrope", "llama3", "yarn", "deepseek_yarn", "deepseek_llama_scaling")


def context_window(data: dict[str, Any]) -> int | None:
    """Return the longest sequence the config lets an engine read (None: no key states one).

    As vLLM 0.33.0 derives it: the smallest length key, times the factor of a RoPE scaling
    that does not state the scaled window itself (linear, dynamic); Gemma-3's window is
    already scaled. A multimodal config's text_config is read, as vLLM's hf_text_config.
    """
    if isinstance(data.get("text_config"), dict):
        data = data["text_config"]
    lengths = [v for k in _WINDOW_KEYS if isinstance(v := data.get(k), int)
               and not isinstance(v, bool) and v > 0]
    if not lengths:
        return None
    window = float(min(lengths))
    if isinstance(data.get("model_max_length"), int) and data["model_max_length"] > 0:
        window = float(data["model_max_length"])  # Cohere: this key wins (as vLLM reads it)
    rope = data.get("rope_parameters") or data.get("rope_scaling")
    if isinstance(rope, dict) and "gemma3" not in str(data.get("model_type", "")):
        kind = rope.get("rope_type", rope.get("type"))
        factor = rope.get("factor")
        if kind not in _SCALED_ROPE and isinstance(factor, (int, float)) and factor > 0:
            window *= float(factor)
    return int(window)


def parse_config(data: object, source: str, read_model: ModelReader | None = None) -> ModelSpec:
    """Build a ModelSpec from a parsed config.json; source names it in errors and in the spec.

    read_model reads a model_type the hand-written parsers lack (None: such a type is refused).
    """
    label = source
    if not isinstance(data, dict):
        raise UserError(
            f"{label}: a config.json must be a JSON object, got {type(data).__name__}",
            hint="pass the model's config.json from its Hugging Face repo",
        )
    model_type = data.get("model_type", _MISSING)
    if model_type is _MISSING or model_type is None:
        raise UserError(
            f"{label}: required field 'model_type' is missing",
            hint=f"set model_type to one of: {', '.join(supported_model_types())}",
        )
    if not isinstance(model_type, str) or model_type not in FAMILIES:
        return _generic(data, label, model_type, read_model)
    family = FAMILIES[model_type]
    f = _Fields(data, label, model_type)
    return _build_spec(f, family, _name(data, source))


def _generic(data: dict[str, Any], label: str, model_type: object,
             read_model: ModelReader | None) -> ModelSpec:
    """Read a model_type the fast path lacks with the generic reader, or refuse it by name."""
    shown = repr(model_type)[:60]
    if isinstance(model_type, str) and read_model is not None:
        spec = read_model(data, label)
        return spec.model_copy(update={"name": _name(data, label),
                                       "context_window": context_window(data)})
    close = difflib.get_close_matches(str(model_type), list(FAMILIES), n=3)
    hint = (f"model types read without transformers: {', '.join(supported_model_types())}; "
            "any other causal LM of transformers is read with pip install 'hwadvisor[hf]'")
    if close:
        hint = f"did you mean {', '.join(close)}? " + hint
    raise UserError(f"{label}: model_type {shown} is not one hwadvisor reads from its config "
                    "alone", hint=hint)


def _name(data: dict[str, Any], source: str) -> str:
    name = data.get("_name_or_path")
    if isinstance(name, str) and name.strip():
        return name.strip()
    path = Path(source)
    # ".../Meta-Llama-3-8B/config.json" is best named by its folder.
    if path.name == "config.json" and path.parent.name:
        return path.parent.name
    return path.stem or source


def _build_spec(f: _Fields, family: Family, name: str) -> ModelSpec:
    hidden = f.int_("hidden_size")
    layers = f.int_("num_hidden_layers")
    heads = f.int_("num_attention_heads")
    intermediate = f.int_("intermediate_size")
    vocab = f.int_("vocab_size")
    kv_heads = f.int_("num_key_value_heads", default=heads)
    if kv_heads > heads or heads % kv_heads != 0:
        raise UserError(
            f"{f.label}: field 'num_key_value_heads' ({kv_heads}) must divide "
            f"num_attention_heads ({heads})",
            hint="grouped-query attention shares each key/value head among a whole number "
            "of query heads; check both fields against the original config.json",
        )
    fields: dict[str, Any] = {
        "name": name,
        "model_type": f.model_type,
        "hidden_size": hidden,
        "num_layers": layers,
        "num_heads": heads,
        "num_kv_heads": kv_heads,
        "intermediate_size": intermediate,
        "vocab_size": vocab,
        "tied_embeddings": f.bool_("tie_word_embeddings", family.tie_default),
        "norms_per_layer": family.norms_per_layer,
        "qk_norm": family.qk_norm or (
            family.qk_norm_key is not None and f.bool_(family.qk_norm_key, False)),
        "qk_norm_scope": family.qk_norm_scope,
        "norm": family.norm,
        "gated_mlp": family.gated,
        "lm_head_bias": family.lm_head_bias,
        "mlp_bias": family.mlp_bias_always or (
            family.mlp_bias_use_bias and f.bool_("use_bias", True)),
        "max_position_embeddings": f.opt_int("max_position_embeddings", None),
        "context_window": context_window(f.data),
        "source": f.label,
    }
    native, where = native_weights_dtype(f.data)
    fields.update(native_weights_dtype=native, native_dtype_source=where,
                  mtp_layers=f.opt_int("num_nextn_predict_layers", 0, minimum=0) or 0)
    if family.mlp_bias_key:
        fields["mlp_bias"] = f.bool_("mlp_bias", False)
    fields.update(_attention(f, family, hidden, heads, kv_heads))
    fields.update(_sliding(f, family, layers))
    fields.update(_moe(f, family, layers, intermediate))
    return ModelSpec(**fields)


def _attention(f: _Fields, family: Family, hidden: int, heads: int, kv_heads: int) -> dict:
    out: dict[str, Any] = {}
    if family.attn_bias == "attention_bias":
        bias = f.bool_("attention_bias", False)
        out["qkv_bias"] = out["o_bias"] = bias
    elif family.attn_bias == "qkv_always":
        out["qkv_bias"] = True
    elif family.attn_bias == "qkv_bias_key":
        out["qkv_bias"] = f.bool_("qkv_bias", True)
    elif family.attn_bias == "use_bias":
        out["qkv_bias"] = out["o_bias"] = f.bool_("use_bias", True)
    elif family.attn_bias == "all_always":
        out["qkv_bias"] = out["o_bias"] = True
    if family.mla:
        rope = f.int_("qk_rope_head_dim")
        nope = f.int_("qk_nope_head_dim")
        out.update(
            attention="mla",
            q_lora_rank=f.opt_int("q_lora_rank", family.q_lora_rank_default),
            kv_lora_rank=f.int_("kv_lora_rank"),
            qk_rope_head_dim=rope,
            qk_nope_head_dim=nope,
            v_head_dim=f.int_("v_head_dim"),
            head_dim=nope + rope,
            # MLA has no grouped K/V heads: kv_b_proj expands the latent to every head.
            num_kv_heads=heads,
        )
        return out
    default_head_dim = family.head_dim_default or hidden // heads
    if default_head_dim < 1:
        raise UserError(
            f"{f.label}: field 'num_attention_heads' ({heads}) is larger than "
            f"hidden_size ({hidden}), which leaves no head_dim",
            hint="set head_dim explicitly or check num_attention_heads",
        )
    out["head_dim"] = f.int_("head_dim", default=default_head_dim)
    if kv_heads == heads:
        out["attention"] = "mha"
    elif kv_heads == 1:
        out["attention"] = "mqa"
    else:
        out["attention"] = "gqa"
    return out


def _sliding(f: _Fields, family: Family, layers: int) -> dict:
    """Window size and the number of layers that use it, as transformers lays them out."""
    if family.sliding == "none":
        return {}
    if family.sliding_needs_flag and not f.bool_("use_sliding_window", False):
        return {}
    window = f.opt_int("sliding_window", family.sliding_default)
    if window is None:
        return {}
    kinds = f.layer_types(layers)
    if kinds is not None:
        count = sum(1 for kind in kinds if kind == "sliding_attention")
    elif family.sliding == "all":
        count = layers
    elif family.sliding == "alternate":
        # gemma2: layer i slides when (i + 1) % 2 (configuration_gemma2.py)
        count = (layers + 1) // 2
    elif family.sliding == "qwen2":
        max_window = f.int_("max_window_layers", default=28, minimum=0)
        count = max(0, layers - max_window)  # layers i >= max_window_layers slide
    else:  # qwen2_moe: even layers below max_window_layers (configuration_qwen2_moe.py)
        max_window = f.int_("max_window_layers", default=28, minimum=0)
        count = sum(1 for i in range(min(layers, max_window)) if (i + 1) % 2)
    if count == 0:
        return {}
    return {"sliding_window": window, "sliding_window_layers": count}


def _moe(f: _Fields, family: Family, layers: int, intermediate: int) -> dict:
    if family.moe == "none":
        return {}
    if family.moe == "mixtral":
        experts = f.int_("num_local_experts")
        moe_width = intermediate
        moe_layers = layers
        dense = 0
        out: dict[str, Any] = {}
    elif family.moe in ("qwen2_moe", "qwen3_moe"):
        # transformers 5 saves qwen3_moe's expert count as num_local_experts (an attribute_map)
        experts = f.int_("num_experts", default=f.int_("num_local_experts", default=_MISSING)
                         if f.get("num_local_experts") not in (_MISSING, None) else _MISSING)
        moe_width = f.int_("moe_intermediate_size")
        step = f.int_("decoder_sparse_step", default=1)
        mlp_only = set(f.int_list("mlp_only_layers"))
        moe_layers = sum(1 for i in range(layers) if i not in mlp_only and (i + 1) % step == 0)
        dense = layers - moe_layers  # not necessarily leading here; the count is what matters
        out = {}
        if family.moe == "qwen2_moe":  # one gated shared expert; qwen3_moe has none
            out = {
                "num_shared_experts": 1,
                "shared_expert_intermediate_size": f.int_("shared_expert_intermediate_size"),
                "shared_expert_gate": True,
            }
    else:  # deepseek_v2 / deepseek_v3
        experts = f.int_("n_routed_experts")
        moe_width = f.int_("moe_intermediate_size")
        first_dense = f.int_("first_k_dense_replace", family.first_k_dense_default, minimum=0)
        # transformers 5 puts an MoE block on every layer from first_k_dense_replace on and
        # does not consult moe_layer_freq (1 in every released DeepSeek config); we do the same.
        dense = min(first_dense, layers)
        moe_layers = layers - dense
        shared = f.int_("n_shared_experts", family.shared_experts_default, minimum=0)
        out = {
            "num_shared_experts": shared,
            "shared_expert_intermediate_size": moe_width * shared if shared else None,
            "router_score_bias": family.router_score_bias,
            "moe_layer_freq": f.int_("moe_layer_freq", default=1),
        }
    per_token = f.int_("num_experts_per_tok")
    if per_token > experts:
        raise UserError(
            f"{f.label}: field 'num_experts_per_tok' ({per_token}) is larger than the "
            f"number of experts ({experts})",
            hint="each token is routed to at most every expert; check both fields",
        )
    out.update(
        num_experts=experts,
        experts_per_token=per_token,
        moe_intermediate_size=moe_width,
        moe_layers=moe_layers,
        dense_layers=dense,
    )
    return out


def read_config_file(path: Path) -> dict[str, Any]:
    """Read a config.json (or a folder holding one) as JSON; every failure is a UserError."""
    try:
        if path.is_dir():
            inner = path / "config.json"
            if not inner.is_file():
                raise UserError(
                    f"{path}: is a directory without a config.json",
                    hint="pass the model folder that holds config.json, or the file itself",
                )
            path = inner
        if not path.is_file():
            raise UserError(
                f"{path}: not a file", hint="pass a preset id or the path of a config.json"
            )
        size = path.stat().st_size
        if size > MAX_CONFIG_BYTES:
            raise UserError(
                f"{path}: {size} bytes is too large for a config.json",
                hint="pass the model's config.json, not its weights",
            )
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UserError(
            f"{path}: cannot be read ({exc.strerror or exc})",
            hint="check the path and its permissions",
        ) from None
    except UnicodeDecodeError:
        raise UserError(
            f"{path}: is not UTF-8 text", hint="a config.json is a UTF-8 JSON file"
        ) from None
    return parse_json_text(text, str(path))


def parse_json_text(text: str, label: str) -> dict[str, Any]:
    """Parse JSON text into a dict, turning every JSON problem into a UserError."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UserError(
            f"{label}: not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})",
            hint="a config.json is plain JSON; check for trailing commas or comments",
        ) from None
    except (ValueError, RecursionError) as exc:
        # ValueError: integers beyond Python's digit limit; RecursionError: absurd nesting.
        raise UserError(
            f"{label}: JSON could not be read ({type(exc).__name__})",
            hint="pass the model's original config.json",
        ) from None
    if not isinstance(data, dict):
        raise UserError(
            f"{label}: a config.json must be a JSON object, got {type(data).__name__}",
            hint="pass the model's config.json from its Hugging Face repo",
        )
    return data
