"""The start-up shortcuts keep behaviour: exit codes and output, driver check, one profile file."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from main_process import run_main

from hwadvisor import profiles
from hwadvisor.errors import UserError
from hwadvisor.probe import nvml as nvml_mod
from hwadvisor.probe.nvml import Nvml
from hwadvisor.profiles import catalog

REPO = Path(__file__).resolve().parents[2]


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hwadvisor", *argv], cwd=REPO,
                          capture_output=True, text=True, timeout=120, check=False)


def test_fast_exit_keeps_the_code_and_every_byte() -> None:
    """stdout is complete JSON and the exit code the command's, without the teardown."""
    done = _run("recommend", "--goal", "training-throughput", "--device", "h200-sxm",
                "--model", "deepseek-v3", "--gpus", "8", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)  # the whole report arrived
    assert report["plan"]["min_gpus"] == 48  # torchtitan with its FSDP2 CPU offload
    bad = _run("recommend", "--device", "no-such-gpu")
    assert bad.returncode == 2
    assert "error: no device profile 'no-such-gpu'" in bad.stderr


def test_fast_exit_runs_exit_handlers(tmp_path: Path) -> None:
    """Handlers registered with atexit still run (a coverage tool writes its data there)."""
    marker = tmp_path / "ran"
    code = ("import atexit, sys, pathlib; "
            f"atexit.register(lambda: pathlib.Path({str(marker)!r}).write_text('yes')); "
            "sys.argv = ['hwadvisor', '--version']; "
            "from hwadvisor.__main__ import main; main()")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0 and done.stdout.startswith("hwadvisor ")
    assert marker.read_text() == "yes"


def test_no_driver_skips_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    """On Linux with no driver paths NVML is not loaded, and the note says what was missing."""
    monkeypatch.setattr(nvml_mod.sys, "platform", "linux")
    monkeypatch.setattr(nvml_mod.os.path, "exists", lambda path: False)

    def loader() -> None:
        raise AssertionError("pynvml must not be imported without a driver")

    helper = Nvml()
    helper._loader = loader  # the real loader's place: only the driver check stands before it
    assert not helper.start()
    assert helper.reason is not None and "no NVIDIA driver loaded" in helper.reason
    assert "/proc/driver/nvidia" in helper.reason


@pytest.mark.parametrize("present", ["/proc/driver/nvidia", "/dev/nvidiactl", "/dev/dxg"])
def test_a_driver_path_means_nvml_is_tried(monkeypatch: pytest.MonkeyPatch, present: str) -> None:
    monkeypatch.setattr(nvml_mod.sys, "platform", "linux")
    monkeypatch.setattr(nvml_mod.os.path, "exists", lambda path: path == present)
    assert nvml_mod.driver_absent() is None


def test_injected_nvml_is_never_judged_by_the_host(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fakes and test loaders run whatever the host has (the suites rely on it)."""
    monkeypatch.setattr(nvml_mod.os.path, "exists", lambda path: False)
    monkeypatch.setattr(nvml_mod.sys, "platform", "linux")
    assert Nvml(loader=lambda: None)._driver_check is None
    assert Nvml(backend=object())._driver_check is None


def test_one_profile_file_equals_the_full_load() -> None:
    catalog._load_one.cache_clear()
    one = catalog._load_one("h200-sxm")
    assert one is not None
    assert one == next(p for p in profiles.load_all() if p.id == "h200-sxm")
    assert catalog._load_one("../pyproject") is None  # never a path
    assert catalog._load_one("no-such-gpu") is None


def test_get_still_resolves_variants_and_refuses_unknown_ids() -> None:
    catalog._load_one.cache_clear()
    assert profiles.get("m3-max-30c").variant_name is not None
    with pytest.raises(UserError, match="no device profile"):
        profiles.get("h200-sxn")


def test_a_working_thread_is_waited_for(tmp_path: Path) -> None:
    """A non-daemon thread still running at the end: the usual exit, which waits for it."""
    marker = tmp_path / "done"
    setup = ("import threading, time, pathlib\n"
             "def work():\n"
             "    time.sleep(0.3)\n"
             f"    pathlib.Path({str(marker)!r}).write_text('yes')\n"
             "threading.Thread(target=work).start()")
    done = run_main(setup, ["--version"])
    assert done.returncode == 0, done.stderr
    assert marker.read_text() == "yes"
