"""The workload: model presets, config.json loading, parameter counts and the default workload.

Presets are real Hugging Face config.json files (hwadvisor/workload/presets/<id>.json, each with a
"_source" repo id) and go through the same parser as a user's file. No torch here: probe and
recommend must start fast.
"""

from __future__ import annotations

import difflib
import json
import os
from functools import cache, lru_cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast, get_args

from pydantic import ValidationError

from hwadvisor.errors import UserError
from hwadvisor.models.workload import Dtype, EngineId, ModelSpec, Optimizer, Phase, Workload
from hwadvisor.workload import checkpoint, limits
from hwadvisor.workload.configparse import ModelReader, parse_config, read_config_file
from hwadvisor.workload.params import count_params
from hwadvisor.workload.quality import default_budget
from hwadvisor.workload.request import Sizing

if TYPE_CHECKING:
    from hwadvisor.workload.request import WorkloadRequest

# What the package re-exports from here (parameter counts and config parsing live in params.py
# and configparse.py and are re-exported from there).
__all__ = ["DTYPES", "OPTIMIZERS", "PHASES", "build_workload", "default_model",
           "list_presets", "load_spec", "preset_source"]

PHASES: tuple[str, ...] = get_args(Phase)
DTYPES: tuple[str, ...] = get_args(Dtype)
OPTIMIZERS: tuple[str, ...] = get_args(Optimizer)
ENGINES: tuple[str, ...] = get_args(EngineId)

# Spellings people type for the same dtype or optimizer (torch and bitsandbytes names).
_DTYPE_ALIASES = {
    "bfloat16": "bf16",
    "float16": "fp16",
    "half": "fp16",
    "float32": "fp32",
    "float": "fp32",
    "float8": "fp8",
    "fp8_e4m3": "fp8",
    "e4m3": "fp8",
    "nvfp4": "fp4",
    "mxfp4": "fp4",
    "q4_k": "q4_k_m",
    "q5_k": "q5_k_m",
    "mlx4": "mlx-4bit",
    "mlx8": "mlx-8bit",
    "awq": "int4",
    "gptq": "int4",
    "w8a8": "int8",
}
_OPTIMIZER_ALIASES = {
    "adam": "adamw",
    "adamw8bit": "adamw-8bit",
    "adamw_8bit": "adamw-8bit",
    "adam8bit": "adamw-8bit",
    "paged_adamw_8bit": "adamw-8bit",
}

# The default model when none is given, as data: (device classes, phase, minimum device
# memory, preset). First match wins. An 8B model in bf16 takes 16 GB for weights, so it
# needs a 24 GB GPU to serve with room for the KV cache; training it with AdamW takes
# ~16 bytes/param (~128 GB) before activations, so only an 80 GB+ part is a sensible default.
_DEFAULT_RULES: tuple[tuple[frozenset[str], str | None, int, str], ...] = (
    (frozenset({"datacenter-gpu", "consumer-gpu", "apple-silicon"}), "training", 80 << 30,
     "llama-3-8b"),
    (frozenset({"datacenter-gpu", "consumer-gpu", "apple-silicon"}), "inference", 24 << 30,
     "llama-3-8b"),
)
_SMALL_DEFAULT = "llama-3.2-1b"  # phones, CPU-only hosts, small GPUs, unknown devices


# ---------------------------------------------------------------- presets and specs


def _presets_dir() -> Any:
    return resources.files("hwadvisor.workload") / "presets"


@lru_cache(maxsize=1)
def _preset_files() -> dict[str, str]:
    """Preset id -> the JSON text of its config.json."""
    out: dict[str, str] = {}
    for entry in _presets_dir().iterdir():
        if entry.name.endswith(".json"):
            out[entry.name[: -len(".json")]] = entry.read_text(encoding="utf-8")
    return out


def list_presets() -> list[str]:
    """Return the preset ids, sorted (for help text and error hints)."""
    return sorted(_preset_files())


def _preset_data(preset_id: str) -> dict[str, Any]:
    data = json.loads(_preset_files()[preset_id])
    if not isinstance(data, dict):  # a packaging bug, not a user error
        raise RuntimeError(f"preset {preset_id} is not a JSON object")
    return data


def preset_source(preset_id: str) -> str | None:
    """Return the Hugging Face repo id a preset's config.json was taken from."""
    source = _preset_data(preset_id).get("_source")
    return source if isinstance(source, str) else None


# GGUF file names carry the quant as llama.cpp's convert_hf_to_gguf.py and llama-quantize name it.
GGUF_TYPES = {"fp16": "F16", "bf16": "BF16", "fp32": "F32"}


def engine_model_name(model: str, form: str | None, weights_dtype: str | None = None) -> str:
    """Return the model as an engine's command loads it (its [config] model_source).

    hf: the Hugging Face repo id a preset's config.json came from, a repo id as the user gave it,
    or the folder of the user's config.json (vLLM, SGLang, TensorRT-LLM and mlx-lm load a repo
    id or a local folder); gguf: the GGUF file of that checkpoint in the planned format, named
    as llama.cpp's converter and llama-quantize name it ('Meta-Llama-3-8B-Q4_K_M.gguf'), which
    the user converts or downloads; None: the name as given.
    """
    if form is None:
        return model
    preset = preset_of(model)
    repo = (preset_source(preset) if preset else None) or model
    if form == "gguf":
        quant = GGUF_TYPES.get(weights_dtype or "", (weights_dtype or "F16").upper())
        return f"{Path(repo.rstrip('/')).name.removesuffix('.json')}-{quant}.gguf"
    if preset is None and _looks_like_path(model) and model.endswith(".json"):
        return str(Path(model).parent)  # the folder the engine reads config.json and weights from
    return repo


@lru_cache(maxsize=1)
def _repo_aliases() -> dict[str, str]:
    """Lower-cased Hugging Face repo id -> preset id, so 'meta-llama/Meta-Llama-3-8B' works."""
    aliases = {}
    for preset_id in list_presets():
        source = preset_source(preset_id)
        if source:
            aliases[source.lower()] = preset_id
    return aliases


def _looks_like_path(model: str) -> bool:
    return os.sep in model or "/" in model or model.endswith(".json") or model.startswith(".")


def _resolve_preset(model: str) -> str | None:
    presets = set(list_presets())
    if model in presets:
        return model
    lowered = model.lower()
    if lowered in presets:
        return lowered
    return _repo_aliases().get(lowered)


def preset_of(model: str) -> str | None:
    """Return the preset id a model name or Hugging Face repo id stands for, if any."""
    return _resolve_preset(model.strip()) if isinstance(model, str) else None


def load_spec(model: str, read_model: ModelReader | None = None) -> ModelSpec:
    """Resolve a preset id, a Hugging Face repo id of a preset, or a config.json path to a spec.

    read_model reads a config's model_type the hand-written parsers lack (configparse.py).
    """
    if not isinstance(model, str) or not model.strip():
        raise UserError("--model must not be empty", hint=_presets_hint())
    model = model.strip()
    path = _user_path(model)
    preset = _resolve_preset(model)
    # An explicit path wins over a preset of the same name; a bare name is a preset first.
    if path is not None and _looks_like_path(model):
        return _load_path(path, read_model)
    if preset is not None:
        return _load_preset(preset)
    if path is not None:
        return _load_path(path, read_model)
    if checkpoint.looks_like_repo_id(model):
        return _load_path(checkpoint.cached_snapshot(model), read_model, name=model)
    raise _unknown_model(model)


def _load_path(path: Path, read_model: ModelReader | None, name: str | None = None) -> ModelSpec:
    """Read a config.json, or a model folder: its config.json plus its safetensors headers."""
    config_path = path / "config.json" if path.is_dir() else path
    spec = parse_config(read_config_file(path), str(config_path), read_model)
    if name is not None:
        spec = spec.model_copy(update={"name": name})
    if not path.is_dir():
        return spec
    ckpt = checkpoint.read_checkpoint(path)
    if ckpt is None:
        return spec
    update: dict[str, Any] = {
        "checkpoint_bytes": ckpt.tensor_bytes,
        "checkpoint_source": f"{ckpt.files} safetensors file(s) in {path}: "
        f"{ckpt.tensor_bytes / 1e9:.2f} GB of tensors",
    }
    found = checkpoint.format_from_tensors(ckpt)
    if found is not None and spec.native_weights_dtype in (None, "bf16", "fp16", "fp32"):
        # The tensors outrank a config.json that says nothing or only names torch_dtype.
        update.update(native_weights_dtype=found[0], native_dtype_source=found[1])
    elif spec.native_weights_dtype is None:
        plain = max(ckpt.bytes_by_dtype, key=lambda d: ckpt.bytes_by_dtype[d])
        dtype = {"BF16": "bf16", "F16": "fp16"}.get(plain)
        if dtype is not None:
            update.update(native_weights_dtype=dtype,
                          native_dtype_source=f"{plain} tensors in the safetensors headers")
    return spec.model_copy(update=update)


def _user_path(model: str) -> Path | None:
    """Return the existing path `model` names, or None (also for names the OS cannot look up)."""
    try:
        path = Path(model).expanduser()
        return path if path.exists() else None
    except (OSError, ValueError, RuntimeError):
        # ENAMETOOLONG, an embedded NUL, or "~user" with no such user: not a usable path.
        return None


@cache
def _load_preset(preset_id: str) -> ModelSpec:
    # Parsed once per process: the plan search asks for every preset of the family when it
    # looks for a smaller model. Specs are never changed in place (model_copy makes variants).
    data = _preset_data(preset_id)
    spec = parse_config(data, f"preset {preset_id}")
    source = data.get("_source")
    return spec.model_copy(
        update={
            "name": preset_id,
            "source": f"preset {preset_id}: config.json of Hugging Face {source}",
        }
    )


def _presets_hint() -> str:
    return (
        f"pass a preset ({', '.join(list_presets())}) or the path of a model's config.json"
    )


def _unknown_model(model: str) -> UserError:
    shown = repr(model if len(model) <= 80 else model[:77] + "...")
    repo_like = model.count("/") == 1 and not model.startswith((".", "/", "~"))
    if _looks_like_path(model) and not repo_like:
        return UserError(
            f"--model {shown}: no such file or directory",
            hint="check the path of the config.json (or the folder holding it); presets: "
            + ", ".join(list_presets()),
        )
    message = f"--model {shown} is neither a preset nor an existing config.json path"
    close = difflib.get_close_matches(model.lower()[:200], list_presets(), n=3, cutoff=0.6)
    if close:
        return UserError(message, hint=f"did you mean {', '.join(close)}? " + _presets_hint())
    if repo_like:
        return UserError(
            message,
            hint="hwadvisor does not download models: save the repo's config.json and pass "
            "its path, or " + _presets_hint(),
        )
    return UserError(message, hint=_presets_hint())


# ---------------------------------------------------------------- building a workload


def default_model(phase: str, sizing: Sizing) -> str:
    """Pick the preset to run when no --model is given, from the device class and memory."""
    klass = getattr(sizing.device_class, "value", sizing.device_class)
    for classes, rule_phase, min_bytes, preset in _DEFAULT_RULES:
        if klass not in classes or (rule_phase is not None and rule_phase != phase):
            continue
        if sizing.memory_bytes is not None and sizing.memory_bytes >= min_bytes:
            return preset
    return _SMALL_DEFAULT


def parse_choice(option: str, value: str | None, default: str | None, choices: tuple[str, ...],
                 aliases: dict[str, str] | None = None) -> str | None:
    """Normalise a choice option (case, aliases) or raise a UserError listing the valid values."""
    if value is None:
        return default
    key = str(value).strip().lower()
    key = (aliases or {}).get(key, key)
    if key not in choices:
        raise UserError(
            f"{option} must be one of {', '.join(choices)}, got {value!r}",
            hint=f"valid values for {option}: {', '.join(choices)}",
        )
    return key


def _weights_dtype(given: str | None, spec: ModelSpec, phase: str) -> tuple[str, str]:
    """Return the weights dtype to plan with and why: --weights-dtype, the checkpoint's, or bf16."""
    if given is not None:
        return given, "--weights-dtype"
    native = spec.native_weights_dtype
    if native is None:
        return "bf16", "default (the config names no dtype)"
    if phase == "training" and native not in ("bf16", "fp16", "fp32"):
        # Full training updates the weights in 16 bits over fp32 masters, whatever format the
        # checkpoint ships in (an FP8 checkpoint is dequantised to train; QLoRA is a rule).
        return "bf16", f"training computes in bf16 ({spec.native_dtype_source})"
    return native, spec.native_dtype_source or "the checkpoint"


def _req_choice(option: str, value: str | None, default: str, choices: tuple[str, ...],
                aliases: dict[str, str] | None = None) -> str:
    return parse_choice(option, value, default, choices, aliases) or default


def _int_opt(option: str, value: int | None, default: int | None, minimum: int = 1) -> int | None:
    """Check an integer option against its range (workload/limits.py); None: the default."""
    if value is None:
        return default
    checked = limits.check(option, value)
    assert isinstance(checked, int)
    return checked


def _int_or(option: str, value: int | None, default: int, minimum: int = 1) -> int:
    checked = _int_opt(option, value, default, minimum)
    return default if checked is None else checked


def _gpu_layout(gpus: int | None, nodes: int | None,
                gpus_per_node: int | None) -> tuple[int, int, int | None]:
    """(gpus, nodes, gpus_per_node), consistent: gpus = nodes x gpus_per_node."""
    nodes_n = nodes if nodes is not None else 1
    if gpus_per_node is not None:
        total = nodes_n * gpus_per_node
        if total > limits.LIMITS["--gpus"].high:
            raise UserError(
                f"--nodes {nodes_n} x --gpus-per-node {gpus_per_node} = {total} GPUs: more than "
                f"the {limits.LIMITS['--gpus'].text()} --gpus allows",
                hint="plan fewer nodes or GPUs per node")
        if gpus is not None and gpus != total:
            raise UserError(
                f"--gpus {gpus} does not match --nodes {nodes_n} x --gpus-per-node "
                f"{gpus_per_node} = {total}",
                hint="pass --nodes and --gpus-per-node, or --gpus alone",
            )
        return total, nodes_n, gpus_per_node
    if gpus is None:
        if nodes_n > 1:
            raise UserError(
                f"--nodes {nodes_n} needs the GPUs per node",
                hint="add --gpus-per-node (e.g. --gpus-per-node 8)",
            )
        return 1, 1, None
    if gpus % nodes_n != 0:
        raise UserError(
            f"--gpus {gpus} cannot be split evenly over --nodes {nodes_n}",
            hint="pass --gpus-per-node instead, or a --gpus that is a multiple of --nodes",
        )
    per_node = gpus // nodes_n if nodes is not None else None
    return gpus, nodes_n, per_node


def default_of(field: str) -> Any:
    """Return a Workload field's default: written once, on the model (models/workload.py)."""
    return Workload.model_fields[field].default


def choices_of(field: str) -> tuple[str, ...]:
    """Return the values of a Workload field typed Literal[...] (or Literal[...] | None)."""
    annotation = Workload.model_fields[field].annotation
    if type(None) in get_args(annotation):  # X | None: the choices are X's
        annotation = get_args(annotation)[0]
    return get_args(annotation)


# --quality: the least precise weights (and KV cache) a plan may choose for speed.
QUALITY_BUDGETS: tuple[str, ...] = choices_of("quality")
ATTENTION_KERNELS: tuple[str, ...] = choices_of("attention_kernel")
_UNSIZED = Sizing()  # no device known: the small default model


def build_workload(request: WorkloadRequest, sizing: Sizing = _UNSIZED,
                   read_model: ModelReader | None = None) -> Workload:
    """Validate the request's options, resolve the model and fill spec and parameter counts.

    None means "not given": the Workload default is used, and for model the default model for
    `sizing`'s device (is_default=True). read_model reads a config's model_type the
    hand-written parsers lack (configparse.py). A bad value raises UserError naming the option
    (exit 2). The engine is only checked here: settle.py settles it for the device (--engine,
    the format's or the default) and says why (engine_source).
    """
    phase_v = _req_choice("--phase", request.phase, default_of("phase"), PHASES)
    engine_v = _req_choice("--engine", request.engine, default_of("engine"), ENGINES)
    weights_given = parse_choice("--weights-dtype", request.weights_dtype, None, DTYPES,
                                 _DTYPE_ALIASES)
    opt_v = _req_choice("--optimizer", request.optimizer, default_of("optimizer"), OPTIMIZERS,
                        _OPTIMIZER_ALIASES)
    batch_v = _int_or("--batch", request.batch, default_of("batch"))
    prompt_v = _int_or("--prompt-len", request.prompt_len, default_of("prompt_len"))
    gen_default = 0 if phase_v == "training" else default_of("gen_len")
    gen_v = _int_or("--gen-len", request.gen_len, gen_default, minimum=0)
    accum_v = _int_or("--grad-accum", request.grad_accum, default_of("grad_accum"))
    gpus_in = _int_opt("--gpus", request.gpus, None)
    nodes_in = _int_opt("--nodes", request.nodes, None)
    per_node_in = _int_opt("--gpus-per-node", request.gpus_per_node, None)
    gpus_v, nodes_v, per_node_v = _gpu_layout(gpus_in, nodes_in, per_node_in)
    limits.check("--inter-node-gbps", request.inter_node_gbps)
    # An empty --model (an unset "$MODEL" in CI, say) is refused by load_spec, not
    # silently replaced by the default model.
    is_default = request.model is None
    if is_default:
        model_v = default_model(phase_v, sizing)
    else:
        model_v = str(request.model).strip()
    spec = load_spec(model_v, read_model)
    weights_v, weights_source = _weights_dtype(weights_given, spec, phase_v)
    # Unless told otherwise, fp16/fp32 weights imply the same for activations and KV cache;
    # anything else (bf16, fp8, int4, GGUF ...) computes and caches in bf16.
    compute_default = weights_v if weights_v in ("fp16", "fp32") else "bf16"
    act_v = _req_choice("--activation-dtype", request.activation_dtype, compute_default, DTYPES,
                        _DTYPE_ALIASES)
    kv_v = _req_choice("--kv-dtype", request.kv_dtype, compute_default, DTYPES, _DTYPE_ALIASES)
    preset = _resolve_preset(model_v)
    if preset is not None and not (_looks_like_path(model_v) and _user_path(model_v)):
        model_v = preset
    total, active = count_params(spec)
    try:
        return Workload(
            model=model_v,
            phase=cast(Phase, phase_v),
            batch=batch_v,
            prompt_len=prompt_v,
            gen_len=gen_v,
            weights_dtype=cast(Dtype, weights_v),
            weights_dtype_source=weights_source,
            engine=cast(EngineId, engine_v),
            attention_kernel=cast(Any, parse_choice("--attention-kernel",
                                                   request.attention_kernel, None,
                                                   ATTENTION_KERNELS)),
            quality=cast(Any, parse_choice("--quality", request.quality,
                                           default_budget(sizing.device_class,
                                                          str(default_of("quality"))),
                                           QUALITY_BUDGETS)),
            activation_dtype=cast(Dtype, act_v),
            kv_dtype=cast(Dtype, kv_v),
            optimizer=cast(Optimizer, opt_v),
            grad_accum=accum_v,
            gpus=gpus_v,
            nodes=nodes_v,
            gpus_per_node=per_node_v,
            inter_node_bandwidth_gbps=(float(request.inter_node_gbps) if request.inter_node_gbps
                                       else None),
            activation_checkpointing=bool(request.activation_checkpointing),
            params_total=total,
            params_active=active,
            spec=spec,
            is_default=is_default,
        )
    except ValidationError as exc:  # a range this module forgot to check: still a clean error
        first = exc.errors()[0]
        field = ".".join(str(part) for part in first.get("loc", ()))
        raise UserError(f"workload field '{field}': {first.get('msg')}",
                        hint="check the workload options") from None
