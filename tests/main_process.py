"""Run hwadvisor's entry point in a fresh interpreter, after some set-up code of the test's."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def run_main(setup: str, argv: list[str], timeout_s: float = 60,
             env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run `setup` (Python lines), then `hwadvisor ARGV` through __main__.main, at the repo root.

    The set-up runs first, so it can stand in for what start-up would load (a hung library,
    an interrupt, a thread still working); the process's exit status and streams come back.
    """
    code = (f"import sys\n{setup}\nsys.argv = {['hwadvisor', *argv]!r}\n"
            "from hwadvisor.__main__ import main\nmain()\n")
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout_s, check=False, env=env)
