"""Each rule's trial and verdict mapping (its playbook `verdict` table) against the trial registry.

Adding a rule with a trial is one TOML entry; this test is what checks that entry agrees with
the validator: the trial exists, and the kind of effect it reads fits the rule's metric.
"""

from __future__ import annotations

import pytest

from hwadvisor.rules.playbooks.metrics import METRICS
from hwadvisor.rules.playbooks.schema import load_rules
from hwadvisor.trials import registry
from hwadvisor.validator.verdicts import metric_kind

WITH_VERDICT = [r for r in load_rules() if r.verdict is not None]


def test_some_rules_carry_a_verdict_mapping() -> None:
    assert len(WITH_VERDICT) >= 8


@pytest.mark.parametrize("rule", WITH_VERDICT, ids=lambda r: r.id)
def test_the_trial_is_registered(rule) -> None:
    assert rule.verdict.trial in registry.TRIALS, (
        f"{rule.id} names trial {rule.verdict.trial!r}; registered: {sorted(registry.TRIALS)}")


@pytest.mark.parametrize("rule", WITH_VERDICT, ids=lambda r: r.id)
def test_the_effect_kind_fits_every_goal_metric(rule) -> None:
    spec = rule.verdict
    if spec.kind == "info":
        return  # the trial measures an input; the prediction is re-run, not compared
    for goal in rule.goals:
        metric = rule.for_goal(goal).metric
        kind = metric_kind(metric)
        if spec.kind == "memory_factor":
            # a memory-factor rule serving a time or rate metric is judged on the trial's
            # speedup (validator.verdicts: kv-cache-quantization for inference-latency)
            assert kind in ("bytes", "time", "rate"), \
                f"{rule.id} ({goal}): a memory factor checks {metric}"
        else:
            assert kind in ("time", "rate", "bytes"), f"{rule.id} ({goal}): {metric}"


@pytest.mark.parametrize("rule", WITH_VERDICT, ids=lambda r: r.id)
def test_family_and_batch_templates_are_well_formed(rule) -> None:
    spec = rule.verdict
    assert spec.effect.count("{batch}") <= 1
    keys = [key for key, _ in spec.family]
    assert len(keys) == len(set(keys)), f"{rule.id}: a family lists a key twice"
    if "{batch}" in spec.effect:
        prefix = spec.effect.split("{batch}")[0]
        assert keys and all(k.startswith(prefix) for k in keys)


# Rules no short trial here can check, and why (they are "unsupported" under --validate):
NO_TRIAL = {
    "memory-reservation": "the engine's own start-up decides (its memory profiling)",
    "mmap-weights": "load-time page mapping of a real checkpoint",
    "sliding-window-or-mla": "an architecture change: needs another model",
    "chunked-prefill": "a scheduler policy of the serving engine",
    "fp4-weights": "FP4 tensor cores (Blackwell) and an engine's FP4 kernels",
    "int8-weights": "an engine's INT8 W8A8 kernels",
    "lora": "a fine-tuning method: its memory needs PEFT on the real model",
    "qlora": "bitsandbytes NF4 kernels",
    "optimizer-8bit": "bitsandbytes / torchao 8-bit optimizers",
    "pure-bf16-adamw-8bit": "bitsandbytes' 8-bit AdamW on bf16 weights: memory, no step trial",
    "trainer-pure-bf16-adamw-8bit": "a move to the Trainer with bitsandbytes' 8-bit AdamW",
    "fused-cross-entropy": "Liger / Megatron's fused loss kernels, not installed with torch",
    "micro-batch": "activations at each micro-batch size of the real model: "
                   "benchmarks/train_memory.py measures them on a GPU",
}


def test_the_rules_without_a_trial_are_the_listed_ones() -> None:
    """Every rule a short trial can check names one; the rest are listed here with why not."""
    without = sorted(r.id for r in load_rules() if r.verdict is None)
    assert without == sorted(NO_TRIAL)


def test_every_metric_a_verdict_checks_has_a_unit() -> None:
    for rule in WITH_VERDICT:
        for goal in rule.goals:
            assert rule.for_goal(goal).metric in METRICS
