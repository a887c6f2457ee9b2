"""Detection order, defensive backend runs, the cpu fallback, and the subprocess helper."""

from __future__ import annotations

import subprocess
import sys

import pytest

from hwadvisor.models import Device, DeviceClass
from hwadvisor.probe import detect, presence, runcmd
from hwadvisor.probe.amd import AmdBackend
from hwadvisor.probe.android import AndroidBackend
from hwadvisor.probe.apple import AppleBackend
from hwadvisor.probe.base import BackendResult
from hwadvisor.probe.detect import BACKEND_FACTORIES, DETECTION_ORDER, collect, run_backends
from hwadvisor.probe.ios import IosBackend

GIB = 2**30


class FakeBackend:
    """A backend that returns fixed devices and notes, and counts its calls."""

    def __init__(self, name: str, devices: list[Device] | None = None,
                 notes: list[str] | None = None) -> None:
        self.name = name
        self.devices = devices or []
        self.notes = notes if notes is not None else [f"{name}: nothing"]
        self.calls = 0

    def probe(self) -> BackendResult:
        self.calls += 1
        return BackendResult(devices=list(self.devices), notes=list(self.notes))


class RaisingBackend:
    name = "broken"

    def probe(self) -> BackendResult:
        raise RuntimeError("driver exploded")


def gpu(vendor: str, name: str, device_class: DeviceClass, memory: int | None = None) -> Device:
    return Device(index=0, vendor=vendor, device_class=device_class, name=name,
                  memory_total_bytes=memory, source="probe")


MI300X = gpu("amd", "AMD Instinct MI300X", DeviceClass.DATACENTER_GPU, 192 * GIB)
H200 = gpu("nvidia", "NVIDIA H200", DeviceClass.DATACENTER_GPU, 141 * GIB)


def test_order_is_explicit():
    assert DETECTION_ORDER == ("nvidia", "amd", "apple", "android", "ios")
    assert set(BACKEND_FACTORIES) == set(DETECTION_ORDER)




@pytest.mark.parametrize(("name", "cls"), [("amd", AmdBackend), ("apple", AppleBackend),
                                           ("android", AndroidBackend), ("ios", IosBackend)])
def test_factories_build_backends_named_like_their_key_where_the_host_shows_signs(
        name, cls, monkeypatch):
    # A host with the vendor's signs (a driver, a tool, the platform) gets the real backend.
    monkeypatch.setattr(presence, "amd_absent", lambda: None)
    monkeypatch.setattr(presence, "android_absent", lambda: None)
    monkeypatch.setattr(detect.platform, "system",
                        lambda: {"apple": "Darwin", "ios": "iOS"}.get(name, "Linux"))
    backend = BACKEND_FACTORIES[name]()
    assert isinstance(backend, cls) and backend.name == name


@pytest.mark.parametrize("name", ["amd", "apple", "android", "ios"])
def test_without_signs_a_factory_answers_as_its_backend_would_without_loading_it(
        name, monkeypatch):
    """No sign of the vendor: the backend's own "none here" note, its module not needed."""
    monkeypatch.setattr(detect.platform, "system", lambda: "Linux")
    monkeypatch.setattr(presence, "amd_absent", lambda: "amd: no AMD GPU found (no signs)")
    monkeypatch.setattr(presence, "android_absent", lambda: presence.NOT_ANDROID)
    backend = BACKEND_FACTORIES[name]()
    assert not isinstance(backend, (AmdBackend, AppleBackend, AndroidBackend, IosBackend))
    assert backend.name == name
    result = backend.probe()
    assert result.devices == [] and len(result.notes) == 1
    assert result.notes[0].startswith(f"{name}: ")


def test_the_gate_notes_are_the_backends_own():
    """The apple/ios/android gates and their backends say the same line (one source)."""
    assert AppleBackend(platform_name=lambda: "Linux").probe().notes == [
        presence.not_macos("Linux")]
    assert IosBackend(platform_name=lambda: "Linux").probe().notes == [presence.not_ios("Linux")]
    android = AndroidBackend(runner=lambda argv, timeout: None, is_android=lambda: False,
                             android_ver=lambda: None).probe()
    assert android.notes == [presence.NOT_ANDROID]


def test_real_gates_on_this_host_agree_with_the_real_backends():
    """Where a gate says "absent", the backend it stands for finds nothing either."""
    pairs = [(presence.amd_absent(), AmdBackend), (presence.android_absent(), AndroidBackend),
             (presence.not_macos(detect.platform.system()), AppleBackend),
             (presence.not_ios(detect.platform.system()), IosBackend)]
    for absent, cls in pairs:
        if absent is not None:
            assert cls().probe().devices == []


def test_empty_nvidia_then_amd_gives_amd():
    nvidia = FakeBackend("nvidia", notes=["no NVIDIA GPU"])
    amd = FakeBackend("amd", [MI300X])
    apple = FakeBackend("apple", [gpu("apple", "Apple M3 Max", DeviceClass.APPLE_SILICON)])
    report = collect([nvidia, amd, apple])
    assert report.device_class == DeviceClass.DATACENTER_GPU.value
    assert [d.vendor for d in report.devices] == ["amd"]
    assert report.devices[0].profile_id == "mi300x"  # enriched from the profile
    assert apple.calls == 0  # the first backend that finds devices wins
    assert "no NVIDIA GPU" in report.notes


def test_report_class_comes_from_every_device_not_device_0():
    # GPU 0 could not be named (consumer by default); GPU 1 is an Instinct: the host is datacenter.
    unnamed = gpu("amd", "AMD GPU 0x1234", DeviceClass.CONSUMER_GPU, 24 * GIB)
    second = MI300X.model_copy(update={"index": 1})
    report = collect([FakeBackend("amd", [unnamed, second])])
    assert report.device_class == DeviceClass.DATACENTER_GPU.value
    assert [d.device_class for d in report.devices] == ["consumer-gpu", "datacenter-gpu"]
    note = next(n for n in report.notes if n.startswith("devices differ in class"))
    assert "0: consumer-gpu" in note and "1: datacenter-gpu" in note


def test_report_class_ranks_and_says_nothing_when_all_agree():
    assert detect.report_class([]) == (DeviceClass.CPU, [])
    assert detect.report_class([MI300X, MI300X]) == (DeviceClass.DATACENTER_GPU, [])
    apple = gpu("apple", "Apple M3 Max", DeviceClass.APPLE_SILICON)
    phone = gpu("qualcomm", "x", DeviceClass.MOBILE_SOC)
    assert detect.report_class([phone, apple])[0] == DeviceClass.APPLE_SILICON


def test_first_finder_wins_even_when_later_ones_would_find():
    result = run_backends([FakeBackend("nvidia", [H200]), FakeBackend("amd", [MI300X])])
    assert [d.vendor for d in result.devices] == ["nvidia"]


def test_all_empty_is_cpu_with_notes():
    backends = [FakeBackend(name) for name in DETECTION_ORDER]
    report = collect(backends)
    assert report.device_class == DeviceClass.CPU.value
    assert report.devices == []
    # One line says why: the first backend's reason, and that the class is cpu.
    assert len(report.notes) == 1
    assert report.notes[0].startswith("nvidia: nothing")
    assert "device class is cpu" in report.notes[0]
    assert report.host.mobile_app_memory_limit_bytes is None


def test_raising_backend_never_crashes_collect():
    report = collect([RaisingBackend(), FakeBackend("amd", [MI300X])])
    assert report.devices[0].vendor == "amd"
    failure = [note for note in report.notes if note.startswith("broken:")]
    assert failure and "RuntimeError" in failure[0] and "driver exploded" in failure[0]


def test_only_raising_backends_is_cpu():
    report = collect([RaisingBackend()])
    assert report.device_class == DeviceClass.CPU.value and report.devices == []


def test_mobile_device_sets_the_host_app_memory_limit():
    soc = gpu("qualcomm", "Qualcomm Snapdragon 8 Gen 3 (SM8650)", DeviceClass.MOBILE_SOC, 12 * GIB)
    report = collect([FakeBackend("nvidia"), FakeBackend("android", [soc])])
    assert report.device_class == DeviceClass.MOBILE_SOC.value
    assert report.devices[0].profile_id == "snapdragon-8-gen-3"
    assert report.host.mobile_app_memory_limit_bytes == 6 * GIB
    assert report.devices[0].app_memory_limit_bytes == 6 * GIB
    assert report.devices[0].sustained_fraction == 0.5


def test_real_backends_on_this_machine_do_not_raise():
    # The CI machine has no GPU: every real backend answers with notes, nothing raises.
    report = collect()
    assert report.kind == "probe"
    if not report.devices:
        assert report.device_class == DeviceClass.CPU.value


# --- runcmd ----------------------------------------------------------------------------------


def test_run_command_returns_stdout():
    assert runcmd.run_command([sys.executable, "-c", "print('hi')"], 10.0) == "hi\n"


@pytest.mark.parametrize("argv", [
    ["/nonexistent/amd-smi", "static", "--json"],  # FileNotFoundError
    [sys.executable, "-c", "raise SystemExit(2)"],  # non-zero exit
    [],  # nothing to run
    ["bad\0name"],  # ValueError from the OS layer
])
def test_run_command_failures_return_none(argv):
    assert runcmd.run_command(argv, 5.0) is None


def test_run_command_timeout_returns_none():
    assert runcmd.run_command([sys.executable, "-c", "import time; time.sleep(5)"], 0.2) is None


def test_run_command_garbage_bytes_do_not_raise():
    out = runcmd.run_command([sys.executable, "-c",
                              "import sys; sys.stdout.buffer.write(b'\\xff\\xfeok')"], 10.0)
    assert out is not None and out.endswith("ok")


def test_run_command_never_uses_a_shell(monkeypatch):
    seen: dict = {}

    def fake_run(argv, **kwargs):
        seen.update(kwargs, argv=argv)
        return subprocess.CompletedProcess(argv, 0, stdout="x", stderr="")

    monkeypatch.setattr(runcmd.subprocess, "run", fake_run)
    runcmd.run_command(("rocm-smi", "--json"), 3.0)
    assert seen["argv"] == ["rocm-smi", "--json"]
    assert not seen.get("shell") and seen["timeout"] == 3.0


def test_topology_keeps_its_runner_names():
    from hwadvisor.probe import topology

    assert topology._run is runcmd.run_command
    assert topology.Runner is runcmd.Runner
    assert detect.run_backends is run_backends
