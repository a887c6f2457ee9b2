"""The profile file's schema: one device's datasheet figures, each group with its sources.

Each file in profiles/ (shipped as the package ``hwadvisor.profiles_data``) describes one device
with its vendor sources; :class:`Profile` is their schema. Peaks are DENSE figures (sparse
datasheet figures halved, said so in the file's notes); ``int8`` is in TOPS. ``fp16_acc16`` is
the FP16 tensor rate with FP16 accumulate, stated only where it differs from ``fp16`` (the
FP32-accumulate rate PyTorch's matmuls run at): GeForce cards from Turing on run FP16 with FP32
accumulate at half the FP16-accumulate rate (NVIDIA's Turing, GA102, Ada and RTX Blackwell
whitepapers), professional and datacenter cards run both at one rate.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from hwadvisor.models import DeviceClass
from hwadvisor.models.hardware import FAMILIES, ComputePath, GpuLinkKind

GIB = 2**30
# GPU and DRAM vendors count memory in binary units: the H200's "141 GB" reads 143771 MiB
# (140.4 GiB) in nvidia-smi, so memory_gib converts with 2**30.

PEAK_FORMATS = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp16_acc16", "fp8", "fp6", "fp4", "int8")
SOURCE_GROUPS = (
    "memory", "bandwidth", "compute", "power", "interconnect", "architecture", "match", "mobile",
    "npu", "system", "variants",
)
_ID_RE = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
PCI_HEX_RE = re.compile(r"^[0-9a-f]{4}$")


class _ProfileBase(BaseModel):
    # Built on first validation: the probe of a host without a GPU never needs a profile.
    model_config = ConfigDict(extra="forbid", defer_build=True)


class ProfileInterconnect(_ProfileBase):
    """Links of one device, as the datasheet states them."""

    pcie_generation: int | None = None
    pcie_lanes: int | None = None
    nvlink_version: int | None = None
    nvlink_gbps_bidirectional: float | None = Field(
        None, description="NVLink total per GPU, both directions, GB/s (NVIDIA's headline figure)"
    )
    fabric: str | None = Field(None, description="Other GPU-GPU fabric, e.g. AMD Infinity Fabric")
    fabric_gbps_bidirectional: float | None = None
    network_gbps_per_gpu: float | None = Field(
        None, gt=0, description="Scale-out network per GPU in the vendor's reference system, "
        "one direction, GB/s (planning across nodes uses it when --inter-node-gbps is not given)"
    )
    gpu_link_kind: GpuLinkKind | None = Field(
        None, description="How this GPU reaches its peers: nvlink, nvlink-bridge, xgmi or pcie"
    )
    gpu_link_gbps: float | None = Field(
        None, gt=0, description="That link's bandwidth per GPU, ONE direction, GB/s"
    )
    gpu_link_domain: int | None = Field(
        None, ge=1, description="How many GPUs the link joins in the reference system "
        "(8 on HGX/DGX/MI300X boards, 2 for bridged card pairs, 1 when there is none)"
    )
    gpu_peer_access: bool | None = Field(
        None, description="Whether two of these GPUs reach each other's memory directly (CUDA "
        "peer access over PCIe); false where the driver refuses it (GeForce RTX 40 and 50 "
        "series): NCCL then stages every transfer through host memory"
    )

    @model_validator(mode="after")
    def _link_complete(self) -> ProfileInterconnect:
        given = [self.gpu_link_kind, self.gpu_link_gbps, self.gpu_link_domain]
        if any(v is not None for v in given) and any(v is None for v in given):
            raise ValueError("gpu_link_kind, gpu_link_gbps and gpu_link_domain go together")
        return self


class ProfileMatch(_ProfileBase):
    """How a probed device is recognised: PCI ids first, then name fragments."""

    names: list[str] = Field(default_factory=list, description="Name fragments, whole words")
    exclude_names: list[str] = Field(default_factory=list, description="Fragments that rule it out")
    pci_ids: list[str] = Field(default_factory=list, description="'vendor:device', lower-case hex")

    @field_validator("pci_ids")
    @classmethod
    def _pci_form(cls, value: list[str]) -> list[str]:
        for pci in value:
            vendor, _, device = pci.partition(":")
            if not (PCI_HEX_RE.match(vendor) and PCI_HEX_RE.match(device)):
                raise ValueError(f"pci id {pci!r} must read 'vvvv:dddd' in lower-case hex")
        return value


class ProfileMobile(_ProfileBase):
    """Per-app memory and sustained performance on a phone, each with its reasoning."""

    app_memory_limit_fraction: float = Field(gt=0, le=1)
    basis: str
    sustained_fraction: float | None = Field(
        None, gt=0, le=1, description="Share of peak the phone sustains after minutes of load "
        "(phones throttle within minutes); from published stress tests"
    )
    sustained_basis: str | None = Field(
        None, description="Which published test the sustained fraction comes from"
    )

    @model_validator(mode="after")
    def _sustained_explained(self) -> ProfileMobile:
        if (self.sustained_fraction is None) != (self.sustained_basis is None):
            raise ValueError("mobile.sustained_fraction needs mobile.sustained_basis (and back)")
        return self


class ProfileNpu(_ProfileBase):
    """A neural engine / NPU, with the figures its vendor publishes (none invented)."""

    name: str
    int8_tops: float | None = Field(None, gt=0)
    int4_tops: float | None = Field(None, gt=0)
    fp16_tops: float | None = Field(None, gt=0)
    unstated_tops: float | None = Field(
        None, gt=0, description="A TOPS figure the vendor states without saying its precision"
    )
    note: str = Field(description="Where the figures come from, or why there are none")

    def tops(self) -> dict[str, float]:
        """Return the published TOPS by format ('unstated' when the vendor gives no precision)."""
        pairs = {"int8": self.int8_tops, "int4": self.int4_tops, "fp16": self.fp16_tops,
                 "unstated": self.unstated_tops}
        return {fmt: value for fmt, value in pairs.items() if value is not None}


class ProfileSystem(_ProfileBase):
    """The reference system planning assumes when the hardware is not present."""

    name: str = Field(description="e.g. 'NVIDIA DGX H100', or 'a typical desktop'")
    gpus_per_node: int = Field(ge=1)
    max_gpus_per_node: int | None = Field(
        None, ge=1, description="The most of these GPUs one machine takes, when more than the "
        "reference system's (a workstation's four x16 slots for a desktop card); --gpus up to "
        "it plans one machine")
    host_memory_gib: float = Field(gt=0)
    assumption: bool = Field(
        False, description="True when no vendor reference system exists and these are assumed"
    )
    basis: str

    @model_validator(mode="after")
    def _max_holds_the_reference(self) -> ProfileSystem:
        if self.max_gpus_per_node is not None and self.max_gpus_per_node < self.gpus_per_node:
            raise ValueError(f"max_gpus_per_node {self.max_gpus_per_node} is below "
                             f"gpus_per_node {self.gpus_per_node}")
        return self


class ProfileVariant(_ProfileBase):
    """One configuration of a chip sold in several (GPU cores, CPU cores, memory, bandwidth)."""

    id: str = Field(description="'<profile id>-<suffix>', e.g. m3-max-30c; --device accepts it")
    name: str = Field(description="What Device.variant says, e.g. '30-core GPU'")
    gpu_cores: int | None = Field(None, ge=1)
    cpu_cores: list[int] = Field(default_factory=list, description="CPU core counts sold with it")
    performance_cores: list[int] = Field(
        default_factory=list, description="Performance-core counts (sysctl hw.perflevel0)"
    )
    memory_options_gib: list[float] = Field(default_factory=list)
    memory_bandwidth_gbps: float = Field(gt=0)
    peak_tflops: dict[str, float] = Field(default_factory=dict)


class Profile(_ProfileBase):
    """One device's datasheet figures, each group with its sources (the profiles/*.toml schema)."""

    id: str
    name: str
    vendor: str
    device_class: DeviceClass
    family: str = Field(description="The performance family the efficiency tables key on "
                        "(perfmodel/efficiency.py), e.g. nvidia-hopper, apple-max")
    architecture: str | None = None
    compute_capability: str | None = Field(None, description="'9.0' (NVIDIA) or 'gfx942' (AMD)")
    compute_units: int | None = Field(None, description="SMs, CUs or GPU cores")
    memory_gib: float = Field(gt=0, description="The datasheet's memory 'GB' (binary units)")
    memory_options_gib: list[float] = Field(
        default_factory=list, description="Configurations sold, where memory_gib is one of several"
    )
    memory_type: str
    unified_memory: bool = False
    memory_bandwidth_gbps: float = Field(gt=0)
    power_w: float | None = Field(None, description="Typical board power / TDP")
    status: Literal["shipping", "announced"] = Field(
        "shipping", description="announced: planned from announced figures, not a shipping part"
    )
    formats: list[str] = Field(default_factory=list)
    peak_tflops: dict[str, float] = Field(
        default_factory=dict, description="Dense peaks by format; int8 in TOPS"
    )
    derived_figures: list[str] = Field(
        default_factory=list, description="Figures computed rather than read from a datasheet"
    )
    interconnect: ProfileInterconnect | None = None
    match: ProfileMatch = Field(default_factory=ProfileMatch)
    mobile: ProfileMobile | None = None
    npu: ProfileNpu | None = None
    compute: list[ComputePath] = Field(
        default_factory=list, description="On-device matmul rates by unit, delegate and dtype, "
        "each with its basis and source (peak where the vendor publishes one, else effective "
        "from a published run)")
    system: ProfileSystem | None = None
    variants: list[ProfileVariant] = Field(
        default_factory=list, description="Configurations sold; the top-level figures are the top"
    )
    variant_of: str | None = Field(
        None, description="Set (never in a file) on a profile resolved from another's variants"
    )
    variant_name: str | None = Field(None, description="That variant's name; never in a file")
    sources: dict[str, list[str]]
    notes: list[str] = Field(default_factory=list)

    @field_validator("id")
    @classmethod
    def _id_form(cls, value: str) -> str:
        if not _ID_RE.match(value):
            raise ValueError(f"id {value!r} must be lower-case words joined by dashes")
        return value

    @field_validator("family")
    @classmethod
    def _known_family(cls, value: str) -> str:
        if value not in FAMILIES:
            raise ValueError(f"family {value!r} is not one of {', '.join(FAMILIES)}")
        return value

    @field_validator("peak_tflops")
    @classmethod
    def _peak_keys(cls, value: dict[str, float]) -> dict[str, float]:
        return _checked_peaks(value)

    @field_validator("sources")
    @classmethod
    def _source_urls(cls, value: dict[str, list[str]]) -> dict[str, list[str]]:
        unknown = sorted(set(value) - set(SOURCE_GROUPS))
        if unknown:
            raise ValueError(f"unknown source groups {unknown}; use {', '.join(SOURCE_GROUPS)}")
        for group, urls in value.items():
            if not urls or any(not url.startswith("https://") for url in urls):
                raise ValueError(f"sources.{group} needs one or more https:// URLs")
        return value

    @model_validator(mode="after")
    def _every_figure_sourced(self) -> Profile:
        needed = {"memory", "bandwidth"}
        if self.peak_tflops:
            needed.add("compute")
        for optional, group in ((self.npu, "npu"), (self.system, "system")):
            if optional is not None:
                needed.add(group)
        if self.variants:
            needed.add("variants")
        if self.power_w is not None:
            needed.add("power")
        if self.interconnect is not None:
            needed.add("interconnect")
        if self.compute_capability is not None:
            needed.add("architecture")
        if self.match.pci_ids:
            needed.add("match")
        if self.mobile is not None:
            needed.add("mobile")
        missing = sorted(needed - set(self.sources))
        if missing:
            raise ValueError(f"figures without sources: add sources.{', sources.'.join(missing)}")
        return self

    @model_validator(mode="after")
    def _announced_says_so(self) -> Profile:
        if self.status == "announced" and not any("announced" in n.lower() for n in self.notes):
            raise ValueError("an announced part must say so in its notes (which announcement)")
        return self

    @model_validator(mode="after")
    def _variants_consistent(self) -> Profile:
        if not self.variants:
            return self
        ids = [v.id for v in self.variants]
        if len(set(ids)) != len(ids):
            raise ValueError(f"duplicate variant ids in {self.id}: {ids}")
        for variant in self.variants:
            if not (_ID_RE.match(variant.id) and variant.id.startswith(f"{self.id}-")):
                raise ValueError(f"variant id {variant.id!r} must read '{self.id}-<suffix>'")
            _checked_peaks(variant.peak_tflops)
        if self.top_variant() is None:
            raise ValueError(
                f"{self.id}: one variant must be the top configuration (its gpu_cores, bandwidth "
                "and peaks equal the profile's own figures)"
            )
        return self

    def top_variant(self) -> ProfileVariant | None:
        """Return the variant whose figures are the profile's own (the top configuration)."""
        for variant in self.variants:
            cores_agree = variant.gpu_cores is None or variant.gpu_cores == self.compute_units
            if (cores_agree and variant.memory_bandwidth_gbps == self.memory_bandwidth_gbps
                    and variant.peak_tflops == self.peak_tflops):
                return variant
        return None

    def variant(self, key: str) -> ProfileVariant | None:
        """Return the variant with this id or name (case ignored); None when there is none."""
        wanted = key.strip().lower()
        for variant in self.variants:
            if wanted in (variant.id, variant.name.lower()):
                return variant
        return None

    def for_variant(self, variant: ProfileVariant) -> Profile:
        """Return the profile with a variant's figures: what `--device <variant id>` plans with."""
        if variant is self.top_variant():
            return self
        sizes = variant.memory_options_gib or self.memory_options_gib
        update: dict[str, Any] = {
            "id": variant.id,
            "name": f"{self.name} ({variant.name})",
            "compute_units": variant.gpu_cores or self.compute_units,
            "memory_bandwidth_gbps": variant.memory_bandwidth_gbps,
            "peak_tflops": dict(variant.peak_tflops),
            "memory_options_gib": list(sizes),
            "memory_gib": max(sizes) if sizes else self.memory_gib,
            "variants": [],
            "variant_of": self.id,
            "variant_name": variant.name,
            "notes": [f"configuration {variant.name} of {self.name} (profile {self.id})",
                      *self.notes],
        }
        return self.model_copy(update=update)

    def is_derived(self, figure: str) -> bool:
        """Whether a figure ('memory_bandwidth_gbps', 'peak_tflops.fp32' ...) is computed."""
        return figure in self.derived_figures

    @property
    def memory_total_bytes(self) -> int:
        """The profile's memory in bytes."""
        return int(self.memory_gib * GIB)


def _checked_peaks(value: dict[str, float]) -> dict[str, float]:
    unknown = sorted(set(value) - set(PEAK_FORMATS))
    if unknown:
        raise ValueError(f"unknown peak formats {unknown}; use {', '.join(PEAK_FORMATS)}")
    if any(v <= 0 for v in value.values()):
        raise ValueError("peaks must be positive; leave a format out when it is unknown")
    return value
