"""Training plans that hold: fit verdicts, checkpointing levels, micro-batches, fp16, offload."""

from __future__ import annotations

from functools import cache

import pytest

from hwadvisor import profiles
from hwadvisor.models import ModelOptions, Report
from hwadvisor.perfmodel import estimate
from hwadvisor.pipeline import estimate_report, recommend_report
from hwadvisor.workload import Sizing, WorkloadRequest, build_workload

A, C = "training-throughput", "memory-footprint"


@cache
def _plan(device: str, goal: str, items: tuple[tuple[str, object], ...]) -> Report:
    return recommend_report(goal, device, WorkloadRequest(**dict(items)))  # type: ignore[arg-type]


def plan(device: str, goal: str = A, **workload: object) -> Report:
    return _plan(device, goal, tuple(sorted({"phase": "training", **workload}.items())))


def alternative(report: Report, alt_id: str):
    assert report.plan is not None
    return next((a for a in report.plan.alternatives if a.id == alt_id), None)


def test_lora_of_a_70b_on_one_h100_does_not_fit_and_qlora_does():
    # The bf16 base alone is 141 GB: LoRA keeps it, only QLoRA's 4-bit base fits 80 GB.
    report = plan("h100-sxm", model="llama-3.1-70b", batch=1, prompt_len=2048)
    assert report.plan is not None and not report.plan.fits
    assert alternative(report, "lora") is None  # listed only when it fits
    qlora = alternative(report, "qlora")
    assert qlora is not None and qlora.fits


def test_the_lora_alternative_starts_from_the_checkpoints_dtype_not_the_plans_fp8():
    # The plan trains in FP8 (a GEMM format, the weights stay bf16); LoRA's frozen base is bf16.
    report = plan("h100-sxm", model="llama-3.1-8b", batch=2, prompt_len=4096, gpus=8)
    assert report.plan is not None
    assert "fp8-training" in {s.id for s in report.plan.steps}
    lora = alternative(report, "lora")
    if lora is not None:
        assert lora.changes.get("weights_dtype") == "bf16"


def test_fp8_training_keeps_high_precision_weights_in_memory():
    bf16 = estimate_report(WorkloadRequest(model="llama-3-8b", phase="training", batch=1,
                                           prompt_len=2048, engine="hf"), "h100-sxm",
                           ModelOptions())
    fp8 = estimate_report(WorkloadRequest(model="llama-3-8b", phase="training", batch=1,
                                          prompt_len=2048, engine="hf", weights_dtype="fp8"),
                          "h100-sxm", ModelOptions())
    assert bf16.estimate is not None and fp8.estimate is not None
    assert fp8.estimate.memory.weights_bytes == bf16.estimate.memory.weights_bytes


def test_selective_checkpointing_keeps_more_than_full():
    from hwadvisor.perfmodel import estimate
    from hwadvisor.pipeline import build_workload
    from hwadvisor.probe.target import primary_device, resolve_target

    device = primary_device(resolve_target("h100-sxm", 1))

    def activations(engine: str, selective: bool) -> int:
        workload = build_workload(WorkloadRequest(
            model="llama-3-8b", phase="training", batch=2, prompt_len=4096, engine=engine,
            activation_checkpointing=True), Sizing.of(device))
        options = ModelOptions(selective_checkpointing=selective)
        return estimate(workload, device, options).memory.activations_bytes

    # Megatron's selective recomputes only the attention core (Korthikanti et al.)
    assert activations("megatron", True) > 2 * activations("megatron", False)
    # torchtitan's per-op SAC keeps every other matmul's output: less, still more than full
    titan = activations("torchtitan", True)
    assert activations("torchtitan", False) < titan < activations("megatron", True)


def test_torchtitans_256_gpu_70b_run_fits_with_full_checkpointing():
    # torchtitan's published Llama-3.1-70B run: 256 H100, FSDP 32 x TP 8, local batch 16 x 8k,
    # full activation checkpointing (docs/performance.md). Selective, the default, is not enough.
    wl = build_workload(WorkloadRequest(model="llama-3.1-70b", phase="training", batch=16,
                                        prompt_len=8192, gpus=256, nodes=32, gpus_per_node=8,
                                        engine="torchtitan", activation_checkpointing=True))
    device = profiles.device_from_profile("h100-sxm")
    published = ModelOptions(sharding="fsdp", tp_size=8, compiled=True, fused_optimizer=True)
    assert estimate(wl, device, published).fits
    selective = published.model_copy(update={"selective_checkpointing": True})
    assert not estimate(wl, device, selective).fits
    # the planner finds a plan that fits from the engine's defaults (selective checkpointing)
    report = plan("h100-sxm", model="llama-3.1-70b", batch=16, prompt_len=8192, nodes=32,
                  gpus_per_node=8)
    assert report.plan is not None and report.plan.fits
    assert report.plan.engine_config is not None


def test_pipeline_micro_batches_come_out_of_the_local_batch():
    from hwadvisor.rules.playbooks.planners import pipeline_split

    # 16 sequences per rank and step, 4 stages: 8 micro-batches of 2 (two per stage)
    assert pipeline_split(16, 1, 4) == (2, 8)
    # already accumulating: the micro-batch stays, the accumulation is the micro-batches
    assert pipeline_split(4, 8, 4) == (4, 8)
    # too few sequences for 2 per stage: all of them as micro-batches of one
    assert pipeline_split(3, 1, 4) == (1, 3)
    for batch, accum, stages in ((16, 1, 4), (4, 8, 4), (3, 1, 4), (12, 2, 8)):
        micro, count = pipeline_split(batch, accum, stages)
        assert micro * count == batch * accum  # the global batch holds
    # stages that halve the data-parallel ranks double each rank's sequences
    assert pipeline_split(16, 1, 2, widen=2) == (8, 4)
    assert pipeline_split(1, 16, 2, widen=2) == (1, 32)


def test_a_pipelined_plan_keeps_the_sequences_per_step_and_says_so():
    report = plan("h100-sxm", model="llama-3.1-70b", batch=16, prompt_len=8192, nodes=32,
                  gpus_per_node=8)
    assert report.plan is not None and report.workload is not None
    steps = {s.id: s for s in report.plan.steps}
    if "pipeline-parallel" not in steps:
        pytest.skip("this plan has no pipeline stages")
    text = steps["pipeline-parallel"].why
    assert "micro-batches" in text and "the global batch of" in text and "as before" in text
    config = report.plan.engine_config
    assert config is not None
    # the global batch the user's local batch gives on 256 GPUs: neither TP nor PP shrinks it
    assert "global_batch_size = 4096" in config.text
    assert "pipeline_parallel_microbatch_size" in config.text


def test_qlora_of_8b_at_batch_4_by_4k_fits_a_4090_with_micro_batch_1():
    report = plan("rtx-4090", model="llama-3-8b", batch=4, prompt_len=4096, weights_dtype="nf4")
    assert report.plan is not None and report.plan.fits
    steps = {s.id: s for s in report.plan.steps}
    assert "micro-batch" in steps
    assert report.workload is not None
    final = report.plan.steps[-1]
    assert final.fits_after
    config = report.plan.engine_config
    assert config is not None and "per_device_train_batch_size=1" in config.text
    assert "gradient_accumulation_steps=4" in config.text


def test_micro_batches_keep_the_global_batch():
    from hwadvisor.rules.playbooks.planners import micro_batch_plan

    class Ctx:  # the planner reads the workload and asks whether a change fits
        class workload:  # noqa: N801
            batch, grad_accum = 8, 2

        @staticmethod
        def fits_with(change, options):
            return change["batch"] <= 2

    planned = micro_batch_plan(Ctx())  # type: ignore[arg-type]
    assert planned.workload == {"batch": 2, "grad_accum": 8}  # 16 sequences per step, as before


def test_a_t4_trains_in_fp16_with_loss_scaling():
    report = plan("t4", model="llama-3.2-1b", batch=2, prompt_len=1024)
    assert report.workload is not None and report.workload.activation_dtype == "fp16"
    assert report.plan is not None and report.plan.engine_config is not None
    assert "fp16=True" in report.plan.engine_config.text


def test_a_v100_trains_in_fp16_with_deepspeed_dynamic_loss_scaling():
    import json

    report = plan("v100-sxm2", model="llama-3.2-1b", batch=2, prompt_len=1024,
                  engine="deepspeed")
    assert report.plan is not None and report.plan.engine_config is not None
    data = json.loads(report.plan.engine_config.text)
    assert data["fp16"] == {"enabled": True, "loss_scale": 0}
    assert "bf16" not in data


def test_a_long_sequence_on_a_small_card_takes_the_chunked_loss_and_says_it():
    # 16k tokens x 128k vocabulary: the loss's logits alone are tens of GB
    report = plan("rtx-4090", model="llama-3.2-1b", batch=1, prompt_len=16384, engine="hf")
    assert report.plan is not None and report.plan.fits
    assert "fused-cross-entropy" in {s.id for s in report.plan.steps}
    assert report.plan.engine_config is not None
    assert "use_liger_kernel=True" in report.plan.engine_config.text


def test_the_chunked_loss_holds_far_less_than_the_full_logits():
    from hwadvisor.perfmodel import estimate
    from hwadvisor.pipeline import build_workload
    from hwadvisor.probe.target import primary_device, resolve_target

    device = primary_device(resolve_target("h100-sxm", 1))
    workload = build_workload(WorkloadRequest(model="llama-3.2-1b", phase="training", batch=1,
                                              prompt_len=16384), Sizing.of(device))
    plain = estimate(workload, device, ModelOptions())
    fused = estimate(workload, device, ModelOptions(cross_entropy="fused"))
    chunked = estimate(workload, device, ModelOptions(cross_entropy="chunked"))
    logits = 16384 * 128256  # elements
    assert plain.memory.activations_bytes - fused.memory.activations_bytes == \
        pytest.approx(logits * 8, rel=1e-6)  # 12 -> 4 bytes a logit at the loss's backward
    assert chunked.memory.activations_bytes < fused.memory.activations_bytes


def test_torchtitan_offloads_with_its_cpu_offload_policy_where_fsdp_shards():
    # 70B on one node of H100: torchtitan's own offload (FSDP2 CPUOffloadPolicy) makes it fit,
    # with parameters, gradients and optimizer state in host RAM
    report = plan("h100-sxm", model="llama-3-70b", batch=1, prompt_len=4096, gpus=8)
    assert report.plan is not None and report.plan.fits
    assert "optimizer-offload" in {s.id for s in report.plan.steps}
    assert report.plan.engine_config is not None
    assert "enable_cpu_offload = true" in report.plan.engine_config.text


def test_torchtitans_offload_does_nothing_on_one_gpu_so_deepspeed_is_named():
    # enable_cpu_offload applies only where FSDP shards: one GPU gets ZeRO-Offload's name
    report = plan("rtx-4090", model="llama-3.2-3b", batch=1, prompt_len=2048,
                  engine="torchtitan")
    assert report.plan is not None and not report.plan.fits
    assert "optimizer-offload" not in {s.id for s in report.plan.steps}
    offload = alternative(report, "optimizer-offload")
    assert offload is not None and "DeepSpeed" in offload.text
    assert "CPUOffloadPolicy" in offload.text


def test_tensor_and_context_groups_widen_each_rank_to_hold_the_global_batch():
    from hwadvisor.rules.playbooks.planners import held_split

    # TP 8 leaves 8x fewer ranks: 16 sequences per rank become 128, as wide a micro-batch as fits
    assert held_split(16, 1, 8, lambda micro, _: micro <= 16) == (16, 8)
    assert held_split(16, 1, 8, lambda micro, _: True) == (128, 1)
    # already accumulating: the accumulation keeps what the micro-batch cannot take
    assert held_split(1, 16, 2, lambda micro, _: micro <= 1) == (1, 32)
    # nothing fits: micro-batches of one, every sequence still in the step
    assert held_split(4, 2, 4, lambda *_: False) == (1, 32)
    for batch, accum, widen in ((16, 1, 8), (3, 2, 4), (5, 1, 2)):
        micro, count = held_split(batch, accum, widen, lambda m, _: m <= 2)
        assert micro * count == batch * accum * widen


def test_a_tensor_parallel_plan_keeps_the_global_batch_and_says_so():
    # 16 sequences per data-parallel rank on 256 GPUs: 4096 per optimizer step on any layout
    report = plan("h100-sxm", model="llama-3.1-70b", batch=16, prompt_len=8192, nodes=32,
                  gpus_per_node=8)
    assert report.plan is not None and report.plan.engine_config is not None
    steps = {s.id: s for s in report.plan.steps}
    assert "tensor-parallel-in-node" in steps
    assert "the global batch of 4096 as before" in steps["tensor-parallel-in-node"].why
    assert "global_batch_size = 4096" in report.plan.engine_config.text


def test_megatrons_tensor_parallel_config_states_the_global_batch():
    # without --global-batch-size Megatron takes micro-batch x data-parallel ranks: 8x fewer
    report = plan("h100-sxm", model="llama-3.1-70b", batch=4, prompt_len=4096, nodes=2,
                  gpus_per_node=8, engine="megatron")
    assert report.plan is not None and report.plan.engine_config is not None
    assert "tensor-parallel-in-node" in {s.id for s in report.plan.steps}
    assert "--global-batch-size 64" in report.plan.engine_config.text  # 4 x 16 GPUs


def test_a_context_parallel_plan_keeps_the_global_batch():
    # one 128k-token sequence per GPU on 8 GPUs: 8 per step, though CP 8 leaves one rank
    report = plan("h100-sxm", model="llama-3.1-8b", batch=1, prompt_len=131072, gpus=8,
                  engine="torchtitan")
    assert report.plan is not None and report.plan.engine_config is not None
    steps = {s.id: s for s in report.plan.steps}
    assert "context-parallel" in steps
    assert "the global batch of 8 as before" in steps["context-parallel"].why
    assert "global_batch_size = 8" in report.plan.engine_config.text


def _megatron_8b(batch: int = 2):
    return build_workload(WorkloadRequest(model="llama-3.1-8b", phase="training", batch=batch,
                                          prompt_len=8192, gpus=8, engine="megatron",
                                          activation_checkpointing=True))


def test_checkpointing_fewer_layers_keeps_more_memory_and_recomputes_less():
    # every N-th layer: floor(32 / N) of 32 layers recompute (N = 1: all, full checkpointing)
    device = profiles.device_from_profile("h100-sxm")
    base = ModelOptions(sharding="fsdp", compiled=True, fused_optimizer=True)
    runs = [estimate(_megatron_8b(), device, base.model_copy(update={"checkpoint_every": n}))
            for n in (1, 2, 4, 8)]
    memory = [e.memory.activations_bytes for e in runs]
    step = [e.times.train_step_s for e in runs]
    assert memory == sorted(memory) and len(set(memory)) == 4
    assert step == sorted(step, reverse=True) and len(set(step)) == 4


def test_every_2nd_layer_fits_where_selective_does_not_and_beats_full():
    # 8B on 8 H100 at 2 x 8k: selective (attention only) does not fit, every 2nd layer does
    # and recomputes half of what full checkpointing does.
    device = profiles.device_from_profile("h100-sxm")
    base = ModelOptions(sharding="fsdp", compiled=True, fused_optimizer=True)
    every2 = estimate(_megatron_8b(), device, base.model_copy(update={"checkpoint_every": 2}))
    full = estimate(_megatron_8b(), device, base)
    selective = estimate(_megatron_8b(), device, base.model_copy(
        update={"selective_checkpointing": True}))
    assert not selective.fits and every2.fits and full.fits
    assert every2.times.train_step_s < full.times.train_step_s


def test_a_checkpoint_every_nth_layer_step_is_not_measured_as_full_checkpointing() -> None:
    from hwadvisor.rules.plan_step import UNMEASURED_WHY, _unmeasured_reason

    changes = {"activation_checkpointing": True, "checkpoint_every": 2}
    assert _unmeasured_reason(changes, "training") == UNMEASURED_WHY["checkpoint_every"]


def test_more_gpus_with_the_optimizer_in_host_ram_states_the_host_ram_it_needs() -> None:
    from hwadvisor.pipeline import recommend_report
    from hwadvisor.workload.request import WorkloadRequest

    request = WorkloadRequest(model="llama-3.1-70b", phase="training", batch=1, prompt_len=2048)
    report = recommend_report("training-throughput", "h100-sxm", request)
    assert report.plan is not None
    more = next(a for a in report.plan.alternatives if a.id == "more-gpus")
    # 70B full fine-tuning in 11 GB a GPU: the optimizer and master weights live in host RAM
    assert more.memory_per_gpu_bytes < 20e9
    assert more.host_memory_bytes and more.host_memory_bytes > 1e12
    assert "host RAM" in more.text


def _final_state(engine: str, prompt_len: int):
    from hwadvisor.rules.judge import baseline, default_estimator
    from hwadvisor.rules.playbooks.schema import rules_for_goal
    from hwadvisor.rules.search import search

    workload = build_workload(WorkloadRequest(model="llama-3.2-3b", phase="training", batch=1,
                                              prompt_len=prompt_len, engine=engine))
    device = profiles.device_from_profile("h100-sxm")
    start, options = baseline(workload, device)
    return search(A, rules_for_goal(A), start, device, None, options,
                  default_estimator()).final


# Megatron-LM has no torch.compile (whose fusions trim ~1% of the activations in the model):
# at 16k tokens every 2nd layer is recomputed there.
@pytest.mark.parametrize(("engine", "prompt_len", "every"),
                         [("torchtitan", 12800, 2), ("megatron", 16384, 2)])
def test_a_3b_full_fine_tune_on_one_h100_checkpoints_every_nth_layer(engine, prompt_len, every):
    # Near the gallery's train-3b-1xh100-* scenarios: selective checkpointing does not fit, full
    # fits with room to spare, so the planner checkpoints every N-th layer: less recompute.
    # (torchtitan's per-op SAC keeps 2h + 2q + kv + I a token and layer: at 12k tokens it fits.)
    final = _final_state(engine, prompt_len)
    assert final.facts.fits and final.workload.activation_checkpointing
    assert not final.options.selective_checkpointing
    assert final.options.checkpoint_every == every
    full = final.estimate_with({}, {"checkpoint_every": 1})
    assert full.memory.total_bytes < final.estimate.memory.total_bytes
    assert full.times.train_step_s > final.estimate.times.train_step_s


def test_every_nth_layer_checkpointing_reaches_the_engines_config():
    titan = plan("h100-sxm", model="llama-3.2-3b", batch=1, prompt_len=12800)
    assert titan.plan is not None and titan.plan.engine_config is not None
    text = titan.plan.engine_config.text
    assert 'mode = "selective"' in text and 'selective_ac_option = "2"' in text
    megatron = plan("h100-sxm", model="llama-3.2-3b", batch=1, prompt_len=16384,
                    engine="megatron")
    assert megatron.plan is not None and megatron.plan.engine_config is not None
    words = megatron.plan.engine_config.text.split()
    # 28 layers, every 2nd: Megatron's block method recomputes 14 of them
    assert words[words.index("--recompute-method") + 1] == "block"
    assert words[words.index("--recompute-num-layers") + 1] == "14"
    assert words[words.index("--recompute-granularity") + 1] == "full"


def test_a_plan_that_fits_states_its_margin() -> None:
    from hwadvisor.pipeline import recommend_report
    from hwadvisor.workload.request import WorkloadRequest

    request = WorkloadRequest(model="llama-3.2-3b", phase="training", batch=1, prompt_len=12288,
                              engine="torchtitan")
    report = recommend_report("training-throughput", "h100-sxm", request)
    assert report.plan is not None and report.plan.fits
    assert "spare, beyond" in report.plan.summary
    assert "counted for the runtime and the allocator's cache" in report.plan.summary


def test_a_mac_trains_with_mlx_lm_by_default() -> None:
    # mlx-lm trains on Apple's GPU natively (mlx_lm.lora, --fine-tune-type full), its whole
    # step compiled; PyTorch's MPS backend is not what Mac users train with
    from hwadvisor.pipeline import recommend_report
    from hwadvisor.workload import WorkloadRequest

    report = recommend_report("training-throughput", "m3-max", WorkloadRequest(
        model="llama-3.2-1b", phase="training", batch=4))
    assert report.workload is not None and report.workload.engine == "mlx"
    assert report.plan is not None and report.plan.engine_config is not None
    assert report.plan.engine_config.text.startswith("mlx_lm.lora --model meta-llama/")
    assert not any(s.id == "fused-adamw" for s in report.plan.steps)  # compiled already


def test_two_geforce_cards_train_a_qlora_replica_each_not_fsdp_over_the_host():
    # Issue 41 item 7: two RTX 4090s (no P2P) fine-tuning an 8B get QLoRA on each card (DDP,
    # only the adapters' gradients cross the host), not FSDP all-gathering the base every
    # micro-batch through host memory.
    report = plan("rtx-4090", model="llama-3-8b", batch=1, prompt_len=2048, gpus=2)
    assert report.plan is not None and report.plan.fits
    steps = {s.id for s in report.plan.steps}
    assert "qlora" in steps and "fsdp2-zero3" not in steps
    assert report.plan.layout.sharding == "ddp" and report.plan.layout.dp == 2
    config = report.plan.engine_config
    assert config is not None and any("local_process_index" in n for n in config.notes)


def test_a_full_fine_tune_of_8b_on_one_h100_moves_to_the_trainer_in_pure_bf16() -> None:
    # torchtitan (the default) needs 138 GB: fp32 parameters and AdamW moments, no 8-bit
    # optimizer, nothing to shard over on one GPU. The Trainer on a bf16-loaded model with
    # bitsandbytes' 8-bit AdamW holds 2 + 2 + 2 bytes a parameter, every weight trained.
    report = plan("h100-sxm", model="llama-3-8b", batch=1, prompt_len=2048)
    assert report.plan is not None and report.plan.fits
    steps = [s.id for s in report.plan.steps]
    assert steps[0] == "trainer-pure-bf16-adamw-8bit"
    assert not {"lora", "qlora"} & set(steps)
    assert not any(s.changes_method for s in report.plan.steps)
    assert report.plan.memory_per_gpu_bytes < 60e9
    config = report.plan.engine_config
    assert config is not None and config.engine == "hf"
    lines = config.text.splitlines()
    assert any(line.startswith("dtype=torch.bfloat16  # from_pretrained()") for line in lines)
    assert any(line.startswith('optim="adamw_bnb_8bit"  # TrainingArguments') for line in lines)
    # ZeRO-Offload stays the alternative that keeps the fp32 master, in host RAM
    assert alternative(report, "optimizer-offload") is not None


def test_the_trainer_plans_a_full_fine_tune_of_8b_on_one_h100_before_lora() -> None:
    report = plan("h100-sxm", model="llama-3-8b", batch=1, prompt_len=2048, engine="hf")
    assert report.plan is not None and report.plan.fits
    steps = [s.id for s in report.plan.steps]
    assert "pure-bf16-adamw-8bit" in steps and not {"lora", "qlora"} & set(steps)
    assert alternative(report, "lora") is not None  # still named beside it


def test_a_named_torchtitan_keeps_torchtitan() -> None:
    report = plan("h100-sxm", model="llama-3-8b", batch=1, prompt_len=2048,
                  engine="torchtitan")
    assert report.plan is not None and not report.plan.fits
    assert "trainer-pure-bf16-adamw-8bit" not in {s.id for s in report.plan.steps}
    assert report.plan.engine_config is not None
    assert report.plan.engine_config.engine == "torchtitan"
    assert report.plan.min_gpus == 2


def test_more_gpus_keep_torchtitan_sharding_its_fp32_state() -> None:
    report = plan("h100-sxm", model="llama-3-8b", batch=1, prompt_len=2048, gpus=2)
    assert report.plan is not None and report.plan.fits
    assert report.plan.engine_config is not None
    assert report.plan.engine_config.engine == "torchtitan"


@pytest.mark.parametrize(("engine", "model", "gpus", "absent"), [
    # Megatron-LM has no torch.compile switch for the model
    ("megatron", "llama-3-70b", 8, "torch-compile"),
    ("hf", "llama-3-8b", 8, "fp8-training"),  # the Trainer has no FP8 switch (accelerate has)
    # moved from torchtitan to the Trainer: the Trainer's limits from there on
    (None, "llama-3-8b", 1, "fp8-training"),
])
def test_no_plan_counts_a_step_its_engine_cannot_be_told(engine: str | None, model: str,
                                                         gpus: int, absent: str) -> None:
    items: dict[str, object] = dict(model=model, phase="training", batch=1,
                                    prompt_len=4096 if engine == "megatron" else 2048, gpus=gpus)
    if engine:
        items["engine"] = engine
    report = _plan("h100-sxm", "training-throughput", tuple(items.items()))
    assert report.plan is not None
    assert absent not in [s.id for s in report.plan.steps]
