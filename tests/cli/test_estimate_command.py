"""`hwadvisor estimate` end to end: exit codes and the parsed JSON report."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from hwadvisor.cli.app import app
from hwadvisor.models import Report

runner = CliRunner()


def run(*args: str):
    return runner.invoke(app, ["estimate", *args])


def parse(result) -> Report:
    assert result.exit_code == 0, result.output
    return Report.model_validate(json.loads(result.stdout))


def test_estimate_json_on_a_profile():
    report = parse(run("--device", "h200-sxm", "--model", "llama-3-8b", "--json"))
    assert report.kind == "estimate"
    assert report.workload.model == "llama-3-8b"
    assert report.devices[0].profile_id == "h200-sxm"
    est = report.estimate
    assert est.bottleneck == "memory-bandwidth"
    assert est.memory.weights_bytes == pytest.approx(16.06e9, rel=1e-3)
    assert est.fits


def test_estimate_writes_output_file(tmp_path):
    out = tmp_path / "est.json"
    result = run("--device", "rtx-4090", "--model", "llama-3-70b", "--output", str(out))
    assert result.exit_code == 0, result.output
    report = Report.model_validate_json(out.read_text())
    assert report.estimate.fits is False
    assert report.estimate.bottleneck == "memory-capacity"


def test_estimate_training_fsdp_options():
    base = parse(run("--device", "h100-sxm", "--model", "llama-3-8b", "--phase", "training",
                     "--gpus", "8", "--sharding", "ddp", "--json"))
    fsdp = parse(run("--device", "h100-sxm", "--model", "llama-3-8b", "--phase", "training",
                     "--gpus", "8", "--sharding", "fsdp", "--attention-kernel", "flash",
                     "--json"))
    assert len(fsdp.devices) == 8
    assert fsdp.estimate.memory.total_bytes < base.estimate.memory.total_bytes
    assert "fsdp_allgather_bytes" in fsdp.estimate.communication


def test_estimate_what_if_flags_move_numbers():
    plain = parse(run("--device", "h200-sxm", "--model", "llama-3-8b", "--json"))
    fast = parse(run("--device", "h200-sxm", "--model", "llama-3-8b", "--cuda-graphs",
                     "--compiled", "--speculative-tokens", "2", "--json"))
    assert fast.estimate.times.decode_step_s < plain.estimate.times.decode_step_s


@pytest.mark.parametrize("args", [
    ["--sharding", "zero9"],
    ["--attention-kernel", "magic"],
    ["--offload-fraction", "1.5"],
    ["--speculative-tokens", "0.5"],
    ["--model", "no-such-model"],
    ["--device", "no-such-gpu"],
    ["--batch", "0"],
])
def test_bad_input_exits_2_with_hint(args):
    result = run("--device", "h200-sxm", *args, "--json") if "--device" not in args else \
        run(*args, "--json")
    assert result.exit_code == 2, result.output
    assert result.stdout.strip() == "" or not result.stdout.lstrip().startswith("{")
