"""The typer commands; each module registers its own commands on the app."""

from __future__ import annotations

import importlib

import typer

# Command name -> the module that registers it, in help order. Data, so that `hwadvisor probe`
# can import only hwadvisor.cli.commands.probe: start-up time is a target of the probe.
COMMAND_MODULES: dict[str, str] = {
    "probe": "probe",
    "profiles": "profiles",
    "estimate": "estimate",
    "recommend": "recommend",
    "validate": "validate",
    "schema": "reports",
    "compare": "reports",
    "plot": "reports",
    "report": "reports",
}


def register_all(app: typer.Typer, only: str | None = None) -> None:
    """Register the commands on app: all of them, or only the module of the command `only`."""
    wanted = [COMMAND_MODULES[only]] if only in COMMAND_MODULES else COMMAND_MODULES.values()
    for name in dict.fromkeys(wanted):
        importlib.import_module(f"hwadvisor.cli.commands.{name}").register(app)
