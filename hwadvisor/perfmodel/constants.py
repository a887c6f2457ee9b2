"""The performance model's constants, each with its source or the assumption behind it.

Kept in one place as data so a reviewer can check every number the estimate rests on.
"""

from __future__ import annotations

GB = 1e9  # decimal gigabyte: datasheets quote bandwidth and memory in GB

# --- Storage of one element, in bits -------------------------------------------------------
# int4 weight-only quantization as AWQ/GPTQ store it: 4-bit weights, one fp16 scale and one
# packed 4-bit zero point per group of 128 -> 4 + (16 + 4) / 128 = 4.156 bits per weight
# (AutoAWQ's GEMM layout: qweight int32-packed, scales fp16, qzeros int32-packed, group 128).
INT4_GROUP_SIZE = 128
INT4_EFFECTIVE_BITS = 4.0 + (16.0 + 4.0) / INT4_GROUP_SIZE
# fp4 as NVFP4 (Blackwell): e2m1 values, one fp8 (e4m3) scale per block of 16 -> 4.5 bits
# (NVIDIA, "Introducing NVFP4", 2025). MXFP4 (8-bit scale per 32) would be 4.25.
FP4_EFFECTIVE_BITS = 4.0 + 8.0 / 16
DTYPE_BITS: dict[str, float] = {
    "fp32": 32.0,
    "tf32": 32.0,  # tf32 is a compute mode; tensors are stored as fp32
    "bf16": 16.0,
    "fp16": 16.0,
    "fp8": 8.0,  # per-tensor / per-channel scales: negligible
    "int8": 8.0,  # per-channel scales: negligible
    "int4": INT4_EFFECTIVE_BITS,
    "fp4": FP4_EFFECTIVE_BITS,
    # Weight formats as element sizes (layer weights; perfmodel/formats.py has the whole
    # picture). q8_0 and q4_0 are also llama.cpp's KV-cache types (--cache-type-k/-v).
    "nf4": 4.0 + 8.0 / 64 + 32.0 / (64 * 256),
    "q4_0": 4.5,
    "q4_k_m": 4.5,
    "q5_k_m": 5.5,
    "q6_k": 6.5625,
    "q8_0": 8.5,
    "iq4_xs": 4.25,
    "mlx-4bit": 4.5,
    "mlx-8bit": 8.5,
}

# --- Runtime allowance, by device class ------------------------------------------------------
# CUDA/ROCm: the context with PyTorch's kernels loaded (lazy loading on) is ~0.5-1 GB
# (nvidia-smi shows ~500 MB for an idle torch process on H100; cuBLAS/cuDNN workspaces add more).
# The caching allocator's fragmentation is typically 5-10% of the live tensors.
RUNTIME_FIXED_BYTES: dict[str, float] = {
    "datacenter-gpu": 0.75 * GB,
    "consumer-gpu": 0.75 * GB,
    "apple-silicon": 0.5 * GB,  # Metal/MPS runtime and command buffers (assumption)
    "mobile-soc": 0.3 * GB,  # on-device runtime (llama.cpp / ExecuTorch) + app (assumption)
    "cpu": 0.5 * GB,  # the Python + torch process itself (assumption)
}
FRAGMENTATION_FRACTION: dict[str, float] = {
    "datacenter-gpu": 0.07,
    "consumer-gpu": 0.07,
    "apple-silicon": 0.05,
    "mobile-soc": 0.05,
    "cpu": 0.05,
}
# Share of the device memory a process may actually use.
# Apple: Metal's MTLDevice.recommendedMaxWorkingSetSize is ~65-75% of unified memory.
# Phones: iOS/Android kill an app long before it takes all RAM; ~50% is optimistic for
# flagship phones (iOS "increased memory limit" entitlement). CPU: leave 10% to the OS.
USABLE_MEMORY_FRACTION: dict[str, float] = {
    "datacenter-gpu": 1.0,
    "consumer-gpu": 1.0,
    "apple-silicon": 0.75,
    "mobile-soc": 0.5,
    "cpu": 0.9,
}

# --- Fallback device figures when neither a measurement nor a datasheet gives one ------------
# Assumptions, always written into Estimate.assumptions when used.
FALLBACK_BANDWIDTH_GBPS: dict[str, float] = {
    "cpu": 50.0,  # dual-channel DDR5 ~ 60-80 GB/s peak; ~50 sustained
    "apple-silicon": 100.0,  # base M-series (M2 100 GB/s, M3 100, M4 120)
    "mobile-soc": 50.0,  # LPDDR5X phones 60-77 GB/s peak
    "consumer-gpu": 500.0,
    "datacenter-gpu": 2000.0,
}
FALLBACK_TFLOPS: dict[str, float] = {
    "cpu": 1.0,  # a desktop/server CPU with AVX-512/AMX at fp32/bf16, order of magnitude
    "apple-silicon": 4.0,  # base M-series GPU fp16/fp32 ~3.5-4.5 TFLOP/s
    "mobile-soc": 2.0,  # phone GPU/NPU usable from llama.cpp-class runtimes
    "consumer-gpu": 80.0,
    "datacenter-gpu": 300.0,
}

# --- Kernel launches -------------------------------------------------------------------------
# Eager PyTorch: ~4-6 us of CPU dispatch per op; when kernels are short (decode at small batch)
# the GPU idles for it. Counted additively: an upper bound when long kernels keep the queue
# full (then it is small against the roofline anyway). HF eager modules add Python overhead on
# top, so eager figures here are a lower bound for HF generate.
LAUNCH_S_EAGER = 5e-6
# CUDA graph replay: ~1 us per kernel node (the CPU submits one graph; GPU-side gaps remain).
LAUNCH_S_GRAPH = 1e-6
# Kernels per transformer layer, one forward. Eager Llama-style layer: 2 RMSNorm, q/k/v/o,
# rotary, SDPA, residual adds, gate/up/SiLU/mul/down -> ~15-25; we take 20.
# torch.compile (Inductor) keeps the 7 matmuls and fuses the pointwise ops between them into
# ~3-4 Triton kernels -> ~10.
KERNELS_PER_LAYER_EAGER = 20
KERNELS_PER_LAYER_COMPILED = 10
# Outside the layers: embedding, final norm, lm_head, sampling/loss (eager ~10, compiled ~5).
KERNELS_OUTSIDE_LAYERS_EAGER = 10
KERNELS_OUTSIDE_LAYERS_COMPILED = 5
# MoE layers add routing (topk, softmax, scatter/gather, per-expert matmuls): ~3x a dense MLP's
# kernel count in eager implementations; grouped-GEMM kernels under compile.
MOE_EXTRA_KERNELS_EAGER = 20
MOE_EXTRA_KERNELS_COMPILED = 6
# Backward launches about twice the forward's kernels (dgrad + wgrad per matmul).
BACKWARD_KERNEL_FACTOR = 2.0

# --- Optimizer traffic, bytes per parameter per step ----------------------------------------
# Fused AdamW reads param (4), grad (2 or 4), m (4), v (4) and writes param, m, v (12), plus
# the 16-bit param copy (2): ~32 B/param. torch's foreach AdamW (_multi_tensor_adamw) runs ~8
# separate foreach ops (lerp_, mul_, addcmul_, sqrt, div_, add_, addcdiv_, weight decay), each
# reading ~2 and writing ~1 fp32 list: ~96 B/param. Sources: torch/optim/adamw.py op counts.
OPT_BYTES_PER_PARAM_FUSED: dict[str, float] = {"adamw": 32.0, "adamw-8bit": 16.0, "sgd": 18.0}
OPT_BYTES_PER_PARAM_UNFUSED: dict[str, float] = {"adamw": 96.0, "adamw-8bit": 40.0, "sgd": 36.0}
# Kernel launches of the optimizer step: each foreach op launches once per chunk of ~48 tensors
# (torch's multi_tensor_apply depth limits: 110/64/48/36 tensors per launch by list count);
# foreach AdamW ~8 ops, fused AdamW 1.
OPT_OPS_UNFUSED = 8
OPT_OPS_FUSED = 1
OPT_TENSORS_PER_LAUNCH = 48

# --- Activations -----------------------------------------------------------------------------
# Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer Models"),
# eq. 1: bytes per layer = s*b*h*(34 + 5*a*s/h) in 16-bit: attention 11 + MLP 19 + norms 4
# (per s*b*h), 5*a*s/h the score matrix (2 B scores + 2 B softmax + 1 B dropout mask).
# We keep attention 11 and norms 4, and size the MLP by its real width (gated: the input 2h
# plus gate, up and activation outputs 3 x 2*I; non-gated 2h + 2 x 2*I + 1 dropout mask ->
# 19 for I = 4h). Without dropout the score term is 4*a*s/h (scores + softmax in 16-bit).
ACT_ATTENTION_COEFF = 11.0
ACT_NORM_COEFF = 4.0
ACT_SCORE_BYTES_PER_ELEMENT = 4.0  # scores + softmax output, 16-bit each (no dropout mask)
# torch.compile's min-cut partitioner recomputes cheap pointwise ops in the backward instead
# of saving them: the SiLU*up output and the norm outputs are not stored.
ACT_NORM_COEFF_COMPILED = 0.0

# --- Communication ---------------------------------------------------------------------------
# NCCL bus bandwidth reached on NVLink vs the link's one-direction peak: nccl-tests all_reduce
# busbw on 8x H100 SXM ~ 360-370 GB/s (no NVLS) vs 450 GB/s per direction -> ~0.8.
NVLINK_BUS_EFFICIENCY = 0.8
# PCIe effective bandwidth per x16 link by generation (raw 16/31.5/63/121 GB/s; ~80% after
# protocol overhead): gen4 x16 ~ 25 GB/s, gen5 ~ 50.
PCIE_X16_EFFECTIVE_GBPS: dict[int, float] = {3: 12.0, 4: 25.0, 5: 50.0, 6: 100.0}
PCIE_DEFAULT_GENERATION = 4
# Inter-node: 400 Gb/s InfiniBand NDR (or RoCE) per GPU, one NIC per GPU as in DGX H100 ->
# 50 GB/s per GPU. Workload.inter_node_bandwidth_gbps (GB/s per GPU) overrides.
INTER_NODE_DEFAULT_GBPS = 50.0
# Fixed latency of one collective (small-message all-reduce): nccl-tests on 8x H100 NVLink
# ~ 10-20 us; PCIe and inter-node are slower. Dominates tensor-parallel decode.
COLLECTIVE_LATENCY_S: dict[str, float] = {"nvlink": 10e-6, "pcie": 20e-6, "inter-node": 30e-6}
# Async tensor parallelism (micro-pipelined collective matmul) hides at most part of the
# all-reduces behind the neighbouring matmuls: assume half the compute can cover them.
TP_OVERLAPPABLE_COMPUTE_FRACTION = 0.5

# --- Speculative decoding --------------------------------------------------------------------
# The draft (a small model or EAGLE/Medusa heads) costs ~10% of a target forward per step
# (assumption; EAGLE reports draft overhead of a few percent, a separate 1B draft ~10-15%).
SPECULATIVE_DRAFT_COST_FRACTION = 0.1

# --- Training memory per parameter, bytes ----------------------------------------------------
# Mixed precision (bf16 compute, fp32 master): gradients kept in bf16 (FSDP MixedPrecision /
# Megatron bf16 grads), optimizer states fp32. Without mixed precision weights and grads are
# fp32 and the weights are the master copy.
GRAD_BYTES_MIXED = 2.0
GRAD_BYTES_FP32 = 4.0
# AdamW: fp32 master 4 + m 4 + v 4 = 12 (16 B/param with bf16 weights and grads: the classic
# ZeRO paper figure). adamw-8bit (bitsandbytes): m and v 1 byte each + block scales (fp32 per
# 2048: negligible) + master 4. SGD: master 4 + momentum 4 (momentum assumed, as usual).
OPTIMIZER_BYTES_MIXED: dict[str, float] = {"adamw": 12.0, "adamw-8bit": 6.0, "sgd": 8.0}
OPTIMIZER_BYTES_FP32: dict[str, float] = {"adamw": 8.0, "adamw-8bit": 2.0, "sgd": 4.0}
# FSDP keeps one or two layers' full parameters gathered at a time (current + prefetched).
FSDP_GATHERED_LAYERS = 2
# Loss on logits: bf16 logits + the fp32 upcast the loss makes (HF casts logits to float):
# 6 bytes per (token, vocab) element in training; inference keeps the last token's fp32 logits.
TRAIN_LOGIT_BYTES_PER_ELEMENT = 6.0
INFER_LOGIT_BYTES_PER_ELEMENT = 4.0
# Under tensor parallelism (no sequence parallelism) Korthikanti's 10*s*b*h of layer-norm and
# dropout inputs stay replicated; the rest splits by the TP degree (their eq. 2).
ACT_TP_REPLICATED_COEFF = 10.0
# DDP all-reduces gradients in 25 MB buckets (torch DDP bucket_cap_mb default); each pays the
# collective latency.
DDP_BUCKET_BYTES = 25e6
# Traffic of activations in a training step: written in the forward, read in the backward, and
# the activation gradients of the same size written and read again -> 4x the saved bytes.
TRAIN_ACT_TRAFFIC_FACTOR = 4.0
# Inference: every intermediate is written once and read once -> 2x a layer's activations.
INFER_ACT_TRAFFIC_FACTOR = 2.0
# Math attention's score matrix passes: forward writes scores, softmax reads and writes, the PV
# matmul reads (4); backward roughly 1.5x that (6).
SCORE_PASSES_FORWARD = 4.0
SCORE_PASSES_BACKWARD = 6.0


def bytes_per_element(dtype: str) -> float:
    """Bytes one element of dtype occupies, group scales included (int4: 4.156 bits)."""
    return DTYPE_BITS[dtype] / 8.0
