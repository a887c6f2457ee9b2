"""Every causal-LM architecture of the pinned transformers: an exact count or a named refusal.

tests/fixtures/hf_causal_lm_counts.json holds, for each type in transformers'
MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, the default config and the parameter count of the model
transformers builds from it on the meta device (scripts/hf_oracle_counts.py writes it). The
fast path (hand-written parsers, no transformers) is checked against every entry; the generic
reader (transformers on the meta device) against all of them in a slow test and a few live.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from hwadvisor.errors import ExitCode, UserError
from hwadvisor.workload import count_params
from hwadvisor.workload.configparse import ModelReader, parse_config

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = json.loads((ROOT / "tests/fixtures/hf_causal_lm_counts.json").read_text())
BUILT = {t: e for t, e in FIXTURE["models"].items() if "total" in e}
# The generic reader's share of exact counts must stay at or above the 95%.
MIN_EXACT_SHARE = 0.95


def _pinned_transformers() -> str:
    text = (ROOT / "pyproject.toml").read_text()
    found = re.search(r'"transformers==([0-9.]+)"', text)
    assert found, "transformers is pinned in the test extras"
    return found.group(1)


def _outcome(model_type: str, read_model: ModelReader | None = None) -> str:
    """'exact', 'refused: <message>' or 'WRONG ...' for one fixture entry."""
    entry = BUILT[model_type]
    try:
        spec = parse_config(dict(entry["config"]), model_type, read_model)
    except UserError as exc:
        assert exc.code == ExitCode.USAGE and exc.hint
        return f"refused: {exc.message}"
    total, active = count_params(spec)
    if (total, active) == (entry["total"], entry["active"]):
        return "exact"
    return f"WRONG {total}/{active} != {entry['total']}/{entry['active']}"


def test_fixture_is_from_the_pinned_transformers() -> None:
    assert FIXTURE["transformers"] == _pinned_transformers()
    assert len(BUILT) >= 150


def test_fast_path_is_exact_or_refuses_by_name() -> None:
    outcomes = {t: _outcome(t) for t in BUILT}
    wrong = {t: o for t, o in outcomes.items() if o.startswith("WRONG")}
    assert not wrong
    exact = sorted(t for t, o in outcomes.items() if o == "exact")
    # The families read from config.json alone (workload/configparse.py FAMILIES).
    assert {"llama", "mistral", "qwen3_moe", "granite", "olmo2", "cohere", "starcoder2",
            "phi", "gemma2", "deepseek_v3"} <= set(exact)
    for outcome in outcomes.values():
        if outcome != "exact":
            assert "hwadvisor[hf]" in outcome or "model_type" in outcome or "'" in outcome


def _with_transformers() -> None:
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("torch")
    if transformers.__version__ != FIXTURE["transformers"]:
        pytest.skip(f"fixture is for transformers {FIXTURE['transformers']}")


@pytest.fixture
def generic_reader() -> ModelReader:
    _with_transformers()
    from hwadvisor.trials.meta_model import describe_config

    return describe_config


@pytest.mark.slow
def test_generic_reader_covers_95_percent_of_causal_lms(generic_reader: ModelReader) -> None:
    outcomes = {t: _outcome(t, generic_reader) for t in BUILT}
    wrong = {t: o for t, o in outcomes.items() if not (o == "exact" or o.startswith("refused"))}
    assert not wrong
    exact = sum(1 for o in outcomes.values() if o == "exact")
    refused = {t: o for t, o in outcomes.items() if o != "exact"}
    print(f"{exact}/{len(outcomes)} exact; refused: {refused}", file=sys.stderr)
    assert exact / len(outcomes) >= MIN_EXACT_SHARE


# A few types checked live against transformers, so a stale fixture shows here too.
LIVE = ["gpt_oss", "jamba", "mamba", "qwen3_next", "llama4_text", "falcon", "gpt_neox", "mpt"]


@pytest.mark.parametrize("model_type", LIVE)
def test_generic_reader_live(model_type: str, generic_reader: ModelReader) -> None:
    from _hf_oracle import hf_counts

    cfg = dict(BUILT[model_type]["config"])
    small = dict(cfg, num_hidden_layers=min(cfg.get("num_hidden_layers") or 2, 8))
    if "layer_types" in small and isinstance(small["layer_types"], list):
        small["layer_types"] = small["layer_types"][: small["num_hidden_layers"]]
    spec = parse_config(small, model_type, generic_reader)
    assert count_params(spec) == hf_counts(small)


def test_state_space_and_hybrid_models_carry_constant_state(
        generic_reader: ModelReader) -> None:
    from hwadvisor.perfmodel.memory import kv_cache_bytes

    mamba = parse_config(dict(BUILT["mamba"]["config"]), "mamba", generic_reader)
    assert mamba.attention_layers == 0 and mamba.recurrent_layers == mamba.num_layers
    cfg = BUILT["mamba"]["config"]
    # MambaMixer: conv window d_inner x (kernel - 1) plus SSM state d_inner x d_state per layer.
    d_inner = cfg["intermediate_size"]
    per_layer = d_inner * (cfg["conv_kernel"] - 1) + d_inner * cfg["state_size"]
    assert mamba.recurrent_state_elements == per_layer * cfg["num_hidden_layers"]
    short, long = (kv_cache_bytes(mamba, "bf16", 1, n) for n in (1_000, 100_000))
    assert short == long > 0  # constant in the context
    jamba = parse_config(dict(BUILT["jamba"]["config"]), "jamba", generic_reader)
    assert 0 < (jamba.attention_layers or 0) < jamba.num_layers
    assert jamba.recurrent_layers == jamba.num_layers - (jamba.attention_layers or 0)
    grow = kv_cache_bytes(jamba, "bf16", 1, 2_000) - kv_cache_bytes(jamba, "bf16", 1, 1_000)
    per_token = 2 * jamba.num_kv_heads * jamba.head_dim * 2 * (jamba.attention_layers or 0)
    assert grow == pytest.approx(1_000 * per_token)  # only the attention layers grow


@pytest.mark.parametrize("model_type", ["vit", "t5", "bert-nonexistent"])
def test_non_causal_configs_are_refused_by_name(model_type: str,
                                                generic_reader: ModelReader) -> None:
    with pytest.raises(UserError) as info:
        parse_config({"model_type": model_type}, "config.json", generic_reader)
    assert info.value.code == ExitCode.USAGE
    assert model_type in info.value.message


def test_without_transformers_the_hint_names_the_extra() -> None:
    with pytest.raises(UserError) as info:
        parse_config(dict(BUILT["gpt_oss"]["config"]), "config.json")
    assert "hwadvisor[hf]" in (info.value.hint or "")
