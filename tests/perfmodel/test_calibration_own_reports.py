"""Calibration takes the tool's own reports of any device class, and warns on figures far below
the datasheet (issue 43).

Before: a CPU's own `probe --measure` or `validate` report was refused with "holds no
measurements" (it lists no device: the CPU is the host), and a measured bandwidth of 0.2% of
the datasheet was planned with in silence.
"""

from __future__ import annotations

import report_factory as factory

from hwadvisor.models import Device, DeviceClass, Report, TrialEnvironment, TrialResult
from hwadvisor.models.trial import named_effects
from hwadvisor.perfmodel.calibration import load_calibration


def _no_network(_report: Report) -> None:
    return None


def _bandwidth_trial(gbps: float, device: str) -> TrialResult:
    return TrialResult(id="memory-bandwidth", status="ok",
                       effects=named_effects({"copy_gbps": gbps, "triad_gbps": gbps}),
                       environment=TrialEnvironment(device=device))


def _cpu() -> Device:
    host = factory.host()
    return Device(index=0, vendor="amd", device_class=DeviceClass.CPU, name=host.cpu_model or "",
                  memory_total_bytes=host.memory_total_bytes, source="probe")


def test_a_cpu_validate_report_calibrates_the_cpu(tmp_path) -> None:
    report = Report(kind="validate", host=factory.host(), devices=[], device_class="cpu",
                    trials=[_bandwidth_trial(38.9, "cpu")])
    found, notes = load_calibration(tmp_path / "cpu.json", _cpu(), _no_network, report)
    assert found is not None and found.memory_bandwidth_gbps == 38.9
    assert "measured on Example CPU" in notes[0]


def test_a_cpu_only_torch_on_a_gpu_host_calibrates_the_cpu_not_the_gpu(tmp_path) -> None:
    report = factory.validate_report()
    report.trials = [_bandwidth_trial(38.9, "cpu")]
    found, _notes = load_calibration(tmp_path / "r.json", _cpu(), _no_network, report)
    assert found is not None and found.device == "Example CPU"


def test_a_figure_far_below_the_datasheet_is_used_with_a_warning(tmp_path) -> None:
    report = factory.validate_report()
    gpu = report.devices[0]
    sheet = gpu.memory_bandwidth_gbps
    assert sheet
    report.trials = [_bandwidth_trial(sheet * 0.002, "NVIDIA H200")]
    found, notes = load_calibration(tmp_path / "r.json", gpu, _no_network, report)
    assert found is not None and found.memory_bandwidth_gbps == sheet * 0.002
    warning = [n for n in notes if n.startswith("warning:")]
    assert warning and "0.2% of" in warning[0] and "datasheet" in warning[0]
    report.trials = [_bandwidth_trial(sheet * 0.9, "NVIDIA H200")]
    _found, fine = load_calibration(tmp_path / "r.json", gpu, _no_network, report)
    assert not [n for n in fine if n.startswith("warning:")]
