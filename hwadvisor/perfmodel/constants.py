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

# --- A CPU's matmul peaks from the ISA the probe reads (perfmodel/resources.py cpu_peaks) -----
# Per core and clock cycle: fp32 FLOPs of the FMA units, and int8 operations (2 a multiply-add)
# of the integer dot products that quantised kernels run (llama.cpp quantises activations to
# Q8_0 / Q8_K and multiplies them with the weights in integers: ggml-cpu.c type_traits_cpu
# vec_dot_type). Peak = physical cores x clock x the row's figures; the first row whose flags
# the CPU lists (all of them) and whose vendor matches ("" any) applies. Reciprocal throughputs
# from uops.info (Skylake-X, Ice Lake, Alder Lake-P, Zen 3, Zen 4 tables):
# - AVX2 + FMA (Haswell .. Zen 3): VFMADD231PS ymm at 0.5 cycles (two 256-bit FMA pipes) =
#   2 x 8 x 2 = 32 FLOP. int8: VPMADDUBSW ymm (32 u8 x s8 products, pairs summed) and
#   VPMADDWD ymm (widening to int32) each 0.5 cycles on the same two pipes (Intel p0/p1; Zen 3
#   FP0/FP3): one 32-MAC step a cycle = 64 ops.
# - AVX-VNNI (Alder Lake-P, Zen 5's VEX form): VPDPBUSD ymm, 32 MACs at 0.5 cycles = 128 ops.
# - AVX-512 on Intel Xeon SP (two 512-bit FMA ports, 0 and 5): VFMADD231PS zmm 0.5 cycles =
#   64 FLOP; VPDPBUSD zmm (AVX512-VNNI, Cascade Lake on) 64 MACs at 0.5 = 256 ops; without
#   VNNI (Skylake-SP) VPMADDUBSW + VPMADDWD zmm = 128 ops. Parts with one 512-bit FMA unit
#   (some Xeon Silver/Bronze) reach half: not told apart by flags.
# - AVX-512 on AMD Zen 4 (512-bit ops on 256-bit pipes): VFMADD231PS zmm 1 cycle = 32 FLOP,
#   VPDPBUSD zmm 1 cycle = 128 ops. Zen 5's full-width desktop/server parts reach twice the
#   fp32 figure: not told apart by flags (assumption: the Zen 4 row).
# - AVX without FMA (Sandy/Ivy Bridge): one 256-bit multiply and one add a cycle = 16 FLOP;
#   int8 on 128-bit SSSE3 PMADDUBSW + PMADDWD = 32 ops.
# - Arm NEON (Neoverse N1 / Cortex-A76 class: two 128-bit FMLA pipes) = 16 FLOP; with the dot
#   product extension (asimddp) SDOT 16 MACs on each of two pipes = 64 ops, else 32 (Arm
#   Neoverse N1 Software Optimization Guide, FMLA / SDOT throughput 2 a cycle).
# AMX (amx_int8 / amx_bf16 tiles) is not counted: llama.cpp uses it only through its own AMX
# buffer type, whose rates are not modelled; the vector rows apply.
CPU_SIMD: tuple[tuple[tuple[str, ...], str, float, float], ...] = (
    (("avx512f", "avx512_vnni"), "intel", 64.0, 256.0),
    (("avx512f", "avx512_vnni"), "amd", 32.0, 128.0),
    (("avx512f", "avx512bw"), "intel", 64.0, 128.0),
    (("avx512f",), "amd", 32.0, 64.0),
    (("avx_vnni", "fma"), "", 32.0, 128.0),
    (("avx2", "fma"), "", 32.0, 64.0),
    (("avx",), "", 16.0, 32.0),
    (("asimddp",), "", 16.0, 64.0),
    (("asimd",), "", 16.0, 32.0),
)

# --- Time model: see perfmodel/efficiency.py for the curves that read these ----------------
# Sources are named per constant. "H200 trials" = the validator's run on an H200 SXM host,
# benchmarks/data/h200_validate_2026-12-01.json; "H200 e2e" = benchmarks/data/
# h200_e2e_2026-12-01.json (benchmarks/e2e_torch.py, torch 2.11 + transformers 5.17); "fit to
# the tune split" = fitted on the split = "tune" figures of benchmarks/published_figures.toml
# only (benchmarks/published.py prints the fit and the held-out check split apart).

# Host cost of one eager PyTorch op: a bare x.add_() in a loop on the H200 host (H200 e2e:
# ops.eager_op_s median 8.6 us). ModelOptions.eager_op_s overrides it for another host.
EAGER_OP_S = 8.6e-6
# The host's speed at that dispatch relative to the H200 host's server CPU, by device class:
# desktops and Macs run one thread faster than server parts (Geekbench 6 single-core: Xeon
# Platinum 8480+ ~1,900, Ryzen 9 7950X ~3,000, Apple M2 Max ~2,800 -> ~0.6-0.65 of the time);
# phones' efficiency-bound cores slower (assumption).
HOST_OP_SCALE: dict[str, float] = {"datacenter-gpu": 1.0, "consumer-gpu": 0.6,
                                   "apple-silicon": 0.65, "mobile-soc": 1.5, "cpu": 1.0}
# One node of a replayed CUDA graph: the same add captured 2000 times (H200 e2e:
# ops.graph_node_s 1.02 us). The least a kernel costs the GPU when the host is out of the way.
GRAPH_NODE_S = 1.0e-6

# Fixed GPU time of one kernel on top of its roofline (launch gap, ramp-up to full bandwidth,
# tail wave), seconds, by device family. Hopper: fit to the H200 e2e CUDA-graphed decode step
# of Llama-3-8B at batch 1 (8.95 ms; ~1320 kernels after ~4 ms of weight streaming) = 2.8 us,
# consistent with the cuda-graphs trial's 0.93 ms for 4 layers. Consumer NVIDIA, Apple, AMD:
# fit to the tune split (llama.cpp / vLLM decode at batch 1, where floors are a visible share).
# Ultra chips (two dies joined by UltraFusion) pay ~5x a single die's per-kernel time: with it
# the tune split's 7B and 70B decode rates on M1/M2/M3 Ultra agree (big models reach a higher
# share of the bandwidth there, small ones a lower). Phones: assumption (no figure yet); CPUs
# run ops as function calls (their cost is the host's).
KERNEL_FLOOR_S: dict[str, float] = {
    "nvidia": 2.8e-6,
    "nvidia-consumer": 1.8e-6,
    "amd": 3.0e-6,
    "amd-rdna3": 1.8e-6,
    "apple": 1.25e-6,
    "apple-ultra": 6.0e-6,
    "mobile": 5.0e-6,
    "cpu": 0.0,
    "default": 3.0e-6,
}

# Achievable streaming bandwidth as a share of the theoretical (datasheet or probed) figure:
# what a large copy reaches. Hopper HBM3e: H200 memory-bandwidth trial, copy 4092 GB/s of
# 4814 theoretical = 0.85 (docs/benchmarks.md runs: 4092-4239, 0.85-0.88). Apple tiers and
# RDNA 3: fit to the tune split (llama.cpp and MLX decode: Max chips stream a smaller share of
# their wider memory than Pro chips; base chips are taken as Pro). Phones: fit to the tune
# split's ExecuTorch Llama 3.2 1B decode on a OnePlus 12 (bf16 19.2, 8da4w 50.2 tokens/s on
# 76.8 GB/s LPDDR5X: 0.59 and 0.71 of it). Others: assumptions (GDDR
# and HBM copies usually land at 80-92% of the datasheet).
STREAM_BANDWIDTH_FRACTION: dict[str, float] = {
    "nvidia-hopper": 0.85,
    "nvidia-blackwell": 0.85,  # assumed like HBM3e on Hopper
    "nvidia": 0.88,
    "amd-cdna3": 0.80,
    "amd-rdna3": 0.95,
    "amd": 0.85,
    "apple-base": 0.86,
    "apple-pro": 0.86,
    "apple-max": 0.73,
    "apple-ultra": 0.95,
    "mobile": 0.7,
    "cpu": 0.6,
    "default": 0.85,
}

# Dense GEMM at large shapes (8192^3) as a share of the datasheet dense peak, by family and
# dtype class ("16" = bf16/fp16, "8" = fp8/int8, "4" = fp4, "32" = tf32/fp32).
# Hopper: H200 matmul-peak trial, bf16 758.7 / 989.5 = 0.77, tf32 382.9 / 494.5 = 0.77,
# fp8 1356.3 / 1979 = 0.69 (torch._scaled_mm per-tensor, fast accumulation; other runs
# 0.69-0.74). Blackwell fp8 (Transformer Engine, B200 Megatron training) and Apple 16-bit
# (llama.cpp f16 prefill): fit to the tune split. CDNA 3 fp8: the FP8 peak is twice bf16's, and
# hipBLASLt reaches it in the same proportion as the whole step shows: ROCm/TransformerEngine
# issue #78 (2024-10-22) measured the Llama-3-70B FSDP proxy at 717-747 TFLOP/s per MI300X in
# FP8 (0.27-0.29 of 2614.9) against 951.6 per H100 with the same script (0.48 of 1979); the
# H100's large-GEMM share is 0.69 (above), 1.43x its whole-step share, and the same ratio on
# MI300X gives 0.40 (1046 TFLOP/s, 1.45x the bf16 GEMM's 719). Until 2026-12-03 this was 0.27,
# fit to the Oracle 405B rows, which left FP8 prefill no faster than bf16 on MI300X.
# Others: assumed.
GEMM_PEAK_FRACTION: dict[str, dict[str, float]] = {
    "nvidia-hopper": {"16": 0.77, "8": 0.69, "32": 0.77, "4": 0.6},
    "nvidia-blackwell": {"16": 0.72, "8": 0.47, "32": 0.72, "4": 0.45},
    "nvidia": {"16": 0.80, "8": 0.70, "32": 0.80, "4": 0.6},
    "amd-cdna3": {"16": 0.55, "8": 0.40, "32": 0.55, "4": 0.25},
    "amd": {"16": 0.60, "8": 0.55, "32": 0.60, "4": 0.5},
    "apple": {"16": 0.80, "8": 0.80, "32": 0.80, "4": 0.80},
    "mobile": {"16": 0.5, "8": 0.5, "32": 0.5, "4": 0.5},
    "cpu": {"16": 0.5, "8": 0.5, "32": 0.5, "4": 0.5},
    "default": {"16": 0.7, "8": 0.6, "32": 0.7, "4": 0.5},
}
# A GPU capped below its datasheet power (nvidia-smi -pl, or an OEM SKU such as Meta's 500 W
# H100) sustains a lower clock under matmul load: dynamic power ~ f x V^2 with V ~ f, so the
# compute peaks scale by (cap / rated)^(1/3) (500 W of 700 W: x0.89). Memory bandwidth does not.
POWER_CAP_CLOCK_EXPONENT = 1.0 / 3.0
# GEMM shape factor: each of M, N, K enters as x / (x + GEMM_HALF_DIM) (a 128-wide tensor-core
# tile half empty below 128 rows, tail waves over the SMs), normalised to 1 at 8192^3 where the
# peak above was measured. With 128 it reproduces the H200 fp8-gemm trial's bf16 prefill
# shapes (M=2048: qkv 694, gate_up 699, down 740 TFLOP/s; model 715, 723, 723). Apple GPUs
# multiply in 8x8 simdgroup matrices inside 32-64-wide threadgroup tiles (MLX's steel GEMM,
# llama.cpp's kernel_mul_mm): a 32-row half point (assumption).
# Phones run prefill on CPU micro-kernels a few rows tall (XNNPACK's int8 GEMMs tile 4-8 rows;
# the Hexagon HTP and the ANE are fed whole chunks): a 4-row half point (assumption). Their
# rates come from the profiles' [[compute]] paths, measured at 64-128-token prompts.
# CPUs multiply in register tiles a few rows tall (llamafile sgemm.cpp tinyBLAS::gemm<RM, RN>
# up to 4-6 rows; repack.cpp's Q4_K 8x8 GEMM four rows at a time): a 4-row half point
# (assumption, as for phones).
GEMM_HALF_DIM: dict[str, float] = {"apple": 32.0, "mobile": 4.0, "cpu": 4.0, "default": 128.0}

# Weight-streaming efficiency of a matmul at small M (decode), as a share of the achievable
# stream bandwidth above, by kernel family (keys "kernel" or "kernel@family"). cublas: H200
# int4 trial's bf16 side at batch 1 (gate_up 33.9 us and down 37.0 us for 117 MB each, with the
# 2.8 us floor) = 0.93. torch-scaled-mm (fp8): H200 fp8-gemm trial at M=16 timed as replayed
# CUDA graphs (2026-12-01 23:30: qkv 9.7, gate_up 17.0, down 19.8 us for 25-59 MB, with the
# floor) = ~0.9; timed eagerly the same GEMMs had measured the host's launch rate (qkv 43.7 us).
# torch-int4: H200 int4 trial (gate_up 20.3 us for
# 30.5 MB at batch 1, with the compute term) = 0.45. marlin: "near-ideal 3.87x over fp16 up to
# batch 16-32" (IST-DASLab/marlin README) = 0.9. llama.cpp (legacy quants and f16) and MLX per
# vendor, fp8 on CDNA 3 (vLLM: torch._scaled_mm / hipBLASLt): fit to the tune split; MLX
# streams more of the bandwidth than llama.cpp's Metal kernels on the same chip (above 1:
# capped at the datasheet).
# CUTLASS fp8 on NVIDIA 0.85, ExLlamaV2 0.85, bitsandbytes' gemv_4bit 0.5, the on-device
# engines' int4 GEMV 0.8, the llama.cpp and default rows: assumptions. coreml-int4: Core ML's
# int4 per-block GPU matmuls, fit to the one published run (Apple, "On Device Llama 3.1 with
# Core ML", 2024: Llama-3.1-8B ~33 tokens/s on an M1 Max = ~150 GB/s, half the chip's 292 GB/s
# stream figure); tune split, the only published Core ML LLM run with its setup stated.
GEMV_EFFICIENCY: dict[str, float] = {
    "cublas": 0.93,
    "cutlass-fp8": 0.85,
    "torch-scaled-mm@amd": 0.63,
    "torch-scaled-mm": 0.9,
    "torch-int4": 0.45,
    "marlin": 0.9,
    "exllamav2": 0.85,
    "bitsandbytes": 0.5,
    "mobile-int4": 0.8,
    "coreml-int4": 0.52,
    "llamacpp": 0.85,
    "llamacpp@apple": 0.875,
    "llamacpp@nvidia": 0.96,
    "llamacpp@amd": 1.0,
    "llamacpp-f16": 0.9,
    "llamacpp-f16@apple": 1.0,
    "llamacpp-f16@nvidia": 0.85,
    "mlx": 1.17,
    "mlx-f16": 1.2,
    "default": 0.8,
}
# Kernels whose streaming share is a factor of another's: llama.cpp's K-quants against its
# legacy quants (q4_0, q8_0), fit to the tune split (Apple and NVIDIA decode figures of both).
GEMV_RELATIVE: dict[str, tuple[str, float]] = {"llamacpp-k": ("llamacpp", 0.87)}
# Compute rate of a kernel family's matmuls as a share of the device's 16-bit dense peak, where
# it is not cuBLAS's (those follow GEMM_PEAK_FRACTION): keys "kernel" or "kernel@family".
# torch-int4: the H200 int4 trial's slope, 4.3 us per extra row of the 14336x4096 shape = 27
# TFLOP/s = 0.028 of 989.5 (tinygemm; flat in M, see KERNEL_FLAT_RATE). marlin: ~0.8 of fp16
# at large batch (Marlin README). llama.cpp's CUDA matmuls (F16 and quantised) are shares of the
# FP16-accumulate tensor rate, which GeForce cards run at twice the fp16 figure the profiles list
# (perfmodel/compute.py cuda_tensor_scale, from the engine's cuda_gemm_accumulate and the
# profiles' peak_tflops.fp16_acc16); F16 there is a cuBLAS GEMM (GEMM_PEAK_FRACTION). Until
# 2026-12-07 this table said so by family ("llamacpp-f16@nvidia-ada" and "-ampere" 1.6 = 2 x 0.8),
# which doubled the workstation cards of those families too (RTX 6000 Ada, RTX A6000), and
# "llamacpp@nvidia" was 0.87 of the FP32-accumulate rate. llama.cpp quantised prefill per family,
# llama.cpp on A100 / H100 (May 2024 builds reach 30-36% of the tensor peak), MLX: fit to the
# tune split. bitsandbytes: a cuBLAS GEMM after dequantising (Hopper's 0.77); ExLlamaV2
# and the llama.cpp default: assumptions. torch's int4 kernel off NVIDIA (MPS, CPU) and the
# on-device engines' int4 kernels (mobile-int4): assumptions, not the H200's tinygemm figure.
KERNEL_COMPUTE_FRACTION: dict[str, float] = {
    "torch-int4@nvidia": 0.028,
    "torch-int4": 0.3,
    "mobile-int4": 0.5,
    "marlin": 0.8,
    "exllamav2": 0.6,
    "bitsandbytes": 0.77,
    "llamacpp": 0.6,
    "llamacpp@apple": 0.71,
    "llamacpp@nvidia": 0.45,
    "llamacpp@nvidia-hopper": 0.30,
    "llamacpp@nvidia-ampere-hbm": 0.36,
    "llamacpp@amd": 0.50,
    "llamacpp-f16@nvidia-hopper": 0.30,
    "mlx": 0.825,
    "mlx-f16": 0.9,
}
# Kernels whose rate does not follow the GEMM shape factor (tinygemm: the int4 trial's per-row
# cost is the same at 16 and at 64 rows).
KERNEL_FLAT_RATE = frozenset({"torch-int4"})
# Kernels that dequantise and multiply without overlapping the two: time = (m^p + c^p)^(1/p).
# p = 2 reproduces the H200 int4 trial at batch 1, 4, 16 and 64 to within 3% (a plain max is
# 26% short at batch 4). Others overlap fully (p = infinity: the per-op roofline max).
# llama.cpp on a CPU: each thread streams its weight rows and multiplies them in the same loop
# (ggml-cpu.c ggml_compute_forward_mul_mat_one_chunk), so the two overlap only in part: p = 2,
# as tinygemm's (assumption; with it the saved run's decode at batch 1 and 8 needs one compute
# rate a format, docs/benchmarks.md 2026-12-07).
KERNEL_OVERLAP_P: dict[str, float] = {"torch-int4": 2.0, "bitsandbytes": 2.0,
                                      "llamacpp@cpu": 2.0, "llamacpp-k@cpu": 2.0,
                                      "llamacpp-f16@cpu": 2.0}
# Matrix-vector kernels (a few rows) compute on the vector units, not in tensor-core tiles:
# their rate is at least this share of the non-tensor fp32 peak (assumption: half, as GEMV
# kernels spend as many instructions on loads and reductions as on FMAs). The rate of a matmul
# is the larger of this and the tensor-core rate x the shape factor, so it never falls with M.
GEMV_VECTOR_EFFICIENCY = 0.5
# Below this many rows a matmul runs as a GEMV / split-K kernel, not in padded tensor-core tiles:
# the shape factor holds its M=16 value below (GEMM efficiency stays non-decreasing in M).
GEMM_MIN_ROWS = 16.0
# Extra traffic of a kernel family that dequantises into a 16-bit copy before a cuBLAS GEMM
# (bitsandbytes NF4 above M = 1, QLoRA's forward and backward), bytes per weight: write and
# read the bf16 copy (2 + 2).
DEQUANT_COPY_BYTES_PER_WEIGHT = 4.0

# Attention kernels: FLOP/s as a share of the 16-bit dense peak (forward, causal, 128-dim
# heads). H200 attention-backends trial (1 x 32 heads x 2048, causal bf16, 34.4 GFLOP):
# cudnn 85.9 us = 0.41, flash (torch SDPA's FlashAttention-2) 169 us = 0.21, efficient 276 us
# = 0.13; math runs as bmm + softmax (GEMM efficiency, scores in memory). FA3-class kernels
# (vLLM/SGLang/TensorRT-LLM on Hopper): 0.5 (Shah et al. 2024, FlashAttention-3, fig. 5:
# ~500 TFLOP/s causal hd128 at 2-4k on H100 SXM). On other families the serving kernels are
# FA2-class: 0.45 of Ampere/Ada peaks (FlashAttention-2, Dao 2023: 50-73% of A100's peak in
# the forward at long sequences, less causal at 2k; assumption), AMD rows assumptions.
# llama.cpp's flash_attn_ext and Apple's (MLX's mx.fast.sdpa: "serving"; llama.cpp Metal):
# fit to the tune split (prefill at 2-8k tokens); Apple's other columns unused (assumption).
ATTENTION_PEAK_FRACTION: dict[str, dict[str, float]] = {
    "nvidia-hopper": {"cudnn": 0.41, "serving": 0.50, "sdpa": 0.21, "efficient": 0.13,
                      "llamacpp": 0.25},
    "nvidia-blackwell": {"cudnn": 0.45, "serving": 0.50, "sdpa": 0.25, "efficient": 0.13,
                         "llamacpp": 0.20},
    "nvidia": {"cudnn": 0.45, "serving": 0.45, "sdpa": 0.45, "efficient": 0.25,
               "llamacpp": 0.25},
    "amd": {"cudnn": 0.3, "serving": 0.3, "sdpa": 0.2, "efficient": 0.15, "llamacpp": 0.15},
    "apple": {"serving": 0.8, "sdpa": 0.3, "efficient": 0.3, "llamacpp": 0.1, "cudnn": 0.3},
    "default": {"cudnn": 0.3, "serving": 0.3, "sdpa": 0.2, "efficient": 0.15,
                "llamacpp": 0.15},
}
# Backward attention reaches less than the forward per FLOP (FlashAttention-2 paper, Dao 2023,
# figs. 5-6: backward ~0.8 of the forward's TFLOP/s on A100; FA3 paper similar on H100); its
# FLOPs are 2.5x the forward's (dQ, dK, dV and the recomputed P).
ATTENTION_BACKWARD_EFFICIENCY = 0.8
ATTENTION_BACKWARD_FLOP_FACTOR = 2.5
# Reading the KV cache in a decode step, as a share of the stream bandwidth: paged / split-K
# decode kernels (FlashDecoding, FlashInfer, TensorRT-LLM XQA) ~0.85 (assumption, in line
# with the GEMV figure); torch SDPA over a cache 0.6, cuDNN 0.7, llama.cpp 0.8, any other 0.75
# (assumptions; Hugging Face's extra passes, EngineTime.kv_passes, are fit to the e2e run).
KV_READ_EFFICIENCY: dict[str, float] = {"serving": 0.85, "sdpa": 0.6, "cudnn": 0.7,
                                        "efficient": 0.6, "llamacpp": 0.8, "default": 0.75}

# Elementwise traffic of one decoder layer, bytes per token: coefficients of the hidden size
# h, the KV width (kv heads x head_dim) and the MLP width I, counted from the ops.
# eager (Hugging Face Llama, plain PyTorch): each RMSNorm runs in fp32 (to(float32), pow,
# mean, rsqrt, two muls, to(bf16): 36h), rotary on q and k (mul, slice-neg-cat, mul, add:
# 20 x (h + kv)), two residual adds (12h), the attention output made contiguous (4h), SiLU and
# the gate x up product (10 I). fused (torch.compile / serving engines' kernels): add+RMSNorm
# in one pass (8h each), rotary in place (4 x (h + kv)), SiLU x up in one kernel (6 I).
# The H200 torch-compile trial (block forward 1.83 -> 1.56 ms, 1.18x) is reproduced by these
# two rows (model 1.79 -> 1.55 ms).
ELEMENTWISE_BYTES: dict[str, tuple[float, float, float]] = {
    "eager": (108.0, 20.0, 10.0),
    "fused": (20.0, 4.0, 6.0),
}
# The final norm before the lm_head, bytes per token in units of h (as one layer's norm above).
FINAL_NORM_BYTES: dict[str, float] = {"eager": 36.0, "fused": 8.0}
# Logits traffic per (token, vocab) element. Inference: the bf16 logits written and the fp32
# copy sampling reads (Hugging Face upcasts: 2 + 2 + 4 = 8). Training: bf16 logits (2), the
# fp32 upcast (2 + 4), log-softmax (4 + 4), its backward (4 + 4) and the cast back (4 + 2) = 30.
LOGIT_TRAFFIC_BYTES: dict[str, float] = {"infer": 8.0, "train": 30.0}
# Backward of elementwise ops: gradients in and out plus the saved input -> ~2x the forward.
ELEMENTWISE_BACKWARD_FACTOR = 2.0
# FP8 training (Transformer Engine, torchao float8): every GEMM input is cast to fp8 (read 2 B,
# write 1 B) in the forward, and the gradients again in the backward, plus an amax pass:
# bytes per token per layer, of (h, kv, I) as above: inputs of qkv, o, gate_up, down.
FP8_CAST_BYTES: tuple[float, float, float] = (9.0, 0.0, 3.0)
FP8_CAST_BACKWARD_FACTOR = 2.0

# Kernels of one decoder layer in one forward. eager: Hugging Face Llama (modeling_llama.py,
# transformers 5.x): 2 RMSNorms x 8 ops, q/k/v/o, rotary 2 x 5, cache update 2, SDPA 1,
# contiguous 1, 2 residual adds, gate, up, SiLU, mul, down = 41. compiled: the 7 matmuls and
# SDPA stay, Inductor fuses the pointwise ops into ~6 Triton kernels = 14. fused: serving
# engines (merged qkv and gate_up, fused norm/rotary/activation, one attention and one cache
# write) = 11. llama.cpp: ggml's Llama graph (norm, mul, 7 mul_mat, 2 rope, 2 cpy, soft_max
# or flash_attn_ext, cont, adds, glu) = 22. MLX: mlx_lm's Llama block (2 fast rms_norm, 4-7
# matmuls, 2 rope, the cache update, sdpa, 2 adds, silu x up) = 18.
KERNELS_PER_LAYER: dict[str, float] = {
    "eager": 41.0,
    "compiled": 14.0,
    "fused": 11.0,
    "llamacpp": 22.0,
    "mlx": 18.0,
}
# Outside the layers: embedding, final norm, lm_head, sampling / loss.
KERNELS_OUTSIDE_LAYERS = 10.0
# An MoE layer: router, top-k, and per touched expert ~6 ops in eager loops (Hugging Face
# MixtralSparseMoeBlock: index, gate, up, act, mul, down, index_add); with grouped / fused MoE
# kernels EngineTime.moe_kernels (vLLM fused_moe: 2 GEMM kernels + routing ~4 = 6).
MOE_KERNELS_EAGER_PER_EXPERT = 6.0
# DeepSeek-V2/V3 layers in the serving engines launch more kernels than a Llama layer, read
# from SGLang's python/sglang/srt/models/deepseek_v2.py (0.4.x; vLLM's deepseek_v2.py runs the
# same ops) for a decode step of the native block-FP8 checkpoint (weight_block_size 128x128):
# - MLA, absorbed decode (forward_absorb): q_a_proj, q_b_proj, kv_a_proj_with_mqa and o_proj are
#   block-FP8 GEMMs, each after its own activation quantisation (per_token_group_quant_fp8) = 8;
#   q_a and kv_a layernorms 2; the two per-head bmms with W_UK and W_UV, each after a per-tensor
#   re-quantisation of its input (input_to_float8: abs, amax, clamp, scale, cast) = 12; q/k
#   concatenation and transposes 4; rotary on the rope part 1. 27 kernels, of which a fused
#   layer's attention half (qkv, rotary, attention, o_proj, cache write, norm ~ 6) is already in
#   KERNELS_PER_LAYER["fused"]: 21 more.
MLA_EXTRA_KERNELS = 21.0
# - the DeepSeek MoE block: the router's grouped top-k in plain torch ops (sglang
#   srt/layers/moe/topk.py grouped_topk / biased_grouped_topk: sigmoid or softmax, bias add,
#   per-group top-2 and sum, group top-k, mask build and scatter, masked fill, top-k, gather,
#   renormalise ~ 13), block-FP8 activation quantisation before both expert GEMMs 2, the shared
#   expert (two quantisations, two GEMMs, SiLU-and-mul = 5) and the routed scaling and sum 2:
#   22 beyond the engine's grouped-MoE kernels (EngineTime.moe_kernels).
DEEPSEEK_MOE_EXTRA_KERNELS = 22.0
# A DeepSeek dense layer's MLP where the engine states its attention half
# (Costs.deepseek_attention_kernels): gate_up (activation quantisation + block-FP8 GEMM),
# SiLU-and-mul, down (quantisation + GEMM), in SGLang 0.4.1-0.5.7's and vLLM 0.11.0's
# deepseek_v2.py DeepseekV2MLP.
DEEPSEEK_DENSE_MLP_KERNELS = 5.0
# A grouped MoE GEMM tile streams one expert's (BLOCK_N x K) weights after one DRAM latency
# (~0.5 us on Hopper: Luo et al., "Benchmarking and Dissecting the Nvidia Hopper GPU
# Architecture", arXiv:2402.13499; Chips and Cheese's H100 measurements agree) at its SM's
# share of the stream (4080 GB/s / 132 SMs ~ 31 GB/s): 15.5 KB, over BLOCK_N = 128 columns
# (fused_moe's and DeepGEMM's usual N tile) ~ 120 bytes of one weight column. A tile whose
# column holds that many bytes spends as long waiting as streaming.
MOE_TILE_LATENCY_BYTES = 120.0
# Backward launches about twice the forward's kernels (dgrad + wgrad per matmul).
BACKWARD_KERNEL_FACTOR = 2.0


# The engines' host costs and kernel choices live in each engine's data file
# (hwadvisor/engines/data/<id>.toml [costs] and [kernels]).

# Optimizer kernels stream long flat chunks (multi_tensor_apply: 65k elements per block): 0.9
# of the stream bandwidth (assumption; with the bytes above the H200 e2e 1B step's foreach /
# fused difference is reproduced, 16 ms predicted against 13 ms measured).
OPTIMIZER_BANDWIDTH_EFFICIENCY = {"foreach": 0.9, "fused": 0.9}
# Optimizer offload (ZeRO-Offload / CPUOffloadPolicy): the step runs on the host at its memory
# bandwidth. A server socket streams ~100 GB/s from DDR5 in a multi-threaded Adam (DeepSpeed
# CPUAdam, Ren et al. 2021, ZeRO-Offload, sec. 5: ~ the host's memory bandwidth); bytes per
# parameter: fp32 param, grad, m, v read, three written, a 16-bit copy: 30. The figure is the
# node's: its GPUs step their shards at once and share it (compute._host_step_rate). FSDP2's
# CPUOffloadPolicy steps with torch's AdamW on CPU tensors (fused CPU kernel since torch 2.4);
# assumed to reach the same bandwidth (not measured here).
HOST_OPTIMIZER_GBPS = 100.0
HOST_OPTIMIZER_BYTES_PER_PARAM = 30.0
# Activation checkpointing recomputes the forward: full = every layer's forward again;
# selective (Korthikanti et al. 2022, sec. 5: recompute the attention core only) = the
# attention forward again, ~+5% of a step at 2-8k tokens.
# FSDP2 / ZeRO-3 prefetch the next unit's all-gather and run the reduce-scatter on a side
# stream: without an explicit overlap setting the implicit prefetch still hides this share of
# the communication behind compute (torch FSDP2 docs: forward/backward prefetch on by default;
# assumption 0.8), with comm_overlap all of it up to the compute time.
FSDP_IMPLICIT_OVERLAP = 0.8
# Pipeline parallelism: 1F1B bubble (pp - 1) / (micro-batches x virtual stages + pp - 1)
# (Narayanan et al. 2021, Megatron-LM, eq. 1 and sec. 2.2 for the interleaved schedule).

# --- Optimizer traffic, bytes per parameter per step ----------------------------------------
# Fused AdamW (torch _fused_adamw_, one pass) reads param (4), grad (2 or 4), m (4), v (4) and
# writes param, m, v (12), plus the 16-bit param copy (2): ~32 B/param. torch's foreach AdamW
# (_multi_tensor_adamw, torch/optim/adamw.py) runs lerp_ (exp_avg), mul_ + addcmul_
# (exp_avg_sq), sqrt, div_, add_ (denominator), addcdiv_ (param) and the weight-decay mul_:
# 12 fp32 reads and 8 writes per parameter = 80 B/param. The H200 e2e 1B step (foreach 203 ms,
# fused 190 ms) puts the difference at 13 ms; 48 B/param x 1.24e9 at ~3.7 TB/s = 16 ms.
OPT_BYTES_PER_PARAM_FUSED: dict[str, float] = {"adamw": 32.0, "adamw-8bit": 16.0, "sgd": 18.0}
OPT_BYTES_PER_PARAM_UNFUSED: dict[str, float] = {"adamw": 80.0, "adamw-8bit": 40.0, "sgd": 36.0}
# The same step on pure 16-bit weights (no fp32 master): AdamW reads and writes the bf16
# parameter (2 + 2), reads its bf16 gradient (2) and reads and writes both moments (bf16: 8;
# bitsandbytes' 8-bit: 4, one fused kernel, optimizer_update_8bit_blockwise): 14 and 10 bytes
# a parameter; SGD the parameter, gradient and momentum: 10. Foreach kernels scale as above.
OPT_BYTES_PER_PARAM_PURE16: dict[str, float] = {"adamw": 14.0, "adamw-8bit": 10.0, "sgd": 10.0}
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
# AMD Infinity Fabric (xGMI) and NVLink bridges: the profile's GPU-link figure x a collective
# efficiency like NVLink's (RCCL all-reduce on 8x MI300X ~ 300-330 GB/s of 448: ~0.7;
# assumption for the two-card bridges).
GPU_LINK_BUS_EFFICIENCY = 0.7
# PCIe effective bandwidth per x16 link by generation (raw 16/31.5/63/121 GB/s; ~80% after
# protocol overhead): gen4 x16 ~ 25 GB/s, gen5 ~ 50.
PCIE_X16_EFFECTIVE_GBPS: dict[int, float] = {3: 12.0, 4: 25.0, 5: 50.0, 6: 100.0}
PCIE_DEFAULT_GENERATION = 4
# Inter-node: 400 Gb/s InfiniBand NDR (or RoCE) per GPU, one NIC per GPU as in DGX H100 ->
# 50 GB/s per GPU. Workload.inter_node_bandwidth_gbps (GB/s per GPU) overrides.
INTER_NODE_DEFAULT_GBPS = 50.0
# Fixed latency of one collective (small-message all-reduce): nccl-tests on 8x H100 NVLink
# ~ 10-20 us; PCIe and inter-node are slower. Dominates tensor-parallel decode.
COLLECTIVE_LATENCY_S: dict[str, float] = {"nvlink": 10e-6, "pcie": 20e-6, "inter-node": 30e-6,
                                           "host-staged": 25e-6}
# GPUs without peer access (GeForce RTX 40 / 50 series: "GeForce cards do not support P2P",
# NCCL maintainer, NVIDIA/nccl-tests#287) reach each other through host memory: NCCL's SHM
# transport copies into a pinned host buffer and the peer copies out, so every byte crosses
# host DRAM twice and a collective, which sends and receives at once, gets about the link's
# bidirectional host-staged rate. Two RTX 5090s (PCIe 5.0 x8, p2pBandwidthLatencyTest) moved
# ~30 GB/s both ways staged against ~56 with the P2P driver fork, one way 24 against 28; the
# latency 14 us against 0.5, and 24 us against 5 between two RTX 4090s (aikitoria's
# open-gpu-kernel-modules P2P fork, as reported 2025-12:
# https://www.wumeicn.com/de/nvidia-rtx-5090-p2p-untersttzung-durch-gepatchten-treiber-aktiviert/).
# So collectives there run at ~0.55 of the PCIe link's collective rate, 25 us a call. An
# assumption from one published pair; not measured here (no GeForce pair on the lent machines).
HOST_STAGED_BUS_SHARE = 0.55
# Mid-size messages pay a protocol overhead on top of the small-message latency (NCCL switches
# from its low-latency protocol to Simple, and pipelines chunks): s / (s + knee) of this many
# seconds (PCIe and the network: assumptions). NVLink: fit to the validator's collectives
# trial on two H200 (NV18, NCCL 2.28.9, docs/benchmarks.md 2026-11-30): all-reduce 220 / 310 /
# 330 GB/s at 25 MiB / one Llama-3-8B layer / 1 GiB; with the trial's own plateau (334 GB/s,
# what --calibration uses) the model gives 223 / 324 / 330, with the 8-GPU 0.8 x NVLink figure
# 235 / 349 / 355. Small messages (a decode step's 16 KB) cost the latency alone.
COLLECTIVE_PROTOCOL_S: dict[str, float] = {"nvlink": 30e-6, "pcie": 40e-6, "inter-node": 60e-6}
COLLECTIVE_KNEE_BYTES = 1e6
# All-gather and reduce-scatter against all-reduce at 1 GiB in the same trial: 266 / 330.
# All-to-all (expert dispatch and combine) moves (n-1)/n of each GPU's buffer, as all-gather
# does in nccl-tests' busbw convention; assumed to reach all-gather's share (not measured here).
COLLECTIVE_OP_EFFICIENCY: dict[str, float] = {"all_reduce": 1.0, "all_gather": 0.81,
                                              "reduce_scatter": 0.81, "all_to_all": 0.81}
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
# Pure 16-bit training (ModelOptions.master_weights false: the model loaded in bf16, no fp32
# copy; transformers' Trainer outside DeepSpeed/FSDP casts nothing up): the weights are the
# optimizer's parameters. torch.optim.AdamW keeps exp_avg and exp_avg_sq in the parameter's
# dtype (torch.zeros_like(p, memory_format=torch.preserve_format)): 2 + 2; bitsandbytes'
# AdamW8bit keeps both moments block-wise in 8 bits (1 + 1, fp32 absmax per 256-value block:
# ~0.03); SGD's momentum buffer in bf16, 2. Sources: torch/optim/adamw.py _init_group,
# https://huggingface.co/docs/bitsandbytes/main/en/optimizers (Dettmers et al. 2021).
OPTIMIZER_BYTES_PURE16: dict[str, float] = {"adamw": 4.0, "adamw-8bit": 2.0, "sgd": 2.0}
# FSDP keeps one or two layers' full parameters gathered at a time (current + prefetched).
FSDP_GATHERED_LAYERS = 2
# Loss on logits, bytes per (token, vocab) element. At the loss's backward (the activations'
# peak): cross-entropy's saved fp32 log-softmax (4, on the fp32 upcast transformers' and
# torchtitan's losses make), its gradient (4) and the gradient of the fp32 logits (4): 12.
# At the forward's end: the 16-bit logits (2), their fp32 upcast (4) and the log-softmax (4):
# 10. With the peaks of perfmodel/memory.training_peak_bytes, the H200 allocator peaks
# (benchmarks/train_memory.py, Llama-3.2-1B/3B and Llama-3-8B at 2k-16k tokens per step, with
# and without checkpointing, docs/benchmarks.md) are met within +-2.2% (was 16 / 8 summed with
# every state: -9.5% to +5.7%).
TRAIN_LOGIT_BYTES_PER_ELEMENT = 12.0
TRAIN_LOGIT_BYTES_FORWARD = 10.0
# Under loss parallelism (torchtitan with TP: DTensor's loss_parallel, torch
# distributed/tensor/parallel/loss.py) log-softmax's backward runs as grad - exp(out) * sum(grad)
# on the local vocabulary shard: the saved fp32 output, the fp32 gradient from nll_loss, exp(out)
# and the product coexist, 4 x 4 bytes. Measured on the H200 (benchmarks/data/
# torchtitan_memory_h200.json, 70B FSDP 32 x TP 8, 16 x 8192 tokens, vocab/8 a rank): the step's
# peak lies 4 x 7.83 GiB above the checkpointed inputs, as 16 bytes an element says.
TRAIN_LOGIT_BYTES_LOSS_PARALLEL = 16.0
# Autocast over fp32 weights (transformers' Trainer with bf16=True; plain torch.autocast): the
# residual stream and the RMSNorms run in fp32 and each linear casts its own input, so a Llama
# decoder layer saves, per token and hidden unit: two norms' fp32 input and output (2 x 8), the
# q, k, v projections' three bf16 input casts (6), the rotated query and SDPA's query, output
# and o_proj input (~6), the MLP's gate and up input casts (4): ~32, counted from
# transformers' LlamaDecoderLayer (5.x); the gated MLP's gate, up, SiLU output and product
# (the down projection's input), 2 bytes each per intermediate unit: 8. Checked against the
# H200 allocator peaks without checkpointing (1B at 8k and 16k tokens, 3B at 4k: within 0.1%).
AUTOCAST_ACT_HIDDEN_COEFF = 32.0
AUTOCAST_ACT_GATED_MLP_COEFF = 8.0
TRAIN_LOGIT_BYTES_FUSED = 4.0
# What torch's caching allocator reserves beyond the tensors' peak (max_memory_reserved over
# max_memory_allocated), as a share of the allocated peak: the range over this project's 14
# H200 training runs (benchmarks/data/train_memory_h200.json, torch 2.11, one GPU, Trainer-style
# autocast; docs/benchmarks.md 2026-12-03 13:22), without and with full checkpointing. A
# measured range, not a fit: it says how far a reserved peak (what torchtitan logs as
# "memory") may lie above the allocated one. Multi-GPU runs add FSDP2's and TP's collective
# buffers on their own streams, which these single-GPU runs do not have.
RESERVED_OVER_ALLOCATED: dict[bool, tuple[float, float]] = {
    False: (0.020, 0.055),  # 1B/3B without checkpointing, 2k-16k tokens per step
    True: (0.044, 0.153),   # 1B/3B/8B with full checkpointing (the 8B at 4-5%)
}
# The same share on sharded runs (FSDP, FSDP x TP): torchtitan 0.2.2's own Llama 3.1 training
# on one H200 under the fake process group with the published world sizes (torch 2.11,
# PYTORCH_ALLOC_CONF=expandable_segments:True; benchmarks/data/torchtitan_memory_h200.json,
# docs/benchmarks.md 2026-12-03 14:44): 8B FSDP 8 with per-op SAC 76.74 / 67.06 GiB (+14.4%),
# 70B FSDP 32 x TP 8 with full checkpointing 66.65 / 56.96 GiB (+17.0%). FSDP2's all-gather and
# reduce-scatter buffers and the vocabulary-sized loss temporaries leave more cached blocks than
# a single-GPU run. Two runs: a measured range, not a fit.
RESERVED_OVER_ALLOCATED_SHARDED: tuple[float, float] = (0.144, 0.170)
TRAIN_LOGIT_CHUNK_BYTES_PER_HIDDEN = 8.0
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
