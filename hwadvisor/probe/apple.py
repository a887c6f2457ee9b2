"""Apple Silicon backend (macOS): sysctl for chip, RAM and CPU cores; system_profiler for the GPU.

Only runs where the platform is Darwin. The GPU shares the RAM with the CPU (unified memory), so
memory_total_bytes is hw.memsize; bandwidth and peaks are left to the chip's profile
(hwadvisor.profiles.enrich_devices), since macOS reports neither. Chips sold in several
configurations (an M3 Max with a 30- or 40-core GPU) differ in bandwidth and peaks: the GPU core
count chooses the configuration, else the CPU core counts and memory size do, and the choice is
recorded in Device.variant.
"""

from __future__ import annotations

import json
import platform
import re
from collections.abc import Callable

from hwadvisor.models import Device, DeviceClass
from hwadvisor.probe.base import BackendResult, GuardedBackend
from hwadvisor.probe.presence import not_macos
from hwadvisor.probe.runcmd import Runner, run_command

SYSCTL_TIMEOUT_S = 5.0
# system_profiler can take a few seconds on a Mac with several displays attached.
SYSTEM_PROFILER_TIMEOUT_S = 20.0
UNKNOWN_CHIP_NAME = "Apple Silicon (unknown chip)"

# Formats the GPU runs natively, by the chip generation that first has them. fp16 and int8:
# every Apple GPU (Metal Shading Language spec, "half" and 8-bit integer types). bf16: M2
# onward (ARMv8.6 BF16 in the M2 CPU; MSL 3.1 `bfloat` on Apple8+ GPU families;
# https://developer.apple.com/metal/Metal-Shading-Language-Specification.pdf).
FORMATS_BY_FIRST_GENERATION: tuple[tuple[int, str], ...] = ((1, "fp16"), (1, "int8"), (2, "bf16"))

# "Apple M3 Max", "M1 Max", "Apple M2": generation and tier.
_CHIP = re.compile(r"\bM(\d+)(?:\s+(Pro|Max|Ultra))?\b", re.IGNORECASE)
# The plain (non-JSON) SPDisplaysDataType output: "Chipset Model: Apple M1 Pro" and
# "Total Number of Cores: 14" lines under each GPU.
_TEXT_FIELD = re.compile(r"^\s*(Chipset Model|Total Number of Cores|Vendor)\s*:\s*(.+?)\s*$")

# CPU topology sysctls (sysctl(3); "hw.perflevel0" is the fastest core type on Apple Silicon).
SYSCTL_CPU_KEYS: dict[str, str] = {
    "cpu_cores": "hw.ncpu",
    "performance_cores": "hw.perflevel0.physicalcpu",
}


def parse_chip(text: str | None) -> tuple[int, str] | None:
    """Find an M-series chip in a string: 'Apple M3 Max' -> (3, 'Apple M3 Max'); None if absent."""
    if not text:
        return None
    found = _CHIP.search(text)
    if found is None:
        return None
    generation = int(found.group(1))
    tier = found.group(2)
    name = f"Apple M{generation}" + (f" {tier.capitalize()}" if tier else "")
    return generation, name


def formats_for_generation(generation: int | None) -> list[str]:
    """Native formats of an M-series GPU generation (fp16 and int8 only when unknown)."""
    first = generation if generation is not None else 1
    return [fmt for since, fmt in FORMATS_BY_FIRST_GENERATION if first >= since]


def parse_displays(text: str | None) -> tuple[str | None, int | None]:
    """From `system_profiler SPDisplaysDataType -json`: (Apple GPU's sppci_model, sppci_cores)."""
    if not text:
        return None, None
    try:
        data = json.loads(text)
    except ValueError:
        return None, None
    entries = data.get("SPDisplaysDataType") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        return None, None
    for entry in entries:
        if not isinstance(entry, dict):
            continue
        model = entry.get("sppci_model") or entry.get("_name")
        # The vendor key is "spdisplays_vendor" on current macOS, "sppci_vendor" on older ones.
        vendor = str(entry.get("spdisplays_vendor") or entry.get("sppci_vendor") or "")
        # Intel Macs list Intel/AMD GPUs here; only the built-in Apple GPU counts.
        if not (isinstance(model, str) and (parse_chip(model) or "apple" in vendor.lower())):
            continue
        cores = entry.get("sppci_cores")
        core_count = int(cores) if isinstance(cores, str) and cores.strip().isdigit() else (
            cores if isinstance(cores, int) and not isinstance(cores, bool) else None)
        return model, core_count
    return None, None


def parse_displays_text(text: str | None) -> tuple[str | None, int | None]:
    """From plain `system_profiler SPDisplaysDataType`: (Apple GPU's chipset model, its cores)."""
    model: str | None = None
    cores: int | None = None
    for line in (text or "").splitlines():
        found = _TEXT_FIELD.match(line)
        if found is None:
            continue
        key, value = found.group(1), found.group(2)
        if key == "Chipset Model":
            if model is not None and parse_chip(model):
                break  # the next GPU's block: the Apple GPU was the one before
            model, cores = value, None
        elif key == "Total Number of Cores" and value.isdigit():
            cores = int(value)
    if model is None or not parse_chip(model):
        return None, None
    return model, cores


def _int_or_none(text: str | None) -> int | None:
    if text is None:
        return None
    value = text.strip()
    return int(value) if value.isdigit() else None


class AppleBackend(GuardedBackend):
    """Apple Silicon Macs: one device of class apple-silicon with unified memory."""

    name = "apple"

    def __init__(
        self,
        runner: Runner = run_command,
        platform_name: Callable[[], str] = platform.system,
    ) -> None:
        self.runner = runner
        self.platform_name = platform_name

    def _sysctl(self, key: str) -> str | None:
        out = self.runner(["sysctl", "-n", key], SYSCTL_TIMEOUT_S)
        return out.strip() if out and out.strip() else None

    def _probe(self) -> BackendResult:
        """Return the Apple Silicon GPU on a Mac; nothing elsewhere."""
        system = self.platform_name()
        absent = not_macos(system)
        if absent is not None:
            return BackendResult(notes=[absent])
        brand = self._sysctl("machdep.cpu.brand_string")
        if brand is not None and "intel" in brand.lower():
            return BackendResult(notes=[f"apple: Intel Mac ({brand}); no Apple Silicon GPU"])
        memsize = _int_or_none(self._sysctl("hw.memsize"))
        model, cores = parse_displays(self.runner(
            ["system_profiler", "SPDisplaysDataType", "-json"], SYSTEM_PROFILER_TIMEOUT_S))
        if model is None:
            # Older macOS (or a failed -json call): the plain-text listing has the same facts.
            model, cores = parse_displays_text(self.runner(
                ["system_profiler", "SPDisplaysDataType"], SYSTEM_PROFILER_TIMEOUT_S))
        notes: list[str] = []
        # The brand string names the chip on current macOS; early releases said only
        # "Apple processor", so the GPU's sppci_model is the second source.
        chip = parse_chip(brand) or parse_chip(model)
        is_apple = "apple" in (brand or "").lower() or model is not None
        if chip is None:
            if not is_apple:
                return BackendResult(notes=[
                    f"apple: no Apple Silicon chip named by sysctl ({brand!r}) or system_profiler"])
            notes.append(f"chip not recognised from {brand or model!r}; "
                         "profile figures unavailable")
        generation, name = chip if chip is not None else (None, UNKNOWN_CHIP_NAME)
        if memsize is None:
            notes.append("sysctl hw.memsize unreadable; memory unknown")
        device = Device(
            index=0,
            vendor="apple",
            device_class=DeviceClass.APPLE_SILICON,
            name=name,
            memory_total_bytes=memsize,
            unified_memory=True,
            architecture=f"Apple M{generation} family GPU" if generation is not None else None,
            compute_units=cores,
            formats=formats_for_generation(generation),
            source="probe",
            notes=notes,
        )
        if chip is not None:
            device = self._with_variant(device)
        return BackendResult(devices=[device])

    def _with_variant(self, device: Device) -> Device:
        """Record which configuration of the chip this is, from every reading taken.

        The profile's [[variants]] list the configurations Apple sold; profiles.choose_variant
        decides from the GPU cores first, then CPU core counts and memory size.
        """
        from hwadvisor import profiles  # local: only Macs need the datasheet files here

        profile = profiles.match(device)
        if profile is None or not profile.variants:
            return device
        counts = {field: _int_or_none(self._sysctl(key)) for field, key in SYSCTL_CPU_KEYS.items()}
        choice = profiles.choose_variant(
            profile, gpu_cores=device.compute_units, cpu_cores=counts["cpu_cores"],
            performance_cores=counts["performance_cores"], memory_bytes=device.memory_total_bytes)
        notes = [*device.notes, choice.note] if choice.note else device.notes
        update: dict[str, object] = {"notes": notes}
        if choice.variant is not None:
            update["variant"] = choice.variant.name
        return device.model_copy(update=update)
