"""Plans an engine can run, and recommend's goal from --phase (issue 30, items 8 and 9).

Before: --gpus 3/5/6/7/12 for a 64-head model emitted --tensor-parallel-size 3 (vLLM refuses
it: the heads do not split); 12 GPUs on an 8-per-node H200 profile were one NVLink domain; the
CPU default plan emitted --ctx-size 131072; `recommend --phase training` without --goal
planned for inference latency.
"""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

from hwadvisor.cli.app import app
from hwadvisor.perfmodel.layout import Layout, tp_fits_heads, tp_fits_node

runner = CliRunner()


def _recommend(*args: str) -> dict:
    result = runner.invoke(app, ["recommend", "--json", *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _tp(report: dict) -> int:
    config = (report["plan"] or {}).get("engine_config") or {}
    found = re.search(r"--tensor-parallel-size (\d+)", config.get("text", ""))
    return int(found.group(1)) if found else 1


@pytest.mark.parametrize("gpus", [3, 5, 6, 7, 12])
def test_tensor_parallel_sizes_split_the_heads(gpus: int) -> None:
    report = _recommend("--device", "h200-sxm", "--model", "llama-3-70b", "--gpus", str(gpus))
    size = _tp(report)
    heads = report["workload"]["spec"]["num_heads"]
    kv = report["workload"]["spec"]["num_kv_heads"]
    assert heads % size == 0 and (kv % size == 0 or size % kv == 0), size
    per_node = report["workload"]["gpus_per_node"] or gpus
    assert size <= per_node and per_node % size == 0


def test_gpus_beyond_one_system_are_split_into_nodes() -> None:
    report = _recommend("--device", "h200-sxm", "--model", "llama-3-70b", "--gpus", "12")
    workload = report["workload"]
    assert (workload["nodes"], workload["gpus_per_node"]) == (2, 6)
    assert any("planned as 2 nodes x 6 GPUs" in n for n in report["notes"])


def test_the_layout_never_picks_a_size_the_heads_refuse() -> None:
    layout = Layout(gpus=6, strategy="tp", nodes=1, gpus_per_node=6, training=False,
                    heads=(64, 8))
    assert layout.tp == 2 and layout.dp == 3
    assert not tp_fits_heads(3, (64, 8)) and tp_fits_heads(16, (64, 8))  # KV copied twice
    assert not tp_fits_node(4, 6, 2) and tp_fits_node(2, 6, 2) and tp_fits_node(12, 6, 2)


def test_phase_training_without_goal_plans_training_throughput() -> None:
    report = _recommend("--model", "llama-3-8b", "--phase", "training", "--device", "h100-sxm")
    assert report["goal"] == "training-throughput"
    assert any("--phase training plans for training-throughput" in n for n in report["notes"])
    explicit = _recommend("--model", "llama-3-8b", "--phase", "training", "--device",
                          "h100-sxm", "--goal", "memory-footprint")
    assert explicit["goal"] == "memory-footprint"


def test_the_cpu_default_plan_does_not_ask_for_the_full_context() -> None:
    report = _recommend()
    text = report["plan"]["engine_config"]["text"]
    found = re.search(r"--ctx-size (\d+)", text)
    # the request's prompt + generation per slot (padded to 256), not the model's 131072
    assert found is not None and int(found.group(1)) <= 4 * (2048 + 256 + 256)
