"""The typer app: builds it from hwadvisor.cli.commands and turns errors into exit codes."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any

import typer
from typer.core import TyperGroup

from hwadvisor import __version__
from hwadvisor.cli.commands import register_all
from hwadvisor.cli.console import err_console
from hwadvisor.errors import EXIT_CODES_HELP, ExitCode, UserError


def _usage_hint(exc: Exception) -> str:
    ctx = getattr(exc, "ctx", None)
    path = getattr(ctx, "command_path", None) or "hwadvisor"
    possibilities = getattr(exc, "possibilities", None)
    if possibilities:
        return f"did you mean {', '.join(sorted(possibilities))}? See '{path} --help'"
    return f"run '{path} --help' for the valid options and values"


class HwGroup(TyperGroup):
    """Runs commands in non-standalone mode so every error ends as message + hint + exit code."""

    def main(  # type: ignore[override]
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        """Run the group; turn usage and user errors into clean messages with exit codes."""
        try:
            rv = super().main(args=args, prog_name=prog_name or "hwadvisor",
                              complete_var=complete_var, standalone_mode=False, **extra)
        except UserError as exc:
            _print_error(exc.message, exc.hint)
            sys.exit(int(exc.code))
        except KeyboardInterrupt:
            err_console.print("interrupted")
            sys.exit(int(ExitCode.INTERRUPTED))
        except Exception as exc:
            # click (or typer's vendored copy) usage errors: duck-typed so either version works.
            if hasattr(exc, "format_message") and hasattr(exc, "exit_code"):
                if type(exc).__name__ == "Abort":
                    sys.exit(int(ExitCode.INTERRUPTED))
                if type(exc).__name__ == "NoArgsIsHelpError":
                    # A bare command group asks for help: show it, which is not an error.
                    # typer's rich mode has already printed it and left the message empty.
                    if exc.format_message().strip():
                        print(exc.format_message())
                    sys.exit(0)
                _print_error(exc.format_message(), _usage_hint(exc))
                sys.exit(int(exc.exit_code) if exc.exit_code else int(ExitCode.USAGE))
            if type(exc).__name__ == "Abort":
                sys.exit(int(ExitCode.INTERRUPTED))
            raise
        sys.exit(rv if isinstance(rv, int) else 0)


def _print_error(message: str, hint: str | None) -> None:
    # soft_wrap: an error is one line however long (paths), so logs and scripts can grep it;
    # escape: a message may hold brackets ("[AMD/ATI]") that rich would read as markup.
    from rich.markup import escape

    err_console.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    if hint:
        err_console.print(f"hint: {hint}", highlight=False, markup=False, soft_wrap=True)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"hwadvisor {__version__}")
        raise typer.Exit(0)


def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """Hardware-aware optimization advisor."""


def build_app(only: str | None = None) -> typer.Typer:
    """Build the typer app with every command, or with only the module of command `only`."""
    new_app = typer.Typer(
        cls=HwGroup,
        name="hwadvisor",
        help=(
            "Hardware-aware optimization advice for training and serving LLMs: probe the machine, "
            "model the workload, recommend changes and prove them with short kernel trials.\n\n"
            + EXIT_CODES_HELP
        ),
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=bool(os.environ.get("HWADVISOR_DEBUG")),
    )
    new_app.callback()(_root)
    register_all(new_app, only)
    return new_app


_full_app: typer.Typer | None = None


def __getattr__(name: str) -> Any:
    """`hwadvisor.cli.app`: the app with every command, built on first use."""
    global _full_app
    if name != "app":
        raise AttributeError(name)
    if _full_app is None:
        _full_app = build_app()
    return _full_app


def main() -> None:
    """Console-script entry point: imports only the module of the command that was asked for."""
    first = sys.argv[1] if len(sys.argv) > 1 else None
    build_app(first)()
