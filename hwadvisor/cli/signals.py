"""Ctrl-C (SIGINT) and SIGTERM: one path for both, and no report lost to a second signal.

The first signal raises `Interrupted` (a KeyboardInterrupt) in the main thread: the validator
stops the running trial and the command writes the partial report, marked interrupted, then
exits 130 (SIGINT) or 143 (SIGTERM, what CI runners send on a timeout): 128 + the signal.

Signals that follow within GRACE_S of the first are the same request (a key pressed three
times, a runner's SIGTERM then SIGINT): they are absorbed, so the partial report still gets
written. A signal later than that stops the command at once. Around the final write of a file
(`deferred`) even the first signal waits until the write is done.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType

from hwadvisor.errors import ExitCode

GRACE_S = 2.0
HANDLED = (signal.SIGINT, signal.SIGTERM)


class Interrupted(KeyboardInterrupt):
    """Raised in the main thread on SIGINT or SIGTERM; `signum` says which."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class _State:
    first: int | None = None  # the first signal of this run
    first_at: float = 0.0
    deferring: int = 0  # nesting depth of deferred()
    pending: bool = False  # the first signal came during deferred(): raise when it ends


_state = _State()


def _handler(signum: int, frame: FrameType | None) -> None:
    now = time.monotonic()
    if _state.first is None:
        _state.first, _state.first_at = signum, now
        if _state.deferring:
            _state.pending = True
            return
        raise Interrupted(signum)
    if now - _state.first_at < GRACE_S:
        return  # the same request again: let the partial report be written
    raise Interrupted(signum)  # asked again, later: stop now


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def install() -> Callable[[], None]:
    """Handle SIGINT and SIGTERM from now on (main thread only); return the undo function."""
    reset()
    if not _main_thread():
        return lambda: None
    previous = {}
    for signum in HANDLED:
        try:
            previous[signum] = signal.signal(signum, _handler)
        except (OSError, ValueError):  # a platform without this signal
            continue

    def restore() -> None:
        for signum, handler in previous.items():
            try:
                signal.signal(signum, handler)
            except (OSError, ValueError, TypeError):
                pass

    return restore


def reset() -> None:
    """Forget signals of an earlier run (each command starts clean)."""
    _state.first, _state.first_at, _state.deferring, _state.pending = None, 0.0, 0, False


def received() -> int | None:
    """Return the first signal this run received, or None."""
    return _state.first


def check() -> None:
    """Raise Interrupted when a signal came but its exception was lost on the way.

    A signal that lands while C code runs (a lazy `import torch` loading its libraries) raises
    in the handler, but C code that clears Python errors can drop that exception: the run would
    then finish and exit 0 as if nothing was asked. The handler has recorded the signal, so
    checking between steps honours it.
    """
    if _state.first is not None and not _state.deferring:
        raise Interrupted(_state.first)


def exit_code(exc: BaseException | None = None) -> int:
    """Exit status for an interrupted run: 143 after SIGTERM, else 130 (Ctrl-C)."""
    signum = getattr(exc, "signum", None) or _state.first
    return int(ExitCode.TERMINATED if signum == signal.SIGTERM else ExitCode.INTERRUPTED)


@contextmanager
def deferred() -> Iterator[None]:
    """Hold SIGINT/SIGTERM back while the body writes a file; a held first signal raises after."""
    if not _main_thread():
        yield
        return
    _state.deferring += 1
    try:
        yield
    finally:
        _state.deferring -= 1
    # Reached only when the write succeeded: a failed write's own error is not replaced.
    if _state.deferring == 0 and _state.pending and _state.first is not None:
        _state.pending = False
        raise Interrupted(_state.first)
