"""Performance-model output: memory, FLOPs, bytes, roofline times and the bottleneck."""

from typing import Literal

from pydantic import Field

from hwadvisor.models.hardware import Finite, Strict

Bottleneck = Literal[
    "compute", "memory-bandwidth", "memory-capacity", "launch-overhead", "communication"
]


class MemoryEstimate(Strict):
    """Bytes needed per GPU, by part."""

    weights_bytes: int
    kv_cache_bytes: int
    activations_bytes: int
    gradients_bytes: int
    optimizer_bytes: int
    runtime_bytes: int = Field(description="Allowance for the CUDA context, allocator slack, etc.")
    total_bytes: int
    device_memory_bytes: int | None
    headroom_bytes: int | None = Field(description="Device memory minus total; negative = no fit")
    notes: list[str] = Field(default_factory=list)


class Times(Strict):
    """Times in seconds: per op group max(compute, memory) summed, plus overheads.

    *_compute_s and *_memory_s are the sums over the phase's op groups of their compute and
    memory terms at achievable rates (perfmodel/efficiency.py); launch_overhead_s is what the
    step takes beyond the groups' rooflines (kernel floors, host launches, engine host work).
    """

    prefill_s: Finite | None = None
    decode_step_s: Finite | None = None
    train_step_s: Finite | None = None
    prefill_compute_s: Finite | None = None
    prefill_memory_s: Finite | None = None
    decode_compute_s: Finite | None = None
    decode_memory_s: Finite | None = None
    train_compute_s: Finite | None = None
    train_memory_s: Finite | None = None
    launch_overhead_s: Finite | None = Field(
        None, description="Beyond the op groups' rooflines: kernel floors, host launches the GPU "
        "waits for and the engine's host work, of one forward (inference: the deciding phase) "
        "or one training step")
    communication_s: Finite | None = Field(None, description="Communication of the deciding phase")
    communication_exposed_s: Finite | None = Field(
        None, description="The part of communication_s compute does not hide")
    optimizer_s: Finite | None = Field(None, description="Optimizer step (memory-bound), training")
    decode_tokens_per_forward: Finite | None = Field(
        None, description="Tokens per sequence one decode forward yields; decode_step_s is per "
        "token, the decode_*_s roofline terms are per forward")
    ttft_s: Finite | None = Field(
        None, description="Time to first token: the batch's prefill (in chunks where the engine "
        "chunks it); the first token comes from the prefill's last logits")
    tpot_s: Finite | None = Field(None, description="Time per output token after the first")
    server_host_s: Finite | None = Field(
        None, description="The engine server's host work in tpot_s: per decode step for the "
        "whole batch (llama-server samples each sequence's token on the CPU), included in "
        "decode_step_s and tpot_s; None: none counted (the engine's batch benchmark, or "
        "sampling on the GPU)")
    request_latency_s: Finite | None = Field(
        None, description="One request end to end: ttft_s + (gen_len - 1) x tpot_s")


class Estimate(Strict):
    """The performance model's verdict on a workload on a device."""

    memory: MemoryEstimate
    fits: bool
    bottleneck: Bottleneck
    bottleneck_why: str = Field(description="The numbers that decided the bottleneck")
    deciding_phase: Literal["prefill", "decode", "train"] | None = Field(
        None, description="The phase whose time decided the bottleneck")
    params_total: Finite | None = None
    params_active: Finite | None = Field(None, description="Parameters one token touches (MoE)")
    flops_per_token: Finite = Field(description="Forward FLOPs per token, whole model")
    flops_per_step: Finite | None = Field(
        None, description="FLOPs per GPU of the deciding phase (training step, decode forward "
        "or prefill)")
    bytes_per_decode_step: Finite | None = Field(
        None, description="Bytes one decode forward reads per GPU (weights + KV + ...)")
    arithmetic_intensity: Finite | None = Field(None, description="FLOP per byte of the phase")
    ridge_point: Finite | None = Field(None, description="Device FLOP per byte at the ridge")
    peak_tflops_used: Finite | None = None
    bandwidth_gbps_used: Finite | None = None
    times: Times
    tokens_per_s: Finite | None = Field(
        None, description="Inference: generated tokens/s over all replicas (prompt tokens/s when "
        "gen_len = 0); training: tokens/s over all GPUs")
    communication: dict[str, Finite] = Field(
        default_factory=dict, description="Per-strategy volumes (bytes per GPU) and times (s), "
        "and the bus bandwidth used (GB/s); empty on one GPU")
    calibration: dict[str, str] = Field(
        default_factory=dict, description="Where each device figure the times rest on came "
        "from: figure (memory_bandwidth, <dtype>_peak, attention, launch_latency, host_transfer, "
        "bus_bandwidth) -> measured (a trial on this device or --calibration), datasheet (the "
        "profile or the probe), or model (perfmodel/constants.py)")
    assumptions: list[str] = Field(default_factory=list)


class ModelOptions(Strict):
    """What-if settings the performance model honours; rules predict effects by toggling these.

    Workload fields (weights_dtype, kv_dtype, activation_checkpointing, gpus ...) are the other
    half of a what-if: a rule changes either.
    """

    cuda_graphs: bool = Field(False, description="Launch overhead replaced by graph replay")
    compiled: bool = Field(
        False, description="torch.compile: fused elementwise ops, fewer launches"
    )
    attention_kernel: Literal["math", "flash"] = Field(
        "flash", description="flash streams the score matrix (SDPA/FlashAttention: every engine "
        "and PyTorch since 2.0); math materialises it"
    )
    fused_optimizer: bool = Field(False, description="One fused AdamW kernel instead of per-tensor")
    sharding: Literal["none", "ddp", "fsdp", "hsdp", "tp"] = Field(
        "none", description="ddp: replicas (data parallel); fsdp: fully sharded; hsdp: sharded "
        "inside a node, replicated across nodes; tp: tensor parallel (tp_size GPUs per group)")
    tp_size: int | None = Field(
        None, ge=1, description="Tensor-parallel group size under tp (None: all GPUs of a node "
        "in training, all GPUs in inference); the other GPUs hold replicas")
    pipeline_stages: int = Field(1, ge=1, description="Pipeline-parallel stages")
    virtual_pipeline_stages: int = Field(
        1, ge=1, description="Model chunks per pipeline stage (interleaved 1F1B): the bubble "
        "shrinks by this factor")
    context_parallel: int = Field(1, ge=1, description="GPUs one sequence is split over")
    expert_parallel: bool = Field(False, description="MoE experts spread over the GPUs (EP)")
    dp_attention: bool = Field(
        False, description="Data-parallel attention with expert parallelism (SGLang "
        "--enable-dp-attention, vLLM --data-parallel-size with --enable-expert-parallel): each "
        "GPU of the tensor-parallel group runs attention for its own share of the sequences "
        "with the attention weights replicated, so an MLA KV cache is not copied on every GPU")
    comm_overlap: bool = Field(False, description="Communication overlapped behind compute")
    offload_fraction: Finite = Field(0.0, ge=0.0, le=1.0, description="Weights kept in host RAM")
    prefix_cache_hit: Finite = Field(
        0.0, ge=0.0, le=1.0, description="Prompt share served from cache"
    )
    speculative_tokens_per_step: Finite = Field(
        1.0, ge=1.0, le=64.0,
        description="Accepted tokens per target forward (speculative decoding)"
    )
    speculative_drafter: Literal["ngram", "draft-model", "eagle3", "medusa", "mtp"] | None = Field(
        None, description="Speculative decoding's drafter (perfmodel/drafters.py): n-gram "
        "prompt lookup, a small draft model, EAGLE-3 heads, Medusa heads or the checkpoint's MTP "
        "layers; None with speculative_tokens_per_step > 1: an unnamed drafter")
    speculative_draft_tokens: int | None = Field(
        None, ge=1, le=64, description="Tokens drafted per sequence per step: the target "
        "verifies draft + 1 tokens per forward (None: as many as are accepted)")
    mixed_precision: bool = Field(True, description="bf16 compute with fp32 master weights")
    master_weights: bool = Field(
        True, description="Training under mixed precision keeps an fp32 master copy of the "
        "weights (false: pure 16-bit, the model loaded in bf16 and its optimizer state in the "
        "parameters' dtype or 8 bits, as transformers' Trainer does on a bf16-loaded model)")
    prefill_chunk_tokens: int | None = Field(
        None, ge=1, description="Chunked prefill: tokens per forward (the engine's budget); None "
        "prefills each batch's prompts in one forward")
    host_overhead_s: float | None = Field(
        None, ge=0.0, description="Host time per forward outside the kernels (engine scheduling, "
        "sampling, Python); None: the engine's figure in perfmodel/constants.py")
    kernels_per_layer: float | None = Field(
        None, gt=0, description="Kernels one decoder layer launches (None: from compiled)")
    eager_op_s: float | None = Field(
        None, gt=0, description="Host cost of one eager op (None: the model's default)")
    logits_all_positions: bool = Field(
        False, description="Prefill computes the logits of every prompt position (plain "
        "transformers forward), not only the last one (serving engines)")
    quant_kernel: str | None = Field(
        None, description="Kernel family of quantised weights: marlin, torch-int4, llamacpp, "
        "mlx, exllamav2 ... (None: the usual one for the format and device)")
    finetune: Literal["full", "lora", "qlora"] = Field(
        "full", description="lora/qlora: frozen base weights (bf16 / 4-bit NF4), trained "
        "low-rank adapters")
    lora_rank: int = Field(16, ge=1, le=4096, description="LoRA rank r")
    cross_entropy: Literal["plain", "fused", "chunked"] = Field(
        "plain", description="How the training loss meets the logits: plain (full logits, their "
        "fp32 copies and gradients), fused (one kernel, no fp32 copies: Megatron's "
        "--cross-entropy-loss-fusion) or chunked (the logits never held whole: Liger's fused "
        "linear cross-entropy)")
    optimizer_offload: bool = Field(
        False, description="Optimizer states, master weights and the step in host RAM "
        "(ZeRO-Offload / FSDP2 CPUOffloadPolicy)")
    selective_checkpointing: bool = Field(
        False, description="With activation checkpointing: recompute attention only (Korthikanti "
        "et al.), not the whole layer")
    checkpoint_every: int = Field(
        1, ge=1, description="With full activation checkpointing: checkpoint every N-th decoder "
        "layer only (1: all of them); the others keep their activations (torchtitan's layer SAC "
        "selective_ac_option = N, Megatron's --recompute-method block)")
