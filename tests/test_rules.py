"""The rules engine and the A/B/C playbooks: schema, known answers across device classes,
and every rule both firing and being rejected with a reason."""

from __future__ import annotations

from functools import cache

import pytest

from hwadvisor.models import Recommendation, Rejected
from hwadvisor.probe.target import primary_device, resolve_target
from hwadvisor.rules.conditions import CONDITIONS, When, failed_conditions
from hwadvisor.rules.engine import Outcome, recommend
from hwadvisor.rules.facts import FACT_NAMES
from hwadvisor.rules.metrics import METRICS
from hwadvisor.rules.playbook import (
    GOALS,
    load_rules,
    load_text,
    rules_for_goal,
    template_fields,
)
from hwadvisor.workload import build_workload

A, B, C = "training-throughput", "inference-latency", "memory-footprint"

PLAYBOOKS = {
    A: {"torch-compile", "bf16-mixed-precision", "fp8-training", "fsdp2-zero3",
        "activation-checkpointing", "fused-adamw", "tensor-parallel-in-node"},
    B: {"flash-attention", "prefix-caching", "fp8-weights", "int4-weights", "cuda-graphs",
        "speculative-decoding", "paged-kv-continuous-batching", "pd-disaggregation"},
    C: {"int4-weights", "kv-cache-quantization", "sliding-window-or-mla", "mmap-weights",
        "activation-checkpointing", "cpu-offload", "flash-attention"},
}


@cache
def _run(profile: str, goal: str, items: tuple) -> Outcome:
    options = dict(items)
    report = resolve_target(profile, options.get("gpus", 1))
    device = primary_device(report)
    workload = build_workload(**options)
    return recommend(workload, device, goal, host=report.host)


def run(profile: str, goal: str, **workload: object) -> Outcome:
    """Recommend for a datasheet profile (cached: several tests share a scenario)."""
    return _run(profile, goal, tuple(sorted(workload.items())))


def fired(outcome: Outcome, rule_id: str) -> Recommendation:
    found = [r for r in outcome.recommendations if r.id == rule_id]
    assert found, f"{rule_id} did not fire; rejected: " + "; ".join(
        r.why_not for r in outcome.rejected)
    return found[0]


def rejected(outcome: Outcome, rule_id: str) -> Rejected:
    found = [r for r in outcome.rejected if r.id == rule_id]
    assert found, f"{rule_id} was not rejected; fired: {[r.id for r in outcome.recommendations]}"
    return found[0]


# ------------------------------------------------------------------ the playbook files


def test_playbooks_load_and_hold_exactly_the_goal_rules():
    rules = load_rules()
    assert len({r.id for r in rules}) == len(rules)
    for goal in GOALS:
        assert {r.id for r in rules_for_goal(goal)} == PLAYBOOKS[goal]


def test_every_reference_in_the_rules_exists():
    for rule in load_rules():
        for goal in rule.goals:
            r = rule.for_goal(goal)
            for metric in (r.metric, r.metric_if_unfit, r.tradeoff_metric):
                assert metric is None or metric in METRICS
            assert template_fields(r.why) <= set(FACT_NAMES)
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
    facts = {"phase": "inference", "batch": 32, "device_class": "cpu"}
    when = When(phase="training", max_batch=16, device_class_in=["cpu"])
    assert failed_conditions(when, facts) == ["phase", "max_batch"]
    assert failed_conditions(When(phase="inference", max_batch=64), facts) == []


# ------------------------------------------------------------------ known answers


def test_70b_on_one_rtx_4090_needs_int4_and_offload_and_says_what_still_does_not_fit():
    out = run("rtx-4090", C, model="llama-3-70b")
    assert not out.estimate.fits
    int4 = fired(out, "int4-weights")
    assert int4.goal == C
    assert int4.predicted.metric == "estimate.memory.weights_bytes"
    assert int4.predicted.after < 0.35 * int4.predicted.before  # ~4.2 of 16 bits
    assert int4.fits_after is False and "still" in int4.why  # 4-bit 70B is ~40 GB > 24 GB
    offload = fired(out, "cpu-offload")
    assert offload.fits_after is True
    assert 0 < float(offload.changes["offload_fraction"]) <= 1
    assert "int4" in offload.why  # the combined plan is named
    # what makes it fit ranks above what only shrinks it
    assert offload.rank < int4.rank


def test_8b_decode_at_batch_1_on_h200_is_bandwidth_bound_and_gets_graphs_and_low_precision():
    out = run("h200-sxm", B, model="llama-3-8b")
    assert out.estimate.bottleneck == "memory-bandwidth"
    graphs = fired(out, "cuda-graphs")
    assert graphs.predicted.metric == "estimate.times.decode_step_s"
    assert graphs.predicted.factor < 1
    for rule_id in ("fp8-weights", "int4-weights"):
        rec = fired(out, rule_id)
        assert rec.predicted.after < rec.predicted.before
        assert abs(rec.predicted.factor - rec.predicted.after / rec.predicted.before) < 1e-9
    assert "FlashAttention-3" in fired(out, "flash-attention").title  # Hopper's backend


@pytest.mark.parametrize("profile", ["h100-sxm", "a100-80gb"])
def test_8b_adamw_training_on_one_80gb_gpu_does_not_fit_and_a_advises_sharding_or_ckpt(profile):
    one = run(profile, A, model="llama-3-8b", phase="training")
    assert not one.estimate.fits
    ckpt = fired(one, "activation-checkpointing")
    assert ckpt.predicted.metric == "estimate.memory.activations_bytes"
    assert ckpt.predicted.after < ckpt.predicted.before
    assert "train step" in ckpt.predicted.text  # the step-time cost is stated too
    no_shard = rejected(one, "fsdp2-zero3")
    assert "--gpus" in no_shard.why_not and "does not fit" in no_shard.why_not

    eight = run(profile, A, model="llama-3-8b", phase="training", gpus=8)
    shard = fired(eight, "fsdp2-zero3")
    assert shard.predicted.metric == "estimate.memory.total_bytes"
    assert shard.fits_after is True
    assert shard.predicted.after < shard.predicted.before
    assert shard.changes["sharding"] == "fsdp" and int(shard.changes["grad_accum"]) >= 1
    assert "reduce_bucket_size" in shard.why and "gradient accumulation" in shard.why.lower()
    assert shard.trial == "collectives"


def test_fp8_weights_rejected_on_ampere_with_the_compute_capability():
    out = run("rtx-3090", B, model="llama-3-8b")
    why = rejected(out, "fp8-weights").why_not
    assert why.startswith("fp8-weights:") and "8.6" in why and "FP8" in why


def test_consumer_gpus_get_no_nvlink_advice():
    out = run("rtx-4090", B, model="llama-3-8b", gpus=4)
    assert "consumer-gpu" in rejected(out, "pd-disaggregation").why_not
    train = run("rtx-4090", A, model="llama-3.2-1b", phase="training", gpus=4)
    assert "NVLink" in rejected(train, "tensor-parallel-in-node").why_not


def test_tensor_parallel_stays_inside_one_node():
    out = run("h100-sxm", A, model="llama-3-8b", phase="training", gpus=4, nodes=4,
              gpus_per_node=1)
    assert rejected(out, "tensor-parallel-in-node").conditions_failed[0] == "min_gpus_per_node"


def test_rocm_gets_hip_graphs_and_fp8_only_on_mi300():
    mi300 = run("mi300x", B, model="llama-3-8b")
    assert "HIP" in fired(mi300, "cuda-graphs").title
    fired(mi300, "fp8-weights")
    mi250 = run("mi250x", B, model="llama-3-8b")
    assert "fp8-weights" in {r.id for r in mi250.rejected}


def test_apple_silicon_gets_no_cuda_graphs_but_mmap():
    b = run("m3-max", B, model="llama-3-8b")
    assert rejected(b, "cuda-graphs").conditions_failed == ["device_class_in", "vendor_in"]
    assert "MLX" in fired(b, "int4-weights").title
    c = run("m3-max", C, model="llama-3-8b")
    mmap = fired(c, "mmap-weights")
    assert mmap.predicted.after < mmap.predicted.before


def test_phones_plan_against_the_app_memory_limit():
    out = run("snapdragon-8-elite", C, model="llama-3-8b")
    report = resolve_target("snapdragon-8-elite")
    limit = report.host.mobile_app_memory_limit_bytes
    assert limit is not None
    rec = fired(out, "int4-weights")
    assert "NPU" in rec.title
    assert f"{limit / 1e9:.1f} GB" in rec.why
    assert any("throttl" in c for c in rec.caveats)


def test_every_rule_of_the_goal_is_either_recommended_or_rejected():
    for goal in GOALS:
        out = run("h200-sxm", goal, model="llama-3-8b")
        ids = [r.id for r in out.recommendations] + [r.id for r in out.rejected]
        assert sorted(ids) == sorted(PLAYBOOKS[goal])
        assert [r.rank for r in out.recommendations] == list(
            range(1, len(out.recommendations) + 1))
        assert all(r.goal == goal and r.validation.status == "pending"
                   for r in out.recommendations)


def test_ranking_follows_predicted_gain():
    out = run("h200-sxm", B, model="llama-3-8b")

    def gain(rec: Recommendation) -> float:
        return rec.predicted.before / rec.predicted.after

    gains = [gain(r) for r in out.recommendations]
    assert gains == sorted(gains, reverse=True)


# ------------------------------------------------------------------ every rule, both ways

S_8B = {"model": "llama-3-8b"}
S_8B_TRAIN = {"model": "llama-3-8b", "phase": "training"}

# rule id -> (goal, profile, workload) where it fires, and where it is rejected
FIRES = {
    "torch-compile": (A, "a100-80gb", {"model": "llama-3.2-1b", "phase": "training"}),
    "bf16-mixed-precision": (A, "a100-80gb", {"model": "llama-3.2-1b", "phase": "training",
                                              "activation_dtype": "fp32"}),
    "fp8-training": (A, "h100-pcie", S_8B_TRAIN),
    "fsdp2-zero3": (A, "h100-sxm", {**S_8B_TRAIN, "gpus": 8}),
    "tensor-parallel-in-node": (A, "h100-sxm", {**S_8B_TRAIN, "gpus": 8}),
    "fused-adamw": (A, "h100-sxm", S_8B_TRAIN),
    "activation-checkpointing": (C, "h100-sxm", S_8B_TRAIN),
    "flash-attention": (B, "h200-sxm", S_8B),
    "prefix-caching": (B, "h200-sxm", S_8B),
    "fp8-weights": (B, "h200-sxm", S_8B),
    "int4-weights": (B, "h200-sxm", S_8B),
    "cuda-graphs": (B, "h200-sxm", S_8B),
    "speculative-decoding": (B, "h200-sxm", S_8B),
    "paged-kv-continuous-batching": (B, "h200-sxm", {**S_8B, "batch": 16}),
    "pd-disaggregation": (B, "h200-sxm", {**S_8B, "gpus": 4}),
    "kv-cache-quantization": (C, "h200-sxm", {**S_8B, "batch": 16}),
    "sliding-window-or-mla": (C, "h200-sxm", {**S_8B, "batch": 8, "prompt_len": 32768}),
    "mmap-weights": (C, "m3-max", S_8B),
    "cpu-offload": (C, "rtx-4090", {"model": "llama-3-70b"}),
}
REJECTED = {
    "torch-compile": (A, "h100-sxm", S_8B, "phase"),
    "bf16-mixed-precision": (A, "a100-80gb", {"model": "llama-3.2-1b", "phase": "training"},
                             "activation_dtype_in"),
    "fp8-training": (A, "a100-80gb", S_8B_TRAIN, "requires_formats"),
    "fsdp2-zero3": (A, "h100-sxm", S_8B_TRAIN, "min_gpus"),
    "tensor-parallel-in-node": (A, "rtx-4090", {**S_8B_TRAIN, "gpus": 4}, "device_class_in"),
    "fused-adamw": (A, "h100-sxm", {**S_8B_TRAIN, "optimizer": "sgd"}, "optimizer_in"),
    "activation-checkpointing": (C, "h100-sxm", {**S_8B_TRAIN, "activation_checkpointing": True},
                                 "activation_checkpointing"),
    "flash-attention": (B, "snapdragon-8-elite", {"model": "llama-3.2-1b"},
                        "device_class_not_in"),
    "prefix-caching": (B, "h200-sxm", {**S_8B, "prompt_len": 128}, "min_prompt_len"),
    "fp8-weights": (B, "rtx-3090", S_8B, "requires_formats"),
    "int4-weights": (B, "h200-sxm", {**S_8B, "weights_dtype": "int4"}, "weights_dtype_not_in"),
    "cuda-graphs": (B, "m3-max", S_8B, "device_class_in"),
    "speculative-decoding": (B, "h200-sxm", {**S_8B, "batch": 64}, "max_batch"),
    "paged-kv-continuous-batching": (B, "h200-sxm", S_8B, "min_batch"),
    "pd-disaggregation": (B, "rtx-4090", {**S_8B, "gpus": 4}, "device_class_in"),
    "kv-cache-quantization": (C, "h200-sxm", S_8B, "min_kv_fraction"),
    "sliding-window-or-mla": (C, "h200-sxm", {"model": "gemma-2-9b", "batch": 8,
                                              "prompt_len": 32768}, "model_features_absent"),
    "mmap-weights": (C, "h200-sxm", S_8B, "device_class_in"),
    "cpu-offload": (C, "h200-sxm", S_8B, "fits"),
}
ALL_IDS = sorted({r.id for r in load_rules()})


def test_the_both_ways_tables_cover_every_rule():
    assert sorted(FIRES) == ALL_IDS and sorted(REJECTED) == ALL_IDS


@pytest.mark.parametrize("rule_id", ALL_IDS)
def test_rule_fires_with_a_prediction(rule_id):
    goal, profile, workload = FIRES[rule_id]
    rec = fired(run(profile, goal, **workload), rule_id)
    p = rec.predicted
    assert p.before is not None and p.after is not None and p.before != p.after
    assert p.factor == pytest.approx(p.after / p.before)
    assert p.unit and "→" in (p.text or "")
    assert rec.why and rec.title and rec.references


@pytest.mark.parametrize("rule_id", ALL_IDS)
def test_rule_is_rejected_with_a_reason(rule_id):
    goal, profile, workload, condition = REJECTED[rule_id]
    rej = rejected(run(profile, goal, **workload), rule_id)
    assert rej.conditions_failed[0] == condition
    assert rej.why_not.startswith(f"{rule_id}: ")
    reason = rej.why_not.split(": ", 1)[1]
    assert len(reason) > 20 and "{" not in reason and "unknown" not in reason


def test_kv_dominated_workload_names_the_architecture_alternatives_with_their_kv():
    out = run("h200-sxm", C, model="llama-3-8b", batch=8, prompt_len=32768)
    rec = fired(out, "sliding-window-or-mla")
    # llama-3-8b already has 8 KV heads: GQA-8 would not shrink it and is not offered
    assert "mla" in rec.why and "sliding-window" in rec.why and "gqa-8" not in rec.why
    assert rec.changes["spec.attention"] == "mla"
    assert rec.predicted.after < 0.5 * rec.predicted.before
    assert "vLLM" in fired(out, "kv-cache-quantization").why  # names keep their spelling


def test_mha_model_is_offered_gqa(monkeypatch):
    from hwadvisor.workload import load_spec

    spec = load_spec("llama-3-8b").model_copy(update={"num_kv_heads": 32, "attention": "mha"})
    workload = build_workload(model="llama-3-8b", batch=8, prompt_len=32768)
    workload = workload.model_copy(update={"spec": spec})
    report = resolve_target("h200-sxm")
    out = recommend(workload, primary_device(report), C, host=report.host)
    assert "gqa-8" in fired(out, "sliding-window-or-mla").why
