"""What the device offers the model: bandwidth, peak FLOP/s for the compute dtype, usable memory.

Prefers measured figures (device.measured, from the validator's trials, or a calibration from an
earlier report) over datasheet ones, and datasheet ones over stated fallbacks; every choice is
written into the assumptions and into Resources.sources (Estimate.calibration).

Two figures per resource: the one the report quotes (theoretical bandwidth, dense peak, or the
measured figure) and the achievable one the time model divides by (stream bandwidth, a large
GEMM's rate): perfmodel/efficiency.py gives the share, a measurement replaces it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hwadvisor import units
from hwadvisor.models import Device, ModelOptions, Workload
from hwadvisor.models.hardware import ComputePath, DeviceClass
from hwadvisor.perfmodel import constants as C
from hwadvisor.perfmodel import efficiency as E
from hwadvisor.perfmodel.calibration import Calibration


@dataclass
class Resources:
    """The device figures one estimate uses, with the reasons they were chosen."""

    device_class: str
    bandwidth_gbps: float
    peak_tflops: float
    compute_dtype: str
    memory_total_bytes: int | None
    usable_memory_bytes: int | None
    assumptions: list[str] = field(default_factory=list)
    family: str = "default"
    stream_gbps: float = 0.0  # achievable streaming bandwidth (measured copy, or a share)
    gemm_tflops: float = 0.0  # a large GEMM's rate in the compute dtype
    act_peak_tflops: float = 0.0  # datasheet dense 16-bit peak (attention, dequant shares)
    act_gemm_tflops: float = 0.0  # a large 16-bit GEMM's rate (measured or a share)
    vector_tflops: float = 0.0  # non-tensor fp32 peak (GEMV kernels' compute)
    int8_tflops: float = 0.0  # integer dot-product peak, TOPS (a CPU's SIMD int8; 0: none stated)
    kernel_floor_s: float = 0.0
    host_scale: float = 1.0  # eager host cost relative to the model's (a measured host)
    attention_tflops: dict[str, float] = field(default_factory=dict)  # measured backends
    host_transfer_gbps: float | None = None  # measured pinned host-to-device
    busbw_gbps: float | None = None  # measured all-reduce bus bandwidth
    sources: dict[str, str] = field(default_factory=dict)  # figure -> measured|datasheet|model
    compute_path: str | None = None  # the profile's on-device path the matmuls run on, named
    kernel_family: str | None = None  # that path's key for the engines' kernel rates (adreno-750)

    @property
    def ridge_flop_per_byte(self) -> float:
        """FLOP per byte at which compute and memory time are equal."""
        return self.peak_tflops * 1e12 / (self.bandwidth_gbps * C.GB)


def _device_class(device: Device) -> str:
    value = device.device_class
    return value.value if hasattr(value, "value") else str(value)


def compute_dtype(workload: Workload, options: ModelOptions, device: Device) -> str:
    """Return the dtype the matmuls run in.

    fp8/int8/fp4 weights run their matmuls in that format when the device has it (W8A8 /
    FP8 training with Transformer Engine / NVFP4); int4 is weight-only (dequantized to the
    activation dtype, so it saves bytes, not FLOPs). Training without mixed precision is fp32.
    """
    weights = workload.weights_dtype
    has = set(device.formats) | set(device.peak_tflops) | set(
        device.measured.matmul_tflops if device.measured else {})
    if workload.phase == "training" and not options.mixed_precision:
        return "fp32"
    if weights in ("fp8", "int8", "fp4") and weights in has:
        return weights
    if weights in ("fp32", "tf32"):
        return weights
    act = workload.activation_dtype
    if act in ("bf16", "fp16") and device.device_class == DeviceClass.CPU \
            and device.vendor in ("amd", "intel"):
        from hwadvisor.engines import engine_for

        act = engine_for(workload).defaults.x86_half_matmul or act
    return act if act in ("bf16", "fp16", "fp32") else "bf16"


# When the device lists no peak for the dtype, the next one tried (a stated fallback).
_PEAK_FALLBACK: dict[str, list[str]] = {
    "bf16": ["fp16"],
    "fp16": ["bf16"],
    "fp8": ["bf16", "fp16"],
    "int8": ["bf16", "fp16"],
    "fp4": ["fp8", "bf16", "fp16"],
    "tf32": ["fp32"],
    "fp32": ["tf32"],
}


def _peak(device: Device, dtype: str, notes: list[str] | None) -> tuple[float | None, str, bool]:
    """(TFLOP/s, the dtype it is for, measured?) for dtype or its fallback."""
    measured = device.measured.matmul_tflops if device.measured else {}
    for candidate in [dtype, *_PEAK_FALLBACK.get(dtype, [])]:
        if measured.get(candidate):
            if notes is not None:
                notes.append(f"compute peak: measured {candidate} matmul "
                             f"{units.number(measured[candidate])} TFLOP/s at 8192^3 "
                             "(device.measured)")
            return float(measured[candidate]), candidate, True
        if device.peak_tflops.get(candidate):
            if notes is not None:
                kind = "derived" if device.peak_tflops_source == "derived" else "datasheet"
                notes.append(f"compute peak: {kind} {candidate} dense "
                             f"{units.number(device.peak_tflops[candidate])} TFLOP/s")
            return float(device.peak_tflops[candidate]), candidate, False
    return None, dtype, False


def _achievable(peak: float, measured: bool, family: str, dtype: str) -> float:
    """Return a large GEMM's rate: measured at 8192^3, or the datasheet x the family's share."""
    return peak if measured else peak * E.gemm_peak_fraction(family, dtype)


def cpu_peaks(device: Device) -> tuple[dict[str, float], str] | None:
    """Return a CPU's fp32 and int8 matmul peaks (TFLOP/s, TOPS) from its cores, clock, SIMD.

    None where the probe read no cores, clock or known SIMD flags. The figures are per core and
    cycle for the widest path its flags show (constants.CPU_SIMD, with their sources).
    """
    cores, clock = device.compute_units, device.cpu_clock_mhz
    if not cores or not clock or not device.cpu_flags:
        return None
    flags = set(device.cpu_flags)
    for needs, vendor, fp32, int8 in C.CPU_SIMD:
        if set(needs) <= flags and vendor in ("", device.vendor):
            scale = cores * clock * 1e6 / 1e12
            peaks = {"fp32": fp32 * scale, "int8": int8 * scale}
            note = (f"compute peak: {cores} cores x {clock:.0f} MHz x {fp32:g} fp32 FLOP and "
                    f"{int8:g} int8 ops a cycle ({'+'.join(needs)}{' ' + vendor if vendor else ''}"
                    f", perfmodel/constants.py CPU_SIMD) = {units.number(peaks['fp32'])} TFLOP/s "
                    f"fp32, {units.number(peaks['int8'])} TOPS int8")
            return peaks, note
    return None


def _with_cpu_peaks(device: Device, notes: list[str]) -> Device:
    """Return the device with its ISA-derived peaks where it is a CPU that states none."""
    if device.device_class != DeviceClass.CPU or device.peak_tflops:
        return device
    derived = cpu_peaks(device)
    if derived is None:
        return device
    peaks, note = derived
    notes.append(note)
    return device.model_copy(update={"peak_tflops": peaks, "peak_tflops_source": "derived"})


def resolve(workload: Workload, device: Device, options: ModelOptions,
            calibration: Calibration | None = None) -> Resources:
    """Bandwidth, peak and usable memory for this workload on this device, with assumptions."""
    notes: list[str] = []
    sources: dict[str, str] = {}
    cls = _device_class(device)
    device = _with_cpu_peaks(device, notes)
    family = E.device_family(device)
    measured_bw = device.measured.memory_bandwidth_gbps if device.measured else None
    if measured_bw:
        bandwidth = float(measured_bw)
        stream = bandwidth
        sources["memory_bandwidth"] = "measured"
        notes.append(f"memory bandwidth: measured {bandwidth:.0f} GB/s stream copy "
                     "(device.measured), used as the achievable figure")
    elif device.memory_bandwidth_gbps:
        bandwidth = float(device.memory_bandwidth_gbps)
        share = E.stream_fraction(family)
        stream = bandwidth * share
        sources["memory_bandwidth"] = "datasheet"
        src = device.memory_bandwidth_source or "device"
        notes.append(f"memory bandwidth: {src} {bandwidth:g} GB/s theoretical; achievable "
                     f"stream {stream:.0f} GB/s ({share:.0%}, {family})")
    else:
        bandwidth = C.FALLBACK_BANDWIDTH_GBPS.get(cls, 50.0)
        stream = bandwidth * E.stream_fraction(family)
        sources["memory_bandwidth"] = "model"
        notes.append(f"memory bandwidth unknown: assumed {bandwidth:g} GB/s for a {cls} "
                     "(stated assumption, not a reading)")

    dtype = compute_dtype(workload, options, device)
    path = _on_device_path(workload, device, dtype, notes)
    if path is not None and not (device.measured and device.measured.matmul_tflops):
        return _with_path(path, workload, device, cls, family, bandwidth, stream, notes,
                          sources)
    peak, used, peak_measured = _peak(device, dtype, notes)
    if peak is None:
        peak = C.FALLBACK_TFLOPS.get(cls, 1.0)
        sources[f"{dtype}_peak"] = "model"
        notes.append(f"compute peak unknown: assumed {peak:g} TFLOP/s for a {cls} "
                     "(stated assumption, not a reading)")
    else:
        sources[f"{used}_peak"] = "measured" if peak_measured else (
            "derived" if device.peak_tflops_source == "derived" else "datasheet")
        if used != dtype:
            notes.append(f"no {dtype} peak listed for {device.name}: used the {used} peak")
            dtype = used
    cap = _power_cap_factor(device)
    if cap < 1.0 and not peak_measured:
        peak *= cap
        notes.append(f"power capped at {device.nvidia.power_limit_w:g} W of "  # type: ignore[union-attr]
                     f"{device.power_w:g} W: compute peaks x{cap:.2f}")
    gemm = _achievable(peak, peak_measured, family, dtype)
    if not peak_measured:
        notes.append(f"large GEMMs ({dtype}) reach {gemm / peak:.0%} of that peak on {family}: "
                     f"{units.number(gemm)} TFLOP/s (perfmodel/efficiency.py)")
    act_dtype = "fp32" if dtype == "fp32" else "bf16"
    act_peak, act_used, act_measured = _peak(device, act_dtype, None)
    if act_peak is None:
        act_peak, act_measured, act_used = peak, peak_measured, dtype
    act_gemm = _achievable(act_peak, act_measured, family, act_used)
    sheet = _datasheet_peak(device, act_used) or (
        act_peak / E.gemm_peak_fraction(family, act_used) if act_measured else act_peak)
    if not act_measured:
        act_gemm *= cap
    sheet *= cap

    floor = E.kernel_floor_s(family)
    host_scale = 1.0
    attention: dict[str, float] = {}
    transfer = busbw = None
    if calibration is not None:
        floor, host_scale, attention, transfer, busbw = _calibrated(
            calibration, floor, notes, sources)
    sources.setdefault("launch_latency", "model")
    sources.setdefault("attention", "model")
    sources.setdefault("host_transfer", "model")

    total = device.memory_total_bytes
    usable = _usable_memory(device, cls, notes)
    return Resources(cls, bandwidth, peak, dtype, total, usable, notes, family=family,
                     stream_gbps=stream, gemm_tflops=gemm, act_peak_tflops=sheet,
                     act_gemm_tflops=act_gemm, kernel_floor_s=floor, host_scale=host_scale,
                     vector_tflops=float(device.peak_tflops.get("fp32") or sheet / 4.0),
                     int8_tflops=float(device.peak_tflops.get("int8") or 0.0),
                     attention_tflops=attention, host_transfer_gbps=transfer,
                     busbw_gbps=busbw, sources=sources)


def _usable_memory(device: Device, cls: str, notes: list[str]) -> int | None:
    """Return the memory one process may use: a phone's app limit, or a share of the total."""
    total = device.memory_total_bytes
    if device.app_memory_limit_bytes:
        # A phone: the OS caps one app far below its RAM (probe/mobile.py computes the cap).
        usable = int(device.app_memory_limit_bytes)
        notes.append(f"usable memory: the per-app limit {usable / C.GB:.1f} GB of "
                     f"{(total or 0) / C.GB:.1f} GB RAM (mobile OS)")
        return usable
    if not total:
        notes.append("device memory unknown: the fit is not checked")
        return None
    fraction = C.USABLE_MEMORY_FRACTION.get(cls, 1.0)
    if fraction < 1.0:
        notes.append(f"usable memory: {fraction:.0%} of {total / C.GB:.1f} GB on a {cls} "
                     "(OS / Metal working-set / app limits)")
    return int(total * fraction)


# Where an on-device engine that names no unit runs its matmuls: llama.cpp on Android runs on
# the CPU (its GPU backends are opt-in builds); elsewhere the GPU peaks apply.
_DEFAULT_UNIT: dict[str, str] = {"mobile-soc": "cpu"}
# The dtype a compute path may stand in for when the exact one is not listed (stated).
_PATH_FALLBACK: dict[str, tuple[str, ...]] = {"fp16": ("bf16",), "bf16": ("fp16",),
                                             "fp32": ("fp16", "bf16"), "int8": ()}


def _path_dtype(workload: Workload, dtype: str) -> str:
    """Return the dtype the on-device matmuls compute in: the recipe's, or the compute dtype."""
    recipe = E.engine_recipe(workload, workload.weights_dtype)
    if recipe is not None:
        return recipe.compute_dtype
    return dtype if dtype in _PATH_FALLBACK else "fp16"


def _on_device_path(workload: Workload, device: Device, dtype: str,
                    notes: list[str]) -> ComputePath | None:
    """Return the profile's compute path for the engine's unit and this dtype, if it lists one."""
    if not device.compute_paths or workload.phase != "inference":
        return None
    from hwadvisor.engines import engine_for

    cls = _device_class(device)
    unit = engine_for(workload).defaults.compute_unit or _DEFAULT_UNIT.get(cls)
    if unit is None:
        return None
    wanted = _path_dtype(workload, dtype)
    for candidate in (wanted, *_PATH_FALLBACK.get(wanted, ())):
        for path in device.compute_paths:
            if path.unit == unit and path.dtype == candidate:
                if candidate != wanted:
                    notes.append(f"no {unit} {wanted} figure for {device.name}: used its "
                                 f"{candidate} figure")
                return path
    if not device.peak_tflops:  # a Mac's GPU has its datasheet peaks: nothing to say there
        notes.append(f"no {unit} figure for {wanted} matmuls on {device.name} in its profile: "
                     "the class's fallback peak applies")
    return None


def _with_path(path: ComputePath, workload: Workload, device: Device, cls: str, family: str,
               bandwidth: float, stream: float, notes: list[str],
               sources: dict[str, str]) -> Resources:
    """Resources whose matmul rate is the profile's on-device path (an NPU, XNNPACK int8 ...)."""
    rate = path.tflops if path.kind == "effective" else \
        path.tflops * E.gemm_peak_fraction(family, path.dtype)
    sources[f"{path.dtype}_peak"] = "datasheet" if path.kind == "peak" else "published-run"
    notes.append(f"compute: {path.unit} via {path.via}, {path.dtype} {path.tflops:g} "
                 f"{'TOPS' if path.dtype == 'int8' else 'TFLOP/s'} ({path.kind}: {path.basis})")
    sixteen = next((p for p in device.compute_paths if p.unit == path.unit
                    and p.dtype in ("fp16", "bf16")), path)
    act = sixteen.tflops if sixteen.kind == "effective" else \
        sixteen.tflops * E.gemm_peak_fraction(family, sixteen.dtype)
    if path.bandwidth_gbps and path.bandwidth_gbps < stream:
        # The Apple Neural Engine reaches far less of the unified memory than the GPU does
        # (ANEMLL-Bench: 55-126 GB/s on chips of 100-800 GB/s), so its weight stream is capped.
        stream = path.bandwidth_gbps
        sources["memory_bandwidth"] = "published-run"
        notes.append(f"memory bandwidth: the {path.unit} reaches {stream:g} GB/s of the chip's "
                     f"{bandwidth:g} GB/s ({path.bandwidth_basis})")
    usable = _usable_memory(device, cls, notes)
    return Resources(cls, bandwidth, path.tflops, path.dtype, device.memory_total_bytes, usable,
                     notes, family=family, stream_gbps=stream, gemm_tflops=rate,
                     act_peak_tflops=act, act_gemm_tflops=act,
                     kernel_floor_s=E.kernel_floor_s(family), vector_tflops=act / 4.0,
                     sources=sources, compute_path=f"{path.unit} ({path.via})",
                     kernel_family=path.kernel_family)


def _power_cap_factor(device: Device) -> float:
    """Clock share a power cap below the datasheet power leaves (1 without a cap)."""
    limit = device.nvidia.power_limit_w if device.nvidia else None
    if not limit or not device.power_w or limit >= device.power_w:
        return 1.0
    return float((limit / device.power_w) ** C.POWER_CAP_CLOCK_EXPONENT)


def _datasheet_peak(device: Device, dtype: str) -> float | None:
    for candidate in [dtype, *_PEAK_FALLBACK.get(dtype, [])]:
        if device.peak_tflops.get(candidate):
            return float(device.peak_tflops[candidate])
    return None


def _calibrated(cal: Calibration, floor: float, notes: list[str], sources: dict[str, str],
                ) -> tuple[float, float, dict[str, float], float | None, float | None]:
    """Replace model figures with the calibration's measured ones; say which."""
    host_scale = 1.0
    if cal.kernel_floor_s is not None:
        floor = cal.kernel_floor_s
        host_scale = cal.host_scale or 1.0
        sources["launch_latency"] = "measured"
        notes.append(f"launch latency: measured (cuda-graphs trial): {floor * 1e6:.1f} us GPU "
                     f"time per kernel, eager host cost x{host_scale:.2f} the model's")
    attention = dict(cal.attention_tflops)
    if attention:
        sources["attention"] = "measured"
        listed = ", ".join(f"{k} {v:.0f}" for k, v in sorted(attention.items()))
        notes.append(f"attention: measured (attention-backends trial), TFLOP/s {listed}")
    if cal.host_transfer_gbps:
        sources["host_transfer"] = "measured"
        notes.append(f"host transfer: measured pinned {cal.host_transfer_gbps:.1f} GB/s")
    if cal.busbw_gbps:
        sources["bus_bandwidth"] = "measured"
    return floor, host_scale, attention, cal.host_transfer_gbps, cal.busbw_gbps
