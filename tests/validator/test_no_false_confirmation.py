"""CPU kernels never confirm GPU advice (issue 30, item 4).

Before: on a GPU host whose torch is CPU-only, `validate --min-bandwidth-fraction` said
"NVIDIA H200 measured 174 GB/s = 3.6%" (the CPU's copy bandwidth) and exited 1, and
`recommend --validate` marked H200 advice "confirmed" from torch's CPU INT4 kernel. Nothing
said torch saw no GPU. (This test box's torch is a CPU build: the case itself.)
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import report_factory as factory
from nvml_fakes import h200_fake
from typer.testing import CliRunner

from hwadvisor.cli.app import app
from hwadvisor.models import Validation
from hwadvisor.probe import nvml as nvml_mod
from hwadvisor.probe.nvml import Nvml
from hwadvisor.report.figures import trial_device
from hwadvisor.trials.base import cuda_available
from hwadvisor.validator.runner import NO_GPU, verdicts_for

pytestmark = pytest.mark.skipif(cuda_available(), reason="needs a torch that sees no GPU")


def test_gpu_advice_is_unsupported_when_torch_has_no_gpu() -> None:
    report = factory.validate_report()
    for rec in report.recommendations:
        rec.validation = Validation()
    report.trials = []
    found = verdicts_for(report)
    assert found.trials == []  # nothing measured the CPU in the GPU's name
    assert found.recommendations is not None and len(found.recommendations) == len(
        report.recommendations)
    for validation in found.recommendations:
        assert validation.status == "unsupported"
        assert NO_GPU in (validation.detail or "")
    assert any(NO_GPU in n for n in found.notes)


def test_recommend_validate_for_a_planned_gpu_confirms_nothing(tmp_path: Path) -> None:
    pytest.importorskip("torch", reason="validate refuses to start without torch")
    out = tmp_path / "r.json"
    result = CliRunner().invoke(app, ["recommend", "--device", "h200-sxm", "--model",
                                      "llama-3-8b", "--validate", "-o", str(out)])
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    statuses = {r["validation"]["status"] for r in report["recommendations"]}
    assert "confirmed" not in statuses and "refuted" not in statuses
    assert "torch sees no GPU (CPU-only build?)" in result.output


def test_a_cpu_trial_is_attributed_to_no_gpu() -> None:
    report = factory.validate_report()
    trial = report.trials[1]
    trial.environment.device = "cpu (NVIDIA H200)"  # what reports wrote before
    trial.environment.device_index = None
    assert trial_device(report, trial) is None


def test_validate_on_a_gpu_host_with_cpu_torch_blames_no_gpu(tmp_path: Path) -> None:
    pytest.importorskip("torch", reason="validate refuses to start without torch")
    out = tmp_path / "v.json"
    nvml_mod.set_nvml(Nvml(backend=h200_fake(), init_timeout_s=5))
    try:
        result = CliRunner().invoke(app, ["validate", "--quick", "-t", "memory-bandwidth",
                                          "--min-bandwidth-fraction", "0.85", "-o", str(out)])
    finally:
        nvml_mod.set_nvml(None)
    assert result.exit_code == 1, result.output  # the gate fails closed: nothing to check
    assert "NVIDIA H200 measured" not in result.output
    assert "could not be checked" in result.output
    report = json.loads(out.read_text())
    assert report["trials"][0]["environment"]["device"] == "cpu"
    assert any("torch sees no GPU" in n for n in report["notes"])
