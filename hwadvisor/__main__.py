"""Entry point of `hwadvisor` and `python -m hwadvisor`: start-up options, then the CLI."""

from __future__ import annotations

import os


def main() -> None:
    """Run the hwadvisor CLI."""
    # pydantic scans every installed distribution's entry points for plugins when the first
    # model class is built: ~0.1 s of the probe's start-up in a large environment, for plugins
    # hwadvisor never uses. A user who sets the variable keeps their own value.
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    from hwadvisor.cli.app import main as cli_main

    cli_main()


if __name__ == "__main__":
    main()
