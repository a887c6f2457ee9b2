"""`hwadvisor estimate`: memory, FLOPs, roofline times and the bottleneck of a workload."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from hwadvisor import units
from hwadvisor.cli.console import (
    NO_OUTPUT,
    Output,
    begin_view,
    console,
    end_view,
    esc,
    output_options,
    print_report_notes,
    print_wrapped,
    publish,
    write_html,
)
from hwadvisor.cli.load import NO_LOAD, LoadRequest, load_options
from hwadvisor.cli.options import (
    DeviceOpt,
    calibration_options,
    model_options,
    workload_options,
)
from hwadvisor.models import Estimate, ModelOptions, Report, Workload
from hwadvisor.workload import WorkloadRequest

DASH = "—"  # an unknown value in a table


def _gb(value: float | int | None) -> str:
    return units.gb(value, DASH)


def _s(value: float | None) -> str:
    return units.seconds(value, DASH)


def memory_table(est: Estimate, per_gpu: bool = True) -> Table:
    """Memory by part (per GPU on GPUs; a CPU, Mac or phone has one pool)."""
    mem = est.memory
    table = Table(title="memory per GPU" if per_gpu else "memory")
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
        table.add_row("training step", _s(t.train_step_s), _s(t.train_compute_s),
                      _s(t.train_memory_s))
        table.add_row("optimizer step", _s(t.optimizer_s), "", "")
    else:
        table.add_row("prefill", _s(t.prefill_s), _s(t.prefill_compute_s),
                      _s(t.prefill_memory_s))
        table.add_row("decode (per token)", _s(t.decode_step_s), _s(t.decode_compute_s),
                      _s(t.decode_memory_s))
        table.add_row("request: TTFT + (gen-1) x TPOT", _s(t.request_latency_s), "", "")
    table.add_row("launch overhead", _s(t.launch_overhead_s), "", "")
    if workload.gpus > 1:
        table.add_row("communication (exposed)",
                      f"{_s(t.communication_s)} ({_s(t.communication_exposed_s)})", "", "")
    if est.tokens_per_s is not None:
        table.add_row("throughput", units.rate(est.tokens_per_s, "tokens/s", DASH), "", "")
    return table


def render(report: Report, explain: bool = True) -> None:
    """Print the estimate: the sentence to act on, then memory, times and the bottleneck."""
    from hwadvisor.report.plain import bottom_line, on_gpu

    est, workload = report.estimate, report.workload
    if est is None or workload is None:
        return
    begin_view()
    print_wrapped([bottom_line(report)], bold_first=True)
    if report.serving is not None:
        from hwadvisor.report.servingtext import serving_lines

        print_wrapped(serving_lines(report.serving))
    params = f"{(est.params_total or 0) / 1e9:.2f}B params"
    if est.params_active and est.params_total and est.params_active < est.params_total:
        params += f" ({est.params_active / 1e9:.2f}B active)"
    device = report.devices[0].name if report.devices else "cpu"
    console.print(f"[bold]{esc(workload.model)}[/] · {esc(workload.phase)} · {params} · "
                  f"{workload.gpus} x {esc(device)}")
    console.print(memory_table(est, on_gpu(report)))
    console.print(times_table(est, workload))
    print_wrapped([f"bottleneck: {est.bottleneck} — {est.bottleneck_why}"])
    print_wrapped(f"  · {line}" for line in est.assumptions)
    end_view(report, explain)


@workload_options
@model_options
@calibration_options
@load_options
@output_options("as_json", "output", "html", "explain")
def estimate_command(
    request: WorkloadRequest,
    options: ModelOptions,
    calibration: Path | None,
    device: DeviceOpt = None,
    load: LoadRequest = NO_LOAD,
    out: Output = NO_OUTPUT,
) -> None:
    """Model a workload: memory by part, FLOPs, roofline times and the bottleneck (no GPU).

    With --rate or --concurrency: its latency percentiles under that load, against --ttft,
    --tpot and --e2e.
    """
    from hwadvisor import pipeline

    report = pipeline.estimate_report(request, device, options, calibration=calibration,
                                      load=load if load.given() else None)
    print_report_notes(report)
    write_html(report, out.html)
    publish(report, lambda r: render(r, out.explain is not False), out)


def register(app: typer.Typer) -> None:
    """Register `estimate`."""
    app.command("estimate")(estimate_command)
