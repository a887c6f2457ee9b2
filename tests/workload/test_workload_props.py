"""Property tests: any config.json or option values end in a valid spec/workload or a UserError."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hwadvisor.errors import ExitCode, UserError
from hwadvisor.models import ModelSpec, Workload
from hwadvisor.workload import Sizing, WorkloadRequest, build_workload, count_params, list_presets
from hwadvisor.workload.configparse import FAMILIES, parse_config, parse_json_text

SETTINGS = settings(max_examples=200, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])

INT_FIELDS = [
    "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
    "intermediate_size", "vocab_size", "head_dim", "num_local_experts", "num_experts",
    "n_routed_experts", "num_experts_per_tok", "n_shared_experts", "moe_intermediate_size",
    "shared_expert_intermediate_size", "first_k_dense_replace", "moe_layer_freq",
    "decoder_sparse_step", "q_lora_rank", "kv_lora_rank", "qk_rope_head_dim",
    "qk_nope_head_dim", "v_head_dim", "sliding_window", "max_window_layers",
    "max_position_embeddings",
]
BOOL_FIELDS = ["tie_word_embeddings", "attention_bias", "mlp_bias", "qkv_bias",
               "use_sliding_window"]

# Mostly plausible values, plus the hostile ones: negatives, zero, huge, wrong types.
any_json = st.recursive(
    st.none() | st.booleans() | st.floats(allow_nan=True) | st.text(max_size=5)
    | st.integers(),
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=5,
)
int_value = st.one_of(
    st.integers(min_value=1, max_value=64),
    st.integers(min_value=-10, max_value=0),
    st.integers(min_value=1 << 20, max_value=1 << 70),
    any_json,
)
model_type = st.one_of(st.sampled_from(sorted(FAMILIES)), st.text(max_size=12), any_json)


@st.composite
def configs(draw: st.DrawFn) -> dict:
    cfg: dict = {"model_type": draw(model_type)}
    for field in INT_FIELDS:
        # Usually present, sometimes missing.
        if draw(st.integers(0, 9)) < 8:
            cfg[field] = draw(int_value)
    for field in BOOL_FIELDS:
        if draw(st.booleans()):
            cfg[field] = draw(st.one_of(st.booleans(), any_json))
    if draw(st.booleans()):
        cfg["mlp_only_layers"] = draw(st.one_of(st.lists(st.integers(-2, 6), max_size=3), any_json))
    if draw(st.integers(0, 4)) == 0:
        cfg["layer_types"] = draw(st.one_of(
            st.lists(st.sampled_from(["sliding_attention", "full_attention"]), max_size=6),
            any_json))
    return cfg


@SETTINGS
@given(configs())
def test_any_config_gives_a_spec_or_a_user_error(cfg: dict) -> None:
    try:
        spec = parse_config(cfg, "config.json")
    except UserError as err:
        assert err.code == ExitCode.USAGE and err.message and err.hint
        return
    assert isinstance(spec, ModelSpec)
    total, active = count_params(spec)
    assert 0 < active <= total
    ModelSpec.model_validate_json(spec.model_dump_json())


@SETTINGS
@given(st.sampled_from(sorted(FAMILIES)), st.data())
def test_plausible_configs_of_each_family_parse(model_type: str, data: st.DataObject) -> None:
    """Positive, consistent values always give a spec (so the error path is not the only one)."""
    heads = data.draw(st.sampled_from([1, 2, 4, 8]))
    experts = data.draw(st.integers(1, 16))
    cfg = {
        "model_type": model_type,
        "hidden_size": heads * data.draw(st.integers(1, 32)),
        "num_hidden_layers": data.draw(st.integers(1, 8)),
        "num_attention_heads": heads,
        "num_key_value_heads": data.draw(
            st.sampled_from([h for h in (1, 2, 4, 8) if heads % h == 0])
        ),
        "intermediate_size": data.draw(st.integers(1, 256)),
        "vocab_size": data.draw(st.integers(1, 5000)),
        "num_local_experts": experts, "num_experts": experts, "n_routed_experts": experts,
        "num_experts_per_tok": data.draw(st.integers(1, experts)),
        "moe_intermediate_size": data.draw(st.integers(1, 64)),
        "shared_expert_intermediate_size": data.draw(st.integers(1, 64)),
        "kv_lora_rank": data.draw(st.integers(1, 64)),
        "q_lora_rank": data.draw(st.one_of(st.none(), st.integers(1, 64))),
        "qk_rope_head_dim": data.draw(st.integers(1, 16)),
        "qk_nope_head_dim": data.draw(st.integers(1, 16)),
        "v_head_dim": data.draw(st.integers(1, 16)),
        "first_k_dense_replace": data.draw(st.integers(0, 9)),
        "tie_word_embeddings": data.draw(st.booleans()),
    }
    spec = parse_config(cfg, "config.json")
    total, active = count_params(spec)
    assert 0 < active <= total
    if spec.num_experts and spec.experts_per_token < spec.num_experts and spec.moe_layers:
        assert active < total


@SETTINGS
@given(st.text(max_size=40) | st.binary(max_size=40).map(lambda b: b.decode("latin-1")))
def test_any_text_as_config_json(text: str) -> None:
    try:
        data = parse_json_text(text, "config.json")
        parse_config(data, "config.json")
    except UserError:
        pass


maybe_int = st.one_of(st.none(), st.integers(-5, 64), st.integers(1 << 20, 1 << 64))
maybe_str = st.one_of(st.none(), st.text(max_size=8),
                      st.sampled_from(["bf16", "fp8", "int4", "fp16", "adamw", "sgd",
                                       "inference", "training", "adamw-8bit"]))


@SETTINGS
@given(
    model=st.one_of(st.none(), st.sampled_from(list_presets()), st.text(max_size=10),
                    st.text(min_size=250, max_size=4000),
                    st.builds(lambda a, b: f"{a}/{b}", st.text(max_size=8), st.text(max_size=8))),
    phase=maybe_str, batch=maybe_int, prompt_len=maybe_int, gen_len=maybe_int,
    weights_dtype=maybe_str, kv_dtype=maybe_str, activation_dtype=maybe_str,
    optimizer=maybe_str, grad_accum=maybe_int, gpus=maybe_int, nodes=maybe_int,
    gpus_per_node=maybe_int,
    inter_node_gbps=st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True)),
    activation_checkpointing=st.booleans(),
    device_memory_bytes=st.one_of(st.none(), st.integers(0, 1 << 40)),
    device_class=st.one_of(st.none(), st.sampled_from(
        ["datacenter-gpu", "consumer-gpu", "apple-silicon", "mobile-soc", "cpu"])),
)
def test_any_options_give_a_workload_or_a_user_error(
        device_memory_bytes: int | None, device_class: str | None, **options: object) -> None:
    try:
        wl = build_workload(WorkloadRequest(**options),  # type: ignore[arg-type]
                            Sizing(device_memory_bytes, device_class))
    except UserError as err:
        assert err.code == ExitCode.USAGE and err.message.strip() and err.hint
        return
    assert isinstance(wl, Workload)
    assert wl.spec is not None and wl.params_total and wl.params_active
    assert wl.gpus == wl.nodes * (wl.gpus_per_node or wl.gpus // wl.nodes)
    json.loads(wl.model_dump_json())
