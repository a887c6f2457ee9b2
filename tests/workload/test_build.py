"""Workloads: model resolution, option validation, defaults, and the shared CLI options."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from hwadvisor.cli import options as opts
from hwadvisor.cli.app import HwGroup
from hwadvisor.errors import ExitCode, UserError
from hwadvisor.models import Workload
from hwadvisor.workload import (
    Sizing,
    WorkloadRequest,
    build_workload,
    default_model,
    list_presets,
    load_spec,
)

GiB = 1 << 30
TINY = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
        "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2,
        "vocab_size": 100}


def test_list_presets_has_the_required_models() -> None:
    required = {"llama-3-8b", "llama-3-70b", "llama-3.1-405b", "mixtral-8x7b", "gemma-2-9b",
                "deepseek-v3", "llama-3.2-1b", "qwen2.5-7b", "mistral-7b", "phi-3-mini",
                "qwen1.5-moe-a2.7b"}
    assert required <= set(list_presets())
    assert list_presets() == sorted(list_presets())


def test_build_workload_fills_spec_and_params() -> None:
    wl = build_workload(WorkloadRequest(model="mixtral-8x7b", phase="training", batch=4,
                                        prompt_len=4096, optimizer="adamw-8bit", grad_accum=8,
                                        activation_checkpointing=True))
    assert isinstance(wl, Workload) and wl.spec is not None
    assert wl.model == "mixtral-8x7b" and wl.phase == "training" and not wl.is_default
    assert wl.params_total > wl.params_active > 0
    assert wl.gen_len == 0  # no generation in training unless asked
    assert wl.activation_checkpointing and wl.grad_accum == 8
    # JSON round trip: the contract others consume
    assert Workload.model_validate_json(wl.model_dump_json()) == wl


def test_aliases_and_case_are_accepted() -> None:
    wl = build_workload(WorkloadRequest(model="Llama-3-8B", weights_dtype="bfloat16",
                                        kv_dtype="FP8", optimizer="adam"))
    assert wl.model == "llama-3-8b" and wl.weights_dtype == "bf16" and wl.kv_dtype == "fp8"
    assert wl.optimizer == "adamw"
    assert build_workload(WorkloadRequest(model="meta-llama/Meta-Llama-3-8B")).model == "llama-3-8b"


@pytest.mark.parametrize(
    ("kwargs", "option"),
    [
        ({"phase": "train"}, "--phase"),
        ({"batch": 0}, "--batch"),
        ({"batch": -3}, "--batch"),
        ({"batch": 1 << 40}, "--batch"),
        ({"prompt_len": 0}, "--prompt-len"),
        ({"gen_len": -1}, "--gen-len"),
        ({"weights_dtype": "fp12"}, "--weights-dtype"),
        ({"kv_dtype": "int3"}, "--kv-dtype"),
        ({"activation_dtype": "x"}, "--activation-dtype"),
        ({"optimizer": "lion"}, "--optimizer"),
        ({"grad_accum": 0}, "--grad-accum"),
        ({"gpus": 0}, "--gpus"),
        ({"nodes": 0}, "--nodes"),
        ({"gpus_per_node": -8}, "--gpus-per-node"),
        ({"inter_node_gbps": 0.0}, "--inter-node-gbps"),
        ({"inter_node_gbps": float("nan")}, "--inter-node-gbps"),
        ({"gpus": 3, "nodes": 2}, "--gpus"),
        ({"gpus": 8, "nodes": 2, "gpus_per_node": 8}, "--gpus"),
        ({"nodes": 4}, "--nodes"),
    ],
)
def test_bad_options_name_the_option(kwargs: dict, option: str) -> None:
    with pytest.raises(UserError) as info:
        build_workload(WorkloadRequest(model="llama-3-8b", **kwargs))
    assert option in info.value.message
    assert info.value.code == ExitCode.USAGE and info.value.hint


def test_choice_errors_list_the_valid_values() -> None:
    with pytest.raises(UserError) as info:
        build_workload(WorkloadRequest(model="llama-3-8b", optimizer="lion"))
    assert all(v in info.value.hint for v in ("adamw", "adamw-8bit", "sgd"))


def test_multi_node_layout() -> None:
    wl = build_workload(WorkloadRequest(model="llama-3-70b", phase="training", nodes=4,
                                        gpus_per_node=8, inter_node_gbps=50))
    assert (wl.gpus, wl.nodes, wl.gpus_per_node) == (32, 4, 8)
    assert wl.inter_node_bandwidth_gbps == 50.0
    wl = build_workload(WorkloadRequest(model="llama-3-70b", gpus=16, nodes=2))
    assert (wl.gpus, wl.nodes, wl.gpus_per_node) == (16, 2, 8)
    wl = build_workload(WorkloadRequest(model="llama-3-70b", gpus=8))
    assert (wl.gpus, wl.nodes, wl.gpus_per_node) == (8, 1, None)


def test_unknown_model_suggests_close_presets() -> None:
    with pytest.raises(UserError) as info:
        load_spec("llama-3-8")
    assert "llama-3-8" in info.value.message and "llama-3-8b" in info.value.hint
    with pytest.raises(UserError) as info:
        load_spec("someorg/unknown-model")
    assert "config.json" in info.value.hint
    with pytest.raises(UserError):
        load_spec("")


@pytest.mark.parametrize("model", ["a" * 5000, "a/" * 3000, "~no-such-user-xyz/config.json",
                                   "bad\x00name", "/does/not/exist/config.json", ".", "/"])
def test_odd_model_strings_are_user_errors(model: str) -> None:
    with pytest.raises(UserError) as info:
        build_workload(WorkloadRequest(model=model))
    assert len(info.value.message) < 400 and info.value.hint


def test_config_path_and_directory(tmp_path: Path) -> None:
    model_dir = tmp_path / "tiny"
    model_dir.mkdir()
    (model_dir / "config.json").write_text(json.dumps(TINY))
    by_dir = build_workload(WorkloadRequest(model=str(model_dir)))
    by_file = build_workload(WorkloadRequest(model=str(model_dir / "config.json")))
    assert by_dir.spec.name == by_file.spec.name == "tiny"
    assert by_dir.params_total == by_file.params_total
    assert by_file.model == str(model_dir / "config.json")
    # A path wins over a preset only when it looks like a path: "./llama-3-8b" is the folder.
    preset_named = tmp_path / "llama-3-8b"
    preset_named.mkdir()
    (preset_named / "config.json").write_text(json.dumps(TINY))
    assert build_workload(WorkloadRequest(model=str(preset_named))).spec.hidden_size == 64


@pytest.mark.parametrize(
    ("phase", "memory", "device_class", "expected"),
    [
        ("inference", 141 * GiB, "datacenter-gpu", "llama-3-8b"),
        ("inference", 24 * GiB, "consumer-gpu", "llama-3-8b"),
        ("inference", 8 * GiB, "consumer-gpu", "llama-3.2-1b"),
        ("inference", 64 * GiB, "apple-silicon", "llama-3-8b"),
        ("inference", 12 * GiB, "mobile-soc", "llama-3.2-1b"),
        ("inference", 512 * GiB, "cpu", "llama-3.2-1b"),
        ("inference", None, None, "llama-3.2-1b"),
        ("training", 141 * GiB, "datacenter-gpu", "llama-3-8b"),
        ("training", 24 * GiB, "consumer-gpu", "llama-3.2-1b"),
    ],
)
def test_default_model(
    phase: str, memory: int | None, device_class: str | None, expected: str
) -> None:
    assert default_model(phase, Sizing(memory, device_class)) == expected


def test_default_workload_is_marked() -> None:
    from hwadvisor.models import DeviceClass

    wl = build_workload(WorkloadRequest(), Sizing(80 * GiB, DeviceClass.DATACENTER_GPU))
    assert wl.is_default and wl.model == "llama-3-8b" and wl.spec is not None
    assert build_workload(WorkloadRequest(), Sizing(device_class="cpu")).is_default


# ------------------------------------------------------------------ the shared CLI options


def _app() -> typer.Typer:
    app = typer.Typer(cls=HwGroup)

    @app.callback()
    def _root() -> None:
        """Test root."""

    @app.command("wl")
    @opts.workload_options
    def wl(request: WorkloadRequest) -> None:
        """Print the workload as JSON."""
        workload = build_workload(request, Sizing(device_class="cpu"))
        typer.echo(workload.model_dump_json())

    return app


def test_cli_options_parse_into_a_workload() -> None:
    args = ["wl", "--model", "deepseek-v3", "--phase", "training", "--batch", "2",
            "--prompt-len", "4096", "--gen-len", "0", "--weights-dtype", "fp8",
            "--kv-dtype", "fp8", "--activation-dtype", "bf16", "--optimizer", "adamw-8bit",
            "--grad-accum", "4", "--nodes", "2", "--gpus-per-node", "8",
            "--inter-node-gbps", "50", "--activation-checkpointing"]
    result = CliRunner().invoke(_app(), args)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["model"] == "deepseek-v3" and data["gpus"] == 16 and data["nodes"] == 2
    assert data["weights_dtype"] == "fp8" and data["activation_checkpointing"] is True
    assert data["spec"]["attention"] == "mla" and data["params_total"] > 6e11


def test_cli_defaults_and_no_flag() -> None:
    result = CliRunner().invoke(_app(), ["wl", "--no-activation-checkpointing"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["is_default"] is True and data["model"] == "llama-3.2-1b"
    assert data["activation_checkpointing"] is False and data["batch"] == 1


@pytest.mark.parametrize(
    "args",
    [["--model", "nope-model"], ["--batch", "0"], ["--phase", "serve"],
     ["--kv-dtype", "fp12"], ["--model", "/does/not/exist/config.json"]],
)
def test_cli_bad_values_exit_2_without_traceback(args: list[str]) -> None:
    result = CliRunner().invoke(_app(), ["wl", *args])
    assert result.exit_code == int(ExitCode.USAGE)
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.output


def test_cli_non_integer_is_a_usage_error() -> None:
    result = CliRunner().invoke(_app(), ["wl", "--batch", "two"])
    assert result.exit_code == int(ExitCode.USAGE)


def _has_command(name: str) -> bool:
    from hwadvisor.cli.app import app

    return CliRunner().invoke(app, [name, "--help"]).exit_code == 0


def test_real_cli_estimate_uses_the_shared_options() -> None:
    """End to end through hwadvisor.cli.app (the estimate command reuses these options)."""
    from hwadvisor.cli.app import app

    if not _has_command("estimate"):
        pytest.skip("the estimate command is not registered yet")
    runner = CliRunner()
    result = runner.invoke(app, ["estimate", "--model", "mixtral-8x7b", "--batch", "2",
                                 "--kv-dtype", "fp8", "--json"])
    assert result.exit_code == 0, result.output
    workload = json.loads(result.stdout)["workload"]
    assert workload["model"] == "mixtral-8x7b" and workload["batch"] == 2
    assert workload["kv_dtype"] == "fp8" and workload["params_active"] < workload["params_total"]
    bad = runner.invoke(app, ["estimate", "--model", "mixtral-8x7", "--json"])
    assert bad.exit_code == int(ExitCode.USAGE)
    assert bad.stdout.strip() == ""  # nothing half-written to stdout
