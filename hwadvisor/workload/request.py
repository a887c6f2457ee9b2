"""The workload as a user asked for it: each option given or not (None), before any default.

workload/build.py turns a request into a Workload (the defaults are the Workload model's, each
written once); workload/settle.py settles its engine and precision for the planned hardware.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hwadvisor.models import Device


@dataclass(frozen=True)
class WorkloadRequest:
    """The workload options of estimate, recommend and validate; None means "not given"."""

    model: str | None = None
    phase: str | None = None
    batch: int | None = None
    prompt_len: int | None = None
    gen_len: int | None = None
    weights_dtype: str | None = None
    kv_dtype: str | None = None
    activation_dtype: str | None = None
    optimizer: str | None = None
    grad_accum: int | None = None
    gpus: int | None = None
    nodes: int | None = None
    gpus_per_node: int | None = None
    inter_node_gbps: float | None = None
    activation_checkpointing: bool = False
    engine: str | None = None  # an id, or id==version (--engine vllm==0.6.0)
    engine_options: tuple[str, ...] = ()  # --engine-option KEY=VALUE, as typed
    attention_kernel: str | None = None
    quality: str | None = None  # --quality: lossless, 8-bit, 6-bit or 4-bit (or fp8, int8, int4)
    host_memory_gb: float | None = None  # the planned host's RAM (not a Workload field)

    def with_changes(self, **changes: Any) -> WorkloadRequest:
        """Return a copy with some options set (e.g. the phase a goal implies)."""
        return dataclasses.replace(self, **changes)

    def layout_given(self) -> bool:
        """Tell whether the user said how many GPUs or nodes to plan."""
        return any(v is not None for v in (self.gpus, self.nodes, self.gpus_per_node))

    def devices_per_node(self, most: int) -> int:
        """How many devices of one node to list (at most `most`): the per-node share of the GPUs.

        --gpus-per-node, else --gpus over --nodes, else --gpus, else one. The counts are checked
        against workload/limits.py first, so every command refuses the same values the same way.
        """
        from hwadvisor.workload import limits

        for option, value in (("--gpus", self.gpus), ("--nodes", self.nodes),
                              ("--gpus-per-node", self.gpus_per_node)):
            limits.check(option, value)
        if self.gpus_per_node is not None:
            per_node = self.gpus_per_node
        elif self.gpus is not None:
            per_node = max(self.gpus // (self.nodes or 1), 1)
        else:
            per_node = 1
        return min(per_node, most)

    def planned_count(self) -> int:
        """How many devices to plan: --gpus, else nodes x gpus-per-node, else one."""
        if self.gpus is not None:
            return self.gpus
        if self.gpus_per_node is not None:
            return (self.nodes or 1) * self.gpus_per_node
        return 1


@dataclass(frozen=True)
class Sizing:
    """The hardware a workload is sized for; None where it is not known.

    memory_bytes and device_class choose the default model, device_class the default engine;
    formats, the number formats the device computes in, decide bf16 or fp16 (settle.py).
    """

    memory_bytes: int | None = None
    device_class: object = None
    formats: Sequence[str] | None = None

    @classmethod
    def of(cls, device: Device) -> Sizing:
        """Return the sizing of one device: its memory, class and formats."""
        return cls(device.memory_total_bytes, device.device_class, device.formats)


WORKLOAD_OPTIONS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(WorkloadRequest))
