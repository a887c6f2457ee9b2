"""estimate(): put memory, FLOPs, traffic, launches and communication together into an Estimate."""

from __future__ import annotations

from typing import Any, Literal

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
from hwadvisor.perfmodel.bottleneck import PhaseTimes, decide
from hwadvisor.perfmodel.comm import CommResult, communication, pcie_gbps
from hwadvisor.perfmodel.compute import (
    PhaseCost,
    decode_cost,
    decode_forward_flops,
    forward_flops,
    mean_decode_context,
    optimizer_cost,
    prefill_cost,
    prefill_span,
    train_cost,
)
from hwadvisor.perfmodel.context import Setup
from hwadvisor.perfmodel.layout import resolve_layout
from hwadvisor.perfmodel.memory import memory_estimate
from hwadvisor.perfmodel.overhead import (
    forward_launch_s,
    kernels_per_forward,
    launch_cost_s,
    train_launch_s,
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


def _split(cost: PhaseCost, setup: Setup) -> tuple[float, float]:
    """(compute seconds, memory seconds) of a phase; offloaded weights come over PCIe."""
    compute = cost.flops / (setup.res.peak_tflops * 1e12)
    memory = cost.device_bytes / (setup.res.bandwidth_gbps * C.GB)
    if cost.host_bytes:
        memory += cost.host_bytes / (pcie_gbps(setup.device)[0] * C.GB)
    return compute, memory


def _model_notes(setup: Setup) -> list[str]:
    opts = setup.options
    kernels = kernels_per_forward(setup)
    notes = [
        "roofline at the figures above; real kernels reach ~60-80% of datasheet peaks",
        f"launches: {kernels:.0f} kernels per forward "
        f"({'compiled' if opts.compiled else 'eager'}) x {launch_cost_s(setup) * 1e6:.0f} us "
        f"({'CUDA graph replay' if opts.cuda_graphs else 'eager dispatch'}), counted additively",
        f"attention kernel: {opts.attention_kernel}"
        + (" (score matrix materialized, full rows computed)" if opts.attention_kernel == "math"
           else " (score matrix streamed, masked blocks skipped)"),
    ]
    if setup.training:
        precision = "mixed precision (bf16 + fp32 master)" if opts.mixed_precision else "fp32"
        notes.append(f"training: {precision}, {setup.workload.optimizer}"
                     f"{' fused' if opts.fused_optimizer else ' foreach'}; backward = 2x forward")
    else:
        notes.append(f"decode at the mean context {mean_decode_context(setup):.0f} tokens "
                     "(prompt + half the generation)")
        if setup.tokens_per_forward > 1:
            notes.append(f"speculative decoding: {setup.tokens_per_forward:g} accepted tokens per "
                         f"target forward, draft cost {C.SPECULATIVE_DRAFT_COST_FRACTION:.0%} "
                         "of a forward (assumption)")
        if opts.prefix_cache_hit:
            notes.append(f"prefix cache serves {opts.prefix_cache_hit:.0%} of the prompt")
    if setup.offload_fraction:
        notes.append(f"offloaded weights stream over {pcie_gbps(setup.device)[1]} every forward")
    return notes


def estimate(workload: Workload, device: Device, options: ModelOptions | None = None, *,
             measured_busbw_gbps: float | None = None) -> Estimate:
    """Model the workload on the device: memory, FLOPs, bytes, roofline times and bottleneck.

    measured_busbw_gbps, when given (from a collectives trial), replaces the datasheet bus
    bandwidth for communication.
    """
    options = options or ModelOptions()
    spec = _spec(workload)
    parts = workload_breakdown(workload, spec)
    setup = Setup(workload=workload, spec=spec, options=options, device=device, parts=parts,
                  layout=resolve_layout(workload, options),
                  res=resolve(workload, device, options))
    memory = memory_estimate(setup)
    fits = memory.headroom_bytes is None or memory.headroom_bytes >= 0
    if setup.training:
        return _training(setup, memory, fits, measured_busbw_gbps)
    return _inference(setup, memory, fits, measured_busbw_gbps)


def _common(setup: Setup, comm: CommResult) -> dict[str, Any]:
    parts, spec = setup.parts, setup.spec
    return dict(
        params_total=parts.total,
        params_active=active_params(parts, spec),
        ridge_point=setup.res.ridge_flop_per_byte,
        peak_tflops_used=setup.res.peak_tflops,
        bandwidth_gbps_used=setup.res.bandwidth_gbps,
        communication=comm.details,
        assumptions=[f"compute dtype {setup.res.compute_dtype}", *setup.res.assumptions,
                     *setup.layout.notes, *comm.notes, *_model_notes(setup)],
    )


def _training(setup: Setup, memory: MemoryEstimate, fits: bool, busbw: float | None) -> Estimate:
    wl = setup.workload
    cost = train_cost(setup)
    opt = optimizer_cost(setup)
    compute_s, memory_s = _split(cost, setup)
    optimizer_s = opt.device_bytes / (setup.res.bandwidth_gbps * C.GB)
    roofline = max(compute_s, memory_s)
    comm = communication(setup, {"train": roofline}, busbw)
    launch = train_launch_s(setup)
    step = roofline + optimizer_s + launch + comm.train.exposed_s
    phase = PhaseTimes("training step incl. optimizer", compute_s, memory_s + optimizer_s,
                       launch,
                       comm.train.exposed_s, cost.flops, cost.device_bytes + opt.device_bytes,
                       cost.host_bytes)
    bottleneck, why = decide(phase, memory, fits, setup.res.peak_tflops, setup.res.bandwidth_gbps)
    if setup.layout.gpus > 1:
        comm.details.update(train_s=comm.train.total_s, train_exposed_s=comm.train.exposed_s)
    seq = float(wl.prompt_len)
    tokens = setup.batch * seq * wl.grad_accum * setup.layout.dp
    return Estimate(
        memory=memory, fits=fits, bottleneck=bottleneck, bottleneck_why=why,
        deciding_phase="train",
        flops_per_token=forward_flops(setup, 1, 0.0, seq) / seq,
        flops_per_step=cost.flops,
        arithmetic_intensity=phase.flops / phase.device_bytes if phase.device_bytes else None,
        times=Times(train_step_s=step, train_compute_s=compute_s, train_memory_s=memory_s,
                    optimizer_s=optimizer_s, launch_overhead_s=launch,
                    communication_s=comm.train.total_s,
                    communication_exposed_s=comm.train.exposed_s),
        tokens_per_s=tokens / step,
        **_common(setup, comm),
    )


def _inference(setup: Setup, memory: MemoryEstimate, fits: bool, busbw: float | None) -> Estimate:
    wl = setup.workload
    pre, dec = prefill_cost(setup), decode_cost(setup)
    p_compute, p_memory = _split(pre, setup)
    d_compute, d_memory = _split(dec, setup)
    busy = {"prefill": max(p_compute, p_memory), "decode": max(d_compute, d_memory)}
    comm = communication(setup, busy, busbw)
    launch = forward_launch_s(setup)
    prefill_s = busy["prefill"] + launch + comm.prefill.exposed_s
    forward_s = busy["decode"] + launch + comm.decode.exposed_s
    t = setup.tokens_per_forward
    draft = 1.0 + (C.SPECULATIVE_DRAFT_COST_FRACTION if t > 1 else 0.0)
    decode_step_s = forward_s * draft / t
    start, end = prefill_span(setup)
    deciding: Literal["prefill", "decode"]
    if wl.gen_len > 0:
        deciding = "decode"
        phase = PhaseTimes("decode step", d_compute, d_memory, launch, comm.decode.exposed_s,
                           dec.flops, dec.device_bytes, dec.host_bytes)
        phase_comm = comm.decode
        tokens_per_s = setup.batch * setup.layout.dp / decode_step_s
        flops_per_token = decode_forward_flops(setup, 1, mean_decode_context(setup), 1)
        step_flops = dec.flops
    else:
        deciding = "prefill"
        phase = PhaseTimes("prefill", p_compute, p_memory, launch, comm.prefill.exposed_s,
                           pre.flops, pre.device_bytes, pre.host_bytes)
        phase_comm = comm.prefill
        tokens_per_s = setup.batch * wl.prompt_len * setup.layout.dp / prefill_s
        flops_per_token = forward_flops(setup, 1, start, end) / (end - start)
        step_flops = pre.flops
    bottleneck, why = decide(phase, memory, fits, setup.res.peak_tflops, setup.res.bandwidth_gbps)
    if setup.layout.gpus > 1:
        comm.details.update(prefill_s=comm.prefill.total_s,
                            prefill_exposed_s=comm.prefill.exposed_s,
                            decode_s=comm.decode.total_s, decode_exposed_s=comm.decode.exposed_s)
    return Estimate(
        memory=memory, fits=fits, bottleneck=bottleneck, bottleneck_why=why,
        deciding_phase=deciding,
        flops_per_token=flops_per_token,
        flops_per_step=step_flops,
        bytes_per_decode_step=dec.device_bytes + dec.host_bytes,
        arithmetic_intensity=phase.flops / phase.device_bytes if phase.device_bytes else None,
        times=Times(prefill_s=prefill_s, decode_step_s=decode_step_s,
                    ttft_s=prefill_s, tpot_s=decode_step_s if wl.gen_len > 0 else None,
                    request_latency_s=prefill_s + max(wl.gen_len - 1, 0) * decode_step_s,
                    prefill_compute_s=p_compute, prefill_memory_s=p_memory,
                    decode_compute_s=d_compute, decode_memory_s=d_memory,
                    launch_overhead_s=launch, communication_s=phase_comm.total_s,
                    communication_exposed_s=phase_comm.exposed_s,
                    decode_tokens_per_forward=t),
        tokens_per_s=tokens_per_s,
        **_common(setup, comm),
    )
