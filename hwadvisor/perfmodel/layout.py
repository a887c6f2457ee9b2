"""How the work is spread over GPUs: sharding strategy, tensor- and data-parallel degrees."""

from __future__ import annotations

from dataclasses import dataclass, field

from hwadvisor.models import ModelOptions, Workload


@dataclass
class Layout:
    """The parallel layout one estimate assumes.

    `batch` is per data-parallel replica (per GPU under ddp/fsdp, shared by all GPUs under tp).
    """

    gpus: int
    strategy: str  # none, ddp, fsdp, tp
    nodes: int
    gpus_per_node: int
    notes: list[str] = field(default_factory=list)

    @property
    def weight_shards(self) -> int:
        """Into how many pieces weights, grads and optimizer states are split per GPU."""
        return self.gpus if self.strategy in ("fsdp", "tp") else 1

    @property
    def tp(self) -> int:
        """Tensor-parallel degree."""
        return self.gpus if self.strategy == "tp" else 1

    @property
    def dp(self) -> int:
        """Data-parallel degree (replicas each running `batch`)."""
        return self.gpus if self.strategy in ("ddp", "fsdp") else 1

    @property
    def multi_node(self) -> bool:
        """True when the GPUs span more than one node."""
        return self.nodes > 1


def resolve_layout(workload: Workload, options: ModelOptions) -> Layout:
    """Pick the strategy: the option's, or the usual default when gpus > 1 and none is given."""
    notes: list[str] = []
    gpus = workload.gpus
    nodes = workload.nodes
    per_node = workload.gpus_per_node or max(1, gpus // max(nodes, 1))
    strategy = options.sharding
    if gpus == 1:
        if strategy != "none":
            notes.append(f"sharding '{strategy}' has no effect on one GPU")
        strategy = "none"
    elif strategy == "none":
        # Unspecified: training frameworks default to DDP; serving engines (vLLM, SGLang,
        # TensorRT-LLM) spread one model over GPUs with tensor parallelism.
        strategy = "ddp" if workload.phase == "training" else "tp"
        notes.append(f"{gpus} GPUs without a sharding choice: assumed {strategy} "
                     f"({'training default' if strategy == 'ddp' else 'serving engines default'})")
    if strategy in ("ddp", "fsdp"):
        notes.append(f"batch {workload.batch} is per data-parallel replica ({gpus} replicas)")
    if strategy == "tp" and nodes > 1:
        notes.append("tensor parallelism across nodes: its all-reduces run over the inter-node "
                     "network and are counted fully exposed")
    return Layout(gpus=gpus, strategy=strategy, nodes=nodes, gpus_per_node=per_node, notes=notes)
