"""Which GPU is which: -i/--gpu, CUDA_VISIBLE_DEVICES, and PCI bus ids between NVML and torch.

Before: CUDA_VISIBLE_DEVICES was not read, so with CUDA_VISIBLE_DEVICES=1 the trials ran on
NVML's GPU 1 (torch's cuda:0) while the report attributed their figures to GPU 0; there was
no way to pick a GPU.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import report_factory as factory
from nvml_fakes import h200x2_fake
from typer.testing import CliRunner

from hwadvisor import pipeline
from hwadvisor.cli.app import app
from hwadvisor.errors import ExitCode, UserError
from hwadvisor.models import NvidiaDetails, TrialEnvironment
from hwadvisor.probe import nvml as nvml_mod
from hwadvisor.probe.nvml import Nvml
from hwadvisor.probe.select import (
    parse_gpu_option,
    parse_visible,
    select_devices,
    visibility_note,
    visible_ordinal,
)
from hwadvisor.report.figures import measured_bandwidth_gbps, trial_device
from hwadvisor.trials import base as trials_base
from hwadvisor.trials.base import TrialContext

runner = CliRunner()
BUSES = ("00000000:18:00.0", "00000000:2A:00.0")


@pytest.fixture
def two_gpus(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    nvml_mod.set_nvml(Nvml(backend=h200x2_fake()))
    yield
    nvml_mod.set_nvml(None)


def _gpu(index: int, bus: str | None):
    device = factory.h200()
    device.index = index
    device.nvidia = NvidiaDetails(pci_bus_id=bus)
    return device


# --------------------------------------------------------------------------- parsing


@pytest.mark.parametrize("text, expected", [
    ("0", [0]), ("0,2", [0, 2]), (" 1 , 3 ", [1, 3]), ("2,2,1", [2, 1]),
])
def test_parse_gpu_option(text: str, expected: list[int]) -> None:
    assert parse_gpu_option(text) == expected


@pytest.mark.parametrize("text", ["", ",", "0,", "a", "-1", "1.5", "GPU-abc", "1e3",
                                  "9999999", "\u0661"])
def test_bad_gpu_option(text: str) -> None:
    with pytest.raises(UserError) as caught:
        parse_gpu_option(text)
    assert caught.value.hint and "-i" in caught.value.hint


@pytest.mark.parametrize("value, expected", [
    ("0,1", [0, 1]), ("1", [1]), ("", []), ("-1", []), ("0,2,-1,3", [0, 2]),
    ("1, 0", [1, 0]), ("GPU-6c6e1c3a-0000", None), ("0,MIG-abc", None), ("x", []),
])
def test_parse_visible_as_cuda_reads_it(value: str, expected: list[int] | None) -> None:
    assert parse_visible(value) == expected


def test_visible_ordinal_follows_the_variable() -> None:
    gpu0, gpu1 = _gpu(0, BUSES[0]), _gpu(1, BUSES[1])
    assert visible_ordinal(gpu1, {}) == 1
    assert visible_ordinal(gpu1, {"CUDA_VISIBLE_DEVICES": "1"}) == 0
    assert visible_ordinal(gpu0, {"CUDA_VISIBLE_DEVICES": "1"}) is None
    assert visible_ordinal(gpu0, {"CUDA_VISIBLE_DEVICES": "1,0"}) == 1
    assert visible_ordinal(gpu0, {"CUDA_VISIBLE_DEVICES": "GPU-x"}) is None
    amd = gpu1.model_copy(update={"vendor": "amd"})
    assert visible_ordinal(amd, {"HIP_VISIBLE_DEVICES": "1"}) == 0
    assert visible_ordinal(amd, {"ROCR_VISIBLE_DEVICES": "0"}) is None


# --------------------------------------------------------------------------- probe -i


def test_probe_i_picks_gpus(two_gpus) -> None:
    result = runner.invoke(app, ["probe", "-i", "1", "--json"])
    assert result.exit_code == 0, result.output
    assert [d["index"] for d in json.loads(result.stdout)["devices"]] == [1]
    result = runner.invoke(app, ["probe", "--gpu", "1,0", "--json"])
    assert [d["index"] for d in json.loads(result.stdout)["devices"]] == [1, 0]


@pytest.mark.parametrize("value", ["5", "0,7", "x", ""])
def test_probe_i_refuses_unknown_gpus(two_gpus, value: str) -> None:
    result = runner.invoke(app, ["probe", "-i", value])
    assert result.exit_code == ExitCode.USAGE, result.output
    assert "hint:" in result.output and "Traceback" not in result.output


def test_probe_i_without_gpus_is_exit_3(monkeypatch: pytest.MonkeyPatch) -> None:
    from nvml_fakes import no_module_loader

    nvml_mod.set_nvml(Nvml(loader=no_module_loader))
    try:
        result = runner.invoke(app, ["probe", "-i", "0"])
    finally:
        nvml_mod.set_nvml(None)
    assert result.exit_code == ExitCode.NO_DEVICE, result.output


def test_probe_notes_the_visibility_variable(two_gpus, monkeypatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    result = runner.invoke(app, ["probe", "--json"])
    assert result.exit_code == 0
    assert len(json.loads(result.stdout)["devices"]) == 2  # nvidia-smi's view: every GPU
    assert "note: CUDA_VISIBLE_DEVICES='1'" in result.stderr


def test_select_devices_keeps_order() -> None:
    report = factory.probe_report()
    report.devices = [_gpu(0, BUSES[0]), _gpu(1, BUSES[1])]
    assert [d.index for d in select_devices(report, [1]).devices] == [1]
    assert select_devices(report, None) is report
    assert visibility_note(report, {}) is None
    assert "UUID" in (visibility_note(report, {"CUDA_VISIBLE_DEVICES": "GPU-1"}) or "")


# --------------------------------------------------------------------------- torch's side


class _FakeCuda:
    """torch.cuda as a CUDA build reports it: device count and PCI location per ordinal."""

    def __init__(self, buses: list[tuple[int, int, int] | None]) -> None:
        self.buses = buses

    def device_count(self) -> int:
        return len(self.buses)

    def get_device_properties(self, ordinal: int) -> SimpleNamespace:
        bus = self.buses[ordinal]
        if bus is None:
            return SimpleNamespace(name="GPU")
        return SimpleNamespace(pci_domain_id=bus[0], pci_bus_id=bus[1], pci_device_id=bus[2])


@pytest.fixture
def fake_cuda(monkeypatch: pytest.MonkeyPatch):
    torch = pytest.importorskip("torch")

    def install(buses: list[tuple[int, int, int] | None]) -> None:
        cuda = _FakeCuda(buses)
        monkeypatch.setattr(trials_base, "cuda_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "device_count", cuda.device_count)
        monkeypatch.setattr(torch.cuda, "get_device_properties", cuda.get_device_properties)

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return install


def test_pci_bus_id_decides(fake_cuda, monkeypatch) -> None:
    gpu0, gpu1 = _gpu(0, BUSES[0]), _gpu(1, BUSES[1])
    fake_cuda([(0, 0x2A, 0)])  # torch sees one GPU: NVML's GPU 1
    # ... even when the variable says otherwise (CUDA's FASTEST_FIRST order, say):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    assert trials_base.cuda_ordinal(gpu1) == 0
    assert trials_base.cuda_ordinal(gpu0) is None
    assert trials_base.torch_device(TrialContext(device=gpu1)) == "cuda:0"
    with pytest.raises(RuntimeError, match="GPU 0 .* not visible to torch"):
        trials_base.torch_device(TrialContext(device=gpu0))


def test_variable_decides_without_pci_ids(fake_cuda, monkeypatch) -> None:
    gpu0, gpu1 = _gpu(0, None), _gpu(1, None)
    fake_cuda([None])
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert trials_base.cuda_ordinal(gpu1) == 0 and trials_base.cuda_ordinal(gpu0) is None
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    fake_cuda([None, None])
    assert trials_base.cuda_ordinal(gpu1) == 1


def test_profile_and_cpu_devices_run_on_cuda_0(fake_cuda) -> None:
    fake_cuda([(0, 0x18, 0)])
    profile = factory.h200().model_copy(update={"source": "profile", "index": 3})
    assert trials_base.cuda_ordinal(profile) == 0 and trials_base.cuda_ordinal(None) == 0


def test_validate_runs_on_cuda_0_and_attributes_to_its_nvml_index(
        two_gpus, fake_cuda, monkeypatch) -> None:
    """CUDA_VISIBLE_DEVICES=1: the trials run on NVML GPU 1 and their figures say so."""
    from hwadvisor.validator import runner as validator_runner
    from hwadvisor.workload import WorkloadRequest

    buses = _fake_buses()
    fake_cuda([buses[1]])
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    seen: list[object] = []

    def run_trials(ids, ctx, progress=None, loader=None):
        seen.append(ctx.device)
        result = factory.bandwidth_trial(3000.0)
        result.environment = TrialEnvironment(device="NVIDIA H200")
        return [result], False

    monkeypatch.setattr(validator_runner, "run_trials", run_trials)
    report = pipeline.validate_trials_report(["memory-bandwidth"], True,
                                             WorkloadRequest(model="llama-3.2-1b"))
    assert [d.index for d in report.devices] == [0, 1]
    assert getattr(seen[0], "index", None) == 1
    assert report.trials[0].environment.device_index == 1
    assert trial_device(report, report.trials[0]).index == 1  # type: ignore[union-attr]
    assert measured_bandwidth_gbps(report, report.devices[0]) is None
    assert measured_bandwidth_gbps(report, report.devices[1]) == (3000.0, "trial memory-bandwidth")


def test_validate_i_names_the_gpu(two_gpus, fake_cuda, monkeypatch) -> None:
    from hwadvisor.validator import runner as validator_runner
    from hwadvisor.workload import WorkloadRequest

    buses = _fake_buses()
    fake_cuda(list(buses))
    seen: list[object] = []

    def run_trials(ids, ctx, progress=None, loader=None):
        seen.append(ctx.device)
        return [], False

    monkeypatch.setattr(validator_runner, "run_trials", run_trials)
    report = pipeline.validate_trials_report(None, True, WorkloadRequest(model="llama-3.2-1b"),
                                             gpus=[1])
    assert [d.index for d in report.devices] == [1] and getattr(seen[0], "index", None) == 1
    fake_cuda([buses[0]])  # GPU 1 hidden from torch: refused, not measured elsewhere
    with pytest.raises(UserError, match="torch cannot see") as caught:
        pipeline.validate_trials_report(None, True, WorkloadRequest(model="llama-3.2-1b"),
                                        gpus=[1])
    assert caught.value.code == ExitCode.NO_DEVICE


def _fake_buses() -> list[tuple[int, int, int]]:
    """The (domain, bus, device) of the two fake GPUs, as the probe reads them."""
    from hwadvisor.probe import collect

    buses = [trials_base._nvml_bus(d) for d in collect().devices]
    assert len(buses) == 2 and all(buses) and buses[0] != buses[1]
    return buses  # type: ignore[return-value]


def test_trial_device_by_index_tells_identical_gpus_apart() -> None:
    report = factory.validate_report()
    report.devices = [_gpu(0, BUSES[0]), _gpu(1, BUSES[1])]
    trial = report.trials[1]
    assert trial_device(report, trial).index == 0  # type: ignore[union-attr]  # by name: first
    trial.environment.device_index = 1
    assert trial_device(report, trial).index == 1  # type: ignore[union-attr]
    trial.environment.device_index = 7  # a GPU the report does not list
    assert trial_device(report, trial) is None


def test_validate_cli_takes_i(two_gpus) -> None:
    result = runner.invoke(app, ["validate", "-i", "9", "--quick"])
    assert result.exit_code == ExitCode.USAGE, result.output
    assert "no GPU 9" in result.output
