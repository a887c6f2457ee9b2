"""Kernel-launch overhead: kernels per forward / step times the cost of one launch."""

from __future__ import annotations

import math

from hwadvisor.perfmodel import constants as C
from hwadvisor.perfmodel.context import Setup


def launch_cost_s(setup: Setup) -> float:
    """Seconds per kernel launch: ~5 us in eager PyTorch, ~1 us under CUDA graph replay."""
    return C.LAUNCH_S_GRAPH if setup.options.cuda_graphs else C.LAUNCH_S_EAGER


def kernels_per_forward(setup: Setup) -> float:
    """Kernels of one forward pass (eager ~20 per layer, compiled ~10, MoE routing extra)."""
    compiled = setup.options.compiled
    per_layer = C.KERNELS_PER_LAYER_COMPILED if compiled else C.KERNELS_PER_LAYER_EAGER
    outside = C.KERNELS_OUTSIDE_LAYERS_COMPILED if compiled else C.KERNELS_OUTSIDE_LAYERS_EAGER
    moe_extra = C.MOE_EXTRA_KERNELS_COMPILED if compiled else C.MOE_EXTRA_KERNELS_EAGER
    return setup.spec.num_layers * per_layer + setup.parts.moe_layers * moe_extra + outside


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


def forward_launch_s(setup: Setup) -> float:
    """Launch overhead of one forward (a prefill or one decode step)."""
    return kernels_per_forward(setup) * launch_cost_s(setup)


def train_launch_s(setup: Setup) -> float:
    """Launch overhead of one training step.

    Forward + backward (2x) (+ recompute) per micro-batch, times grad_accum, plus the
    optimizer's kernels.
    """
    wl = setup.workload
    passes = 1.0 + C.BACKWARD_KERNEL_FACTOR + (1.0 if wl.activation_checkpointing else 0.0)
    kernels = kernels_per_forward(setup) * passes * wl.grad_accum + optimizer_kernels(setup)
    return kernels * launch_cost_s(setup)
