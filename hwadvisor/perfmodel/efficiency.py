"""How much of the datasheet a kernel reaches: the efficiency curves of the time model.

Every number here is read from perfmodel/constants.py, where each has its source. The curves:

- device_family: the key the tables are looked up by (nvidia-hopper, apple-ultra, amd-cdna3 ...);
- stream_fraction: achievable streaming bandwidth / theoretical, by family;
- gemm_shape_factor / gemm_peak_fraction: a dense GEMM's share of the dense peak by (M, N, K),
  dtype and family (small M is bandwidth-bound anyway; large GEMMs reach ~77% on Hopper bf16);
- quant_kernel / gemv_efficiency / dequant_compute_fraction: weight-only kernels by family;
- attention_fraction and kv_read_efficiency: attention kernels by backend and family;
- elementwise_bytes_per_token: the norms, rotary, activation and residual traffic, eager vs fused;
- collective_protocol_s / collective_op_efficiency: collectives by size and op (comm.py);
- kernel_floor_s and engine_time: fixed per-kernel GPU time and the engine's host costs.

All functions are pure and cheap: one estimate calls them a few dozen times.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from functools import lru_cache
from typing import TYPE_CHECKING

from hwadvisor.models import Device, Workload
from hwadvisor.perfmodel import constants as C
from hwadvisor.perfmodel import formats

if TYPE_CHECKING:
    from hwadvisor.engines.schema import Costs, KernelRate, Kernels, Recipe

# --- device families --------------------------------------------------------------------------


def device_family(device: Device) -> str:
    """Return the family key the efficiency tables use for this device.

    The device carries it, set where it was made: a device planned from a profile has the
    family its file states (profiles/*.toml, `family`), a probed one is guessed from its
    architecture and name (models/hardware.py guess_family). A device made without one (by
    hand) is guessed here the same way.
    """
    if device.family is not None:
        return device.family
    return device.guessed_family()


def _lookup(table: dict[str, float], family: str) -> float:
    """table[family], else its vendor's row (nvidia, amd, apple), else the default row."""
    if family in table:
        return table[family]
    vendor = family.split("-", 1)[0]
    if family.startswith("nvidia") and family.endswith(("-ada", "-ampere")) and \
            "nvidia-consumer" in table:
        return table["nvidia-consumer"]
    return table.get(vendor, table.get("default", 1.0))


def _lookup_row(table: dict[str, dict[str, float]], family: str) -> dict[str, float]:
    if family in table:
        return table[family]
    return table.get(family.split("-", 1)[0], table["default"])


# --- memory bandwidth -------------------------------------------------------------------------


def stream_fraction(family: str) -> float:
    """Achievable streaming bandwidth as a share of the theoretical figure (<= 1)."""
    return min(1.0, _lookup(C.STREAM_BANDWIDTH_FRACTION, family))


# --- dense GEMMs ------------------------------------------------------------------------------


def dtype_class(dtype: str) -> str:
    """'16', '8', '4' or '32': the GEMM_PEAK_FRACTION column of a compute dtype."""
    if dtype in ("fp8", "int8"):
        return "8"
    if dtype == "fp4":
        return "4"
    if dtype in ("fp32", "tf32"):
        return "32"
    return "16"


def gemm_peak_fraction(family: str, dtype: str) -> float:
    """Share of the datasheet dense peak a large (8192^3) GEMM reaches in this dtype."""
    return _lookup_row(C.GEMM_PEAK_FRACTION, family).get(dtype_class(dtype), 0.7)


def _dim_factor(x: float, half: float) -> float:
    return x / (x + half)


def gemm_half_dim(family: str) -> float:
    """Return the GEMM shape factor's half point for the family (its matrix tile width)."""
    return _lookup(C.GEMM_HALF_DIM, family)


@lru_cache(maxsize=8)
def _reference(half: float) -> float:
    return _dim_factor(8192.0, half) ** 3


def gemm_shape_factor(m: float, n: float, k: float, half: float = 128.0) -> float:
    """GEMM efficiency at (M, N, K) relative to 8192^3: non-decreasing in each, 1 at 8192^3.

    Below GEMM_MIN_ROWS rows the GEMV kernels keep the 16-row rate; capped at 1: larger shapes
    than the reference reach the reference's rate.
    """
    m = m if m > C.GEMM_MIN_ROWS else C.GEMM_MIN_ROWS
    n = n if n > 1.0 else 1.0
    k = k if k > 1.0 else 1.0
    factor = m * n * k / ((m + half) * (n + half) * (k + half) * _reference(half))
    return factor if factor < 1.0 else 1.0


# --- weight-only (dequantising) kernels -------------------------------------------------------


def quant_kernel(weights_dtype: str, kernels: Kernels, family: str,
                 option: str | None) -> str:
    """Return the kernel family that runs the matmuls of these weights (option overrides).

    GGUF blocks run llama.cpp's kernels, MLX formats MLX's, NF4 bitsandbytes, whatever the
    engine; dense 16-bit, FP8 (W8A8) and int4 (AWQ/GPTQ) weights run the engine's kernel for
    that kind on this vendor (its data file's [kernels]: Marlin in vLLM on NVIDIA, torch's
    _weight_int4pack_mm in plain PyTorch, CUTLASS or torch._scaled_mm for FP8 ...).
    """
    if option:
        return option
    vendor = family.split("-", 1)[0]
    fmt = formats.weight_format(weights_dtype)
    if fmt.family == "gguf":
        # K-quants (and i-quants) unpack 6-bit sub-block scales per super-block of 256: more
        # work per weight than the legacy 32-weight blocks of q4_0 / q8_0.
        return "llamacpp" if weights_dtype in ("q4_0", "q8_0") else "llamacpp-k"
    if fmt.family == "mlx":
        return "mlx"
    if weights_dtype == "nf4":
        return "bitsandbytes"
    if fmt.kind == "weight-only":  # int4 (AWQ/GPTQ)
        return kernels.pick("int4", vendor)
    if fmt.kind == "w8a8":
        return kernels.pick("fp8", vendor)
    if weights_dtype in ("fp16", "bf16", "fp32", "tf32"):
        return kernels.pick("dense", vendor)
    return "cublas"


def gemv_efficiency(kernel: str, family: str,
                    release: Mapping[str, KernelRate] | None = None) -> float:
    """Share of the stream bandwidth a weight-streaming matmul reaches at decode (M small).

    Above 1 for kernels that stream better than the family's reference (the caller caps the
    product at the theoretical bandwidth). A kernel listed in GEMV_RELATIVE is that share of
    its base kernel's (K-quants of llama.cpp's legacy quants), unless the table names it for
    the family itself. `release`: the engine release's measured rates (its data file's
    kernels.rates), which come before the general table.
    """
    found = _keyed(_release_table(release, "gemv"), kernel, family)
    if found is None:
        found = _keyed(C.GEMV_EFFICIENCY, kernel, family)
    if found is None and kernel in C.GEMV_RELATIVE:
        base, factor = C.GEMV_RELATIVE[kernel]
        return gemv_efficiency(base, family, release) * factor
    return found if found is not None else C.GEMV_EFFICIENCY["default"]


def _release_table(release: Mapping[str, KernelRate] | None, field: str) -> dict[str, float]:
    """Return the release's figures of one kind ('gemv', 'compute' ...), keyed as the tables."""
    out: dict[str, float] = {}
    for key, rate in (release or {}).items():
        value = getattr(rate, field)
        if value is not None:
            out[key] = value
    return out


def _keyed(table: Mapping[str, float], kernel: str, family: str) -> float | None:
    for key in (f"{kernel}@{family}", f"{kernel}@{family.split('-', 1)[0]}", kernel):
        if key in table:
            return table[key]
    return None


def kernel_compute_fraction(kernel: str, family: str,
                            release: Mapping[str, KernelRate] | None = None) -> float | None:
    """Share of the 16-bit dense peak this kernel family computes at; None: cuBLAS-class GEMMs.

    `release`: the engine release's measured rates, before the general table.
    """
    found = _keyed(_release_table(release, "compute"), kernel, family)
    if found is None:
        found = _keyed(C.KERNEL_COMPUTE_FRACTION, kernel, family)
    if found is None and kernel in C.GEMV_RELATIVE:
        return kernel_compute_fraction(C.GEMV_RELATIVE[kernel][0], family, release)
    return found


def release_figure(field: str, kernel: str, family: str,
                   release: Mapping[str, KernelRate] | None, inherit: bool = True) -> float | None:
    """Return one of the engine release's measured figures for this kernel, if it states it.

    field: a KernelRate field (vector, width_half, rows_half, vector_rows). K-quants inherit
    their base kernel's figure (GEMV_RELATIVE), as they do for the general tables, unless
    inherit is False (a figure of one format's own kernel: the gate of llama.cpp's Q4_0 GEMM).
    """
    found = _keyed(_release_table(release, field), kernel, family)
    if found is None and inherit and kernel in C.GEMV_RELATIVE:
        return release_figure(field, C.GEMV_RELATIVE[kernel][0], family, release)
    return found


def vector_efficiency(kernel: str, family: str,
                      release: Mapping[str, KernelRate] | None = None) -> float:
    """Share of the fp32 vector peak a kernel's few-row matmuls compute at.

    Few rows: decode of a few sequences. The release's measured figure, else
    GEMV_VECTOR_EFFICIENCY.
    """
    found = release_figure("vector", kernel, family, release)
    return found if found is not None else C.GEMV_VECTOR_EFFICIENCY


def width_factor(n: float, k: float, half: float) -> float:
    """GEMM rate of weights (N, K) against 8192 x 8192 for a kernel whose rate grows with both."""
    if half <= 0.0:
        return 1.0
    ref = (8192.0 / (8192.0 + half)) ** 2
    return min(1.0, n / (n + half) * k / (k + half) / ref)


def width_half_at(half: float, m: float, rows: float) -> float:
    """Return the width half point at M rows of a kernel whose half point holds at `rows`.

    Below `rows` it shrinks with the square root of M (floored at GEMM_MIN_ROWS): cuBLAS's
    few-row GEMMs split K over more blocks, so a narrow weight fills more of the GPU than
    the same weight at a prefill's 512 rows (engines/data/llamacpp.toml, width_rows).
    """
    if half <= 0.0 or rows <= 0.0 or m >= rows:
        return half
    return half * math.sqrt(max(m, C.GEMM_MIN_ROWS) / rows)


def rows_factor(m: float, half: float, own: float) -> float:
    """Re-weigh the shape factor's row term from the family's half point to the kernel's own."""
    if own <= 0.0 or own == half:
        return 1.0
    m = max(m, C.GEMM_MIN_ROWS)

    def term(h: float) -> float:
        return m / (m + h) * (8192.0 + h) / 8192.0

    return term(own) / term(half)


def kernel_overlap_p(kernel: str, family: str = "default") -> float | None:
    """P of the kernel's memory/compute combination on this family; None: they overlap (max)."""
    return _keyed(C.KERNEL_OVERLAP_P, kernel, family)


def kernel_flat_rate(kernel: str) -> bool:
    """Tell whether the kernel's rate ignores the GEMM shape factor."""
    return kernel in C.KERNEL_FLAT_RATE


def combine(memory_s: float, compute_s: float, p: float | None) -> float:
    """Time of a kernel from its memory and compute terms: max (p None) or the p-norm."""
    if p is None:
        return max(memory_s, compute_s)
    return (memory_s ** p + compute_s ** p) ** (1.0 / p)


# --- attention --------------------------------------------------------------------------------


def attention_fraction(backend: str, family: str) -> float:
    """Share of the 16-bit dense peak the attention kernel computes at (forward)."""
    row = _lookup_row(C.ATTENTION_PEAK_FRACTION, family)
    return row.get(backend, row.get("sdpa", 0.2))


def kv_read_efficiency(backend: str, engine: Costs | None = None,
                       head_dim: float = 128.0) -> float:
    """Share of the stream bandwidth a decode attention kernel reads the KV cache at.

    An engine that states its own figures on this family (llama.cpp on Hopper, measured) gives
    them for heads of 128 and 64 values; between them the share is interpolated, outside held;
    head sizes off a multiple of 64 take the engine's figure for its non-vector kernel.
    """
    if engine is not None and engine.kv_read_odd_heads is not None and head_dim % 64:
        return engine.kv_read_odd_heads
    if engine is not None and engine.kv_read is not None:
        wide = engine.kv_read
        narrow = engine.kv_read_narrow if engine.kv_read_narrow is not None else wide
        t = min(1.0, max(0.0, (head_dim - 64.0) / 64.0))
        return narrow + t * (wide - narrow)
    return C.KV_READ_EFFICIENCY.get(backend, C.KV_READ_EFFICIENCY["default"])


# --- elementwise ops ----------------------------------------------------------------------------


def elementwise_bytes_per_token(mode: str, hidden: float, kv_width: float,
                                mlp_width: float) -> float:
    """Bytes per token of one layer's norms, rotary, activation and residuals (forward)."""
    a, b, c = C.ELEMENTWISE_BYTES[mode]
    return a * hidden + b * (hidden + kv_width) + c * mlp_width


# --- launches and host ----------------------------------------------------------------------------


def kernel_floor_s(family: str) -> float:
    """Return the fixed GPU time per kernel beyond its roofline."""
    return _lookup(C.KERNEL_FLOOR_S, family)


def engine_time(workload: Workload, family: str | None = None) -> Costs:
    """Return the host costs and kernel fusion of the workload's engine on this device family."""
    from hwadvisor.engines import engine_for

    return engine_for(workload).costs.for_family(family)


def server_slot_s(workload: Workload, vocab: int) -> float:
    """Return the engine server's host work per sequence per decode step (0: none counted).

    Counted where the engine's defaults say requests go through its server (--engine-option
    server=false: its batch benchmark) and its costs state the work (llama-server's sampling).
    """
    from hwadvisor.engines import engine_for

    engine = engine_for(workload)
    costs = engine.costs
    if not engine.defaults.server or costs.slot_host_s is None:
        return 0.0
    return costs.slot_host_s + (costs.slot_host_s_per_vocab or 0.0) * vocab


def engine_recipe(workload: Workload, weights_dtype: str) -> Recipe | None:
    """Return the engine's published recipe for these weights and this checkpoint, if any.

    ExecuTorch's 8da4w differs by checkpoint: Meta's prequantised Llama 3.2 1B/3B (SpinQuant,
    QAT+LoRA) keep group 32 and 8-bit embeddings; any other checkpoint takes the README's PTQ
    recipe (group 128, 4-bit embedding in groups of 32).
    """
    from hwadvisor.engines import engine_for

    recipe = engine_for(workload).quantization.get(weights_dtype)
    return recipe.for_model(workload.model) if recipe is not None else None


def engine_kernels(workload: Workload) -> Kernels:
    """Return the matmul kernels of the workload's engine, per kind of weights (its data file)."""
    from hwadvisor.engines import engine_for

    return engine_for(workload).kernels


# --- collectives --------------------------------------------------------------------------------


def collective_op_efficiency(op: str) -> float:
    """Share of the all-reduce bus bandwidth an all-gather / reduce-scatter reaches."""
    return C.COLLECTIVE_OP_EFFICIENCY.get(op, 1.0)


def collective_protocol_s(nbytes: float, kind: str) -> float:
    """Mid-size messages' protocol overhead on top of the latency: 0 for tiny, the full for big."""
    size = max(nbytes, 0.0)
    full = C.COLLECTIVE_PROTOCOL_S.get(kind, C.COLLECTIVE_PROTOCOL_S["pcie"])
    return full * size / (size + C.COLLECTIVE_KNEE_BYTES)
