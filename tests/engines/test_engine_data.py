"""The engine data (hwadvisor/engines/data/<id>.toml): schema, coverage, and the renderer."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hwadvisor.engines import catalog
from hwadvisor.engines.catalog import default_engine, get_engine, load_engines, load_text
from hwadvisor.engines.render import render_config
from hwadvisor.engines.schema import (
    DEVICE_CLASSES,
    ENGINE_IDS,
    LAYOUT_KEYS,
    PHASES,
    PLACEHOLDERS,
    STEP_FORMS,
    STEP_IDS,
    Engine,
    placeholders,
    tomllib,  # the one Python 3.10 shim
)
from hwadvisor.engines.values import PlanValues
from hwadvisor.errors import ExitCode, UserError

ROOT = Path(__file__).resolve().parents[2]
EXPECTED_IDS = {"hf", "vllm", "sglang", "trtllm", "llamacpp", "exllamav2", "mlx", "executorch",
                "mlc-llm", "litert", "qnn", "coreml", "torchtitan", "megatron", "deepspeed"}

# A full set of plan values: every placeholder filled, so every step of every engine renders.
VALUES = PlanValues(
    prequantized="Llama-3.2-1B-Instruct-SpinQuant_INT4_EO8",
    model="meta-llama/Llama-3.1-8B-Instruct", model_name="Llama-3.1-8B-Instruct", tp=2, pp=2,
    dp=2, dp_shard=8,
    dp_replicate=2, ep=4, attn_dp=8, cp=2, gpus=16, nodes=2, gpus_per_node=8,
    batch=4,
    max_batch=64, prompt_len=2048, gen_len=256, context=8192, chunk=4096,
    kv_dtype="fp8", weights_dtype="bf16", spec_tokens=4, draft="org/draft-1b",
    spec_draft_tokens=5, gpu_layers=99,
    grad_accum=8, lora_rank=16, threads=8, offload_fraction=0.5,
    mtp_layers=1, soc_model="SM8750",
    mtp_draft_tokens=2, slot_context=2304, max_model_len=8192,
    kv_pool_tokens=147456, fine_tune_type="lora", precision_fp16=True,
    precision_bf16=True, zero_stage=3, global_batch=64, local_batch=4,
    checkpoint_every=2, recompute_layers=8,
    compute_units="gpu", torch_dtype="torch.bfloat16",
)


@pytest.fixture(scope="module")
def engines() -> dict[str, Engine]:
    return load_engines()


def test_the_shipped_file_loads_and_has_every_engine(engines):
    assert set(engines) == EXPECTED_IDS
    assert tuple(engines) == ENGINE_IDS
    assert all(engines[key].id == key for key in engines)


def test_load_is_cached():
    assert catalog._pinned("vllm") is catalog._pinned("vllm")
    assert get_engine("vllm", None, {"cuda_graphs": "false"}) is \
        get_engine("vllm", None, {"cuda_graphs": "false"})


def test_every_engine_has_one_data_file_and_every_file_is_an_engine():
    assert catalog.data_files() == sorted(ENGINE_IDS)


@pytest.mark.parametrize("part", ["costs", "kernels", "config"])
def test_an_engine_without_costs_kernels_or_a_config_does_not_load(part):
    # A new engine must say what it costs and which kernels it runs, or it would silently get
    # another engine's figures.
    text = _engine_text("vllm")
    start = text.index(f"\n[{part}]")
    end = text.find("\n[", start + 1)
    while end != -1 and text[end + 2:].startswith(f"{part}."):
        end = text.find("\n[", end + 1)
    cut = text[:start] + (text[end:] if end != -1 else "")
    with pytest.raises(ValueError, match=part):
        load_text(cut, "vllm", "vllm.toml")


@pytest.mark.parametrize("engine_id", sorted(EXPECTED_IDS))
def test_every_engine_names_its_version_and_sources(engines, engine_id):
    engine = engines[engine_id]
    assert engine.version and engine.defaults.version
    for url in engine.sources + engine.defaults.sources:
        assert url.startswith("https://"), url


@pytest.mark.parametrize("engine_id", sorted(EXPECTED_IDS))
def test_rule_ids_are_plan_step_ids(engines, engine_id):
    engine = engines[engine_id]
    config = engine.config
    named = (set(engine.applies) | set(engine.unsupported) | set(config.not_expressed)
             | set().union(*engine.unsupported_on.values()))
    assert named <= set(STEP_IDS)
    assert set(config.steps) | set(config.step_notes) <= set(STEP_IDS) | set(LAYOUT_KEYS) | set(
        STEP_FORMS)
    for form in set(config.steps) & set(STEP_FORMS):  # a form stands beside its general step
        assert STEP_FORMS[form][0] in config.steps


@pytest.mark.parametrize("engine_id", sorted(EXPECTED_IDS))
def test_every_placeholder_is_known(engines, engine_id):
    config = engines[engine_id].config
    texts = [config.command or "", *config.step_notes.values(), *config.all_settings()]
    for text in texts:
        assert placeholders(text) <= PLACEHOLDERS, text


def test_every_playbook_rule_is_a_plan_step():
    from hwadvisor.rules.playbooks.schema import load_rules

    assert {rule.id for rule in load_rules()} <= set(STEP_IDS)


@pytest.mark.parametrize("device_class", DEVICE_CLASSES)
@pytest.mark.parametrize("phase", PHASES)
def test_default_engine_covers_every_class_and_phase(engines, device_class, phase):
    engine = engines[default_engine(device_class, phase)]
    assert phase in engine.phases
    assert device_class in engine.device_classes


def test_default_engines_follow_the_hardware_brief():
    assert default_engine("datacenter-gpu", "inference") == "vllm"
    assert default_engine("consumer-gpu", "inference") == "llamacpp"
    assert default_engine("apple-silicon", "inference") == "mlx"
    assert default_engine("mobile-soc", "inference") == "executorch"
    assert default_engine("cpu", "inference") == "llamacpp"
    assert default_engine("datacenter-gpu", "training") == "torchtitan"
    for device_class in ("consumer-gpu", "cpu"):
        assert default_engine(device_class, "training") == "hf"
    assert default_engine("apple-silicon", "training") == "mlx"  # mlx-lm trains natively


def test_default_engine_refuses_unknown_class_and_phase():
    with pytest.raises(UserError):
        default_engine("toaster", "inference")
    with pytest.raises(UserError):
        default_engine("cpu", "serving")


def test_unknown_engine_is_a_user_error_with_a_hint():
    with pytest.raises(UserError) as info:
        get_engine("vllmm")
    assert info.value.code == ExitCode.USAGE
    assert info.value.hint is not None
    assert "did you mean vllm" in info.value.hint
    for engine_id in EXPECTED_IDS:
        assert engine_id in info.value.hint


def test_key_defaults_as_read_from_the_sources(engines):
    vllm, sglang = engines["vllm"].defaults, engines["sglang"].defaults
    llama = engines["llamacpp"]
    assert (vllm.prefill_chunk_tokens, vllm.max_concurrent_sequences) == (8192, 1024)
    assert vllm.cuda_graphs and vllm.prefix_caching and vllm.chunked_prefill
    assert sglang.prefill_chunk_tokens == 8192
    assert llama.defaults.prefill_chunk_tokens == 512
    assert llama.defaults.max_concurrent_sequences == 4
    assert engines["mlx"].defaults.prefill_chunk_tokens == 2048
    assert engines["torchtitan"].defaults.sharding == "fsdp"
    assert engines["deepspeed"].defaults.sharding == "ddp"


def test_never_recommend_what_the_engine_does(engines):
    assert engines["vllm"].does_by_default("prefix-caching")
    assert engines["vllm"].does_by_default("cuda-graphs", "datacenter-gpu")
    assert not engines["vllm"].does_by_default("kv-cache-quantization")
    llama = engines["llamacpp"]
    assert llama.does_by_default("cuda-graphs", "consumer-gpu")
    assert llama.cannot("cuda-graphs", "apple-silicon")
    assert not llama.does_by_default("cuda-graphs", "apple-silicon")


def test_torchtitan_renders_parseable_toml(engines):
    steps = ["torch-compile", "fp8-training", "hsdp", "context-parallel",
             "activation-checkpointing", "tensor-parallel-in-node", "pipeline-parallel"]
    rendered = render_config(engines["torchtitan"], steps, VALUES)
    assert rendered.format == "toml"
    data = tomllib.loads(rendered.text)
    assert data["compile"]["enable"] is True
    assert data["parallelism"]["data_parallel_shard_degree"] == 8
    assert data["parallelism"]["data_parallel_replicate_degree"] == 2
    assert "activation-checkpointing" in rendered.defaulted  # selective AC is the default
    assert data["model"]["converters"] == ["quantize.linear.float8"]
    assert data["quantize"]["linear"]["float8"]["enable_fsdp_float8_all_gather"] is True
    assert "[parallelism]" in rendered.text  # grouped into sections, not dotted keys
    steps_traced = {line.step for line in rendered.lines}
    assert {"torch-compile", "fp8-training", "hsdp", "tp", "pp"} <= steps_traced


def test_deepspeed_renders_valid_json(engines):
    steps = ["fsdp2-zero3", "bf16-mixed-precision", "optimizer-offload", "fused-adamw"]
    rendered = render_config(engines["deepspeed"], steps, VALUES)
    data = json.loads(rendered.text)
    assert data["zero_optimization"]["stage"] == 3
    assert data["zero_optimization"]["offload_optimizer"]["device"] == "cpu"
    assert data["bf16"]["enabled"] is True
    assert data["train_micro_batch_size_per_gpu"] == 4
    assert data["optimizer"]["type"] == "AdamW"


def test_deepspeed_explains_what_it_cannot_say(engines):
    rendered = render_config(engines["deepspeed"], ["activation-checkpointing"], VALUES)
    [skipped] = rendered.not_expressed
    assert skipped.step == "activation-checkpointing"
    assert "model code" in skipped.reason


def test_vllm_command_has_the_fp8_kv_flag(engines):
    rendered = render_config(engines["vllm"], ["kv-cache-quantization"], VALUES)
    assert rendered.text.startswith("vllm serve meta-llama/Llama-3.1-8B-Instruct")
    assert "--kv-cache-dtype fp8" in rendered.text
    assert {"setting": "--kv-cache-dtype fp8", "step": "kv-cache-quantization"} in [
        line.model_dump() for line in rendered.lines]
    assert "--tensor-parallel-size 2" in rendered.text  # layout in use: tp = 2


def test_vllm_defaults_are_not_rendered(engines):
    rendered = render_config(engines["vllm"], ["prefix-caching", "cuda-graphs"],
                             PlanValues(model="m"))
    assert rendered.defaulted == ["prefix-caching", "cuda-graphs"]
    assert rendered.text == "vllm serve m"


def test_layout_keys_follow_the_values(engines):
    small = render_config(engines["vllm"], [], PlanValues(model="m", tp=1))
    assert "--tensor-parallel-size" not in small.text
    explicit = render_config(engines["llamacpp"], ["gpu_layers"], PlanValues(model="m.gguf",
                                                                          gpu_layers=20))
    assert "--n-gpu-layers 20" in explicit.text


def test_mlc_overrides_merge_into_one_flag(engines):
    rendered = render_config(engines["mlc-llm"], ["chunked-prefill", "speculative-decoding"],
                             VALUES.model_copy(update={"pp": 1}))
    assert rendered.text.count("--overrides") == 1
    assert "max_num_sequence=64;" in rendered.text


def test_cli_values_are_shell_quoted(engines):
    rendered = render_config(engines["llamacpp"], [], PlanValues(model="my model.gguf"))
    assert rendered.text == "llama-server -m 'my model.gguf'"


def test_python_settings_for_hf(engines):
    rendered = render_config(engines["hf"], ["bf16-mixed-precision", "activation-checkpointing"],
                             VALUES)
    assert rendered.format == "python"
    assert "bf16=True  # TrainingArguments" in rendered.text.splitlines()


def test_every_step_of_every_engine_renders(engines):
    for engine in engines.values():
        steps = [s for s in engine.config.steps if s not in LAYOUT_KEYS and s not in STEP_FORMS]
        forms = dict(STEP_FORMS[s] for s in engine.config.steps if s in STEP_FORMS)
        rendered = render_config(engine, steps, VALUES, forms=forms)
        if engine.config.format == "toml":
            tomllib.loads(rendered.text)
        elif engine.config.format == "json":
            json.loads(rendered.text)
        assert rendered.text.strip()


@pytest.mark.parametrize(("engine_id", "expected"), [
    ("vllm", ["--spec-method mtp", "--spec-tokens 1"]),
    ("sglang", ["--speculative-algorithm EAGLE", "--speculative-num-steps 1",
                "--speculative-eagle-topk 1", "--speculative-num-draft-tokens 2"]),
    ("trtllm", ["--extra_llm_api_options extra_llm_api_options.yaml"]),
])
def test_the_mtp_form_of_speculative_decoding(engines, engine_id, expected):
    """A checkpoint with MTP layers drafts with them: the engine's MTP flags, not n-gram ones."""
    forms = {"speculative-decoding": "mtp"}
    rendered = render_config(engines[engine_id], ["speculative-decoding"], VALUES, forms=forms)
    spec = [line for line in rendered.lines if line.step == "speculative-decoding"]
    assert [line.setting for line in spec] == expected  # traced to the plan's step
    assert "ngram" not in rendered.text.lower()
    if engine_id == "trtllm":  # the settings go in the file the command names, written beside
        import yaml

        written = yaml.safe_load(rendered.files["extra_llm_api_options.yaml"])
        assert written == {"speculative_config": {"decoding_type": "MTP",
                                                  "num_nextn_predict_layers": 1}}


def test_an_engine_without_the_form_says_the_general_one_with_a_note(engines):
    forms = {"speculative-decoding": "mtp"}
    rendered = render_config(engines["hf"], ["speculative-decoding"], VALUES, forms=forms)
    plain = render_config(engines["hf"], ["speculative-decoding"], VALUES)
    assert rendered.text == plain.text
    assert any("has no mtp form" in note for note in rendered.notes)


def test_an_unknown_form_is_refused(engines):
    with pytest.raises(UserError, match="no form 'lookahead'"):
        render_config(engines["vllm"], ["speculative-decoding"], VALUES,
                      forms={"speculative-decoding": "lookahead"})


def test_unknown_steps_and_missing_values_are_refused(engines):
    with pytest.raises(UserError, match="unknown plan step"):
        render_config(engines["vllm"], ["kv-cache-quantisation"], VALUES)
    with pytest.raises(UserError, match="spec_tokens"):
        render_config(engines["vllm"], ["speculative-decoding"], PlanValues(model="m"))


def test_steps_without_a_setting_are_listed_with_a_reason(engines):
    rendered = render_config(engines["torchtitan"], ["lora", "int4-weights"], VALUES)
    reasons = {n.step: n.reason for n in rendered.not_expressed}
    assert "full weights" in reasons["lora"]
    assert "no torchtitan setting" in reasons["int4-weights"]


def _engine_text(engine_id: str) -> str:
    from importlib import resources

    return resources.files("hwadvisor.engines").joinpath(f"data/{engine_id}.toml") \
        .read_text("utf-8")


@pytest.mark.parametrize(("engine_id", "old", "new", "message"), [
    ("vllm", 'attention_kernel = "flash"    # FlashAttention', 'attention_kernal = "flash"    #',
     "attention_kernal"),
    ("vllm", 'kv-cache-quantization = ["--kv-cache-dtype fp8"]',
     'kv-cache-quantization = ["--kv-cache-dtype {kv_type}"]', "kv_type"),
    ("vllm", 'applies = ["flash-attention", "prefix-caching", "paged-kv',
     'applies = ["flash-atention", "prefix-caching", "paged-kv', "flash-atention"),
    ("deepspeed", 'fsdp2-zero3 = ["zero_optimization.overlap_comm = true"]',
     'fsdp2-zero3 = ["zero_optimization.overlap_comm = yes"]', "not a json value"),
    ("vllm", 'int4 = { nvidia = "marlin", amd = "exllamav2", default = "torch-int4" }',
     'int4 = { nvidia = "marlinn", amd = "exllamav2", default = "torch-int4" }', "marlinn"),
    ("vllm", 'host_s = 0.0002', 'host_s = -1', "host_s"),
])
def test_typos_fail_at_load_time(engine_id, old, new, message):
    text = _engine_text(engine_id)
    assert old in text
    with pytest.raises(ValueError, match=message):
        load_text(text.replace(old, new, 1), engine_id, f"{engine_id}.toml")


def test_a_default_engine_that_cannot_run_its_class_is_refused():
    from hwadvisor.engines.schema import Choice

    table = {c: {"inference": "vllm", "training": "torchtitan"} for c in DEVICE_CLASSES}
    with pytest.raises(ValueError, match="does not run"):
        Choice(by_class=table).check(load_engines())


def test_engines_package_imports_no_cli_or_torch():
    banned = ("typer", "rich", "torch", "hwadvisor.trials", "hwadvisor.validator",
              "hwadvisor.cli", "hwadvisor.report", "hwadvisor.rules", "hwadvisor.perfmodel")
    code = ("import sys, hwadvisor.engines as e; e.load_engines(); "
            f"print([m for m in {banned!r} if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_costs_measured_on_a_family_replace_the_general_ones_there_only():
    costs = get_engine("llamacpp").costs
    assert costs.for_family("nvidia-hopper").host_s_graphed == 0.0  # measured on the H200
    assert costs.for_family("nvidia-hopper").host_s == costs.host_s > 0  # eager runs pay it
    assert costs.for_family("nvidia-ada").host_s_graphed is None  # the tune split's fit
    assert costs.for_family(None) is costs


def test_llamacpp_versions_are_build_numbers_and_older_builds_get_their_kernel_rates():
    from hwadvisor.engines.catalog import release_tuple

    assert release_tuple("b2843") == (2843,)
    assert release_tuple("0c1e57098") is None  # a commit has no order
    pinned = get_engine("llamacpp")
    old = get_engine("llamacpp", "b2843")
    assert pinned.defaults.cuda_graphs and not old.defaults.cuda_graphs  # graphs came in b2850
    key = "llamacpp-f16@nvidia-hopper"
    assert pinned.kernels.rates[key].gemv and old.kernels.rates[key].gemv is None
    assert "kernel rates of that release" in " ".join(old.variant_notes)
    between = get_engine("llamacpp", "b3000")  # graphs, but the F16 GEMV before PR #9816
    assert between.defaults.cuda_graphs and between.kernels.rates[key].gemv is None


def test_kernel_rates_must_name_a_known_kernel_and_a_family():
    from hwadvisor.engines.schema import History, Kernels

    base = {"dense": "cublas", "fp8": "cublas", "int4": "marlin", "int4_words": "Marlin"}
    with pytest.raises(ValueError, match="no kernel"):
        Kernels.model_validate({**base, "rates": {"nosuch@nvidia": {"gemv": 1.0}}})
    with pytest.raises(ValueError, match="kernel@family"):
        Kernels.model_validate({**base, "rates": {"cublas": {"gemv": 1.0}}})
    with pytest.raises(ValueError, match="no kernel"):
        History.model_validate({"before": "1.0", "source": "x",
                                "kernel_rates": {"nosuch@amd": {}}})
def _trtllm_speculative_notes() -> dict[str, dict[str, object]]:
    """Return each trtllm step's speculative_config mapping (in the file the command names)."""
    from hwadvisor.engines import load_engines

    files = load_engines()["trtllm"].config.files["extra_llm_api_options.yaml"]
    return {step: settings["speculative_config"] for step, settings in files.items()
            if "speculative_config" in settings}


def _trtllm_yaml_keys() -> dict[str, dict[str, object]]:
    """Return the YAML keys of trtllm-serve's --config file, from the table of the pinned code."""
    table = json.loads((ROOT / "tests" / "fixtures" / "engine_flags" / "trtllm.json")
                       .read_text(encoding="utf-8"))
    return table["commands"]["extra_llm_api_options.yaml"]["flags"]


def test_trtllm_speculative_notes_name_decoding_types_the_pinned_release_takes() -> None:
    # DecodingBaseConfig.from_dict (llmapi/llm_args.py) stops trtllm-serve with "Invalid
    # decoding type" for any other name; the table holds the names it maps.
    notes = _trtllm_speculative_notes()
    known = _trtllm_yaml_keys()["speculative_config.decoding_type"]["choices"]
    assert notes and {n["decoding_type"] for n in notes.values()} <= set(known), notes
    assert "speculative_model_dir" in notes["speculative-decoding-eagle3"]


def test_trtllm_ngram_drafter_sets_a_matching_size_the_engine_accepts() -> None:
    # NGramDecodingConfig.max_matching_ngram_size defaults to 0 and
    # TorchLlmArgs.validate_speculative_config asserts it is > 0: left out, the server stops.
    assert _trtllm_yaml_keys()["speculative_config.max_matching_ngram_size"]["default"] == 0
    ngram = [n for n in _trtllm_speculative_notes().values() if n["decoding_type"] == "NGram"]
    assert ngram and all(int(n.get("max_matching_ngram_size", 0)) > 0 for n in ngram), ngram


def test_an_option_whose_value_is_none_keeps_it() -> None:
    from hwadvisor.engines.catalog import get_engine

    # 'none' is a checkpointing level, not an unset default (it failed to parse)
    engine = get_engine("torchtitan", options={"checkpointing": "none"})
    assert engine.defaults.checkpointing == "none"
