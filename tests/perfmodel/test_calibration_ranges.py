"""--calibration figures are checked against physics before they are believed (issue 30, 5).

Before: a bandwidth of 1e-300 GB/s planned a 301-digit latency (exit 0); 1e300 TFLOP/s exited
70; negative figures were used; a CPU-only two-process cluster report set an H200 plan's
network to 1 GB/s.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from hwadvisor.cli.app import app
from hwadvisor.errors import ExitCode
from hwadvisor.models import (
    Cluster,
    ClusterCollective,
    ClusterNode,
    ClusterRank,
    HostInfo,
    Measured,
    Report,
)
from hwadvisor.perfmodel.calibration import Calibration, implausible
from hwadvisor.probe.target import resolve_target
from hwadvisor.report.io import write_report

runner = CliRunner()


def _device(profile_id: str):
    return resolve_target(profile_id, 1).devices[0]


def _measured_report(path: Path, profile_id: str, **measured: object) -> Path:
    device = _device(profile_id).model_copy(update={"measured": Measured(
        trial_ids=["memory-bandwidth"], **measured)})
    write_report(path, Report(host=HostInfo(), devices=[device]))
    return path


@pytest.mark.parametrize("measured", [
    {"memory_bandwidth_gbps": 1e-300},
    {"memory_bandwidth_gbps": 1e300},
    {"matmul_tflops": {"bf16": 1e300}},
    {"matmul_tflops": {"bf16": 1e-6}},
    {"memory_bandwidth_gbps": 48_000.0},  # 10x the H200's datasheet
])
def test_impossible_figures_exit_2_with_a_hint(tmp_path: Path, measured: dict) -> None:
    path = _measured_report(tmp_path / "cal.json", "h200-sxm", **measured)
    for command in ("estimate", "recommend"):
        result = runner.invoke(app, [command, "--device", "h200-sxm", "--model", "llama-3-8b",
                                     "--calibration", str(path)])
        assert result.exit_code == ExitCode.USAGE, result.output
        assert "--calibration" in result.output and "hint:" in result.output


def test_a_real_figure_passes(tmp_path: Path) -> None:
    path = _measured_report(tmp_path / "cal.json", "h200-sxm", memory_bandwidth_gbps=4150.0,
                            matmul_tflops={"bf16": 760.0})
    result = runner.invoke(app, ["estimate", "--device", "h200-sxm", "--model", "llama-3-8b",
                                 "--calibration", str(path)])
    assert result.exit_code == 0, result.output


def test_ranges_follow_the_device_class() -> None:
    cpu = Calibration(memory_bandwidth_gbps=5_000.0)
    assert implausible(cpu, _device("h200-sxm")) == []
    cpu_device = _device("h200-sxm").model_copy(update={
        "device_class": "cpu", "memory_bandwidth_gbps": None, "peak_tflops": {}})
    assert implausible(cpu, cpu_device)  # 5 TB/s is no CPU's


def _cpu_cluster() -> Report:
    ranks = [ClusterRank(rank=r, local_rank=0, device_name="cpu") for r in range(2)]
    nodes = [ClusterNode(node_rank=i, hostname=f"n{i}", ranks=[ranks[i]]) for i in range(2)]
    collective = ClusterCollective(scope="inter-node", node_ranks=[0, 1], group_size=2,
                                   op="all_reduce", size_label="1gib", bytes=2**30,
                                   busbw_gbps=1.0)
    cluster = Cluster(world_size=2, launcher="torchrun", backend="gloo", nodes=nodes,
                      collectives=[collective], outlier_ratio=0.9)
    return Report(kind="validate", host=HostInfo(), cluster=cluster)


def test_a_cpu_only_cluster_does_not_set_a_gpu_plan_s_network(tmp_path: Path) -> None:
    path = tmp_path / "cluster.json"
    write_report(path, _cpu_cluster())
    result = runner.invoke(app, ["recommend", "--device", "h200-sxm", "--model", "llama-3-70b",
                                 "--phase", "training", "--nodes", "2", "--gpus-per-node", "8",
                                 "--calibration", str(path)])
    assert result.exit_code == ExitCode.USAGE, result.output
    assert "ran on CPUs only" in result.output


def test_a_negative_trial_figure_is_refused(tmp_path: Path) -> None:
    from hwadvisor.models import TrialResult

    trial = TrialResult(id="memory-bandwidth", status="ok", effect={"copy_gbps": -4150.0})
    path = tmp_path / "validate.json"
    write_report(path, Report(kind="validate", host=HostInfo(), devices=[_device("h200-sxm")],
                              trials=[trial]))
    result = runner.invoke(app, ["estimate", "--device", "h200-sxm", "--model", "llama-3-8b",
                                 "--calibration", str(path)])
    assert result.exit_code == ExitCode.USAGE, result.output
    assert "-4150" in result.output
