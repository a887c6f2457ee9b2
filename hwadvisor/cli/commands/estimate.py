"""`hwadvisor estimate`: memory, FLOPs, roofline times and the bottleneck of a workload."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Optional

import typer
from rich.table import Table

from hwadvisor.cli.console import JsonOpt, OutputOpt, console, print_notes, publish
from hwadvisor.cli.modeloptions import (
    AttentionOpt,
    CommOverlapOpt,
    CompiledOpt,
    CudaGraphsOpt,
    FusedOptimizerOpt,
    NoMixedPrecisionOpt,
    OffloadOpt,
    PrefixHitOpt,
    ShardingOpt,
    SpeculativeOpt,
    model_options,
)
from hwadvisor.cli.options import (
    ActCkptOpt,
    ActivationDtypeOpt,
    BatchOpt,
    GenLenOpt,
    GpusOpt,
    GpusPerNodeOpt,
    GradAccumOpt,
    InterNodeGbpsOpt,
    KvDtypeOpt,
    ModelOpt,
    NodesOpt,
    OptimizerOpt,
    PhaseOpt,
    PromptLenOpt,
    WeightsDtypeOpt,
    workload_from_options,
    workload_values,
)
from hwadvisor.models import Estimate, ModelOptions, Report, Workload

DeviceOpt = Annotated[
    Optional[str],  # noqa: UP007, UP045
    typer.Option("--device", help="Plan for a datasheet profile (see 'hwadvisor profiles list') "
                 "instead of the probed hardware", show_default=False),
]


def build_estimate_report(
    workload_options: Mapping[str, object],
    device_id: str | None,
    options: ModelOptions,
) -> Report:
    """Resolve the hardware and the workload, run the performance model, return the report."""
    from hwadvisor.perfmodel import estimate
    from hwadvisor.probe.target import MAX_PLANNED_DEVICES, primary_device, resolve_target

    target = resolve_target(device_id, 1)
    device = primary_device(target)
    workload = workload_from_options(workload_options, device.memory_total_bytes,
                                     target.device_class)
    if device_id is not None and workload.gpus > 1:
        # The report lists the devices of one node (the plan's per-node GPUs).
        per_node = workload.gpus_per_node or workload.gpus // workload.nodes
        target = resolve_target(device_id, min(per_node, MAX_PLANNED_DEVICES))
    result = estimate(workload, device, options)
    notes = list(target.notes)
    if not target.devices:
        notes.append("no accelerator found: estimated for the CPU (see the assumptions)")
    return target.model_copy(update={
        "kind": "estimate", "workload": workload, "estimate": result, "notes": notes,
        "devices": target.devices or [device],
    })


def _gb(value: float | int | None) -> str:
    return "—" if value is None else f"{value / 1e9:.2f} GB"


def _time(value: float | None) -> str:
    if value is None:
        return "—"
    if value >= 1.0:
        return f"{value:.2f} s"
    if value >= 1e-3:
        return f"{value * 1e3:.2f} ms"
    return f"{value * 1e6:.1f} µs"


def memory_table(est: Estimate) -> Table:
    """Memory per GPU by part."""
    mem = est.memory
    table = Table(title="memory per GPU")
    table.add_column("part")
    table.add_column("size", justify="right")
    for name, value in [("weights", mem.weights_bytes), ("KV cache", mem.kv_cache_bytes),
                        ("activations", mem.activations_bytes),
                        ("gradients", mem.gradients_bytes), ("optimizer", mem.optimizer_bytes),
                        ("runtime allowance", mem.runtime_bytes)]:
        if value:
            table.add_row(name, _gb(value))
    table.add_row("[bold]total[/]", f"[bold]{_gb(mem.total_bytes)}[/]")
    table.add_row("usable device memory", _gb(mem.device_memory_bytes))
    verdict = "" if est.fits else "  [red]does not fit[/]"
    table.add_row("headroom", _gb(mem.headroom_bytes) + verdict)
    return table


def times_table(est: Estimate, workload: Workload) -> Table:
    """Roofline times of each phase."""
    t = est.times
    table = Table(title="times (roofline + launches + exposed communication)")
    table.add_column("phase")
    table.add_column("total", justify="right")
    table.add_column("compute", justify="right")
    table.add_column("memory", justify="right")
    if workload.phase == "training":
        table.add_row("training step", _time(t.train_step_s), _time(t.train_compute_s),
                      _time(t.train_memory_s))
        table.add_row("optimizer step", _time(t.optimizer_s), "", "")
    else:
        table.add_row("prefill", _time(t.prefill_s), _time(t.prefill_compute_s),
                      _time(t.prefill_memory_s))
        table.add_row("decode (per token)", _time(t.decode_step_s), _time(t.decode_compute_s),
                      _time(t.decode_memory_s))
    table.add_row("launch overhead", _time(t.launch_overhead_s), "", "")
    if workload.gpus > 1:
        table.add_row("communication (exposed)",
                      f"{_time(t.communication_s)} ({_time(t.communication_exposed_s)})", "", "")
    if est.tokens_per_s is not None:
        table.add_row("throughput", f"{est.tokens_per_s:,.0f} tok/s", "", "")
    return table


def render(report: Report) -> None:
    """Print the estimate for people."""
    est, workload = report.estimate, report.workload
    if est is None or workload is None:
        return
    params = f"{(est.params_total or 0) / 1e9:.2f}B params"
    if est.params_active and est.params_total and est.params_active < est.params_total:
        params += f" ({est.params_active / 1e9:.2f}B active)"
    device = report.devices[0].name if report.devices else "cpu"
    console.print(f"[bold]{workload.model}[/] · {workload.phase} · {params} · "
                  f"{workload.gpus} x {device}")
    console.print(memory_table(est))
    console.print(times_table(est, workload))
    console.print(f"[bold]bottleneck: {est.bottleneck}[/] — {est.bottleneck_why}",
                  highlight=False)
    for line in est.assumptions:
        console.print(f"  [dim]· {line}[/]", highlight=False)


def estimate_command(
    model: ModelOpt = None,
    phase: PhaseOpt = None,
    batch: BatchOpt = None,
    prompt_len: PromptLenOpt = None,
    gen_len: GenLenOpt = None,
    weights_dtype: WeightsDtypeOpt = None,
    kv_dtype: KvDtypeOpt = None,
    activation_dtype: ActivationDtypeOpt = None,
    optimizer: OptimizerOpt = None,
    grad_accum: GradAccumOpt = None,
    gpus: GpusOpt = None,
    nodes: NodesOpt = None,
    gpus_per_node: GpusPerNodeOpt = None,
    inter_node_gbps: InterNodeGbpsOpt = None,
    activation_checkpointing: ActCkptOpt = False,
    sharding: ShardingOpt = None,
    attention_kernel: AttentionOpt = None,
    cuda_graphs: CudaGraphsOpt = False,
    compiled: CompiledOpt = False,
    fused_optimizer: FusedOptimizerOpt = False,
    comm_overlap: CommOverlapOpt = False,
    fp32_training: NoMixedPrecisionOpt = False,
    offload_fraction: OffloadOpt = None,
    prefix_cache_hit: PrefixHitOpt = None,
    speculative_tokens: SpeculativeOpt = None,
    device: DeviceOpt = None,
    as_json: JsonOpt = False,
    output: OutputOpt = None,
) -> None:
    """Model a workload: memory by part, FLOPs, roofline times and the bottleneck (no GPU)."""
    values = workload_values(locals())  # first, while locals() holds only the parameters
    options = model_options(sharding, attention_kernel, cuda_graphs, compiled, fused_optimizer,
                            comm_overlap, fp32_training, offload_fraction, prefix_cache_hit,
                            speculative_tokens)
    report = build_estimate_report(values, device, options)
    print_notes(report.notes)
    publish(report, render, as_json, output)


def register(app: typer.Typer) -> None:
    """Register `estimate`."""
    app.command("estimate")(estimate_command)
