"""No exit 70 from the environment: any COLUMNS or LINES, and a signal during any lazy build.

Before (issue 43): COLUMNS=0 ended most commands in exit 70 (textwrap refuses a width of 0;
compare and profiles list printed nothing at all), and 3 of 56 early signals landed while
pydantic built a validator, which replaced the KeyboardInterrupt: "internal error ... please
report it". Each case here is a fresh interpreter, as the user's shell starts one.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import report_factory as factory
from test_fuzz import Cli

from hwadvisor.cli import signals
from hwadvisor.report.io import write_report

REPO = Path(__file__).resolve().parents[2]
COLUMNS = ["0", "-1", "x", "1000000000000000000"]


def _hwadvisor(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, **env}
    return subprocess.run([sys.executable, "-m", "hwadvisor", *argv], cwd=REPO, env=full,
                          capture_output=True, text=True, timeout=120, check=False)


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    folder = tmp_path_factory.mktemp("reports")
    base, cur = folder / "b.json", folder / "c.json"
    write_report(base, factory.validate_report())
    write_report(cur, factory.validate_report(copy_gbps=3000.0))
    return str(base), str(cur)


@pytest.mark.parametrize("columns", COLUMNS)
def test_any_columns_value_prints_and_exits_as_documented(columns: str,
                                                          reports: tuple[str, str]) -> None:
    base, cur = reports
    for argv, code in ((["profiles", "list"], 0),
                       (["compare", base, cur, "--min-effect", "20"], 1),
                       (["estimate", "--model", "llama-3-8b", "--device", "h100-sxm"], 0)):
        done = _hwadvisor(argv, {"COLUMNS": columns, "LINES": columns})
        assert done.returncode == code, (argv, columns, done.stderr[-800:])
        assert done.stdout.strip(), (argv, columns)
        assert "Traceback" not in done.stderr


def test_a_signal_that_a_library_turns_into_another_error_exits_as_the_signal(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """pydantic building a validator when SIGTERM lands raises its own error, not ours."""
    from hwadvisor.report import schema

    def building(*_args: object, **_kwargs: object) -> str:
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)  # the handler raises here
        except KeyboardInterrupt:
            raise RuntimeError("validator build failed") from None
        return "{}"

    monkeypatch.setattr(schema, "schema_json", building)
    code, _out, err = Cli().run(["schema"])
    signals.reset()
    assert code == 143, err
    assert "internal error" not in err and "terminated" in err


def test_early_signals_fuzzed_end_in_130_or_143_or_the_commands_own_code() -> None:
    """Signals at random times in the first ~0.8 s (imports, lazy validator builds, output)."""
    rng = random.Random(43)
    commands = [["profiles", "list"], ["schema"], ["probe", "--json"],
                ["estimate", "--model", "llama-3-8b", "--device", "h100-sxm"]]
    env = {**os.environ, "COLUMNS": "100"}
    for _ in range(10):
        argv = rng.choice(commands)
        signum = rng.choice([signal.SIGINT, signal.SIGTERM])
        proc = subprocess.Popen([sys.executable, "-m", "hwadvisor", *argv], cwd=REPO, env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        time.sleep(rng.uniform(0.05, 0.8))
        proc.send_signal(signum)
        _out, err = proc.communicate(timeout=120)
        expected = 130 if signum == signal.SIGINT else 143
        assert proc.returncode in (0, expected), (argv, signum, proc.returncode, err[-800:])
        assert "internal error" not in err and "Traceback" not in err, (argv, err[-800:])
