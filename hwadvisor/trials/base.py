"""The one interface every trial meets, the context it runs in, and small shared guards."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from typing import Protocol

from hwadvisor.models import Device, TrialResult, Workload

TORCH_MISSING = "torch is not installed: pip install 'hwadvisor[validate]'"
NO_CUDA = "no CUDA GPU visible to torch (torch.cuda.is_available() is False)"


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
    extra: dict[str, object] = field(default_factory=dict)


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
    others stay on the CPU there.
    """
    if not cuda_available():
        return "mps" if mps and mps_available() else "cpu"
    import torch

    if ctx.cuda_index is not None and ctx.cuda_index < torch.cuda.device_count():
        return f"cuda:{ctx.cuda_index}"
    index = 0
    if ctx.device is not None and ctx.device.vendor in ("nvidia", "amd"):
        index = ctx.device.index if ctx.device.index < torch.cuda.device_count() else 0
    return f"cuda:{index}"


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
