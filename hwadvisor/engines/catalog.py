"""The engines hwadvisor knows: loading their data files, choosing one, and the user's changes.

`get_engine("vllm")` returns the engine as pinned in `data/vllm.toml`;
`get_engine("vllm", "0.6.0", {"cuda_graphs": "false"})` the same engine as that release ran it
by default (its `[[history]]`), with the user's `--engine-option` changes on top. The
workload carries the version and the options, so `engine_for(workload)` is what the
performance model, the rules and the renderer ask for.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping
from functools import cache, lru_cache
from importlib import resources
from typing import Any

from pydantic import ValidationError

from hwadvisor.engines.schema import (
    DEVICE_CLASSES,
    ENGINE_IDS,
    KERNEL_KINDS,
    KERNELS,
    PHASES,
    STEP_IDS,
    Choice,
    Defaults,
    Engine,
    tomllib,  # the one Python 3.10 shim
    value_text,
)
from hwadvisor.errors import UserError
from hwadvisor.models.workload import Workload

CHOICE_FILE = "default_engines.toml"

# A default that is also a plan step: switching the default off (an older release, or
# --engine-option) makes the step something the advisor may recommend again, and on, one it
# never recommends.
DEFAULT_STEPS: dict[str, str] = {
    "cuda_graphs": "cuda-graphs",
    "chunked_prefill": "chunked-prefill",
    "prefix_caching": "prefix-caching",
    "paged_kv": "paged-kv-continuous-batching",
    "compiled": "torch-compile",
    "fused_optimizer": "fused-adamw",
}


def load_text(text: str, engine_id: str, source: str = "<text>") -> Engine:
    """Parse and validate one engine's data file; ValueError names the source and the problem."""
    try:
        return Engine.model_validate({"id": engine_id, **tomllib.loads(text)})
    except (tomllib.TOMLDecodeError, ValidationError) as exc:
        raise ValueError(f"{source}: {exc}") from exc


def _read(name: str) -> str:
    return resources.files("hwadvisor.engines").joinpath(name).read_text(encoding="utf-8")


@cache
def _pinned(engine_id: str) -> Engine:
    """Read and validate data/<id>.toml once."""
    return load_text(_read(f"data/{engine_id}.toml"), engine_id, f"data/{engine_id}.toml")


@lru_cache(maxsize=1)
def _choice() -> Choice:
    """Read and check default_engines.toml once (every engine it names is loaded)."""
    choice = Choice.model_validate({"by_class": tomllib.loads(_read(CHOICE_FILE))})
    choice.check({engine_id: _pinned(engine_id) for engine_id in ENGINE_IDS
                  if engine_id in _named(choice)})
    return choice


def _named(choice: Choice) -> set[str]:
    return {e for by_phase in choice.by_class.values() for e in by_phase.values()}


def data_files() -> list[str]:
    """Return the engine ids that have a data file (the loader test holds them to ENGINE_IDS)."""
    folder = resources.files("hwadvisor.engines").joinpath("data")
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".toml"))


def load_engines() -> dict[str, Engine]:
    """Return every engine as pinned, by id, in ENGINE_IDS order (validated, cached)."""
    return {engine_id: _pinned(engine_id) for engine_id in ENGINE_IDS}


def _unknown_engine(engine_id: str) -> UserError:
    close = difflib.get_close_matches(engine_id, list(ENGINE_IDS), n=3, cutoff=0.5)
    hint = f"did you mean {', '.join(close)}? " if close else ""
    return UserError(f"unknown engine {engine_id!r}", hint=f"{hint}valid: {', '.join(ENGINE_IDS)}")


def get_engine(engine_id: str, version: str | None = None,
               options: Mapping[str, str] | None = None) -> Engine:
    """Return one engine: as pinned, or as `version` ran it, with `options` applied.

    An unknown id, a version that cannot be read or an unknown option is a UserError (exit 2)
    whose hint lists what is valid.
    """
    key = engine_id.lower()
    if key not in ENGINE_IDS:
        raise _unknown_engine(engine_id)
    return _variant(key, version, tuple(sorted((options or {}).items())))


def engine_for(workload: Workload) -> Engine:
    """Return the engine the workload runs on, at its version and with its options."""
    return get_engine(workload.engine, workload.engine_version, workload.engine_options)


@lru_cache(maxsize=256)
def _variant(engine_id: str, version: str | None,
             options: tuple[tuple[str, str], ...]) -> Engine:
    engine = _pinned(engine_id)
    if version is not None:
        engine = _at_version(engine, version)
    for key, value in options:
        engine = _with_option(engine, key, value)
    return engine


# --- versions -----------------------------------------------------------------------------

_VERSION = re.compile(r"^[vb]?(\d+(?:\.\d+)*)(?:[.+-]?[A-Za-z0-9.]*)?$")
_COMMIT = re.compile(r"^[0-9a-f]{7,40}$")


def release_tuple(text: str) -> tuple[int, ...] | None:
    """Return (0, 6, 0) for '0.6.0' or 'v0.6.0rc1', (2843,) for llama.cpp's 'b2843'.

    None when it is no numbered release (a git commit such as '0c1e57098' has no order).
    """
    text = text.strip()
    if _COMMIT.match(text) and not text.isdigit():
        return None
    match = _VERSION.match(text)
    return tuple(int(part) for part in match.group(1).split(".")) if match else None


def split_engine_spec(spec: str) -> tuple[str, str | None]:
    """Split '--engine vllm==0.6.0' into ('vllm', '0.6.0'); a plain id has no version."""
    name, sep, version = spec.partition("==")
    if sep and not version.strip():
        raise UserError(f"--engine {spec}: no version after '=='", hint="e.g. --engine vllm==0.6.0")
    return name.strip().lower(), (version.strip() or None) if sep else None


def _at_version(engine: Engine, version: str) -> Engine:
    """Return the engine with the defaults `version` had (its [[history]] entries before it)."""
    wanted = release_tuple(version)
    if version == engine.release:
        return engine
    if wanted is None:
        raise UserError(f"--engine {engine.id}=={version}: not a release number",
                        hint=f"e.g. --engine {engine.id}=={engine.release}")
    pinned = release_tuple(engine.release)
    if pinned is not None and wanted > pinned:
        raise UserError(f"--engine {engine.id}=={version}: newer than the {engine.release} "
                        "hwadvisor knows", hint=f"plan with {engine.id}=={engine.release}, or "
                        "pass --engine-option for defaults that changed since")
    changes: dict[str, Any] = {}
    rates = dict(engine.kernels.rates)
    by_family = {family: dict(figures) for family, figures in engine.costs.by_family.items()}
    costs: dict[str, float | int | None] = {}
    steps: dict[str, list[str]] = {}
    lacks: set[str] = set()
    flags_at: str | None = None
    for past in engine.history:  # newest first: the oldest matching entry is applied last
        before = release_tuple(past.before)
        if before is not None and wanted < before:
            changes.update(past.defaults)
            rates.update(past.kernel_rates)
            costs.update(past.costs)
            _merge_costs(by_family, past.costs_by_family)
            steps.update(past.config_steps)
            lacks.update(past.lacks)
            flags_at = past.flags_at or flags_at
    differ = ", ".join(f"{k}={value_text(v)}" for k, v in sorted(changes.items()))
    older = sorted(k for k, v in rates.items() if engine.kernels.rates.get(k) != v)
    if older:
        differ = ", ".join(filter(None, [differ, "kernel rates of that release: " +
                                         ", ".join(older)]))
    if by_family != engine.costs.by_family or costs:
        differ = ", ".join(filter(None, [differ, "kernel counts or host costs of that release"]))
    note = (f"planned from the defaults of {engine.name} {version} ({differ})" if differ else
            f"{engine.name} {version}: no recorded default differs from {engine.release}'s")
    if lacks:
        note += f"; {version} lacks {', '.join(sorted(lacks))}, so the plan leaves them out"
    checked = flags_at or engine.release
    note += (f"; the flags are {checked}'s, checked against its parser" +
             ("" if checked == version else ": a release between may spell some differently"))
    changed = _with_defaults(engine, changes)
    changed = changed.model_copy(update={
        "kernels": changed.kernels.model_copy(update={"rates": rates}),
        "costs": changed.costs.model_copy(update={**costs, "by_family": by_family})})
    changed = _with_config(changed, steps, lacks)
    # `version` is the one whose flags were checked; `release` is what the plan started from
    return changed.model_copy(update={"release": version, "version": flags_at or engine.version,
                                      "variant_notes": [*changed.variant_notes, note]})


def _with_config(engine: Engine, steps: Mapping[str, list[str]], lacks: set[str]) -> Engine:
    """Return the engine with an older release's config: its spelling, without what it lacks.

    A step it lacks is unsupported (the search never plans it); a form or a layout key it
    lacks leaves the config, so no drafter or layout the release cannot run is chosen.
    """
    if not steps and not lacks:
        return engine
    config = {k: v for k, v in {**engine.config.steps, **steps}.items() if k not in lacks}
    unsupported = [*engine.unsupported, *sorted(s for s in lacks if s in STEP_IDS and
                                                s not in engine.unsupported)]
    reasons = {**engine.reasons, **{s: f"{engine.name} {engine.release} does not have it"
                                    for s in lacks if s in STEP_IDS}}
    applies = [s for s in engine.applies if s not in lacks]
    return engine.model_copy(update={
        "config": engine.config.model_copy(update={"steps": config}),
        "unsupported": unsupported, "reasons": reasons, "applies": applies})


def _merge_costs(by_family: dict[str, dict[str, float]],
                 older: dict[str, dict[str, float | None]]) -> None:
    """Apply an older release's per-family cost figures (None drops the pinned release's)."""
    for family, figures in older.items():
        row = by_family.setdefault(family, {})
        for key, value in figures.items():
            if value is None:
                row.pop(key, None)
            else:
                row[key] = value


# --- --engine-option ----------------------------------------------------------------------


def option_keys() -> list[str]:
    """Return every key --engine-option takes: the defaults' fields and kernel.<kind>."""
    fields = [f for f in Defaults.model_fields
              if f not in ("notes", "sources", "version", "prefill_chunk_by_memory",
                           "graphs_off_disables",
                           "kv_memory_reserved_by_memory", "kv_memory_scope", "kv_memory_flag")]
    return fields + [f"kernel.{kind}" for kind in KERNEL_KINDS]


def parse_options(pairs: Iterable[str]) -> dict[str, str]:
    """Parse repeated KEY=VALUE texts; a malformed or unknown key is a UserError."""
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key, value = key.strip().lower(), value.strip()
        if not sep or not key or not value:
            raise UserError(f"--engine-option {pair!r}: expected KEY=VALUE",
                            hint="e.g. --engine-option cuda_graphs=false")
        if key not in option_keys():
            close = difflib.get_close_matches(key, option_keys(), n=3)
            hint = f"did you mean {', '.join(close)}? " if close else ""
            raise UserError(f"--engine-option {key}: no such engine default",
                            hint=f"{hint}keys: {', '.join(option_keys())}")
        out[key] = value
    return out


def _with_option(engine: Engine, key: str, value: str) -> Engine:
    """Return the engine with one --engine-option applied (value checked against its type)."""
    if key.startswith("kernel."):
        kind = key.split(".", 1)[1]
        if value not in KERNELS:
            raise UserError(f"--engine-option {key}={value}: no such kernel",
                            hint=f"kernels: {', '.join(KERNELS)}")
        kernels = engine.kernels.model_copy(update={kind: value})
        return engine.model_copy(update={"kernels": kernels})
    if key not in option_keys():
        raise UserError(f"--engine-option {key}: no such engine default",
                        hint=f"keys: {', '.join(option_keys())}")
    changes: dict[str, Any] = {key: _typed(key, value)}
    if key == "prefill_chunk_tokens":
        changes["prefill_chunk_by_memory"] = []  # the user's chunk holds on every GPU
    if key == "cuda_graphs" and changes[key] is False:
        # the engine's eager switch turns these off with the graphs (vLLM --enforce-eager)
        changes.update({other: False for other in engine.defaults.graphs_off_disables})
    if key == "kv_memory_fraction":
        changes["kv_memory_reserved_by_memory"] = []  # the user's fraction on every GPU
    return _with_defaults(engine, changes)


def _typed(key: str, value: str) -> object:
    """Turn an option's text into its default's type, validated by the Defaults schema.

    'none' is first a value of its own (checkpointing=none), else an unset default.
    """
    text: object = value
    if value.lower() in ("true", "false", "on", "off", "yes", "no", "1", "0"):
        text = value.lower() in ("true", "on", "yes", "1")
    try:
        return _validated(key, text)
    except ValidationError as exc:
        message = exc.errors()[0]["msg"]
    if value.lower() in ("none", "null"):
        try:
            return _validated(key, None)
        except ValidationError:
            pass
    raise UserError(f"--engine-option {key}={value}: {message}",
                    hint="booleans: true/false; counts: whole numbers")


def _validated(key: str, value: object) -> object:
    return getattr(Defaults.model_validate({**_sample_defaults(), key: value}), key)


def _sample_defaults() -> dict[str, Any]:
    return {"attention_kernel": "flash", "cuda_graphs": False, "compiled": False,
            "paged_kv": False, "prefix_caching": False, "continuous_batching": False,
            "chunked_prefill": False, "sources": ["-"], "version": "-"}


def _with_defaults(engine: Engine, changes: Mapping[str, Any]) -> Engine:
    """Return the engine with these defaults changed, and the steps they imply moved."""
    if not changes:
        return engine
    defaults = engine.defaults.model_copy(update=dict(changes))
    applies = list(engine.applies)
    for field, value in changes.items():
        step = DEFAULT_STEPS.get(field)
        if field == "attention_kernel":
            step, value = "flash-attention", value == "flash"
        if step is None:
            continue
        if value and step not in applies and not engine.cannot(step):
            applies.append(step)
        elif not value and step in applies:
            applies.remove(step)
    return engine.model_copy(update={"defaults": defaults, "applies": applies})


def defaults_text(engine: Engine, options: Mapping[str, str]) -> list[str]:
    """Say the defaults the plan starts from: 'cuda_graphs=true (vLLM 0.33.0)' and the like."""
    defaults = engine.defaults
    keys = ["attention_kernel", "cuda_graphs", "compiled", "paged_kv", "prefix_caching",
            "continuous_batching", "chunked_prefill", "prefill_chunk_tokens", "fused_optimizer",
            "sharding", "max_concurrent_sequences"]
    if defaults.server or "server" in options:  # an engine whose server's host work counts
        keys.append("server")
    out = []
    # defaults the eager switch turned off with the graphs were the user's doing too
    eager = set(defaults.graphs_off_disables) if "cuda_graphs" in options else set()
    for key in keys:
        where = "--engine-option" if key in options else (
            "--engine-option cuda_graphs" if key in eager else f"{engine.id} {engine.release}")
        out.append(f"{key}={value_text(getattr(defaults, key))} ({where})")
    out += [f"{key}={value} (--engine-option)" for key, value in options.items()
            if key.startswith("kernel.")]
    return out


# --- choosing the engine --------------------------------------------------------------------


def default_engine(device_class: str, phase: str) -> str:
    """Return the engine assumed on a device class for a phase when the user names none."""
    table = _choice().by_class
    if device_class not in table:
        raise UserError(f"unknown device class {device_class!r}",
                        hint=f"valid: {', '.join(DEVICE_CLASSES)}")
    if phase not in table[device_class]:
        raise UserError(f"unknown phase {phase!r}", hint=f"valid: {', '.join(PHASES)}")
    return table[device_class][phase]


def pick_engine(given: str | None, weights_dtype: str | None, device_class: str,
                phase: str, formats: Iterable[str] | None = None) -> tuple[str, str]:
    """Return (engine id, why): --engine, else what the format implies, else the default.

    A named engine that cannot run the phase, the device class or the weights format is a
    UserError (exit 2) naming what does.
    """
    if given is None:
        implied = _implied_by_format(weights_dtype)
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
    return engine.id, "--engine"


# GGUF files are llama.cpp's, MLX's quantised weights are mlx-lm's: a format only one engine
# reads implies it.
_FORMAT_FAMILIES: dict[str, tuple[str, ...]] = {
    "llamacpp": ("q4_0", "q4_k_m", "q5_k_m", "q6_k", "q8_0", "iq4_xs"),
    "mlx": ("mlx-4bit", "mlx-8bit"),
}


def _implied_by_format(weights_dtype: str | None) -> str | None:
    for engine_id, formats in _FORMAT_FAMILIES.items():
        if weights_dtype in formats:
            return engine_id
    return None


def _cannot_run(engine: Engine, weights_dtype: str | None, device_class: str,
                phase: str) -> str | None:
    if phase not in engine.phases:
        return f"{engine.name} does not do {phase}"
    if device_class not in engine.device_classes:
        return f"{engine.name} does not run on a {device_class}"
    if weights_dtype and weights_dtype not in engine.weight_formats:
        return f"{engine.name} cannot run {weights_dtype} weights"
    return None
