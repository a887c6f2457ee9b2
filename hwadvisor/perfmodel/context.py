"""The resolved inputs one estimate works from, passed to every part of the model."""

from __future__ import annotations

from dataclasses import dataclass, field

from hwadvisor.models import Device, ModelOptions, ModelSpec, Workload
from hwadvisor.perfmodel.constants import bytes_per_element
from hwadvisor.perfmodel.layout import Layout
from hwadvisor.perfmodel.resources import Resources
from hwadvisor.workload.params import ParamBreakdown


@dataclass
class Setup:
    """Workload, spec, options, parameter breakdown, layout and device figures together."""

    workload: Workload
    spec: ModelSpec
    options: ModelOptions
    device: Device
    parts: ParamBreakdown
    layout: Layout
    res: Resources
    assumptions: list[str] = field(default_factory=list)

    @property
    def training(self) -> bool:
        """True for a training workload."""
        return self.workload.phase == "training"

    @property
    def batch(self) -> int:
        """Sequences one GPU's model instance (or TP group) runs per micro-batch / step."""
        return self.workload.batch * self.layout.batch_factor

    @property
    def act_bytes(self) -> float:
        """Bytes per activation element: fp32 when training without mixed precision."""
        if self.training and not self.options.mixed_precision:
            return 4.0
        return bytes_per_element(self.workload.activation_dtype)

    @property
    def unified_memory(self) -> bool:
        """True when accelerator and host share memory (offload then saves nothing)."""
        return self.device.unified_memory or self.res.device_class in ("cpu", "apple-silicon",
                                                                       "mobile-soc")

    @property
    def offload_fraction(self) -> float:
        """Share of weights kept in host RAM (0 on unified memory, where it means nothing)."""
        return 0.0 if self.unified_memory else self.options.offload_fraction

    @property
    def tokens_per_forward(self) -> float:
        """Tokens per sequence one decode forward yields (speculative decoding raises it)."""
        return self.options.speculative_tokens_per_step

    @property
    def verify_tokens(self) -> float:
        """Tokens per sequence the decode forward processes: the drafts plus one of its own.

        Without a stated draft length, as many as are accepted (the verification of rejected
        drafts is then not charged).
        """
        drafted = self.options.speculative_draft_tokens
        if drafted is None or self.tokens_per_forward <= 1.0:
            return self.tokens_per_forward
        return max(float(drafted + 1), self.tokens_per_forward)
