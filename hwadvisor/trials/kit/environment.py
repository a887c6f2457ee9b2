"""What the validator needs to know of torch around the trials, kept here with the other torch code.

Every function imports torch lazily and answers safely when torch is missing.
"""

from __future__ import annotations

import gc

from hwadvisor.trials.base import TrialContext, cuda_available, torch_device, torch_missing


def device_for(ctx: TrialContext) -> str | None:
    """Return the torch device a trial of ctx runs on ("cuda:N" or "cpu"); None without torch."""
    return None if torch_missing() else torch_device(ctx)


def is_rocm() -> bool:
    """Tell whether torch is a ROCm build (its CUDA API then drives AMD GPUs)."""
    from hwadvisor.trials.base import rocm_build

    return rocm_build()


def torch_version() -> str | None:
    """Torch's version string, or None when torch is not installed."""
    if torch_missing():
        return None
    import torch

    return str(torch.__version__)


def device_name(device: str, ctx: TrialContext) -> str:
    """Return the GPU's name as torch reports it, else torch's device itself ('cpu', 'mps').

    What the trial ran on, never the planned device's name: a CPU figure recorded under a
    GPU's name would be read as that GPU's.
    """
    if device.startswith("cuda"):
        import torch

        return str(torch.cuda.get_device_name(torch.device(device)))
    return device


def cuda_context_pending() -> bool:
    """Tell whether a GPU is there and this process has not yet created its CUDA context."""
    if torch_missing():
        return False
    import torch

    return bool(torch.cuda.is_available()) and not torch.cuda.is_initialized()


def free_device_memory() -> None:
    """Collect garbage and return cached GPU memory (after an out-of-memory error)."""
    gc.collect()
    if cuda_available():
        import torch

        torch.cuda.empty_cache()


def cuda_device_count() -> int:
    """How many GPUs torch can reach (0 without torch or a GPU)."""
    if not cuda_available():
        return 0
    import torch

    return int(torch.cuda.device_count())
