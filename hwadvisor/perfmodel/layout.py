"""How the work is spread over GPUs: sharding strategy, tensor- and data-parallel degrees.

What `batch` means, so that strategies compare at equal work:
- training: sequences per GPU per micro-batch under every strategy. Under ddp/fsdp each GPU
  runs `batch`; a tensor-parallel group of t GPUs runs t x batch together. The global batch is
  batch x gpus either way, so step times of ddp, fsdp and tp are comparable.
- inference: sequences one model instance serves at once: per GPU under ddp/fsdp (replicas),
  shared by the whole tensor-parallel group under tp (a latency-oriented TP deployment).
Training with tp over several nodes keeps TP inside the node (the NVLink domain) and runs data
parallelism across nodes (Megatron's usual 2-D layout); inference with tp over several nodes
spreads TP over all GPUs and counts its all-reduces as exposed network traffic.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hwadvisor.models import ModelOptions, Workload


@dataclass
class Layout:
    """The parallel layout one estimate assumes."""

    gpus: int
    strategy: str  # none, ddp, fsdp, tp
    nodes: int
    gpus_per_node: int
    training: bool
    notes: list[str] = field(default_factory=list)

    @property
    def tp(self) -> int:
        """Tensor-parallel degree."""
        if self.strategy != "tp":
            return 1
        if self.training and self.nodes > 1:
            return max(1, min(self.gpus_per_node, self.gpus))
        return self.gpus

    @property
    def dp(self) -> int:
        """Data-parallel degree (model replicas or TP groups)."""
        if self.strategy in ("ddp", "fsdp"):
            return self.gpus
        return max(1, self.gpus // self.tp)

    @property
    def weight_shards(self) -> int:
        """Into how many pieces weights, grads and optimizer states are split per GPU."""
        if self.strategy == "fsdp":
            return self.gpus
        return self.tp

    @property
    def tp_crosses_nodes(self) -> bool:
        """True when one tensor-parallel group spans more than one node."""
        return self.tp > self.gpus_per_node

    @property
    def multi_node(self) -> bool:
        """True when the GPUs span more than one node."""
        return self.nodes > 1

    @property
    def batch_factor(self) -> int:
        """Sequences of the group per `batch`: t under training TP (batch is per GPU), else 1."""
        return self.tp if self.training else 1


def resolve_layout(workload: Workload, options: ModelOptions) -> Layout:
    """Pick the strategy: the option's, or the usual default when gpus > 1 and none is given."""
    notes: list[str] = []
    gpus = workload.gpus
    nodes = workload.nodes
    per_node = workload.gpus_per_node or max(1, gpus // max(nodes, 1))
    training = workload.phase == "training"
    strategy = options.sharding
    if gpus == 1:
        if strategy != "none":
            notes.append(f"sharding '{strategy}' has no effect on one GPU")
        strategy = "none"
    elif strategy == "none":
        # Unspecified: training frameworks default to DDP; serving engines (vLLM, SGLang,
        # TensorRT-LLM) spread one model over GPUs with tensor parallelism.
        strategy = "ddp" if training else "tp"
        notes.append(f"{gpus} GPUs without a sharding choice: assumed {strategy} "
                     f"({'training default' if training else 'serving engines default'})")
    layout = Layout(gpus=gpus, strategy=strategy, nodes=nodes, gpus_per_node=per_node,
                    training=training, notes=notes)
    if strategy in ("ddp", "fsdp") and training:
        notes.append(f"batch {workload.batch} per GPU: global batch {workload.batch * gpus}")
    elif strategy in ("ddp", "fsdp"):
        notes.append(f"batch {workload.batch} per replica ({gpus} replicas)")
    if strategy == "tp" and training:
        notes.append(f"tensor parallel {layout.tp} with sequence parallelism; batch "
                     f"{workload.batch} per GPU ({workload.batch * layout.tp} per TP group)"
                     + (f", data parallel across {layout.dp} groups" if layout.dp > 1 else ""))
    if layout.tp_crosses_nodes:
        notes.append("tensor parallelism across nodes: its all-reduces run over the inter-node "
                     "network and are counted fully exposed")
    return layout
