"""The plan's engine values read a device's datasheet facts from the Device, not its profile."""

from __future__ import annotations

from pathlib import Path

from hwadvisor import profiles
from hwadvisor.rules.engine_config import _DEFAULT_SOC, _soc_model


def test_the_soc_model_is_the_part_the_device_carries() -> None:
    assert _soc_model(profiles.device_from_profile("snapdragon-8-elite")) == "SM8750"
    assert _soc_model(profiles.device_from_profile("snapdragon-8-gen-2")) == "SM8550"
    assert _soc_model(profiles.device_from_profile("h200-sxm")) == _DEFAULT_SOC


def test_no_profile_is_looked_up_by_id_for_it() -> None:
    """A device made without its SoC part gets QNN's default, though its profile names one."""
    phone = profiles.device_from_profile("snapdragon-8-elite")
    assert _soc_model(phone.model_copy(update={"soc_part": None})) == _DEFAULT_SOC


def test_the_command_names_the_model_as_the_engine_loads_it(tmp_path: object) -> None:
    """A preset id is no checkpoint: vLLM, SGLang, TensorRT-LLM and mlx-lm get its Hub repo,
    llama-server the GGUF file in the planned format, a user's config.json its folder."""
    from pathlib import Path

    from hwadvisor.workload import engine_model_name

    assert engine_model_name("llama-3-8b", "hf") == "meta-llama/Meta-Llama-3-8B"
    assert engine_model_name("Qwen/Qwen3-8B", "hf") == "Qwen/Qwen3-8B"
    assert engine_model_name("my-org/my-model", "hf") == "my-org/my-model"
    assert engine_model_name("llama-3-8b", "gguf", "q4_k_m") == "Meta-Llama-3-8B-Q4_K_M.gguf"
    assert engine_model_name("llama-3.2-1b", "gguf", "fp16") == "Llama-3.2-1B-F16.gguf"
    config = Path(str(tmp_path)) / "ckpt" / "config.json"
    assert engine_model_name(str(config), "hf") == str(config.parent)
    assert engine_model_name("llama-3-8b", None) == "llama-3-8b"


def test_the_gallery_commands_load_a_checkpoint_not_a_preset_id() -> None:
    from hwadvisor.workload import list_presets

    gallery = (Path(__file__).resolve().parents[2] / "docs" / "scenarios.md").read_text()
    lines = [line.split() for line in gallery.splitlines()
             if line.startswith(("vllm serve ", "trtllm-serve ", "llama-server -m "))]
    assert lines
    for words in lines:
        model = words[1] if words[0] == "trtllm-serve" else words[2]
        assert model not in list_presets(), words
        assert "/" in model or model.endswith(".gguf"), words


def test_a_quantisation_step_is_titled_in_the_engine_s_own_terms() -> None:
    from hwadvisor.pipeline import recommend_report
    from hwadvisor.workload import WorkloadRequest

    def titles(engine: str, device: str, model: str) -> list[str]:
        report = recommend_report("inference-latency", device,
                                  WorkloadRequest(model=model, engine=engine))
        return [s.title for s in report.plan.steps] if report.plan else []

    exl2 = titles("exllamav2", "rtx-4090", "llama-3-70b")
    assert any("EXL2" in t for t in exl2) and not any("Marlin" in t for t in exl2)
    q8 = titles("llamacpp", "rtx-4090", "llama-3-8b")
    assert any(t.startswith("Serve Q8_0") for t in q8) and not any("W8A8" in t for t in q8)


def test_megatron_fsdp_plans_save_checkpoints_in_the_format_it_requires() -> None:
    # Issue 41 item 9: Megatron-LM's validate_args asserts ckpt_format == "fsdp_dtensor" under
    # --use-megatron-fsdp, and the default is torch_dist: without the flag the job stops.
    from hwadvisor.pipeline import recommend_report
    from hwadvisor.workload import WorkloadRequest

    report = recommend_report("training-throughput", "h100-sxm", WorkloadRequest(
        model="llama-3-70b", phase="training", batch=1, prompt_len=4096, gpus=8,
        engine="megatron"))
    assert report.plan is not None and report.plan.engine_config is not None
    text = report.plan.engine_config.text
    assert "--use-megatron-fsdp" in text
    assert "--ckpt-format fsdp_dtensor" in text


def test_the_serving_search_s_step_budget_is_in_every_engine_s_command() -> None:
    # the search ranks configs by their step budget; an engine told nothing runs its default
    # (TensorRT-LLM max_num_tokens 8192, SGLang's chunked_prefill_size by GPU memory)
    from hwadvisor.pipeline import recommend_report
    from hwadvisor.rules.playbooks.goals import parse_goal
    from hwadvisor.serving.request import LoadRequest
    from hwadvisor.workload import WorkloadRequest

    flags = {"trtllm": "--max_num_tokens", "sglang": "--chunked-prefill-size",
             "vllm": "--max-num-batched-tokens"}
    for engine, flag in flags.items():
        report = recommend_report(parse_goal("inference-latency"), "h100-sxm",
                                  WorkloadRequest(model="llama-3-8b", engine=engine),
                                  load=LoadRequest(rate=20.0, dataset="chat", ttft_ms=1000,
                                                   tpot_ms=30))
        assert report.serving is not None and report.serving.config is not None
        assert report.plan is not None and report.plan.engine_config is not None
        step = report.serving.config.step_tokens
        assert f"{flag} {step}" in report.plan.engine_config.text, (engine, step)
