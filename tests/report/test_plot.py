"""`hwadvisor plot`: roofline data from the report, a real PNG, clean errors."""

from __future__ import annotations

from pathlib import Path

import pytest
import report_factory as factory
from typer.testing import CliRunner

from hwadvisor.cli.app import app
from hwadvisor.errors import ExitCode, UserError
from hwadvisor.report.io import write_report
from hwadvisor.report.plot import phase_points, roofline_data

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_phase_points_follow_the_estimate() -> None:
    points = {p.label: p for p in phase_points(factory.estimate())}
    assert set(points) == {"prefill", "decode step"}
    decode = points["decode step"]
    # FLOPs = compute_s x peak, bytes = memory_s x bandwidth; attained = FLOPs / total time.
    flops = 1.62e-5 * 989.4e12
    assert decode.intensity == pytest.approx(flops / (0.00341 * 4800e9))
    assert decode.tflops == pytest.approx(flops / 0.00345 / 1e12)


def test_a_subnormal_memory_time_is_skipped_not_divided_by() -> None:
    est = factory.estimate()
    # 5e-324 s x 0.001 GB/s rounds to no bytes at all (a mutated report can say so)
    est = est.model_copy(update={"bandwidth_gbps_used": 1e-3, "times": est.times.model_copy(
        update={"decode_memory_s": 5e-324})})
    assert "decode step" not in {p.label for p in phase_points(est)}


def test_roofline_data_uses_measured_and_trial_figures() -> None:
    data = roofline_data(factory.validate_report())
    assert data.datasheet_bandwidth_gbps == 4800.0
    assert data.measured_bandwidth_gbps == 4150.0  # from the memory-bandwidth trial
    assert data.measured_tflops == {"bf16": 760.0, "fp8": 1310.0}
    labels = {p.label for p in data.trials}
    assert labels == {"matmul-peak bf16", "matmul-peak fp8"}
    bf16 = next(p for p in data.trials if p.label.endswith("bf16"))
    assert bf16.intensity == pytest.approx(8192 / 3)  # 2n^3 / (2 bytes x 3 n^2)


def test_plot_writes_a_png(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    report_path, png = tmp_path / "r.json", tmp_path / "roofline.png"
    write_report(report_path, factory.validate_report())
    result = CliRunner().invoke(app, ["plot", str(report_path), "-o", str(png)])
    assert result.exit_code == 0, result.output
    blob = png.read_bytes()
    assert blob[:8] == PNG_MAGIC
    assert len(blob) > 20_000  # a drawn figure, not an empty canvas


def test_plot_of_a_cpu_report_exits_2(tmp_path: Path) -> None:
    report = factory.probe_report()
    report.devices = []
    report_path, png = tmp_path / "r.json", tmp_path / "roofline.png"
    write_report(report_path, report)
    result = CliRunner().invoke(app, ["plot", str(report_path), "-o", str(png)])
    assert result.exit_code == ExitCode.USAGE
    assert "no device" in result.output
    assert not png.exists()


def test_device_without_ceilings_is_refused() -> None:
    report = factory.probe_report()
    report.devices[0].peak_tflops = {}
    with pytest.raises(UserError, match="no peak TFLOP/s"):
        roofline_data(report)


def test_unknown_device_index_is_refused() -> None:
    with pytest.raises(UserError, match="no device 3"):
        roofline_data(factory.validate_report(), device_index=3)
