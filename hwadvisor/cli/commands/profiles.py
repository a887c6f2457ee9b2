"""`hwadvisor profiles list|show`: the shipped datasheet profiles, as a table or plain JSON."""

from __future__ import annotations

import json
import sys
from typing import Any

import typer
from rich.table import Table

from hwadvisor.cli.console import console, esc, keep_words, print_wrapped
from hwadvisor.errors import UserError
from hwadvisor.models import DeviceClass

profiles_app = typer.Typer(
    name="profiles",
    help="Datasheet profiles of known devices (plan for one with --device ID).",
)

CLASS_CHOICES = [c.value for c in DeviceClass]
# Why a class has no datasheet profile, said instead of an empty table.
NO_PROFILES = {
    "cpu": "No CPU profiles: a CPU is read from this machine (cores, RAM; 'hwadvisor probe "
           "--measure' measures its bandwidth and matmul speed), not from a datasheet. "
           "Plan for it by running hwadvisor on it, without --device.",
}


@profiles_app.callback(invoke_without_command=True)
def _profiles_root(ctx: typer.Context) -> None:
    """Datasheet profiles of known devices (plan for one with --device ID)."""
    if ctx.invoked_subcommand is None:
        # Bare `hwadvisor profiles` shows its help and succeeds rather than erroring.
        typer.echo(ctx.get_help())
        raise typer.Exit(0)


def _write_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2) + "\n")
    sys.stdout.flush()


def _parse_class(value: str | None) -> DeviceClass | None:
    """Parse --class; a bad value is a UserError naming the choices."""
    if value is None:
        return None
    try:
        return DeviceClass(value.strip().lower())
    except ValueError:
        raise UserError(
            f"unknown device class {value!r}", hint=f"use one of: {', '.join(CLASS_CHOICES)}"
        ) from None


def _num(value: float | None, unit: str = "") -> str:
    return "—" if value is None else f"{value:g}{unit}"


def profiles_table(rows: list[Any]) -> Table:
    """Build a rich table of profiles by class: id, name, memory, bandwidth, bf16 and fp8."""
    table = Table(title="hwadvisor profiles (dense datasheet peaks, TFLOP/s)")
    table.add_column("id", no_wrap=True)
    table.add_column("name", ratio=2)
    table.add_column("memory GB", ratio=1)
    for column in ("GB/s", "bf16", "fp8"):
        table.add_column(column, justify="right", no_wrap=True)
    group = None
    for p in rows:
        if p.device_class != group:  # one heading per class instead of a class column
            group = p.device_class
            table.add_row(f"[bold]{esc(group.value)}[/]", "", "", "", "", "")
        derived = "*" if any(f.startswith("peak_tflops.") for f in p.derived_figures) else ""
        table.add_row(
            esc(p.id),
            esc(p.name),
            esc(f"{p.memory_gib:g} {p.memory_type}" + (" unified" if p.unified_memory else "")),
            _num(p.memory_bandwidth_gbps),
            _num(p.peak_tflops.get("bf16")) + (derived if "bf16" in p.peak_tflops else ""),
            _num(p.peak_tflops.get("fp8")),
        )
    return table


@profiles_app.command("list")
def list_profiles(
    device_class: str | None = typer.Option(
        None, "--class", help=f"Only this class: {', '.join(CLASS_CHOICES)}."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the profiles as a JSON list."),
) -> None:
    """List the known device profiles."""
    from hwadvisor import profiles

    chosen = _parse_class(device_class)
    rows = profiles.by_class(chosen)
    if as_json:
        _write_json([p.model_dump(mode="json") for p in rows])
        return
    if not rows:
        why = NO_PROFILES.get(chosen.value if chosen else "", "No profile of this class ships.")
        print_wrapped([why])
        return
    console.print(keep_words(profiles_table(rows), cap=12))
    print_wrapped(["* derived, not a vendor figure (see 'hwadvisor profiles show ID')"])


def _detail_table(p: Any) -> Table:
    table = Table(title=esc(f"{p.name} ({p.id})"), show_header=False)
    table.add_column("what")
    table.add_column("value")
    rows: list[tuple[str, str]] = []
    rows.append(("class / vendor", f"{p.device_class.value} / {p.vendor}"))
    rows.append(("architecture", f"{p.architecture or '—'} · {p.compute_capability or '—'}"))
    rows.append(("memory", f"{p.memory_gib:g} GB {p.memory_type}"
                  + (f" (options {', '.join(f'{m:g}' for m in p.memory_options_gib)})"
                     if p.memory_options_gib else "")
                  + (" unified" if p.unified_memory else "")))
    rows.append(("bandwidth", _num(p.memory_bandwidth_gbps, " GB/s")))
    peaks = ", ".join(f"{k} {v:g}" for k, v in p.peak_tflops.items()) or "—"
    rows.append(("dense peaks (TFLOP/s; int8 TOPS)", peaks))
    for path in p.compute:  # the on-device rates the plans use, with where each came from
        rows.append((f"{path.unit} compute ({path.kind})",
                     f"{path.tflops:g} {'TOPS' if path.dtype == 'int8' else 'TFLOP/s'} "
                     f"{path.dtype}, {path.via} — {path.basis}"))
    rows.append(("power", _num(p.power_w, " W")))
    if p.interconnect is not None:
        link = p.interconnect
        parts = [f"PCIe Gen{link.pcie_generation}" if link.pcie_generation else "PCIe —"]
        if link.nvlink_gbps_bidirectional is not None:
            parts.append(f"NVLink {link.nvlink_gbps_bidirectional:g} GB/s both directions")
        if link.fabric:
            parts.append(f"{link.fabric} {_num(link.fabric_gbps_bidirectional, ' GB/s')}")
        rows.append(("interconnect", " · ".join(parts)))
    if p.mobile is not None:
        rows.append(("per-app memory (estimate)",
                      f"{p.mobile.app_memory_limit_fraction:.0%} of RAM — {p.mobile.basis}"))
    if p.derived_figures:
        rows.append(("derived figures", ", ".join(p.derived_figures)))
    rows.append(("notes", "\n".join(p.notes) or "—"))
    for what, value in rows:
        table.add_row(esc(what), esc(value))
    return table


def _source_lines(p: Any) -> list[str]:
    """Return the profile's sources, one line each (a URL is not wrapped in a table cell)."""
    return ["sources:", *(f"  {group}: {url}" for group, urls in p.sources.items()
                          for url in urls),
            *(f"  {path.unit} compute: {path.source}" for path in p.compute)]


@profiles_app.command("show")
def show_profile(
    profile_id: str = typer.Argument(..., metavar="ID", help="Profile id, e.g. h200-sxm."),
    as_json: bool = typer.Option(False, "--json", help="Print the profile as a JSON object."),
) -> None:
    """Show one profile with its notes and sources."""
    from hwadvisor import profiles

    profile = profiles.get(profile_id)
    if as_json:
        _write_json(profile.model_dump(mode="json"))
        return
    console.print(_detail_table(profile))
    print_wrapped(_source_lines(profile))


def register(app: typer.Typer) -> None:
    """Register `profiles list` and `profiles show`."""
    app.add_typer(profiles_app, name="profiles")
