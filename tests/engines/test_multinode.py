"""Plans over several nodes start as the engines launch them: one command per node (or the
engine's launcher), the head's address a placeholder the user fills, every flag one the
engine's own parser takes at its pinned version (tests/fixtures/engine_flags/).

Multi-node runs cannot be executed here: these hold the commands' text and flags.
"""

from __future__ import annotations

from functools import cache

import pytest
from engine_flag_check import (
    check_config,
    check_launch,
    check_rendered,
    cli_tokens,
    command_blocks,
    load_engines,
    render_config,
)

from hwadvisor.engines import PlanValues
from hwadvisor.models import Report

HEAD = "HEAD_IP"


@cache
def _plan(goal: str, device: str, **workload: object) -> Report:
    from hwadvisor.pipeline import recommend_report
    from hwadvisor.rules.playbooks.goals import parse_goal
    from hwadvisor.workload import WorkloadRequest

    return recommend_report(parse_goal(goal), device, WorkloadRequest(**workload))


def _flags(command: str) -> dict[str, str | None]:
    """Return a command's flags and their values (a switch: None)."""
    tokens = cli_tokens(command)
    out: dict[str, str | None] = {}
    for i, token in enumerate(tokens):
        if token.startswith("--"):
            following = tokens[i + 1] if i + 1 < len(tokens) else None
            out[token] = None if following is None or following.startswith("--") \
                else following
    return out


def _nodes(report: Report) -> list[dict[str, str | None]]:
    config = report.plan.engine_config
    assert config is not None
    return [_flags(block) for block in command_blocks(config.text)]


def test_a_405b_that_fits_one_node_is_a_replica_per_node_not_tp_16_over_the_network():
    report = _plan("b", "h100-sxm", model="llama-3.1-405b", batch=1, nodes=2, gpus_per_node=8)
    layout = report.plan.layout
    assert layout is not None and (layout.tp, layout.dp) == (8, 2)
    config = report.plan.engine_config
    assert config is not None
    nodes = _nodes(report)
    assert len(nodes) == 1  # the same server on each node
    assert nodes[0]["--tensor-parallel-size"] == "8"
    assert "--data-parallel-size" not in nodes[0] and "--nnodes" not in nodes[0]
    assert "on each of the 2 nodes" in config.text
    assert any("load balancer" in note for note in config.notes)
    assert check_config("vllm", "cli", config.text) == []


def test_vllm_tp_over_two_nodes_names_each_nodes_rank_and_the_head():
    # lossless: no FP8 weights (Ampere runs them weight-only), so 810 GB of bf16 needs two nodes
    report = _plan("b", "a100-80gb", model="llama-3.1-405b", batch=8, nodes=2, gpus_per_node=8,
                   quality="lossless")
    layout = report.plan.layout
    assert layout is not None and layout.tp * layout.pp == 16
    head, worker = _nodes(report)
    for rank, node in enumerate((head, worker)):
        assert node["--nnodes"] == "2" and node["--node-rank"] == str(rank)
        assert node["--master-addr"] == HEAD
    assert "--headless" in worker and "--headless" not in head
    config = report.plan.engine_config
    assert config is not None and check_config("vllm", "cli", config.text) == []
    assert config.text.startswith("# HEAD_IP is node 0's address")


def test_vllm_dp_attention_over_two_nodes_starts_the_second_nodes_ranks_headless():
    report = _plan("b", "h100-sxm", model="deepseek-v3", batch=64, nodes=2, gpus_per_node=8)
    layout = report.plan.layout
    assert layout is not None and layout.attn_dp == 16
    head, worker = _nodes(report)
    for node in (head, worker):
        assert node["--data-parallel-size"] == "16"
        assert node["--data-parallel-size-local"] == "8"
        assert node["--data-parallel-address"] == HEAD
        assert node["--data-parallel-rpc-port"] is not None
    assert worker["--data-parallel-start-rank"] == "8" and "--headless" in worker
    assert "--headless" not in head and "--data-parallel-start-rank" not in head
    config = report.plan.engine_config
    assert config is not None and check_config("vllm", "cli", config.text) == []


def test_sglang_over_two_nodes_says_nnodes_node_rank_and_the_dist_init_address():
    # in 16 bits the 405B spans both nodes (in 8 bits it fits one, replicated per node)
    report = _plan("b", "a100-80gb", model="llama-3.1-405b", batch=8, nodes=2, gpus_per_node=8,
                   engine="sglang", quality="lossless")
    head, worker = _nodes(report)
    for rank, node in enumerate((head, worker)):
        assert (node["--nnodes"], node["--node-rank"]) == ("2", str(rank))
        assert node["--dist-init-addr"] == f"{HEAD}:5000"
        assert node["--tp-size"] == "16"
    config = report.plan.engine_config
    assert config is not None and check_config("sglang", "cli", config.text) == []


def _values(**more: object) -> PlanValues:
    base = dict(model="meta-llama/Llama-3.1-405B-Instruct", tp=16, gpus=16, nodes=2,
                gpus_per_node=8, max_batch=64, max_model_len=8192, head_address=HEAD,
                group_nodes=2, dp_local=1)
    return PlanValues(**{**base, **more})  # type: ignore[arg-type]


def test_tensorrt_llm_over_two_nodes_starts_once_under_srun_and_trtllm_llmapi_launch():
    rendered = render_config(load_engines()["trtllm"], [], _values(), "datacenter-gpu",
                             launch="group")
    blocks = command_blocks(rendered.text)
    assert len(blocks) == 1
    tokens = cli_tokens(blocks[0])
    assert tokens[:3] == ["srun", "-N", "2"]
    assert "trtllm-llmapi-launch" in tokens and tokens.index("trtllm-serve") > \
        tokens.index("trtllm-llmapi-launch")
    assert check_rendered(rendered) == []


def test_more_than_four_nodes_spell_the_head_and_node_one_then_say_the_rest():
    rendered = render_config(load_engines()["vllm"], [], _values(tp=8, pp=8, gpus=64, nodes=8,
                                                                  group_nodes=8),
                             "datacenter-gpu", launch="group")
    blocks = command_blocks(rendered.text)
    assert [_flags(b)["--node-rank"] for b in blocks] == ["0", "1"]
    assert "# nodes 2 to 7: as node 1" in rendered.text
    assert check_rendered(rendered) == []


def test_a_single_node_plan_is_one_command_as_before():
    rendered = render_config(load_engines()["vllm"], [], _values(nodes=1, tp=8, gpus=8),
                             "datacenter-gpu", launch=None)
    assert not rendered.text.startswith("#") and "--nnodes" not in rendered.text


@pytest.mark.parametrize(("engine", "launcher"), [
    ("torchtitan", "torchrun"), ("deepspeed", "deepspeed"), ("hf", "torchrun")])
def test_training_over_nodes_says_the_launcher_with_its_rendezvous(engine, launcher):
    report = _plan("a", "h100-sxm", model="llama-3-8b", phase="training", batch=2,
                   prompt_len=4096, nodes=2, gpus_per_node=8, engine=engine)
    config = report.plan.engine_config
    assert config is not None
    blocks = command_blocks(config.launch)
    assert len(blocks) == 1
    flags = _flags(blocks[0])
    assert cli_tokens(blocks[0])[0] == launcher
    if launcher == "torchrun":
        assert (flags["--nnodes"], flags["--nproc-per-node"]) == ("2", "8")
        assert flags["--rdzv-endpoint"] == f"{HEAD}:29500"
    else:
        assert (flags["--num_nodes"], flags["--num_gpus"]) == ("2", "8")
        assert flags["--hostfile"] == "hostfile"
    assert check_launch(config.launch) == []
    assert any("fill it in" in note for note in config.notes)


def test_megatron_over_nodes_runs_pretrain_gpt_under_the_rendezvous():
    report = _plan("a", "h100-sxm", model="llama-3-70b", phase="training", batch=1,
                   prompt_len=4096, nodes=8, gpus_per_node=8, grad_accum=16, engine="megatron")
    config = report.plan.engine_config
    assert config is not None
    (block,) = command_blocks(config.text)
    assert cli_tokens(block)[:3] == ["torchrun", "--nnodes", "8"]
    assert check_config("megatron", "cli", config.text) + check_launch(config.text) == []


def test_a_launch_flag_the_launcher_does_not_take_is_caught():
    assert check_launch("torchrun --nnodes 2 --head-node x -m torchtitan.train") != []
