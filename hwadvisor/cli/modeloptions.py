"""The performance model's what-if options (ModelOptions) as CLI options, defined once.

estimate uses them; recommend/validate may reuse them. Values are plain str/float/bool and
are checked by model_options(), so errors carry hwadvisor's own message, hint and exit code 2.
"""

from __future__ import annotations

import math
from typing import Annotated, Optional, get_args

import typer
from pydantic import ValidationError

from hwadvisor.errors import UserError
from hwadvisor.models import ModelOptions
from hwadvisor.workload import parse_choice

_PANEL = "Model options (what-if)"
SHARDINGS: tuple[str, ...] = get_args(ModelOptions.model_fields["sharding"].annotation)
ATTENTION_KERNELS: tuple[str, ...] = get_args(
    ModelOptions.model_fields["attention_kernel"].annotation)

ShardingOpt = Annotated[
    Optional[str],  # noqa: UP007, UP045
    typer.Option("--sharding", help=f"Multi-GPU strategy: {', '.join(SHARDINGS)} [default: none "
                 "= ddp for training, tp for inference when --gpus > 1]",
                 rich_help_panel=_PANEL, show_default=False),
]
AttentionOpt = Annotated[
    Optional[str],  # noqa: UP007, UP045
    typer.Option("--attention-kernel", help=f"{' or '.join(ATTENTION_KERNELS)} [default: math]",
                 rich_help_panel=_PANEL, show_default=False),
]
CudaGraphsOpt = Annotated[
    bool, typer.Option("--cuda-graphs", help="Assume CUDA graph replay", rich_help_panel=_PANEL)
]
CompiledOpt = Annotated[
    bool, typer.Option("--compiled", help="Assume torch.compile", rich_help_panel=_PANEL)
]
FusedOptimizerOpt = Annotated[
    bool, typer.Option("--fused-optimizer", help="Assume a fused optimizer kernel",
                       rich_help_panel=_PANEL)
]
CommOverlapOpt = Annotated[
    bool, typer.Option("--comm-overlap", help="Assume communication overlaps compute",
                       rich_help_panel=_PANEL)
]
NoMixedPrecisionOpt = Annotated[
    bool, typer.Option("--fp32-training", help="Training without mixed precision (fp32)",
                       rich_help_panel=_PANEL)
]
OffloadOpt = Annotated[
    Optional[float],  # noqa: UP007, UP045
    typer.Option("--offload-fraction", help="Share of weights kept in host RAM, 0-1 [default: 0]",
                 rich_help_panel=_PANEL, show_default=False),
]
PrefixHitOpt = Annotated[
    Optional[float],  # noqa: UP007, UP045
    typer.Option("--prefix-cache-hit", help="Share of the prompt served from a prefix cache, 0-1 "
                 "[default: 0]", rich_help_panel=_PANEL, show_default=False),
]
SpeculativeOpt = Annotated[
    Optional[float],  # noqa: UP007, UP045
    typer.Option("--speculative-tokens", help="Accepted tokens per target forward with "
                 "speculative decoding, >= 1 [default: 1]", rich_help_panel=_PANEL,
                 show_default=False),
]


def _fraction(option: str, value: float | None) -> float | None:
    if value is not None and not 0.0 <= value <= 1.0:
        raise UserError(f"{option} must be between 0 and 1, got {value}",
                        hint=f"e.g. {option} 0.5")
    return value


def model_options(
    sharding: str | None = None,
    attention_kernel: str | None = None,
    cuda_graphs: bool = False,
    compiled: bool = False,
    fused_optimizer: bool = False,
    comm_overlap: bool = False,
    fp32_training: bool = False,
    offload_fraction: float | None = None,
    prefix_cache_hit: float | None = None,
    speculative_tokens: float | None = None,
) -> ModelOptions:
    """Validate the what-if options and build ModelOptions (UserError, exit 2, on bad values)."""
    values: dict[str, object] = {
        "cuda_graphs": cuda_graphs,
        "compiled": compiled,
        "fused_optimizer": fused_optimizer,
        "comm_overlap": comm_overlap,
        "mixed_precision": not fp32_training,
    }
    if (s := parse_choice("--sharding", sharding, None, SHARDINGS)) is not None:
        values["sharding"] = s
    kernel = parse_choice("--attention-kernel", attention_kernel, None, ATTENTION_KERNELS)
    if kernel is not None:
        values["attention_kernel"] = kernel
    if (o := _fraction("--offload-fraction", offload_fraction)) is not None:
        values["offload_fraction"] = o
    if (p := _fraction("--prefix-cache-hit", prefix_cache_hit)) is not None:
        values["prefix_cache_hit"] = p
    if speculative_tokens is not None:
        if not math.isfinite(speculative_tokens) or speculative_tokens < 1.0:
            raise UserError("--speculative-tokens must be a finite number >= 1, "
                            f"got {speculative_tokens}",
                            hint="e.g. --speculative-tokens 2.5 (accepted tokens per forward)")
        values["speculative_tokens_per_step"] = speculative_tokens
    try:
        return ModelOptions(**values)  # type: ignore[arg-type]
    except ValidationError as exc:
        first = exc.errors()[0]
        raise UserError(f"model option '{'.'.join(map(str, first['loc']))}': {first['msg']}",
                        hint="check the model options") from None
