"""Cheap signs of each vendor's hardware, read before that vendor's backend module is loaded.

Most hosts a probe runs on have one kind of accelerator or none, yet every backend in the
detection order used to be imported and run: the AMD backend alone costs ~8 ms to import and
starts amd-smi and rocm-smi (four failed spawns) on a host that has neither. Each function
here answers "why this vendor cannot be here" from what the host shows at no cost (the
platform, a driver's files, a tool on PATH), or None when the backend must look. A sign is
never taken as proof of a device: a present sign only means the backend runs as before.
NVIDIA's check (the driver's files) stays in probe/nvml.py, the one door to NVML, which skips
loading pynvml on the same grounds.
"""

from __future__ import annotations

import importlib.util
import os
import platform
import shutil
import sys
from typing import Any

IOS_SYSTEMS = ("iOS", "iPadOS")

# What the AMD backend's sources need (hwadvisor/probe/amd.py): the amdgpu driver (sysfs,
# KFD topology, /dev/kfd for ROCm), the amd-smi or rocm-smi tool, or the amdsmi library.
AMD_DRIVER_PATHS = ("/sys/module/amdgpu", "/dev/kfd")
AMD_TOOLS = ("amd-smi", "rocm-smi")
AMD_LIBRARY = "amdsmi"


def not_macos(system: str) -> str | None:
    """Return the Apple backend's answer off macOS; None on a Mac."""
    return None if system == "Darwin" else f"apple: not macOS (platform {system or 'unknown'})"


def not_ios(system: str) -> str | None:
    """Return the iOS backend's answer off iOS; None on an iPhone or iPad."""
    return None if system in IOS_SYSTEMS else f"ios: not iOS (platform {system or 'unknown'})"


def android_ver() -> Any:
    """platform.android_ver() where Python has it (3.13+); None before."""
    func = getattr(platform, "android_ver", None)
    return func() if func is not None else None


def running_on_android() -> bool:
    """Tell Android: init sets ANDROID_ROOT and ANDROID_DATA; Python >= 3.13 names the system."""
    if platform.system() == "Android":
        return True
    return bool(os.environ.get("ANDROID_ROOT") and os.environ.get("ANDROID_DATA"))


NOT_ANDROID = "android: not Android (no getprop, no Android runtime)"


def android_absent() -> str | None:
    """Why this is no Android phone, when plain: no getprop on PATH and no Android runtime."""
    if shutil.which("getprop") or running_on_android():
        return None
    if getattr(android_ver(), "release", ""):
        return None
    return NOT_ANDROID


def amd_absent() -> str | None:
    """Why no AMD GPU can be read here, when plain; None when the AMD backend must look.

    Judged on Linux only (the sources there are the driver's files, the tools and the
    library); elsewhere the backend runs as before.
    """
    if not sys.platform.startswith("linux"):
        return None
    if any(os.path.exists(path) for path in AMD_DRIVER_PATHS):
        return None
    if any(shutil.which(tool) for tool in AMD_TOOLS):
        return None
    if _library_installed(AMD_LIBRARY) or _torch_rocm_loaded():
        return None
    return ("amd: no AMD GPU found (no amdgpu driver loaded, no /dev/kfd, no amd-smi or "
            "rocm-smi on PATH, no amdsmi library)")


def _library_installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a broken package on sys.path counts as a sign
        return True


def _torch_rocm_loaded() -> bool:
    """Tell a ROCm build of torch already imported by the caller (the validator): a source too."""
    torch = sys.modules.get("torch")
    return bool(torch is not None and getattr(getattr(torch, "version", None), "hip", None))
