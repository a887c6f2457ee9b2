"""Which GPUs a command uses: `-i/--gpu`, CUDA_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES, PCI ids.

Every report numbers GPUs as NVML does (and nvidia-smi shows): by PCI bus order, all GPUs of
the host, whatever CUDA_VISIBLE_DEVICES says. CUDA programs (torch, the trials) number only
the GPUs the variable lets them see, from 0. The two are tied together by PCI bus id where
torch tells it (hwadvisor/trials/base.py cuda_ordinal); where it cannot, the integers of
CUDA_VISIBLE_DEVICES (HIP_VISIBLE_DEVICES or ROCR_VISIBLE_DEVICES on AMD) are taken as NVML
indices, which is exact with CUDA_DEVICE_ORDER=PCI_BUS_ID and on hosts of one GPU model.
A variable that lists UUIDs (GPU-..., MIG-...) cannot be mapped without torch: then only the
PCI match decides, and a GPU it cannot place gets no measured figures attributed to it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from hwadvisor.errors import ExitCode, UserError
from hwadvisor.models import Device, Report

MAX_GPU_INDEX = 1 << 16  # far past any host; a larger index is a typo
VISIBLE_ENV: dict[str, tuple[str, ...]] = {
    "nvidia": ("CUDA_VISIBLE_DEVICES",),
    "amd": ("HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"),
}


def parse_gpu_option(text: str) -> list[int]:
    """Parse `-i/--gpu` (an index or a comma list, like nvidia-smi -i); UserError when bad."""
    hint = "pass GPU indices as nvidia-smi numbers them, e.g. -i 0 or -i 0,2"
    parts = [p.strip() for p in str(text).split(",")]
    if not parts or any(p == "" for p in parts):
        raise UserError(f"--gpu {text!r}: expected an index or a comma list of indices",
                        hint=hint)
    indices: list[int] = []
    for part in parts:
        if not (part.isascii() and part.isdigit()) or len(part) > 6:
            raise UserError(f"--gpu {text!r}: {part!r} is not a GPU index", hint=hint)
        value = int(part)
        if value >= MAX_GPU_INDEX:
            raise UserError(f"--gpu {text!r}: {value} is not a GPU index", hint=hint)
        if value not in indices:
            indices.append(value)
    return indices


def visible_env(vendor: str, environ: Mapping[str, str] | None = None) -> tuple[str, str] | None:
    """Return (name, value) of the visibility variable in effect for a vendor's GPUs, if set."""
    env = os.environ if environ is None else environ
    for name in VISIBLE_ENV.get(vendor, ()):
        if name in env:
            return name, env[name]
    return None


def parse_visible(value: str) -> list[int] | None:
    """Return the NVML indices a CUDA_VISIBLE_DEVICES value names, in CUDA's order.

    As CUDA reads it: entries up to the first invalid one count ("0,2,-1,3" is 0 and 2; "" and
    "-1" are none). None when an entry is a UUID (GPU-..., MIG-...), which needs torch to map.
    """
    indices: list[int] = []
    for raw in value.split(","):
        part = raw.strip()
        if part.isascii() and part.isdigit() and len(part) <= 6:
            if int(part) not in indices:
                indices.append(int(part))
            continue
        if part.upper().startswith(("GPU-", "MIG-")):
            return None
        break  # CUDA stops at the first invalid entry
    return indices


def visible_ordinal(device: Device, environ: Mapping[str, str] | None = None) -> int | None:
    """Return a probed GPU's CUDA ordinal by the visibility variable; None if hidden.

    Without the variable every GPU is visible and its ordinal is its NVML index. None too when
    the variable holds UUIDs (see parse_visible): only a PCI match can place it then.
    """
    found = visible_env(device.vendor, environ)
    if found is None:
        return device.index
    indices = parse_visible(found[1])
    if indices is None or device.index not in indices:
        return None
    return indices.index(device.index)


def select_devices(report: Report, indices: list[int] | None) -> Report:
    """Keep only the GPUs `-i` names, in its order; UserError for an index the host lacks."""
    if not indices:
        return report
    by_index = {d.index: d for d in report.devices}
    missing = [i for i in indices if i not in by_index]
    if missing:
        have = ", ".join(str(i) for i in sorted(by_index)) or "none"
        raise UserError(
            f"--gpu {','.join(map(str, indices))}: this host has no GPU "
            f"{', '.join(map(str, missing))} (its GPUs: {have})",
            hint="pass indices as 'hwadvisor probe' (or nvidia-smi) lists them",
            code=ExitCode.NO_DEVICE if not by_index else ExitCode.USAGE,
        )
    chosen = [by_index[i] for i in indices]
    return report.model_copy(update={"devices": chosen})


def visibility_note(report: Report, environ: Mapping[str, str] | None = None) -> str | None:
    """Return a note when a visibility variable hides some of the GPUs from CUDA programs."""
    for vendor in dict.fromkeys(d.vendor for d in report.devices):
        found = visible_env(vendor, environ)
        if found is None:
            continue
        name, value = found
        indices = parse_visible(value)
        if indices is None:
            return (f"{name}={value!r} names GPUs by UUID: validate matches them to these GPUs "
                    "by PCI bus id through torch; pass -i to pick a GPU by index")
        listed = ", ".join(str(i) for i in indices) or "none"
        return (f"{name}={value!r}: CUDA programs (and validate) see GPU(s) {listed} of this "
                "list, as cuda:0 onwards; the indices here are NVML's (nvidia-smi's), for all "
                "GPUs")
    return None
