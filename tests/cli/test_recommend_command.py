"""`hwadvisor recommend` through the CLI: exit codes and the parsed JSON report."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from hwadvisor.cli.app import app
from hwadvisor.models import Validation
from hwadvisor.report.io import load_report
from hwadvisor.validator.found import Found

runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(app, ["recommend", *args])


def recommend_json(*args: str) -> dict:
    result = invoke(*args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_json_report_has_the_contract_keys():
    # Plain transformers serving (--engine hf): eager decode at batch 1 waits on kernel launches
    # (28.6 ms eager against 8.95 ms graphed on the H200, docs/benchmarks.md).
    data = recommend_json("--device", "h200-sxm", "--model", "llama-3-8b", "--goal",
                          "inference-latency", "--engine", "hf")
    assert data["kind"] == "recommend" and data["goal"] == "inference-latency"
    assert data["device_class"] == "datacenter-gpu"
    assert data["workload"]["model"] == "llama-3-8b" and data["workload"]["is_default"] is False
    assert data["estimate"]["bottleneck"] == "launch-overhead"
    recs = data["recommendations"]
    assert recs, "nothing recommended for a launch-bound decode"
    for rec in recs:
        assert {"id", "goal", "title", "why", "predicted", "trial", "validation"} <= set(rec)
        assert rec["goal"] == "inference-latency"
        assert {"metric", "before", "after", "factor"} <= set(rec["predicted"])
        assert rec["validation"]["status"] == "pending"
    assert [r["rank"] for r in recs] == list(range(1, len(recs) + 1))
    ids = {r["id"] for r in recs}
    assert "cuda-graphs" in ids and "speculative-decoding" in ids
    plan = data["plan"]
    assert plan["fits"] is True and plan["min_gpus"] is None
    assert [s["id"] for s in plan["steps"]] == [r["id"] for r in recs if r["in_plan"]]
    assert plan["metric"]["name"] == "request_latency_s" and plan["metric"]["better"] == "lower"
    assert plan["metric"]["after"] < plan["metric"]["before"]
    for rej in data["rejected"]:
        assert rej["id"] and rej["why_not"].startswith(rej["id"] + ":")


@pytest.mark.parametrize("alias, goal", [
    ("a", "training-throughput"), ("B", "inference-latency"), ("c", "memory-footprint"),
])
def test_goal_aliases(alias, goal):
    data = recommend_json("--device", "a100-80gb", "--model", "llama-3.2-1b", "--goal", alias)
    assert data["goal"] == goal
    assert all(r["goal"] == goal for r in data["recommendations"])
    # goal A implies training when --phase is not given
    expected_phase = "training" if goal == "training-throughput" else "inference"
    assert data["workload"]["phase"] == expected_phase


def test_bad_goal_exits_2_with_the_choices():
    result = invoke("--goal", "speed", "--device", "h200-sxm")
    assert result.exit_code == 2
    assert "training-throughput" in result.output and "memory-footprint" in result.output
    assert "Traceback" not in result.output


def test_bad_device_exits_2():
    result = invoke("--device", "no-such-gpu", "--model", "llama-3-8b")
    assert result.exit_code == 2


def test_no_model_uses_the_default_workload_and_says_so():
    data = recommend_json("--device", "rtx-4090")
    assert data["workload"]["is_default"] is True
    assert any("default workload" in n and data["workload"]["model"] in n
               for n in data["notes"])


def test_no_options_at_all_works_on_this_machine():
    """The README's first command: probed hardware (CPU-only here), default goal and model."""
    data = recommend_json()
    assert data["goal"] == "inference-latency"
    assert data["workload"]["is_default"] is True
    assert data["recommendations"], "the defaults must give some advice on any machine"


def test_gpus_plans_that_many_devices_and_shards():
    # Plain PyTorch training starts from DDP, which cannot hold 8B with AdamW: FSDP makes it fit.
    data = recommend_json("--device", "h100-sxm", "--model", "llama-3-8b", "--goal", "a",
                          "--gpus", "8", "--engine", "hf")
    assert len(data["devices"]) == 8 and data["workload"]["gpus"] == 8
    shard = next(r for r in data["recommendations"] if r["id"] == "fsdp2-zero3")
    assert shard["trial"] == "collectives" and shard["step"] == 1
    assert shard["predicted"]["after"] < shard["predicted"]["before"]
    assert data["plan"]["steps"][0]["needed_to_fit"] is True and data["plan"]["fits"] is True


def test_output_file_is_a_loadable_report(tmp_path):
    path = tmp_path / "rec.json"
    result = invoke("--device", "m3-max", "--model", "llama-3-8b", "--goal", "c",
                    "--engine", "hf", "--output", str(path))
    assert result.exit_code == 0, result.output
    report = load_report(path)
    assert report.kind == "recommend" and report.goal == "memory-footprint"
    assert "mmap-weights" in {r.id for r in report.recommendations}
    assert report.plan is not None and report.plan.metric.name == "memory_per_gpu_bytes"
    assert not list(tmp_path.glob(".*.tmp"))  # the atomic write left no temp file


def test_output_into_missing_folder_exits_2(tmp_path):
    result = invoke("--device", "h200-sxm", "--model", "llama-3-8b",
                    "--output", str(tmp_path / "nope" / "rec.json"))
    assert result.exit_code == 2


def test_validate_hands_the_report_to_the_validator(monkeypatch):
    """--validate calls verdicts_for(report, progress=...) and emits the verdicts it returns."""
    pytest.importorskip("torch", reason="--validate refuses to start without torch")
    import types

    seen = {}

    def fake_validate_report(report, progress, **_options):
        seen["ids"] = [r.id for r in report.recommendations]
        return Found(recommendations=[Validation(status="unsupported", detail="fake validator")
                                      for _ in report.recommendations])

    fake = types.ModuleType("hwadvisor.validator.runner")
    fake.verdicts_for = fake_validate_report
    monkeypatch.setitem(__import__("sys").modules, "hwadvisor.validator.runner", fake)
    data = recommend_json("--device", "h200-sxm", "--model", "llama-3-8b", "--validate")
    assert seen["ids"] == [r["id"] for r in data["recommendations"]]
    assert {r["validation"]["status"] for r in data["recommendations"]} == {"unsupported"}


def test_fail_on_gate_trips_exit_1(monkeypatch):
    pytest.importorskip("torch", reason="--validate refuses to start without torch")
    import types

    def refute_all(report, progress, **_options):
        return Found(recommendations=[Validation(status="refuted") for _ in report.recommendations])

    fake = types.ModuleType("hwadvisor.validator.runner")
    fake.verdicts_for = refute_all
    monkeypatch.setitem(__import__("sys").modules, "hwadvisor.validator.runner", fake)
    result = invoke("--device", "h200-sxm", "--model", "llama-3-8b", "--validate",
                    "--fail-on", "refuted", "--json")
    assert result.exit_code == 1
    assert json.loads(result.stdout)["gates_tripped"]


def test_gpus_beyond_one_node_are_split_into_the_reference_systems_nodes():
    data = recommend_json("--device", "h100-sxm", "--model", "llama-3-70b", "--goal", "a",
                          "--gpus", "32")
    assert data["workload"]["nodes"] == 4 and data["workload"]["gpus_per_node"] == 8
    assert any("4 nodes x 8 GPUs" in n for n in data["notes"])


@pytest.mark.parametrize("gpus", [2, 4])
def test_a_few_desktop_cards_are_one_workstation(gpus):
    """2 or 4 RTX 4090s are one machine on PCIe, not that many desktops on a network."""
    data = recommend_json("--device", "rtx-4090", "--model", "llama-3-70b", "--gpus", str(gpus))
    assert data["workload"]["gpus"] == gpus and data["workload"]["nodes"] == 1
    assert not any("per node): planned as" in n for n in data["notes"])
    assert not any("across nodes" in a for a in data["estimate"]["assumptions"])
    assert data["devices"][0]["max_gpus_per_node"] == 4


def test_more_desktop_cards_than_a_workstation_takes_are_split():
    data = recommend_json("--device", "rtx-4090", "--model", "llama-3-70b", "--gpus", "8")
    assert data["workload"]["nodes"] == 2 and data["workload"]["gpus_per_node"] == 4
    assert any("2 nodes x 4 GPUs" in n for n in data["notes"])


def test_host_memory_gb_sets_the_planned_host_and_is_bounded():
    data = recommend_json("--device", "rtx-4090", "--model", "llama-3-8b", "--goal", "a",
                          "--host-memory-gb", "256")
    assert data["host"]["memory_total_bytes"] == 256_000_000_000
    assert invoke("--device", "rtx-4090", "--host-memory-gb", "-3").exit_code == 2


def test_emit_writes_the_engine_config(tmp_path):
    path = tmp_path / "serve.sh"
    result = invoke("--device", "h100-sxm", "--model", "llama-3-8b", "--batch", "64",
                    "--emit", str(path))
    assert result.exit_code == 0, result.output
    text = path.read_text()
    assert text.startswith("vllm serve meta-llama/Meta-Llama-3-8B")
    assert "--kv-cache-dtype fp8" in text


def test_emit_writes_the_files_the_command_names_beside_it(tmp_path):
    # trtllm-serve takes its KV cache dtype and drafter from --extra_llm_api_options FILE: the
    # file is written next to the command, with the settings the notes used to say in prose
    import yaml
    from engine_flag_check import check_files

    path = tmp_path / "serve.sh"
    result = invoke("--device", "h100-sxm", "--model", "llama-3-8b", "--engine", "trtllm",
                    "--batch", "8", "--emit", str(path), "--json")
    assert result.exit_code == 0, result.output
    assert "--extra_llm_api_options extra_llm_api_options.yaml" in path.read_text()
    written = (tmp_path / "extra_llm_api_options.yaml").read_text()
    settings = yaml.safe_load(written)
    assert settings["kv_cache_config"] == {"dtype": "fp8"}
    assert settings["speculative_config"]["decoding_type"] == "NGram"
    assert check_files("trtllm", {"extra_llm_api_options.yaml": written}) == []
    report = json.loads(result.stdout)
    assert report["plan"]["engine_config"]["files"]["extra_llm_api_options.yaml"] == written


def _llama_server_chat_1b() -> dict:
    """The recommend report for Llama-3.2-1B Q4_K_M on llama-server, 2 chat requests/s."""
    result = invoke("--device", "h100-sxm", "--model", "llama-3.2-1b", "--weights-dtype",
                    "q4_k_m", "--engine", "llamacpp", "--gpus", "1", "--rate", "2", "--dataset",
                    "chat", "--ttft", "500", "--tpot", "20", "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_llama_server_slots_under_a_load_hold_its_long_requests():
    # llama-server splits --ctx-size evenly over --parallel: the serving config's slots must
    # each hold the load's long requests (p99 prompt + p99 output), not the batch-1 plan's
    # context spread over 64 slots (2304 / 64 = 36 tokens a slot would cut every request)
    report = _llama_server_chat_1b()
    best = report["serving"]["best"]["config"]
    settings = report["plan"]["engine_config"]["lines"]
    flags = dict((line["setting"].split(" ", 1) + [""])[:2] for line in settings)
    slots, ctx = int(flags["--parallel"]), int(flags["--ctx-size"])
    assert slots == best["max_sequences"]
    assert ctx == slots * best["slot_tokens"]
    assert best["slot_tokens"] >= 2 * 1024  # chat prompts of ~1k with their long tail
    # the step budget and the cache the search chose are said, not left at the defaults
    assert int(flags["--batch-size"]) == best["step_tokens"]
    assert ("--kv-unified" in flags) == best["kv_unified"]


def test_llama_server_at_light_load_shares_one_cache_across_its_slots():
    # two chat requests/s keep a few of the slots busy, scattered over their ids: a stream a
    # slot decodes them as a forward pass each, --kv-unified as one (docs/benchmarks.md, the
    # slots measured side by side and apart); the search takes the unified cache here
    report = _llama_server_chat_1b()
    assert report["serving"]["best"]["config"]["kv_unified"] is True
    assert "--kv-unified" in report["plan"]["engine_config"]["text"]
    streams = [p for p in report["serving"]["top"] if not p["config"]["kv_unified"]]
    if streams:  # a stream-a-slot config listed beside it is slower a token
        assert streams[0]["figures"]["tpot_p90_s"] > report["serving"]["best"]["figures"][
            "tpot_p90_s"]
