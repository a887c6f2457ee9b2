"""Workload models: the model architecture and how it is run."""

from typing import Literal

from pydantic import Field, field_validator

from hwadvisor.models.hardware import Strict

# Tensor dtypes, then weight formats: int4 is AWQ/GPTQ-style (group 128, 16-bit embeddings),
# nf4 bitsandbytes' 4-bit NormalFloat (QLoRA), q*/iq* llama.cpp's GGUF formats, mlx-* MLX's.
Dtype = Literal[
    "fp32", "tf32", "bf16", "fp16", "fp8", "int8", "int4", "fp4", "nf4",
    "q4_0", "q4_k_m", "q5_k_m", "q6_k", "q8_0", "iq4_xs", "mlx-4bit", "mlx-8bit",
]
Phase = Literal["inference", "training"]
Optimizer = Literal["adamw", "adamw-8bit", "sgd"]
# The engines a workload can run on, listed once (hwadvisor/engines/data/<id>.toml describes
# each; engines.ENGINE_IDS and the --engine check read this list).
EngineId = Literal[
    "hf", "vllm", "sglang", "trtllm", "llamacpp", "exllamav2", "mlx", "executorch", "mlc-llm",
    "litert", "qnn", "coreml", "torchtitan", "megatron", "deepspeed",
]
# --quality budgets named by a number format before the loss classes (schema 1.14), read as
# their class: fp8 and int8 are 8-bit, int4 is 4-bit (workload/quality.py has the ladder).
QUALITY_ALIASES: dict[str, str] = {"fp8": "8-bit", "int8": "8-bit", "int4": "4-bit"}


class ModelSpec(Strict):
    """Architecture facts of a transformer, from a preset or a Hugging Face config.json."""

    name: str
    model_type: str = Field(description="config.json model_type: llama, mixtral, deepseek_v3 ...")
    hidden_size: int = Field(gt=0)
    num_layers: int = Field(gt=0)
    num_heads: int = Field(gt=0)
    num_kv_heads: int = Field(gt=0)
    head_dim: int = Field(
        gt=0, description="Query/key head width; for MLA qk_nope_head_dim + qk_rope_head_dim"
    )
    intermediate_size: int = Field(gt=0, description="Dense MLP width")
    vocab_size: int = Field(gt=0)
    tied_embeddings: bool = False
    attention: Literal["mha", "gqa", "mqa", "mla"] = "gqa"
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    gated_mlp: bool = True
    norm: Literal["rmsnorm", "layernorm", "layernorm-nobias", "nonparametric"] = Field(
        "rmsnorm", description="rmsnorm and layernorm-nobias: one weight per unit; layernorm: "
        "weight and bias; nonparametric: none (OLMo)")
    norms_per_layer: int = Field(
        2, ge=0, description="Hidden-size norms per decoder layer (gemma2 has 4: pre/post attn+MLP)"
    )
    qk_norm: bool = Field(False, description="Per-head RMSNorm on q and k (head_dim weights each)")
    qk_norm_scope: Literal["head", "full"] = Field(
        "head", description="head: one head_dim norm shared by the heads; full: over all heads "
        "(OLMo-2's q_norm of heads x head_dim and k_norm of kv_heads x head_dim)")
    lm_head_bias: bool = Field(False, description="The output projection has a bias (GPT-J, phi)")
    final_norm: bool = Field(True, description="A norm after the last decoder layer")
    # MLA (DeepSeek-V2/V3) low-rank projections
    q_lora_rank: int | None = None
    kv_lora_rank: int | None = None
    qk_rope_head_dim: int | None = None
    qk_nope_head_dim: int | None = None
    v_head_dim: int | None = None
    # Sliding window: window size and how many layers use it (the rest are global)
    sliding_window: int | None = None
    sliding_window_layers: int | None = None
    attention_chunked: bool = Field(
        False, description="The window layers attend within fixed chunks (Llama 4's "
        "attention_chunk_size), not a sliding window")
    # MoE
    num_experts: int = 0
    experts_per_token: int = 0
    num_shared_experts: int = 0
    moe_intermediate_size: int | None = Field(None, description="Width of one routed expert")
    shared_expert_intermediate_size: int | None = Field(
        None, description="Combined width of all shared experts (instantiated as one gated MLP)"
    )
    shared_expert_gate: bool = Field(False, description="qwen2_moe's sigmoid gate (hidden -> 1)")
    router_score_bias: bool = Field(
        False, description="DeepSeek-V3's e_score_correction_bias (one float per expert)"
    )
    dense_layers: int = Field(0, description="Leading layers with a dense MLP in an MoE model")
    moe_layer_freq: int = 1
    moe_layers: int | None = Field(
        None,
        ge=0,
        description="Decoder layers whose MLP is an MoE block (the others are dense); "
        "None: every layer from dense_layers on, every moe_layer_freq-th",
    )
    max_position_embeddings: int | None = None
    context_window: int | None = Field(
        None, gt=0, description="The longest sequence the model reads, as vLLM derives it from "
        "the config: the smallest of its length keys, times a linear or dynamic RoPE factor "
        "(llama3 and YaRN configs state the scaled window already); None: not stated")

    @property
    def window(self) -> int | None:
        """The longest sequence the model reads: context_window, else max_position_embeddings."""
        return self.context_window or self.max_position_embeddings

    # Per-sequence state: attention layers keep a KV cache that grows with the context;
    # state-space (Mamba) and linear-attention layers keep a state of constant size instead.
    attention_layers: int | None = Field(
        None, ge=0, description="Decoder layers with softmax attention (a KV cache); None: all")
    recurrent_layers: int = Field(
        0, ge=0, description="Decoder layers with a constant-size recurrent state (Mamba/SSM, "
        "linear attention) instead of a KV cache")
    recurrent_state_elements: int = Field(
        0, ge=0, description="Elements of recurrent state one sequence holds, all layers "
        "together (convolution window plus SSM or linear-attention state)")
    param_parts: dict[str, int] | None = Field(
        None, description="Exact parameter counts by part, read from the module tree "
        "(embedding, lm_head, attention, dense_mlp, router, routed_experts, shared_experts, "
        "norms, other, routed_expert_params); None: counted from the fields above")
    mtp_layers: int = Field(
        0, ge=0, description="Multi-token-prediction heads shipped with the checkpoint "
        "(num_nextn_predict_layers; a built-in draft for speculative decoding)")
    native_weights_dtype: Dtype | None = Field(
        None, description="The checkpoint's own weights format (quantization_config or "
        "torch_dtype); None when the config does not say")
    native_dtype_source: str | None = Field(
        None, description="Where native_weights_dtype was read, in words")
    checkpoint_bytes: int | None = Field(
        None, ge=0, description="Bytes of the checkpoint's tensors, summed from its safetensors "
        "headers (a model folder or the Hugging Face cache); used when planned in its own format")
    checkpoint_source: str | None = Field(
        None, description="The folder and files those bytes were read from, in words")
    source: str | None = Field(None, description="Preset id or config path, and its reference")


class Workload(Strict):
    """A model and how it is run: phase, shapes, dtypes, optimizer, GPUs."""

    model: str = Field(description="Preset id or path to a config.json")
    phase: Phase = "inference"
    batch: int = Field(1, gt=0)
    prompt_len: int = Field(2048, gt=0, description="Prompt length; sequence length in training")
    gen_len: int = Field(256, ge=0)
    weights_dtype: Dtype = "bf16"
    weights_dtype_source: str | None = Field(
        None, description="Why this weights dtype: --weights-dtype, the checkpoint's format, or "
        "the default")
    engine: EngineId = Field("hf", description="The serving or training engine that runs it")
    engine_source: str | None = Field(
        None, description="Why this engine: --engine, or the default for the device and phase")
    engine_version: str | None = Field(
        None, description="The engine release the user named (--engine vllm==0.6.0); None: "
        "the version hwadvisor pins")
    engine_options: dict[str, str] = Field(
        default_factory=dict, description="Engine defaults the user changed (--engine-option "
        "KEY=VALUE): cuda_graphs, chunked_prefill, kernel.int4 ...")
    engine_defaults: list[str] = Field(
        default_factory=list, description="The engine defaults the estimate started from, each "
        "'key=value (where it came from)'")
    attention_kernel: Literal["math", "flash"] | None = Field(
        None, description="The attention the user runs when not the engine's default (math: "
        "eager attention, the score matrix materialised, e.g. attn_implementation=\"eager\")")
    quality: Literal["lossless", "8-bit", "6-bit", "4-bit", "fp8", "int8", "int4"] = Field(
        "8-bit", description="The quality budget (--quality), a loss class: the least precise "
        "weights and KV cache a plan takes for speed (lossless: the checkpoint's own; 8-bit: "
        "FP8, INT8, Q8_0, MLX 8-bit; 6-bit: Q6_K, Q5_K_M; 4-bit); lower only when nothing else "
        "fits, said so. fp8, int8 (8-bit) and int4 (4-bit) are read as their class "
        "(workload/quality.py)")

    @field_validator("quality", mode="before")
    @classmethod
    def _quality_class(cls, value: object) -> object:
        """Read a budget named by a number format as its loss class (fp8 -> 8-bit)."""
        return QUALITY_ALIASES.get(value, value) if isinstance(value, str) else value

    activation_dtype: Dtype = "bf16"
    kv_dtype: Dtype = "bf16"
    optimizer: Optimizer = "adamw"
    grad_accum: int = Field(1, gt=0)
    gpus: int = Field(1, gt=0, description="GPUs in all (nodes x gpus per node)")
    nodes: int = Field(1, gt=0)
    gpus_per_node: int | None = Field(None, gt=0)
    inter_node_bandwidth_gbps: float | None = Field(
        None, gt=0, allow_inf_nan=False,
        description="Network between nodes, GB/s per GPU, one direction "
        "(400 Gb/s InfiniBand NDR per GPU = 50)"
    )
    activation_checkpointing: bool = False
    params_total: int | None = Field(None, description="Parameters transformers instantiates")
    params_active: int | None = Field(
        None, description="Per token: total minus the routed experts a token does not visit "
        "(embeddings included, unlike DeepSeek's 'activated' figure)"
    )
    spec: ModelSpec | None = None
    is_default: bool = Field(False, description="True when no model was given and the default ran")
