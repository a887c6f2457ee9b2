"""Kernel floors and host time: what a step costs beyond its ops' rooflines.

The GPU pays a fixed time per kernel (efficiency.kernel_floor_s). The host pays per kernel it
launches one by one in eager mode (EAGER_OP_S x the engine's factor: the Python and dispatch
around each op), or one graph launch under CUDA graphs, plus the engine's exposed per-step
work (scheduling, sampling, building the graph). Eager launches run ahead of the GPU, so a
step takes max(GPU time, launch time) plus the exposed host work: the host decides only when
it is the slower of the two.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hwadvisor.perfmodel import constants as C
from hwadvisor.perfmodel import efficiency as E
from hwadvisor.perfmodel.compute import Phase
from hwadvisor.perfmodel.context import Setup


@dataclass
class StepTime:
    """One step's time: the ops' rooflines, the kernel floors, the host, and the total."""

    busy_s: float  # sum of the ops' roofline times
    floors_s: float  # kernels x fixed GPU time per kernel
    launch_s: float  # the host's per-kernel launch time (overlaps the GPU)
    host_s: float  # the engine's exposed per-step host work
    kernels: float

    @property
    def gpu_s(self) -> float:
        """GPU time: rooflines plus floors."""
        return self.busy_s + self.floors_s

    @property
    def step_s(self) -> float:
        """The step: the slower of GPU and launches, plus the exposed host work."""
        return max(self.gpu_s, self.launch_s) + self.host_s

    @property
    def overhead_s(self) -> float:
        """Everything beyond the rooflines: floors, launches the GPU waited for, host work."""
        return self.step_s - self.busy_s


def eager_op_s(setup: Setup) -> float:
    """Host seconds per eager kernel: the option's figure, else the model's host's, x engine's.

    The model's figure is the H200 host's bare op scaled by the device class's typical host
    (HOST_OP_SCALE); a measured launch latency (calibration) scales it again.
    """
    base = setup.options.eager_op_s or (
        C.EAGER_OP_S * C.HOST_OP_SCALE.get(setup.res.device_class, 1.0))
    factor = E.engine_time(setup.workload, setup.res.family).host_op_factor
    return base * factor * setup.res.host_scale


def graphs_on(setup: Setup) -> bool:
    """CUDA graphs replay this phase (inference only: training steps run eagerly)."""
    return setup.options.cuda_graphs and not setup.training


def graph_batch_limit(setup: Setup) -> int | None:
    """Return the largest decode batch the engine's default CUDA graphs cover here (None: any).

    The engine's data file states it per GPU memory and TP degree (costs.graph_limits: vLLM
    captures up to min(2 x max_num_seqs, 512) sequences, SGLang's cuda_graph_max_bs follows the
    GPU's memory and TP); a larger decode step finds no captured graph and runs eagerly.
    """
    from hwadvisor.engines.schema import graph_batch_limit as limit_for

    limits = E.engine_time(setup.workload, setup.res.family).graph_limits
    memory = setup.device.memory_total_bytes
    if not limits or not memory:
        return None
    return limit_for(limits, memory / 2**30, setup.layout.tp)


def decode_graphed(setup: Setup) -> bool:
    """CUDA graphs replay the decode step: graphs on and the batch within the captured sizes."""
    if not graphs_on(setup):
        return False
    limit = graph_batch_limit(setup)
    return limit is None or setup.batch <= limit


def host_step_s(setup: Setup, graphed: bool = False) -> float:
    """Return the engine's exposed host work per forward (host_overhead_s overrides).

    graphed: the forward replays as a CUDA graph, so an engine that prepares the next step
    while the GPU replays this one exposes less (its costs' host_s_graphed).
    """
    if setup.options.host_overhead_s is not None:
        return setup.options.host_overhead_s
    costs = E.engine_time(setup.workload, setup.res.family)
    if graphed and setup.batch > 1 and costs.host_s_graphed_batched is not None:
        return costs.host_s_graphed_batched
    if graphed and costs.host_s_graphed is not None:
        return costs.host_s_graphed
    return costs.host_s


def step_time(setup: Setup, phase: Phase, forwards: float = 1.0,
              graphed: bool | None = None) -> StepTime:
    """Time of a phase of `forwards` forwards (host work counted once per forward).

    graphed: whether CUDA graphs replay it (None: whenever graphs are on; decode passes
    decode_graphed, which also checks the engine's largest captured batch).
    """
    floors = phase.kernels * setup.res.kernel_floor_s + phase.fixed_s
    if graphed is None:
        graphed = graphs_on(setup)
    if graphed:
        launch = forwards * C.GRAPH_NODE_S * 10.0  # one cudaGraphLaunch ~10 us
    else:
        launch = phase.host_kernels * eager_op_s(setup)
    return StepTime(phase.busy_s, floors, launch, forwards * host_step_s(setup, graphed),
                    phase.kernels)


def parameter_tensors(setup: Setup) -> int:
    """Parameter tensors the optimizer walks (Llama-style: 4 attention + 3 MLP + 2 norms/layer)."""
    spec = setup.spec
    per_layer = 9 + (3 if spec.qkv_bias else 0)
    moe = setup.parts.moe_layers * (3 * spec.num_experts + 1)
    return spec.num_layers * per_layer + moe + 3


def optimizer_kernels(setup: Setup) -> float:
    """Kernels of one optimizer step: foreach ~8 ops per chunk of tensors, fused 1."""
    ops = C.OPT_OPS_FUSED if setup.options.fused_optimizer else C.OPT_OPS_UNFUSED
    tensors = math.ceil(parameter_tensors(setup) / setup.layout.weight_shards)
    return ops * math.ceil(max(tensors, 1) / C.OPT_TENSORS_PER_LAUNCH)
