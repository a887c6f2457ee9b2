"""The workload options every command shares (estimate, recommend, validate), defined once.

Use them as annotations, then collect the values by name with workload_values:

    def estimate(model: ModelOpt = None, phase: PhaseOpt = None, batch: BatchOpt = None, ...):
        values = workload_values(locals())          # first statement: only the parameters
        workload = workload_from_options(values, device_memory_bytes, device_class)

Every option defaults to None ("not given"); build_workload fills the defaults and checks
ranges and choices itself, so the error text (and exit code 2) is hwadvisor's own. Values are
plain str/int, not Enums, for the same reason.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Optional

import typer

from hwadvisor.models.workload import Workload
from hwadvisor.workload import (
    DTYPES,
    OPTIMIZERS,
    PHASES,
    build_workload,
    default_workload,
    list_presets,
)

__all__ = [
    "ActCkptOpt",
    "ActivationDtypeOpt",
    "BatchOpt",
    "GenLenOpt",
    "GpusOpt",
    "GpusPerNodeOpt",
    "GradAccumOpt",
    "InterNodeGbpsOpt",
    "KvDtypeOpt",
    "ModelOpt",
    "NodesOpt",
    "OptimizerOpt",
    "PhaseOpt",
    "PromptLenOpt",
    "WORKLOAD_OPTIONS",
    "WeightsDtypeOpt",
    "build_workload",
    "default_workload",
    "list_presets",
    "workload_from_options",
    "workload_values",
]

_PANEL = "Workload"
_DTYPE_LIST = ", ".join(DTYPES)

# Optional[...] rather than "X | None": typer resolves these at runtime on Python 3.10 too.
ModelOpt = Annotated[
    Optional[str],  # noqa: UP007, UP045
    typer.Option(
        "--model",
        help="Preset id or path to a Hugging Face config.json (or its folder). Presets: "
        + ", ".join(list_presets())
        + ". Default: chosen for the device (llama-3-8b on a 24 GB+ GPU, else llama-3.2-1b).",
        rich_help_panel=_PANEL,
        show_default=False,
    ),
]
PhaseOpt = Annotated[
    Optional[str],  # noqa: UP007, UP045
    typer.Option("--phase", help=f"{' or '.join(PHASES)} [default: inference]",
                 rich_help_panel=_PANEL, show_default=False),
]
BatchOpt = Annotated[
    Optional[int],  # noqa: UP007, UP045
    typer.Option("--batch", help="Sequences per step (per GPU) [default: 1]",
                 rich_help_panel=_PANEL, show_default=False),
]
PromptLenOpt = Annotated[
    Optional[int],  # noqa: UP007, UP045
    typer.Option("--prompt-len", help="Prompt tokens; the sequence length in training "
                 "[default: 2048]", rich_help_panel=_PANEL, show_default=False),
]
GenLenOpt = Annotated[
    Optional[int],  # noqa: UP007, UP045
    typer.Option("--gen-len", help="Generated tokens (inference) [default: 256; 0 in training]",
                 rich_help_panel=_PANEL, show_default=False),
]
WeightsDtypeOpt = Annotated[
    Optional[str],  # noqa: UP007, UP045
    typer.Option("--weights-dtype", help=f"Weights dtype: {_DTYPE_LIST} [default: bf16]",
                 rich_help_panel=_PANEL, show_default=False),
]
KvDtypeOpt = Annotated[
    Optional[str],  # noqa: UP007, UP045
    typer.Option("--kv-dtype", help=f"KV-cache dtype: {_DTYPE_LIST} [default: bf16]",
                 rich_help_panel=_PANEL, show_default=False),
]
ActivationDtypeOpt = Annotated[
    Optional[str],  # noqa: UP007, UP045
    typer.Option("--activation-dtype", help=f"Activation dtype: {_DTYPE_LIST} [default: bf16]",
                 rich_help_panel=_PANEL, show_default=False),
]
OptimizerOpt = Annotated[
    Optional[str],  # noqa: UP007, UP045
    typer.Option("--optimizer", help=f"Training optimizer: {', '.join(OPTIMIZERS)} "
                 "[default: adamw]", rich_help_panel=_PANEL, show_default=False),
]
GradAccumOpt = Annotated[
    Optional[int],  # noqa: UP007, UP045
    typer.Option("--grad-accum", help="Gradient accumulation steps [default: 1]",
                 rich_help_panel=_PANEL, show_default=False),
]
GpusOpt = Annotated[
    Optional[int],  # noqa: UP007, UP045
    typer.Option("--gpus", help="GPUs in all [default: 1, or nodes x gpus-per-node]",
                 rich_help_panel=_PANEL, show_default=False),
]
NodesOpt = Annotated[
    Optional[int],  # noqa: UP007, UP045
    typer.Option("--nodes", help="Nodes, for multi-node planning [default: 1]",
                 rich_help_panel=_PANEL, show_default=False),
]
GpusPerNodeOpt = Annotated[
    Optional[int],  # noqa: UP007, UP045
    typer.Option("--gpus-per-node", help="GPUs per node (sets --gpus = nodes x this)",
                 rich_help_panel=_PANEL, show_default=False),
]
InterNodeGbpsOpt = Annotated[
    Optional[float],  # noqa: UP007, UP045
    typer.Option("--inter-node-gbps", help="Network bandwidth between nodes, GB/s per GPU, "
                 "one direction (400 Gb/s InfiniBand NDR = 50)", rich_help_panel=_PANEL,
                 show_default=False),
]
ActCkptOpt = Annotated[
    bool,
    typer.Option("--activation-checkpointing/--no-activation-checkpointing",
                 help="Recompute activations in the backward pass (training)",
                 rich_help_panel=_PANEL),
]


# The parameter names of the options above, as build_workload takes them.
WORKLOAD_OPTIONS: tuple[str, ...] = (
    "model", "phase", "batch", "prompt_len", "gen_len", "weights_dtype", "kv_dtype",
    "activation_dtype", "optimizer", "grad_accum", "gpus", "nodes", "gpus_per_node",
    "inter_node_gbps", "activation_checkpointing",
)


def workload_values(params: Mapping[str, object]) -> dict[str, object]:
    """Pick the workload options out of a command's parameters (e.g. its locals()), by name."""
    return {name: params.get(name) for name in WORKLOAD_OPTIONS}


def workload_from_options(
    options: Mapping[str, object],
    device_memory_bytes: int | None = None,
    device_class: object = None,
) -> Workload:
    """build_workload from a dict of the option values by parameter name (e.g. locals())."""
    return build_workload(
        **workload_values(options),  # type: ignore[arg-type]
        device_memory_bytes=device_memory_bytes,
        device_class=device_class,
    )
