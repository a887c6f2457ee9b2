"""Every flag and key hwadvisor emits exists in the engine it names, at the pinned version.

The tables (tests/fixtures/engine_flags/, built by scripts/engine_flags.py from each engine's
own code) say which flags each engine command takes, with types, choices and ranges. These
tests render every config step alone, the plans of the scenario gallery and hypothesis-drawn
workloads for every engine that can run them, and check each emitted flag against the tables.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from pathlib import Path
from typing import Any

import pytest
from engine_flag_check import (
    check_config,
    check_files,
    check_launch,
    check_notes,
    check_rendered,
    load_engines,
    render_config,
    table,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from script_loader import load_script

from hwadvisor import profiles
from hwadvisor.engines import PlanValues
from hwadvisor.errors import UserError

ROOT = Path(__file__).resolve().parents[2]
# Flags the engine data emits that the engine does not take at its pinned version: fixed in the
# engine data, then removed from here (strict xfail: a fix makes the test fail until it is).
KNOWN_BAD: dict[tuple[str, str], str] = {}
# Engines without a table, and why (their checks are skipped, said so, not passed silently).
NO_TABLE: dict[str, str] = {}
# Stand-in plan values for rendering one step alone (degrees of 1 keep layout keys quiet).
SAMPLE_VALUES = PlanValues(
    prequantized="Llama-3.2-1B-Instruct-SpinQuant_INT4_EO8",
    model="meta-llama/Llama-3.1-8B", tp=1, pp=1, dp=1, dp_shard=4,
    dp_replicate=2, ep=1, attn_dp=8, cp=2, gpus=8, nodes=1, gpus_per_node=8,
    batch=4, max_batch=4, step_tokens=4096, prompt_len=1024, gen_len=256,
    chunk=2048,
    kv_dtype="fp8",
    weights_dtype="bf16", spec_tokens=4, draft="org/draft-1b",
    spec_draft_tokens=5, gpu_layers=33, grad_accum=2,
    lora_rank=16, threads=8, offload_fraction=0.5, mtp_layers=1,
    mtp_draft_tokens=2, soc_model="SM8750",
    slot_context=1280, max_model_len=8192, kv_pool_tokens=5120, memory_fraction=0.95,
    fine_tune_type="lora", zero_stage=3, precision_fp16=True, precision_bf16=True,
    context=2048, global_batch=64, local_batch=4, checkpoint_every=2,
    recompute_layers=8,
    compute_units="gpu", torch_dtype="torch.bfloat16",
    model_name="Llama-3.1-8B", vendor="qualcomm", memory_bytes=4_000_000_000,
)
LAYOUT_VALUES = {"tp": 2, "pp": 2, "dp": 2, "ep": 2, "max_batch": 16, "context": 4096,
                 "gpu_layers": 33}


def _pin(engine_id: str) -> str:
    """Return the version a table was read at."""
    data = table(engine_id)
    assert data is not None
    return str(data["version"])


def _cases() -> list[tuple[str, str]]:
    """Return (engine, config key) for every step and layout key of every engine config.

    A key of an engine's training tool (mlx-lm's mlx_lm.lora) is named "training:<key>".
    """
    serving = [(e.id, key) for e in load_engines().values() for key in e.config.steps]
    training = [(e.id, f"training:{key}") for e in load_engines().values()
                if e.training_config is not None for key in e.training_config.steps]
    return serving + training


def _marked(engine_id: str, key: str) -> object:
    """Return the test case, xfail-marked when it emits a known-bad flag."""
    reason = KNOWN_BAD.get((engine_id, key))
    marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
    return pytest.param(engine_id, key, marks=marks, id=f"{engine_id}:{key}")


def _skip_without_table(engine_id: str) -> None:
    if engine_id in NO_TABLE:
        pytest.skip(NO_TABLE[engine_id])


@pytest.mark.parametrize(("engine_id", "key"), [_marked(e, k) for e, k in _cases()])
def test_each_step_alone_renders_flags_the_engine_takes(engine_id: str, key: str) -> None:
    _skip_without_table(engine_id)
    from hwadvisor.engines import STEP_FORMS

    engine = load_engines()[engine_id]
    phase, _, key = key.rpartition(":")
    step, forms = key, None
    if key in STEP_FORMS:
        step, form = STEP_FORMS[key]
        forms = {step: form}
    values = SAMPLE_VALUES
    if key in LAYOUT_VALUES:
        values = values.model_copy(update={key: LAYOUT_VALUES[key]})
    rendered = render_config(engine, [step], values, None, forms, phase or "inference")
    assert check_rendered(rendered) == []


def _class_cases() -> list[tuple[str, str, str]]:
    """Return (engine, device class, config key) of every step of a device class's config."""
    return [(e.id, cls, key) for e in load_engines().values()
            for cls, config in e.class_configs.items() for key in config.steps]


@pytest.mark.parametrize(("engine_id", "device_class", "key"), _class_cases())
def test_a_device_class_config_step_alone_renders_flags_and_keys_the_engine_takes(
        engine_id: str, device_class: str, key: str) -> None:
    engine = load_engines()[engine_id]
    values = SAMPLE_VALUES
    if key in LAYOUT_VALUES:
        values = values.model_copy(update={key: LAYOUT_VALUES[key]})
    rendered = render_config(engine, [key], values, device_class, None, "inference")
    assert rendered.text != render_config(engine, [key], values, None).text
    assert check_rendered(rendered) == [], rendered.text


def _older_cases() -> list[tuple[str, str, str]]:
    """Return (engine, release, config key) of every step an older release spells otherwise."""
    return [(e.id, past.flags_at or "", key) for e in load_engines().values()
            for past in e.history if past.config_steps for key in past.config_steps]


@pytest.mark.parametrize(("engine_id", "release", "key"), _older_cases())
def test_an_older_release_step_alone_renders_flags_that_release_takes(
        engine_id: str, release: str, key: str) -> None:
    from hwadvisor.engines import STEP_FORMS, get_engine

    assert release, f"{engine_id}: a history entry with config_steps names flags_at"
    data = table(engine_id, release)
    assert data is not None and data["version"] == release, \
        f"no table for {engine_id} {release}: python scripts/engine_flags.py --engine {engine_id}"
    engine = get_engine(engine_id, release)
    assert engine.version == release  # the config says which release's flags it uses
    step, forms = key, None
    if key in STEP_FORMS:
        step, form = STEP_FORMS[key]
        forms = {step: form}
    rendered = render_config(engine, [step], SAMPLE_VALUES, None, forms, "inference")
    assert check_config(engine_id, rendered.format, rendered.text, release) == [], rendered.text


def test_every_engine_but_the_listed_ones_has_a_table() -> None:
    missing = [e for e in load_engines() if table(e) is None and e not in NO_TABLE]
    assert missing == []


# Each table's version must be the version its engine entry names (a bump of one alone fails).
def test_table_versions_match_the_engine_entries() -> None:
    mismatched = []
    for engine in load_engines().values():
        if engine.id in NO_TABLE:
            continue
        pin = _pin(engine.id)
        said = f"{engine.version} {engine.defaults.version}"
        if pin not in re.split(r"[\s,()]+", said) and not any(
                part.startswith(pin) for part in re.split(r"[\s,()]+", said)):
            mismatched.append((engine.id, pin, engine.version))
    assert mismatched == []


def test_the_table_script_pins_what_the_tables_hold() -> None:
    module = load_script("scripts/engine_flags.py")
    for engine_id, pin in module.PINS.items():
        data = table(engine_id)
        if data is not None:
            assert data["version"] == pin.version, engine_id


# ---------------------------------------------------------------------------------------------
# The scenario gallery


@lru_cache(maxsize=1)
def _scenario_configs() -> tuple[tuple[Any, ...], ...]:
    """Return (scenario id, engine, format, text, notes, version, launch, files) of every
    gallery plan's engine config (version: the release its flags are said in)."""
    module = load_script("scripts/scenarios.py")
    out = []
    for scenario in module.SCENARIOS:
        config = module.run(scenario).plan.engine_config
        if config is not None:
            out.append((scenario.id, config.engine, config.format, config.text,
                        tuple(config.notes), config.version, config.launch,
                        tuple(config.files.items())))
    return tuple(out)


def _scenario_ids() -> list[str]:
    spec_path = ROOT / "tests" / "fixtures" / "scenarios.json"
    return sorted(json.loads(spec_path.read_text(encoding="utf-8")))


KNOWN_BAD_SCENARIOS: dict[str, str] = {}


@pytest.mark.parametrize("scenario_id", [
    pytest.param(s, marks=[pytest.mark.xfail(strict=True, reason=KNOWN_BAD_SCENARIOS[s])]
                 if s in KNOWN_BAD_SCENARIOS else []) for s in _scenario_ids()])
def test_gallery_plans_emit_flags_the_engine_takes(scenario_id: str) -> None:
    configs = [c for c in _scenario_configs() if c[0] == scenario_id]
    for _, engine_id, fmt, text, notes, version, launch, files in configs:
        if engine_id in NO_TABLE:
            continue
        assert check_config(engine_id, fmt, text, version) + \
            check_notes(engine_id, list(notes)) + check_launch(launch) + \
            check_launch(text) + check_files(engine_id, dict(files)) == [], text


def test_an_older_release_is_said_in_its_own_flags() -> None:
    # `--engine vllm==0.6.0`: 0.6.0's speculative flags, checked against 0.6.0's own parser;
    # today's --spec-method is not one of them, and no EAGLE-3 (0.6.0 has none)
    configs = [c for c in _scenario_configs() if c[0] == "serve-8b-vllm-0.6"]
    assert configs
    _, engine_id, fmt, text, _, version, _, _ = configs[0]
    assert version == "0.6.0"
    assert "--speculative-model" in text and "--use-v2-block-manager" in text
    assert "--spec-method" not in text and "eagle3" not in text.lower()
    assert check_config(engine_id, fmt, text, version) == []
    assert check_config(engine_id, fmt, "vllm serve m --spec-method ngram", version) != []


# ---------------------------------------------------------------------------------------------
# Drawn workloads, every engine that can run them

MODELS = ["llama-3.2-1b", "llama-3-8b", "qwen3-8b", "mixtral-8x7b", "llama-3-70b",
          "qwen3-30b-a3b", "deepseek-v3"]
GOALS = ["a", "b", "c"]


@st.composite
def _workloads(draw: st.DrawFn) -> tuple[str, str, dict[str, object]]:
    device = draw(st.sampled_from(sorted(profiles.ids())))
    goal = draw(st.sampled_from(GOALS))
    phase = "training" if goal == "a" else draw(st.sampled_from(["inference", "training"]))
    workload: dict[str, object] = {
        "model": draw(st.sampled_from(MODELS)), "phase": phase,
        "batch": draw(st.sampled_from([1, 4, 32, 256])),
        "prompt_len": draw(st.sampled_from([256, 2048, 8192, 32768])),
        "gpus": draw(st.sampled_from([1, 2, 8])),
    }
    # only engines that run this phase on this device class: the others are refused up front
    device_class = profiles.get(device).device_class.value
    fitting = sorted(e.id for e in load_engines().values()
                     if phase in e.phases and device_class in e.device_classes)
    workload["engine"] = draw(st.sampled_from(fitting))
    return goal, device, workload


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(_workloads())
def test_drawn_workloads_emit_flags_the_engine_takes(case: tuple[str, str, dict]) -> None:
    from hwadvisor.pipeline import recommend_report
    from hwadvisor.rules.playbooks.goals import parse_goal
    from hwadvisor.workload import WorkloadRequest

    goal, device, workload = case
    try:
        report = recommend_report(parse_goal(goal), device, WorkloadRequest(**workload))
    except UserError:
        return  # this engine cannot run this phase, device or format: refused, fine
    config = report.plan.engine_config
    if config is None or config.engine in NO_TABLE:
        return
    problems = check_config(config.engine, config.format, config.text, config.version) + \
        check_notes(config.engine, config.notes) + check_files(config.engine, config.files)
    bad = [p for p in problems if not _known(config.engine, p)]
    assert bad == [], config.text


def _known(engine_id: str, problem: str) -> bool:
    """Tell whether a problem is one KNOWN_BAD already lists (so drawn cases do not repeat it)."""
    return any(e == engine_id and key in problem for (e, key) in KNOWN_BAD)
