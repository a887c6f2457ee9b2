"""`hwadvisor probe`: what hardware is here."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from hwadvisor import units
from hwadvisor.cli import cluster
from hwadvisor.cli.cluster import ClusterOptions
from hwadvisor.cli.console import (
    NO_OUTPUT,
    GpuOpt,
    Output,
    console,
    esc,
    exit_if_interrupted,
    mark_interruption,
    output_options,
    print_report_notes,
    progress_bar,
    publish,
)
from hwadvisor.errors import ExitCode
from hwadvisor.models import Device, Report

if TYPE_CHECKING:
    from rich.table import Table


def _gb(value: int | None) -> str:
    return units.gb(value, "—") if value else "—"


def _fmt(value: object, unit: str = "") -> str:
    return "—" if value is None else f"{value}{unit}"


def device_table(report: Report) -> Table:
    """Build a rich table of the host and its devices."""
    from rich.table import Table

    table = Table(title="hwadvisor probe", show_lines=False)
    table.add_column("what")
    table.add_column("value")
    host = report.host
    table.add_row("host", esc(f"{_fmt(host.cpu_model)} · {_fmt(host.cpu_cores)} cores / "
                              f"{_fmt(host.cpu_threads)} threads · RAM "
                              f"{_gb(host.memory_total_bytes)} "
                              f"({_gb(host.memory_available_bytes)} free) · {_fmt(host.os)}"))
    table.add_row("device class", esc(report.device_class))
    for device in report.devices:
        table.add_row(f"device {device.index}", esc(_device_line(device)))
    return table


def _device_line(device: Device) -> str:
    parts = [
        f"{device.name} ({device.vendor}, {device.device_class})",
        f"memory {_gb(device.memory_total_bytes)}"
        + (" unified" if device.unified_memory else ""),
        f"bandwidth {_fmt(device.memory_bandwidth_gbps, ' GB/s')}",
    ]
    if device.compute_capability:
        parts.append(f"cc {device.compute_capability}")
    if device.formats:
        parts.append("formats " + ",".join(device.formats))
    if device.peak_tflops:
        peaks = ", ".join(f"{k} {v:g}" for k, v in device.peak_tflops.items())
        parts.append(f"datasheet TFLOP/s: {peaks}")
    if device.measured and device.measured.memory_bandwidth_gbps:
        parts.append(f"measured {device.measured.memory_bandwidth_gbps:.0f} GB/s")
    if device.measured and device.measured.matmul_tflops:
        peaks = ", ".join(f"{k} {v:.0f}" for k, v in device.measured.matmul_tflops.items())
        parts.append(f"measured TFLOP/s: {peaks}")
    parts.extend(_interconnect_lines(device))
    parts.extend(_nvidia_lines(device))
    parts.append(f"profile {device.profile_id or '—'} · source {device.source}")
    return "\n".join(parts)


def _interconnect_lines(device: Device) -> list[str]:
    """PCIe, NVLink and peer links, when the probe read them."""
    inter = device.interconnect
    if inter is None:
        return []
    lines: list[str] = []
    if inter.pcie is not None:
        pcie = inter.pcie
        lines.append(f"PCIe gen {_fmt(pcie.generation_current)}/{_fmt(pcie.generation_max)} "
                     f"x{_fmt(pcie.width_current)}/{_fmt(pcie.width_max)} (current/max)")
    if inter.nvlink is not None and inter.nvlink.links_active:
        nvlink = inter.nvlink
        lines.append(f"NVLink {_fmt(nvlink.version)}: {nvlink.links_active} links, "
                     f"{_fmt(nvlink.bandwidth_gbps, ' GB/s')} per direction")
    if inter.peers:
        peers = ", ".join(f"GPU{p.peer_index} {p.link or '?'}"
                          + ("" if p.p2p is None else (" p2p" if p.p2p else " no-p2p"))
                          for p in inter.peers)
        lines.append(f"peers: {peers}")
    if inter.cpu_affinity or inter.numa_node is not None:
        lines.append(f"CPU affinity {_fmt(inter.cpu_affinity)} · NUMA {_fmt(inter.numa_node)}")
    return lines


def _nvidia_lines(device: Device) -> list[str]:
    """Driver, clocks, power and state that NVML gave (null readings shown as —)."""
    nv = device.nvidia
    if nv is None:
        return []
    lines = [
        f"{_fmt(nv.architecture)} · driver {_fmt(nv.driver_version)} · "
        f"CUDA {_fmt(nv.cuda_driver_version)} · bus {_fmt(nv.memory_bus_width_bits, ' bit')}",
        f"SM clock {_fmt(nv.sm_clock_current_mhz)}/{_fmt(nv.sm_clock_max_mhz)} MHz · "
        f"mem clock {_fmt(nv.memory_clock_current_mhz)}/{_fmt(nv.memory_clock_max_mhz)} MHz",
        f"power {_fmt(nv.power_draw_w, ' W')} of {_fmt(nv.power_limit_w, ' W')} · "
        f"{_fmt(nv.temperature_c, ' °C')} · MIG {_onoff(nv.mig_mode)} · "
        f"ECC {_onoff(nv.ecc_enabled)}",
    ]
    if nv.throttle_reasons:
        lines.append("clock limits: " + ", ".join(nv.throttle_reasons))
    if nv.processes:
        procs = ", ".join(f"{p.pid} {p.name or '?'} {_gb(p.used_memory_bytes)}"
                          for p in nv.processes)
        lines.append(f"in use by: {procs} (used {_gb(nv.memory_used_bytes)})")
    return lines


def _onoff(value: bool | None) -> str:
    return "—" if value is None else ("on" if value else "off")


def measured_table(report: Report) -> Table | None:
    """Build the table of what --measure measured here: each figure, its unit, its trial."""
    from rich.table import Table

    rows = [(t.id, e.name, units.quantity(e.value, e.unit or "")) for t in report.trials
            if t.status == "ok" for e in t.effects]
    failed = [(t.id, t.status, t.reason or "") for t in report.trials if t.status != "ok"]
    if not rows and not failed:
        return None
    table = Table(title="measured here (probe --measure)")
    table.add_column("trial", no_wrap=True)
    table.add_column("figure")
    table.add_column("value", justify="right")
    for trial_id, name, value in rows:
        table.add_row(esc(trial_id), esc(name), esc(value))
    for trial_id, status, reason in failed:
        table.add_row(esc(trial_id), esc(status), esc(reason))
    return table


def render(report: Report, explain: bool = False) -> None:
    """Print the machine in a sentence, the probed devices, and what --measure measured."""
    from hwadvisor.cli.console import begin_view, end_view, print_wrapped
    from hwadvisor.report.plain import bottom_line

    begin_view()
    print_wrapped([bottom_line(report)], bold_first=True)
    console.print(device_table(report))
    measured = measured_table(report)
    if measured is not None:
        console.print(measured)
    end_view(report, explain)


@output_options("as_json", "output", "markdown", "markdown_overwrite", "explain")
@cluster.cluster_options
def probe(
    gpu: GpuOpt = None,
    out: Output = NO_OUTPUT,
    measure: bool = typer.Option(
        False, "--measure", help="Also measure memory bandwidth and matmul TFLOP/s here (needs "
        "torch; a few seconds per GPU); figures go to each device's 'measured'. Under "
        "torchrun or srun each rank measures its own GPU, then the job's collectives."),
    launcher: ClusterOptions = cluster.PLAIN_RUN,
) -> None:
    """Detect the host and its accelerators: GPU model, memory, bandwidth, formats, links.

    NVIDIA GPUs are read through NVML: driver, clocks, power, PCIe, NVLink and peers.

    With no GPU or driver the report lists none and says why on stderr (exit 0).

    Under torchrun or srun every rank probes its own node and GPU and rank 0 writes one
    report with a 'cluster' section (see docs/cluster.md).
    """
    import sys

    from hwadvisor import pipeline
    from hwadvisor.probe.select import parse_gpu_option

    gpus = parse_gpu_option(gpu) if gpu is not None else None
    launch = cluster.launch_for(launcher, out.output)
    bar = measure and not out.as_json and sys.stderr.isatty() and (launch is None
                                                                  or launch.rank == 0)
    with progress_bar(bar) as progress:
        if launch is None:
            report = pipeline.probe_report(measure, progress, gpus=gpus)
        else:
            job = pipeline.cluster_probe_report(launch, measure, launcher.timeout_s, progress)
            gathered = cluster.gathered(job, out.output, launcher.all_ranks)
            if gathered is None:
                return  # not rank 0: rank 0 writes the report
            report = gathered
    mark_interruption(report)
    print_report_notes(report)
    publish(report, cluster.with_cluster(lambda r: render(r, bool(out.explain))), out)
    exit_if_interrupted(report)
    if (measure and any(t.status == "error" for t in report.trials)) or cluster.failed(report):
        raise typer.Exit(int(ExitCode.TRIALS_FAILED))


def register(app: typer.Typer) -> None:
    """Register `probe`."""
    app.command("probe")(probe)
