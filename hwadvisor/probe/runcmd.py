"""One door to external commands: argv list, a timeout, no shell, never raises.

Probes call tools that may be missing (rocm-smi on a laptop), hang (a wedged driver) or print
garbage; a probe must survive all three, so this returns the command's stdout or None.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Sequence

# A runner takes (argv, timeout_s) and returns stdout, or None when the command did not succeed.
# Backends take one as an argument so tests replay captured outputs instead of running tools.
Runner = Callable[[list[str], float], str | None]

DEFAULT_TIMEOUT_S = 10.0


def run_command(argv: Sequence[str], timeout_s: float = DEFAULT_TIMEOUT_S) -> str | None:
    """Run argv without a shell; stdout, or None on a missing binary, timeout or failed exit."""
    if not argv:
        return None
    try:
        done = subprocess.run(
            list(argv),
            capture_output=True,
            text=True,
            errors="replace",  # a tool printing stray bytes must not raise UnicodeDecodeError
            timeout=timeout_s,
            check=False,
        )
    except (OSError, subprocess.SubprocessError, ValueError):
        # OSError covers FileNotFoundError and PermissionError; SubprocessError covers
        # TimeoutExpired; ValueError covers an argv with a NUL byte.
        return None
    return done.stdout if done.returncode == 0 else None
