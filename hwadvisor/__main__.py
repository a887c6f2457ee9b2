"""Entry point of `hwadvisor` and `python -m hwadvisor`: start-up options, then the CLI."""

from __future__ import annotations

import os
import sys


def main() -> None:
    """Run the hwadvisor CLI."""
    # pydantic scans every installed distribution's entry points for plugins when the first
    # model class is built: ~0.1 s of the probe's start-up in a large environment, for plugins
    # hwadvisor never uses. A user who sets the variable keeps their own value.
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
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
    except KeyboardInterrupt as exc:
        from hwadvisor.cli import signals

        code = signals.exit_code(exc)
        try:
            print("interrupted" if code == 130 else "terminated (SIGTERM)", file=sys.stderr)
        except (OSError, ValueError):
            pass
        sys.exit(code)


if __name__ == "__main__":
    main()
