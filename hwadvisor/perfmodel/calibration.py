"""Calibration: the figures a machine measured, in the form the time model uses them.

A report written by `probe --measure` (devices[].measured) or by `validate` (its trial results)
carries measured figures for one device. `from_report` picks the ones for the device being
planned (matched by profile id, else by name) and turns them into a Calibration:

- memory bandwidth (memory-bandwidth trial, stream copy) and matmul TFLOP/s per dtype at 8192^3
  (matmul-peak): these go into Device.measured, which perfmodel/resources.py prefers;
- attention TFLOP/s per SDPA backend (attention-backends);
- launch latency (cuda-graphs: a decode step of a few layers, eager and replayed): the GPU time
  per kernel beyond the weight streaming, and how the measured eager host cost compares with
  the model's;
- pinned host-to-device bandwidth (host-transfer) and all-reduce bus bandwidth (collectives).

Figures the report lacks stay the model's; Estimate.calibration says which is which.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from hwadvisor.errors import UserError
from hwadvisor.models import Device, DeviceClass, Measured, Report, TrialResult
from hwadvisor.perfmodel import constants as C

if TYPE_CHECKING:
    from hwadvisor.workload import WorkloadRequest

# The trial stack's blocks (hwadvisor/trials/kit/blocks.py, Block.decode): 2 RMSNorms x 8 ops,
# q/k/v, 2 index_copy_ (cache write), 2 expand_kv copies, SDPA, transpose-reshape copy, o,
# 2 residual adds, gate, up, SiLU, mul, down = 35 kernels per layer.
TRIAL_DECODE_KERNELS_PER_LAYER = 35.0
# Host cost per kernel of those blocks in eager mode, in units of constants.EAGER_OP_S, that the
# model expects: Python module calls and views around each kernel (the H200 cuda-graphs trial:
# 2.373 ms eager for 4 x 35 kernels = 17 us per kernel = 1.97 x 8.6 us).
TRIAL_HOST_OP_FACTOR = 1.97


@dataclass(frozen=True)
class Calibration:
    """Measured figures of one device; None (or empty) where the report did not measure."""

    device: str = ""
    memory_bandwidth_gbps: float | None = None
    matmul_tflops: dict[str, float] = field(default_factory=dict)
    attention_tflops: dict[str, float] = field(default_factory=dict)
    kernel_floor_s: float | None = None
    host_scale: float | None = None
    host_transfer_gbps: float | None = None
    busbw_gbps: float | None = None
    source: str = ""

    @property
    def empty(self) -> bool:
        """True when nothing was measured."""
        return not (self.memory_bandwidth_gbps or self.matmul_tflops or self.attention_tflops
                    or self.kernel_floor_s is not None or self.host_transfer_gbps
                    or self.busbw_gbps)

    def measured(self, current: Measured | None = None) -> Measured | None:
        """Device.measured with this calibration's bandwidth and matmul figures merged in."""
        if not (self.memory_bandwidth_gbps or self.matmul_tflops):
            return current
        base = current.model_copy(deep=True) if current is not None else Measured()
        if self.memory_bandwidth_gbps:
            base.memory_bandwidth_gbps = self.memory_bandwidth_gbps
        base.matmul_tflops.update(self.matmul_tflops)
        base.trial_ids = sorted(set(base.trial_ids) | {"calibration"})
        return base


def _norm(text: str | None) -> str:
    return re.sub(r"[^a-z0-9]+", " ", (text or "").lower()).strip()


def same_device(a: Device, b: Device) -> bool:
    """Tell whether two devices are the same model: profile id, else the normalised name."""
    if a.profile_id and b.profile_id:
        return a.profile_id.split("-")[0:2] == b.profile_id.split("-")[0:2] \
            if a.profile_id != b.profile_id else True
    na, nb = _norm(a.name), _norm(b.name)
    return bool(na) and (na == nb or na in nb or nb in na)


def _effect(result: TrialResult, name: str) -> float | None:
    value = result.effect.get(name)
    return float(value) if value else None


def _attention(result: TrialResult) -> dict[str, float]:
    """TFLOP/s per backend from the attention-backends trial's timings and shape."""
    out: dict[str, float] = {}
    names = {"cudnn_attention": "cudnn", "flash_attention": "sdpa",
             "efficient_attention": "efficient"}
    for m in result.measurements:
        key = names.get(m.label)
        p = m.params
        if key is None or not m.median or not p.get("seq_len"):
            continue
        seq, heads = float(p["seq_len"]), float(p.get("heads", 1))
        pairs = seq * (seq + 1) / 2.0 if p.get("causal", 1) else seq * seq
        flops = float(p.get("batch", 1)) * heads * pairs * 4.0 * float(p.get("head_dim", 128))
        out[key] = flops / float(m.median) / 1e12
    return out


def _launch(result: TrialResult, stream_gbps: float | None) -> tuple[float | None, float | None]:
    """(GPU s per kernel, eager host cost / model's) from the cuda-graphs trial."""
    eager = graph = None
    params: dict[str, float | int | str] = {}
    for m in result.measurements:
        if m.label == "cuda graph replay" and m.median:
            graph, params = float(m.median), dict(m.params)
        elif m.label == "eager decode step" and m.median:
            eager = float(m.median)
    if graph is None or not params.get("hidden_size"):
        return None, None
    h, inter = float(params["hidden_size"]), float(params["intermediate_size"])
    heads, kv, hd = (float(params[k]) for k in ("num_heads", "num_kv_heads", "head_dim"))
    layers = float(params.get("layers", 1))
    weights = layers * 2.0 * (h * (heads + 2 * kv) * hd + heads * hd * h + 3 * h * inter)
    kv_bytes = layers * 2.0 * 2.0 * kv * hd * float(params.get("context_len", 0)) * (
        1.0 + 2.0 * heads / kv)  # read, expand_kv's write, SDPA's read of the expanded heads
    bandwidth = (stream_gbps or 0.0) * C.GB
    streaming = (weights + kv_bytes) / bandwidth if bandwidth else 0.0
    kernels = layers * TRIAL_DECODE_KERNELS_PER_LAYER
    floor = max(C.GRAPH_NODE_S, (graph - streaming) / kernels)
    scale = None
    if eager:
        scale = eager / (kernels * C.EAGER_OP_S * TRIAL_HOST_OP_FACTOR)
    return floor, scale


def _from_trials(trials: list[TrialResult], stream_hint: float | None) -> dict[str, object]:
    found: dict[str, object] = {}
    by_id = {t.id: t for t in trials if t.status == "ok"}
    if "memory-bandwidth" in by_id:
        found["memory_bandwidth_gbps"] = _effect(by_id["memory-bandwidth"], "copy_gbps")
    if "matmul-peak" in by_id:
        found["matmul_tflops"] = {k.removesuffix("_tflops"): float(v) for k, v in
                                  by_id["matmul-peak"].effect.items() if k.endswith("_tflops")}
    if "attention-backends" in by_id:
        found["attention_tflops"] = _attention(by_id["attention-backends"])
    stream = found.get("memory_bandwidth_gbps") or stream_hint
    if "cuda-graphs" in by_id:
        floor, scale = _launch(by_id["cuda-graphs"], stream if isinstance(stream, float)
                               else None)
        found["kernel_floor_s"], found["host_scale"] = floor, scale
    if "host-transfer" in by_id:
        found["host_transfer_gbps"] = _effect(by_id["host-transfer"], "pinned_gbps")
    if "collectives" in by_id:
        found["busbw_gbps"] = _effect(by_id["collectives"], "busbw_gbps")
    return found


def _cpu_of(report: Report) -> Device | None:
    """Return the host's CPU as a device when the report's trials ran on the CPU alone.

    A CPU's own `validate` or `probe --measure` report lists no device (the CPU is the host),
    and a CPU-only torch on a GPU machine measures the CPU, not the GPU the report lists.
    """
    ran_on = {t.environment.device for t in report.trials if t.status == "ok"}
    if ran_on != {"cpu"}:
        return None
    return Device(index=0, vendor="cpu", device_class=DeviceClass.CPU,
                  name=report.host.cpu_model or "unknown CPU", source="probe",
                  memory_total_bytes=report.host.memory_total_bytes)


def measured_devices(report: Report) -> list[Device]:
    """Return the report's devices that carry measurements (or ran its trials)."""
    cpu = _cpu_of(report)
    if cpu is not None:
        return [cpu]
    if report.trials:
        return list(report.devices[:1])
    return [d for d in report.devices if d.measured is not None]


def from_report(report: Report, device: Device, source: str = "") -> Calibration | None:
    """Return the calibration for `device` from a report; None when it measured another.

    Trials in a validate report ran on its first device; probe --measure fills each device's
    measured field.
    """
    for candidate in measured_devices(report):
        if not same_device(candidate, device):
            continue
        values: dict[str, object] = {}
        if candidate.measured is not None:
            values["memory_bandwidth_gbps"] = candidate.measured.memory_bandwidth_gbps
            values["matmul_tflops"] = dict(candidate.measured.matmul_tflops)
        hint = candidate.measured.memory_bandwidth_gbps if candidate.measured else None
        for key, value in _from_trials(report.trials, hint).items():
            if value:
                values[key] = value
        cal = Calibration(device=candidate.name, source=source, **values)  # type: ignore[arg-type]
        return None if cal.empty else cal
    return None


# ---------------------------------------------------------------------------------------
# Physical ranges: a calibration figure outside them is a broken or hostile report, not a
# measurement (1e-300 GB/s planned a 301-digit latency; 1e300 TFLOP/s overflowed the model).
# The bounds are wide on purpose: they refuse the impossible, not the unusual.
# Upper bounds, with the fastest parts known when written:
#   memory bandwidth: B200 HBM3e 8 TB/s (NVIDIA DGX B200 datasheet, 2024); M3 Ultra 819 GB/s
#   (Apple, 2025); a 2-socket 12-channel DDR5-6400 server ~1.2 TB/s (AMD EPYC 9005 spec);
#   matmul: B200 dense FP4 9 PFLOP/s (NVIDIA DGX B200 datasheet); a CPU socket with AMX
#   ~0.2-0.4 PFLOP/s bf16 at most (Intel Xeon 6 product brief).
#   host transfer: PCIe 6.0 x16 ~128 GB/s one way; NVLink-C2C 450 GB/s one way (GH200).
#   bus bandwidth: NVLink 5 900 GB/s one way per GPU (B200).
# Lower bounds: a figure under them is not a working device (0.1 GB/s is 1 Gb/s Ethernet).
DATASHEET_SLACK = 1.25  # a measured figure may beat the datasheet this much (boost, rounding)


@dataclass(frozen=True)
class Range:
    """The physically possible values of one calibration figure, in its unit."""

    low: float
    high: float
    unit: str


_GPU_RANGES: dict[str, Range] = {
    "memory_bandwidth_gbps": Range(1.0, 20_000.0, "GB/s"),
    "matmul_tflops": Range(0.01, 20_000.0, "TFLOP/s"),
    "attention_tflops": Range(0.001, 20_000.0, "TFLOP/s"),
    "kernel_floor_s": Range(1e-7, 1e-2, "s"),
    "host_scale": Range(0.01, 100.0, "x"),
    "host_transfer_gbps": Range(0.1, 1_000.0, "GB/s"),
    "busbw_gbps": Range(0.1, 5_000.0, "GB/s"),
}
RANGES: dict[str, dict[str, Range]] = {
    "datacenter-gpu": _GPU_RANGES,
    "consumer-gpu": {**_GPU_RANGES, "memory_bandwidth_gbps": Range(1.0, 5_000.0, "GB/s"),
                     "matmul_tflops": Range(0.01, 5_000.0, "TFLOP/s")},
    "apple-silicon": {**_GPU_RANGES, "memory_bandwidth_gbps": Range(1.0, 2_000.0, "GB/s"),
                      "matmul_tflops": Range(0.001, 500.0, "TFLOP/s")},
    "mobile-soc": {**_GPU_RANGES, "memory_bandwidth_gbps": Range(0.5, 1_000.0, "GB/s"),
                   "matmul_tflops": Range(0.0001, 200.0, "TFLOP/s")},
    "cpu": {**_GPU_RANGES, "memory_bandwidth_gbps": Range(0.1, 2_000.0, "GB/s"),
            "matmul_tflops": Range(0.00001, 1_000.0, "TFLOP/s"),
            "attention_tflops": Range(0.000001, 1_000.0, "TFLOP/s")},
}


def _datasheet(device: Device, name: str, key: str | None) -> float | None:
    """Return the datasheet figure a measured one may not exceed by much, if known."""
    if name == "memory_bandwidth_gbps":
        return device.memory_bandwidth_gbps or None
    if name == "matmul_tflops" and key is not None:
        return (device.peak_tflops or {}).get(key) or None
    return None


def _figures(cal: Calibration) -> list[tuple[str, str | None, float]]:
    """(figure, format or backend, value) of every number in a calibration."""
    out: list[tuple[str, str | None, float]] = []
    for name in ("memory_bandwidth_gbps", "kernel_floor_s", "host_scale", "host_transfer_gbps",
                 "busbw_gbps"):
        value = getattr(cal, name)
        if value is not None:
            out.append((name, None, float(value)))
    out += [("matmul_tflops", k, float(v)) for k, v in cal.matmul_tflops.items()]
    out += [("attention_tflops", k, float(v)) for k, v in cal.attention_tflops.items()]
    return out


def implausible(cal: Calibration, device: Device) -> list[str]:
    """Each figure of the calibration outside the physical range of the device (and class)."""
    cls = str(getattr(device.device_class, "value", device.device_class) or "cpu")
    ranges = RANGES.get(cls, RANGES["datacenter-gpu"])
    found: list[str] = []
    for name, key, value in _figures(cal):
        limit = ranges[name]
        label = f"{name}[{key}]" if key else name
        if not math.isfinite(value) or not limit.low <= value <= limit.high:
            found.append(f"{label} = {value:.4g} {limit.unit} is outside {limit.low:g}-"
                         f"{limit.high:g} {limit.unit}, the physical range of a {cls}")
            continue
        sheet = _datasheet(device, name, key)
        if sheet is not None and value > sheet * DATASHEET_SLACK:
            found.append(f"{label} = {value:.4g} {limit.unit} is over {DATASHEET_SLACK:g}x "
                         f"{device.name}'s datasheet {sheet:.4g} {limit.unit}")
    return found


# A measured figure under this share of the datasheet is believed (it is what the device did)
# but said out loud: a working GPU reaches 80-95% of its bandwidth and 60-90% of its dense
# matmul peak (docs/benchmarks.md, H200 runs), so a quarter means a busy, throttled or
# misconfigured device, or a trial that measured something else.
FAR_BELOW_SHARE = 0.25


def far_below(cal: Calibration, device: Device) -> list[str]:
    """Return a warning for each calibration figure far below the device's datasheet."""
    warnings = []
    for name, key, value in _figures(cal):
        sheet = _datasheet(device, name, key)
        if sheet and value < FAR_BELOW_SHARE * sheet:
            label = name.replace("_", " ") + (f"[{key}]" if key else "")
            warnings.append(
                f"warning: calibration {label} = {value:.4g} is {value / sheet:.1%} of "
                f"{device.name}'s datasheet {sheet:.4g}: a busy, throttled or misconfigured "
                "device, or a trial that went wrong; the plan uses it as measured")
    return warnings


# ---------------------------------------------------------------------------------------
# --calibration FILE: the one entry the pipeline calls
#
# It lives here, with the figures it reads, rather than in the pipeline or in cluster/: the
# layer rules let perfmodel read a saved report (report.io) and the workload's limits, but not
# cluster/, which must stay free of the planning stages. The one cluster-specific piece, the
# reader of a cluster report's inter-node figure (cluster/calibration.py), is handed in as
# `network` by the caller, which may import both.


class NetworkFigure(Protocol):
    """A measured inter-node bus bandwidth and the job that measured it (read-only)."""

    @property
    def gbps(self) -> float:
        """All-reduce bus bandwidth per GPU, GB/s one direction."""

    @property
    def size_label(self) -> str:
        """The message size it was measured at."""

    @property
    def nodes(self) -> int:
        """Nodes in the job."""

    @property
    def ranks_per_node(self) -> int:
        """Ranks (GPUs) per node in the job."""


NetworkReader = Callable[[Report], NetworkFigure | None]


@dataclass(frozen=True)
class Calibrated:
    """What --calibration changed: the device's figures, the request's network, the notes."""

    calibration: Calibration | None
    device: Device
    request: WorkloadRequest
    notes: list[str]


def calibrate(path: Path | None, device: Device, request: WorkloadRequest,
              network: NetworkReader) -> Calibrated:
    """Apply --calibration: the device's measured figures and the cluster's network.

    Without a path nothing changes. The device keeps its own figures where the report
    measured none; the request gets the report's inter-node bandwidth when it has one.
    """
    if path is None:
        return Calibrated(None, device, request, [])
    from hwadvisor.report.io import load_report

    report = load_report(path)
    found, notes = load_calibration(path, device, network, report)
    device = calibrated(device, found)
    request, network_notes = calibrate_network(request, report, str(path), network, device)
    return Calibrated(found, device, request, notes + network_notes)


def load_calibration(path: Path | None, device: Device, network: NetworkReader,
                     report: Report | None = None) -> tuple[Calibration | None, list[str]]:
    """Return the measured figures of `device` in the report at path, and a note saying which.

    None without a path. A report that measured nothing, or only another device, is a
    UserError (exit 2): the user asked for calibration, so silently using the datasheet would
    mislead.
    """
    if path is None:
        return None, []
    if report is None:
        from hwadvisor.report.io import load_report

        report = load_report(path)
    found = from_report(report, device, source=str(path))
    if found is None and network(report) is not None:
        return None, []  # a cluster report of the network only: calibrate_network reads it
    if found is None:
        measured = [d.name for d in measured_devices(report)]
        if not measured:
            raise UserError(f"--calibration {path}: the report holds no measurements",
                            hint="write one on the device with 'hwadvisor probe --measure "
                            "--output FILE' or 'hwadvisor validate --output FILE'")
        raise UserError(f"--calibration {path}: it measured {', '.join(measured)}, not "
                        f"{device.name}",
                        hint="pass a report from the same device model (--device picks the "
                        "planned one), or drop --calibration")
    _check_plausible(found, device, path)
    warnings = far_below(found, device)
    figures = [name for name, value in (
        ("memory bandwidth", found.memory_bandwidth_gbps),
        ("matmul " + "/".join(sorted(found.matmul_tflops)), found.matmul_tflops),
        ("attention", found.attention_tflops), ("launch latency", found.kernel_floor_s),
        ("host transfer", found.host_transfer_gbps), ("bus bandwidth", found.busbw_gbps))
        if value]
    return found, [f"calibration: {', '.join(figures)} measured on {found.device} ({path})",
                   *warnings]


def _check_plausible(found: Calibration, device: Device, path: Path) -> None:
    """UserError (exit 2) when a calibration figure is outside the device's physical range."""
    wrong = implausible(found, device)
    if wrong:
        raise UserError(f"--calibration {path}: {'; '.join(wrong[:3])}"
                        + (f" (and {len(wrong) - 3} more)" if len(wrong) > 3 else ""),
                        hint="that is not a measurement of this device: pass the report "
                        "'hwadvisor validate --output FILE' or 'probe --measure' wrote on it, "
                        "or drop --calibration")


def calibrated(device: Device, calibration: Calibration | None) -> Device:
    """Return the device with the calibration's bandwidth and matmul in its measured field."""
    if calibration is None:
        return device
    return device.model_copy(update={"measured": calibration.measured(device.measured)})


def calibrate_network(request: WorkloadRequest, report: Report, source: str,
                      network: NetworkReader,
                      device: Device | None = None) -> tuple[WorkloadRequest, list[str]]:
    """Plan with the inter-node bus bandwidth a cluster report measured (--calibration).

    Returns the request with inter_node_gbps set and a note saying so; unchanged, with no
    note, when the report has no inter-node figure (a one-host report still calibrates the
    device). --inter-node-gbps, when given, wins: the user said so.
    """
    found = network(report)
    if found is None:
        return request, []
    _check_network(report, found.gbps, source, device)
    if request.inter_node_gbps is not None:
        return request, [f"calibration: --inter-node-gbps {request.inter_node_gbps:g} given, "
                         f"so the {found.gbps:.1f} GB/s measured in {source} is not used"]
    notes = [f"calibration: inter-node bandwidth {found.gbps:.1f} GB/s per GPU, measured as "
             f"all-reduce bus bandwidth ({found.size_label}) across {found.nodes} nodes "
             f"({source})"]
    if not request.layout_given():
        notes.append(f"calibration: the network matters across nodes; that job had "
                     f"{found.nodes} nodes x {found.ranks_per_node} GPUs (--nodes "
                     f"{found.nodes} --gpus-per-node {found.ranks_per_node} plans it)")
    return request.with_changes(inter_node_gbps=round(found.gbps, 3)), notes


def _check_network(report: Report, gbps: float, source: str, device: Device | None) -> None:
    """UserError (exit 2) for a network figure that cannot stand for the planned GPUs' network.

    A CPU-only job (gloo over the host's sockets) measures the CPUs' path, not the GPUs'
    network: it must not set a GPU plan's inter-node bandwidth. A figure outside the physical
    range of a network (workload/limits.py's --inter-node-gbps) is not a measurement.
    """
    from hwadvisor.workload import limits

    try:
        limits.check("--inter-node-gbps", gbps)
    except UserError:
        raise UserError(f"--calibration {source}: its inter-node bandwidth {gbps:.4g} GB/s is "
                        "outside the physical range of a network (0.1-100,000 GB/s per GPU)",
                        hint="pass a cluster report written by 'hwadvisor validate' under "
                        "torchrun or srun, or --inter-node-gbps") from None
    planned_gpu = device is not None and device.vendor in ("nvidia", "amd")
    cluster = report.cluster
    ran_on_gpus = cluster is not None and cluster.backend == "nccl" and any(
        r.device_index is not None for n in cluster.nodes for r in n.ranks)
    if planned_gpu and not ran_on_gpus:
        raise UserError(f"--calibration {source}: that job ran on CPUs only (no GPU in any "
                        f"rank), so its {gbps:.3g} GB/s measures the host path, not the "
                        f"network of {device.name if device else 'the planned GPUs'}",
                        hint="calibrate with a cluster report of the GPUs' job, or pass "
                        "--inter-node-gbps")
