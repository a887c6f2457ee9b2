"""FLOPs, bytes and time per phase as a sum over op groups (prefill, decode forward, train step).

A phase is a list of Ops, each a group of kernels of one kind: the GEMMs of the attention
projections, of the MLP, of the routed experts and of the lm_head; attention; the elementwise
work (norms, rotary, activation, residuals); logits and loss. Each op has FLOPs and bytes and
the rates its kernels reach on this device (perfmodel/efficiency.py), so its time is its own
roofline, max(FLOPs / compute rate, bytes / memory rate) (dequantising kernels: a p-norm);
the phase's GPU time is the sum over ops plus a fixed floor per kernel. Host time and
communication are added by core.py.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from hwadvisor.perfmodel import constants as C
from hwadvisor.perfmodel import efficiency as E
from hwadvisor.perfmodel import formats
from hwadvisor.perfmodel.context import Setup
from hwadvisor.perfmodel.memory import (
    checkpointed_share,
    engine_recipe,
    grad_bytes_per_param,
    kv_bytes_per_token_per_layer,
    offload_kind,
    pure_16bit,
    recurrent_state_bytes,
    score_bytes_per_layer,
    selective_policy,
    window_layers,
    working_weight_dtype,
)
from hwadvisor.workload.params import (
    attention_layer_count,
    attention_params_per_layer,
    busiest_rank_experts,
    expected_experts_touched,
    expert_width,
    matmul_params_per_token,
    mlp_params,
    shared_expert_width,
)

if TYPE_CHECKING:
    from hwadvisor.engines.schema import Defaults, KernelRate, Kernels
    from hwadvisor.models import ModelSpec
    from hwadvisor.perfmodel.resources import Resources

# --- FLOPs ------------------------------------------------------------------------------------


def attention_flops_per_pair(setup: Setup) -> float:
    """FLOPs per (query token, key token, layer): QK^T and PV, 2 x heads x (d_qk + d_v).

    MLA counted in its unabsorbed form (per-head nope+rope keys, v_head_dim values).
    """
    spec = setup.spec
    if spec.attention == "mla" and spec.kv_lora_rank:
        d_qk = (spec.qk_nope_head_dim or spec.head_dim) + (spec.qk_rope_head_dim or 0)
        d_v = spec.v_head_dim or spec.head_dim
    else:
        d_qk = d_v = spec.head_dim
    return 2.0 * spec.num_heads * (d_qk + d_v)


def _causal_sum(start: float, end: float, cap: float | None = None) -> float:
    """Sum over query positions start+1..end of the keys each attends (capped by a window)."""
    if end <= start:
        return 0.0
    if cap is None or cap >= end:
        return (end * (end + 1) - start * (start + 1)) / 2.0
    if cap <= start:
        return (end - start) * cap
    # positions up to cap attend all; beyond, the window
    return (cap * (cap + 1) - start * (start + 1)) / 2.0 + (end - cap) * cap


def attended_pairs(setup: Setup, start: float, end: float) -> float:
    """(query, key) pairs over all layers for one sequence's positions start+1..end.

    Flash kernels skip the masked upper triangle (causal) and windowed-out keys; the math kernel
    computes every row in full (end keys per query) and masks afterwards.
    """
    spec = setup.spec
    swa = window_layers(setup.spec)
    attention = attention_layer_count(spec)
    full = attention - swa
    if setup.options.attention_kernel == "math" and end - start > 1:
        return attention * (end - start) * end
    window = float(spec.sliding_window) if spec.sliding_window else None
    return full * _causal_sum(start, end) + swa * _causal_sum(start, end, window)


def forward_flops(setup: Setup, batch: float, start: float, end: float) -> float:
    """Forward FLOPs of the whole model for `batch` sequences at positions start+1..end."""
    tokens = batch * (end - start)
    matmul = 2.0 * matmul_params_per_token(setup.parts, setup.spec) * tokens
    return matmul + batch * attended_pairs(setup, start, end) * attention_flops_per_pair(setup)


def decode_forward_flops(setup: Setup, batch: float, context: float, tokens: float) -> float:
    """Forward FLOPs of one decode step: `tokens` new tokens per sequence at `context`."""
    spec = setup.spec
    matmul = 2.0 * matmul_params_per_token(setup.parts, spec) * batch * tokens
    return matmul + batch * tokens * _decode_pairs(setup, context) * attention_flops_per_pair(
        setup)


def _decode_pairs(setup: Setup, context: float) -> float:
    """Keys attended by one new token, summed over layers (windowed layers see the window)."""
    spec = setup.spec
    swa = window_layers(spec)
    window = min(context, float(spec.sliding_window or context))
    return (attention_layer_count(spec) - swa) * context + swa * window


def mean_decode_context(setup: Setup) -> float:
    """Average context over the generation: prompt plus half the generated tokens."""
    return setup.workload.prompt_len + setup.workload.gen_len / 2.0


def padded_decode_context(setup: Setup, pad: int) -> float:
    """Average over the generation of the KV positions read when reads round up to `pad`.

    Step i (1..gen) attends prompt + i positions and reads ceil((prompt + i) / pad) x pad of them
    (llama.cpp pads n_kv to 256 so its graph stays the same from step to step).
    """
    prompt, gen = int(setup.workload.prompt_len), int(setup.workload.gen_len)
    if gen <= 0:
        return float(-(-max(prompt, 1) // pad) * pad)
    total, pos, last = 0, prompt + 1, prompt + gen
    while pos <= last:  # one block of steps at a time: a handful of iterations
        block = -(-pos // pad) * pad
        end = min(block, last)
        total += (end - pos + 1) * block
        pos = end + 1
    return total / gen


def prefill_span(setup: Setup) -> tuple[float, float]:
    """(first uncached position, prompt length): the prefix cache serves the first share."""
    prompt = float(setup.workload.prompt_len)
    start = min(prompt - 1.0, prompt * setup.options.prefix_cache_hit)
    return start, prompt


# --- ops --------------------------------------------------------------------------------------


@dataclass(slots=True)
class Op:
    """One group of kernels: its work, the rates they reach, and how memory and compute mix.

    compute_s, memory_s and time_s are computed once, when the op is made.
    """

    name: str
    flops: float
    device_bytes: float
    compute_rate: float  # FLOP/s
    memory_rate: float  # B/s
    p: float | None = None  # None: max(compute, memory); else their p-norm
    host_bytes: float = 0.0  # bytes streamed over PCIe (offloaded weights)
    host_rate: float = 1.0
    compute_s: float = field(init=False, default=0.0)
    memory_s: float = field(init=False, default=0.0)
    time_s: float = field(init=False, default=0.0)

    def __post_init__(self) -> None:
        """Seconds at the compute rate, at the memory rate (PCIe included), and the op's time."""
        compute = self.flops / self.compute_rate if self.compute_rate else 0.0
        memory = self.device_bytes / self.memory_rate if self.memory_rate else 0.0
        if self.host_bytes:
            memory += self.host_bytes / self.host_rate
        self.compute_s, self.memory_s = compute, memory
        if self.p is None:
            self.time_s = compute if compute > memory else memory
        else:
            self.time_s = E.combine(memory, compute, self.p)


@dataclass(slots=True)
class _Totals:
    flops: float = 0.0
    device_bytes: float = 0.0
    host_bytes: float = 0.0
    compute_s: float = 0.0
    memory_s: float = 0.0
    busy_s: float = 0.0
    compute_bound_s: float = 0.0
    memory_bound_s: float = 0.0


@dataclass
class Phase:
    """The ops of one phase, each counted `times` (micro-batches, chunks), and its kernels."""

    name: str
    ops: list[tuple[Op, float]] = field(default_factory=list)
    kernels: float = 0.0
    host_kernels: float = 0.0  # kernels the host launches one by one (eager)
    fixed_s: float = 0.0  # GPU time of kernels beyond their work and floor (counted as floors)
    _totals: _Totals | None = field(default=None, repr=False)

    def add(self, op: Op, times: float = 1.0) -> None:
        """Add an op counted `times` (nothing when it does no work)."""
        if times > 0 and (op.flops > 0 or op.device_bytes > 0 or op.host_bytes > 0):
            self.ops.append((op, times))
            self._totals = None

    def extend(self, other: Phase, times: float = 1.0) -> None:
        """Add another phase's ops and kernels, `times` over."""
        for op, n in other.ops:
            self.ops.append((op, n * times))
        self.kernels += other.kernels * times
        self.host_kernels += other.host_kernels * times
        self.fixed_s += other.fixed_s * times
        self._totals = None

    def totals(self) -> _Totals:
        """Return the sums over the ops, computed once per change."""
        if self._totals is None:
            t = _Totals()
            for op, n in self.ops:
                t.flops += op.flops * n
                t.device_bytes += op.device_bytes * n
                t.host_bytes += op.host_bytes * n
                t.compute_s += op.compute_s * n
                t.memory_s += op.memory_s * n
                t.busy_s += op.time_s * n
                if op.compute_s >= op.memory_s:
                    t.compute_bound_s += op.time_s * n
                else:
                    t.memory_bound_s += op.time_s * n
            self._totals = t
        return self._totals

    @property
    def flops(self) -> float:
        """FLOPs of the phase."""
        return self.totals().flops

    @property
    def device_bytes(self) -> float:
        """Device-memory bytes of the phase."""
        return self.totals().device_bytes

    @property
    def host_bytes(self) -> float:
        """Bytes over PCIe."""
        return self.totals().host_bytes

    @property
    def compute_s(self) -> float:
        """Sum over ops of their compute terms."""
        return self.totals().compute_s

    @property
    def memory_s(self) -> float:
        """Sum over ops of their memory terms."""
        return self.totals().memory_s

    @property
    def busy_s(self) -> float:
        """Sum over ops of their roofline times: the GPU's work without floors."""
        return self.totals().busy_s

    def bound_split(self) -> tuple[float, float]:
        """Return (time of compute-bound ops, time of memory-bound ops)."""
        t = self.totals()
        return t.compute_bound_s, t.memory_bound_s

    def top(self, count: int = 3) -> list[tuple[str, float]]:
        """Return the ops that take the most time: (name, seconds), merged by name."""
        merged: dict[str, float] = {}
        for op, n in self.ops:
            merged[op.name] = merged.get(op.name, 0.0) + op.time_s * n
        return sorted(merged.items(), key=lambda kv: -kv[1])[:count]


# --- what one forward is made of --------------------------------------------------------------


@dataclass
class _Rates:
    """The rates and choices every op of one estimate shares."""

    stream: float  # B/s
    theoretical: float  # B/s, the datasheet (or measured) figure: no kernel streams faster
    half_dim: float  # the GEMM shape factor's half point
    gemm: float  # FLOP/s of a large GEMM in the compute dtype
    act_gemm: float  # FLOP/s of a large 16-bit GEMM
    peak16: float  # datasheet 16-bit peak, FLOP/s
    vector: float  # FLOP/s of matrix-vector kernels on the vector units
    vector_rows: int  # up to this many rows the kernel is such a kernel (0: the faster path)
    width_half: float  # the kernel's half point over the weight's dims (0: only the shape factor)
    vector_width_half: float  # the same for its few-row (vector) matmuls
    width_rows: float  # rows at which width_half holds; fewer: it shrinks (0: every M)
    rows_half: float  # the kernel's own half point over the rows (0: the family's)
    gate_dim: float  # weights with a dim below this leave the kernel's fast GEMM (0: none do)
    below_gate: float  # the share of the rate such weights' many-row matmuls reach
    gate_rows: float  # from this many rows those weights run the generic GEMM
    kernel: str  # weight kernel family
    dequant: float | None  # the kernel's compute share of peak16; None: cuBLAS-class GEMMs
    dequant_peak: float  # FLOP/s the dequant share is of: peak16, or a CPU's int8 peak
    weight_only: bool  # weights dequantised to 16 bits in the kernel (int4, GGUF, MLX, NF4)
    gemv: float  # weight-streaming share of the stream bandwidth
    act_bytes: float  # bytes per activation element
    offload: float  # share of the weights streamed from host RAM
    flat: bool  # the kernel's rate ignores the GEMM shape factor
    overlap_p: float | None  # how its memory and compute terms combine (None: max)
    attention_rate: float  # FLOP/s of the attention kernel
    kv_efficiency: float
    backend: str
    elementwise: str
    host_rate: float  # B/s over PCIe


def _weight_only(setup: Setup) -> dict[str, str]:
    """Return the formats the engine runs weight-only where the GPU lacks their units."""
    from hwadvisor.engines import engine_for

    return engine_for(setup.workload).weight_only


def rates(setup: Setup) -> _Rates:
    """Return the rates for this setup (cached on it: one estimate builds several phases)."""
    cached = setup.__dict__.get("_rates")
    if isinstance(cached, _Rates):
        return cached
    res, opts, wl = setup.res, setup.options, setup.workload
    family = res.family
    # An on-device GPU path names the GPU its engines' kernel rates are keyed by (adreno-750):
    # llama.cpp's OpenCL kernels on Adreno are not those of a phone's CPU.
    kfamily = res.kernel_family or family
    weights = working_weight_dtype(setup)
    kernels = E.engine_kernels(wl)
    kernel = E.quant_kernel(weights, kernels, kfamily, opts.quant_kernel)
    if weights in _weight_only(setup) and res.compute_dtype != weights and \
            opts.quant_kernel is None:
        # FP8 weights on a GPU without FP8 units: the engine's weight-only path (vLLM's FP8
        # Marlin streams 8-bit weights through the Marlin GEMM, dequantised to 16 bits)
        kernel = "marlin"
    engine = E.engine_time(wl, family)
    backend = engine.attention
    if opts.attention_kernel == "math":
        backend = "math"
    peak16 = res.act_peak_tflops * 1e12
    if backend == "math":
        attention = _unfused_attention_rate(res, kernels, kfamily)
    elif backend in res.attention_tflops:
        attention = res.attention_tflops[backend] * 1e12
    else:
        attention = peak16 * E.attention_fraction(backend, family)
    if res.host_transfer_gbps:
        host = res.host_transfer_gbps * C.GB
    else:
        from hwadvisor.perfmodel.comm import pcie_gbps

        host = pcie_gbps(setup.device)[0] * C.GB
    gate = _gate(kernel, kfamily, kernels.rates)
    # Quantised weights on a CPU whose engine multiplies them in integers (llama.cpp's
    # vec_dot_type Q8_0 / Q8_K): their shares are of the CPU's int8 dot-product peak.
    int8 = res.device_class == "cpu" and res.int8_tflops > 0.0 and \
        formats.weight_format(weights).family == "gguf" and \
        _engine_defaults(setup).cpu_quant_matmul == "int8"
    quant_peak = res.int8_tflops * 1e12 if int8 else peak16
    vector_peak = quant_peak if int8 else res.vector_tflops * 1e12
    # The engine's CUDA GEMMs where they run off the 16-bit FP32-accumulate rate (llama.cpp's
    # FP16-accumulate cuBLAS GEMMs and int8 MMQ on GeForce cards)
    tensor = cuda_tensor_scale(setup, weights)
    quant_peak *= tensor
    out = _Rates(
        stream=res.stream_gbps * C.GB,
        theoretical=max(res.bandwidth_gbps, res.stream_gbps) * C.GB,
        half_dim=E.gemm_half_dim(family),
        gemm=res.gemm_tflops * 1e12 * tensor,
        act_gemm=res.act_gemm_tflops * 1e12,
        peak16=peak16,
        vector=vector_peak * E.vector_efficiency(kernel, kfamily, kernels.rates),
        vector_rows=int(E.release_figure("vector_rows", kernel, kfamily, kernels.rates) or 0),
        width_half=E.release_figure("width_half", kernel, kfamily, kernels.rates) or 0.0,
        vector_width_half=E.release_figure("vector_width_half", kernel, kfamily,
                                           kernels.rates) or 0.0,
        width_rows=E.release_figure("width_rows", kernel, kfamily, kernels.rates) or 0.0,
        rows_half=E.release_figure("rows_half", kernel, kfamily, kernels.rates) or 0.0,
        gate_dim=gate[0], below_gate=gate[1], gate_rows=gate[2],
        kernel=kernel,
        dequant=_dequant_share(res, kernel, kfamily, kernels.rates),
        dequant_peak=quant_peak,
        weight_only=formats.weight_format(weights).kind == "weight-only"
        and not res.compute_path,
        gemv=E.gemv_efficiency(kernel, kfamily, kernels.rates),
        act_bytes=setup.act_bytes,
        offload=setup.offload_fraction,
        flat=E.kernel_flat_rate(kernel) and not res.compute_path,
        overlap_p=E.kernel_overlap_p(kernel, kfamily),
        attention_rate=attention,
        kv_efficiency=E.kv_read_efficiency(backend, engine, float(setup.spec.head_dim)),
        backend=backend,
        elementwise="fused" if opts.compiled else engine.elementwise,
        host_rate=host,
    )
    setup.__dict__["_rates"] = out
    return out


def cuda_tensor_scale(setup: Setup, weights: str) -> float:
    """Return the engine's CUDA matmul rate over the 16-bit one the resources priced (1: same).

    The 16-bit peaks the profiles list are the FP32-accumulate rates PyTorch runs at. An engine
    whose cuBLAS GEMMs of F16 weights (and of quantised ones dequantised to F16) accumulate in
    FP16 (llama.cpp: CUBLAS_COMPUTE_16F) runs at peak_tflops.fp16_acc16 where the profile states
    it (GeForce cards: twice fp16), except on the compute capabilities it keeps FP32 output on
    (Volta). Its MMQ kernels (quantised weights, from Turing on) run on int8 tensor cores, at
    a share of half the int8 rate: on every NVIDIA card from Turing on that is the
    FP16-accumulate rate (RTX 4090 int8 660.6 TOPS, FP16 330.3 with FP16 accumulate; L40S 733
    and 362; A100 624 and 312), so the shares fitted on either path stay comparable. BF16
    weights multiply with CUBLAS_COMPUTE_32F: unchanged.
    """
    res, device = setup.res, setup.device
    defaults = _engine_defaults(setup)
    if defaults.cuda_gemm_accumulate != "fp16" or res.compute_path or device.vendor != "nvidia" \
            or res.device_class == "cpu":
        return 1.0
    peaks = device.peak_tflops
    fp16 = float(peaks.get("fp16") or peaks.get("bf16") or 0.0)
    if fp16 <= 0.0:
        return 1.0
    cc = device.compute_capability
    fmt = formats.weight_format(weights)
    if fmt.family == "gguf" and defaults.cuda_quant_gemm == "mmq" and _cc_at_least(cc, 7.5):
        int8 = float(peaks.get("int8") or 0.0)
        return max(1.0, int8 / 2.0 / fp16) if int8 > 0.0 else 1.0
    if weights != "fp16" and fmt.family != "gguf":
        return 1.0
    if cc is not None and cc in defaults.cuda_f32_output:
        return 1.0
    return max(1.0, float(peaks.get("fp16_acc16") or 0.0) / fp16)


def _cc_at_least(cc: str | None, floor: float) -> bool:
    """Tell whether an NVIDIA compute capability ('8.9') is at least floor; unknown: no."""
    try:
        return cc is not None and float(cc) >= floor
    except ValueError:
        return False


def _engine_defaults(setup: Setup) -> Defaults:
    """Return the workload's engine defaults (its data file's [defaults])."""
    from hwadvisor.engines import engine_for

    return engine_for(setup.workload).defaults


def _gate(kernel: str, kfamily: str,
          release: Mapping[str, KernelRate]) -> tuple[float, float, float]:
    """Return the kernel's gate: (gate_dim, below_gate, gate_rows); gate_dim 0: no gate.

    Only where the release states gate_dim and below_gate for this kernel itself (no K-quant
    inheritance: the generic GEMMs of other formats are other kernels, not fitted). gate_rows
    defaults to 2: every matmul of more than one row.
    """
    dim = E.release_figure("gate_dim", kernel, kfamily, release, inherit=False)
    share = E.release_figure("below_gate", kernel, kfamily, release, inherit=False)
    if not dim or not share:
        return 0.0, 1.0, 2.0
    rows = E.release_figure("gate_rows", kernel, kfamily, release, inherit=False)
    return dim, share, rows or 2.0


def _unfused_attention_rate(res: Resources, kernels: Kernels, kfamily: str) -> float:
    """Return the FLOP/s of attention computed without a fused kernel (scores materialised).

    Generally a batched GEMM at moderate shapes: half the 16-bit GEMM rate. An on-device GPU
    path whose engine states the rate of its generic F16 batched kernel (llama.cpp's OpenCL
    backend on Adreno, which multiplies K x Q and scores x V row by row) runs at that share of
    the path's vector rate.
    """
    if res.kernel_family is not None:
        f16 = E.quant_kernel("fp16", kernels, res.kernel_family, None)
        share = E.release_figure("unfused_attention", f16, kfamily, kernels.rates)
        if share is not None:
            return res.vector_tflops * 1e12 * share
    return res.act_gemm_tflops * 1e12 * 0.5  # bmm at moderate shapes


def _dequant_share(res: Resources, kernel: str, kfamily: str,
                   release: Mapping[str, KernelRate]) -> float | None:
    """Return the kernel's compute share of the 16-bit rate; None: cuBLAS-class GEMMs.

    An on-device path's rate is the quantised kernel's own (XNNPACK's int8 dot, the HTP's
    w4a16): no dequantise share on top, unless the engine's release states one for the path's
    GPU (llama.cpp's OpenCL F16 kernels on Adreno against its Q4_0 kernels, which the path's
    rate was measured with).
    """
    if res.compute_path:
        if res.kernel_family is None:
            return None
        return E.release_figure("compute", kernel, kfamily, release)
    return E.kernel_compute_fraction(kernel, kfamily, release)


def _gemm(setup: Setup, r: _Rates, name: str, m: float, params: float, n: float, k: float,
          bits: float, copies: float = 0.0, stream_share: float = 1.0,
          gated: float | None = None) -> Op:
    """Build a GEMM of M rows against `params` weights of shape (N, K), `bits` per weight.

    copies: extra passes over a 16-bit copy of the weights (a dequantise-then-GEMM kernel).
    stream_share: the share of the streaming rate the kernel keeps (grouped MoE tiles, below).
    gated: the share of the weights with a dim below the kernel's gate (r.gate_dim) where the
    op stands for several matmuls (Q, K and V); None: all or none, by min(N, K).
    """
    act = r.act_bytes
    weight_bytes = params * bits / 8.0
    host = weight_bytes * r.offload
    nbytes = weight_bytes - host + m * (n + k) * act + copies * params
    flops = 2.0 * m * params
    if r.flat:
        compute = r.dequant_peak * (r.dequant or 1.0)
    else:
        width_half = E.width_half_at(r.width_half, m, r.width_rows)
        shape = (E.gemm_shape_factor(m, n, k, r.half_dim) * E.width_factor(n, k, width_half)
                 * E.rows_factor(m, r.half_dim, r.rows_half))
        if r.dequant is not None:
            compute = r.dequant_peak * r.dequant * shape
        else:
            compute = (r.act_gemm if r.weight_only else r.gemm) * shape
        # llama.cpp's mul_mat_vec kernels serve up to 8 rows without tensor cores
        vector = r.vector * E.width_factor(n, k, r.vector_width_half)
        compute = vector if m <= r.vector_rows else max(compute, vector)
    compute *= _gate_factor(r, m, n, k, gated)
    memory = min(r.stream * r.gemv, r.theoretical) * stream_share
    return Op(name, flops, nbytes, compute, memory, r.overlap_p, host, r.host_rate)


def _gate_factor(r: _Rates, m: float, n: float, k: float, gated: float | None) -> float:
    """Return the share of the compute rate a GEMM keeps when some of its weights are gated.

    A weight with a dim below the kernel's gate runs the engine's generic GEMM at below_gate of
    the rate once it has gate_rows rows or more (llama.cpp's OpenCL backend on an Adreno 740:
    use_adreno_kernels); the rest of the op's weights keep the rate. Fewer rows: unchanged.
    """
    if not r.gate_dim or m < r.gate_rows:
        return 1.0
    share = gated if gated is not None else float(min(n, k) < r.gate_dim)
    if share <= 0.0:
        return 1.0
    return 1.0 / (1.0 - share + share / r.below_gate)


def _qkv_gated(r: _Rates, q_n: float, kv_n: float, h: float) -> float | None:
    """Share of the Q, K and V weights (one op here, three matmuls in the engine) below the gate."""
    if not r.gate_dim or q_n + 2.0 * kv_n <= 0.0:
        return None
    below = sum(n for n in (q_n, kv_n, kv_n) if min(n, h) < r.gate_dim)
    return below / (q_n + 2.0 * kv_n)


def op_sac_recomputed_share(spec: ModelSpec) -> float:
    """Share of a dense layer's matmul FLOPs per-op SAC recomputes: wk, wo and w3 of all seven.

    torchtitan 0.2.2 (distributed/activation_checkpoint.py _apply_op_sac) counts a block's mms
    from 1 and keeps the odd ones (wq 1, wk 2, wv 3, wo 4, w1 5, w3 6, w2 7): 2, 4 and 6 run
    again in the backward (memory.op_sac_bytes_per_token counts what is kept).
    """
    h = float(spec.hidden_size)
    q = float(spec.num_heads * spec.head_dim)
    kv = float(spec.num_kv_heads * spec.head_dim)
    inter = float(spec.intermediate_size)
    mlp = 3.0 * h * inter if spec.gated_mlp else 2.0 * h * inter
    total = h * (q + 2.0 * kv) + q * h + mlp
    again = h * kv + q * h + (h * inter if spec.gated_mlp else 0.0)
    return again / total if total else 0.0


def _layer_bits(setup: Setup) -> float:
    dtype = working_weight_dtype(setup)
    fmt = formats.weight_format(dtype, engine_recipe(setup, dtype))
    return formats.layer_bits(fmt, setup.parts, setup.spec)


def _copies(r: _Rates, m: float) -> float:
    """Extra 16-bit weight passes of a dequantise-then-GEMM kernel (bitsandbytes above M = 1)."""
    return C.DEQUANT_COPY_BYTES_PER_WEIGHT if r.kernel == "bitsandbytes" and m > 1 else 0.0


def layer_gemms(setup: Setup, r: _Rates, tokens: float, layers: float,
                frozen_dequant: bool = False) -> list[tuple[Op, float]]:
    """Return the GEMMs of `layers` decoder layers with `tokens` rows, per GPU (TP shards N)."""
    spec, tp = setup.spec, setup.layout.tp
    h = float(spec.hidden_size)
    bits = _layer_bits(setup)
    copies = C.DEQUANT_COPY_BYTES_PER_WEIGHT if frozen_dequant else _copies(r, tokens)
    out: list[tuple[Op, float]] = []
    # Data-parallel attention: each GPU projects its own share of the tokens with the whole
    # (replicated) attention weights; TP attention: all tokens with a 1/tp slice.
    atp, local = setup.layout.attn_tp, tokens / setup.layout.attn_dp
    attn = attention_params_per_layer(spec) / atp
    qkv_n = (spec.num_heads + 2 * spec.num_kv_heads) * spec.head_dim / atp
    share_qkv = qkv_n / (qkv_n + h / atp) if qkv_n else 0.5
    # llama.cpp multiplies Q, K and V apart: narrow K/V weights (2 KV heads) may miss its gate
    gated = _qkv_gated(r, spec.num_heads * spec.head_dim / atp,
                       spec.num_kv_heads * spec.head_dim / atp, h)
    out.append((_gemm(setup, r, "attention projections", local, attn * share_qkv, qkv_n, h,
                      bits, copies, gated=gated), layers))
    out.append((_gemm(setup, r, "attention projections", local, attn * (1 - share_qkv), h,
                      spec.num_heads * spec.head_dim / atp, bits, copies), layers))
    moe_layers = min(float(setup.parts.moe_layers), float(spec.num_layers))
    dense_layers = layers * (1.0 - moe_layers / spec.num_layers)
    moe_here = layers * moe_layers / spec.num_layers
    inter = spec.intermediate_size / tp
    dense = mlp_params(spec, spec.intermediate_size) / tp
    if dense_layers > 0:
        out.extend(_mlp(setup, r, "MLP", tokens, dense, inter, h, bits, copies, dense_layers))
    if moe_here > 0 and spec.num_experts:
        out.extend(_moe(setup, r, tokens, h, bits, copies, moe_here))
    return out


def _mlp(setup: Setup, r: _Rates, name: str, tokens: float, params: float, inter: float,
         h: float, bits: float, copies: float, layers: float,
         grouped: bool = False) -> list[tuple[Op, float]]:
    """Up (gate + up) and down GEMMs of an MLP of `params` weights and width `inter`.

    grouped: the GEMMs of a grouped MoE kernel, whose tiles stream a K-deep column of one
    expert's slice each (their streaming share: grouped_stream_share).
    """
    up_share = 2.0 / 3.0 if setup.spec.gated_mlp else 0.5
    up_n = inter * (2.0 if setup.spec.gated_mlp else 1.0)
    up_keep = grouped_stream_share(h, bits) if grouped else 1.0
    down_keep = grouped_stream_share(inter, bits) if grouped else 1.0
    return [(_gemm(setup, r, name, tokens, params * up_share, up_n, h, bits, copies, up_keep),
             layers),
            (_gemm(setup, r, name, tokens, params * (1 - up_share), h, inter, bits, copies,
                   down_keep), layers)]


def grouped_stream_share(depth: float, bits: float) -> float:
    """Share of the streaming rate a grouped MoE GEMM keeps when each tile reads `depth` weights.

    Grouped MoE kernels (vLLM/SGLang fused_moe, DeepGEMM's grouped GEMMs) give each tile one
    expert's (BLOCK_N x K) weights and do not split K, so a tile pays one memory latency before
    its stream starts: bytes / (bytes + MOE_TILE_LATENCY_BYTES) per column. Tensor parallelism
    cuts the down projection's K to moe_intermediate / tp (DeepSeek-V3 on 8 GPUs: 256), where
    the latency is a third of the tile's time; expert parallelism keeps K whole.
    """
    column = depth * bits / 8.0
    return column / (column + C.MOE_TILE_LATENCY_BYTES)


def _moe(setup: Setup, r: _Rates, tokens: float, h: float, bits: float, copies: float,
         layers: float) -> list[tuple[Op, float]]:
    """Routed experts (only those the tokens touch), shared experts and the router.

    Tensor parallelism gives every GPU a 1/tp slice of every touched expert; expert parallelism
    gives each GPU whole experts, and the step waits for the GPU the most touched experts live
    on (busiest_rank_experts). Shared experts are replicated under data-parallel attention
    (each GPU runs its own tokens through them) and sliced otherwise.
    """
    spec, layout = setup.spec, setup.layout
    tp = layout.tp
    touched = max(1e-9, expected_experts_touched(spec, tokens))
    k = min(spec.experts_per_token, spec.num_experts)
    rows = tokens * k / touched  # tokens per touched expert
    here: float = touched
    per_expert: float = setup.parts.per_expert / tp
    width: float = expert_width(spec) / tp
    if layout.ep and tp > 1 and not setup.training:
        # serving EP spreads the experts over the TP group
        here = busiest_rank_experts(spec, tokens, tp)
        per_expert, width = float(setup.parts.per_expert), float(expert_width(spec))
    elif setup.training and layout.ep_degree > 1:
        # training EP: the GPU runs its E / ep experts whole on the tokens the EP group routes
        # to them (its own share of the TP group's tokens x ep), more rows per expert GEMM
        here, rows = training_ep_experts(setup, tokens)
        per_expert, width = float(setup.parts.per_expert), float(expert_width(spec))
    routed, routed_bits = r, bits
    if setup.training and setup.workload.weights_dtype == "fp8" and \
            not E.engine_time(setup.workload, setup.res.family).fp8_grouped_experts:
        # the engine's FP8 training converts linear layers only: the experts stay 16-bit
        routed = _Rates(**{**r.__dict__, "gemm": r.act_gemm, "kernel": "cublas",
                           "gemv": E.gemv_efficiency("cublas", setup.res.family)})
        routed_bits = 16.0
    out = [(op, n * here) for op, n in _mlp(setup, routed, "routed experts", rows, per_expert,
                                            width, h, routed_bits, copies, layers,
                                            grouped=True)]
    shared = shared_expert_width(spec)
    if shared:
        share_tp, local = (1, tokens / layout.attn_dp) if layout.attn_dp > 1 else (tp, tokens)
        params = mlp_params(spec, shared) / share_tp
        out.extend(_mlp(setup, r, "shared experts", local, params, shared / share_tp, h, bits,
                        copies, layers))
    router = h * spec.num_experts
    out.append((_gemm(setup, r, "router", tokens, router, spec.num_experts, h, 16.0), layers))
    return out


def training_ep_experts(setup: Setup, tokens: float) -> tuple[float, float]:
    """Training EP: (experts the busiest GPU runs, tokens per expert) for `tokens` per TP group.

    Each GPU routes its 1/tp of the TP group's tokens (torchtitan splits them over the TP
    ranks when expert_tensor_parallel_degree is 1); the EP group sends ep times that to E / ep
    experts per GPU. Uniform routing: the busiest GPU's touched experts (busiest_rank_experts).
    """
    spec, layout = setup.spec, setup.layout
    group = tokens / layout.tp * layout.ep_degree
    touched = max(1e-9, expected_experts_touched(spec, group))
    k = min(spec.experts_per_token, spec.num_experts)
    return busiest_rank_experts(spec, group, layout.ep_degree), group * k / touched


def elementwise_op(setup: Setup, r: _Rates, tokens: float, layers: float,
                   factor: float = 1.0) -> Op:
    """Norms, rotary, activation and residual traffic of `layers` layers, `tokens` tokens."""
    spec, tp = setup.spec, setup.layout.tp
    kv = spec.num_kv_heads * spec.head_dim / tp
    per_token = E.elementwise_bytes_per_token(r.elementwise, spec.hidden_size, kv,
                                              spec.intermediate_size / tp)
    scale = setup.act_bytes / 2.0
    return Op("elementwise", 0.0, per_token * tokens * layers * factor * scale, 1.0, r.stream)


def attention_op(setup: Setup, r: _Rates, batch: float, start: float, end: float,
                 layers_share: float, chunk: float | None = None) -> Op:
    """Attention of `batch` sequences over positions start+1..end (prefill or training forward).

    Flash-type kernels read Q, K, V and write O once (K/V again per query block of a chunked
    prefill, whose earlier chunks' KV is read back); math writes and reads the score matrix.
    """
    spec, tp = setup.spec, setup.layout.attn_tp
    batch = batch / setup.layout.attn_dp  # data-parallel attention: this GPU's sequences
    new = end - start
    flops = batch * attended_pairs(setup, start, end) * attention_flops_per_pair(setup) / tp
    kv_token = kv_bytes_per_token_per_layer(spec, setup.workload.kv_dtype, tp)
    q_token = 2.0 * spec.num_heads * spec.head_dim / tp * setup.act_bytes  # Q in, O out
    layers = attention_layer_count(spec)
    nbytes = batch * layers * (new * (q_token + 2.0 * kv_token) + start * kv_token)
    if chunk and chunk < new:
        chunks = math.ceil(new / chunk)
        nbytes += batch * layers * kv_token * (chunks - 1) * (start + new / 2.0)
    if r.backend == "math":
        scores = layers * score_bytes_per_layer(setup, batch, new, end)
        nbytes += scores * C.SCORE_PASSES_FORWARD / 2.0
    return Op("attention", flops * layers_share, nbytes * layers_share, r.attention_rate,
              min(r.stream * r.kv_efficiency, r.theoretical))


def decode_attention_op(setup: Setup, r: _Rates, batch: float, context: float,
                        tokens: float) -> Op:
    """One decode step's attention: read the KV cache of `context` tokens, write the new KV.

    Under TP every GPU reads its heads' share of every sequence's cache (an MLA latent is not
    split by heads: every GPU reads all of it); under data-parallel attention each GPU reads
    whole caches of its own 1/attn_dp of the sequences.
    """
    spec, tp = setup.spec, setup.layout.attn_tp
    batch = batch / setup.layout.attn_dp
    flops = batch * tokens * _decode_pairs(setup, context) * attention_flops_per_pair(setup) / tp
    kv_token = kv_bytes_per_token_per_layer(spec, setup.workload.kv_dtype, tp)
    swa = window_layers(spec)
    engine = E.engine_time(setup.workload, setup.res.family)
    pad = engine.kv_pad_unfused if r.backend == "math" and engine.kv_pad_unfused else \
        engine.kv_pad
    if pad:
        context = padded_decode_context(setup, pad)
    window = min(context, float(spec.sliding_window or context))
    attention = attention_layer_count(spec)
    # Recurrent layers read and write their constant state once per step (Mamba, delta-net).
    state = 2.0 * recurrent_state_bytes(spec, batch, tp)
    cache = batch * kv_token * ((attention - swa) * context + swa * window)
    extra = engine.kv_passes
    if spec.num_kv_heads >= spec.num_heads or spec.attention == "mla":
        extra = 0.0  # no GQA heads to expand
    if not setup.options.cuda_graphs:
        extra += engine.kv_passes_eager
    if r.backend == "math" and engine.kv_passes == 0.0:
        # A materialised path broadcasts each KV head to its query heads: K and V are read
        # once per query head of the group (llama.cpp without flash attention, torch's math).
        extra += max(1.0, spec.num_heads / spec.num_kv_heads) - 1.0
    nbytes = cache * (1.0 + extra) + batch * tokens * kv_token * attention + state
    return Op("attention", flops, nbytes, r.attention_rate,
              min(r.stream * r.kv_efficiency, r.theoretical))


def _head_rates(setup: Setup, r: _Rates, head_bits: float) -> _Rates:
    """Return the rates of the output matmul.

    A legacy-quant GGUF file (Q4_0) keeps its classifier in Q6_K (llama-quantize), which
    llama.cpp runs on its K-quant kernels, not the layers' ones.
    """
    if r.kernel != "llamacpp" or head_bits != formats.Q6_K:
        return r
    kernels = E.engine_kernels(setup.workload)
    kfamily = setup.res.kernel_family or setup.res.family
    gemv = E.gemv_efficiency("llamacpp-k", kfamily, kernels.rates)
    # the K-quant kernel's GEMM has no gate of its own stated (_gate): the layers' does not apply
    return _Rates(**{**r.__dict__, "gemv": gemv, "kernel": "llamacpp-k", "gate_dim": 0.0})


def _head_ops(setup: Setup, r: _Rates, tokens: float, logit_rows: float,
              training: bool) -> list[tuple[Op, float]]:
    """Embedding lookup, final norm, lm_head and the logits' post-processing or loss."""
    spec, tp = setup.spec, setup.layout.tp
    h = float(spec.hidden_size)
    act = setup.act_bytes
    dtype = working_weight_dtype(setup)
    fmt = formats.weight_format(dtype, engine_recipe(setup, dtype))
    head_params = (setup.parts.lm_head or setup.parts.embedding) / tp
    head_bits = formats.output_bits(fmt, spec) if setup.parts.lm_head or fmt.output_untied \
        else formats.embedding_bits(fmt, setup.parts, spec)
    norm = C.FINAL_NORM_BYTES[r.elementwise] * act / 2.0
    out = [(Op("embedding and norm", 0.0, tokens * h * (2.0 * act + norm), 1.0, r.stream), 1.0)]
    head = _gemm(setup, _head_rates(setup, r, head_bits), "lm_head", logit_rows, head_params,
                 spec.vocab_size / tp, h, head_bits)
    if r.weight_only and fmt.recipe is None and setup.workload.weights_dtype not in \
            formats.GGUF_FORMATS + formats.MLX_FORMATS:
        # AWQ/GPTQ/NF4 keep the lm_head in 16 bits: a dense GEMM (an engine recipe says otherwise).
        dense = _Rates(**{**r.__dict__, "dequant": None, "weight_only": False, "gemv":
                          E.gemv_efficiency("cublas", setup.res.family), "kernel": "cublas",
                          "gemm": r.act_gemm, "flat": False, "overlap_p": None})
        head = _gemm(setup, dense, "lm_head", logit_rows, head_params, spec.vocab_size / tp, h,
                     16.0)
    out.append((head, 1.0))
    per_logit = C.LOGIT_TRAFFIC_BYTES["train" if training else "infer"]
    out.append((Op("logits", 0.0, logit_rows * spec.vocab_size / tp * per_logit, 1.0,
                   r.stream), 1.0))
    return out


def kernels_per_forward(setup: Setup, tokens: float) -> float:
    """Kernels one forward launches: per layer from the engine (or the option), MoE, outside."""
    opts, spec = setup.options, setup.spec
    engine = E.engine_time(setup.workload, setup.res.family)
    if opts.kernels_per_layer is not None:
        per_layer = opts.kernels_per_layer
    elif engine.kernels_per_layer is not None and not opts.compiled:
        per_layer = engine.kernels_per_layer  # the release's backend fuses ops (its data file)
    else:
        per_layer = C.KERNELS_PER_LAYER[engine.fused_kernels if opts.compiled else
                                        engine.kernels]
    if _deepseek_block(setup) and engine.deepseek_attention_kernels is not None \
            and opts.kernels_per_layer is None:
        return _deepseek_kernels(setup, engine.deepseek_attention_kernels,
                                 engine.deepseek_moe_kernels)
    moe = 0.0
    if setup.parts.moe_layers and spec.num_experts:
        if engine.kernels == "eager" and not opts.compiled:
            touched = expected_experts_touched(spec, tokens)
            if setup.training and setup.layout.ep_degree > 1:
                touched = training_ep_experts(setup, tokens)[0]
            moe = C.MOE_KERNELS_EAGER_PER_EXPERT * touched
        else:
            moe = engine.moe_kernels
        if _deepseek_block(setup):
            moe += C.DEEPSEEK_MOE_EXTRA_KERNELS
    if _deepseek_block(setup):
        per_layer += C.MLA_EXTRA_KERNELS
    layers = spec.num_layers * _layer_share(setup)
    return layers * per_layer + setup.parts.moe_layers * _layer_share(setup) * moe + \
        C.KERNELS_OUTSIDE_LAYERS


def _deepseek_kernels(setup: Setup, attention: float, moe_block: float | None) -> float:
    """Kernels of a DeepSeek forward where the release states its layers' counts.

    A MoE layer is the attention half and the MoE block (its MLP is the block); a dense layer
    (DeepSeek-V3's first three) the attention half and a plain MLP.
    """
    engine = E.engine_time(setup.workload, setup.res.family)
    if moe_block is None:
        moe_block = engine.moe_kernels + C.DEEPSEEK_MOE_EXTRA_KERNELS
    moe_layers = min(float(setup.parts.moe_layers), float(setup.spec.num_layers))
    dense_layers = setup.spec.num_layers - moe_layers
    per_forward = (dense_layers * (attention + C.DEEPSEEK_DENSE_MLP_KERNELS)
                   + moe_layers * (attention + moe_block))
    return per_forward * _layer_share(setup) + C.KERNELS_OUTSIDE_LAYERS


def _deepseek_block(setup: Setup) -> bool:
    """Whether the layers are DeepSeek-V2/V3's (MLA attention): their kernel counts are larger."""
    return setup.spec.attention == "mla" and bool(setup.spec.kv_lora_rank)


def _layer_share(setup: Setup) -> float:
    """Share of the layers one GPU runs: a pipeline stage's in training; all in inference.

    Inference through pipeline stages (llama.cpp's layer split) runs the stages one after the
    other for each token, so the whole model's time is the sum over the GPUs.
    """
    return 1.0 / setup.layout.pp if setup.training else 1.0


def forward_phase(setup: Setup, name: str, batch: float, start: float, end: float,
                  logits_all: bool, training: bool = False, chunk: float | None = None,
                  frozen_dequant: bool = False) -> Phase:
    """One forward of `batch` sequences over positions start+1..end, per GPU.

    chunk: tokens per forward of a chunked prefill (the GEMMs run ceil(tokens / chunk) times at
    M = chunk; attention reads the earlier chunks' KV back).
    """
    r = rates(setup)
    spec = setup.spec
    share = _layer_share(setup)
    tokens = batch * (end - start) / setup.layout.cp
    phase = Phase(name)
    layers = spec.num_layers * share
    if chunk and chunk < tokens:
        full, rest = divmod(tokens, chunk)
        runs = [(chunk, full)] + ([(rest, 1.0)] if rest else [])
    else:
        runs = [(tokens, 1.0)]
    for m, count in runs:
        for op, n in layer_gemms(setup, r, m, layers, frozen_dequant):
            phase.add(op, n * count)
        phase.kernels += kernels_per_forward(setup, m) * count
    phase.add(attention_op(setup, r, batch / setup.layout.cp, start, end, share, chunk))
    phase.add(elementwise_op(setup, r, tokens, layers))
    rows = tokens if logits_all else batch
    if share >= 1.0 or setup.layout.pp == 1:
        for op, n in _head_ops(setup, r, tokens, rows, training):
            phase.add(op, n)
    else:  # the last stage's head, spread over the stages for a per-GPU average
        for op, n in _head_ops(setup, r, tokens, rows, training):
            phase.add(op, n * share)
    phase.host_kernels = phase.kernels
    return phase


def prefill_phase(setup: Setup) -> Phase:
    """Prefill of the uncached prompt share for the whole batch (in the engine's chunks)."""
    start, end = prefill_span(setup)
    chunk = setup.options.prefill_chunk_tokens
    return forward_phase(setup, "prefill", float(setup.batch), start, end,
                         setup.options.logits_all_positions, chunk=float(chunk) if chunk else None)


def decode_phase(setup: Setup) -> Phase:
    """One decode forward (verify_tokens per sequence: drafts + one) at the mean context."""
    r = rates(setup)
    spec = setup.spec
    t = setup.verify_tokens
    batch = float(setup.batch)
    tokens = batch * t
    context = mean_decode_context(setup)
    phase = Phase("decode step")
    layers = float(spec.num_layers)
    for op, n in layer_gemms(setup, r, tokens, layers):
        phase.add(op, n)
    phase.add(decode_attention_op(setup, r, batch, context, t))
    phase.add(elementwise_op(setup, r, tokens, layers))
    for op, n in _head_ops(setup, r, tokens, tokens, False):
        phase.add(op, n)
    phase.kernels = kernels_per_forward(setup, tokens)
    phase.host_kernels = phase.kernels
    phase.fixed_s = _odd_heads_decode_s(setup)
    return phase


def _odd_heads_decode_s(setup: Setup) -> float:
    """Return the fixed GPU time of a decode step's attention where no vector kernel serves.

    llama.cpp's CUDA backend decodes heads off a multiple of 64 values (Phi-3's 96, phi-2's 80)
    with its tensor-core flash-attention kernel, built for many queries: at one query a
    sequence it costs a fixed time per layer beyond its KV read (engine costs, per family).
    """
    engine = E.engine_time(setup.workload, setup.res.family)
    spec = setup.spec
    if not engine.odd_heads_decode_s or spec.head_dim % 64 == 0 or spec.attention == "mla":
        return 0.0
    return engine.odd_heads_decode_s * attention_layer_count(spec)


def train_phase(setup: Setup) -> Phase:
    """Forward and backward of one optimizer step (grad_accum micro-batches), per GPU.

    Backward: dgrad and wgrad GEMMs (2 x the forward's FLOPs; frozen LoRA/QLoRA weights skip
    wgrad), attention 2.5 x the forward's FLOPs at 0.8 of its rate, elementwise 2 x its bytes.
    Checkpointing recomputes the forward (full) or the attention only (selective). FP8 training
    adds the casts of every GEMM input. QLoRA dequantises the NF4 weights in every pass.
    """
    wl, spec, opts = setup.workload, setup.spec, setup.options
    r = rates(setup)
    seq = float(wl.prompt_len)
    batch = float(setup.batch)
    frozen = opts.finetune in ("lora", "qlora")
    qlora = opts.finetune == "qlora"
    fwd = forward_phase(setup, "forward", batch, 0.0, seq, True, training=True,
                        frozen_dequant=qlora)
    share = _layer_share(setup)
    tokens = batch * seq / setup.layout.cp
    layers = spec.num_layers * share
    micro = Phase("training step")
    micro.extend(fwd)
    # backward
    bwd_gemm = 1.0 if frozen else 2.0
    for op, n in fwd.ops:
        if op.name == "attention":
            micro.add(Op("attention backward", op.flops * C.ATTENTION_BACKWARD_FLOP_FACTOR,
                         op.device_bytes * 2.0,
                         op.compute_rate * C.ATTENTION_BACKWARD_EFFICIENCY, op.memory_rate), n)
        elif op.name == "elementwise":
            micro.add(Op("elementwise backward", 0.0,
                         op.device_bytes * C.ELEMENTWISE_BACKWARD_FACTOR, 1.0, op.memory_rate),
                      n)
        elif op.name in ("logits", "embedding and norm"):
            continue  # the loss's backward is in its traffic factor
        else:
            micro.add(Op(op.name + " backward", op.flops * bwd_gemm,
                         op.device_bytes * bwd_gemm, op.compute_rate, op.memory_rate, op.p,
                         op.host_bytes * bwd_gemm, op.host_rate), n)
    if frozen:
        micro.add(_lora_op(setup, r, tokens, layers))
    if wl.activation_checkpointing:
        if opts.selective_checkpointing and selective_policy(setup) == "op-every-other-mm":
            # per-op SAC keeps SDPA's output and every other matmul's (wq, wv, w1, w2): the
            # backward recomputes wk, wo and w3 and the pointwise ops between them
            share = op_sac_recomputed_share(spec)
            for op, n in fwd.ops:
                if op.name in ("attention projections", "MLP", "elementwise"):
                    part = 1.0 if op.name == "elementwise" else share
                    micro.add(Op("recompute " + op.name, op.flops, op.device_bytes,
                                 op.compute_rate, op.memory_rate, op.p, op.host_bytes,
                                 op.host_rate), n * part)
        elif opts.selective_checkpointing:
            for op, n in fwd.ops:
                if op.name == "attention":
                    micro.add(Op("recompute attention", op.flops, op.device_bytes,
                                 op.compute_rate, op.memory_rate), n)
        else:
            share = checkpointed_share(setup)  # every N-th layer: that share of the forward
            for op, n in fwd.ops:
                if op.name not in ("logits", "embedding and norm", "lm_head"):
                    micro.add(Op("recompute " + op.name, op.flops, op.device_bytes,
                                 op.compute_rate, op.memory_rate, op.p, op.host_bytes,
                                 op.host_rate), n * share)
    if r.kernel in ("torch-scaled-mm", "cutlass-fp8"):
        a, b, c = C.FP8_CAST_BYTES
        kv = spec.num_kv_heads * spec.head_dim / setup.layout.tp
        cast = a * spec.hidden_size + b * kv + c * spec.intermediate_size / setup.layout.tp
        micro.add(Op("fp8 casts", 0.0, cast * tokens * layers * (1.0 + C.FP8_CAST_BACKWARD_FACTOR),
                     1.0, r.stream))
    if not frozen:
        grads = 2.0 * setup.parts.total * grad_bytes_per_param(setup) / (
            setup.layout.tp * setup.layout.pp)
        micro.add(Op("gradients", 0.0, grads, 1.0, r.stream))
    passes = 1.0 + C.BACKWARD_KERNEL_FACTOR + checkpointed_share(setup)
    micro.kernels = fwd.kernels * passes
    micro.host_kernels = micro.kernels
    step = Phase("training step")
    step.extend(micro, float(wl.grad_accum))
    return step


def _lora_op(setup: Setup, r: _Rates, tokens: float, layers: float) -> Op:
    """Build LoRA's adapters: rank-r A and B on every projection, forward and backward (x3)."""
    from hwadvisor.perfmodel.memory import lora_params

    per_layer = lora_params(setup) / max(setup.spec.num_layers, 1)  # rank x (in + out) each
    flops = 2.0 * tokens * per_layer * layers * 3.0
    rank, h = float(setup.options.lora_rank), float(setup.spec.hidden_size)
    return Op("LoRA adapters", flops, 0.0, r.act_gemm * E.gemm_shape_factor(
        tokens, rank, h, r.half_dim), r.stream)


def _host_step_rate(setup: Setup) -> float:
    """Host memory bandwidth one GPU's CPU optimizer step gets: the node's, shared.

    Every GPU of a node steps its own shard on the same host at the same time
    (HOST_OPTIMIZER_GBPS per node).
    """
    per_node = max(1, min(setup.layout.gpus_per_node, setup.layout.gpus))
    return C.HOST_OPTIMIZER_GBPS * C.GB / per_node


def _offload_pcie_bytes_per_param(setup: Setup, kind: str) -> float:
    """Bytes over PCIe per (sharded) parameter and step of the engine's offload.

    ZeRO-Offload: the 16-bit gradients down, the updated 16-bit weights up, once a step.
    FSDP2 CPUOffloadPolicy: the fp32 parameter shard up before each all-gather (forward, and
    again in the backward after resharding) and the fp32 gradient shard down after each
    reduce-scatter, every micro-batch (torch fully_shard: offload_policy copies the sharded
    parameters host-to-device and the reduced gradients device-to-host).
    """
    if kind == "fsdp-cpu":
        return (2.0 * 4.0 + C.GRAD_BYTES_FP32) * setup.workload.grad_accum
    return grad_bytes_per_param(setup) + 2.0


def optimizer_phase(setup: Setup) -> Phase:
    """Build the optimizer step per GPU, once per step: fused or foreach, GPU or host.

    LoRA/QLoRA step only the adapters (memory.lora_params). Offloaded, as the engine offloads
    (memory.offload_kind): the step runs on the host at its memory bandwidth, shared by the
    node's GPUs, with the engine's PCIe traffic (ZeRO-Offload: gradients down and 16-bit
    weights up once a step; FSDP2 CPUOffloadPolicy: parameter shards up for every all-gather and
    gradient shards down for every reduce-scatter).
    """
    opts = setup.options
    table = C.OPT_BYTES_PER_PARAM_FUSED if opts.fused_optimizer else C.OPT_BYTES_PER_PARAM_UNFUSED
    trained = setup.parts.total
    if opts.finetune in ("lora", "qlora"):
        from hwadvisor.perfmodel.memory import lora_params

        trained = lora_params(setup)
    params = trained / setup.layout.weight_shards
    phase = Phase("optimizer step")
    per_param = table[setup.workload.optimizer]
    if pure_16bit(setup):
        # no fp32 master to read and write: the 16-bit parameters and the moments only
        optimizer = setup.workload.optimizer
        per_param *= C.OPT_BYTES_PER_PARAM_PURE16[optimizer] / \
            C.OPT_BYTES_PER_PARAM_FUSED[optimizer]
    kind = "fused" if opts.fused_optimizer else "foreach"
    r = rates(setup)
    offload = offload_kind(setup)
    if offload is not None:
        phase.add(Op("optimizer on the host", params * 10.0,
                     params * C.HOST_OPTIMIZER_BYTES_PER_PARAM, 1e15, _host_step_rate(setup)))
        phase.add(Op("offload traffic over PCIe", 0.0, 0.0, 1.0, 1.0, None,
                     params * _offload_pcie_bytes_per_param(setup, offload), r.host_rate))
        return phase
    rate = r.stream * C.OPTIMIZER_BANDWIDTH_EFFICIENCY[kind]
    phase.add(Op("optimizer", params * 10.0, params * per_param, 1e15, rate))
    return phase
