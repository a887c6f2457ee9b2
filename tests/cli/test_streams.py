"""Hostile environments end as documented, never exit 70 or a traceback.

Before (issue 30): a non-UTF-8 stdout (PYTHONIOENCODING=ascii) exited 70 on every table;
stdout on /dev/full exited 70; a closed stdout printed two tracebacks and exited 1; a closed
stderr made every command exit 1 (the gate code).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(os.name != "posix", reason="POSIX file descriptors")
ARGS = ["profiles", "list"]


def _run(args: list[str], env: dict[str, str] | None = None, **kw: object
         ) -> subprocess.CompletedProcess[bytes]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("HWADVISOR_")}
    return subprocess.run([sys.executable, "-m", "hwadvisor", *args], cwd=REPO,
                          env={**base, **(env or {})}, timeout=120, check=False, **kw)  # type: ignore[call-overload]


@pytest.mark.parametrize("args", [ARGS, ["--help"], ["profiles", "show", "h200-sxm"]])
def test_a_non_utf8_stdout_prints_what_it_can(args: list[str]) -> None:
    done = _run(args, {"PYTHONIOENCODING": "ascii"}, capture_output=True)
    assert done.returncode == 0, done.stderr
    assert b"Traceback" not in done.stderr and b"internal error" not in done.stderr
    done.stdout.decode("ascii")  # every byte is ASCII: unknown characters became '?'


def test_stdout_on_a_full_device_is_exit_2_with_a_message() -> None:
    with open("/dev/full", "wb") as full:
        done = _run(ARGS, stdout=full, stderr=subprocess.PIPE)
    assert done.returncode == 2
    assert b"error: cannot write to stdout" in done.stderr and b"hint:" in done.stderr
    assert b"Traceback" not in done.stderr


def test_a_closed_stdout_is_exit_141_with_one_message() -> None:
    done = _run(ARGS, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                pass_fds=(), preexec_fn=lambda: os.close(1))
    assert done.returncode == 141
    assert done.stderr.count(b"error:") == 1 and b"Traceback" not in done.stderr


@pytest.mark.parametrize("args, code", [(ARGS, 0), (["profiles", "show", "no-such-gpu"], 2)])
def test_a_closed_stderr_keeps_the_command_s_exit_code(args: list[str], code: int) -> None:
    done = _run(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                preexec_fn=lambda: os.close(2))
    assert done.returncode == code
