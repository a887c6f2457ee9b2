"""The one interface every trial meets, the context it runs in, and small shared guards."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from typing import Any, Protocol

from hwadvisor.models import Device, TrialResult, Workload

TORCH_MISSING = "torch is not installed: pip install 'hwadvisor[validate]'"
NO_CUDA = "no CUDA GPU visible to torch (torch.cuda.is_available() is False)"


@dataclass(frozen=True)
class CollectiveSettings:
    """How the collectives trial launches its ranks (validate, the cluster job, tests)."""

    backend: str = "nccl"  # "gloo" runs the same launcher on CPU processes (tests, CI)
    world_size: int | None = None  # None: every GPU torch sees (two processes for gloo)
    timeout_s: float | None = None  # None: the trial's own deadline
    sizes: tuple[tuple[str, int], ...] | None = None  # (label, bytes); None: the workload's


@dataclass
class TrialContext:
    """What a trial may use: the target device, the workload (for its shapes), a time budget."""

    device: Device | None = None
    workload: Workload | None = None
    budget_s: float = 5.0
    quick: bool = False  # smaller shapes and fewer repeats (tests on 2-core CI machines)
    nvls: bool = False  # let NCCL use NVLink SHARP / multicast (validate --nvls); off by default
    # torch's index of the device when it is not device.index (NVML's numbering): a rank
    # under a launcher whose CUDA_VISIBLE_DEVICES hides or reorders GPUs
    cuda_index: int | None = None
    # GPU processes seen before the first trial (the runner's check for others on the GPU)
    gpu_pids_before: set[int] | None = None
    # the plan's stacked-step spec (rules/plan_step.PlanTrialSpec as a dict): plan-step's input
    plan_spec: dict[str, Any] | None = None
    collective: CollectiveSettings = field(default_factory=CollectiveSettings)
    compile_mode: str | None = None  # torch.compile mode instead of the trial's default
    compile_backend: str | None = None  # e.g. "eager": exercises the path without a compiler


class Trial(Protocol):
    """A short real measurement. `needs` says what it requires; `run` never leaks device memory."""

    id: str
    title: str
    needs: str  # in words: "CUDA GPU with FP8 tensor cores (cc >= 8.9)", "any torch device" ...

    def unsupported_reason(self, ctx: TrialContext) -> str | None:
        """Why this trial cannot run here, or None when it can."""
        ...

    def run(self, ctx: TrialContext) -> TrialResult:
        """Run the trial and return its result (status ok, or error with the message)."""
        ...


def torch_missing() -> str | None:
    """TORCH_MISSING when torch cannot be imported, else None (checks without importing it)."""
    return None if importlib.util.find_spec("torch") is not None else TORCH_MISSING


def cuda_available() -> bool:
    """Tell whether torch is installed and sees a CUDA (or ROCm) GPU."""
    if torch_missing():
        return False
    import torch

    return bool(torch.cuda.is_available())


def rocm_build() -> bool:
    """Tell whether torch is a ROCm build: torch.cuda then drives AMD GPUs through HIP."""
    if torch_missing():
        return False
    import torch

    return bool(getattr(torch.version, "hip", None))


def mps_available() -> bool:
    """Tell whether torch sees Apple's Metal GPU (torch.backends.mps)."""
    if torch_missing():
        return False
    import torch

    mps = getattr(torch.backends, "mps", None)
    return bool(mps is not None and mps.is_available())


def torch_device(ctx: TrialContext, mps: bool = False) -> str:
    """Return the torch device for a trial: the context's GPU when torch sees it, else cpu.

    CUDA and ROCm GPUs are "cuda:N" (a ROCm build answers to torch.cuda). With mps=True, a
    trial that supports Apple's Metal GPU gets "mps" when there is no CUDA/ROCm GPU; the
    others stay on the CPU there. A probed GPU torch cannot see (hidden by
    CUDA_VISIBLE_DEVICES) is an error, not another GPU: its figures would be attributed to the
    wrong device.
    """
    if not cuda_available():
        return "mps" if mps and mps_available() else "cpu"
    if ctx.cuda_index is not None:
        # A rank of a job (cluster/job.py) was handed its GPU by the launcher's local rank.
        import torch

        if ctx.cuda_index < torch.cuda.device_count():
            return f"cuda:{ctx.cuda_index}"
    ordinal = cuda_ordinal(ctx.device)
    if ordinal is None:
        assert ctx.device is not None  # cuda_ordinal(None) is 0 while torch sees a GPU
        raise RuntimeError(
            f"GPU {ctx.device.index} ({ctx.device.name}) is not visible to torch "
            "(CUDA_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES); pick a visible one with -i")
    return f"cuda:{ordinal}"


def _nvml_bus(device: Device) -> tuple[int, int, int] | None:
    """(domain, bus, device) of NVML's pci_bus_id '00000000:18:00.0'; None when unknown."""
    text = device.nvidia.pci_bus_id if device.nvidia is not None else None
    if not text:
        return None
    try:
        head, slot = text.strip().rsplit(":", 1)
        domain, _, bus = head.rpartition(":")
        return int(domain or "0", 16), int(bus, 16), int(slot.split(".")[0], 16)
    except ValueError:
        return None


def _torch_bus(ordinal: int) -> tuple[int, int, int] | None:
    """(domain, bus, device) of torch's GPU `ordinal`, when this torch build reports it."""
    import torch

    props = torch.cuda.get_device_properties(ordinal)
    parts = [getattr(props, name, None) for name in ("pci_domain_id", "pci_bus_id",
                                                      "pci_device_id")]
    if not all(isinstance(p, int) for p in parts):
        return None
    return parts[0], parts[1], parts[2]  # type: ignore[return-value]


def cuda_ordinal(device: Device | None) -> int | None:
    """Return the torch ordinal (cuda:N) of a probed GPU; None when torch cannot see it.

    Matched by PCI bus id (NVML's against torch's) where both are known; else by
    CUDA_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES (hwadvisor.probe.select explains the rules).
    A device that is not a probed GPU (none, the CPU, a datasheet profile) is cuda:0.
    """
    if not cuda_available():
        return None
    import torch

    count = int(torch.cuda.device_count())
    if count == 0:
        return None
    if device is None or device.vendor not in ("nvidia", "amd") or device.source != "probe":
        return 0
    bus = _nvml_bus(device)
    if bus is not None:
        buses = [_torch_bus(i) for i in range(count)]
        if bus in buses:
            return buses.index(bus)
        if all(b is not None for b in buses):
            return None  # torch told every GPU's bus and this one is not among them
    from hwadvisor.probe.select import visible_ordinal

    ordinal = visible_ordinal(device)
    return ordinal if ordinal is not None and ordinal < count else None


def compute_capability(device: str) -> tuple[int, int] | None:
    """(major, minor) of a CUDA device string, None for cpu, mps and ROCm.

    ROCm reports gfx942 as "9.4" and gfx90a as "9.0", which are not NVIDIA capabilities: FP8
    and the like are told apart by `rocm_arch` there.
    """
    if not device.startswith("cuda") or rocm_build():
        return None
    import torch

    return tuple(torch.cuda.get_device_capability(torch.device(device)))  # type: ignore[return-value]


def rocm_arch(device: str) -> str | None:
    """Return the gfx architecture of a ROCm GPU ("gfx942"), None elsewhere."""
    if not device.startswith("cuda") or not rocm_build():
        return None
    import torch

    props = torch.cuda.get_device_properties(torch.device(device))
    name = getattr(props, "gcnArchName", None)
    return str(name).split(":")[0] if name else None


# AMD GPUs with FP8 matrix cores: MI300 (gfx942, FNUZ formats), MI350 (gfx950) and RDNA4
# (gfx12xx), from AMD's ROCm precision-support table.
ROCM_FP8_ARCHS = ("gfx942", "gfx950", "gfx1200", "gfx1201")


def has_fp8(device: str) -> bool:
    """Tell whether the device has FP8 tensor/matrix cores (NVIDIA cc >= 8.9, AMD MI300+)."""
    arch = rocm_arch(device)
    if arch is not None:
        return arch in ROCM_FP8_ARCHS
    cc = compute_capability(device)
    return cc is not None and cc >= (8, 9)


def cuda_reason(min_cc: tuple[int, int] | None = None, what: str = "") -> str | None:
    """Why a CUDA-only trial cannot run: torch missing, no GPU, or compute capability too low."""
    missing = torch_missing()
    if missing:
        return missing
    if not cuda_available():
        return NO_CUDA
    if min_cc is not None:
        cc = compute_capability("cuda:0")
        if cc is not None and cc < min_cc:
            need = f"{min_cc[0]}.{min_cc[1]}"
            return (f"{what or 'this trial'} needs compute capability >= {need}; "
                    f"this GPU is {cc[0]}.{cc[1]}")
    return None


C_COMPILERS = ("cc", "gcc", "clang", "c++", "g++")


@dataclass(frozen=True)
class Requires:
    """What a trial needs, said once; `reason()` names the first missing piece, or None.

    torch first, then a CUDA GPU (and its compute capability), then torch features by their
    attribute path (`torch._scaled_mm`, `torch.nn.attention.sdpa_kernel`), then a C compiler.
    """

    cuda: bool = False
    min_cc: tuple[int, int] | None = None
    what: str = ""  # the trial's subject, for the compute-capability message
    torch_features: tuple[tuple[str, str], ...] = ()  # (dotted attribute, "needs >= 2.x")
    c_compiler: bool = False

    def reason(self) -> str | None:
        """Return why the trial cannot run here, or None."""
        missing = torch_missing()
        if missing:
            return missing
        if self.cuda or self.min_cc is not None:
            reason = cuda_reason(self.min_cc, self.what)
            if reason:
                return reason
        for path, since in self.torch_features:
            if not _has_torch_feature(path):
                import torch

                return f"torch {torch.__version__} has no torch.{path} ({since})"
        if self.c_compiler:
            import shutil

            if not any(shutil.which(c) for c in C_COMPILERS):
                return ("no C/C++ compiler on PATH (cc, gcc, clang): torch.compile's inductor "
                        "needs one; install gcc or clang")
        return None


class RequiresTrial:
    """A trial whose needs are its `requires`, and `also_needs` for what Requires cannot say.

    Trials subclass it for `unsupported_reason`; each sets id, title, needs and requires.
    """

    id: str = ""
    title: str = ""
    needs: str = ""
    requires: Requires = Requires()

    def unsupported_reason(self, ctx: TrialContext) -> str | None:
        """Return the first thing this trial needs that is missing here, or None."""
        return self.requires.reason() or self.also_needs(ctx)

    def also_needs(self, ctx: TrialContext) -> str | None:
        """Return a need beyond `requires` (a plan, a backend, a kernel) missing here, or None."""
        return None


def _has_torch_feature(path: str) -> bool:
    """Whether torch has this dotted attribute (a submodule is imported to look)."""
    import importlib

    import torch

    node: Any = torch
    parts = path.split(".")
    for i, part in enumerate(parts):
        if not hasattr(node, part):
            try:
                node = importlib.import_module("torch." + ".".join(parts[:i + 1]))
                continue
            except ImportError:
                return False
        node = getattr(node, part)
    return True


def free_device_bytes(device: str) -> int | None:
    """Free memory on a CUDA device (torch.cuda.mem_get_info), None elsewhere."""
    if not device.startswith("cuda"):
        return None
    import torch

    free, _total = torch.cuda.mem_get_info(torch.device(device))
    return int(free)


def available_host_bytes() -> int | None:
    """Available host RAM (psutil), None when it cannot be read."""
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except Exception:  # psutil can fail in odd containers; sizes then fall back to defaults
        return None


def release_memory() -> None:
    """Collect garbage and return cached CUDA memory so the next trial starts clean."""
    import gc

    gc.collect()
    if cuda_available():
        import torch

        torch.cuda.empty_cache()
