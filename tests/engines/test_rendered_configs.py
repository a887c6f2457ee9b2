"""What a user pastes does what the plan says: the meaning of each emitted setting.

The flag tables (tests/engines/test_flags.py) hold every flag to the engine's own parser; these
tests hold the values to what the engine does with them, case by case: llama-server's context
per slot, fp16 where a GPU has no bf16, --max-model-len as the longest single request, the
checkpointing level and precision the model counted, offload as the engine does it, the
drafter inside its valid range, and estimate starting from the same engine defaults as
recommend.
"""

from __future__ import annotations

import json
import shlex
from functools import cache

import pytest

from hwadvisor.engines import ENGINE_IDS, get_engine
from hwadvisor.errors import UserError
from hwadvisor.models import ModelOptions, Report
from hwadvisor.pipeline import estimate_report, recommend_report
from hwadvisor.workload import WorkloadRequest

A, B, C = "training-throughput", "inference-latency", "memory-footprint"


@cache
def _plan(device: str, goal: str, items: tuple[tuple[str, object], ...]) -> Report:
    return recommend_report(goal, device, WorkloadRequest(**dict(items)))  # type: ignore[arg-type]


def plan(device: str, goal: str, **workload: object) -> Report:
    return _plan(device, goal, tuple(sorted(workload.items())))


def config_text(report: Report) -> str:
    assert report.plan is not None and report.plan.engine_config is not None
    return report.plan.engine_config.text


def cli_flags(text: str) -> dict[str, str]:
    """Return {flag: value} of a rendered command line ('' for a flag without a value)."""
    words = shlex.split(text.replace("\\\n", " "))
    flags: dict[str, str] = {}
    for i, word in enumerate(words):
        if word.startswith("-"):
            nxt = words[i + 1] if i + 1 < len(words) else ""
            flags[word] = "" if nxt.startswith("-") else nxt
    return flags


# --- llama.cpp: --ctx-size is split over the --parallel slots --------------------------------


def test_llama_server_gives_each_slot_the_whole_request():
    report = plan("rtx-4090", B, model="llama-3-8b", batch=64, engine="llamacpp")
    flags = cli_flags(config_text(report))
    slots, ctx = int(flags["--parallel"]), int(flags["--ctx-size"])
    assert slots == 64
    # llama-context.cpp: n_ctx_seq = n_ctx / n_seq_max without --kv-unified
    assert ctx // slots >= 2048 + 256
    assert ctx // slots % 256 == 0  # the server pads each slot to 256 tokens anyway


def test_a_phone_chat_does_not_allocate_the_models_whole_context():
    report = plan("snapdragon-8-gen-3", B, model="llama-3.2-1b", prompt_len=512, gen_len=256,
                  engine="llamacpp")
    flags = cli_flags(config_text(report))
    assert int(flags["--ctx-size"]) <= 1024  # 768 tokens, padded to 256: not 34k or 131k


def test_executorch_exports_a_cache_the_size_of_the_request():
    report = plan("snapdragon-8-gen-3", B, model="llama-3.2-1b", prompt_len=512, gen_len=256)
    text = config_text(report)
    assert "export.max_context_length=768" in text


# --- GPUs without bf16 ------------------------------------------------------------------------


@pytest.mark.parametrize("device", ["t4", "v100-sxm2"])
def test_vllm_on_a_gpu_without_bf16_says_half(device):
    report = plan(device, B, model="llama-3.2-1b", batch=8, engine="vllm")
    assert cli_flags(config_text(report)).get("--dtype") == "half"
    assert report.workload is not None and report.workload.activation_dtype == "fp16"


def test_vllm_on_a_gpu_with_bf16_keeps_its_auto_dtype():
    report = plan("h100-sxm", B, model="llama-3.2-1b", batch=8)
    assert "--dtype" not in cli_flags(config_text(report))


def test_an_explicit_dtype_is_the_users_word():
    report = plan("t4", B, model="llama-3.2-1b", batch=8, activation_dtype="fp32")
    assert report.workload is not None and report.workload.activation_dtype == "fp32"


# --- vLLM: --max-model-len is the longest single request -------------------------------------


def test_max_model_len_is_not_the_per_sequence_share_at_the_planned_batch():
    report = plan("h100-sxm", B, model="llama-3-8b", batch=256, prompt_len=2048)
    flags = cli_flags(config_text(report))
    assert int(flags["--max-model-len"]) == 8192  # the model's limit: the pool holds that
    assert report.plan is not None and report.plan.max_context is not None
    assert int(flags["--max-model-len"]) >= report.plan.max_context


def test_max_model_len_is_capped_by_what_the_pool_holds_for_one_request():
    # 8B on a 24 GB card with llama-3.1's 131k context: the pool holds far less than 131k.
    report = plan("l4", B, model="llama-3.1-8b", batch=1, engine="vllm")
    flags = cli_flags(config_text(report))
    assert 2048 + 256 <= int(flags["--max-model-len"]) < 131072


@pytest.mark.parametrize(("device", "model", "limit"), [
    ("h200-sxm", "llama-3.2-1b", 8192),  # the KV pool holds ~12,700 sequences of 640 tokens
    ("a100-40gb", "llama-3.2-1b", 2048),  # vllm serve's max_num_batched_tokens below 70 GiB
])
def test_max_num_seqs_stays_within_the_tokens_vllm_batches_a_step(device, model, limit):
    # vLLM 0.33.0 config/scheduler.py: "max_num_batched_tokens (8192) must be greater than or
    # equal to max_num_seqs": the pool's capacity (12,664 on the H200) did not start
    report = plan(device, B, model=model, batch=64, prompt_len=512, gen_len=128, engine="vllm")
    flags = cli_flags(config_text(report))
    assert 64 <= int(flags["--max-num-seqs"]) <= limit


def test_a_batch_above_vllms_tokens_per_step_raises_them_to_the_batch():
    report = plan("a100-40gb", B, model="llama-3.2-1b", batch=3000, prompt_len=128,
                  gen_len=128, engine="vllm")
    flags = cli_flags(config_text(report))
    assert int(flags["--max-num-seqs"]) == 3000
    assert int(flags["--max-num-batched-tokens"]) >= 3000  # else vLLM refuses to start
    small = cli_flags(config_text(plan("a100-40gb", B, model="llama-3.2-1b", batch=64,
                                       prompt_len=512, gen_len=128, engine="vllm")))
    assert "--max-num-batched-tokens" not in small  # its own default holds the batch


# --- training: the level and precision the model counted --------------------------------------


def test_megatron_recomputes_as_the_model_counted():
    report = plan("h100-sxm", A, model="llama-3-70b", phase="training", batch=1,
                  prompt_len=8192, gpus=8, engine="megatron")
    text = config_text(report)
    assert report.workload is not None and report.plan is not None
    flags = cli_flags(text)
    assert "--bf16" in flags  # Megatron trains in fp32 unless told
    step = next(s for s in report.plan.steps if s.id == "activation-checkpointing")
    level = "selective" if "selective" in " ".join(step.side_effects + [step.why]) else "full"
    assert flags["--recompute-granularity"] == level


def test_hf_checkpoints_whole_layers_and_the_model_counts_that():
    # transformers' gradient checkpointing recomputes every layer's whole forward: no
    # selective level to promise.
    report = plan("rtx-4090", A, model="llama-3.2-1b", phase="training", batch=1,
                  prompt_len=16384, engine="hf")
    assert report.plan is not None
    step = next(s for s in report.plan.steps if s.id == "activation-checkpointing")
    assert "selective" not in " ".join(step.side_effects + [step.why])
    assert "activation_checkpointing=True" in config_text(report)


def test_deepspeed_says_the_bf16_the_plan_assumes():
    report = plan("h100-sxm", A, model="llama-3-8b", phase="training", batch=2, gpus=8,
                  engine="deepspeed")
    data = json.loads(config_text(report))
    assert data["bf16"]["enabled"] is True  # DeepSpeed's default is off (fp32)


def test_deepspeed_offload_keeps_zero_3_when_the_plan_shards_parameters():
    report = plan("h100-sxm", A, model="llama-3-70b", phase="training", batch=1,
                  prompt_len=4096, gpus=8, engine="deepspeed")
    data = json.loads(config_text(report))
    steps = {s.id for s in report.plan.steps} if report.plan else set()
    if "optimizer-offload" in steps:
        assert data["zero_optimization"]["offload_optimizer"]["device"] == "cpu"
        assert data["zero_optimization"]["stage"] >= 2


def test_hf_trainer_is_told_to_train_in_fp16_on_a_t4():
    report = plan("t4", A, model="llama-3.2-1b", phase="training", batch=2, prompt_len=1024)
    text = config_text(report)
    assert "fp16=True" in text and "bf16=True" not in text


def test_torchtitan_says_full_checkpointing_and_leaves_its_selective_default():
    from hwadvisor.engines import PlanValues, render_config

    engine = get_engine("torchtitan")

    def level(form: str) -> str:
        given = PlanValues(context=4096, model="meta-llama/Meta-Llama-3-8B",
                           model_name="Meta-Llama-3-8B", local_batch=1, global_batch=8)
        return render_config(engine, ["activation-checkpointing"], given,
                             "datacenter-gpu", {"activation-checkpointing": form},
                             "training").text

    assert 'mode = "full"' in level("full")
    assert "activation_checkpoint" not in level("selective")  # torchtitan's default mode


def test_torchtitans_offload_is_fsdp2_cpu_offload_policy():
    # enable_cpu_offload moves parameters, gradients and optimizer state (FSDP2
    # CPUOffloadPolicy); there is no weight streaming for inference.
    engine = get_engine("torchtitan")
    assert engine.costs.offload == "fsdp-cpu"
    assert not engine.cannot("optimizer-offload") and engine.cannot("cpu-offload")
    assert engine.config.steps["optimizer-offload"] == ["training.enable_cpu_offload = true"]
    assert get_engine("deepspeed").costs.offload == "optimizer"


# --- MLX trains with mlx_lm.lora ------------------------------------------------------------


def test_an_mlx_lora_plan_runs_mlx_lm_lora():
    report = plan("m3-max", C, model="llama-3-8b", phase="training", batch=1, prompt_len=2048,
                  engine="mlx")
    text = config_text(report)
    assert text.startswith("mlx_lm.lora ")
    assert "mlx_lm.server" not in text


def test_mlx_serving_runs_the_server():
    report = plan("m3-max", B, model="llama-3.2-1b", batch=4)
    assert config_text(report).startswith("mlx_lm.server ")


# --- drafters inside their valid ranges -----------------------------------------------------


def test_llama_cpp_ngram_drafter_keeps_its_own_valid_range():
    from hwadvisor.engines import PlanValues, render_config

    rendered = render_config(get_engine("llamacpp"), ["speculative-decoding"],
                             PlanValues(model="m.gguf", spec_tokens=3))
    flags = cli_flags(rendered.text)
    # common.h: ngram_mod n_min 48 <= n_max 64; an n-max below n-min drafts nothing
    n_min = int(flags.get("--spec-ngram-mod-n-min", 48))
    n_max = int(flags.get("--spec-ngram-mod-n-max", 64))
    assert n_min <= n_max


# --- estimate and recommend start from the same engine defaults -----------------------------


def _engine_workloads() -> list[tuple[str, str, dict[str, object]]]:
    cases = []
    for engine_id in ENGINE_IDS:
        engine = get_engine(engine_id)
        phase = engine.phases[0]
        device = {"datacenter-gpu": "h200-sxm", "consumer-gpu": "rtx-4090",
                  "apple-silicon": "m3-max", "mobile-soc": "snapdragon-8-gen-3",
                  "cpu": "h200-sxm"}[engine.device_classes[0]]
        cases.append((engine_id, device, {"model": "llama-3.2-1b", "phase": phase,
                                          "engine": engine_id}))
    return cases


@pytest.mark.parametrize(("engine_id", "device", "workload"), _engine_workloads(),
                         ids=[c[0] for c in _engine_workloads()])
def test_estimate_and_recommend_baseline_agree_for_every_engine(engine_id, device, workload):
    goal = A if workload["phase"] == "training" else B
    rec = recommend_report(goal, device, WorkloadRequest(**workload))  # type: ignore[arg-type]
    est = estimate_report(WorkloadRequest(**workload), device, ModelOptions())  # type: ignore
    assert est.estimate is not None and rec.estimate is not None
    assert est.estimate.times == rec.estimate.times
    assert est.estimate.memory.total_bytes == rec.estimate.memory.total_bytes


def test_llama_1b_on_an_h200_with_vllm_decodes_as_recommend_says():
    request = WorkloadRequest(model="llama-3.2-1b", engine="vllm")
    est = estimate_report(request, "h200-sxm", ModelOptions())
    rec = recommend_report(B, "h200-sxm", request)
    assert est.estimate is not None and rec.estimate is not None
    assert est.estimate.times.tpot_s == pytest.approx(rec.estimate.times.tpot_s)


# --- turning defaults off, pinning a release -------------------------------------------------


def test_an_engine_option_turns_a_default_off_and_the_report_says_so():
    on = estimate_report(WorkloadRequest(model="llama-3.2-1b", engine="vllm"), "h200-sxm",
                         ModelOptions())
    off = estimate_report(WorkloadRequest(model="llama-3.2-1b", engine="vllm",
                                          engine_options=("cuda_graphs=false",)),
                          "h200-sxm", ModelOptions())
    assert on.estimate is not None and off.estimate is not None
    assert off.estimate.times.tpot_s > on.estimate.times.tpot_s * 1.1  # launch-bound at 1B
    assert off.workload is not None
    assert "cuda_graphs=false (--engine-option)" in off.workload.engine_defaults


def test_with_cuda_graphs_off_the_plan_may_turn_them_on_again():
    report = plan("h200-sxm", B, model="llama-3.2-1b", engine="vllm",
                  engine_options=("cuda_graphs=false",))
    assert report.plan is not None
    assert "cuda-graphs" in {s.id for s in report.plan.steps}


def test_cuda_graphs_off_is_the_engines_eager_switch_and_is_said():
    # vLLM's --enforce-eager turns torch.compile off with the graphs (config/vllm.py 0.33.0);
    # a plan that keeps the graphs off says the switch, so the pasted line runs what was modelled
    engine = get_engine("vllm", None, {"cuda_graphs": "false"})
    assert not engine.defaults.cuda_graphs and not engine.defaults.compiled
    report = plan("h100-sxm", B, model="llama-3.1-8b", engine="vllm",
                  engine_options=("cuda_graphs=false",))
    assert report.plan is not None and report.plan.engine_config is not None
    kept_off = "cuda-graphs" not in {s.id for s in report.plan.steps}
    assert ("--enforce-eager" in report.plan.engine_config.text) == kept_off


def test_an_older_release_starts_from_its_own_defaults():
    report = plan("h200-sxm", B, model="llama-3-8b", batch=32, engine="vllm==0.6.0")
    assert report.workload is not None
    assert report.workload.engine == "vllm" and report.workload.engine_version == "0.6.0"
    assert "prefix_caching=false (vllm 0.6.0)" in report.workload.engine_defaults
    assert report.plan is not None and report.plan.engine_config is not None
    config = report.plan.engine_config
    assert config.version == "0.6.0"  # said in 0.6.0's flags (checked against its parser)
    assert any("defaults of vLLM 0.6.0" in note for note in config.notes)
    # 0.6.0 has no EAGLE-3 and spells speculative decoding --speculative-model
    assert "eagle3" not in config.text.lower() and "--spec-method" not in config.text
    # the headline counts only what 0.6.0 runs: no step names a drafter it lacks
    assert all("EAGLE" not in s.why for s in report.plan.steps)
    # prefix caching was off before V1: the plan that turns it on says so in a flag
    if "prefix-caching" in {s.id for s in report.plan.steps}:
        assert "--enable-prefix-caching" in config.text


@pytest.mark.parametrize(("engine", "options", "message"), [
    ("vllm==", (), "no version"),
    ("vllm==banana", (), "not a release number"),
    ("vllm==99.0", (), "newer than"),
    ("vllm", ("cuda_graphs",), "KEY=VALUE"),
    ("vllm", ("graphs=false",), "no such engine default"),
    ("vllm", ("cuda_graphs=maybe",), "cuda_graphs"),
    ("vllm", ("kernel.int4=fastest",), "no such kernel"),
])
def test_bad_engine_versions_and_options_are_user_errors(engine, options, message):
    with pytest.raises(UserError, match=message):
        estimate_report(WorkloadRequest(model="llama-3.2-1b", engine=engine,
                                        engine_options=options), "h200-sxm", ModelOptions())


def test_a_kernel_option_changes_the_int4_kernel():
    marlin = estimate_report(WorkloadRequest(model="llama-3-8b", engine="vllm",
                                             weights_dtype="int4"), "h200-sxm", ModelOptions())
    tinygemm = estimate_report(WorkloadRequest(model="llama-3-8b", engine="vllm",
                                               weights_dtype="int4",
                                               engine_options=("kernel.int4=torch-int4",)),
                               "h200-sxm", ModelOptions())
    assert marlin.estimate is not None and tinygemm.estimate is not None
    assert marlin.estimate.times.tpot_s != tinygemm.estimate.times.tpot_s


# --- PCIe cards: the bridge joins pairs only --------------------------------------------------


def test_eight_pcie_h100s_all_reduce_over_pcie():
    from hwadvisor.perfmodel.comm import intra_node_link
    from hwadvisor.probe.target import primary_device, resolve_target

    for profile in ("h100-pcie", "h100-nvl", "a100-pcie-80gb", "a100-pcie-40gb"):
        device = primary_device(resolve_target(profile, 1))
        assert intra_node_link(device, 8).kind == "pcie", profile
        assert intra_node_link(device, 2).kind == "nvlink", profile
    sxm = primary_device(resolve_target("h100-sxm", 1))
    assert intra_node_link(sxm, 8).kind == "nvlink"


def test_tensor_parallel_on_eight_pcie_h100s_is_slower_than_on_sxm():
    request = WorkloadRequest(model="llama-3-70b", batch=8, gpus=8, engine="vllm")
    pcie = estimate_report(request, "h100-pcie", ModelOptions())
    sxm = estimate_report(request, "h100-sxm", ModelOptions())
    assert pcie.estimate is not None and sxm.estimate is not None
    assert pcie.estimate.times.communication_s > 1.5 * sxm.estimate.times.communication_s
    assert any("exceed the 2-GPU" in note for note in pcie.estimate.assumptions)


# --- llama.cpp across GPUs: its default layer split, modelled and said -----------------------


def test_llama_cpp_on_two_gpus_runs_its_layer_split_one_gpu_after_the_other():
    """llama.cpp's default --split-mode layer: each GPU holds half the layers and a token runs
    them one after the other, so a decode step streams the whole model at one GPU's bandwidth
    (the parts' sum), not half of it as tensor parallelism would; the command says the split."""
    report = plan("rtx-4090", B, model="llama-3-70b", weights_dtype="q4_k_m", batch=1,
                  gpus=2, engine="llamacpp")
    assert report.plan is not None
    layout = report.plan.layout
    assert (layout.pp, layout.tp) == (2, 1)
    flags = cli_flags(config_text(report))
    assert flags.get("--split-mode") == "layer"
    # the estimate on the engine's defaults: the whole model's weights stream each step, at
    # most at one GPU's datasheet bandwidth (tensor parallelism would read half a GPU each)
    assert report.estimate is not None
    step = report.estimate.times.decode_step_s
    weights = report.estimate.memory.weights_bytes * 2  # per GPU x the two stages
    assert step is not None and step >= weights / 1008e9


# torchtitan 0.2.2's model registry (torchtitan/models/<name>/__init__.py, the flavors of each
# <name>_args table in the 0.2.2 wheel)
TORCHTITAN_FLAVORS = {
    "llama3": {"debugmodel", "8B", "70B", "405B"},
    "qwen3": {"debugmodel", "0.6B", "1.7B", "4B", "8B", "14B", "32B", "30B-A3B", "235B-A22B"},
    "deepseek_v3": {"debugmodel", "16B", "236B", "671B"},
    "llama4": {"debugmodel", "17bx16e", "17bx128e"},
}


def test_every_torchtitan_checkpoint_name_maps_to_a_flavor_its_registry_has():
    by_model = get_engine("torchtitan").config.by_model
    names, flavors = by_model["model_class"], by_model["model_flavor"]
    for checkpoint, flavor in flavors.items():
        if checkpoint == "*":
            assert flavor == "none-registered"
            continue
        name = names.get(checkpoint, names["*"])
        assert flavor in TORCHTITAN_FLAVORS[name], (checkpoint, name, flavor)


@pytest.mark.parametrize("model, name, flavor", [
    ("llama-3-8b", "llama3", "8B"), ("qwen3-30b-a3b", "qwen3", "30B-A3B"),
    ("llama-3.2-3b", "llama3", "none-registered")])
def test_a_torchtitan_plan_names_its_model_batch_and_starting_weights(model, name, flavor):
    # job_config.py defaults: the llama3 debugmodel, local_batch_size 8, no checkpoint loaded
    report = plan("h100-sxm", A, model=model, phase="training", batch=1, prompt_len=2048,
                  gpus=8, engine="torchtitan")
    text = config_text(report)
    assert f'name = "{name}"' in text and f'flavor = "{flavor}"' in text
    assert "local_batch_size = " in text and "seq_len = 2048" in text
    assert "initial_load_in_hf = true" in text and "enable = true" in text
    notes = " ".join(report.plan.engine_config.notes)  # type: ignore[union-attr]
    assert "download_hf_assets.py --repo_id" in notes


@pytest.mark.parametrize("engine", ["executorch", "coreml", "qnn"])
def test_every_export_llm_config_names_metas_checkpoint_files_not_a_preset(engine):
    # export_llm torch.loads base.checkpoint: a preset id ("llama-3.2-3b") is no file
    from hwadvisor.engines import PlanValues, render_config

    values = PlanValues(model="meta-llama/Llama-3.2-3B", model_name="Llama-3.2-3B",
                        compute_units="npu", soc_model="SM8650", slot_context=2048)
    text = render_config(get_engine(engine), [], values, "phone").text
    assert 'base.checkpoint="Llama-3.2-3B/original/consolidated.00.pth"' in text
    assert 'base.params="Llama-3.2-3B/original/params.json"' in text
    assert 'base.model_class="llama3_2"' in text


def test_vllm_plans_no_fp8_kv_cache_where_no_attention_backend_reads_one():
    # vLLM 0.33.0 on a T4 (sm75) runs its Triton backend, which refuses an FP8 cache below
    # SM89; FlashAttention and FlashInfer take it from sm80 (A100)
    engine = get_engine("vllm")
    assert not engine.kv_format_runs("fp8", "nvidia", "7.5")
    assert engine.kv_format_runs("fp8", "nvidia", "8.0")
    assert engine.kv_format_runs("fp8", "amd", "9.4")
    report = plan("t4", B, model="llama-3.2-1b", batch=32, prompt_len=2048, engine="vllm")
    assert "--kv-cache-dtype fp8" not in config_text(report)
    assert all(step.id != "kv-cache-quantization" for step in report.plan.steps)  # type: ignore[union-attr]


def test_a_megatron_command_says_what_pretrain_gpt_needs_beyond_the_plans_flags():
    # validate_args requires num_layers, hidden_size, num_attention_heads and
    # max_position_embeddings; the plan's flags alone would not start
    report = plan("h100-sxm", A, model="llama-3-70b", phase="training", batch=1,
                  prompt_len=4096, gpus=8, engine="megatron")
    notes = " ".join(report.plan.engine_config.notes)  # type: ignore[union-attr]
    for flag in ("--num-layers", "--hidden-size", "--num-attention-heads",
                 "--max-position-embeddings", "--tokenizer-model meta-llama/Meta-Llama-3-70B",
                 "--data-path", "--train-iters", "--lr"):
        assert flag in notes, flag
