"""Ctrl-C and SIGTERM: partial report written, exit 130 / 143, nothing lost to more signals.

Before: three Ctrl-C within 0.1 s lost the report with nothing on stderr; Ctrl-C during
start-up printed a KeyboardInterrupt traceback; SIGTERM (what CI runners send on a timeout)
killed the run without a report.
The runs are real processes sent real signals; the trial is a stand-in that sleeps (patched
into the validator before the CLI starts), so no test depends on a trial's speed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from main_process import run_main

from hwadvisor.cli import signals

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(os.name != "posix", reason="POSIX signals")

# A validate run whose only trial announces itself in a file, then sleeps.
SLOW_VALIDATE = """
import sys, time
from pathlib import Path
import hwadvisor.validator.runner as runner
from hwadvisor.models import TrialResult

MARKER, OUT, MD = sys.argv[1:4]

class Sleeper:
    id, title, needs = "memory-bandwidth", "sleeper", "nothing"
    def unsupported_reason(self, ctx):
        return None
    def run(self, ctx):
        Path(MARKER).write_text("started")
        time.sleep(60)
        return TrialResult(id=self.id, status="ok")

runner.get_trial = lambda trial_id: Sleeper()
sys.argv = ["hwadvisor", "validate", "--trial", "memory-bandwidth", "--trial", "matmul-peak",
            "-o", OUT, "--markdown", MD]
from hwadvisor.__main__ import main
main()
"""


def _start(tmp_path: Path) -> tuple[subprocess.Popen[str], Path, Path, Path]:
    marker, out, md = tmp_path / "started", tmp_path / "report.json", tmp_path / "summary.md"
    env = {k: v for k, v in os.environ.items() if not k.startswith("HWADVISOR_")}
    proc = subprocess.Popen([sys.executable, "-c", SLOW_VALIDATE, str(marker), str(out), str(md)],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)
    deadline = time.monotonic() + 60
    while not marker.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"the run did not start: {proc.communicate()}")
        time.sleep(0.05)
    return proc, out, md, marker


def _finish(proc: subprocess.Popen[str]) -> tuple[int, str, str]:
    try:
        stdout, stderr = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    return proc.returncode, stdout, stderr


@pytest.mark.parametrize("signum, code, word", [
    (signal.SIGINT, 130, "Ctrl-C"), (signal.SIGTERM, 143, "SIGTERM")])
def test_one_signal_writes_the_partial_report(tmp_path: Path, signum: int, code: int,
                                              word: str) -> None:
    proc, out, md, _ = _start(tmp_path)
    proc.send_signal(signum)
    rc, _, stderr = _finish(proc)
    assert rc == code, stderr
    assert "Traceback" not in stderr
    assert f"interrupted by {word}" in stderr
    report = json.loads(out.read_text())
    assert report["interrupted"] is True
    assert [t["status"] for t in report["trials"]] == ["interrupted"]
    assert word.replace("Ctrl-C", "Ctrl-C") in report["trials"][0]["reason"]
    assert "hwadvisor validate report" in md.read_text()


@pytest.mark.parametrize("signums", [
    (signal.SIGINT, signal.SIGINT, signal.SIGINT),
    (signal.SIGTERM, signal.SIGINT, signal.SIGTERM),
])
def test_three_signals_within_a_tenth_of_a_second(tmp_path: Path,
                                                  signums: tuple[int, ...]) -> None:
    proc, out, _, _ = _start(tmp_path)
    for signum in signums:
        proc.send_signal(signum)
        time.sleep(0.03)
    rc, _, stderr = _finish(proc)
    assert rc == (143 if signums[0] == signal.SIGTERM else 130), stderr
    assert "interrupted" in stderr and "Traceback" not in stderr
    assert json.loads(out.read_text())["interrupted"] is True


def test_ctrl_c_during_start_up_is_one_line(tmp_path: Path) -> None:
    """KeyboardInterrupt while the CLI loads (here: raised where the app is built)."""
    setup = ("import hwadvisor.cli.app as app\n"
             "def boom():\n"
             "    raise KeyboardInterrupt\n"
             "app.load_app = boom")
    done = run_main(setup, ["probe"])
    assert done.returncode == 130
    assert done.stderr.strip() == "interrupted"


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads /proc/<pid>/maps")
@pytest.mark.parametrize("signum, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_real_signal_while_the_modules_load(signum: int, code: int) -> None:
    """A real signal once pydantic_core is loading (inside hwadvisor's imports): one line."""
    proc = subprocess.Popen([sys.executable, "-m", "hwadvisor", "probe", "--json"], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    maps = Path(f"/proc/{proc.pid}/maps")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if "_pydantic_core" in maps.read_text():
                break
        except OSError:
            pass
        time.sleep(0.002)
    proc.send_signal(signum)
    rc, _, stderr = _finish(proc)
    assert "Traceback" not in stderr, stderr
    assert rc in (0, code), (rc, stderr)  # 0: the probe was already done
    if rc == code:
        assert stderr.strip().splitlines()[-1] in ("interrupted", "terminated (SIGTERM)")


# A validate run whose first trial's lazy import "loses" the signal, as C code that clears
# Python's error would (torch's libraries loading): the handler ran, the exception vanished.
SWALLOWED_VALIDATE = """
import os, signal, sys
import hwadvisor.validator.runner as runner
from hwadvisor.models import TrialResult

OUT, SIGNUM = sys.argv[1], int(sys.argv[2])
ran = []

class Importer:
    id, title, needs = "memory-bandwidth", "importer", "nothing"
    def unsupported_reason(self, ctx):
        try:
            os.kill(os.getpid(), SIGNUM)  # arrives during the "import"
            for _ in range(1000):
                pass  # the handler runs here and raises ...
        except BaseException:
            pass  # ... and the import machinery drops it
        return None
    def run(self, ctx):
        ran.append(self.id)
        return TrialResult(id=self.id, status="ok")

runner.get_trial = lambda trial_id: Importer()
sys.argv = ["hwadvisor", "validate", "--trial", "memory-bandwidth", "--trial", "matmul-peak",
            "-o", OUT]
from hwadvisor.__main__ import main
main()
"""


@pytest.mark.parametrize("signum, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_lost_during_a_lazy_import_is_honoured(tmp_path: Path, signum: int,
                                                        code: int) -> None:
    out = tmp_path / "report.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("HWADVISOR_")}
    done = subprocess.run([sys.executable, "-c", SWALLOWED_VALIDATE, str(out), str(int(signum))],
                          cwd=REPO, capture_output=True, text=True, timeout=60, check=False,
                          env=env)
    assert done.returncode == code, done.stderr
    report = json.loads(out.read_text())
    assert report["interrupted"] is True
    assert [t["id"] for t in report["trials"]][-1] == "matmul-peak"
    assert report["trials"][-1]["status"] == "interrupted"  # the next trial did not run


# --------------------------------------------------------------------------- in process


@pytest.fixture
def handlers():
    restore = signals.install()
    yield
    restore()


def test_signal_inside_a_write_is_held_until_it_is_done(handlers, tmp_path: Path) -> None:
    from hwadvisor.report.io import write_text

    path = tmp_path / "r.json"
    with pytest.raises(signals.Interrupted):
        with signals.deferred():
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGINT)  # a second one: absorbed
            time.sleep(0.01)
            write_text(path, "complete")
    assert path.read_text() == "complete"
    assert signals.exit_code() == 130


def test_sigterm_maps_to_143(handlers) -> None:
    with pytest.raises(signals.Interrupted) as caught:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(1)
    assert caught.value.signum == signal.SIGTERM and signals.exit_code() == 143


def test_signals_after_the_grace_period_stop_at_once(handlers, monkeypatch) -> None:
    with pytest.raises(signals.Interrupted):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(1)
    os.kill(os.getpid(), signal.SIGINT)  # within the grace period: absorbed
    time.sleep(0.01)
    monkeypatch.setattr(signals, "GRACE_S", 0.0)
    with pytest.raises(signals.Interrupted):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(1)


def test_a_failed_write_keeps_its_own_error(handlers) -> None:
    with pytest.raises(ValueError):
        with signals.deferred():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.01)
            raise ValueError("the write failed")
