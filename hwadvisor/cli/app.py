"""The typer app: builds it from hwadvisor.cli.commands and turns errors into exit codes.

Every way a command can end maps to one code of `hwadvisor.errors.ExitCode`:
UserError -> its code (2, 3 or 4) with `error:` and `hint:` lines; a usage error -> 2;
Ctrl-C -> 130 and SIGTERM -> 143 (cli/signals.py); stdout closed early (`| head`) -> 141,
quietly; any other exception is a bug -> 70 with one line (the traceback with
HWADVISOR_DEBUG=1).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any

import typer
from typer.core import TyperGroup

from hwadvisor import __version__
from hwadvisor.cli import signals
from hwadvisor.cli.commands import register_all
from hwadvisor.cli.console import print_error
from hwadvisor.cli.helpfmt import tidy, use_tidy_classes
from hwadvisor.cli.streams import StdoutWriteError
from hwadvisor.errors import EXIT_CODES_HELP, ExitCode, UserError

ISSUES_URL = "https://github.com/hwadvisor/hwadvisor/issues"
CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"]}


def _usage_hint(exc: Exception) -> str:
    ctx = getattr(exc, "ctx", None)
    path = getattr(ctx, "command_path", None) or "hwadvisor"
    possibilities = getattr(exc, "possibilities", None)
    if possibilities:
        return f"did you mean {', '.join(sorted(possibilities))}? See '{path} --help'"
    return f"run '{path} --help' for the valid options and values"


class _Stopped(Exception):
    """A signal stopped the command (carried past typer, which would turn it into exit 130)."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


class _PipeClosed(Exception):
    """stdout's reader went away (carried past typer, which would turn it into exit 1)."""


class HwGroup(TyperGroup):
    """Runs commands in non-standalone mode so every error ends as message + hint + exit code."""

    def get_params(self, ctx: Any) -> list[Any]:
        """Return the params (help and completion options included), tidied for the help."""
        return tidy(super().get_params(ctx))

    def make_context(self, *args: Any, **kwargs: Any) -> Any:
        """Parse the command line (help is printed here); carry signals and closed pipes on."""
        try:
            return super().make_context(*args, **kwargs)
        except KeyboardInterrupt as exc:
            raise _Stopped(signals.exit_code(exc)) from None
        except BrokenPipeError:
            raise _PipeClosed() from None

    def invoke(self, ctx: Any) -> Any:
        """Invoke the command; carry signals and a closed pipe past typer's own handling."""
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt as exc:
            raise _Stopped(signals.exit_code(exc)) from None
        except BrokenPipeError:
            raise _PipeClosed() from None

    def main(  # type: ignore[override]
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        """Run the group; turn every way it can end into a message and an ExitCode."""
        restore = signals.install()
        sane_terminal_size()
        try:
            code = self._run(args, prog_name, complete_var, **extra)
        finally:
            restore()
        sys.exit(code)

    def _run(self, args: Sequence[str] | None, prog_name: str | None,
             complete_var: str | None, **extra: Any) -> int:
        stdout_before = _stdout_identity()
        args = hoist_root_flags(list(sys.argv[1:] if args is None else args))
        try:
            rv = super().main(args=args, prog_name=prog_name or "hwadvisor",
                              complete_var=complete_var, standalone_mode=False, **extra)
            _flush_stdout()
        except UserError as exc:
            _print_error(exc.message, exc.hint)
            return int(exc.code)
        except (_Stopped, KeyboardInterrupt) as exc:
            code = exc.code if isinstance(exc, _Stopped) else signals.exit_code(exc)
            _say("interrupted" if code == ExitCode.INTERRUPTED else "terminated (SIGTERM)")
            return code
        except (_PipeClosed, BrokenPipeError):
            return _pipe_closed()
        except SystemExit as exc:  # typer's own exits (completion, --help in some paths)
            if _stdout_identity() != stdout_before and _stdout_is_devnull():
                # rich met a closed pipe: it pointed stdout at /dev/null and exits 1
                return int(ExitCode.BROKEN_PIPE)
            return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except OSError as exc:
            if isinstance(exc, StdoutWriteError) or _stdout_broken():
                return _stdout_failed(exc)
            return _click_error(exc)
        except Exception as exc:
            if signals.received() is not None:
                # A signal landed inside a library's lazy build (pydantic building a validator
                # wraps or replaces the KeyboardInterrupt): the signal, not a bug, ended it.
                code = signals.exit_code()
                _say("interrupted" if code == ExitCode.INTERRUPTED else "terminated (SIGTERM)")
                return code
            return _click_error(exc)
        if isinstance(rv, int) and rv == ExitCode.INTERRUPTED and signals.received():
            return signals.exit_code()
        return rv if isinstance(rv, int) else 0


# The terminal sizes rich, textwrap and typer lay out in: COLUMNS=0 made textwrap raise and a
# width of 10**18 made rich build lines as long; either way the run ended in exit 70.
TERMINAL_LIMITS = {"COLUMNS": (20, 1000), "LINES": (5, 10_000)}


def sane_terminal_size() -> None:
    """Drop a COLUMNS or LINES that is no positive number; bring the rest within limits."""
    for name, (low, high) in TERMINAL_LIMITS.items():
        raw = os.environ.get(name)
        if raw is None:
            continue
        try:
            value = int(raw.strip())
        except ValueError:
            value = 0
        if value <= 0:
            del os.environ[name]  # as if unset: the terminal's own size, else 80 x 24
        else:
            os.environ[name] = str(min(max(value, low), high))


def _click_error(exc: Exception) -> int:
    """Click's usage errors (duck-typed: typer vendors click) as exit 2; anything else is a bug."""
    if hasattr(exc, "format_message") and hasattr(exc, "exit_code"):
        if type(exc).__name__ == "Abort":
            return signals.exit_code()
        if type(exc).__name__ == "NoArgsIsHelpError":
            # A bare command group asks for help: show it, which is not an error.
            # typer's rich mode has already printed it and left the message empty.
            if exc.format_message().strip():
                print(exc.format_message())
            return 0
        _print_error(exc.format_message(), _usage_hint(exc))
        return int(exc.exit_code) if exc.exit_code else int(ExitCode.USAGE)
    if type(exc).__name__ == "Abort":
        return signals.exit_code()
    return internal_error(exc)


def internal_error(exc: BaseException) -> int:
    """Report an unexpected exception: one line and a hint, the traceback only when debugging."""
    if debugging():
        import traceback

        traceback.print_exception(type(exc), exc, exc.__traceback__, file=sys.stderr)
    text = str(exc).strip().splitlines()
    detail = f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
    _print_error(f"internal error: {detail}",
                 f"this is a bug in hwadvisor {__version__}; please report it with the command "
                 f"line at {ISSUES_URL} (HWADVISOR_DEBUG=1 prints the traceback)")
    return int(ExitCode.INTERNAL)


def _pipe_closed() -> int:
    """Return 141 after pointing stdout at /dev/null (its reader is gone; exit stays quiet)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # no real fd (a test runner's stream)
        pass
    return int(ExitCode.BROKEN_PIPE)


def _stdout_broken() -> bool:
    """Tell whether stdout cannot take what is written to it (a full device, an I/O error)."""
    try:
        sys.stdout.flush()
    except (OSError, ValueError):
        return True
    return False


def _stdout_failed(exc: OSError) -> int:
    """Report a failed write to stdout (exit 2); its unwritten bytes are dropped."""
    _print_error(f"cannot write to stdout: {exc.strerror or exc}",
                 "free space where stdout goes, or redirect it elsewhere (> FILE), or use "
                 "--output FILE")
    _pipe_closed()  # stdout now points at /dev/null: the buffered bytes leave quietly
    try:
        sys.stdout.flush()
    except (OSError, ValueError):
        pass
    return int(ExitCode.USAGE)


def _stdout_identity() -> tuple[int, int] | None:
    """(device, inode) of file descriptor 1, or None (no real descriptor: a test runner)."""
    try:
        st = os.fstat(1)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _stdout_is_devnull() -> bool:
    try:
        return os.path.samestat(os.fstat(1), os.stat(os.devnull))
    except OSError:
        return False


def _flush_stdout() -> None:
    """Flush stdout now, so a closed pipe shows up here and not as noise at interpreter exit."""
    sys.stdout.flush()


def _say(line: str) -> None:
    try:
        print(line, file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass


def _print_error(message: str, hint: str | None) -> None:
    print_error(message, hint)


def debugging() -> bool:
    """Tell whether HWADVISOR_DEBUG asks for tracebacks (0, false, no, off and empty do not)."""
    return os.environ.get("HWADVISOR_DEBUG", "").strip().lower() not in ("", "0", "false", "no",
                                                                          "off")


# The root options a user may also write after the command (`hwadvisor probe -q`): moved to
# the front before click parses, up to a `--` that ends the options.
ROOT_FLAGS = ("-q", "--quiet", "-v", "--verbose", "-V", "--version")


def hoist_root_flags(args: list[str]) -> list[str]:
    """Return args with the root flags that follow the command moved before it."""
    end = args.index("--") if "--" in args else len(args)
    flags = [a for a in args[:end] if a in ROOT_FLAGS]
    rest = [a for a in args[:end] if a not in ROOT_FLAGS]
    return flags + rest + args[end:]


def _version(value: bool) -> None:
    if value:
        typer.echo(f"hwadvisor {__version__}")
        raise typer.Exit(0)


def _root(
    version: bool = typer.Option(
        False, "--version", "-V", callback=_version, is_eager=True,
        help="Print the version and exit."
    ),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No 'note:' lines on stderr."),
    verbose: bool = typer.Option(
        False, "--verbose", "-v", help="Print the traceback of an internal error too."),
) -> None:
    """Hardware-aware optimization advisor."""
    from hwadvisor.cli import console

    console.QUIET = quiet and not verbose
    if verbose:
        os.environ["HWADVISOR_DEBUG"] = "1"


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
        add_completion=True,
        context_settings=CONTEXT_SETTINGS,
        pretty_exceptions_enable=debugging(),
    )
    new_app.callback()(_root)
    register_all(new_app, only)
    use_tidy_classes(new_app)
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


def load_app() -> typer.Typer:
    """Build the app for this command line: only the module of the command that was asked for."""
    first = sys.argv[1] if len(sys.argv) > 1 else None
    return build_app(first)


def main() -> None:
    """Console-script entry point: imports only the module of the command that was asked for."""
    load_app()()
