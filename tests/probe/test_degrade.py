"""A hung NVML and an unreadable /proc/meminfo: every command carries on, with a note.

Before: an nvmlInit that never returned hung `probe` (still running after 20 s); an OSError
from psutil (unreadable or odd /proc/meminfo) crashed every command, even
`estimate --device h100-sxm`.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
from main_process import run_main
from nvml_fakes import h200_fake
from typer.testing import CliRunner

from hwadvisor.cli.app import app
from hwadvisor.probe import nvml as nvml_mod
from hwadvisor.probe.host import probe_host
from hwadvisor.probe.nvidia import NvidiaBackend
from hwadvisor.probe.nvml import Nvml

REPO = Path(__file__).resolve().parents[2]
runner = CliRunner()


class HangingNvml:
    """An NVML whose nvmlInit blocks until released (a wedged driver)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.calls: list[str] = []

    def nvmlInit(self) -> None:  # noqa: N802 - pynvml's name
        self.calls.append("nvmlInit")
        self.release.wait(60)

    def __getattr__(self, name: str) -> object:
        def call(*args: object) -> object:
            self.calls.append(name)
            raise AssertionError(f"{name} called after a hung nvmlInit")

        return call


def test_hung_nvml_init_times_out_with_a_note() -> None:
    fake = HangingNvml()
    helper = Nvml(backend=fake, init_timeout_s=0.3)
    started = time.monotonic()
    result = NvidiaBackend(helper).probe()
    fake.release.set()
    assert time.monotonic() - started < 5
    assert result.devices == []
    assert "did not start within 0.3 s" in result.notes[0]
    assert fake.calls == ["nvmlInit"]  # nothing else is called into the stuck library
    helper.shutdown()  # safe: never calls nvmlShutdown on it


def test_working_nvml_is_not_affected_by_the_deadline() -> None:
    result = NvidiaBackend(Nvml(backend=h200_fake(), init_timeout_s=5)).probe()
    assert len(result.devices) == 1


def test_nvml_init_error_still_reads_as_before() -> None:
    from nvml_fakes import NVMLError_DriverNotLoaded

    class NoDriver:
        def nvmlInit(self) -> None:  # noqa: N802
            raise NVMLError_DriverNotLoaded()

    helper = Nvml(backend=NoDriver(), init_timeout_s=2)
    assert not helper.available() and "driver not loaded" in (helper.reason or "")


def test_timeout_env_var(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(nvml_mod.INIT_TIMEOUT_ENV, "2.5")
    assert nvml_mod.init_timeout() == 2.5
    for bad in ("", "x", "-1", "0", "nan", "1e99"):
        monkeypatch.setenv(nvml_mod.INIT_TIMEOUT_ENV, bad)
        assert nvml_mod.init_timeout() == nvml_mod.INIT_TIMEOUT_S


def test_probe_with_a_hung_pynvml_finishes() -> None:
    """The real path: pynvml.nvmlInit patched to hang forever, in a fresh process."""
    setup = (
        "import time, pynvml\n"
        "import hwadvisor.probe.nvml as nvml\n"
        "nvml.driver_absent = lambda: None\n"  # as on a host with a driver: NVML is tried
        "pynvml.nvmlInit = lambda *a, **k: time.sleep(3600)"
    )
    started = time.monotonic()
    done = run_main(setup, ["probe", "--json"], timeout_s=30,
                    env={**_env(), "HWADVISOR_NVML_TIMEOUT_S": "1"})
    assert time.monotonic() - started < 20
    assert done.returncode == 0, done.stderr
    assert "did not start within 1 s" in done.stderr
    assert json.loads(done.stdout)["kind"] == "probe"


def _env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith("HWADVISOR_")}


# --------------------------------------------------------------------------- /proc/meminfo


@pytest.fixture(params=["missing", "garbage", "folder"])
def bad_procfs(request: pytest.FixtureRequest, tmp_path: Path,
               monkeypatch: pytest.MonkeyPatch) -> str:
    """psutil reading a procfs whose meminfo is missing, unparsable, or a folder."""
    if not sys.platform.startswith("linux"):
        pytest.skip("psutil reads /proc only on Linux")
    for name in ("stat", "cpuinfo"):
        source = Path("/proc") / name
        if source.exists():
            (tmp_path / name).write_bytes(source.read_bytes())
    meminfo = tmp_path / "meminfo"
    if request.param == "garbage":
        meminfo.write_text("garbage\n")
    elif request.param == "folder":
        meminfo.mkdir()
    monkeypatch.setattr(psutil, "PROCFS_PATH", str(tmp_path))
    return str(request.param)


def test_host_memory_degrades_to_unknown(bad_procfs: str) -> None:
    host = probe_host()
    assert host.memory_total_bytes is None and host.memory_available_bytes is None
    assert any("memory" in n and "unknown" in n for n in host.notes), host.notes


@pytest.mark.parametrize("argv", [
    ["estimate", "--device", "h100-sxm"],
    ["estimate", "--device", "h100-sxm", "--json"],
    ["recommend", "--device", "h100-sxm"],
    ["probe"],
    ["probe", "--json"],
    ["estimate", "--model", "llama-3.2-1b"],
])
def test_commands_carry_on(bad_procfs: str, argv: list[str]) -> None:
    result = runner.invoke(app, argv)
    assert result.exit_code == 0, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "note: host: could not read the memory size" in result.stderr \
        or "note: host: the memory size" in result.stderr, result.stderr


def test_psutil_raising_anything_is_a_note(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: object, **kwargs: object) -> object:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(psutil, "virtual_memory", broken)
    monkeypatch.setattr(psutil, "cpu_count", broken)
    host = probe_host()
    assert host.memory_total_bytes is None and host.cpu_cores is None
    assert host.cpu_threads is None and len(host.notes) == 3
