"""The serving and training engines, as data: what each does by default, and its own words.

hwadvisor/rules/engines.toml records, per engine (vLLM, SGLang, llama.cpp, torchtitan, ...):
where it runs, what it already does by default (so the advisor never recommends it again),
what it cannot do, and how a plan step is said in its own configuration language (command-line
flags, a torchtitan TOML fragment, a DeepSpeed JSON object, or Python keyword arguments).
Every default in the data file carries the source it was read from and the version checked.

This module is the schema (pydantic, unknown keys refused so a typo fails at load time), the
cached loader, and the renderer that turns a list of plan steps into text to paste.
"""

from __future__ import annotations

import difflib
import json
import re
import shlex
import sys
from collections.abc import Iterable, Mapping
from functools import lru_cache
from importlib import resources
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from hwadvisor.errors import UserError
from hwadvisor.models.hardware import DeviceClass
from hwadvisor.models.workload import Phase

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

DATA_FILE = "engines.toml"

# Plan step ids the advisor emits; every playbook rule id is one of them (tests check that).
STEP_IDS: tuple[str, ...] = (
    "flash-attention", "prefix-caching", "fp8-weights", "int8-weights", "fp4-weights",
    "int4-weights", "cuda-graphs", "speculative-decoding", "paged-kv-continuous-batching",
    "chunked-prefill", "pd-disaggregation", "kv-cache-quantization", "data-parallel-replicas",
    "expert-parallel", "smaller-model", "torch-compile", "bf16-mixed-precision",
    "fp16-mixed-precision", "fp8-training", "fsdp2-zero3", "hsdp", "tensor-parallel-in-node",
    "pipeline-parallel", "context-parallel", "fused-adamw", "activation-checkpointing", "lora",
    "qlora", "optimizer-8bit", "optimizer-offload", "cpu-offload", "mmap-weights",
    "sliding-window-or-mla",
)
# Forms of a step that depend on the model, keyed "<step>-<form>": a config that has the form
# says the step that way when the plan asks for it (render_config's forms), else the plain one.
# mtp: speculative decoding with the checkpoint's multi-token-prediction layers as the drafter.
STEP_FORMS: dict[str, tuple[str, str]] = {
    "speculative-decoding-mtp": ("speculative-decoding", "mtp"),
}
# Layout keys a config may also map, emitted when the plan's layout uses them (render_config):
# a degree key when its value is above one, a value key when its value is given.
LAYOUT_KEYS: tuple[str, ...] = (
    "base", "tp", "pp", "dp", "ep", "max_batch", "context", "gpu_layers",
)
_DEGREE_KEYS: frozenset[str] = frozenset({"tp", "pp", "dp", "ep"})
PLACEHOLDERS: frozenset[str] = frozenset({
    "model", "tp", "pp", "dp", "dp_shard", "dp_replicate", "ep", "cp", "gpus", "nodes",
    "gpus_per_node", "batch", "max_batch", "prompt_len", "gen_len", "context", "chunk",
    "kv_dtype", "weights_dtype", "spec_tokens", "gpu_layers", "grad_accum", "lora_rank",
    "threads", "offload_fraction", "mtp_layers", "mtp_draft_tokens",
})
WEIGHT_FORMATS: tuple[str, ...] = (
    "bf16", "fp16", "fp32", "fp8", "int8", "int4", "fp4", "q4_0", "q4_k_m", "q5_k_m", "q6_k",
    "q8_0", "iq4_xs", "mlx-4bit", "mlx-8bit", "nf4",
)
# KV-cache storage types: float types, integer widths (group-quantised), and GGML block types.
KV_FORMATS: tuple[str, ...] = (
    "fp32", "fp16", "bf16", "fp8", "fp4", "int8", "int6", "int4", "int2",
    "q8_0", "q5_0", "q5_1", "q4_0", "q4_1", "iq4_nl",
)
ACCELERATORS: tuple[str, ...] = ("gpu", "cpu", "metal", "npu")
VENDORS: tuple[str, ...] = ("nvidia", "amd", "apple", "qualcomm", "intel", "cpu")
DEVICE_CLASSES: tuple[str, ...] = tuple(c.value for c in DeviceClass)
PHASES: tuple[str, ...] = get_args(Phase)
# The engines, in the order of engines.toml; the loader refuses a file with other ids. Kept as
# a constant so that naming them (e.g. in --help) does not read and validate the data file.
ENGINE_IDS: tuple[str, ...] = (
    "hf", "vllm", "sglang", "trtllm", "llamacpp", "exllamav2", "mlx", "executorch", "mlc-llm",
    "litert", "torchtitan", "megatron", "deepspeed",
)

Kind = Literal["serving", "on-device", "training"]
Format = Literal["cli", "toml", "json", "python"]
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
_DOTTED = re.compile(r"^([A-Za-z0-9_\-]+(?:\.[A-Za-z0-9_\-]+)*)\s*=\s*(.+)$")
_PY_SETTING = re.compile(r"^[A-Za-z_][\w.\[\]\"']*\s*=\s*\S")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


def placeholders(text: str) -> set[str]:
    """Return the {name} placeholders a flag or setting template uses."""
    return set(_PLACEHOLDER.findall(text))


def _sample_values() -> dict[str, object]:
    """Return stand-in values for every placeholder, to check that templates render."""
    return {name: ("m" if name in {"model", "kv_dtype", "weights_dtype"} else 2)
            for name in PLACEHOLDERS}


def _unknown(values: Iterable[str], known: Iterable[str], what: str) -> None:
    """Raise ValueError naming the values that are not in the known vocabulary."""
    bad = sorted(set(values) - set(known))
    if bad:
        raise ValueError(f"unknown {what} {bad}; known: {sorted(known)}")


class Defaults(_Strict):
    """What the engine does when the user passes no flag (the state the advisor starts from)."""

    attention_kernel: Literal["math", "flash"]
    cuda_graphs: bool = Field(description="Decode steps replayed from CUDA/HIP graphs")
    compiled: bool = Field(description="torch.compile or an ahead-of-time compiled graph")
    paged_kv: bool
    prefix_caching: bool
    continuous_batching: bool
    chunked_prefill: bool
    prefill_chunk_tokens: int | None = Field(
        None, ge=1, description="Prompt tokens per prefill chunk by default; None: no fixed value"
    )
    fused_optimizer: bool = Field(False, description="Training: one fused AdamW kernel")
    sharding: Literal["none", "ddp", "fsdp", "tp"] = "none"
    max_concurrent_sequences: int | None = Field(None, ge=1)
    host_overhead_s_per_step: float | None = Field(
        None, ge=0, description="Published CPU time per decode step; None: no published figure"
    )
    notes: list[str] = Field(default_factory=list, description="How each value was established")
    sources: list[str] = Field(min_length=1, description="Where the defaults were read")
    version: str = Field(min_length=1, description="The engine version the defaults were read at")


class EngineConfig(_Strict):
    """How a plan is said in the engine's own configuration language."""

    format: Format
    command: str | None = Field(None, description="Base command (cli); a header comment (python)")
    steps: dict[str, list[str]] = Field(default_factory=dict)
    step_notes: dict[str, str] = Field(
        default_factory=dict, description="What a step needs besides its flags (a checkpoint ...)"
    )
    not_expressed: dict[str, str] = Field(
        default_factory=dict, description="Steps with no setting in this engine, and why"
    )
    merge_flags: dict[str, str] = Field(
        default_factory=dict, description="cli: flags whose values join into one, by separator"
    )

    @model_validator(mode="after")
    def _check(self) -> EngineConfig:
        _unknown(self.steps, STEP_IDS + LAYOUT_KEYS + tuple(STEP_FORMS), "config step")
        _unknown(self.step_notes, STEP_IDS + LAYOUT_KEYS + tuple(STEP_FORMS),
                 "config.step_notes step")
        _unknown(self.not_expressed, STEP_IDS, "config.not_expressed step")
        both = sorted(set(self.steps) & set(self.not_expressed))
        if both:
            raise ValueError(f"steps both mapped and not_expressed: {both}")
        if self.format == "cli" and not self.command:
            raise ValueError("a cli config needs a command")
        for text in [self.command or "", *self.step_notes.values(), *self.all_settings()]:
            _unknown(placeholders(text), PLACEHOLDERS, f"placeholder in {text!r}:")
        for setting in self.all_settings():
            _check_setting(self.format, setting)
        return self

    def all_settings(self) -> list[str]:
        """Return every flag or setting template of every step, in file order."""
        return [s for settings in self.steps.values() for s in settings]


def _check_setting(fmt: Format, setting: str) -> None:
    """Refuse a template that would not render to valid syntax for its format."""
    sample = fill(setting, _sample_values(), fmt)
    if fmt == "cli":
        if not setting.startswith("-"):
            raise ValueError(f"a cli setting must be a flag: {setting!r}")
        shlex.split(sample)
    elif fmt in ("toml", "json"):
        match = _DOTTED.match(sample)
        if not match:
            raise ValueError(f"a {fmt} setting must be 'dotted.key = value': {setting!r}")
        _parse_value(fmt, match.group(2))
    elif not _PY_SETTING.match(setting):
        raise ValueError(f"a python setting must be 'name=value': {setting!r}")


class Engine(_Strict):
    """One engine: where it runs, what it does by default, and how to configure it."""

    id: str
    name: str
    kind: Kind
    phases: list[Phase] = Field(min_length=1)
    device_classes: list[str] = Field(min_length=1)
    vendors: list[str] = Field(min_length=1)
    weight_formats: list[str] = Field(min_length=1)
    kv_cache_formats: list[str] = Field(default_factory=list)
    accelerators: list[str] = Field(min_length=1)
    delegates: list[str] = Field(
        default_factory=list, description="Backend delegates (ExecuTorch QNN/Core ML, LiteRT NPU)"
    )
    defaults: Defaults
    applies: list[str] = Field(default_factory=list, description="Steps done by default")
    unsupported: list[str] = Field(default_factory=list, description="Steps it cannot do")
    unsupported_on: dict[str, list[str]] = Field(
        default_factory=dict, description="Steps it cannot do on one device class only"
    )
    reasons: dict[str, str] = Field(
        default_factory=dict, description="Why a step is unsupported (everywhere or on a class)"
    )
    notes: list[str] = Field(default_factory=list)
    config: EngineConfig
    sources: list[str] = Field(min_length=1, description="The docs/source of the flags")
    version: str = Field(min_length=1, description="The version the entry was checked against")

    @model_validator(mode="after")
    def _check(self) -> Engine:
        _unknown(self.device_classes, DEVICE_CLASSES, "device class")
        _unknown(self.vendors, VENDORS, "vendor")
        _unknown(self.weight_formats, WEIGHT_FORMATS, "weight format")
        _unknown(self.kv_cache_formats, KV_FORMATS, "KV-cache format")
        _unknown(self.accelerators, ACCELERATORS, "accelerator")
        _unknown(self.applies, STEP_IDS, "applies step")
        _unknown(self.unsupported, STEP_IDS, "unsupported step")
        _unknown(self.unsupported_on, self.device_classes, "unsupported_on device class")
        for steps in self.unsupported_on.values():
            _unknown(steps, STEP_IDS, "unsupported_on step")
        both = sorted(set(self.applies) & set(self.unsupported))
        if both:
            raise ValueError(f"{self.id}: steps both applied and unsupported: {both}")
        unsupported = set(self.unsupported).union(*self.unsupported_on.values())
        _unknown(self.reasons, unsupported, "reasons step (not unsupported)")
        return self

    def does_by_default(self, step: str, device_class: str | None = None) -> bool:
        """Whether the engine already applies this step with no flag (on this device class)."""
        return step in self.applies and not self.cannot(step, device_class)

    def cannot(self, step: str, device_class: str | None = None) -> bool:
        """Whether the step cannot be done with this engine (on this device class, if given)."""
        return step in self.unsupported or step in self.unsupported_on.get(device_class or "", [])


class EngineFile(_Strict):
    """The whole of engines.toml: the default engine per (device class, phase), and engines."""

    defaults: dict[str, dict[str, str]]
    engines: dict[str, Engine]

    @model_validator(mode="before")
    @classmethod
    def _ids(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("engines"), dict):
            data = dict(data)
            data["engines"] = {key: {"id": key, **value} if isinstance(value, dict) else value
                               for key, value in data["engines"].items()}
        return data

    @model_validator(mode="after")
    def _check(self) -> EngineFile:
        for key, engine in self.engines.items():
            if engine.id != key:
                raise ValueError(f"engine table [engines.{key}] has id {engine.id!r}")
        if tuple(self.engines) != ENGINE_IDS:
            raise ValueError(f"engines {list(self.engines)} differ from ENGINE_IDS {ENGINE_IDS}")
        _unknown(self.defaults, DEVICE_CLASSES, "[defaults] device class")
        for device_class in DEVICE_CLASSES:
            by_phase = self.defaults.get(device_class, {})
            _unknown(by_phase, PHASES, f"[defaults.{device_class}] phase")
            for phase in PHASES:
                self._check_default(device_class, phase, by_phase.get(phase))
        return self

    def _check_default(self, device_class: str, phase: str, engine_id: str | None) -> None:
        """Check that a default engine exists, runs that phase and runs on that device class."""
        where = f"[defaults.{device_class}] {phase}"
        if engine_id is None:
            raise ValueError(f"{where}: no default engine")
        engine = self.engines.get(engine_id)
        if engine is None:
            raise ValueError(f"{where}: unknown engine {engine_id!r}")
        if phase not in engine.phases or device_class not in engine.device_classes:
            raise ValueError(f"{where}: {engine_id} does not run {phase} on {device_class}")


def load_text(text: str, source: str = "<text>") -> EngineFile:
    """Parse and validate engines.toml text; ValueError names the source and the problem."""
    try:
        return EngineFile.model_validate(tomllib.loads(text))
    except (tomllib.TOMLDecodeError, ValidationError) as exc:
        raise ValueError(f"{source}: {exc}") from exc


@lru_cache(maxsize=1)
def _load_file() -> EngineFile:
    """Read and validate the shipped engines.toml once."""
    text = resources.files("hwadvisor.rules").joinpath(DATA_FILE).read_text(encoding="utf-8")
    return load_text(text, DATA_FILE)


def load_engines() -> dict[str, Engine]:
    """Return every engine of the shipped engines.toml by id, validated (cached)."""
    return dict(_load_file().engines)




def get_engine(engine_id: str) -> Engine:
    """Return one engine; an unknown id is a UserError (exit 2) whose hint lists the valid ids."""
    engines = load_engines()
    if engine_id in engines:
        return engines[engine_id]
    close = difflib.get_close_matches(engine_id, list(engines), n=3, cutoff=0.5)
    hint = f"did you mean {', '.join(close)}? " if close else ""
    raise UserError(f"unknown engine {engine_id!r}", hint=f"{hint}valid: {', '.join(engines)}")


def default_engine(device_class: str, phase: str) -> str:
    """Return the engine assumed on a device class for a phase when the user names none."""
    table = _load_file().defaults
    if device_class not in table:
        raise UserError(f"unknown device class {device_class!r}",
                        hint=f"valid: {', '.join(DEVICE_CLASSES)}")
    if phase not in table[device_class]:
        raise UserError(f"unknown phase {phase!r}", hint=f"valid: {', '.join(PHASES)}")
    return table[device_class][phase]


# The engines a weights format implies when the user names none: GGUF files are llama.cpp's,
# MLX's quantised weights are mlx-lm's.
FORMAT_ENGINE: dict[str, str] = {
    **{f: "llamacpp" for f in ("q4_0", "q4_k_m", "q5_k_m", "q6_k", "q8_0", "iq4_xs")},
    "mlx-4bit": "mlx", "mlx-8bit": "mlx",
}


def pick_engine(given: str | None, weights_dtype: str | None, device_class: str,
                phase: str, formats: Iterable[str] | None = None) -> tuple[str, str]:
    """Return (engine id, why): --engine, else what the format implies, else the default.

    A named engine that cannot run the phase, the device class or the weights format is a
    UserError (exit 2) naming what does.
    """
    if given is None:
        implied = FORMAT_ENGINE.get(weights_dtype or "")
        if implied is not None:
            return implied, f"{weights_dtype} weights are {get_engine(implied).name}'s format"
        chosen = default_engine(device_class, phase)
        if chosen == "torchtitan" and formats is not None and "bf16" not in formats:
            # torchtitan trains in bf16 (FSDP2 mixed precision); a T4 or V100 has no bf16.
            return "hf", (f"default for {phase} on a {device_class} without bf16: plain "
                          "PyTorch / transformers (pass --engine to plan for yours)")
        return chosen, (f"default for {phase} on a {device_class} (pass --engine to plan "
                        "for yours)")
    engine = get_engine(given)
    problem = _cannot_run(engine, weights_dtype, device_class, phase)
    if problem:
        fits = [e.id for e in load_engines().values()
                if not _cannot_run(e, weights_dtype, device_class, phase)]
        raise UserError(f"--engine {given}: {problem}",
                        hint="engines that can: " + (", ".join(fits) or "none"))
    return given, "--engine"


def _cannot_run(engine: Engine, weights_dtype: str | None, device_class: str,
                phase: str) -> str | None:
    if phase not in engine.phases:
        return f"{engine.name} does not do {phase}"
    if device_class not in engine.device_classes:
        return f"{engine.name} does not run on a {device_class}"
    if weights_dtype and weights_dtype not in engine.weight_formats:
        return f"{engine.name} cannot run {weights_dtype} weights"
    return None


# ---------------------------------------------------------------------------------------------
# Rendering a plan in the engine's own words


class RenderedLine(_Strict):
    """One flag or setting of the rendered config, and the plan step that asked for it."""

    setting: str
    step: str


class NotExpressed(_Strict):
    """A plan step the rendered config does not carry, and why."""

    step: str
    reason: str


class RenderedConfig(_Strict):
    """A plan rendered for one engine: the text to paste, and where each line came from."""

    engine: str
    format: Format
    text: str
    lines: list[RenderedLine]
    not_expressed: list[NotExpressed] = Field(default_factory=list)
    defaulted: list[str] = Field(default_factory=list, description="Steps it does already")
    notes: list[str] = Field(default_factory=list, description="What the steps need besides")


def fill(template: str, values: Mapping[str, object], fmt: Format = "python") -> str:
    """Replace {name} placeholders with plan values (shell-quoted for cli); KeyError if missing."""
    def one(match: re.Match[str]) -> str:
        value = values[match.group(1)]
        text = _value_text(value)
        return shlex.quote(text) if fmt == "cli" else text

    return _PLACEHOLDER.sub(one, template)


def _value_text(value: object) -> str:
    """Write a plan value as flags take it: booleans lowercase, whole floats as integers."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _wanted_keys(steps: list[str], values: Mapping[str, object]) -> list[str]:
    """Return the keys to emit, in order: base, the layout keys in use, the plan's steps."""
    keys = ["base"]
    for key in LAYOUT_KEYS[1:]:
        if key in steps or _layout_in_use(key, values):
            keys.append(key)
    keys.extend(s for s in steps if s not in LAYOUT_KEYS)
    return list(dict.fromkeys(keys))


def _layout_in_use(key: str, values: Mapping[str, object]) -> bool:
    """Tell whether a layout key is in use: its degree is above one, or its value given."""
    value = values.get(key)
    if key in _DEGREE_KEYS:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 1
    return value is not None


def _check_steps(steps: list[str]) -> None:
    """Refuse step ids that are neither plan steps nor layout keys, with close matches."""
    known = STEP_IDS + LAYOUT_KEYS
    for step in steps:
        if step not in known:
            close = difflib.get_close_matches(step, known, n=3)
            hint = f"did you mean {', '.join(close)}?" if close else None
            raise UserError(f"unknown plan step {step!r}", hint=hint)


def _skip_reason(engine: Engine, step: str, device_class: str | None) -> str | None:
    """Return why a step is not rendered, or None when the engine's config maps it."""
    config = engine.config
    if engine.cannot(step, device_class):
        note = engine.reasons.get(step) or config.not_expressed.get(step, "")
        where = f" on {device_class}" if step not in engine.unsupported else ""
        return f"{engine.name} cannot do this{where}" + (f": {note}" if note else "")
    if step in config.not_expressed:
        return config.not_expressed[step]
    if step not in config.steps and step not in LAYOUT_KEYS:
        return f"no {engine.name} setting maps to this step"
    return None


def render_config(
    engine: Engine,
    steps: list[str],
    values: dict[str, object],
    device_class: str | None = None,
    forms: Mapping[str, str] | None = None,
) -> RenderedConfig:
    """Render plan steps as the engine's own config: a command line, TOML, JSON or Python.

    `base` is always emitted; the layout keys (tp, pp, dp, ep, max_batch, context, gpu_layers)
    when named in `steps`, or when the plan's values use them (a degree above one, a value
    given). Steps the engine does by default go to `defaulted`; steps it cannot express go to
    `not_expressed` with the reason. `values` fills the {placeholders}; a missing one is a
    UserError naming it. `forms` asks for a step's model-dependent form (STEP_FORMS), e.g.
    {"speculative-decoding": "mtp"}; an engine without that form says the plain one, with a note.
    """
    _check_steps(steps)
    traced: list[RenderedLine] = []
    skipped: list[NotExpressed] = []
    defaulted: list[str] = []
    notes: list[str] = []
    for key in _wanted_keys(steps, values):
        if engine.does_by_default(key, device_class):
            defaulted.append(key)
            continue
        reason = _skip_reason(engine, key, device_class)
        if reason is not None:
            skipped.append(NotExpressed(step=key, reason=reason))
            continue
        source = _form_key(engine, key, (forms or {}).get(key), notes)
        traced.extend(_render_step(engine, key, values, source))
        if source in engine.config.step_notes:
            notes.append(f"{key}: {_fill_or_raise(engine.config.step_notes[source], values, key)}")
    traced = _dedupe(traced)
    if engine.config.format != "cli":
        traced = _last_setting_wins(traced, notes)
    text = _TEXT[engine.config.format](engine, traced, values)
    return RenderedConfig(engine=engine.id, format=engine.config.format, text=text, lines=traced,
                          not_expressed=skipped, defaulted=defaulted, notes=notes)


def _form_key(engine: Engine, step: str, form: str | None, notes: list[str]) -> str:
    """Return the config key that says this step: its asked-for form where the engine has it."""
    if form is None:
        return step
    key = f"{step}-{form}"
    if STEP_FORMS.get(key) != (step, form):
        raise UserError(f"step {step!r} has no form {form!r}",
                        hint=f"forms: {', '.join(sorted(STEP_FORMS))}")
    if key in engine.config.steps:
        return key
    notes.append(f"{step}: {engine.name} has no {form} form of this step in its config; "
                 "the general one is shown")
    return step


def _render_step(engine: Engine, step: str, values: Mapping[str, object],
                 source: str | None = None) -> list[RenderedLine]:
    """Return the filled settings of one step (read from source, a form of it), traced to it."""
    fmt = engine.config.format
    return [RenderedLine(setting=_fill_or_raise(s, values, step, fmt), step=step)
            for s in engine.config.steps.get(source or step, [])]


def _fill_or_raise(template: str, values: Mapping[str, object], step: str,
                   fmt: Format = "python") -> str:
    """Fill a template, turning a missing plan value into a UserError that names it."""
    missing = sorted(placeholders(template) - set(values))
    if missing:
        raise UserError(f"step {step!r} needs plan values {missing}",
                        hint=f"pass them in values: {template!r}")
    return fill(template, values, fmt)


def _dedupe(lines: list[RenderedLine]) -> list[RenderedLine]:
    """Drop repeated settings (the first step that asked keeps the trace)."""
    seen: set[str] = set()
    kept: list[RenderedLine] = []
    for line in lines:
        if line.setting not in seen:
            seen.add(line.setting)
            kept.append(line)
    return kept


def _setting_key(setting: str) -> str:
    """Return the key a toml/json/python setting assigns (the text before its '=')."""
    return setting.partition("=")[0].strip()


def _last_setting_wins(lines: list[RenderedLine], notes: list[str]) -> list[RenderedLine]:
    """Keep one setting per key: a later step's value replaces an earlier one, with a note."""
    last: dict[str, RenderedLine] = {}
    for line in lines:
        key = _setting_key(line.setting)
        earlier = last.get(key)
        if earlier is not None:
            notes.append(f"{line.step}: {line.setting!r} replaces {earlier.setting!r} "
                         f"(from {earlier.step})")
        last[key] = line
    kept = set(map(id, last.values()))
    return [line for line in lines if id(line) in kept]


def _cli_text(engine: Engine, lines: list[RenderedLine], values: Mapping[str, object]) -> str:
    """Return a full command line: the base command, then one flag per continued line."""
    command = _fill_or_raise(engine.config.command or "", values, "base", "cli")
    flags = _merge_flags([line.setting for line in lines], engine.config.merge_flags)
    return " \\\n  ".join([command, *flags])


def _merge_flags(flags: list[str], merge: Mapping[str, str]) -> list[str]:
    """Join the values of flags that take one combined value (MLC's --overrides a=1;b=2)."""
    merged: dict[str, list[str]] = {}
    out: list[str] = []
    for flag in flags:
        name, _, value = flag.partition(" ")
        if name in merge and value:
            if name not in merged:
                merged[name] = []
                out.append(name)
            merged[name].extend(shlex.split(value))
        else:
            out.append(flag)
    return [f"{f} {shlex.quote(merge[f].join(merged[f]))}" if f in merged else f for f in out]


def _parse_value(fmt: Format, literal: str) -> Any:
    """Parse one TOML or JSON value literal; ValueError if it is not one."""
    try:
        if fmt == "json":
            return json.loads(literal)
        return tomllib.loads(f"v = {literal}")["v"]
    except (json.JSONDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"not a {fmt} value: {literal!r} ({exc})") from exc


def _nested(fmt: Format, lines: list[RenderedLine]) -> dict[str, Any]:
    """Build a nested mapping from 'dotted.key = value' settings; a later step wins a key."""
    root: dict[str, Any] = {}
    for line in lines:
        match = _DOTTED.match(line.setting)
        if match is None:  # pragma: no cover - refused at load time
            raise ValueError(f"not a dotted setting: {line.setting!r}")
        *parents, leaf = match.group(1).split(".")
        node = root
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = _parse_value(fmt, match.group(2))
    return root


def _json_text(engine: Engine, lines: list[RenderedLine], values: Mapping[str, object]) -> str:
    """Return a pretty JSON object built from the dotted keys (DeepSpeed's config)."""
    return json.dumps(_nested("json", lines), indent=2) + "\n"


def _toml_text(engine: Engine, lines: list[RenderedLine], values: Mapping[str, object]) -> str:
    """Return a TOML fragment with one [section] per dotted prefix, in first-seen order."""
    sections: dict[str, list[str]] = {"": []}  # top-level keys must precede every [section]
    for line in lines:
        match = _DOTTED.match(line.setting)
        if match is None:  # pragma: no cover - refused at load time
            raise ValueError(f"not a dotted setting: {line.setting!r}")
        section, _, key = match.group(1).rpartition(".")
        sections.setdefault(section, []).append(f"{key} = {match.group(2).strip()}")
    parts = []
    for section, entries in sections.items():
        if entries:
            header = [f"[{section}]"] if section else []
            parts.append("\n".join(header + entries))
    text = "\n\n".join(parts) + "\n"
    tomllib.loads(text)  # what we print must parse; a failure here is a bug in the data
    return text


def _python_text(engine: Engine, lines: list[RenderedLine], values: Mapping[str, object]) -> str:
    """Return 'name=value' lines, under a comment naming where they go."""
    header = [f"# {_fill_or_raise(engine.config.command, values, 'base')}"] \
        if engine.config.command else []
    return "\n".join(header + [line.setting for line in lines]) + "\n"


_TEXT = {"cli": _cli_text, "toml": _toml_text, "json": _json_text, "python": _python_text}
