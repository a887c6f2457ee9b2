"""Weight formats: how many bits each part of a model takes, and how its matmuls run.

A format stores the decoder layers' matmul weights at one base width, may keep some tensors
wider (llama.cpp's _M mixes give half of attn_v and ffn_down 6 bits), and treats the embedding
table and the output layer on its own terms. Sizes below reproduce published files:
- Llama-3-8B Q4_K_M 4.92 GB, IQ4_XS 4.45 GB (bartowski/Meta-Llama-3-8B-Instruct-GGUF);
- Llama-2-7B Q4_0 3.83 GB, Q6_K 5.53 GB, Q8_0 7.16 GB (TheBloke/Llama-2-7B-GGUF);
- Llama-3-8B AWQ 4-bit 5.7 GB, FP8 (llm-compressor) 9.1 GB (embeddings and lm_head in bf16).
An engine's published recipe replaces a format's widths (engines/data/<id>.toml [quantization]),
chosen by checkpoint (efficiency.engine_recipe): ExecuTorch's prequantised Llama 3.2 keeps the
embedding and the classifier in 8 bits (1B SpinQuant 1,083 MiB, 3B 2,435 MiB); its PTQ recipe
for any other checkpoint writes 8da4w group 128 and a 4-bit embedding (Llama-3-8B 4.20 GB).
tests/perfmodel/test_formats.py pins each of these to within 2%.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal

from hwadvisor.models import ModelSpec
from hwadvisor.workload.params import ParamBreakdown, expert_width, moe_layer_count

if TYPE_CHECKING:
    from hwadvisor.engines.schema import Recipe

FormatKind = Literal["dense", "weight-only", "w8a8"]

# ggml block formats, bits per weight (ggml/src/ggml-common.h block structs):
# Q4_0: 32 4-bit values + one fp16 scale = 18 bytes / 32 = 4.5; Q8_0: 34 bytes / 32 = 8.5;
# Q4_K: 144 bytes / 256 = 4.5; Q5_K: 176 / 256 = 5.5; Q6_K: 210 / 256 = 6.5625;
# IQ4_XS: 136 / 256 = 4.25.
Q4_0, Q8_0, Q4_K, Q5_K, Q6_K, IQ4_XS = 4.5, 8.5, 4.5, 5.5, 6.5625, 4.25
# Q5_0: 22 bytes / 32 = 5.5; Q5_1: 24 / 32 = 6.0; IQ4_NL: 18 / 32 = 4.5.
Q5_0, Q5_1, IQ4_NL = 5.5, 6.0, 4.5
# llama-quantize stores a tensor whose rows are not a multiple of a 256-value super-block in a
# 32-block type instead (src/llama-quant.cpp tensor_type_fallback at 0c1e57098): Q4_K -> Q5_0,
# Q5_K -> Q5_1, Q6_K -> Q8_0, IQ4_XS -> IQ4_NL. Qwen2.5-0.5B (hidden 896) in Q4_K_M: 144 of 218
# tensors fall back, 373.60 MiB (6.34 bits a weight) instead of ~300.
K_BLOCK = 256
K_FALLBACK = {Q4_K: Q5_0, Q5_K: Q5_1, Q6_K: Q8_0, IQ4_XS: IQ4_NL}
# AWQ/GPTQ int4, group 128: 4 bits + an fp16 scale and a packed 4-bit zero per group
# (AutoAWQ's GEMM layout) = 4 + 20/128.
INT4_GROUP = 4.0 + 20.0 / 128
# bitsandbytes NF4 with double quantisation (QLoRA, Dettmers et al. 2023, section 3): 4 bits +
# 8-bit absmax per 64 + fp32 second-level constant per 256 blocks = 4 + 8/64 + 32/(64*256).
NF4 = 4.0 + 8.0 / 64 + 32.0 / (64 * 256)
# MLX affine quantisation (mlx.core.quantize, group 64): an fp16 scale and bias per group.
MLX4, MLX8 = 4.0 + 32.0 / 64, 8.0 + 32.0 / 64
# NVFP4: e2m1 values with one e4m3 scale per 16 (NVIDIA, "Introducing NVFP4", 2025) = 4.5.
NVFP4 = 4.0 + 8.0 / 16


@dataclass(frozen=True)
class WeightFormat:
    """How one weights format stores a model and how its matmuls compute."""

    name: str
    layer_bits: float  # base bits per weight of the decoder layers' matmuls
    embedding_bits: float  # token embedding table
    output_bits: float  # lm_head / output.weight (when untied)
    kind: FormatKind  # weight-only: dequantised to the activation dtype in the kernel
    upgraded_bits: float | None = None  # bits of the attn_v / ffn_down tensors a mix upgrades
    upgraded_share: float = 0.0  # share of those tensors upgraded
    family: str = "torch"  # who runs it natively: torch, gguf, mlx
    output_untied: bool = False  # the classifier is stored apart from a tied embedding
    recipe: str | None = None  # the engine recipe that set the widths, in its words
    k_quant: bool = False  # the layers' type packs 256-value super-blocks (GGUF K-quants, IQ4_XS)


FORMATS: dict[str, WeightFormat] = {
    "fp32": WeightFormat("fp32", 32, 32, 32, "dense"),
    "tf32": WeightFormat("tf32", 32, 32, 32, "dense"),
    "bf16": WeightFormat("bf16", 16, 16, 16, "dense"),
    "fp16": WeightFormat("fp16", 16, 16, 16, "dense"),
    # FP8 / INT8 W8A8 and AWQ/GPTQ int4: llm-compressor, AutoAWQ and GPTQ keep embed_tokens and
    # lm_head in 16 bits (they quantise nn.Linear layers and skip lm_head).
    "fp8": WeightFormat("fp8", 8, 16, 16, "w8a8"),
    "int8": WeightFormat("int8", 8, 16, 16, "w8a8"),
    "fp4": WeightFormat("fp4", NVFP4, 16, 16, "w8a8"),
    "int4": WeightFormat("int4", INT4_GROUP, 16, 16, "weight-only"),
    # bitsandbytes quantises nn.Linear but not the lm_head (llm_int8_skip_modules default).
    "nf4": WeightFormat("nf4", NF4, 16, 16, "weight-only"),
    # llama.cpp (src/llama-quant.cpp, llama_tensor_get_type): output.weight goes to Q6_K for
    # every type below Q8_0; token_embd takes the base type; the _M mixes give Q6_K to half of
    # attn_v and ffn_down ("use_more_bits": first and last eighth of layers and every third).
    "q4_0": WeightFormat("q4_0", Q4_0, Q4_0, Q6_K, "weight-only", family="gguf"),
    "q4_k_m": WeightFormat("q4_k_m", Q4_K, Q4_K, Q6_K, "weight-only", Q6_K, 0.5, "gguf",
                           k_quant=True),
    "q5_k_m": WeightFormat("q5_k_m", Q5_K, Q5_K, Q6_K, "weight-only", Q6_K, 0.5, "gguf",
                           k_quant=True),
    "q6_k": WeightFormat("q6_k", Q6_K, Q6_K, Q6_K, "weight-only", family="gguf", k_quant=True),
    "q8_0": WeightFormat("q8_0", Q8_0, Q8_0, Q8_0, "weight-only", family="gguf"),
    "iq4_xs": WeightFormat("iq4_xs", IQ4_XS, IQ4_XS, Q6_K, "weight-only", family="gguf",
                           k_quant=True),
    # mlx_lm.convert -q quantises every Linear and the embedding (which also serves as the
    # tied output), group 64.
    "mlx-4bit": WeightFormat("mlx-4bit", MLX4, MLX4, MLX4, "weight-only", family="mlx"),
    "mlx-8bit": WeightFormat("mlx-8bit", MLX8, MLX8, MLX8, "weight-only", family="mlx"),
}
GGUF_FORMATS = tuple(k for k, f in FORMATS.items() if f.family == "gguf")
MLX_FORMATS = tuple(k for k, f in FORMATS.items() if f.family == "mlx")


def weight_format(dtype: str, recipe: Recipe | None = None) -> WeightFormat:
    """Return the format of a weights dtype, as the engine recipe (if any) stores it."""
    fmt = FORMATS[dtype]
    if recipe is None:
        return fmt
    return replace(fmt, layer_bits=recipe.layer_bits, embedding_bits=recipe.embedding_bits,
                   output_bits=recipe.output_bits, output_untied=recipe.output_untied,
                   recipe=recipe.name)


def _upgradable_params(parts: ParamBreakdown, spec: ModelSpec) -> float:
    """Parameters of the attn_v and ffn_down tensors (routed experts' down included)."""
    v_proj = spec.num_layers * spec.hidden_size * spec.num_kv_heads * spec.head_dim
    moe_layers = moe_layer_count(spec)
    dense_down = (spec.num_layers - moe_layers) * spec.intermediate_size * spec.hidden_size
    expert_down = moe_layers * spec.num_experts * expert_width(spec) * spec.hidden_size
    return float(v_proj + dense_down + expert_down)


def stored_bits(fmt: WeightFormat, bits: float, ncols: int) -> float:
    """Bits of a GGUF tensor of rows of `ncols` values: its type's, or the fallback's."""
    if fmt.family != "gguf" or ncols % K_BLOCK == 0:
        return bits
    if bits == fmt.layer_bits and not fmt.k_quant:
        return bits  # a 32-block type (Q4_0, Q8_0) fits any row a multiple of 32
    return K_FALLBACK.get(bits, bits)


def _dense_gguf_layer_bits(fmt: WeightFormat, spec: ModelSpec) -> float:
    """Average bits of a dense GGUF layer whose tensors' rows are off the 256 super-block.

    Per tensor, by its row width (ncols): q, k, v, gate, up take the hidden size, the attention
    output heads x head_dim, ffn_down the MLP width; the _M mixes upgrade half of v and down.
    """
    h, a = spec.hidden_size, spec.num_heads * spec.head_dim
    kv, inter = spec.num_kv_heads * spec.head_dim, spec.intermediate_size
    up_share = fmt.upgraded_share if fmt.upgraded_bits is not None else 0.0
    upgraded = fmt.upgraded_bits or fmt.layer_bits
    tensors = [  # (params, ncols, share upgraded)
        (h * a, h, 0.0), (h * kv, h, 0.0), (h * kv, h, up_share), (a * h, a, 0.0),
        (2 * h * inter, h, 0.0), (inter * h, inter, up_share)]
    total = sum(p for p, _, _ in tensors)
    bits = sum(p * ((1 - u) * stored_bits(fmt, fmt.layer_bits, n)
                    + u * stored_bits(fmt, upgraded, n)) for p, n, u in tensors)
    return bits / total


def _rows_off_block(spec: ModelSpec) -> bool:
    return any(d % K_BLOCK for d in (spec.hidden_size, spec.num_heads * spec.head_dim,
                                     spec.intermediate_size))


def _fallback_layer_bits(fmt: WeightFormat, spec: ModelSpec) -> float | None:
    """Average layer bits of a dense model's K-quant layers whose rows fall back; else None."""
    if not fmt.k_quant or fmt.recipe is not None or spec.num_experts or \
            not _rows_off_block(spec):
        return None
    return _dense_gguf_layer_bits(fmt, spec)


def k_quant_fallback_bits(dtype: str, spec: ModelSpec) -> float | None:
    """Return the average layer bits of a GGUF K-quant mix whose rows fall back on this model.

    None when they fit the 256-value super-blocks (or the format is not a K-quant).
    """
    fmt = FORMATS.get(dtype)
    return None if fmt is None else _fallback_layer_bits(fmt, spec)


def layer_bits(fmt: WeightFormat, parts: ParamBreakdown, spec: ModelSpec) -> float:
    """Average bits per weight of the decoder layers in this format (the mix included).

    GGUF K-quant tensors whose rows are not a multiple of 256 values are stored in the
    fallback type (dense models; an MoE model's experts keep the format's bits).
    """
    layers = parts.total - parts.embeddings
    fallback = _fallback_layer_bits(fmt, spec)
    if fallback is not None:
        return fallback
    if fmt.upgraded_bits is None or layers <= 0:
        return fmt.layer_bits
    upgraded = min(layers, _upgradable_params(parts, spec)) * fmt.upgraded_share
    return (fmt.layer_bits * (layers - upgraded) + fmt.upgraded_bits * upgraded) / layers


def weight_bytes(parts: ParamBreakdown, spec: ModelSpec, dtype: str,
                 recipe: Recipe | None = None) -> float:
    """Bytes of all weights of the model in this format (as the engine's recipe stores it).

    A checkpoint read from a folder planned in its own format takes what its safetensors
    headers say (exact, scales and packed zeros included).
    """
    if spec.checkpoint_bytes and dtype == spec.native_weights_dtype:
        return float(spec.checkpoint_bytes)
    fmt = weight_format(dtype, recipe)
    layers = parts.total - parts.embeddings
    output_params = parts.lm_head or (parts.embedding if fmt.output_untied else 0)
    return (layers * layer_bits(fmt, parts, spec)
            + parts.embedding * embedding_bits(fmt, parts, spec)
            + output_params * output_bits(fmt, spec)) / 8.0


def output_bits(fmt: WeightFormat, spec: ModelSpec) -> float:
    """Bits per weight of the output matrix (rows of hidden_size values)."""
    return stored_bits(fmt, fmt.output_bits, spec.hidden_size)


def embedding_bits(fmt: WeightFormat, parts: ParamBreakdown,
                   spec: ModelSpec | None = None) -> float:
    """Bits per weight of the token embedding table in this format.

    GGUF: a model without its own output.weight (tied embeddings) classifies with token_embd,
    and llama-quantize gives that tensor the output's type (src/llama-quant.cpp
    llama_tensor_get_type: `name == output.weight || (!qs.has_output && name == token_embd)`):
    Llama-3.2-1B Q4_0 is 727.75 MiB with a Q6_K table, 663 MiB with a Q4_0 one.
    """
    if fmt.family == "gguf" and not parts.lm_head and not fmt.output_untied:
        return output_bits(fmt, spec) if spec is not None else fmt.output_bits
    if spec is not None and fmt.k_quant:
        return stored_bits(fmt, fmt.embedding_bits, spec.hidden_size)
    return fmt.embedding_bits


def routed_expert_bytes(parts: ParamBreakdown, spec: ModelSpec, dtype: str) -> float:
    """Bytes of all routed experts in this format."""
    return parts.routed_experts * layer_bits(weight_format(dtype), parts, spec) / 8.0
