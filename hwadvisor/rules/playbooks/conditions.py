"""The conditions a rule may state, how each is checked against the facts, and its why-not text.

A rule's `[rule.when]` table is validated into `When` (unknown keys are refused). Every
condition has a default why-not template here; a rule may override it in `[rule.why_not]`.
Templates name facts (fields of `Facts`, facts.py beside it) and `REASON_FIELDS` such as
`{expected}`, the rule's value.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from hwadvisor.models.estimate import Bottleneck
from hwadvisor.models.workload import Dtype, Optimizer, Phase
from hwadvisor.rules.playbooks.facts import FACT_FIELDS, Facts

DeviceClassName = Literal["datacenter-gpu", "consumer-gpu", "apple-silicon", "mobile-soc", "cpu"]
Feature = Literal["moe", "mla", "mtp", "sliding_window", "gqa", "mha"]


class When(BaseModel):
    """The conditions of a rule; all that are set must hold (AND). Checked in this field order."""

    model_config = ConfigDict(extra="forbid")

    phase: Phase | None = None
    device_class_in: list[DeviceClassName] | None = None
    device_class_not_in: list[DeviceClassName] | None = None
    vendor_in: list[str] | None = None
    vendor_not_in: list[str] | None = None
    unified_memory: bool | None = None
    requires_formats: list[str] | None = Field(None, description="All must be native formats")
    requires_any_format: list[str] | None = None
    formats_absent: list[str] | None = Field(None, description="None may be native")
    compute_capability_in: list[str] | None = Field(None, description="e.g. ['9.0'] for Hopper")
    fast_interconnect: bool | None = Field(None, description="NVLink / xGMI between the GPUs")
    min_gpus: int | None = None
    max_gpus: int | None = None
    min_gpus_per_node: int | None = None
    max_batch: int | None = None
    min_batch: int | None = None
    min_prompt_len: int | None = None
    optimizer_in: list[Optimizer] | None = None
    weights_dtype_in: list[Dtype] | None = None
    weights_dtype_not_in: list[Dtype] | None = None
    kv_dtype_not_in: list[Dtype] | None = None
    activation_dtype_in: list[Dtype] | None = None
    activation_dtype_not_in: list[Dtype] | None = None
    activation_checkpointing: bool | None = None
    model_features: list[Feature] | None = Field(None, description="All must be present")
    model_features_absent: list[Feature] | None = Field(None, description="None may be present")
    bottleneck_in: list[Bottleneck] | None = None
    bottleneck_not_in: list[Bottleneck] | None = None
    fits: bool | None = None
    memory_tight: bool | None = Field(
        None, description="Does not fit, or headroom under 10% of the memory limit"
    )
    min_headroom_fraction: float | None = None
    min_kv_fraction: float | None = Field(
        None, description="KV cache share of the persistent state (weights, KV, grads, optimizer)")
    min_activation_fraction: float | None = None
    min_nodes: int | None = None
    min_params_b: float | None = Field(
        None, description="The model's total parameters at least this many billions")
    engine_in: list[str] | None = None
    engine_not_in: list[str] | None = None
    knobs_off: list[str] | None = Field(
        None, description="Engine knobs (cuda_graphs, compiled ...) that must still be off")
    chunked_prefill: bool | None = None
    fp8_usable: bool | None = None
    fp4_usable: bool | None = None
    finetune_in: list[Literal["full", "lora", "qlora"]] | None = None
    master_weights: bool | None = Field(
        None, description="Training keeps an fp32 master copy (false: pure 16-bit)")
    engine_named: bool | None = Field(
        None, description="The user named the engine (--engine): false lets a step move the "
        "plan to another engine")
    max_kv_fraction: float | None = None


def _fact(key: str) -> str:
    """Return a fact's field name, refusing one `Facts` lacks (a typo fails at import)."""
    if key not in FACT_FIELDS:
        raise KeyError(f"a condition reads {key!r}, which is not a field of Facts")
    return key


def _in(key: str) -> Callable[[Facts, Any], bool]:
    key = _fact(key)
    return lambda f, expected: getattr(f, key) in expected


def _not_in(key: str) -> Callable[[Facts, Any], bool]:
    key = _fact(key)
    return lambda f, expected: getattr(f, key) not in expected


def _equals(key: str) -> Callable[[Facts, Any], bool]:
    key = _fact(key)
    return lambda f, expected: getattr(f, key) == expected


def _at_least(key: str) -> Callable[[Facts, Any], bool]:
    key = _fact(key)
    return lambda f, expected: getattr(f, key) is not None and getattr(f, key) >= expected


def _at_most(key: str) -> Callable[[Facts, Any], bool]:
    key = _fact(key)
    return lambda f, expected: getattr(f, key) is not None and getattr(f, key) <= expected


def _has_all(key: str) -> Callable[[Facts, Any], bool]:
    key = _fact(key)
    return lambda f, expected: all(item in getattr(f, key) for item in expected)


def _has_any(key: str) -> Callable[[Facts, Any], bool]:
    key = _fact(key)
    return lambda f, expected: any(item in getattr(f, key) for item in expected)


def _has_none(key: str) -> Callable[[Facts, Any], bool]:
    key = _fact(key)
    return lambda f, expected: not any(item in getattr(f, key) for item in expected)


# name -> (check, default why-not template). The templates are the user-facing reasons.
CONDITIONS: dict[str, tuple[Callable[[Facts, Any], bool], str]] = {
    "phase": (_equals("phase"), "applies to {expected}; this workload is {phase}"),
    "device_class_in": (
        _in("device_class"), "needs a {expected} device; {device} is {device_class}"),
    "device_class_not_in": (
        _not_in("device_class"), "does not apply to {device_class} devices ({device})"),
    "vendor_in": (_in("vendor"), "needs a {expected} device; {device} is {vendor}"),
    "vendor_not_in": (_not_in("vendor"), "not available on {vendor} devices ({device})"),
    "unified_memory": (
        _equals("unified_memory"), "needs unified_memory={expected}; {device} has {memory_kind}"),
    "requires_formats": (
        _has_all("formats"), "{device} ({arch_text}) does not run {expected} natively "
        "(native formats: {formats_text})"),
    "requires_any_format": (
        _has_any("formats"), "{device} ({arch_text}) runs none of {expected} natively "
        "(native formats: {formats_text})"),
    "formats_absent": (
        _has_none("formats"), "{device} runs {formats_text} natively"),
    "compute_capability_in": (
        _in("cc"), "needs compute capability {expected}; {device} is {cc}"),
    "fast_interconnect": (
        _equals("fast_interconnect"),
        "needs a GPU-to-GPU link like NVLink; {device} has {link_text}"),
    "min_gpus": (_at_least("gpus"), "needs at least {expected} GPUs; the plan has {gpus} "
                 "(plan more with --gpus N)"),
    "max_gpus": (_at_most("gpus"), "for at most {expected} GPU(s); the plan has {gpus}"),
    "min_gpus_per_node": (
        _at_least("gpus_per_node"), "needs at least {expected} GPUs in one node; "
        "the plan has {gpus_per_node} per node across {nodes} node(s)"),
    "max_batch": (_at_most("batch"), "helps at batch <= {expected}; the batch is {batch}"),
    "min_batch": (_at_least("batch"), "needs batch >= {expected} (concurrent requests); "
                  "the batch is {batch}"),
    "min_prompt_len": (
        _at_least("prompt_len"), "pays off for prompts >= {expected} tokens; the prompt is "
        "{prompt_len}"),
    "optimizer_in": (_in("optimizer"), "applies to {expected}; the optimizer is {optimizer}"),
    "weights_dtype_in": (_in("weights_dtype"), "applies to {expected} weights; they are "
                         "{weights_dtype}"),
    "weights_dtype_not_in": (
        _not_in("weights_dtype"), "the weights are already {weights_dtype}"),
    "kv_dtype_not_in": (_not_in("kv_dtype"), "the KV cache is already {kv_dtype}"),
    "activation_dtype_in": (
        _in("activation_dtype"), "applies when computing in {expected}; the workload computes "
        "in {activation_dtype}"),
    "activation_dtype_not_in": (
        _not_in("activation_dtype"), "the workload already computes in {activation_dtype}"),
    "activation_checkpointing": (
        _equals("activation_checkpointing"),
        "activation checkpointing is {activation_checkpointing_text} already"),
    "model_features": (
        _has_all("features"), "{model} lacks {expected} (it has: {features_text})"),
    "model_features_absent": (
        _has_none("features"), "{model} already has {features_text}"),
    "bottleneck_in": (
        _in("bottleneck"), "targets a {expected} bottleneck; this one is {bottleneck} "
        "({bottleneck_why})"),
    "bottleneck_not_in": (
        _not_in("bottleneck"), "does not help a {bottleneck} bottleneck ({bottleneck_why})"),
    "fits": (_equals("fits"), "{fit_text}"),
    "memory_tight": (_equals("memory_tight"), "memory is not tight: {fit_text}"),
    "min_headroom_fraction": (
        _at_least("headroom_fraction"), "needs {expected:.0%} free memory; {fit_text}"),
    "min_kv_fraction": (
        _at_least("kv_fraction"), "the KV cache is only {kv_fraction:.1%} of the weights and KV "
        "({kv_gb} of {state_gb})"),
    "min_activation_fraction": (
        _at_least("activation_fraction"),
        "activations are only {activation_fraction:.1%} of memory ({activations_gb})"),
    "min_nodes": (_at_least("nodes"), "needs at least {expected} nodes; the plan has {nodes}"),
    "min_params_b": (
        _at_least("params_b"), "for models of {expected}B parameters and more; {model} has "
        "{params_b:.1f}B"),
    "engine_in": (_in("engine"), "applies to {expected}; the engine is {engine_name}"),
    "engine_not_in": (_not_in("engine"), "{engine_name} does not take this"),
    "knobs_off": (_has_none("knobs_on"), "already on in this plan ({expected})"),
    "chunked_prefill": (
        _equals("chunked_prefill"), "the plan prefills in chunks already"),
    "fp8_usable": (
        _equals("fp8_usable"), "FP8 weights need FP8 tensor cores and an engine that runs them: "
        "{device} ({arch_text}) with {engine_name}"),
    "fp4_usable": (
        _equals("fp4_usable"), "FP4 weights need FP4 tensor cores (Blackwell) and an engine that "
        "runs them: {device} ({arch_text}) with {engine_name}"),
    "finetune_in": (_in("finetune"), "applies to {expected} training; this is {finetune}"),
    "master_weights": (
        _equals("master_weights"), "the plan keeps no fp32 master copy already (pure bf16)"),
    "engine_named": (
        _equals("engine_named"), "the engine is {engine_name}, as asked (--engine): the plan "
        "keeps it"),
    "max_kv_fraction": (
        _at_most("kv_fraction"), "the KV cache is already {kv_fraction:.0%} of the state"),
}

# Reasons the engine itself can give, after predicting (not `when` keys, but overridable).
ENGINE_REASONS: dict[str, str] = {
    "min_gain": "predicted effect too small to act on: {prediction_text} (acts from a "
    "{expected:.0%} gain)",
    "no_metric": "the performance model gives no {metric_label} for this workload",
}
# What a why-not may quote beside the facts: the values the judge hands its templates.
REASON_FIELDS: dict[str, str] = {
    "expected": "the rule's value for the failing condition",
    "metric_label": "the metric's name (no_metric reason)",
    "gain_pct": "predicted gain in percent (min_gain reason)",
    "prediction_text": "the prediction in words (min_gain reason)",
}


def failed_conditions(when: When, facts: Facts) -> list[str]:
    """Names of the conditions of `when` that do not hold for these facts, in field order."""
    failed = []
    for name in When.model_fields:
        expected = getattr(when, name)
        if expected is None:
            continue
        check, _ = CONDITIONS[name]
        if not check(facts, expected):
            failed.append(name)
    return failed


def expected_text(value: Any) -> Any:
    """How a condition's expected value reads inside a why-not sentence."""
    if isinstance(value, list):
        return " or ".join(str(v) for v in value)
    return value
