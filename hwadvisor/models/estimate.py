"""Performance-model output: memory, FLOPs, bytes, roofline times and the bottleneck."""

from __future__ import annotations

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
    """Roofline times in seconds (max of compute and memory terms, plus overheads)."""

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
        None, description="Kernel launches of one forward (inference) or one training step")
    communication_s: Finite | None = Field(None, description="Communication of the deciding phase")
    communication_exposed_s: Finite | None = Field(
        None, description="The part of communication_s compute does not hide")
    optimizer_s: Finite | None = Field(None, description="Optimizer step (memory-bound), training")
    decode_tokens_per_forward: Finite | None = Field(
        None, description="Tokens per sequence one decode forward yields; decode_step_s is per "
        "token, the decode_*_s roofline terms are per forward")


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
        "math", description="math materialises the score matrix; flash streams it (SDPA/FA)"
    )
    fused_optimizer: bool = Field(False, description="One fused AdamW kernel instead of per-tensor")
    sharding: Literal["none", "ddp", "fsdp", "tp"] = "none"
    comm_overlap: bool = Field(False, description="Communication overlapped behind compute")
    offload_fraction: Finite = Field(0.0, ge=0.0, le=1.0, description="Weights kept in host RAM")
    prefix_cache_hit: Finite = Field(
        0.0, ge=0.0, le=1.0, description="Prompt share served from cache"
    )
    speculative_tokens_per_step: Finite = Field(
        1.0, ge=1.0, le=64.0,
        description="Accepted tokens per target forward (speculative decoding)"
    )
    mixed_precision: bool = Field(True, description="bf16 compute with fp32 master weights")
