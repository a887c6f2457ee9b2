"""Placeholder: this command module is being written (see the open issues)."""

import typer


def register(app: typer.Typer) -> None:
    """Register nothing yet."""
