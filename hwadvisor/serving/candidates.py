"""The candidates of the search under latency targets: what a config can be, and its replica.

The engine's own knobs (serving/search.py judges them): tensor parallelism within a node,
weights and KV-cache formats within the --quality budget (workload/quality.py) and the device's
formats, the drafters the engine runs for the model, the step's token budget and the sequences
a replica runs at once. A family (layout and formats) sets a replica's step times; its replica
holds the step model, the screen's tables and its KV pools.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hwadvisor.engines import engine_for
from hwadvisor.models import Device, ModelOptions, Workload
from hwadvisor.models.serving import Load, Targets
from hwadvisor.perfmodel.calibration import Calibration
from hwadvisor.perfmodel.drafters import DRAFTERS, published_for_model
from hwadvisor.perfmodel.steps import StepModel
from hwadvisor.serving.scheduler import kv_pool_tokens, policy_of, slot_of
from hwadvisor.serving.screen import Shape, Table, length_quantile
from hwadvisor.workload.quality import within

# The knobs' values. Paged engines (vLLM --max-num-seqs 256-1024 and --max-num-batched-tokens
# 2048-16384 by GPU, SGLang, TensorRT-LLM) run hundreds of sequences; slot-based servers
# (llama-server --parallel, default 4, and --batch-size, default 2048) run a few.
PAGED_MAX_SEQS = (8, 16, 32, 64, 128, 256, 512, 1024)
PAGED_STEP_TOKENS = (2048, 4096, 8192, 16384)
SLOT_MAX_SEQS = (1, 2, 4, 8, 16, 32, 64)
SLOT_STEP_TOKENS = (512, 1024, 2048, 4096)
TENSOR_PARALLEL = (1, 2, 4, 8)


@dataclass(frozen=True)
class Family:
    """What sets a replica's step times: its layout and formats."""

    tp: int
    weights_dtype: str
    kv_dtype: str
    # GPUs the layers are split over, run one after another (llama.cpp's default
    # --split-mode layer): more memory for the weights and the cache, no faster a step
    layers_over: int = 1

    @property
    def gpus(self) -> int:
        """GPUs one replica of this family takes."""
        return self.tp * self.layers_over


@dataclass(frozen=True)
class Candidate:
    """One config of the search: a family, a drafter and the scheduler's knobs."""

    family: Family
    drafter: str | None
    max_seqs: int
    step_tokens: int
    prefix_caching: bool
    kv_unified: bool = False  # llama-server --kv-unified (engines with stream_per_slot)


@dataclass
class Replica:
    """A family's replica: its workload, options, step model and tables."""

    family: Family
    workload: Workload
    options: ModelOptions
    steps: StepModel
    tables: dict[tuple[bool, bool], Table] = field(default_factory=dict)  # prefix, pool-wide
    pools: dict[int, int] = field(default_factory=dict)  # KV pool tokens by step budget
    slot: int | None = None  # tokens a slot holds, where the cache is allocated slot by slot


@dataclass(frozen=True)
class Inputs:
    """What the search plans for."""

    workload: Workload  # settled, on the engine's defaults
    device: Device
    options: ModelOptions
    load: Load
    targets: Targets
    gpus: int | None  # --gpus, or None: the fewest
    per_node: int  # GPUs a node holds (tensor parallelism stays within one)
    calibration: Calibration | None = None


def searchable(workload: Workload) -> bool:
    """Tell whether the engine batches continuously (a static batch has no knobs to search)."""
    return policy_of(workload) != "static"


def weight_formats(inputs: Inputs, quality: str | None = None) -> list[str]:
    """Return the weight formats a replica may take: its own, then 8- and 4-bit within budget.

    Each kind in the engine's own name (llama.cpp's Q8_0 and Q4_K_M, MLX's 8- and 4-bit);
    `quality` overrides the workload's budget (the search's fallback to fit).
    """
    wl, device = inputs.workload, inputs.device
    engine = engine_for(wl)
    out: list[str] = [wl.weights_dtype]
    for kind in ("fp8", "int8", "int4"):
        fmt = engine.own_formats.get(kind, kind)
        if fmt in out or fmt not in engine.weight_formats:
            continue
        if fmt == "fp8" and "fp8" not in device.formats:
            continue  # FP8 GEMMs need the hardware (Hopper, Ada, MI300)
        if kind == "int8" and "fp8" in out:
            # one 8-bit format is enough: FP8 keeps the 16-bit accuracy where INT8 W8A8 loses
            # 1-3% (workload/quality.py), at the same tensor-core rate on Hopper and MI300
            continue
        if engine.cannot(f"{kind}-weights", str(device.device_class)):
            continue
        if within(fmt, wl.weights_dtype, quality or wl.quality):
            out.append(fmt)
    return out


def kv_formats(inputs: Inputs) -> list[str]:
    """Return the KV-cache formats: the workload's, and FP8 where the engine has it in budget."""
    wl = inputs.workload
    engine = engine_for(wl)
    out: list[str] = [wl.kv_dtype]
    device = inputs.device
    if "fp8" not in out and within("fp8", wl.kv_dtype, wl.quality) and \
            engine.kv_format_runs("fp8", device.vendor, device.compute_capability):
        out.append("fp8")
    return out


def _degrees(inputs: Inputs) -> list[int]:
    """Return the GPU counts a replica may span: within a node, dividing the GPUs asked for."""
    most = min(inputs.per_node, inputs.gpus or inputs.per_node)
    return [n for n in TENSOR_PARALLEL
            if n <= most and (inputs.gpus is None or inputs.gpus % n == 0)]


def tensor_parallel(inputs: Inputs) -> list[int]:
    """Return the tensor-parallel degrees within a node that divide the GPUs asked for."""
    engine = engine_for(inputs.workload)
    if engine.cannot("tensor-parallel-in-node", str(inputs.device.device_class)):
        return [1]
    return _degrees(inputs)


def layouts(inputs: Inputs) -> list[tuple[int, int]]:
    """Return the (tensor-parallel, layer-split) layouts of a replica within a node.

    Tensor parallelism where the engine splits matmuls; for an engine that spreads a model over
    GPUs by layers unless told otherwise (llama.cpp `--split-mode layer`, its `[defaults]
    sharding = "layers"`), the layer split over 2, 4 or 8 GPUs too.
    """
    out = [(tp, 1) for tp in tensor_parallel(inputs)]
    if engine_for(inputs.workload).defaults.sharding == "layers":
        out += [(1, k) for k in _degrees(inputs) if k > 1]
    return out


def drafters(inputs: Inputs) -> list[str | None]:
    """No drafter, then each the engine runs for this model (a checkpoint only if published)."""
    wl = inputs.workload
    engine = engine_for(wl)
    if engine.cannot("speculative-decoding", str(inputs.device.device_class)):
        return [None]
    form = engine.config_for("inference").draft_source
    out: list[str | None] = [None]
    for drafter_id, d in DRAFTERS.items():
        if not engine.says("speculative-decoding", drafter_id, "inference"):
            continue
        if drafter_id == "mtp":
            if wl.spec is not None and wl.spec.mtp_layers:
                out.append(drafter_id)
            continue
        if d.needs and published_for_model(drafter_id, wl.model, form) is None:
            continue
        out.append(drafter_id)
    return out


def drafter_options(options: ModelOptions, drafter_id: str | None,
                     workload: Workload) -> ModelOptions:
    """Return the options of a replica run with this drafter (None: no speculation)."""
    if drafter_id is None:
        return options.model_copy(update={"speculative_drafter": None,
                                          "speculative_draft_tokens": None,
                                          "speculative_tokens_per_step": 1.0})
    d = DRAFTERS[drafter_id]
    drafted = d.draft_tokens
    if drafter_id == "mtp" and workload.spec is not None and workload.spec.mtp_layers:
        drafted = workload.spec.mtp_layers
    return options.model_copy(update={"speculative_drafter": drafter_id,
                                      "speculative_draft_tokens": drafted,
                                      "speculative_tokens_per_step": d.accepted_chat})


def knob_values(workload: Workload) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Return the sequence limits and step budgets searched: a paged engine's or a slot's."""
    if engine_for(workload).defaults.paged_kv:
        return PAGED_MAX_SEQS, PAGED_STEP_TOKENS
    return SLOT_MAX_SEQS, SLOT_STEP_TOKENS


def replica(inputs: Inputs, family: Family) -> Replica | None:
    """Build a family's replica; None when its layout or formats do not hold the model.

    A layer split runs its GPUs one after another: a step takes the time of one GPU holding
    every layer (the stages' parts summed; the hidden state's hop between cards is not
    counted), while the weights and the KV pool spread over the GPUs (scheduler.kv_pool_tokens
    `stages`).
    """
    wl = inputs.workload.model_copy(update={
        "gpus": family.tp, "nodes": 1, "gpus_per_node": family.tp, "batch": 1,
        "weights_dtype": family.weights_dtype, "kv_dtype": family.kv_dtype})
    options = inputs.options.model_copy(update={
        "sharding": "tp" if family.tp > 1 else "none",
        "tp_size": family.tp if family.tp > 1 else None, "pipeline_stages": 1,
        "offload_fraction": 0.0})
    options = drafter_options(options, None, wl)
    steps = StepModel(wl, inputs.device, options, inputs.calibration)
    if steps.setup.layout.tp != family.tp or steps.replicas != 1:
        return None  # the heads do not split over this many GPUs
    return Replica(family, wl, options, steps, slot=slot_tokens(wl, inputs.load))


def slot_tokens(workload: Workload, load: Load) -> int | None:
    """Tokens each slot holds where the engine allocates its cache slot by slot, else None.

    llama-server (paged_kv false) splits --ctx-size evenly over --parallel slots and a request
    longer than its slot is cut short: a slot holds the load's p99 prompt plus p99 output,
    padded as the cache is, and never more than the model reads (scheduler.slot_of).
    """
    if engine_for(workload).defaults.paged_kv:
        return None
    need = length_quantile(load.prompt, 99) + length_quantile(load.output, 99)
    return slot_of(need, workload.spec.window if workload.spec else None)


def pool_of(model: Replica, inputs: Inputs, step_tokens: int) -> int:
    """Return the tokens of KV cache a replica holds at a step budget (kept per budget)."""
    pool = model.pools.get(step_tokens)
    if pool is None:
        pool = kv_pool_tokens(model.steps, model.workload, inputs.device, model.options,
                              step_tokens, model.family.layers_over)
        model.pools[step_tokens] = pool
    return pool


def table_of(model: Replica, shape: Shape, prefix_caching: bool,
             pool_wide: bool = False) -> Table:
    """Return the replica's step table for the load's shape (kept per prefix caching and pool)."""
    table = model.tables.get((prefix_caching, pool_wide))
    if table is None:
        like = next((t for t in model.tables.values() if t.pool_wide == pool_wide), None)
        table = Table(model.steps, shape.prompt + shape.output / 2.0, shape.uncached, like,
                      pool_wide)
        model.tables[(prefix_caching, pool_wide)] = table
    return table


def prefix_caching(inputs: Inputs) -> bool:
    """Tell whether candidates cache prompt prefixes: wherever the engine can.

    A cache hit only takes prompt work away in the model (no cost is counted for it), so a
    candidate with the cache off never serves more: it is not searched, which halves the search
    of a load with a shared prefix. Off only where the engine has no prefix cache at all; a load
    without a shared prefix is the same either way (on: no flag to emit).
    """
    engine = engine_for(inputs.workload)
    if inputs.load.prefix_share <= 0:
        return True
    can = engine.defaults.prefix_caching or "prefix-caching" in engine.config_for("inference").steps
    return can and not engine.cannot("prefix-caching", str(inputs.device.device_class))
