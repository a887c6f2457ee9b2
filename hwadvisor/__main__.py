"""Entry point of `hwadvisor` and `python -m hwadvisor`: start-up options, then the CLI."""

from __future__ import annotations

import gc
import os
import sys

# Young-generation collections every 100,000 allocations instead of 700: loading the models and
# building their schemas allocates millions of objects and would trigger thousands of
# collections that find almost nothing (mypy does the same: gc.set_threshold(200 * 1000, 30,
# 30) in mypy/build.py).
GC_THRESHOLD = (100_000, 50, 100)


def main() -> None:
    """Run the hwadvisor CLI."""
    # pydantic scans every installed distribution's entry points for plugins when the first
    # model class is built: ~0.1 s of the probe's start-up in a large environment, for plugins
    # hwadvisor never uses. A user who sets the variable keeps their own value.
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    gc.set_threshold(*GC_THRESHOLD)
    from hwadvisor.cli import streams

    closed = streams.prepare()  # a closed stdout, a closed stderr, a non-UTF-8 terminal
    if closed is not None:
        _exit(closed)
    try:
        # Signals are handled from the first line: Ctrl-C or SIGTERM while the modules load
        # exits 130 / 143 with one line, not a KeyboardInterrupt traceback.
        from hwadvisor.cli import signals

        signals.install()
        # ... held back while the modules load: a signal inside a native module's start-up
        # (pydantic_core's) turns into a Rust panic, not a KeyboardInterrupt. Loading takes
        # a fraction of a second; the signal is acted on right after.
        with signals.deferred():
            from hwadvisor.cli.startup import skip_plugin_discovery

            skip_plugin_discovery()
            from hwadvisor.cli.app import load_app

            app = load_app()
        app()
    except SystemExit as exc:
        try:
            _exit(exc.code)
        except KeyboardInterrupt:  # a signal as the command exits: its own code stands
            _exit(exc.code)
    except KeyboardInterrupt as exc:
        from hwadvisor.cli import signals

        code = signals.exit_code(exc)
        try:
            print("interrupted" if code == 130 else "terminated (SIGTERM)", file=sys.stderr)
        except (OSError, ValueError):
            pass
        sys.exit(code)


def _exit(code: object) -> None:
    """Exit with the command's code, skipping the interpreter's teardown when that is safe.

    Freeing every module and object one by one takes 40-70 ms on a small host, longer than
    many commands run. With the streams flushed and the exit handlers run there is nothing
    left to do, unless torch is loaded (its teardown releases devices and process groups), a
    profiler runs, or a non-daemon thread still works: then the usual exit. mypy exits the
    same way (mypy/util.py hard_exit: flush, then os._exit).
    """
    status = code if isinstance(code, int) else (0 if code is None else 1)
    _ignore_signals()  # the command is done: a Ctrl-C now must not turn its exit into a traceback
    if code is not None and not isinstance(code, int):
        print(code, file=sys.stderr)
    if "torch" in sys.modules or sys.getprofile() is not None or sys.gettrace() is not None \
            or _working_threads():
        sys.exit(status)  # a profiler or coverage tool writes its results at the usual exit
    import atexit

    try:
        atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
    except (OSError, ValueError):
        # A reader that went away while the last bytes were flushed: 141, as for a closed pipe.
        status = status or 141
    os._exit(status)


def _ignore_signals() -> None:
    """Ignore SIGINT and SIGTERM from here on (the main thread only can set handlers)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return
    for signum in (signal.SIGINT, signal.SIGTERM):
        try:
            signal.signal(signum, signal.SIG_IGN)
        except (OSError, ValueError):
            pass


def _working_threads() -> bool:
    """Whether a thread the usual exit would wait for is still running."""
    import threading

    main = threading.main_thread()
    return any(t is not main and not t.daemon and t.is_alive() for t in threading.enumerate())


if __name__ == "__main__":
    main()
