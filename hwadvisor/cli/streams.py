"""The standard streams as the environment hands them over, made safe before the CLI starts.

Four environments turned into exit 70 or 1 (issue 30): an stdout whose encoding cannot spell
the output (PYTHONIOENCODING=ascii, a latin-1 terminal), stdout on a full device (/dev/full),
a closed stdout, and a closed stderr. Each now ends as documented (docs/exit-codes.md):

- a non-UTF-8 stdout or stderr keeps its encoding; characters it lacks are written as '?'
  (errors="replace") rather than raising UnicodeEncodeError;
- a closed stderr is pointed at /dev/null: messages are lost, the command's exit code is not;
- a closed stdout: one `error:` line on stderr and exit 141 (BROKEN_PIPE, "stdout was closed
  before the output was written"), before any work is done;
- a write to stdout that fails (ENOSPC on /dev/full, EIO) is `error:` + exit 2 (app.py).
"""

from __future__ import annotations

import io
import os
import sys

STDOUT_CLOSED = "stdout is closed: there is nowhere to write the output"
STDOUT_CLOSED_HINT = "run with stdout open; redirect it to /dev/null to discard the output"


class StdoutWriteError(OSError):
    """Writing to stdout failed (ENOSPC on /dev/full, EIO): not a bug, an environment."""


class _GuardedStdout(io.RawIOBase):
    """File descriptor 1, whose write errors say they came from stdout (see StdoutWriteError).

    A closed pipe stays BrokenPipeError: the CLI ends that quietly with 141.
    """

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return 1

    def isatty(self) -> bool:
        return os.isatty(1)

    def write(self, data: object) -> int:
        try:
            return os.write(1, data)  # type: ignore[arg-type]
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise StdoutWriteError(exc.errno, exc.strerror) from None


def _guard_stdout() -> None:
    """Re-wrap stdout over _GuardedStdout, keeping its encoding, errors and buffering."""
    old = sys.stdout
    try:
        old.flush()
        wrapped = io.TextIOWrapper(io.BufferedWriter(_GuardedStdout()),
                                   encoding=old.encoding, errors=old.errors,
                                   line_buffering=bool(old.line_buffering))
    except (AttributeError, ValueError, OSError):  # not a real text stream: leave it
        return
    sys.stdout = wrapped


def _fd_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def _reopen_devnull(fd: int) -> None:
    """Point a closed descriptor at /dev/null, so writes to it succeed and go nowhere."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    if devnull != fd:
        os.dup2(devnull, fd)
        os.close(devnull)


def _stream_for(fd: int) -> io.TextIOWrapper:
    return io.TextIOWrapper(io.FileIO(fd, "w", closefd=False), encoding="utf-8",
                            errors="replace", line_buffering=True)


def _tolerant(stream: object) -> None:
    """Write characters the stream's encoding lacks as '?' instead of failing."""
    encoding = str(getattr(stream, "encoding", "") or "").lower().replace("-", "")
    reconfigure = getattr(stream, "reconfigure", None)
    if encoding != "utf8" and reconfigure is not None:
        try:
            reconfigure(errors="replace")
        except (ValueError, OSError):  # a stream already in use: leave it
            pass


def prepare() -> int | None:
    """Make stderr and stdout safe to write; return 141 when stdout is closed, else None."""
    if sys.stderr is None or not _fd_open(2):
        try:
            _reopen_devnull(2)
            sys.stderr = _stream_for(2)
        except OSError:
            pass
    _tolerant(sys.stderr)
    if sys.stdout is None or not _fd_open(1):
        try:
            print(f"error: {STDOUT_CLOSED}\nhint: {STDOUT_CLOSED_HINT}", file=sys.stderr,
                  flush=True)
        except (OSError, ValueError, AttributeError):
            pass
        try:  # nothing of the interpreter's own teardown may fail on it either
            _reopen_devnull(1)
            sys.stdout = _stream_for(1)
        except OSError:
            pass
        return 141
    _tolerant(sys.stdout)
    _guard_stdout()
    return None
