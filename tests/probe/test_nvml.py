"""The NVML door: every NVML call, not only nvmlInit, runs behind one deadline.

Before (issue 30): only nvmlInit had a deadline; a hang in any later call (nvmlDeviceGetCount,
GetHandleByIndex, GetName, GetMemoryInfo, GetPowerUsage, GetComputeRunningProcesses,
SystemGetDriverVersion) hung probe, recommend and validate until killed.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from nvml_fakes import h200_fake
from typer.testing import CliRunner

from hwadvisor.cli.app import app
from hwadvisor.probe import nvml as nvml_mod
from hwadvisor.probe.nvidia import NvidiaBackend
from hwadvisor.probe.nvml import Nvml

STUCK_CALLS = ["nvmlDeviceGetCount", "nvmlDeviceGetHandleByIndex", "nvmlDeviceGetName",
               "nvmlDeviceGetMemoryInfo", "nvmlDeviceGetPowerUsage",
               "nvmlDeviceGetComputeRunningProcesses", "nvmlSystemGetDriverVersion"]


class BlockingNvml:
    """The replayed H200 NVML, except that one function blocks until released (a wedged GPU)."""

    def __init__(self, stuck: str) -> None:
        self._real = h200_fake()
        self.stuck = stuck
        self.release = threading.Event()
        self.after_stuck: list[str] = []
        self._blocked = False

    def __getattr__(self, name: str) -> Any:
        real = getattr(self._real, name)
        if not callable(real) or isinstance(real, type):
            return real

        def call(*args: Any) -> Any:
            if self._blocked:
                self.after_stuck.append(name)
            if name == self.stuck:
                self._blocked = True
                self.release.wait(60)
            return real(*args)

        return call


@pytest.mark.parametrize("stuck", STUCK_CALLS)
def test_a_hung_call_after_init_times_out_and_is_named(stuck: str) -> None:
    fake = BlockingNvml(stuck)
    helper = Nvml(backend=fake, init_timeout_s=0.3)
    started = time.monotonic()
    result = NvidiaBackend(helper).probe()
    elapsed = time.monotonic() - started
    fake.release.set()
    assert elapsed < 5, f"{stuck} hung the probe for {elapsed:.1f} s"
    assert any(stuck in n and "did not return within 0.3 s" in n for n in result.notes), \
        result.notes
    assert fake.after_stuck == []  # nothing else is called into a library that hung
    helper.shutdown()


def test_probe_writes_its_report_when_a_call_hangs(tmp_path: Path) -> None:
    fake = BlockingNvml("nvmlDeviceGetPowerUsage")
    nvml_mod.set_nvml(Nvml(backend=fake, init_timeout_s=0.3))
    out = tmp_path / "probe.json"
    try:
        result = CliRunner().invoke(app, ["probe", "--output", str(out)])
    finally:
        fake.release.set()
        nvml_mod.set_nvml(None)
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert any("nvmlDeviceGetPowerUsage" in n for n in report["notes"])


def test_calls_return_their_values_and_errors_through_the_door() -> None:
    helper = Nvml(backend=h200_fake(), init_timeout_s=2)
    assert helper.device_count() == 1
    assert "H200" in helper.query(0, "name", "nvmlDeviceGetName")
    assert helper.stuck is None
    helper.shutdown()
