"""The options several commands share, each declared once.

Workload options (estimate, recommend, validate) and the performance model's what-if options
(estimate) are tables of typer options. A command takes them as one typed value: decorate it
with ``@workload_options`` and give it a ``request: WorkloadRequest`` parameter (or
``@model_options`` and ``options: ModelOptions``); the decorator adds the options to the
command's signature for typer and hands the command the built value::

    @workload_options
    def estimate(request: WorkloadRequest, device: DeviceOpt = None) -> None: ...

Every workload option defaults to None ("not given"); the workload package fills the defaults
and checks ranges and choices itself, so the error text (and exit code 2) is hwadvisor's own.
Values are plain str/int, not Enums, for the same reason.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Optional, get_args

import typer
from pydantic import ValidationError

from hwadvisor.cli import complete
from hwadvisor.cli.params import Param, default_of, group_options, inject
from hwadvisor.errors import UserError
from hwadvisor.models import ModelOptions
from hwadvisor.report.gates import FailOn
from hwadvisor.workload import (
    DTYPES,
    ENGINES,
    OPTIMIZERS,
    PHASES,
    WorkloadRequest,
    limits,
    list_presets,
    parse_choice,
)
from hwadvisor.workload.build import default_of as workload_default
from hwadvisor.workload.limits import LIMITS

_WORKLOAD_PANEL = "Workload"
_MODEL_PANEL = "Model options (what-if)"
_CALIBRATION_PANEL = "Calibration"
_DTYPE_LIST = ", ".join(DTYPES)


def limit_callback(option: str, value: float | int | None) -> float | int | None:
    """Check an option against workload/limits.py as a typer callback: a usage error (exit 2).

    typer's own min=/max= let NaN through (every comparison with NaN is false).
    """
    try:
        return limits.check(option, value)
    except UserError as exc:
        # click names the option itself: "Invalid value for '--x': must be ..."
        raise typer.BadParameter(exc.message.removeprefix(f"{option} ")) from None


def _help(text: str, default: str | None = None, option: str | None = None) -> str:
    """Help text with the option's range (workload/limits.py) and its default.

    The brackets are escaped: typer renders help as rich markup, which took '[default: 1]'
    for a style tag and dropped it.
    """
    parts = [text]
    if option is not None and option in LIMITS:
        parts.append(f"({LIMITS[option].text()})")
    if default is not None:
        parts.append(f"\\[default: {default}]")
    return " ".join(parts)


def _opt(flag: str, help_text: str, kind: Any, panel: str, default: str | None = None,
         complete: Callable[[str], list[str]] | None = None) -> Any:
    # Optional[...] rather than "X | None": typer resolves these at runtime on Python 3.10 too.
    return Annotated[Optional[kind],  # noqa: UP007, UP045
                     typer.Option(flag, help=_help(help_text, default, flag), rich_help_panel=panel,
                                  show_default=False, autocompletion=complete)]


def _flag(flag: str, help_text: str, panel: str) -> Any:
    return Annotated[bool, typer.Option(flag, help=help_text, rich_help_panel=panel)]


WORKLOAD_PARAMS: tuple[Param, ...] = (
    Param("model", _opt(
        "--model", "Preset id, a config.json, a model folder (config.json + safetensors: exact "
        "weight sizes and format) or a Hugging Face repo id in the local cache (docs/models.md)."
        " Presets: "
        + ", ".join(list_presets()) + ".", str, _WORKLOAD_PANEL,
        "chosen for the device: llama-3-8b on a 24 GB+ GPU, else llama-3.2-1b", complete.models)),
    Param("phase", _opt("--phase", " or ".join(PHASES), str, _WORKLOAD_PANEL,
                        workload_default("phase"))),
    Param("batch", _opt("--batch", "Sequences per step: in serving, per model instance; in "
                        "training, per data-parallel rank and micro-batch (a tensor- or "
                        "pipeline-parallel group shares them, as torchtitan's local batch)",
                        int, _WORKLOAD_PANEL, str(workload_default("batch")))),
    Param("prompt_len", _opt("--prompt-len", "Prompt tokens; the sequence length in training",
                             int, _WORKLOAD_PANEL, str(workload_default("prompt_len")))),
    Param("gen_len", _opt("--gen-len", "Generated tokens (inference)", int, _WORKLOAD_PANEL,
                          f"{workload_default('gen_len')}; 0 in training")),
    Param("weights_dtype", _opt("--weights-dtype", f"Weights dtype: {_DTYPE_LIST}", str,
                                _WORKLOAD_PANEL, workload_default("weights_dtype"))),
    Param("kv_dtype", _opt("--kv-dtype", f"KV-cache dtype: {_DTYPE_LIST}", str,
                           _WORKLOAD_PANEL, f"{workload_default('kv_dtype')}; fp16/fp32 with "
                           "such weights")),
    Param("activation_dtype", _opt("--activation-dtype", f"Activation dtype: {_DTYPE_LIST}",
                                   str, _WORKLOAD_PANEL, f"{workload_default('activation_dtype')}"
                                   "; fp16/fp32 with such weights")),
    Param("optimizer", _opt("--optimizer", f"Training optimizer: {', '.join(OPTIMIZERS)}", str,
                            _WORKLOAD_PANEL, workload_default("optimizer"))),
    Param("grad_accum", _opt("--grad-accum", "Gradient accumulation steps", int,
                             _WORKLOAD_PANEL, str(workload_default("grad_accum")))),
    Param("gpus", _opt("--gpus", "GPUs in all", int, _WORKLOAD_PANEL,
                       f"{workload_default('gpus')}, or nodes x gpus-per-node")),
    Param("nodes", _opt("--nodes", "Nodes, for multi-node planning", int, _WORKLOAD_PANEL,
                        str(workload_default("nodes")))),
    Param("gpus_per_node", _opt("--gpus-per-node", "GPUs per node (sets --gpus = nodes x "
                                "this)", int, _WORKLOAD_PANEL)),
    Param("inter_node_gbps", _opt("--inter-node-gbps", "Network bandwidth between nodes, GB/s "
                                  "per GPU, one direction (400 Gb/s InfiniBand NDR = 50)", float,
                                  _WORKLOAD_PANEL, "the profile's reference system, else 50")),
    Param("engine", _opt("--engine", "Engine that runs the model: " + ", ".join(ENGINES), str,
                         _WORKLOAD_PANEL, "by device and phase, e.g. vllm on datacenter GPUs, "
                         "llamacpp on consumer GPUs, mlx on Apple, torchtitan for datacenter "
                         "training", complete.engines)),
    Param("engine_options", Annotated[
        Optional[list[str]],  # noqa: UP007, UP045
        typer.Option("--engine-option", help=_help(
            "Change one of the engine's defaults, KEY=VALUE; repeatable: cuda_graphs=false "
            "(vLLM --enforce-eager), chunked_prefill=false, prefix_caching=false, "
            "prefill_chunk_tokens=2048, kernel.int4=torch-int4 ... The report lists the "
            "defaults it started from (workload.engine_defaults). Pin a release's defaults "
            "with --engine vllm==0.6.0."), rich_help_panel=_WORKLOAD_PANEL, show_default=False)]),
    Param("quality", _opt("--quality", "Quality budget, a loss class: lossless (the "
                          "checkpoint's own precision), 8-bit (FP8, INT8, Q8_0, MLX 8-bit: "
                          "near-lossless), 6-bit (Q6_K, Q5_K_M) or 4-bit: the least precise "
                          "weights and KV cache a plan may pick for speed; less only when "
                          "nothing else fits (fp8, int8 and int4 still work)",
                          str, _WORKLOAD_PANEL, workload_default("quality"))),
    Param("attention_kernel", _opt("--attention-kernel", "math or flash: the attention you run "
                                   "when it is not the engine's fused default (math = eager "
                                   "attention)", str, _WORKLOAD_PANEL, "the engine's")),
    Param("host_memory_gb", _opt("--host-memory-gb", "RAM of the planned host, GB, for offload "
                                 "checks", float, _WORKLOAD_PANEL, "this machine's, or the "
                                 "reference system's with --device")),
    Param("activation_checkpointing", _flag(
        "--activation-checkpointing/--no-activation-checkpointing",
        _help("Recompute activations in the backward pass (training)", "off"), _WORKLOAD_PANEL),
          False),
)

SHARDINGS: tuple[str, ...] = get_args(ModelOptions.model_fields["sharding"].annotation)

MODEL_PARAMS: tuple[Param, ...] = (
    Param("sharding", _opt("--sharding", f"Multi-GPU strategy: {', '.join(SHARDINGS)}", str,
                           _MODEL_PANEL, "none = ddp for training, tp for inference when "
                           "--gpus > 1")),
    Param("cuda_graphs", _flag("--cuda-graphs", "Assume CUDA graph replay", _MODEL_PANEL), False),
    Param("compiled", _flag("--compiled", "Assume torch.compile", _MODEL_PANEL), False),
    Param("fused_optimizer", _flag("--fused-optimizer", "Assume a fused optimizer kernel",
                                   _MODEL_PANEL), False),
    Param("comm_overlap", _flag("--comm-overlap", "Assume communication overlaps compute",
                                _MODEL_PANEL), False),
    Param("fp32_training", _flag("--fp32-training", "Training without mixed precision (fp32)",
                                 _MODEL_PANEL), False),
    Param("offload_fraction", _opt("--offload-fraction", "Share of weights kept in host RAM",
                                   float, _MODEL_PANEL, "0")),
    Param("prefix_cache_hit", _opt("--prefix-cache-hit", "Share of the prompt served from a "
                                   "prefix cache", float, _MODEL_PANEL, "0")),
    Param("speculative_tokens", _opt("--speculative-tokens", "Accepted tokens per target "
                                     "forward with speculative decoding", float, _MODEL_PANEL,
                                     "1")),
)


def _request(values: dict[str, Any]) -> WorkloadRequest:
    """Build the request; repeated options arrive as a list (or None) and are kept as a tuple."""
    return WorkloadRequest(**{**values, "engine_options": tuple(values.get("engine_options")
                                                                or ())})


workload_options = inject(WORKLOAD_PARAMS, "request", _request)


def build_model_options(values: dict[str, Any]) -> ModelOptions:
    """Validate the what-if options and build ModelOptions (UserError, exit 2, on bad values)."""
    built: dict[str, object] = {
        "cuda_graphs": bool(values.get("cuda_graphs")),
        "compiled": bool(values.get("compiled")),
        "fused_optimizer": bool(values.get("fused_optimizer")),
        "comm_overlap": bool(values.get("comm_overlap")),
        "mixed_precision": not values.get("fp32_training"),
    }
    if (s := parse_choice("--sharding", values.get("sharding"), None, SHARDINGS)) is not None:
        built["sharding"] = s
    # The ranges are workload/limits.py's, the same on every command.
    for option, key, field in (("--offload-fraction", "offload_fraction", "offload_fraction"),
                               ("--prefix-cache-hit", "prefix_cache_hit", "prefix_cache_hit"),
                               ("--speculative-tokens", "speculative_tokens",
                                "speculative_tokens_per_step")):
        value = limits.check(option, values.get(key))
        if value is not None:
            built[field] = float(value)
    try:
        return ModelOptions.model_validate(built)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise UserError(f"model option '{'.'.join(map(str, first['loc']))}': {first['msg']}",
                        hint="check the model options") from None


model_options = inject(MODEL_PARAMS, "options", build_model_options)

# Measured figures from an earlier report replace the datasheet's (estimate, recommend).
CALIBRATION_PARAMS: tuple[Param, ...] = (
    Param("calibration", _opt(
        "--calibration", "A report with measurements of the planned device (probe --measure "
        "--output FILE, or validate --output FILE): its memory bandwidth, matmul, attention, "
        "launch-latency, host-transfer and collective figures replace the datasheet's; "
        "estimate.calibration says which figure came from where. Matched by profile id or "
        "name; a report of another device is an error (exit 2).", Path, _CALIBRATION_PANEL)),
)

calibration_options = inject(CALIBRATION_PARAMS, "calibration",
                              lambda values: values.get("calibration"))


# --- options of single meaning, shared by name ------------------------------------------------

DeviceOpt = Annotated[
    Optional[str],  # noqa: UP007, UP045
    typer.Option(
        "--device",
        help="Plan for a datasheet profile instead of this machine, e.g. h200-sxm, rtx-4090, "
        "m3-max (see 'hwadvisor profiles list'); --gpus N plans N of them.",
        show_default=False, autocompletion=complete.devices,
    ),
]
MinTokensPerSOpt = Annotated[
    Optional[float],  # noqa: UP007, UP045
    typer.Option(
        "--min-tokens-per-s",
        callback=lambda value: limit_callback("--min-tokens-per-s", value),
        show_default=False,
        help="The generation speed (tokens/s per sequence) a plan's answer must keep: a smaller "
        "model is offered first when it reaches it (every smaller preset that fits is listed "
        "with its speed either way); a memory-footprint plan below it is not the answer when "
        "one above it fits \\[default: 10; 5 with --goal memory-footprint].",
    ),
]
FailOnOpt = Annotated[
    Optional[list[FailOn]],  # noqa: UP007, UP045
    typer.Option(
        "--fail-on",
        metavar="VERDICT",
        help="Exit 1 when a recommendation's verdict (or a trial) is this; repeatable: "
        "--fail-on refuted --fail-on error. VERDICT: refuted, inconclusive (the trial's 95% "
        "interval straddled the rule's threshold), error or unsupported.",
        case_sensitive=False,
    ),
]


def _checked_float(flag: str, help_text: str) -> Any:
    """Return an optional number option held to its range in workload/limits.py (exit 2)."""
    return Annotated[Optional[float],  # noqa: UP007, UP045
                     typer.Option(flag, callback=lambda value: limit_callback(flag, value),
                                  show_default=False, help=help_text)]


MinBandwidthFractionOpt = _checked_float(
    "--min-bandwidth-fraction", "Exit 1 when measured memory bandwidth is below this fraction "
    "of the theoretical (datasheet) bandwidth, e.g. 0.85 (0-1).")


@dataclass(frozen=True)
class Gates:
    """The CI gates of a command that produces a report (report/gates.py applies them)."""

    fail_on: list[FailOn] | None = None
    min_bandwidth_fraction: float | None = None


GATE_PARAMS: tuple[Param, ...] = (
    Param("fail_on", FailOnOpt, default_of(Gates, "fail_on")),
    Param("min_bandwidth_fraction", MinBandwidthFractionOpt,
          default_of(Gates, "min_bandwidth_fraction")),
)

NO_GATES = Gates()  # the `gates` parameter's default; the options replace it
gate_options = group_options(Gates, GATE_PARAMS, "gates")
