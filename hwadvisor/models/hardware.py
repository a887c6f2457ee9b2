"""Hardware models: what the probe reads and what profiles supply."""

from enum import Enum
from functools import lru_cache
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

# A physical figure (GB/s, TFLOP/s, W, s, bytes): a finite number, never NaN or infinity
# (JSON has neither; pydantic would otherwise read them from Python and write them as null).
Finite = Annotated[float, Field(allow_inf_nan=False)]
# ... that also cannot be negative: a rate, a power, a duration.
NonNegative = Annotated[float, Field(ge=0, allow_inf_nan=False)]


class DeviceClass(str, Enum):
    """The hardware classes the advice is shaped for."""

    DATACENTER_GPU = "datacenter-gpu"
    CONSUMER_GPU = "consumer-gpu"
    APPLE_SILICON = "apple-silicon"
    MOBILE_SOC = "mobile-soc"
    CPU = "cpu"


# The performance families the efficiency tables know (perfmodel/efficiency.py keys its rows
# by these; tests/probe/test_profiles.py checks the two agree). A profile states its own; a
# probed device is guessed (guess_family). Device.family carries the one a device has.
FAMILIES: tuple[str, ...] = (
    "nvidia-hopper", "nvidia-blackwell", "nvidia-ampere-hbm", "nvidia-ada-dc", "nvidia-ada",
    "nvidia-ampere-dc", "nvidia-ampere", "nvidia-older", "amd-cdna3", "amd-cdna2", "amd-rdna3",
    "apple-ultra", "apple-max", "apple-pro", "apple-base", "mobile", "cpu", "default",
)


@lru_cache(maxsize=256)
def guess_family(vendor: str, cls: str, arch: str, name: str, memory_type: str) -> str:
    """Guess a probed device's family from its vendor, class, architecture, name and memory."""
    arch_l, name_l = arch.lower(), name.lower()
    if cls == "apple-silicon":
        for tier in ("ultra", "max", "pro"):
            if tier in name_l:
                return f"apple-{tier}"
        return "apple-base"
    if cls == "mobile-soc":
        return "mobile"
    if cls == "cpu":
        return "cpu"
    if vendor == "nvidia":
        if "hopper" in arch_l:
            return "nvidia-hopper"
        if "blackwell" in arch_l or "rubin" in arch_l:
            return "nvidia-blackwell"
        if "ampere" in arch_l and "hbm" in memory_type.lower():
            return "nvidia-ampere-hbm"
        if "ada" in arch_l:
            return "nvidia-ada-dc" if cls == "datacenter-gpu" else "nvidia-ada"
        if "ampere" in arch_l:
            return "nvidia-ampere-dc" if cls == "datacenter-gpu" else "nvidia-ampere"
        return "nvidia-older"
    if vendor == "amd":
        if "cdna 3" in arch_l or "cdna3" in arch_l:
            return "amd-cdna3"
        if "cdna" in arch_l:
            return "amd-cdna2"
        return "amd-rdna3"
    return "default"


class Strict(BaseModel):
    """Base for every report model: unknown keys are refused, so typos never pass silently."""

    model_config = ConfigDict(extra="forbid", use_enum_values=True, defer_build=True)


class HostInfo(Strict):
    """The host: OS, CPU and RAM (psutil)."""

    os: str | None = Field(None, description="OS name and release, e.g. 'Linux 6.1.0'")
    platform: str | None = Field(None, description="Machine architecture, e.g. 'x86_64'")
    cpu_model: str | None = None
    cpu_cores: int | None = Field(None, description="Physical cores")
    cpu_threads: int | None = Field(None, description="Logical CPUs")
    cpu_flags: list[str] = Field(
        default_factory=list, description="The SIMD and matrix ISA flags /proc/cpuinfo lists "
        "(avx2, fma, avx512f, avx512_vnni, avx512_bf16, amx_int8, asimddp, i8mm ...): the "
        "CPU's matmul rates are derived from them")
    cpu_clock_mhz: float | None = Field(
        None, gt=0, description="The CPU clock: cpufreq's maximum, else /proc/cpuinfo's cpu MHz")
    cpu_clock_source: Literal["cpufreq-max", "cpuinfo"] | None = Field(
        None, description="Where cpu_clock_mhz was read: cpufreq-max (the highest clock a core "
        "runs at) or cpuinfo (in a virtual machine usually the nominal clock)")
    memory_total_bytes: int | None = None
    memory_available_bytes: int | None = None
    python_version: str | None = None
    mobile_app_memory_limit_bytes: int | None = Field(
        None, description="Per-app memory limit the mobile OS class implies (phones only)"
    )
    notes: list[str] = Field(
        default_factory=list,
        description="Why a host reading is null (an unreadable /proc/meminfo, say)",
    )


class PcieLink(Strict):
    """PCIe link generation and width, as the maximum the link supports and the current state."""

    generation_max: int | None = None
    generation_current: int | None = None
    width_max: int | None = None
    width_current: int | None = None


class NvLinkInfo(Strict):
    """NVLink links of one GPU."""

    links_active: int | None = None
    version: int | None = Field(
        None,
        description="NVLink generation (4 on H100/H200), not NVML's NVML_NVLINK_VERSION_* code",
    )
    bandwidth_gbps: NonNegative | None = Field(
        None,
        description="Aggregate over active links, ONE direction, GB/s: links x per-link datasheet "
        "rate of the generation (18 x 25 = 450 on H100/H200; bidirectional is twice this)",
    )


class PeerLink(Strict):
    """How this GPU reaches another: nvidia-smi topo -m's code and peer-to-peer access."""

    peer_index: int
    link: str | None = Field(None, description="NV18, PIX, PXB, PHB, NODE, SYS ...")
    nvlinks: int | None = None
    p2p: bool | None = None


GpuLinkKind = Literal["nvlink", "nvlink-bridge", "xgmi", "pcie"]


class Interconnect(Strict):
    """PCIe, NVLink and topology facts of one device."""

    pcie: PcieLink | None = None
    nvlink: NvLinkInfo | None = None
    peers: list[PeerLink] = Field(default_factory=list)
    numa_node: int | None = None
    cpu_affinity: str | None = None
    network_gbps: NonNegative | None = Field(
        None, description="Scale-out network per GPU, one direction, GB/s, in the vendor's "
        "reference system (from the profile: DGX H200 has one 400 Gb/s NIC per GPU = 50)"
    )
    gpu_link_kind: GpuLinkKind | None = Field(
        None, description="The link this GPU uses to reach its peers: nvlink (NVLink, switched or "
        "direct), nvlink-bridge (a two-card bridge), xgmi (AMD Infinity Fabric), or pcie"
    )
    gpu_link_gbps: float | None = Field(
        None, description="GPU-to-GPU bandwidth of that link, ONE direction, per GPU, GB/s"
    )
    gpu_link_domain: int | None = Field(
        None, ge=1, description="How many GPUs the fast link joins (8 on an HGX/DGX or MI300X "
        "board, 2 for NVLink-bridged card pairs, 1 when there is no GPU-to-GPU link)"
    )
    gpu_peer_access: bool | None = Field(
        None, exclude=True, description="Whether these GPUs reach each other's memory directly "
        "(CUDA peer access), from the profile: false on GeForce RTX 40 and 50 series, where NCCL "
        "stages every transfer through host memory; the probe's own reading is peers[].p2p"
    )


class GpuProcess(Strict):
    """A process holding memory on the GPU."""

    pid: int
    name: str | None = None
    used_memory_bytes: int | None = None


class NvidiaDetails(Strict):
    """NVML readings beyond the common device fields."""

    architecture: str | None = None
    brand: str | None = None
    memory_bus_width_bits: int | None = None
    memory_clock_max_mhz: int | None = None
    sm_clock_max_mhz: int | None = None
    sm_clock_current_mhz: int | None = None
    memory_clock_current_mhz: int | None = None
    power_limit_w: NonNegative | None = None
    power_draw_w: NonNegative | None = None
    temperature_c: int | None = None
    driver_version: str | None = None
    cuda_driver_version: str | None = None
    mig_mode: bool | None = None
    ecc_enabled: bool | None = None
    ecc_errors_uncorrected: int | None = Field(
        None, description="Uncorrectable ECC errors since the driver loaded (NVML's volatile "
        "count); read when ECC is on")
    remapped_rows_pending: bool | None = Field(
        None, description="A memory row remap waits for a GPU reset (A100 and later)")
    remapped_rows_failed: bool | None = Field(
        None, description="Row remapping failed: memory errors the GPU cannot map away")
    throttle_reasons: list[str] | None = None
    memory_used_bytes: int | None = None
    processes: list[GpuProcess] | None = None
    pci_device_id: str | None = None
    pci_bus_id: str | None = None
    unsupported_fields: list[str] = Field(
        default_factory=list, description="NVML fields this driver or GPU does not support"
    )


class NpuInfo(Strict):
    """A neural engine / NPU next to the GPU (phones, Apple chips), as the vendor states it."""

    name: str | None = None
    tops: dict[str, float] = Field(
        default_factory=dict, description="TOPS by format ('int8', 'int4', 'fp16'); 'unstated' "
        "when the vendor gives a figure without its precision"
    )
    note: str | None = None


class ComputePath(Strict):
    """One way an on-device engine computes matmuls: a unit, its delegate, a dtype, a rate.

    Phones and the Neural Engine have no datasheet TFLOP/s the model can use: where the vendor
    publishes a figure it is `peak`; otherwise the rate is `effective`, derived from a published
    run (prompt tokens/s x FLOPs per token), and `basis` says which.
    """

    unit: Literal["cpu", "gpu", "npu"]
    via: str = Field(description="The delegate / kernels: 'XNNPACK + KleidiAI (int8 dot)', "
                     "'Hexagon HTP (QNN)', 'Neural Engine (Core ML)'")
    dtype: Literal["int8", "fp16", "bf16", "fp32"] = Field(
        description="What the matmuls compute in (int8: dynamically quantised activations)")
    tflops: float = Field(gt=0, description="TFLOP/s (TOPS for int8)")
    kind: Literal["peak", "effective"] = Field(
        description="peak: a vendor figure; effective: from a published run (see basis)")
    sustained_tflops: float | None = Field(
        None, gt=0, description="After minutes of load, where published")
    bandwidth_gbps: float | None = Field(
        None, gt=0, description="Memory bandwidth this unit reaches, measured, where it is "
        "below the chip's (the Neural Engine's own fabric); caps the weight stream")
    bandwidth_basis: str = Field("", description="How bandwidth_gbps was measured, and where")
    basis: str = Field(min_length=1, description="How the figure was read or derived")
    source: str = Field(min_length=1)
    kernel_family: str | None = Field(
        None, description="The GPU the engines' kernel rates key on for this unit ('adreno-750': "
        "an engine's rates 'kernel@adreno-750', then 'kernel@adreno'); None: the device family")


class Measured(Strict):
    """Figures measured on this device by the validator's trials (probe --measure)."""

    memory_bandwidth_gbps: NonNegative | None = None
    matmul_tflops: dict[str, NonNegative] = Field(
        default_factory=dict, description="Burst: one product per timing, as triton's do_bench")
    matmul_sustained_tflops: dict[str, NonNegative] = Field(
        default_factory=dict,
        description="Sustained: a back-to-back stream long enough to reach the power limit")
    trial_ids: list[str] = Field(default_factory=list)


class Device(Strict):
    """One accelerator (or the CPU when there is none)."""

    index: int
    vendor: str = Field(description="nvidia, amd, apple, qualcomm, intel, ...")
    device_class: DeviceClass
    name: str
    memory_total_bytes: int | None = None
    memory_type: str | None = None
    unified_memory: bool = Field(False, description="Memory shared with the CPU (Apple, phones)")
    memory_bandwidth_gbps: NonNegative | None = Field(
        None, description="Theoretical bandwidth, GB/s")
    memory_bandwidth_source: Literal["probe", "datasheet", "derived"] | None = Field(
        None, description="derived: computed from datasheet facts; see the profile notes"
    )
    compute_capability: str | None = Field(None, description="e.g. '9.0' (NVIDIA) or 'gfx942'")
    architecture: str | None = None
    compute_units: int | None = Field(None, description="SMs, CUs or GPU cores")
    pci_device_id: str | None = Field(
        None, description="PCI device id, e.g. '0x74a1' (AMD); null for SoCs without PCI"
    )
    formats: list[str] = Field(
        default_factory=list, description="Low-precision formats run natively"
    )
    peak_tflops: dict[str, NonNegative] = Field(
        default_factory=dict, description="Dense datasheet peaks by format (from the profile)"
    )
    peak_tflops_source: Literal["datasheet", "derived"] | None = Field(
        None, description="derived: computed, not a vendor figure; see the profile notes"
    )
    power_w: NonNegative | None = None
    source: Literal["probe", "profile"]
    profile_id: str | None = None
    interconnect: Interconnect | None = None
    nvidia: NvidiaDetails | None = None
    measured: Measured | None = None
    status: str | None = Field(
        None, description="'announced' for a part planned from announced, not shipping, figures"
    )
    npu: NpuInfo | None = None
    compute_paths: list[ComputePath] = Field(
        default_factory=list, description="On-device matmul rates by unit, delegate and dtype "
        "(phones, the Neural Engine): the profile's [[compute]] entries")
    sustained_fraction: float | None = Field(
        None, gt=0, le=1, description="Share of peak a phone sustains after minutes of load "
        "(published throttling tests; see the profile's mobile.sustained_basis)"
    )
    app_memory_limit_bytes: int | None = Field(
        None, description="Phones: the memory one app may hold before the OS ends it (estimate)"
    )
    gpus_per_node: int | None = Field(
        None, ge=1, description="GPUs per node in the profile's reference system"
    )
    max_gpus_per_node: int | None = Field(
        None, ge=1, description="The most of these GPUs one machine takes, when more than the "
        "reference system's (desktop cards: a four-slot workstation); None: gpus_per_node"
    )
    variant: str | None = Field(
        None, description="The configuration chosen, e.g. '30-core GPU' (chips sold in several)"
    )
    model_guessed: bool = Field(
        False, description="The model name was inferred (from memory, ids or gfx target), not read"
    )
    notes: list[str] = Field(default_factory=list)
    # Facts the stages after the probe read, set where the device is made (probe/detect.py via
    # profiles.enrich_devices, profiles.device_from_profile, probe/target.cpu_device). They are
    # not in the report: its JSON and schema stay as they were (a saved report gets them back
    # from profiles.restore_facts when it is planned again).
    family: str | None = Field(
        None, exclude=True, description="The performance family the efficiency tables key on "
        "(nvidia-hopper, apple-max ...): the profile file's for a planned device, guessed from "
        "the probe's readings for a probed one; None: guessed where it is read (guessed_family)")
    soc_part: str | None = Field(
        None, exclude=True, description="The SoC's part number (Qualcomm SM8750 ...), from the "
        "matched profile's name fragments: what a QNN build is compiled for")
    cpu_flags: list[str] = Field(
        default_factory=list, exclude=True, description="A CPU device's SIMD and matrix ISA "
        "flags, from the host probe (HostInfo.cpu_flags): its matmul peaks are derived from them")
    cpu_clock_mhz: float | None = Field(
        None, exclude=True, description="A CPU device's clock, from the host probe "
        "(HostInfo.cpu_clock_mhz)")

    def guessed_family(self) -> str:
        """Return the family guessed from this device's vendor, class, architecture and name."""
        cls = str(getattr(self.device_class, "value", self.device_class))
        return guess_family(self.vendor, cls, self.architecture or "", self.name,
                            self.memory_type or "")
