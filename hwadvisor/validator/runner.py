"""The validator: run trials safely, then turn their measured effects into verdicts.

run_trials guards each trial on its own (unsupported first; out-of-memory and any other
exception become status "error" and the next trial runs; Ctrl-C stops the run and returns what
finished plus the interrupted trial). validate_report runs each recommendation's trial once and
sets recommendation.validation from the table VERDICT_EFFECTS below.

How factors are compared. A recommendation's predicted.factor is after/before of its metric:
for a time metric (name ends in "_s") < 1 is faster; for bytes ("_bytes") < 1 is smaller; for
a rate ("per_s") > 1 is faster. Trials report `speedup` = baseline time / new time (> 1 faster)
or `memory_factor` = new bytes / baseline bytes (< 1 saves). The measured effect is converted
into the prediction's after/before space (a time metric: measured_factor = 1 / speedup; a rate
metric: measured_factor = speedup; bytes: measured_factor = memory_factor), so
validation.measured_factor sits beside predicted.factor and
prediction_error = (measured_factor - predicted_factor) / predicted_factor.
When the trial measures another quantity than the prediction (a speed trial for a bytes
prediction), the verdict still follows the measured direction and prediction_error stays null.
"""

from __future__ import annotations

import gc
import math
import os
import time
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any, Literal

from hwadvisor.models import (
    Device,
    GpuProcess,
    Measured,
    Recommendation,
    Report,
    TrialEnvironment,
    TrialResult,
    Validation,
)
from hwadvisor.trials.base import Trial, TrialContext, torch_missing
from hwadvisor.trials.registry import get_trial

MIN_EFFECT = 0.03  # a measured gain under 3% is no gain (repeat-to-repeat noise is ~1-3%)
INTERRUPTED = "interrupted by Ctrl-C"
PIDS_BEFORE = "gpu_pids_before"  # TrialContext.extra key: GPU process ids before the first trial

EffectKind = Literal["speedup", "memory_factor", "info"]


@dataclass(frozen=True)
class EffectSpec:
    """Which effect of which trial measures a recommendation, and where it may hold.

    key: the effect key; "{batch}" is replaced by the nearest measured batch size.
    ratio: alternatively, (numerator key, denominator keys in order of preference): the
        measured speedup is numerator / the first denominator present (e.g. bf16 / tf32 TFLOP/s).
    family: (effect key, where-label) pairs the advice may hold at some of and not others.
    """

    trial: str
    key: str
    kind: EffectKind = "speedup"
    ratio: tuple[str, tuple[str, ...]] | None = None
    family: tuple[tuple[str, str], ...] = ()
    # What the trial times when it is only a part of the predicted metric (the attention
    # kernel of a whole prefill): the direction is checked, the prediction error is not.
    part: str | None = None


_INT4_FAMILY = tuple((f"speedup_b{b}", f"batch {b}") for b in (1, 4, 16, 64))
_FP8_FAMILY = (("prefill_speedup", "prefill"), ("decode_speedup", "decode"))

# recommendation id -> the trial effect that measures it (data, not if-chains).
VERDICT_EFFECTS: dict[str, EffectSpec] = {
    "cuda-graphs": EffectSpec("cuda-graphs", "speedup"),
    "fp8-weights": EffectSpec("fp8-gemm", "decode_speedup", family=_FP8_FAMILY),
    "fp8-training": EffectSpec("fp8-gemm", "prefill_speedup", family=_FP8_FAMILY),
    "int4-weights": EffectSpec("int4-weight-only", "speedup_b{batch}", family=_INT4_FAMILY),
    "activation-checkpointing": EffectSpec("activation-checkpointing", "memory_factor",
                                           kind="memory_factor"),
    "flash-attention": EffectSpec("attention-backends", "speedup", part="the attention kernel"),
    "torch-compile": EffectSpec("torch-compile", "speedup"),
    "kv-cache-quantization": EffectSpec("kv-cache-quantization", "memory_factor",
                                        kind="memory_factor"),
    "bf16-mixed-precision": EffectSpec("matmul-peak", "bf16_tflops",
                                       ratio=("bf16_tflops", ("tf32_tflops", "fp32_tflops"))),
    # These trials measure an input of the prediction (bus or link bandwidth), not its effect.
    "fsdp2-zero3": EffectSpec("collectives", "busbw_gbps", kind="info"),
    "tensor-parallel-in-node": EffectSpec("collectives", "busbw_gbps", kind="info"),
    "pd-disaggregation": EffectSpec("collectives", "busbw_gbps", kind="info"),
    "cpu-offload": EffectSpec("host-transfer", "pinned_gbps", kind="info"),
}


# ---------------------------------------------------------------------------------------
# running trials


def trial_environment(ctx: TrialContext, device: str | None) -> TrialEnvironment:
    """Device name, torch version, current clocks and other GPU processes (NVML) right now."""
    env = TrialEnvironment()
    if torch_missing() is None and device is not None:
        import torch

        env.torch_version = str(torch.__version__)
        if device.startswith("cuda"):
            env.device = torch.cuda.get_device_name(torch.device(device))
        else:
            env.device = f"cpu ({ctx.device.name})" if ctx.device is not None else "cpu"
    if device is None or not device.startswith("cuda"):
        return env
    index = ctx.device.index if ctx.device is not None and ctx.device.vendor == "nvidia" else 0
    try:
        from hwadvisor.probe import nvml

        clocks = nvml.current_clocks(index)
        env.sm_clock_mhz = clocks.get("sm_mhz")
        env.memory_clock_mhz = clocks.get("memory_mhz")
        procs = nvml.gpu_processes(index) or []
        env.other_processes = [
            f"{p.pid} {p.name or '?'}"
            + (f" ({p.used_memory_bytes / 2**30:.1f} GiB)" if p.used_memory_bytes else "")
            for p in others(procs, ctx.extra.get(PIDS_BEFORE))
        ]
    except Exception:  # noqa: BLE001 - the environment is context; a failed read must not fail a trial
        pass
    return env


def others(procs: list[GpuProcess], before: object) -> list[GpuProcess]:
    """Return the GPU processes that are not this one.

    In a container NVML reports host PIDs, so os.getpid() may match none of them; then only
    the processes that were on the GPU before this run touched it (`before`, a set of PIDs
    taken by run_trials) count as others: a new one is most likely this process.
    """
    me = os.getpid()
    pids = {p.pid for p in procs}
    if me in pids or not isinstance(before, set):
        return [p for p in procs if p.pid != me]
    return [p for p in procs if p.pid in before]


def _pids_before(ctx: TrialContext) -> None:
    """Record the GPU's processes before this process creates a CUDA context (see others)."""
    if PIDS_BEFORE in ctx.extra or torch_missing() is not None:
        return
    try:
        import torch

        if torch.cuda.is_initialized() or not torch.cuda.is_available():
            return
        from hwadvisor.probe import nvml

        index = ctx.device.index if ctx.device is not None and ctx.device.vendor == "nvidia" else 0
        procs = nvml.gpu_processes(index)
        if procs is not None:
            ctx.extra[PIDS_BEFORE] = {p.pid for p in procs}
    except Exception:  # noqa: BLE001 - context only; without it every non-self PID counts
        pass


def _torch_device_name(ctx: TrialContext) -> str | None:
    if torch_missing():
        return None
    from hwadvisor.trials.base import torch_device

    return torch_device(ctx)


def _free_memory() -> None:
    gc.collect()
    if torch_missing() is None:
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}".rstrip(": ")[:500]


def run_one(trial_id: str, ctx: TrialContext,
            loader: Callable[[str], Trial] | None = None) -> TrialResult:
    """Run one trial with every guard but Ctrl-C: unsupported first, errors become results."""
    started = time.perf_counter()
    try:
        trial = (loader or get_trial)(trial_id)
        reason = trial.unsupported_reason(ctx)
        if reason:
            result = TrialResult(id=trial_id, status="unsupported", reason=reason)
        else:
            result = trial.run(ctx)
    except KeyboardInterrupt:
        raise
    except Exception as exc:  # noqa: BLE001 - one failing trial must not stop the others
        out_of_memory = "OutOfMemory" in type(exc).__name__
        _free_memory()
        message = ("out of device memory: " if out_of_memory else "") + _first_line(exc)
        result = TrialResult(id=trial_id, status="error", reason=message)
    if result.wall_s is None:
        result.wall_s = time.perf_counter() - started
    if result.status in ("ok", "error"):
        try:
            result.environment = trial_environment(ctx, _torch_device_name(ctx))
        except Exception:  # noqa: BLE001 - see trial_environment
            pass
        result.busy_gpu = result.busy_gpu or bool(result.environment.other_processes)
    return result


def run_trials(ids: Iterable[str], ctx: TrialContext, progress: bool,
               loader: Callable[[str], Trial] | None = None) -> tuple[list[TrialResult], bool]:
    """Run the trials in order; return (results, interrupted).

    On Ctrl-C the results so far come back with the interrupted trial marked "interrupted";
    the trials after it are not run.
    """
    ids = list(ids)
    results: list[TrialResult] = []
    _pids_before(ctx)
    with _progress(progress) as bar:
        task = bar.add_task("trials", total=len(ids)) if bar is not None else None
        for trial_id in ids:
            if bar is not None and task is not None:
                bar.update(task, description=f"trial {trial_id}")
            try:
                results.append(run_one(trial_id, ctx, loader))
            except KeyboardInterrupt:
                _free_memory()
                results.append(TrialResult(id=trial_id, status="interrupted", reason=INTERRUPTED))
                return results, True
            if bar is not None and task is not None:
                bar.advance(task)
    return results, False


def _progress(enabled: bool) -> AbstractContextManager[Any]:
    """Return a rich progress bar on stderr, or a context manager that yields None."""
    if not enabled:
        return nullcontext()
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from hwadvisor.cli.console import err_console

    return Progress(TextColumn("{task.description}"), BarColumn(),
                    TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn(),
                    console=err_console.real(), transient=True)


def busy_note(results: list[TrialResult]) -> str | None:
    """Return a report note when other processes used the GPU while trials ran."""
    others = sorted({p for r in results for p in r.environment.other_processes})
    if not others:
        return None
    return ("other processes held the GPU during the trials, so the figures may read low: "
            + ", ".join(others))


# ---------------------------------------------------------------------------------------
# verdicts


def metric_kind(metric: str) -> Literal["time", "bytes", "rate", "other"]:
    """Classify a prediction's metric by its unit suffix."""
    if metric.endswith("per_s") or metric.endswith("_gbps") or metric.endswith("_tflops"):
        return "rate"
    if metric.endswith("_s"):
        return "time"
    if metric.endswith("_bytes"):
        return "bytes"
    return "other"


def nearest_batch_key(effect: dict[str, float], template: str,
                      batch: int) -> tuple[str, int] | None:
    """Return the effect key of the measured batch size nearest (in log scale) to batch."""
    prefix = template.split("{batch}")[0]
    measured: list[int] = []
    for key in effect:
        tail = key[len(prefix):]
        if key.startswith(prefix) and tail.isdigit():
            measured.append(int(tail))
    if not measured:
        return None
    best = min(measured, key=lambda b: (abs(math.log(b) - math.log(max(batch, 1))), b))
    return f"{prefix}{best}", best


def _measured_value(spec: EffectSpec, result: TrialResult, batch: int) -> tuple[float, str] | None:
    """(value, what) of the effect measuring the recommendation, or None when absent."""
    effect = result.effect
    if spec.ratio is not None:
        numerator, denominators = spec.ratio
        for denominator in denominators:
            if numerator in effect and effect.get(denominator):
                return effect[numerator] / effect[denominator], f"{numerator} / {denominator}"
        return None
    if "{batch}" in spec.key:
        found = nearest_batch_key(effect, spec.key, batch)
        if found is None:
            return None
        key, measured_batch = found
        return effect[key], f"{key} (nearest measured batch to {batch}: {measured_batch})"
    if spec.key in effect:
        return effect[spec.key], spec.key
    return None


def _good(kind: EffectKind, value: float, margin: float = MIN_EFFECT) -> bool:
    """Tell whether value is a gain beyond margin (default MIN_EFFECT) in its good direction."""
    if kind == "memory_factor":
        return value < 1.0 - margin
    return value > 1.0 + margin


def timing_noise(result: TrialResult) -> float:
    """Return the largest relative spread (IQR / median) of the trial's timed variants.

    A speedup smaller than this is within the run-to-run noise of its own timings: seen on the
    H200 on 2026-11-30, where FP8 decode GEMMs of ~30 us measured 0.84x in one run and 1.2x
    in another.
    """
    spreads = [m.spread / m.median for m in result.measurements
               if not m.skipped and m.unit == "s" and m.median and m.spread is not None]
    return max(spreads, default=0.0)


def holds_where(spec: EffectSpec, effect: dict[str, float]) -> str | None:
    """Where the advice holds when it holds at some members of the family and not others."""
    members = [(key, label) for key, label in spec.family if key in effect]
    holds = [label for key, label in members if _good(spec.kind, effect[key])]
    if not members or not holds or len(holds) == len(members):
        return None
    labels = [label for _, label in members]
    if all(label.startswith("batch ") for label in labels):
        sizes = [int(label.split()[1]) for label in holds]
        every = [int(label.split()[1]) for label in labels]
        below = [b for b in every if b <= max(sizes)]
        above = [b for b in every if b >= min(sizes)]
        if sorted(sizes) == below:
            return f"batch <= {max(sizes)}"
        if sorted(sizes) == above:
            return f"batch >= {min(sizes)}"
        return "batch " + ", ".join(str(b) for b in sorted(sizes))
    return ", ".join(holds) + " only"


def _to_prediction_space(kind: EffectKind, metric: str, value: float) -> float | None:
    """Return the measured effect as after/before of the metric; None when not comparable."""
    mkind = metric_kind(metric)
    if kind == "speedup":
        if mkind == "time":
            return 1.0 / value if value else None
        if mkind == "rate":
            return value
        return None
    if kind == "memory_factor" and mkind == "bytes":
        return value
    return None


def verdict(rec: Recommendation, result: TrialResult | None, batch: int = 1) -> Validation:
    """Return the validation of one recommendation from its trial's result."""
    trial_id = rec.trial
    spec = VERDICT_EFFECTS.get(rec.id)
    if spec is None and trial_id is not None:
        spec = EffectSpec(trial_id, "speedup")
    if spec is None:
        return Validation(status="pending", detail="no trial measures this recommendation")
    if result is None:
        return Validation(status="pending", detail=f"trial {spec.trial} was not run")
    if result.status == "unsupported":
        return Validation(status="unsupported", detail=f"{spec.trial}: {result.reason}")
    if result.status in ("error", "interrupted"):
        return Validation(status="error", detail=f"{spec.trial} {result.status}: {result.reason}")
    measured = _measured_value(spec, result, batch)
    if measured is None:
        if spec.kind == "memory_factor" and "memory_factor" not in result.effect and \
                "speedup" in result.effect:
            spec = EffectSpec(spec.trial, "speedup")
            measured = _measured_value(spec, result, batch)
        if measured is None:
            return Validation(status="error",
                              detail=f"{spec.trial} ran but reported no '{spec.key}' effect "
                                     f"(it has: {', '.join(result.effect) or 'none'})")
    value, what = measured
    kind: EffectKind = "speedup" if spec.ratio is not None else spec.kind
    if kind == "info":
        return Validation(status="pending", detail=(
            f"{spec.trial} measured {what} = {value:.3g}: an input of this prediction, not its "
            "effect; no verdict"))
    predicted = rec.predicted.factor
    measured_factor = _to_prediction_space(kind, rec.predicted.metric, value)
    prediction_error = None
    if measured_factor is not None and predicted:
        prediction_error = (measured_factor - predicted) / predicted
    margin = max(MIN_EFFECT, timing_noise(result)) if kind == "speedup" else MIN_EFFECT
    good = _good(kind, value, margin)
    noisy = any(m.noisy for m in result.measurements if not m.skipped)
    word = "speedup" if kind == "speedup" else "memory factor"
    detail = f"{spec.trial}: {word} {value:.3g} ({what})"
    if spec.part is not None:
        detail += (f"; the trial times {spec.part} alone, a part of {rec.predicted.metric}, "
                   "so only the direction is checked")
        prediction_error = None
    elif measured_factor is not None and predicted:
        detail += f"; as after/before of {rec.predicted.metric}: measured {measured_factor:.3g}, " \
                  f"predicted {predicted:.3g}"
    elif predicted:
        detail += (f"; the prediction is of {rec.predicted.metric}, "
                   "which this trial does not measure")
    if noisy:
        detail += (f"; some timings were noisy (spread > 10% of the median): a speedup must "
                   f"exceed {margin:.0%} to count")
    if result.busy_gpu:
        detail += "; other processes used the GPU"
    return Validation(
        status="confirmed" if good else "refuted",
        measured_factor=measured_factor if measured_factor is not None else value,
        prediction_error=prediction_error,
        detail=detail,
        holds_where=holds_where(spec, result.effect),
    )


def trial_for(rec: Recommendation) -> str | None:
    """Return the trial id that measures a recommendation (the table first, then the rule's own)."""
    spec = VERDICT_EFFECTS.get(rec.id)
    return spec.trial if spec is not None else rec.trial


def context_for(report: Report, quick: bool = False) -> TrialContext:
    """Return a trial context for a report: its first device and its workload."""
    device: Device | None = report.devices[0] if report.devices else None
    return TrialContext(device=device, workload=report.workload, budget_s=3.0 if quick else 5.0,
                        quick=quick)


def validate_report(report: Report, progress: bool, quick: bool = False) -> Report:
    """Run each recommendation's trial once at the workload's shapes and set its validation."""
    from hwadvisor.trials.registry import TRIALS
    from hwadvisor.validator.inputs import INPUT_VERDICTS

    wanted: list[str] = []
    for rec in report.recommendations:
        trial_id = trial_for(rec)
        if trial_id and trial_id in TRIALS and trial_id not in wanted:
            wanted.append(trial_id)
    results, interrupted = run_trials(wanted, context_for(report, quick), progress)
    by_id = {r.id: r for r in results}
    batch = report.workload.batch if report.workload is not None else 1
    for rec in report.recommendations:
        trial_id = trial_for(rec)
        if trial_id is None:
            continue
        if trial_id not in TRIALS:
            rec.validation = Validation(status="unsupported",
                                        detail=f"trial {trial_id} is not available in this build")
            continue
        rec.validation = verdict(rec, by_id.get(trial_id), batch)
        result = by_id.get(trial_id)
        input_check = INPUT_VERDICTS.get(trial_id)
        if input_check and result is not None and result.status == "ok" \
                and VERDICT_EFFECTS.get(rec.id, EffectSpec(trial_id, "")).kind == "info":
            rec.validation = input_check(report, rec, result)
    report.trials = list(report.trials) + results
    report.interrupted = report.interrupted or interrupted
    note = busy_note(results)
    if note and note not in report.notes:
        report.notes.append(note)
    return report


# ---------------------------------------------------------------------------------------
# probe --measure


def measured_from(results: list[TrialResult]) -> Measured | None:
    """Device.measured from memory-bandwidth (copy GB/s) and matmul-peak (TFLOP/s per format)."""
    measured = Measured()
    for result in results:
        if result.status != "ok":
            continue
        if result.id == "memory-bandwidth" and "copy_gbps" in result.effect:
            measured.memory_bandwidth_gbps = result.effect["copy_gbps"]
            measured.trial_ids.append(result.id)
        elif result.id == "matmul-peak":
            for key, value in result.effect.items():
                if key.endswith("_tflops"):
                    measured.matmul_tflops[key.removesuffix("_tflops")] = value
            if measured.matmul_tflops:
                measured.trial_ids.append(result.id)
    return measured if measured.trial_ids else None


def measure_devices(report: Report, quick: bool = False, progress: bool = False) -> Report:
    """Run the MEASURE_TRIALS on each GPU torch can reach (else the CPU) and record the figures.

    GPU figures go into device.measured beside the datasheet ones; every trial result goes into
    report.trials. On a host without a usable GPU the figures stay in report.trials only.
    """
    from hwadvisor.trials.base import cuda_available
    from hwadvisor.trials.registry import MEASURE_TRIALS

    gpus = [d for d in report.devices if d.vendor in ("nvidia", "amd")] if cuda_available() else []
    if torch_missing() is None and gpus:
        import torch

        gpus = [d for d in gpus if d.index < torch.cuda.device_count()]
    targets: list[Device | None] = list(gpus) if gpus else [None]
    for device in targets:
        ctx = TrialContext(device=device, budget_s=3.0 if quick else 5.0, quick=quick)
        results, interrupted = run_trials(MEASURE_TRIALS, ctx, progress)
        report.trials = list(report.trials) + results
        if device is not None:
            device.measured = measured_from(results)
        if interrupted:
            report.interrupted = True
            break
    note = busy_note(report.trials)
    if note and note not in report.notes:
        report.notes.append(note)
    return report
