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
from functools import cached_property

from hwadvisor.models import ModelOptions, Workload


@dataclass
class Layout:
    """The parallel layout one estimate assumes.

    Degrees multiply to the GPU count: gpus = tp x pp x cp x dp. Under fsdp the weights,
    gradients and optimizer states are sharded over the dp x cp ranks (torchtitan's FSDP mesh);
    under hsdp only over the ranks inside one node, replicated across nodes. The degrees are
    computed once (cached): a layout does not change after resolve_layout builds it, and every
    op of an estimate asks for them.
    """

    gpus: int
    strategy: str  # none, ddp, fsdp, hsdp, tp
    nodes: int
    gpus_per_node: int
    training: bool
    tp_size: int | None = None  # requested TP degree (None: the default for the strategy)
    pp: int = 1
    cp: int = 1
    ep: bool = False
    dp_attention: bool = False  # attention data-parallel over the TP group (needs ep)
    notes: list[str] = field(default_factory=list)
    heads: tuple[int, int] | None = None  # (attention heads, KV heads) of the model, if known
    experts: int = 0  # routed experts per MoE layer (0: a dense model)

    @cached_property
    def tp(self) -> int:
        """Tensor-parallel degree (fsdp/hsdp with a tp_size: 2-D, TP inside FSDP groups).

        Never one the engines refuse: the largest size up to the wanted one that splits the
        model's heads (tp_fits_heads), and divides the GPUs it is taken from.
        """
        room = max(1, self.gpus // (self.pp * self.cp))
        if self.strategy in ("fsdp", "hsdp") and self.tp_size is not None:
            return self._runnable(min(self.tp_size, room), room)
        if self.strategy != "tp":
            return 1
        if self.tp_size is not None:
            return self._runnable(min(self.tp_size, room), room)
        if self.training and self.nodes > 1:
            return self._runnable(min(self.gpus_per_node, room), room)
        return self._runnable(room, room)

    def _runnable(self, wanted: int, room: int) -> int:
        """Return the largest TP size <= wanted that splits the heads and divides room."""
        for size in range(max(1, wanted), 0, -1):
            if room % size == 0 and tp_fits_heads(size, self.heads, not self.training) \
                    and tp_fits_node(size, self.gpus_per_node, self.nodes):
                return size
        return 1

    @cached_property
    def dp(self) -> int:
        """Data-parallel degree (model replicas, or TP x PP x CP groups)."""
        return max(1, self.gpus // (self.tp * self.pp * self.cp))

    @cached_property
    def shard_degree(self) -> int:
        """Over how many ranks fsdp/hsdp shard the weights, gradients and optimizer states."""
        if self.strategy == "fsdp":
            return self.dp * self.cp
        if self.strategy == "hsdp":
            return max(1, (self.dp * self.cp) // max(self.nodes, 1))
        return 1

    @cached_property
    def weight_shards(self) -> int:
        """Into how many pieces weights, grads and optimizer states are split per GPU."""
        return self.tp * self.pp * self.shard_degree

    @cached_property
    def ep_degree(self) -> int:
        """Over how many GPUs the routed experts are spread whole (1: no expert parallelism).

        Serving spreads them over the tensor-parallel group (vLLM --enable-expert-parallel,
        SGLang --ep-size = --tp-size). Training takes the largest group up to a node's GPUs
        that divides the experts, the ranks FSDP and TP span, and the node: torchtitan 0.2.2
        (distributed/parallel_dims.py) carves expert_parallel_degree out of dp_shard x cp x tp
        with expert_tensor_parallel_degree 1 (efsdp = dp_shard x cp x tp / ep ranks still
        shard each expert), its dispatch views the experts as ep_degree equal groups
        (expert_parallel.py _token_dispatch), and the EP ranks are the innermost, so a group
        that divides the node's GPUs keeps its all-to-alls on the node's links.
        """
        if not self.ep:
            return 1
        if not self.training:
            return self.tp
        if self.strategy not in ("fsdp", "hsdp"):
            return 1  # modelled over FSDP's shard ranks only (Megatron's DDP + EP is not)
        room = self.expert_room
        for size in range(min(self.gpus_per_node, room), 1, -1):
            if self.experts % size == 0 and room % size == 0 and self.gpus_per_node % size == 0:
                return size
        return 1

    @property
    def expert_room(self) -> int:
        """Training: the ranks one copy of the experts is spread over (dp_shard x cp x tp)."""
        return self.tp * self.shard_degree

    @property
    def expert_shard_degree(self) -> int:
        """Training under EP: the ranks that hold the same experts and FSDP-shard them (efsdp)."""
        return max(1, self.expert_room // self.ep_degree)

    @property
    def layers_per_gpu_fraction(self) -> float:
        """Share of the decoder layers one GPU runs (pipeline stages split them)."""
        return 1.0 / self.pp

    @property
    def attn_dp(self) -> int:
        """Over how many GPUs of the TP group attention runs data-parallel (1: TP attention)."""
        return self.tp if self.dp_attention and self.ep else 1

    @property
    def attn_tp(self) -> int:
        """Tensor-parallel degree of the attention layers (the group's, or 1 under DP attention)."""
        return self.tp // self.attn_dp

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
        """Sequences of one model instance per `batch`: 1.

        `batch` is per data-parallel rank, as torchtitan's local_batch_size and Megatron's
        micro-batch are: a tensor-parallel group shares its sequences, it does not multiply them.
        """
        return 1


def tp_fits_heads(size: int, heads: tuple[int, int] | None, copy_kv: bool = True) -> bool:
    """Tell whether a tensor-parallel size splits the model's attention and KV heads.

    The attention heads must divide evenly over the TP ranks; the KV heads too, or (fewer KV
    heads than ranks) each KV head is copied to a whole number of ranks. vLLM checks exactly
    this (vllm/config: ModelConfig.verify_with_parallel_config, "Total number of attention
    heads must be divisible by tensor parallel size"; get_num_kv_heads replicates KV heads when
    tp > num_kv_heads), as do SGLang and TensorRT-LLM. Training copies no KV head (copy_kv
    False): torchtitan shards wk/wv column-wise and views the slice as whole heads (0.2.2
    models/qwen3/model/model.py xk.view(bs, seqlen, -1, head_dim)), Megatron-LM divides
    num_query_groups by the TP size (megatron/core/transformer/attention.py: divide() asserts it).
    """
    if heads is None or size <= 1:
        return True
    attention, kv = heads
    if attention % size:
        return False
    return kv % size == 0 if kv >= size or not copy_kv else size % kv == 0


def tp_fits_node(size: int, gpus_per_node: int, nodes: int) -> bool:
    """Tell whether TP groups of `size` tile the nodes: whole groups inside each node.

    On 2 nodes x 6 GPUs a TP group of 4 would put GPUs of one group on both nodes (the
    second group takes GPUs 4-7); sizes that divide the node's GPUs, or whole nodes, do not.
    """
    if nodes <= 1 or size <= 1:
        return True
    if size <= gpus_per_node:
        return gpus_per_node % size == 0
    return size % gpus_per_node == 0


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
    pp = max(1, min(options.pipeline_stages, gpus))
    cp = max(1, min(options.context_parallel, gpus // pp))
    spec = workload.spec
    heads = (spec.num_heads, spec.num_kv_heads) if spec is not None else None
    layout = Layout(gpus=gpus, strategy=strategy, nodes=nodes, gpus_per_node=per_node,
                    training=training, tp_size=options.tp_size, pp=pp, cp=cp,
                    ep=(options.expert_parallel or options.dp_attention) and gpus > 1,
                    dp_attention=options.dp_attention and gpus > 1 and not training,
                    notes=notes, heads=heads,
                    experts=spec.num_experts if spec is not None else 0)
    wanted = options.tp_size if options.tp_size is not None else (
        gpus // (pp * cp) if strategy == "tp" else None)
    if wanted is not None and layout.tp < wanted and heads is not None \
            and strategy in ("tp", "fsdp", "hsdp"):
        notes.append(f"tensor parallel {layout.tp}, not {wanted}: {heads[0]} attention and "
                     f"{heads[1]} KV heads do not split over {wanted} GPUs")
    if strategy in ("ddp", "fsdp", "hsdp") and training:
        notes.append(f"batch {workload.batch} per data-parallel rank: global batch "
                     f"{workload.batch * layout.dp * workload.grad_accum}")
    elif strategy in ("ddp", "fsdp", "hsdp"):
        notes.append(f"batch {workload.batch} per replica ({layout.dp} replicas)")
    if strategy == "tp" and training:
        notes.append(f"tensor parallel {layout.tp} with sequence parallelism; batch "
                     f"{workload.batch} per TP group (data-parallel rank)"
                     + (f", data parallel across {layout.dp} groups" if layout.dp > 1 else ""))
    elif strategy == "tp" and layout.dp > 1:
        notes.append(f"tensor parallel {layout.tp} x {layout.dp} replicas")
    if pp > 1 and training:
        notes.append(f"{pp} pipeline stages ({workload.grad_accum} micro-batches per step)")
    elif pp > 1:
        notes.append(f"{pp} pipeline stages of layers: each token runs them one after the other "
                     "(its time is the stages' sum)")
    if layout.attn_dp > 1:
        notes.append(f"data-parallel attention over {layout.attn_dp} GPUs with expert "
                     f"parallelism: each GPU attends {workload.batch} / {layout.attn_dp} of the "
                     "sequences, the attention weights replicated")
    if training and layout.ep_degree > 1:
        notes.append(f"expert parallel {layout.ep_degree}: each GPU holds "
                     f"{layout.experts // layout.ep_degree} of the {layout.experts} routed "
                     "experts of a layer whole; the routed tokens reach them by all-to-all")
    if cp > 1:
        notes.append(f"context parallel {cp}: each sequence split over {cp} GPUs")
    if layout.tp_crosses_nodes:
        notes.append("tensor parallelism across nodes: its all-reduces run over the inter-node "
                     "network and are counted fully exposed")
    return layout
