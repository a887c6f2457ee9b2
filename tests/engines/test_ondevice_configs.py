"""Core ML and QNN plans say what those engines run: the unit, the tools' own configs, titles.

The coremltools conversion is checked against the names read from the coremltools wheel
(tests/fixtures/engine_flags/coremltools.json), Genie's genie_config.json against the keys
Qualcomm AI Hub's exporter writes (genie.json); both tables come from scripts/engine_flags.py.
"""

from __future__ import annotations

import ast
import json
from functools import cache

import pytest
from engine_flag_check import check_keys, check_python, table

from hwadvisor.models import Report
from hwadvisor.pipeline import recommend_report
from hwadvisor.workload import WorkloadRequest

B = "inference-latency"
# Other engines' words that a Core ML or QNN plan must not carry in its steps.
FOREIGN = ("MLX", "mlx", "llama.cpp", "Q4_K_M", "Q4_0", "Q8_0", "vLLM")


@cache
def _plan(device: str, engine: str, model: str, options: tuple[str, ...] = ()) -> Report:
    request = WorkloadRequest(model=model, engine=engine, engine_options=options)
    return recommend_report(B, device, request)


def _config(report: Report):  # noqa: ANN202 - the report's EngineConfig
    assert report.plan is not None and report.plan.engine_config is not None
    return report.plan.engine_config


def _other(report: Report, tool: str):  # noqa: ANN202
    return next(c for c in _config(report).also if c.tool == tool)


def test_the_compute_unit_option_reaches_both_core_ml_configs() -> None:
    gpu = _plan("m1-max", "coreml", "llama-3.1-8b")
    npu = _plan("m1-max", "coreml", "llama-3.1-8b", ("compute_unit=npu",))
    assert 'backend.coreml.compute_units="cpu_and_gpu"' in _config(gpu).text
    assert 'backend.coreml.compute_units="cpu_and_ne"' in _config(npu).text
    assert "compute_units=ct.ComputeUnit.CPU_AND_GPU" in _other(gpu, "coremltools").text
    assert "compute_units=ct.ComputeUnit.CPU_AND_NE" in _other(npu, "coremltools").text


def _enum_problems(text: str, enums: dict[str, list[str]]) -> list[str]:
    """Return ct.ComputeUnit.X / ct.target.Y members that coremltools does not define."""
    problems = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute):
            owner = ast.unparse(node.value)
            if owner in enums and node.attr not in enums[owner]:
                problems.append(f"{owner}.{node.attr}")
    return problems


@pytest.mark.parametrize("options", [(), ("compute_unit=npu",), ("compute_unit=cpu",)])
def test_the_coremltools_conversion_uses_names_coremltools_has(options: tuple[str, ...]) -> None:
    data = table("coremltools")
    assert data is not None
    report = _plan("a18-pro", "coreml", "llama-3-8b", options)
    other = _other(report, "coremltools")
    assert "linear_quantize_weights" in other.text  # the 8B needs 4-bit weights on a phone
    assert check_python(other.text, data["commands"]) == []
    assert _enum_problems(other.text, data["commands"]["enums"]["enums"]) == []


def test_a_bad_coremltools_name_is_caught() -> None:
    data = table("coremltools")
    assert data is not None
    bad = ("mlmodel = ct.convert(traced, compute_unit=ct.ComputeUnit.NEURAL_ENGINE)\n"
           'op = ct.optimize.coreml.OpLinearQuantizerConfig(dtype="int3")\n')
    assert len(check_python(bad, data["commands"])) == 2
    enums = data["commands"]["enums"]["enums"]
    assert _enum_problems(bad, enums) == ["ct.ComputeUnit.NEURAL_ENGINE"]


def test_the_genie_config_sets_keys_genie_reads() -> None:
    data = table("genie")
    assert data is not None
    report = _plan("snapdragon-8-elite", "qnn", "llama-3.2-3b")
    other = _other(report, "genie")
    parsed = json.loads(other.text)
    assert check_keys(parsed, data["commands"]["genie_config.json"], "genie") == []
    assert parsed["dialog"]["engine"]["backend"]["type"] == "QnnHtp"
    assert parsed["dialog"]["context"]["size"] >= 2048 + 256


@pytest.mark.parametrize(("device", "engine", "model"), [
    ("m1-max", "coreml", "llama-3.1-8b"), ("a18-pro", "coreml", "llama-3-8b"),
    ("snapdragon-8-elite", "qnn", "llama-3.2-3b"), ("snapdragon-8-gen-3", "qnn", "llama-3-8b"),
])
def test_core_ml_and_qnn_steps_do_not_name_other_engines(device: str, engine: str,
                                                          model: str) -> None:
    report = _plan(device, engine, model)
    assert report.plan is not None
    words = [s.title for s in report.plan.steps] + \
        [json.dumps(r.model_dump(include={"title", "why"})) for r in report.recommendations]
    named = [(w, f) for w in words for f in FOREIGN if f in w]
    assert named == []


def test_core_ml_on_the_neural_engine_plans_on_the_profiles_ane_figure() -> None:
    from hwadvisor import profiles
    from hwadvisor.engines import baseline_options
    from hwadvisor.perfmodel import estimate
    from hwadvisor.workload import Sizing, build_workload

    device = profiles.device_from_profile("a17-pro")
    workload = build_workload(WorkloadRequest(model="llama-3.2-1b", weights_dtype="int4",
                                              prompt_len=512, gen_len=64, engine="coreml"),
                              Sizing(device.memory_total_bytes, device.device_class))
    npu = workload.model_copy(update={"engine_options": {"compute_unit": "npu"}})
    est = estimate(npu, device, baseline_options(npu, device))
    assert any("npu via Apple Neural Engine" in a for a in est.assumptions)
    gpu = estimate(workload, device, baseline_options(workload, device))
    assert not any("Neural Engine" in a for a in gpu.assumptions)


# ---------------------------------------------------------------------------------------------
# MLC LLM on a phone: the app route (convert, gen_config, package into MLCChat), not a server


def test_mlc_on_a_phone_is_compiled_into_the_app_not_served() -> None:
    from engine_flag_check import check_config, check_files, command_blocks

    android = _config(_plan("snapdragon-8-gen-3", "mlc-llm", "llama-3.2-1b"))
    assert "mlc_llm serve" not in android.text and "--mode" not in android.text
    commands = [block.split()[:2] for block in command_blocks(
        "\n".join(line for line in android.text.splitlines() if not line.startswith("#")))]
    assert commands == [["mlc_llm", "convert_weight"], ["mlc_llm", "gen_config"],
                        ["mlc_llm", "package"]]
    package = json.loads(android.files["mlc-package-config.json"])
    entry = package["model_list"][0]
    assert package["device"] == "android"
    # the 4-bit plan in MLC's Android layout, in the folder gen_config wrote
    assert "--quantization q4f16_0" in android.text
    assert entry["model"] == "dist/Llama-3.2-1B-q4f16_0-MLC" and entry["bundle_weight"] is True
    assert entry["overrides"]["context_window_size"] == 2304  # 2048 + 256, the plan's request
    assert "--context-window-size 2304" in android.text
    assert check_config("mlc-llm", android.format, android.text, android.version) == []
    assert check_files("mlc-llm", dict(android.files)) == []

    iphone = _config(_plan("a18-pro", "mlc-llm", "qwen2.5-1.5b"))
    assert json.loads(iphone.files["mlc-package-config.json"])["device"] == "iphone"
    assert "--quantization q4f16_1" in iphone.text and "--conv-template qwen2" in iphone.text
    assert check_config("mlc-llm", iphone.format, iphone.text, iphone.version) == []


def test_mlc_off_the_phone_still_serves() -> None:
    mac = _config(_plan("m1-max", "mlc-llm", "llama-3.1-8b"))
    assert mac.text.startswith("mlc_llm serve") and not mac.files


def test_a_package_config_key_mlc_does_not_read_is_caught() -> None:
    from engine_flag_check import check_files

    bad = {"device": "android", "model_list": [{"model": "m", "model_id": "m",
                                                 "estimated_vram_bytes": 1, "weights": "x"}]}
    problems = check_files("mlc-llm", {"mlc-package-config.json": json.dumps(bad)})
    assert any("weights" in p for p in problems)


def test_executorch_exports_meta_s_own_files_under_the_model_s_class() -> None:
    # export_llm reads consolidated.00.pth and params.json (examples/models/llama/README.md);
    # a preset id as base.checkpoint is no file at all
    report = _plan("snapdragon-8-gen-3", "executorch", "llama-3.2-1b")
    assert report.plan is not None and report.plan.engine_config is not None
    text = report.plan.engine_config.text
    # the 4-bit plan exports Meta's prequantised SpinQuant files, whose params.json carries the
    # quantization_args export_llm's pre-quantisation reads (the original one has none)
    spin = "Llama-3.2-1B-Instruct-SpinQuant_INT4_EO8"
    assert f'base.checkpoint="{spin}/consolidated.00.pth"' in text
    assert f'base.params="{spin}/params.json"' in text
    assert "original/consolidated.00.pth" not in text
    assert 'base.model_class="llama3_2"' in text
    assert f"hf download meta-llama/{spin} --local-dir {spin}" in " ".join(
        report.plan.engine_config.notes)
    assert check_python(text, table("executorch")["commands"]) == []
