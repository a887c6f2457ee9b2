"""estimate(): put memory, op-group times, host time and communication together into an Estimate.

Time of a phase = sum over its op groups of each group's own roofline (compute.py, with the
rates of efficiency.py) + a fixed GPU time per kernel, against the host's launch time (the
slower decides) + the engine's exposed host work (overhead.py) + exposed communication
(comm.py). The *_compute_s / *_memory_s keys are the sums of the groups' compute and memory
terms at the achievable rates; launch_overhead_s is everything beyond the groups' rooflines.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from hwadvisor import units
from hwadvisor.errors import UserError
from hwadvisor.models import (
    Device,
    Estimate,
    MemoryEstimate,
    ModelOptions,
    ModelSpec,
    Times,
    Workload,
)
from hwadvisor.perfmodel import constants as C
from hwadvisor.perfmodel import efficiency as E
from hwadvisor.perfmodel.bottleneck import PhaseTimes, decide
from hwadvisor.perfmodel.calibration import Calibration
from hwadvisor.perfmodel.comm import CommResult, communication
from hwadvisor.perfmodel.compute import (
    Phase,
    decode_forward_flops,
    decode_phase,
    forward_flops,
    mean_decode_context,
    optimizer_phase,
    prefill_phase,
    prefill_span,
    rates,
    train_phase,
)
from hwadvisor.perfmodel.context import Setup
from hwadvisor.perfmodel.drafters import drafter
from hwadvisor.perfmodel.layout import resolve_layout
from hwadvisor.perfmodel.memory import memory_estimate
from hwadvisor.perfmodel.overhead import (
    StepTime,
    decode_graphed,
    eager_op_s,
    graph_batch_limit,
    graphs_on,
    host_step_s,
    optimizer_kernels,
    step_time,
)
from hwadvisor.perfmodel.resources import resolve
from hwadvisor.workload.params import active_params, workload_breakdown


def _spec(workload: Workload) -> ModelSpec:
    if workload.spec is not None:
        return workload.spec
    try:
        from hwadvisor.workload import load_spec
    except ImportError:
        raise UserError(f"workload '{workload.model}' carries no model architecture",
                        hint="build the workload with hwadvisor.workload.build_workload") from None
    return load_spec(workload.model)


def _model_notes(setup: Setup, deciding: Phase, timing: StepTime,
                 top: list[tuple[str, float]]) -> list[str]:
    opts, res = setup.options, setup.res
    r = rates(setup)
    graphed = graphs_on(setup) and (setup.training or deciding.name != "decode step"
                                     or decode_graphed(setup))
    launch = "CUDA graph replay" if graphed else (
        f"eager launches at {eager_op_s(setup) * 1e6:.1f} us each on the host")
    limit = graph_batch_limit(setup)
    if graphs_on(setup) and not graphed and limit is not None:
        launch += (f": batch {setup.batch} is above the {limit} sequences "
                   f"{setup.workload.engine} captures CUDA graphs for by default")
    notes = [
        "time = sum over op groups of max(FLOPs / rate, bytes / rate) at achievable rates, "
        f"+ {res.kernel_floor_s * 1e6:.1f} us per kernel, against the host's launches "
        "(the slower decides), + the engine's host work + exposed communication",
        f"rates ({res.family}): stream {res.stream_gbps:.0f} GB/s, large GEMMs "
        f"{units.number(res.gemm_tflops)} TFLOP/s {res.compute_dtype}, attention ({r.backend}) "
        f"{units.number(r.attention_rate / 1e12)} TFLOP/s, weight kernel {r.kernel} at "
        f"{r.gemv:.0%} of the stream when streaming weights",
        f"{deciding.name}: {timing.kernels:.0f} kernels ({launch}); "
        f"engine {setup.workload.engine} host work "
        f"{host_step_s(setup, graphed) * 1e3:.2f} ms per forward",
        f"elementwise ops: {r.elementwise} ({'torch.compile' if opts.compiled else 'engine'}"
        " kernels)",
        "largest op groups: " + ", ".join(f"{name} {seconds * 1e3:.3g} ms"
                                          for name, seconds in top),
    ]
    if setup.training:
        precision = "mixed precision (bf16 + fp32 master)" if opts.mixed_precision else "fp32"
        if opts.mixed_precision and not opts.master_weights and opts.finetune == "full":
            precision = "pure bf16 (no fp32 master copy)"
        notes.append(f"training: {precision}, {setup.workload.optimizer}"
                     f"{' fused' if opts.fused_optimizer else ' foreach'}; backward: dgrad + "
                     "wgrad GEMMs, attention 2.5x its forward FLOPs")
        if setup.layout.pp > 1:
            notes.append(f"pipeline bubble x{_bubble(setup):.3f} ({setup.layout.pp} stages, "
                         f"{setup.workload.grad_accum} micro-batches, "
                         f"{opts.virtual_pipeline_stages} virtual stages)")
    else:
        notes.append(f"decode at the mean context {mean_decode_context(setup):.0f} tokens "
                     "(prompt + half the generation)")
        if setup.tokens_per_forward > 1:
            name = setup.options.speculative_drafter or "an unnamed drafter"
            notes.append(f"speculative decoding with {name}: {setup.tokens_per_forward:g} "
                         f"accepted tokens per target forward of {setup.verify_tokens:g} tokens "
                         f"per sequence, draft cost {_draft_cost(setup):.0%} of a forward "
                         "(assumption)")
        if opts.prefix_cache_hit:
            notes.append(f"prefix cache serves {opts.prefix_cache_hit:.0%} of the prompt")
        if opts.prefill_chunk_tokens:
            notes.append(f"prefill in chunks of {opts.prefill_chunk_tokens} tokens")
    if setup.offload_fraction:
        notes.append(f"offloaded weights stream over PCIe at {r.host_rate / C.GB:.0f} GB/s "
                     "every forward")
    return notes


def estimate(workload: Workload, device: Device, options: ModelOptions | None = None, *,
             measured_busbw_gbps: float | None = None,
             calibration: Calibration | None = None) -> Estimate:
    """Model the workload on the device: memory, FLOPs, bytes, op-group times and bottleneck.

    measured_busbw_gbps, when given (from a collectives trial), replaces the datasheet bus
    bandwidth for communication. calibration (perfmodel/calibration.py) replaces model figures
    with measured ones; Estimate.calibration says which figure came from where.
    """
    if calibration is not None and measured_busbw_gbps is None:
        measured_busbw_gbps = calibration.busbw_gbps
    setup = _setup(workload, device, options, calibration)
    memory = memory_estimate(setup)
    fits = memory.headroom_bytes is None or memory.headroom_bytes >= 0
    if setup.training:
        return _training(setup, memory, fits, measured_busbw_gbps)
    return _inference(setup, memory, fits, measured_busbw_gbps)


def estimate_memory(workload: Workload, device: Device, options: ModelOptions | None = None,
                    *, calibration: Calibration | None = None) -> MemoryEstimate:
    """Return the memory part of estimate() alone: the same figures, at a fraction of the cost.

    For searches that first ask whether a change fits (most what-ifs near the limit do not).
    """
    return memory_estimate(_setup(workload, device, options, calibration))


def _setup(workload: Workload, device: Device, options: ModelOptions | None,
           calibration: Calibration | None) -> Setup:
    options = options or ModelOptions()
    if calibration is not None:
        measured = calibration.measured(device.measured)
        if measured is not device.measured:
            device = device.model_copy(update={"measured": measured})
    spec = _engine_kv_spec(workload, _spec(workload))
    parts = workload_breakdown(workload, spec)
    return Setup(workload=workload, spec=spec, options=options, device=device, parts=parts,
                 layout=resolve_layout(workload, options),
                 res=resolve(workload, device, options, calibration))


def _engine_kv_spec(workload: Workload, spec: ModelSpec) -> ModelSpec:
    """Return the spec as the engine allocates its KV cache.

    An engine that gives chunked-attention layers a cache of the whole context (vLLM 0.33.0:
    `VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE` unset turns the hybrid KV cache
    manager off for Llama 4, config/vllm.py) holds every layer's KV at full length.
    """
    if not spec.attention_chunked or not spec.sliding_window:
        return spec
    from hwadvisor.engines import engine_for

    if not engine_for(workload).costs.chunked_kv_full:
        return spec
    return spec.model_copy(update={"sliding_window": None, "sliding_window_layers": None})


class PerfModel:
    """estimate() as the rules engine calls it (one what-if at a time), calibrated or not.

    memory() gives the same memory figures alone: the plan search checks a change's fit with
    it before paying for the whole estimate.
    """

    def __init__(self, calibration: Calibration | None = None) -> None:
        self.calibration = calibration

    def __call__(self, workload: Workload, device: Device, options: ModelOptions) -> Estimate:
        """Return the whole estimate."""
        return estimate(workload, device, options, calibration=self.calibration)

    def memory(self, workload: Workload, device: Device, options: ModelOptions
               ) -> MemoryEstimate:
        """Return the memory estimate alone."""
        return estimate_memory(workload, device, options, calibration=self.calibration)


def _sources(setup: Setup, busbw: float | None) -> dict[str, str]:
    sources = dict(setup.res.sources)
    if setup.layout.gpus > 1:
        if busbw:
            sources["bus_bandwidth"] = "measured"
        else:
            link = setup.device.interconnect
            known = link is not None and (link.nvlink is not None or link.pcie is not None
                                          or link.gpu_link_gbps is not None)
            sources["bus_bandwidth"] = "datasheet" if known else "model"
    return sources


def _common(setup: Setup, comm: CommResult, deciding: Phase, timing: StepTime,
            busbw: float | None, top: list[tuple[str, float]]) -> dict[str, Any]:
    parts, spec = setup.parts, setup.spec
    return dict(
        params_total=parts.total,
        params_active=active_params(parts, spec),
        ridge_point=setup.res.ridge_flop_per_byte,
        peak_tflops_used=setup.res.peak_tflops,
        bandwidth_gbps_used=setup.res.bandwidth_gbps,
        communication=comm.details,
        calibration=_sources(setup, busbw),
        assumptions=[f"compute dtype {setup.res.compute_dtype}", *setup.res.assumptions,
                     *setup.layout.notes, *comm.notes,
                     *_model_notes(setup, deciding, timing, top)],
    )


def _phase_times(name: str, phase: Phase, timing: StepTime, comm_exposed: float,
                 setup: Setup, server_s: float = 0.0) -> PhaseTimes:
    compute_bound, memory_bound = phase.bound_split()
    return PhaseTimes(name, phase.compute_s, phase.memory_s, timing.overhead_s + server_s,
                      comm_exposed, phase.flops, phase.device_bytes, phase.host_bytes,
                      compute_bound_s=compute_bound, memory_bound_s=memory_bound,
                      busy_s=timing.busy_s, floors_s=timing.floors_s,
                      host_s=timing.host_s + server_s, server_s=server_s,
                      kernels=timing.kernels, kernel_floor_s=setup.res.kernel_floor_s,
                      stream_gbps=setup.res.stream_gbps, gemm_tflops=setup.res.gemm_tflops,
                      top=phase.top(3))


def _bubble(setup: Setup) -> float:
    """Pipeline schedule's stretch of the micro-batches' time: (m v + pp - 1) / (m v)."""
    pp = setup.layout.pp
    if pp <= 1:
        return 1.0
    slots = setup.workload.grad_accum * setup.options.virtual_pipeline_stages
    return (slots + pp - 1) / slots


def _training(setup: Setup, memory: MemoryEstimate, fits: bool, busbw: float | None) -> Estimate:
    wl = setup.workload
    step = train_phase(setup)
    timing = step_time(setup, step, forwards=float(wl.grad_accum))
    opt = optimizer_phase(setup)
    opt.kernels = opt.host_kernels = optimizer_kernels(setup)
    opt_timing = step_time(setup, opt, forwards=0.0)
    bubble = _bubble(setup)
    busy = timing.gpu_s * bubble
    comm = communication(setup, {"train": busy}, busbw)
    total = timing.step_s * bubble + opt_timing.step_s + comm.train.exposed_s
    phase = _phase_times("training step incl. optimizer", step, timing, comm.train.exposed_s,
                         setup)
    phase.memory_s += opt.memory_s
    phase.memory_bound_s += opt_timing.step_s
    phase.busy_s = (phase.busy_s or 0.0) + opt_timing.step_s
    phase.device_bytes += opt.device_bytes
    bottleneck, why = decide(phase, memory, fits, setup.res.peak_tflops, setup.res.bandwidth_gbps)
    if setup.layout.gpus > 1:
        comm.details.update(train_s=comm.train.total_s, train_exposed_s=comm.train.exposed_s)
    seq = float(wl.prompt_len)
    tokens = setup.batch * seq * wl.grad_accum * setup.layout.dp
    return Estimate(
        memory=memory, fits=fits, bottleneck=bottleneck, bottleneck_why=why,
        deciding_phase="train",
        flops_per_token=forward_flops(setup, 1, 0.0, seq) / seq,
        flops_per_step=step.flops,
        arithmetic_intensity=step.flops / step.device_bytes if step.device_bytes else None,
        times=Times(train_step_s=total, train_compute_s=step.compute_s,
                    train_memory_s=step.memory_s, optimizer_s=opt_timing.step_s,
                    launch_overhead_s=timing.overhead_s,
                    communication_s=comm.train.total_s,
                    communication_exposed_s=comm.train.exposed_s),
        tokens_per_s=tokens / total,
        **_common(setup, comm, step, timing, busbw, phase.top),
    )


def layer_pipeline_share(setup: Setup, forwards: float) -> float:
    """Share of a prefill's sequential time when an engine's layer split pipelines its chunks.

    llama.cpp's --split-mode layer runs a token through the GPUs one after the other, but
    llama_decode splits each logical batch (n_batch, the engine's step_tokens) into micro-batches
    (n_ubatch, the prefill chunk) and queues them so that the GPUs work on different
    micro-batches at once (PR #6017, "llama : add pipeline parallelism support", 2024-03; on by
    default with every layer offloaded). A logical batch of k micro-batches over pp stages then
    takes (k + pp - 1) stage times instead of k x pp: a 2048-token prompt in 512-token chunks on
    two GPUs 5/8 of the sequential time; one chunk (or decode, one micro-batch a step) gains
    nothing. 1.0 for every other case.
    """
    from hwadvisor.engines import engine_for

    pp, chunk = setup.layout.pp, setup.options.prefill_chunk_tokens
    if setup.training or pp <= 1 or not chunk or forwards <= 1:
        return 1.0
    defaults = engine_for(setup.workload).defaults
    step = defaults.step_tokens
    if defaults.sharding != "layers" or not step or step <= chunk:
        return 1.0
    per_batch = max(1, step // chunk)
    full, rest = divmod(int(math.ceil(forwards)), per_batch)
    stage_times = full * (per_batch + pp - 1) + ((rest + pp - 1) if rest else 0)
    return min(1.0, stage_times / (pp * math.ceil(forwards)))


def _draft_cost(setup: Setup) -> float:
    """Return the drafter's time per step as a share of the target forward (drafters.py)."""
    if setup.options.speculative_drafter is None:
        return C.SPECULATIVE_DRAFT_COST_FRACTION
    return drafter(setup.options.speculative_drafter).draft_cost


def _inference(setup: Setup, memory: MemoryEstimate, fits: bool, busbw: float | None) -> Estimate:
    wl = setup.workload
    pre, dec = prefill_phase(setup), decode_phase(setup)
    chunk = setup.options.prefill_chunk_tokens
    start, end = prefill_span(setup)
    forwards = max(1.0, math.ceil(setup.batch * (end - start) / chunk)) if chunk else 1.0
    pre_t = step_time(setup, pre, forwards=forwards)
    dec_t = step_time(setup, dec, graphed=decode_graphed(setup))
    comm = communication(setup, {"prefill": pre_t.gpu_s, "decode": dec_t.gpu_s}, busbw)
    prefill_s = pre_t.step_s * layer_pipeline_share(setup, forwards) + comm.prefill.exposed_s
    forward_s = dec_t.step_s + comm.decode.exposed_s
    t = setup.tokens_per_forward
    draft = 1.0 + (_draft_cost(setup) if t > 1 else 0.0)
    # The server's per-sequence host work follows each step (llama-server samples every
    # sequence's token on the CPU, one after another), once per token it emits: a drafter's
    # verified tokens are each sampled too, so it adds to the time per token, not per forward.
    server_s = setup.batch * E.server_slot_s(wl, setup.spec.vocab_size) if wl.gen_len > 0 else 0.0
    decode_step_s = forward_s * draft / t + server_s
    deciding: Literal["prefill", "decode"]
    if wl.gen_len > 0:
        deciding = "decode"
        phase = _phase_times("decode step", dec, dec_t, comm.decode.exposed_s, setup, server_s)
        phase_comm, timing, deciding_phase = comm.decode, dec_t, dec
        tokens_per_s = setup.batch * setup.layout.dp / decode_step_s
        flops_per_token = decode_forward_flops(setup, 1, mean_decode_context(setup), 1)
    else:
        deciding = "prefill"
        phase = _phase_times("prefill", pre, pre_t, comm.prefill.exposed_s, setup)
        phase_comm, timing, deciding_phase = comm.prefill, pre_t, pre
        tokens_per_s = setup.batch * wl.prompt_len * setup.layout.dp / prefill_s
        flops_per_token = forward_flops(setup, 1, start, end) / (end - start)
    bottleneck, why = decide(phase, memory, fits, setup.res.peak_tflops, setup.res.bandwidth_gbps)
    if setup.layout.gpus > 1:
        comm.details.update(prefill_s=comm.prefill.total_s,
                            prefill_exposed_s=comm.prefill.exposed_s,
                            decode_s=comm.decode.total_s, decode_exposed_s=comm.decode.exposed_s)
    return Estimate(
        memory=memory, fits=fits, bottleneck=bottleneck, bottleneck_why=why,
        deciding_phase=deciding,
        flops_per_token=flops_per_token,
        flops_per_step=deciding_phase.flops,
        bytes_per_decode_step=dec.device_bytes + dec.host_bytes,
        arithmetic_intensity=(deciding_phase.flops / deciding_phase.device_bytes
                              if deciding_phase.device_bytes else None),
        times=Times(prefill_s=prefill_s, decode_step_s=decode_step_s,
                    ttft_s=prefill_s, tpot_s=decode_step_s if wl.gen_len > 0 else None,
                    request_latency_s=prefill_s + max(wl.gen_len - 1, 0) * decode_step_s,
                    prefill_compute_s=pre.compute_s, prefill_memory_s=pre.memory_s,
                    decode_compute_s=dec.compute_s, decode_memory_s=dec.memory_s,
                    launch_overhead_s=timing.overhead_s, communication_s=phase_comm.total_s,
                    communication_exposed_s=phase_comm.exposed_s,
                    decode_tokens_per_forward=t,
                    server_host_s=server_s if server_s else None),
        tokens_per_s=tokens_per_s,
        **_common(setup, comm, deciding_phase, timing, busbw, phase.top),
    )
