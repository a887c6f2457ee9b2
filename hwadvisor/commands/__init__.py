"""The typer commands; each module registers its own commands on the app."""

from __future__ import annotations

import typer


def register_all(app: typer.Typer) -> None:
    """Register every command module's commands on app, in help order."""
    from hwadvisor.commands import estimate, probe, profiles, recommend, reports, validate

    for module in (probe, profiles, estimate, recommend, validate, reports):
        module.register(app)
