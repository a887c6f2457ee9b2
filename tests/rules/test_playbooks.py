"""The rules engine and the A/B/C playbooks: schema, known answers across device classes,
and every rule both passing on a state (with a prediction) and being rejected with a reason."""

from __future__ import annotations

from functools import cache
from types import SimpleNamespace

import pytest

from hwadvisor.engines import baseline
from hwadvisor.models import Recommendation
from hwadvisor.pipeline import build_workload as pipeline_workload
from hwadvisor.probe.target import primary_device, resolve_target
from hwadvisor.rules.advise import Outcome, recommend
from hwadvisor.rules.judge import Candidate, Rejection, default_estimator, judge, new_context
from hwadvisor.rules.playbooks.conditions import (
    CONDITIONS,
    REASON_FIELDS,
    When,
    failed_conditions,
)
from hwadvisor.rules.playbooks.facts import FACT_FIELDS
from hwadvisor.rules.playbooks.goals import GOALS
from hwadvisor.rules.playbooks.metrics import METRICS
from hwadvisor.rules.playbooks.schema import (
    load_rules,
    load_text,
    rules_for_goal,
    template_fields,
)
from hwadvisor.workload import Sizing, WorkloadRequest

A, B, C = "training-throughput", "inference-latency", "memory-footprint"

PLAYBOOKS = {
    A: {"torch-compile", "bf16-mixed-precision", "fp16-mixed-precision", "fp8-training",
        "fsdp2-zero3", "hsdp", "tensor-parallel-in-node", "pipeline-parallel", "context-parallel",
        "fused-adamw", "activation-checkpointing", "optimizer-8bit", "optimizer-offload", "lora",
        "qlora", "flash-attention", "expert-parallel", "micro-batch", "fused-cross-entropy",
        "pure-bf16-adamw-8bit", "trainer-pure-bf16-adamw-8bit"},
    B: {"flash-attention", "prefix-caching", "fp8-weights", "int8-weights", "fp4-weights",
        "int4-weights", "cuda-graphs", "speculative-decoding", "paged-kv-continuous-batching",
        "chunked-prefill", "pd-disaggregation", "data-parallel-replicas", "expert-parallel",
        "dp-attention",
        "kv-cache-quantization", "cpu-offload", "memory-reservation"},
    C: {"int4-weights", "int8-weights", "fp8-weights", "fp4-weights", "kv-cache-quantization",
        "sliding-window-or-mla", "mmap-weights", "activation-checkpointing", "cpu-offload",
        "memory-reservation",
        "flash-attention", "bf16-mixed-precision", "fp16-mixed-precision", "fsdp2-zero3",
        "tensor-parallel-in-node", "pipeline-parallel", "context-parallel", "optimizer-8bit",
        "optimizer-offload", "lora", "qlora", "chunked-prefill", "micro-batch",
        "fused-cross-entropy", "pure-bf16-adamw-8bit", "trainer-pure-bf16-adamw-8bit"},
}


def _target(profile: str, workload: dict):
    report = resolve_target(profile, workload.get("gpus", 1))
    device = primary_device(report)
    built = pipeline_workload(WorkloadRequest(**workload),
                              Sizing(device.memory_total_bytes, device.device_class))
    return report, device, built


@cache
def _run(profile: str, goal: str, items: tuple) -> Outcome:
    report, device, workload = _target(profile, dict(items))
    return recommend(workload, device, goal, host=report.host)


def run(profile: str, goal: str, **workload: object) -> Outcome:
    """Plan for a datasheet profile (cached: several tests share a scenario)."""
    return _run(profile, goal, tuple(sorted(workload.items())))


def judged(rule_id: str, goal: str, profile: str, workload: dict) -> Candidate:
    """Judge one rule on the engine's default setup: its candidate, or raise Rejection."""
    report, device, built = _target(profile, workload)
    start, options = baseline(built, device)
    ctx = new_context(start, device, report.host, options, default_estimator())
    rule = next(r.for_goal(goal) for r in load_rules() if r.id == rule_id)
    return judge(rule, ctx)


def step(outcome: Outcome, rule_id: str) -> Recommendation:
    found = [r for r in outcome.recommendations if r.id == rule_id and r.in_plan]
    assert found, (f"{rule_id} is not a plan step; plan: "
                   f"{[s.id for s in outcome.plan.steps]}; rejected: "
                   + "; ".join(r.why_not for r in outcome.rejected))
    return found[0]


def rejected_why(outcome: Outcome, rule_id: str) -> str:
    found = [r for r in outcome.rejected if r.id == rule_id]
    assert found, f"{rule_id} was not rejected; plan: {[s.id for s in outcome.plan.steps]}"
    return found[0].why_not


# ------------------------------------------------------------------ the playbook files


def test_playbooks_load_and_hold_exactly_the_goal_rules():
    rules = load_rules()
    assert len({r.id for r in rules}) == len(rules)
    for goal in GOALS:
        assert {r.id for r in rules_for_goal(goal)} == PLAYBOOKS[goal]


def test_every_rule_id_is_a_step_the_engines_table_knows():
    from hwadvisor.engines import STEP_IDS

    assert {r.id for r in load_rules()} <= set(STEP_IDS)


def test_every_reference_in_the_rules_exists():
    for rule in load_rules():
        for goal in rule.goals:
            r = rule.for_goal(goal)
            for metric in (r.metric, r.metric_if_unfit, r.tradeoff_metric):
                assert metric is None or metric in METRICS
            assert template_fields(r.why) <= FACT_FIELDS | set(REASON_FIELDS)
            for name in r.why_not:
                assert name in CONDITIONS or name in ("min_gain", "no_metric")
        assert rule.references, f"{rule.id} cites no source"


_MINIMAL = """
[[rule]]
id = "x"
goals = ["inference-latency"]
title = "t"
why = "{{bottleneck}}"
metric = "estimate.times.decode_step_s"
{extra}
[rule.what_if]
options = {{ cuda_graphs = true }}
"""


def test_a_minimal_rule_loads():
    (rule,) = load_text(_MINIMAL.format(extra=""))
    assert rule.what_if is not None and rule.what_if.options == {"cuda_graphs": True}


@pytest.mark.parametrize("extra, problem", [
    ('colour = "red"', "colour"),                                   # unknown rule key
    ('verdict = { trial = "x", kind = "maybe" }', "kind"),  # a verdict kind that is not one
    ('tradeoff_metric = "estimate.times.nope_s"', "unknown metric"),
    ('caveats = ["a"]\n[rule.when]\nbatch_under = 3', "batch_under"),  # unknown condition
    ('[rule.why_not]\nnot_a_condition = "x"', "unknown conditions"),
    ('[rule.why_not]\nphase = "{no_such_fact}"', "unknown facts"),
])
def test_schema_refuses_mistakes(extra, problem):
    with pytest.raises(ValueError, match=problem):
        load_text(_MINIMAL.format(extra=extra))


def test_schema_refuses_unknown_what_if_fields():
    text = _MINIMAL.format(extra="").replace("cuda_graphs = true", "warp_speed = true")
    with pytest.raises(ValueError, match="warp_speed"):
        load_text(text)


def test_conditions_are_checked_in_order_and_all_reported():
    # the three facts these conditions read, by field name as on Facts
    facts = SimpleNamespace(phase="inference", batch=32, device_class="cpu")
    when = When(phase="training", max_batch=16, device_class_in=["cpu"])
    assert failed_conditions(when, facts) == ["phase", "max_batch"]
    assert failed_conditions(When(phase="inference", max_batch=64), facts) == []


# ------------------------------------------------------------------ known answers


def test_8b_full_fine_tune_on_8_h100_fits_with_fsdp():
    """Plain PyTorch starts from DDP (16 B/param does not fit 80 GB): FSDP makes it fit.

    One sequence of 4096 tokens: under autocast over fp32 weights the 8B's activations at
    batch 2 (~76 GB with the loss) would not fit next to even sharded state.
    """
    out = run("h100-sxm", A, model="llama-3-8b", phase="training", batch=1, prompt_len=4096,
              gpus=8, engine="hf")
    assert not out.estimate.fits  # DDP: every GPU holds all 128 GB of state
    shard = step(out, "fsdp2-zero3")
    assert shard.step == 1 and out.plan.steps[0].needed_to_fit
    assert out.plan.fits and out.plan.min_gpus is None
    assert out.plan.memory_per_gpu_bytes < 80e9
    assert "reduce_bucket_size" in shard.why and "gradient accumulation" in shard.why.lower()
    # torchtitan shards with FSDP2 by default: it fits as it comes, and is not told to shard.
    titan = run("h100-sxm", A, model="llama-3-8b", phase="training", batch=2, prompt_len=4096,
                gpus=8)
    assert titan.estimate.fits and "does this by default" in rejected_why(titan, "fsdp2-zero3")


def test_a_model_that_cannot_fit_says_how_many_gpus_and_what_else():
    out = run("h100-sxm", A, model="llama-3.1-405b", phase="training", engine="hf")
    plan = out.plan
    assert not plan.fits and plan.summary.startswith("Does not fit")
    assert plan.min_gpus is not None and plan.min_gpus >= 2
    ids = {a.id for a in plan.alternatives}
    assert "more-gpus" in ids
    if {"lora", "qlora"} & {s.id for s in plan.steps}:
        # the plan fine-tunes adapters: what full training needs is said too, in whole nodes
        full = next(a for a in plan.alternatives if a.id == "more-gpus-same-method")
        assert int(full.changes["gpus"]) % 8 == 0 and int(full.changes["gpus"]) >= 16


def test_min_gpus_really_fits_when_re_estimated():
    out = run("rtx-4090", B, model="llama-3-70b", weights_dtype="bf16", engine="vllm")
    plan = out.plan
    if plan.fits:
        pytest.skip("fits on one GPU with offload")
    assert plan.min_gpus is not None
    again = run("rtx-4090", B, model="llama-3-70b", weights_dtype="bf16", engine="vllm",
                gpus=plan.min_gpus)
    assert again.plan.fits


def test_70b_on_one_rtx_4090_takes_q4_k_m_then_offloads_what_is_left():
    out = run("rtx-4090", B, model="llama-3-70b")
    assert out.plan.engine == "llamacpp"
    ids = [s.id for s in out.plan.steps]
    assert ids.index("int4-weights") < ids.index("cpu-offload")  # drop-in first, offload last
    int4 = step(out, "int4-weights")
    assert int4.changes["weights_dtype"] == "q4_k_m"
    offload = next(s for s in out.plan.steps if s.id == "cpu-offload")
    assert offload.fits_after and offload.needed_to_fit
    # sized for the 4-bit weights: about half of them, not 95% of a bf16 model
    assert 0.3 < float(offload.changes["offload_fraction"]) < 0.8


def test_a_vllm_user_is_not_told_to_enable_what_vllm_does():
    out = run("h100-sxm", B, model="llama-3-8b", batch=64, prompt_len=2048)
    assert out.plan.engine == "vllm"
    already = {"cuda-graphs", "paged-kv-continuous-batching", "prefix-caching", "chunked-prefill",
               "flash-attention"}
    assert not already & {s.id for s in out.plan.steps}
    for rule_id in already:
        assert "vLLM does this by default" in rejected_why(out, rule_id)


def test_batch_64_serving_of_8b_on_one_h100_is_not_capacity_bound():
    out = run("h100-sxm", B, model="llama-3-8b", batch=64, prompt_len=2048)
    assert out.estimate.fits and out.estimate.bottleneck != "memory-capacity"
    assert out.estimate.memory.total_bytes < 50e9  # chunked prefill, fused attention
    assert out.plan.max_batch is not None and out.plan.max_batch > 64


def test_an_fp8_checkpoint_is_planned_in_fp8():
    out = run("h200-sxm", B, model="deepseek-v3", gpus=8)
    _, _, workload = _target("h200-sxm", {"model": "deepseek-v3", "gpus": 8})
    assert workload.weights_dtype == "fp8" and "quantization_config" in (
        workload.weights_dtype_source or "")
    assert out.plan.fits
    assert "fp8-weights" not in {s.id for s in out.plan.steps}


def test_8b_training_on_one_24gb_gpu_is_answered_with_qlora():
    out = run("rtx-4090", A, model="llama-3-8b", phase="training", batch=1, prompt_len=2048)
    assert not out.estimate.fits and out.plan.fits
    ids = {s.id for s in out.plan.steps}
    assert ids & {"qlora", "lora"}
    method = next(s for s in out.plan.steps if s.id in ("qlora", "lora"))
    assert method.changes_method and "pre-train" in method.changes_method


def test_hf_decode_at_batch_1_gets_graphs_first():
    """Plain transformers decode at batch 1 is launch-bound (eager 28.6 ms, graphed 8.95 ms on
    the H200, docs/benchmarks.md): graphs come first. torch's int4 kernel there slows the
    2048-token prefill more than it speeds decode (int4 trial: x0.17 at 64 rows), so it stays
    out, and the rejection says so on the goal's metric."""
    out = run("h200-sxm", B, model="llama-3-8b", engine="hf")
    ids = [s.id for s in out.plan.steps]
    assert ids[0] == "cuda-graphs"
    if "int4-weights" not in ids:
        why = rejected_why(out, "int4-weights")
        assert "request latency" in why and "decode step" in why
    metrics = [s.metric_after for s in out.plan.steps]
    assert metrics == sorted(metrics, reverse=True)  # each step lowers the latency
    graphs = step(out, "cuda-graphs")
    assert "reduce-overhead" in graphs.title  # the transformers way to graph generate()


def test_fp8_weights_rejected_on_turing():
    out = run("t4", B, model="llama-3.2-1b", engine="vllm")
    why = rejected_why(out, "fp8-weights")
    assert why.startswith("fp8-weights:") and "FP8" in why
    assert "fp8-weights" not in {s.id for s in out.plan.steps}


def test_fp8_weights_run_weight_only_on_ampere_with_vllm():
    # vLLM runs FP8 checkpoints on Ampere through FP8 Marlin (W8A16): the step halves the
    # weight bytes and says it is weight-only; the config is the same --quantization fp8
    out = run("rtx-3090", B, model="llama-3-8b", engine="vllm")
    fp8 = step(out, "fp8-weights")
    assert "weight-only" in fp8.title and "Marlin" in fp8.title
    assert "--quantization fp8" in out.plan.engine_config.text


def test_a_small_model_trains_without_tensor_parallelism():
    # torchtitan's own 8B preset: FSDP alone (tensor_parallel_degree = 1); 70B: TP 8
    with pytest.raises(Rejection) as no:
        judged("tensor-parallel-in-node", A, "h100-sxm", {**S_8B_TRAIN, "gpus": 8})
    assert no.value.conditions[0] == "min_params_b"
    assert "FSDP alone" in no.value.reason


def test_tensor_parallel_stays_inside_one_node():
    with pytest.raises(Rejection) as no:
        judged("tensor-parallel-in-node", A, "h100-sxm",
               {"model": "llama-3-8b", "phase": "training", "gpus": 4, "nodes": 4,
                "gpus_per_node": 1, "engine": "hf"})
    assert no.value.conditions[0] == "min_gpus_per_node"


def test_apple_silicon_gets_mlx_formats_and_no_cuda_graphs():
    # 4-bit for speed is asked for (--quality int4): the default fp8 budget lists it beside
    out = run("m3-max", B, model="llama-3-8b", quality="int4")
    assert out.plan.engine == "mlx"
    int4 = step(out, "int4-weights")
    assert int4.changes["weights_dtype"] == "mlx-4bit" and "MLX" in int4.title
    assert "cuda-graphs" not in {s.id for s in out.plan.steps}


def test_phones_plan_against_the_app_memory_limit_and_name_a_smaller_model():
    # The 8B in 4 bits (4.2 GB in ExecuTorch's PTQ recipe) fits the 8 Elite's 6.4 GB app limit
    # but not the A18 Pro's 4.3 GB.
    out = run("a18-pro", B, model="llama-3-8b")
    report = resolve_target("a18-pro")
    limit = report.host.mobile_app_memory_limit_bytes
    assert limit is not None and out.plan.device_memory_bytes == limit
    assert not out.plan.fits and out.plan.min_gpus is None  # phones do not come in numbers
    smaller = next(a for a in out.plan.alternatives if a.id == "smaller-model")
    assert smaller.fits and "tokens/s" in smaller.text


def test_a_smaller_model_that_fits_whole_drops_the_plans_offload():
    """70B on one 4090 needs layers on the CPU; the 8B answer runs wholly on the GPU."""
    out = run("rtx-4090", B, model="llama-3-70b")
    assert "cpu-offload" in {s.id for s in out.plan.steps}
    smaller = next(a for a in out.plan.alternatives if a.id == "smaller-model")
    assert "without cpu-offload" in smaller.text
    # Much faster than the offloaded 70B plan, and faster than the 8B with the offload kept
    # (what the alternative said before: 12.4 s at 21 tokens/s).
    assert smaller.metric is not None and out.plan.metric.after is not None
    assert smaller.metric < out.plan.metric.after / 20
    assert smaller.metric < 5.0


def test_under_the_memory_goal_a_smaller_model_does_not_inherit_the_big_ones_offload():
    """The 70B memory plan offloads layers; an 8B that fits whole on the 4090 runs without it.

    Before, the 8B kept the 70B's offloaded share (3.5 GB on the GPU, 9.4 tokens/s): a smaller
    footprint, but an offload no one would run for a model that fits.
    """
    out = run("rtx-4090", "memory-footprint", model="llama-3-70b")
    assert "cpu-offload" in {s.id for s in out.plan.steps}
    smaller = [a for a in out.plan.alternatives if a.id == "smaller-model"]
    assert smaller and all("without cpu-offload" in a.text for a in smaller)
    first = smaller[0]
    assert first.memory_per_gpu_bytes is not None and first.memory_per_gpu_bytes > 5e9
    speed = float(first.text.rsplit(", ", 1)[1].split(" tokens/s")[0])
    assert speed > 50.0


def test_a_smaller_model_trains_without_the_optimizer_offload_it_does_not_need():
    # torchtitan has no optimizer-only offload (its enable_cpu_offload is FSDP2's whole-model
    # CPUOffloadPolicy), so the plan that offloads the optimizer is DeepSpeed's.
    out = run("h100-sxm", A, model="llama-3-70b", phase="training", batch=1, prompt_len=4096,
              gpus=8, engine="deepspeed")
    assert "optimizer-offload" in {s.id for s in out.plan.steps}
    smaller = next(a for a in out.plan.alternatives if a.id == "smaller-model")
    assert "without" in smaller.text and "optimizer-offload" in smaller.text
    assert smaller.metric is not None and out.plan.metric.after is not None
    assert smaller.metric > 10 * out.plan.metric.after  # tokens/s: an 8B, not offloaded


def test_torchtitan_plans_only_the_offload_it_does():
    # its offload is FSDP2's CPUOffloadPolicy (enable_cpu_offload, with FSDP sharding); it has
    # no 8-bit optimizer
    out = run("h100-sxm", A, model="llama-3-70b", phase="training", batch=1, prompt_len=4096,
              gpus=8)
    steps = {s.id for s in out.plan.steps}
    assert "optimizer-8bit" not in steps
    assert out.plan.engine_config is not None
    assert ("enable_cpu_offload = true" in out.plan.engine_config.text) == \
        ("optimizer-offload" in steps)
    assert out.plan.layout is not None and out.plan.layout.sharding == "fsdp"


def test_for_the_memory_goal_a_smaller_model_keeps_the_plans_memory_cuts():
    """Checkpointing (a workload change) and offload stay: the 3B needs less than the 8B plan."""
    out = run("a100-80gb", C, model="llama-3-8b", phase="training", batch=4, prompt_len=4096,
              engine="hf")
    smaller = next(a for a in out.plan.alternatives if a.id == "smaller-model")
    assert "without" not in smaller.text
    assert smaller.memory_per_gpu_bytes < out.plan.memory_per_gpu_bytes


def test_a_smaller_model_is_a_real_step_down_in_size():
    """Llama-3.2-1B (1.24B) on a T4 is not answered with TinyLlama (1.1B)."""
    out = run("t4", A, model="llama-3.2-1b", phase="training", batch=2, prompt_len=1024,
              activation_dtype="fp32")
    assert "smaller-model" not in {a.id for a in out.plan.alternatives}


def test_a_checkpoint_with_mtp_layers_drafts_with_them_in_the_engine_config():
    """DeepSeek-V3 ships one MTP layer: the step says so and vLLM is told --spec-method mtp."""
    out = run("h200-sxm", B, model="deepseek-v3", gpus=8)
    spec = step(out, "speculative-decoding")
    assert "MTP" in spec.title
    config = out.plan.engine_config
    assert config is not None and "--spec-method mtp" in config.text
    assert "--spec-tokens 1" in config.text and "ngram" not in config.text
    llama = run("h200-sxm", B, model="llama-3-8b", batch=1).plan.engine_config
    # the modelled drafter: Llama-3-8B has no published EAGLE-3 head, Llama-3.2-1B drafts for it
    assert llama is not None and "--spec-method draft_model" in llama.text
    assert "--spec-model meta-llama/Llama-3.2-1B-Instruct" in llama.text


def test_mla_alone_is_not_mtp():
    """DeepSeek-V2-style checkpoints have MLA but no MTP layers: no MTP feature, no MTP claim."""
    from hwadvisor.rules.playbooks.facts import _features

    _, _, v3 = _target("h200-sxm", {"model": "deepseek-v3", "gpus": 8})
    assert {"mla", "mtp", "moe"} <= set(_features(v3))
    assert v3.spec is not None
    v2_like = v3.model_copy(update={"spec": v3.spec.model_copy(update={"mtp_layers": 0})})
    assert "mla" in _features(v2_like) and "mtp" not in _features(v2_like)


def test_no_plan_counts_on_what_the_engine_cannot_turn_on():
    """ExecuTorch's LLM runner has no drafting loop: no speculative step on a phone plan."""
    out = run("snapdragon-8-elite", B, model="llama-3.2-1b", prompt_len=512)
    assert out.plan.engine == "executorch"
    assert "speculative-decoding" not in {s.id for s in out.plan.steps}
    why = next(r.why_not for r in out.rejected if r.id == "speculative-decoding")
    assert "cannot do this here" in why and "no drafter option" in why


def test_every_rule_of_the_goal_is_a_step_an_option_or_rejected():
    for goal in GOALS:
        out = run("h200-sxm", goal, model="llama-3-8b")
        ids = [r.id for r in out.recommendations] + [r.id for r in out.rejected]
        assert sorted(ids) == sorted(PLAYBOOKS[goal])
        assert [r.rank for r in out.recommendations] == list(
            range(1, len(out.recommendations) + 1))
        assert all(r.goal == goal and r.validation.status == "pending"
                   for r in out.recommendations)
        assert [r.id for r in out.recommendations if r.in_plan] == [
            s.id for s in out.plan.steps]


# ------------------------------------------------------------------ every rule, both ways

S_8B = {"model": "llama-3-8b"}
S_8B_TRAIN = {"model": "llama-3-8b", "phase": "training"}
HF = {"engine": "hf"}

# rule id -> (goal, profile, workload) where it passes on the engine's default setup
FIRES = {
    "torch-compile": (A, "a100-80gb", {"model": "llama-3.2-1b", "phase": "training"}),
    "bf16-mixed-precision": (A, "a100-80gb", {"model": "llama-3.2-1b", "phase": "training",
                                              "activation_dtype": "fp32"}),
    "fp16-mixed-precision": (A, "t4", {"model": "llama-3.2-1b", "phase": "training",
                                       "activation_dtype": "fp32"}),
    "fp8-training": (A, "h100-pcie", S_8B_TRAIN),
    "fsdp2-zero3": (A, "h100-sxm", {**S_8B_TRAIN, "gpus": 8, **HF}),
    "hsdp": (A, "h100-sxm", {**S_8B_TRAIN, "nodes": 4, "gpus_per_node": 8}),
    "tensor-parallel-in-node": (A, "h100-sxm", {"model": "llama-3-70b", "phase": "training",
                                                 "gpus": 32, "nodes": 4, "gpus_per_node": 8}),
    # 8 nodes: with FSDP's unsharded fp32 stage gradients (torchtitan 0.2.2, measured on the
    # 405B ranks) no pipeline split of the 70B fits 4 nodes without tensor parallelism
    "pipeline-parallel": (A, "h100-sxm", {"model": "llama-3-70b", "phase": "training",
                                          "nodes": 8, "gpus_per_node": 8,
                                          "activation_checkpointing": True}),
    "micro-batch": (A, "rtx-4090", {"model": "llama-3-8b", "phase": "training", "batch": 4,
                                    "prompt_len": 4096, "weights_dtype": "nf4"}),
    "fused-cross-entropy": (A, "rtx-4090", {"model": "llama-3.2-1b", "phase": "training",
                                            "prompt_len": 16384, "engine": "hf"}),
    "context-parallel": (A, "h100-sxm", {**S_8B_TRAIN, "gpus": 8, "prompt_len": 65536}),
    "fused-adamw": (A, "h100-sxm", {**S_8B_TRAIN, "engine": "deepspeed"}),
    "activation-checkpointing": (C, "h100-sxm", {**S_8B_TRAIN, **HF}),
    "optimizer-8bit": (A, "h100-sxm", {**S_8B_TRAIN, **HF}),
    "optimizer-offload": (A, "h100-sxm", {**S_8B_TRAIN, **HF}),
    "pure-bf16-adamw-8bit": (A, "h100-sxm", {**S_8B_TRAIN, **HF}),
    # no --engine: torchtitan, the default, cannot fit the 8B on one GPU
    "trainer-pure-bf16-adamw-8bit": (A, "h100-sxm", S_8B_TRAIN),
    "lora": (A, "rtx-4090", S_8B_TRAIN),
    "qlora": (A, "rtx-4090", S_8B_TRAIN),
    "flash-attention": (B, "h200-sxm", {**S_8B, "attention_kernel": "math", **HF}),
    "prefix-caching": (B, "h200-sxm", {**S_8B, **HF}),
    "fp8-weights": (B, "h200-sxm", S_8B),
    # Ampere with SGLang (vLLM runs FP8 weight-only there, which it prefers)
    "int8-weights": (B, "a100-80gb", {**S_8B, "engine": "sglang"}),
    "fp4-weights": (B, "b200", S_8B),
    "int4-weights": (B, "h200-sxm", S_8B),
    "cuda-graphs": (B, "h200-sxm", {**S_8B, **HF}),
    "speculative-decoding": (B, "h200-sxm", S_8B),
    "paged-kv-continuous-batching": (B, "h200-sxm", {**S_8B, "batch": 16, **HF}),
    "chunked-prefill": (B, "h200-sxm", {**S_8B, "batch": 16, **HF}),
    "pd-disaggregation": (B, "h200-sxm", {**S_8B, "gpus": 4, "batch": 32}),
    "data-parallel-replicas": (B, "h200-sxm", {**S_8B, "gpus": 4, "batch": 32}),
    "expert-parallel": (B, "h200-sxm", {"model": "qwen3-30b-a3b", "gpus": 4}),
    "dp-attention": (B, "h200-sxm", {"model": "deepseek-v3", "gpus": 8, "batch": 256}),
    "kv-cache-quantization": (C, "h200-sxm", {**S_8B, "batch": 16}),
    "sliding-window-or-mla": (C, "h200-sxm", {**S_8B, "batch": 8, "prompt_len": 32768}),
    "mmap-weights": (C, "m3-max", {**S_8B, **HF}),
    "cpu-offload": (C, "rtx-4090", {"model": "llama-3-70b", "engine": "vllm"}),
    # 70B FP8 needs 79.7 GB of an H100: 721 MB over vLLM's 0.92 of the card, within 0.95
    "memory-reservation": (B, "h100-sxm", {"model": "llama-3.3-70b", "weights_dtype": "fp8"}),
}
REJECTED = {
    "torch-compile": (A, "h100-sxm", S_8B, "phase"),
    "bf16-mixed-precision": (A, "a100-80gb", {"model": "llama-3.2-1b", "phase": "training"},
                             "activation_dtype_in"),
    "fp16-mixed-precision": (A, "a100-80gb", {"model": "llama-3.2-1b", "phase": "training",
                                              "activation_dtype": "fp32"}, "formats_absent"),
    "fp8-training": (A, "a100-80gb", S_8B_TRAIN, "requires_formats"),
    "fsdp2-zero3": (A, "h100-sxm", S_8B_TRAIN, "min_gpus"),
    "hsdp": (A, "h100-sxm", {**S_8B_TRAIN, "gpus": 8}, "min_nodes"),
    "tensor-parallel-in-node": (A, "rtx-4090", {**S_8B_TRAIN, "gpus": 4}, "device_class_in"),
    "pipeline-parallel": (A, "h100-sxm", {**S_8B_TRAIN, "gpus": 8}, "min_nodes"),
    "micro-batch": (A, "h100-sxm", {**S_8B_TRAIN, "batch": 1}, "min_batch"),
    "fused-cross-entropy": (A, "h100-sxm", S_8B, "phase"),
    "context-parallel": (A, "h100-sxm", {**S_8B_TRAIN, "gpus": 8}, "min_prompt_len"),
    "fused-adamw": (A, "h100-sxm", {**S_8B_TRAIN, "optimizer": "sgd"}, "optimizer_in"),
    "activation-checkpointing": (C, "h100-sxm", {**S_8B_TRAIN, "activation_checkpointing": True},
                                 "activation_checkpointing"),
    "optimizer-8bit": (A, "h100-sxm", {**S_8B_TRAIN, "optimizer": "sgd"}, "optimizer_in"),
    "optimizer-offload": (A, "m3-max", {**S_8B_TRAIN, **HF}, "device_class_in"),
    "pure-bf16-adamw-8bit": (A, "t4", {**S_8B_TRAIN, **HF}, "requires_formats"),
    # torchtitan named with --engine: the plan keeps it
    "trainer-pure-bf16-adamw-8bit": (A, "h100-sxm", {**S_8B_TRAIN, "engine": "torchtitan"},
                                     "engine_named"),
    "lora": (A, "h100-sxm", S_8B, "phase"),
    "qlora": (A, "m3-max", {**S_8B_TRAIN, **HF}, "device_class_in"),
    "flash-attention": (B, "snapdragon-8-elite", {"model": "llama-3.2-1b"},
                        "device_class_not_in"),
    "prefix-caching": (B, "h200-sxm", {**S_8B, "prompt_len": 128, **HF}, "min_prompt_len"),
    "fp8-weights": (B, "t4", {"model": "llama-3.2-1b", "engine": "vllm"}, "fp8_usable"),
    "int8-weights": (B, "h200-sxm", S_8B, "fp8_usable"),
    "fp4-weights": (B, "h200-sxm", S_8B, "fp4_usable"),
    "int4-weights": (B, "h200-sxm", {**S_8B, "weights_dtype": "int4"}, "weights_dtype_not_in"),
    "cuda-graphs": (B, "m3-max", {**S_8B, **HF}, "device_class_in"),
    "speculative-decoding": (B, "h200-sxm", {**S_8B, "batch": 64, "gen_len": 0},
                             "bottleneck_not_in"),
    "paged-kv-continuous-batching": (B, "h200-sxm", {**S_8B, **HF}, "min_batch"),
    "chunked-prefill": (B, "h200-sxm", {**S_8B, "prompt_len": 256, **HF}, "min_prompt_len"),
    "pd-disaggregation": (B, "rtx-4090", {**S_8B, "gpus": 4, "batch": 32, "engine": "vllm"},
                          "device_class_in"),
    "data-parallel-replicas": (B, "h200-sxm", S_8B, "min_gpus"),
    "expert-parallel": (B, "h200-sxm", {**S_8B, "gpus": 4}, "model_features"),
    "dp-attention": (B, "h200-sxm", {**S_8B, "gpus": 4}, "model_features"),
    "kv-cache-quantization": (C, "h200-sxm", S_8B, "min_kv_fraction"),
    "sliding-window-or-mla": (C, "h200-sxm", {"model": "gemma-2-9b", "batch": 8,
                                              "prompt_len": 32768}, "model_features_absent"),
    "mmap-weights": (C, "h200-sxm", S_8B, "device_class_in"),
    "cpu-offload": (C, "h200-sxm", S_8B, "fits"),
    "memory-reservation": (B, "h100-sxm", {"model": "llama-3.3-70b", "weights_dtype": "fp8",
                                           "engine": "sglang"}, "engine_in"),
}
ALL_IDS = sorted({r.id for r in load_rules()})


def test_the_both_ways_tables_cover_every_rule():
    assert sorted(FIRES) == ALL_IDS and sorted(REJECTED) == ALL_IDS


@pytest.mark.parametrize("rule_id", ALL_IDS)
def test_rule_passes_with_a_prediction(rule_id):
    goal, profile, workload = FIRES[rule_id]
    candidate = judged(rule_id, goal, profile, workload)
    p = candidate.prediction
    assert p.before is not None and p.after is not None
    assert p.factor == pytest.approx(p.after / p.before)
    assert p.unit and "→" in (p.text or "")
    assert candidate.rule.references


@pytest.mark.parametrize("rule_id", ALL_IDS)
def test_rule_is_rejected_with_a_reason(rule_id):
    goal, profile, workload, condition = REJECTED[rule_id]
    with pytest.raises(Rejection) as no:
        judged(rule_id, goal, profile, workload)
    assert no.value.conditions[0] == condition
    reason = no.value.reason
    assert len(reason) > 20 and "{" not in reason and "unknown" not in reason


def test_kv_dominated_workload_names_the_architecture_alternatives_with_their_kv():
    candidate = judged("sliding-window-or-mla", C, "h200-sxm",
                       {"model": "llama-3-8b", "batch": 8, "prompt_len": 32768})
    text = " ".join(candidate.notes)
    # llama-3-8b already has 8 KV heads: GQA-8 would not shrink it and is not offered
    assert "mla" in text and "sliding-window" in text and "gqa-8" not in text
    assert candidate.changes["spec.attention"] == "mla"
    assert candidate.prediction.after < 0.5 * candidate.prediction.before
    out = run("h200-sxm", C, model="llama-3-8b", batch=8, prompt_len=32768)
    option = next(r for r in out.recommendations if r.id == "sliding-window-or-mla")
    assert option.needs_retraining and not option.in_plan


def test_docs_rules_lists_every_rule_and_engine():
    from pathlib import Path

    from hwadvisor.engines import ENGINE_IDS

    text = (Path(__file__).resolve().parents[2] / "docs" / "rules.md").read_text()
    for rule in load_rules():
        assert f"| {rule.id} |" in text, f"docs/rules.md has no row for {rule.id}"
    for engine in ENGINE_IDS:
        assert f"| {engine} |" in text, f"docs/rules.md has no row for engine {engine}"
