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

import functools
import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Optional, TypeVar, get_args

import typer
from pydantic import ValidationError

from hwadvisor.errors import UserError
from hwadvisor.models import ModelOptions
from hwadvisor.report.gates import FailOn
from hwadvisor.workload import (
    DTYPES,
    ENGINES,
    OPTIMIZERS,
    PHASES,
    WorkloadRequest,
    list_presets,
    parse_choice,
)

F = TypeVar("F", bound=Callable[..., Any])

_WORKLOAD_PANEL = "Workload"
_MODEL_PANEL = "Model options (what-if)"
_DTYPE_LIST = ", ".join(DTYPES)


@dataclass(frozen=True)
class Param:
    """One shared option: the parameter name, its typer annotation and its default."""

    name: str
    annotation: Any
    default: Any = None


def _opt(flag: str, help_text: str, kind: Any, panel: str) -> Any:
    # Optional[...] rather than "X | None": typer resolves these at runtime on Python 3.10 too.
    return Annotated[Optional[kind],  # noqa: UP007, UP045
                     typer.Option(flag, help=help_text, rich_help_panel=panel, show_default=False)]


def _flag(flag: str, help_text: str, panel: str) -> Any:
    return Annotated[bool, typer.Option(flag, help=help_text, rich_help_panel=panel)]


WORKLOAD_PARAMS: tuple[Param, ...] = (
    Param("model", _opt(
        "--model", "Preset id or path to a Hugging Face config.json (or its folder). Presets: "
        + ", ".join(list_presets())
        + ". Default: chosen for the device (llama-3-8b on a 24 GB+ GPU, else llama-3.2-1b).",
        str, _WORKLOAD_PANEL)),
    Param("phase", _opt("--phase", f"{' or '.join(PHASES)} [default: inference]", str,
                        _WORKLOAD_PANEL)),
    Param("batch", _opt("--batch", "Sequences per step (per GPU) [default: 1]", int,
                        _WORKLOAD_PANEL)),
    Param("prompt_len", _opt("--prompt-len", "Prompt tokens; the sequence length in training "
                             "[default: 2048]", int, _WORKLOAD_PANEL)),
    Param("gen_len", _opt("--gen-len", "Generated tokens (inference) [default: 256; 0 in "
                          "training]", int, _WORKLOAD_PANEL)),
    Param("weights_dtype", _opt("--weights-dtype", f"Weights dtype: {_DTYPE_LIST} "
                                "[default: bf16]", str, _WORKLOAD_PANEL)),
    Param("kv_dtype", _opt("--kv-dtype", f"KV-cache dtype: {_DTYPE_LIST} [default: bf16]", str,
                           _WORKLOAD_PANEL)),
    Param("activation_dtype", _opt("--activation-dtype", f"Activation dtype: {_DTYPE_LIST} "
                                   "[default: bf16]", str, _WORKLOAD_PANEL)),
    Param("optimizer", _opt("--optimizer", f"Training optimizer: {', '.join(OPTIMIZERS)} "
                            "[default: adamw]", str, _WORKLOAD_PANEL)),
    Param("grad_accum", _opt("--grad-accum", "Gradient accumulation steps [default: 1]", int,
                             _WORKLOAD_PANEL)),
    Param("gpus", _opt("--gpus", "GPUs in all [default: 1, or nodes x gpus-per-node]", int,
                       _WORKLOAD_PANEL)),
    Param("nodes", _opt("--nodes", "Nodes, for multi-node planning [default: 1]", int,
                        _WORKLOAD_PANEL)),
    Param("gpus_per_node", _opt("--gpus-per-node", "GPUs per node (sets --gpus = nodes x "
                                "this)", int, _WORKLOAD_PANEL)),
    Param("inter_node_gbps", _opt("--inter-node-gbps", "Network bandwidth between nodes, GB/s "
                                  "per GPU, one direction (400 Gb/s InfiniBand NDR = 50)", float,
                                  _WORKLOAD_PANEL)),
    Param("engine", _opt("--engine", "Engine that runs the model: " + ", ".join(ENGINES)
                         + " [default: by device and phase, e.g. vllm on datacenter GPUs, "
                         "llamacpp on consumer GPUs, mlx on Apple, torchtitan for datacenter "
                         "training]", str, _WORKLOAD_PANEL)),
    Param("attention_kernel", _opt("--attention-kernel", "math or flash: the attention you run "
                                   "when it is not the engine's fused default (math = eager "
                                   "attention) [default: the engine's]", str, _WORKLOAD_PANEL)),
    Param("host_memory_gb", _opt("--host-memory-gb", "RAM of the planned host, GB, for offload "
                                 "checks [default: this machine's, or the reference system's "
                                 "with --device]", float, _WORKLOAD_PANEL)),
    Param("activation_checkpointing", _flag(
        "--activation-checkpointing/--no-activation-checkpointing",
        "Recompute activations in the backward pass (training)", _WORKLOAD_PANEL), False),
)

SHARDINGS: tuple[str, ...] = get_args(ModelOptions.model_fields["sharding"].annotation)

MODEL_PARAMS: tuple[Param, ...] = (
    Param("sharding", _opt("--sharding", f"Multi-GPU strategy: {', '.join(SHARDINGS)} "
                           "[default: none = ddp for training, tp for inference when --gpus > 1]",
                           str, _MODEL_PANEL)),
    Param("cuda_graphs", _flag("--cuda-graphs", "Assume CUDA graph replay", _MODEL_PANEL), False),
    Param("compiled", _flag("--compiled", "Assume torch.compile", _MODEL_PANEL), False),
    Param("fused_optimizer", _flag("--fused-optimizer", "Assume a fused optimizer kernel",
                                   _MODEL_PANEL), False),
    Param("comm_overlap", _flag("--comm-overlap", "Assume communication overlaps compute",
                                _MODEL_PANEL), False),
    Param("fp32_training", _flag("--fp32-training", "Training without mixed precision (fp32)",
                                 _MODEL_PANEL), False),
    Param("offload_fraction", _opt("--offload-fraction", "Share of weights kept in host RAM, "
                                   "0-1 [default: 0]", float, _MODEL_PANEL)),
    Param("prefix_cache_hit", _opt("--prefix-cache-hit", "Share of the prompt served from a "
                                   "prefix cache, 0-1 [default: 0]", float, _MODEL_PANEL)),
    Param("speculative_tokens", _opt("--speculative-tokens", "Accepted tokens per target "
                                     "forward with speculative decoding, >= 1 [default: 1]",
                                     float, _MODEL_PANEL)),
)


def _inject(params: tuple[Param, ...], target: str,
            build: Callable[[dict[str, Any]], Any]) -> Callable[[F], F]:
    """Return a decorator adding `params` to a command and passing build(values) as `target`."""

    def decorate(func: F) -> F:
        # eval_str: the command's own annotations are strings under `from __future__ import
        # annotations`; typer needs the objects (it reads the Option out of Annotated).
        own = inspect.signature(func, eval_str=True)
        kept = [p for p in own.parameters.values() if p.name != target]
        added = [inspect.Parameter(p.name, inspect.Parameter.KEYWORD_ONLY, default=p.default,
                                   annotation=p.annotation) for p in params]

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            values = {p.name: kwargs.pop(p.name, p.default) for p in params}
            kwargs[target] = build(values)
            return func(*args, **kwargs)

        signature = own.replace(parameters=[*kept, *added])
        wrapper.__signature__ = signature  # type: ignore[attr-defined]
        wrapper.__annotations__ = {p.name: p.annotation for p in signature.parameters.values()}
        return wrapper  # type: ignore[return-value]

    return decorate


workload_options = _inject(WORKLOAD_PARAMS, "request", lambda values: WorkloadRequest(**values))


def _fraction(option: str, value: float | None) -> float | None:
    if value is not None and not (math.isfinite(value) and 0.0 <= value <= 1.0):
        raise UserError(f"{option} must be between 0 and 1, got {value}",
                        hint=f"e.g. {option} 0.5")
    return value


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
    if (o := _fraction("--offload-fraction", values.get("offload_fraction"))) is not None:
        built["offload_fraction"] = o
    if (p := _fraction("--prefix-cache-hit", values.get("prefix_cache_hit"))) is not None:
        built["prefix_cache_hit"] = p
    speculative = values.get("speculative_tokens")
    if speculative is not None:
        if not math.isfinite(speculative) or not 1.0 <= speculative <= 64.0:
            raise UserError("--speculative-tokens must be a number from 1 to 64, "
                            f"got {speculative}",
                            hint="e.g. --speculative-tokens 2.5 (accepted tokens per forward)")
        built["speculative_tokens_per_step"] = speculative
    try:
        return ModelOptions.model_validate(built)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise UserError(f"model option '{'.'.join(map(str, first['loc']))}': {first['msg']}",
                        hint="check the model options") from None


model_options = _inject(MODEL_PARAMS, "options", build_model_options)


# --- options of single meaning, shared by name ------------------------------------------------

DeviceOpt = Annotated[
    Optional[str],  # noqa: UP007, UP045
    typer.Option(
        "--device",
        help="Plan for a datasheet profile instead of this machine, e.g. h200-sxm, rtx-4090, "
        "m3-max (see 'hwadvisor profiles list'); --gpus N plans N of them.",
        show_default=False,
    ),
]
FailOnOpt = Annotated[
    Optional[list[FailOn]],  # noqa: UP007, UP045
    typer.Option(
        "--fail-on",
        help="Exit 1 when a recommendation's verdict (or a trial) is this; repeatable: "
        "--fail-on refuted --fail-on error. inconclusive: the trial's 95% interval straddled "
        "the rule's threshold.",
        case_sensitive=False,
    ),
]
MinBandwidthFractionOpt = Annotated[
    Optional[float],  # noqa: UP007, UP045
    typer.Option(
        "--min-bandwidth-fraction",
        min=0.0,
        max=1.0,
        help="Exit 1 when measured memory bandwidth is below this fraction of the theoretical "
        "(datasheet) bandwidth, e.g. 0.85.",
    ),
]
