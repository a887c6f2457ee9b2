"""`hwadvisor probe`: what hardware is here."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from hwadvisor.commands.output import console, emit_report, note
from hwadvisor.models import Device, Report


def _gb(value: int | None) -> str:
    return f"{value / 1e9:.1f} GB" if value else "—"


def _fmt(value: object, unit: str = "") -> str:
    return "—" if value is None else f"{value}{unit}"


def device_table(report: Report) -> Table:
    """A rich table of the host and its devices."""
    table = Table(title="hwadvisor probe", show_lines=False)
    table.add_column("what")
    table.add_column("value")
    host = report.host
    table.add_row("host", f"{_fmt(host.cpu_model)} · {_fmt(host.cpu_cores)} cores / "
                          f"{_fmt(host.cpu_threads)} threads · RAM {_gb(host.memory_total_bytes)} "
                          f"({_gb(host.memory_available_bytes)} free) · {_fmt(host.os)}")
    table.add_row("device class", str(report.device_class))
    for device in report.devices:
        table.add_row(f"device {device.index}", _device_line(device))
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
    parts.append(f"profile {device.profile_id or '—'} · source {device.source}")
    return "\n".join(parts)


def probe(
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON on stdout."),
    output: Path | None = typer.Option(None, "--output", "-o", help="Write the JSON report here (atomically)."),
) -> None:
    """Detect the host and its accelerators (no torch import: starts fast)."""
    from hwadvisor.probe import collect

    report = collect()
    for line in report.notes:
        note(line)
    emit_report(report, as_json, output)
    if not as_json:
        console.print(device_table(report))


def register(app: typer.Typer) -> None:
    """Register `probe`."""
    app.command("probe")(probe)
