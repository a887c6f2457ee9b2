"""Calibration: measured figures from a report replace the datasheet's, and say so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hwadvisor import pipeline, profiles
from hwadvisor.cli.app import app
from hwadvisor.cluster.calibration import inter_node_figure
from hwadvisor.errors import UserError
from hwadvisor.models import Device, HostInfo, Measured, ModelOptions, Report, TrialResult
from hwadvisor.models.trial import named_effects
from hwadvisor.perfmodel import estimate
from hwadvisor.perfmodel.calibration import (
    Calibration,
    from_report,
    load_calibration,
    same_device,
)
from hwadvisor.report.io import load_report, report_json
from hwadvisor.workload import WorkloadRequest, build_workload

ROOT = Path(__file__).resolve().parents[2]
H200_RUN = ROOT / "benchmarks" / "data" / "h200_validate_2026-12-01.json"


def dev(profile_id: str) -> Device:
    return profiles.device_from_profile(profile_id, index=0)


@pytest.fixture(scope="module")
def h200_report() -> Report:
    return load_report(H200_RUN)


def test_the_h200_run_calibrates_the_h200(h200_report: Report) -> None:
    cal = from_report(h200_report, dev("h200-sxm"))
    assert cal is not None
    assert cal.memory_bandwidth_gbps == pytest.approx(4091.8, rel=1e-3)
    assert cal.matmul_tflops["bf16"] == pytest.approx(758.7, rel=1e-3)
    assert cal.attention_tflops["cudnn"] == pytest.approx(400.0, rel=0.01)  # 34.4 GF / 85.9 us
    assert cal.host_transfer_gbps == pytest.approx(54.1, rel=1e-2)
    # the graphed 4-layer step leaves ~3 us per kernel after the weights' streaming
    assert cal.kernel_floor_s is not None and 2e-6 < cal.kernel_floor_s < 4e-6
    assert cal.busbw_gbps is None  # the collectives trial needs two GPUs: unsupported there


def test_another_device_is_not_calibrated_by_it(h200_report: Report) -> None:
    assert from_report(h200_report, dev("h100-sxm")) is None
    assert from_report(h200_report, dev("rtx-4090")) is None


def test_device_matching() -> None:
    assert same_device(dev("h200-sxm"), dev("h200-sxm"))
    assert not same_device(dev("h100-sxm"), dev("h100-pcie"))
    assert not same_device(dev("a100-80gb"), dev("a100-40gb"))
    assert same_device(dev("m2-ultra"), dev("m2-ultra-60c"))


def test_estimate_says_which_figures_were_measured(h200_report: Report) -> None:
    w = build_workload(WorkloadRequest(model="llama-3-8b", engine="vllm"))
    plain = estimate(w, dev("h200-sxm"), ModelOptions(cuda_graphs=True))
    assert plain.calibration == {"memory_bandwidth": "datasheet", "bf16_peak": "datasheet",
                                 "launch_latency": "model", "attention": "model",
                                 "host_transfer": "model"}
    cal = from_report(h200_report, dev("h200-sxm"))
    measured = estimate(w, dev("h200-sxm"), ModelOptions(cuda_graphs=True), calibration=cal)
    assert measured.calibration == {k: "measured" for k in plain.calibration}
    assert measured.bandwidth_gbps_used == pytest.approx(4091.8, rel=1e-3)
    assert measured.peak_tflops_used == pytest.approx(758.7, rel=1e-3)
    assert any("measured" in a and "attention" in a for a in measured.assumptions)
    # a measured copy at 85% of theoretical is what the model assumed: close predictions
    assert measured.times.decode_step_s == pytest.approx(plain.times.decode_step_s, rel=0.1)


def test_device_measured_alone_is_used_and_said() -> None:
    d = dev("h200-sxm").model_copy(update={"measured": Measured(
        memory_bandwidth_gbps=3000.0, matmul_tflops={"bf16": 600.0}, trial_ids=["x"])})
    est = estimate(build_workload(WorkloadRequest(model="llama-3-8b")), d)
    assert est.calibration["memory_bandwidth"] == "measured"
    assert est.calibration["bf16_peak"] == "measured"
    assert est.calibration["launch_latency"] == "model"


def test_bus_bandwidth_from_a_collectives_trial() -> None:
    report = Report(host=HostInfo(), devices=[dev("h200-sxm")], kind="validate",
                    trials=[TrialResult(id="collectives", status="ok",
                                        effects=named_effects({"busbw_gbps": 330.0}))])
    cal = from_report(report, dev("h200-sxm"))
    assert cal is not None and cal.busbw_gbps == 330.0
    w = build_workload(WorkloadRequest(model="llama-3-8b", phase="training", gpus=8))
    est = estimate(w, dev("h200-sxm"), ModelOptions(sharding="fsdp"), calibration=cal)
    assert est.communication["bus_bandwidth_gbps"] == 330.0
    assert est.calibration["bus_bandwidth"] == "measured"
    assert estimate(w, dev("h200-sxm"), ModelOptions(sharding="fsdp")).calibration[
        "bus_bandwidth"] == "datasheet"


def test_probe_measure_report_calibrates_bandwidth_and_matmul(tmp_path: Path) -> None:
    measured = dev("rtx-4090").model_copy(update={"measured": Measured(
        memory_bandwidth_gbps=900.0, matmul_tflops={"bf16": 150.0}, trial_ids=["x"])})
    path = tmp_path / "probe.json"
    path.write_text(report_json(Report(host=HostInfo(), devices=[measured])))
    cal, notes = load_calibration(path, dev("rtx-4090"), inter_node_figure)
    assert isinstance(cal, Calibration)
    assert cal.memory_bandwidth_gbps == 900.0 and cal.kernel_floor_s is None
    assert notes and "memory bandwidth" in notes[0]


def test_load_calibration_refuses_another_device_and_empty_reports(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="not NVIDIA H100"):
        load_calibration(H200_RUN, dev("h100-sxm"), inter_node_figure)
    empty = tmp_path / "empty.json"
    empty.write_text(report_json(Report(host=HostInfo(), devices=[dev("h200-sxm")])))
    with pytest.raises(UserError, match="no measurements"):
        load_calibration(empty, dev("h200-sxm"), inter_node_figure)
    assert load_calibration(None, dev("h200-sxm"), inter_node_figure) == (None, [])


def test_estimate_cli_takes_a_calibration() -> None:
    runner = CliRunner()
    result = runner.invoke(app, ["estimate", "--device", "h200-sxm", "--model", "llama-3-8b",
                                 "--calibration", str(H200_RUN), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["estimate"]["calibration"]["memory_bandwidth"] == "measured"
    assert any("calibration:" in n for n in report["notes"])
    wrong = runner.invoke(app, ["estimate", "--device", "h100-sxm", "--calibration",
                                str(H200_RUN)])
    assert wrong.exit_code == 2
    assert "hint:" in wrong.output


def test_recommend_uses_the_calibration_in_its_estimates() -> None:
    report = pipeline.recommend_report("inference-latency", "h200-sxm",
                                       WorkloadRequest(model="llama-3-8b"),
                                       calibration=H200_RUN)
    assert report.estimate is not None
    assert report.estimate.calibration["memory_bandwidth"] == "measured"
    assert report.estimate.calibration["launch_latency"] == "measured"
