"""The validator's runner: run trials safely, then set each recommendation's verdict.

run_trials guards each trial on its own (unsupported first; out-of-memory and any other
exception become status "error" and the next trial runs; Ctrl-C stops the run and returns what
finished plus the interrupted trial). verdicts_for runs each recommendation's trial once and
returns the verdicts (validator.verdicts) for the pipeline to put in the report. Progress and
re-prediction come in as callbacks: the validator draws nothing and runs no rules itself.
"""

from __future__ import annotations

import math
import os
import statistics
import time
from collections.abc import Callable, Iterable

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
from hwadvisor.models.trial import figure_values
from hwadvisor.trials import registry
from hwadvisor.trials.base import Trial, TrialContext
from hwadvisor.trials.kit import environment
from hwadvisor.trials.registry import get_trial
from hwadvisor.validator.found import Found
from hwadvisor.validator.inputs import Repredict, input_verdict
from hwadvisor.validator.plan import PlanCheck, plan_verdict
from hwadvisor.validator.verdicts import spec_for, trial_for, verdict

INTERRUPTED = "interrupted by Ctrl-C"
NO_GPU = "torch sees no GPU (CPU-only build?)"
GPU_VENDORS = ("nvidia", "amd")  # torch reaches both through its CUDA API (ROCm: HIP)

# Told (trial id, trials done, trials in all) as trials run; the CLI draws a progress bar.
Progress = Callable[[str, int, int], None]


def trial_environment(ctx: TrialContext, device: str | None) -> TrialEnvironment:
    """Device name, torch version, current clocks and other GPU processes (NVML) right now."""
    env = TrialEnvironment()
    if device is not None:
        env.torch_version = environment.torch_version()
        env.device = environment.device_name(device, ctx)
    if device is None or not device.startswith("cuda") or environment.is_rocm():
        return env  # NVML reads NVIDIA GPUs only
    index = ctx.device.index if ctx.device is not None and ctx.device.vendor == "nvidia" else 0
    try:
        from hwadvisor.probe import nvml

        clocks = nvml.current_clocks(index)
        env.sm_clock_mhz = clocks.get("sm_mhz")
        env.memory_clock_mhz = clocks.get("memory_mhz")
        env.throttle_reasons = nvml.throttle_reasons(index)
        procs = nvml.gpu_processes(index) or []
        env.other_processes = [
            f"{p.pid} {p.name or '?'}"
            + (f" ({p.used_memory_bytes / 2**30:.1f} GiB)" if p.used_memory_bytes else "")
            for p in others(procs, ctx.gpu_pids_before)
        ]
    except Exception:  # the environment is context; a failed read must not fail a trial
        pass
    return env


def gpu_state(ctx: TrialContext) -> tuple[int | None, list[str] | None]:
    """(SM clock MHz, active clocks-event reasons) of the trial's NVIDIA GPU right now.

    (None, None) off NVIDIA (ROCm, MPS, CPU) or when NVML cannot read them; read before a
    trial and again after it, so a verdict can say when clocks were limited meanwhile.
    """
    if ctx.device is not None and ctx.device.vendor != "nvidia":
        return None, None
    device = environment.device_for(ctx)
    if device is None or not device.startswith("cuda") or environment.is_rocm():
        return None, None
    index = ctx.device.index if ctx.device is not None else 0
    try:
        from hwadvisor.probe import nvml

        return nvml.current_clocks(index).get("sm_mhz"), nvml.throttle_reasons(index)
    except Exception:  # context only, like trial_environment
        return None, None


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


# The GPU's processes before this process first created its CUDA context: later runs in the
# same process (recommend --validate repeated in one script) reuse it.
_process_pids_before: set[int] | None = None


def _pids_before(ctx: TrialContext) -> None:
    """Record the GPU's processes before this process creates a CUDA context (see others)."""
    global _process_pids_before
    if ctx.gpu_pids_before is not None:
        return
    try:
        if not environment.cuda_context_pending():
            if _process_pids_before is not None:
                ctx.gpu_pids_before = set(_process_pids_before)
            return
        from hwadvisor.probe import nvml

        index = ctx.device.index if ctx.device is not None and ctx.device.vendor == "nvidia" else 0
        procs = nvml.gpu_processes(index)
        if procs is not None:
            _process_pids_before = {p.pid for p in procs}
            ctx.gpu_pids_before = set(_process_pids_before)
    except Exception:  # context only; without it every non-self PID counts
        pass


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}".rstrip(": ")[:500]


def run_one(trial_id: str, ctx: TrialContext,
            loader: Callable[[str], Trial] | None = None) -> TrialResult:
    """Run one trial with every guard but Ctrl-C: unsupported first, errors become results."""
    started = time.perf_counter()
    clock_before, reasons_before = None, None
    try:
        trial = (loader or get_trial)(trial_id)
        reason = trial.unsupported_reason(ctx)
        if reason:
            result = TrialResult(id=trial_id, status="unsupported", reason=reason)
        else:
            clock_before, reasons_before = gpu_state(ctx)
            result = trial.run(ctx)
    except KeyboardInterrupt:
        raise
    except Exception as exc:  # one failing trial must not stop the others
        out_of_memory = "OutOfMemory" in type(exc).__name__
        environment.free_device_memory()
        message = ("out of device memory: " if out_of_memory else "") + _first_line(exc)
        result = TrialResult(id=trial_id, status="error", reason=message)
    if result.wall_s is None:
        result.wall_s = time.perf_counter() - started
    if result.status in ("ok", "error"):
        try:
            env = trial_environment(ctx, environment.device_for(ctx))
            env.sm_clock_mhz_before = clock_before
            env.throttle_reasons_before = reasons_before
            result.environment = env
        except Exception:  # see trial_environment
            pass
        result.busy_gpu = result.busy_gpu or bool(result.environment.other_processes)
    return result


def run_trials(ids: Iterable[str], ctx: TrialContext, progress: Progress | None = None,
               loader: Callable[[str], Trial] | None = None) -> tuple[list[TrialResult], bool]:
    """Run the trials in order; return (results, interrupted).

    progress, when given, is told (trial id, trials done, trials in all) before each trial and
    once at the end (id ""). On Ctrl-C the results so far come back with the interrupted trial
    marked "interrupted"; the trials after it are not run.
    """
    ids = list(ids)
    results: list[TrialResult] = []
    _pids_before(ctx)
    for done, trial_id in enumerate(ids):
        try:
            if progress:  # inside the guard: the CLI's callback raises for a pending signal
                progress(trial_id, done, len(ids))
            results.append(run_one(trial_id, ctx, loader))
        except KeyboardInterrupt:
            environment.free_device_memory()
            results.append(TrialResult(id=trial_id, status="interrupted", reason=INTERRUPTED))
            return results, True
    if progress:
        try:
            progress("", len(ids), len(ids))
        except KeyboardInterrupt:  # a signal whose exception was lost during the last trial
            return results, True
    return results, False


def run_repeated(ids: Iterable[str], ctx: TrialContext, repeat: int,
                 progress: Progress | None = None) -> tuple[list[TrialResult], bool]:
    """Run the trials `repeat` times in rounds (all once, then all again); one result each.

    Rounds, not each trial N times in a row: a passing load on a shared machine then falls on
    one run of several trials, not on every run of one. See combine_runs for the result.
    """
    ids = list(ids)
    results, interrupted = run_trials(ids * max(1, repeat), ctx, progress)
    return [combine_runs([r for r in results if r.id == i]) for i in ids
            if any(r.id == i for r in results)], interrupted


def combine_runs(runs: list[TrialResult]) -> TrialResult:
    """One trial's runs as one result: the run nearest the runs' medians, with every run's figures.

    A run that did not end ok (error, unsupported, interrupted) is the result: the trial did
    not run cleanly every time. Otherwise the result is the run whose figures lie nearest the
    medians over the runs (the sum of |log(value / median)|), so one outlier run is never the
    one verdicts and calibration read, and `repeats` holds each run's figures for compare.
    """
    failed = [r for r in runs if r.status != "ok"]
    if failed:
        return failed[-1]
    if len(runs) == 1:
        return runs[0]
    figures = [figure_values(r) for r in runs]
    keys = [k for k in figures[0] if all(k in f for f in figures)]
    medians = {k: statistics.median(f[k] for f in figures) for k in keys}

    def distance(found: dict[str, float]) -> float:
        return sum(abs(math.log(found[k] / medians[k])) for k in keys
                   if found[k] > 0 and medians[k] > 0)

    nearest = min(range(len(runs)), key=lambda i: distance(figures[i]))
    return runs[nearest].model_copy(update={"repeats": figures})


def busy_note(results: list[TrialResult]) -> str | None:
    """Return a report note when other processes used the GPU while trials ran."""
    others = sorted({p for r in results for p in r.environment.other_processes})
    if not others:
        return None
    return ("other processes held the GPU during the trials, so the figures may read low: "
            + ", ".join(others))


# ---------------------------------------------------------------------------------------
# verdicts


def context_for(report: Report, quick: bool = False, nvls: bool = False) -> TrialContext:
    """Return a trial context for a report: its first device and its workload."""
    device: Device | None = report.devices[0] if report.devices else None
    return TrialContext(device=device, workload=report.workload, budget_s=3.0 if quick else 5.0,
                        quick=quick, nvls=nvls)


def verdicts_for(report: Report, progress: Progress | None = None, quick: bool = False,
                 repredict: Repredict | None = None, nvls: bool = False,
                 plan_check: PlanCheck | None = None) -> Found:
    """Run each recommendation's trial once at the workload's shapes; return their verdicts.

    repredict, when given, predicts advice again from a measured input (the collectives
    trial's bus bandwidth); without it such advice keeps the trial's plain reading.
    plan_check, when given, runs the plan's stacked step last and judges the plan.
    The report is read, never changed: the pipeline puts what is found into it.
    """
    from hwadvisor.trials.registry import PLAN_TRIAL_ID, TRIALS

    if gpu_unreachable(report):
        return _unsupported_without_gpu(report)
    wanted: list[str] = []
    for rec in report.recommendations:
        trial_id = trial_for(rec)
        if trial_id and trial_id in TRIALS and trial_id not in wanted:
            wanted.append(trial_id)
    ctx = context_for(report, quick, nvls)
    if plan_check is not None and plan_check.spec is not None:
        ctx.plan_spec = plan_check.spec.model_dump()
        wanted.append(PLAN_TRIAL_ID)
    results, interrupted = run_trials(wanted, ctx, progress)
    by_id = {r.id: r for r in results}
    found = Found(trials=results, interrupted=interrupted,
                  recommendations=[_rec_verdict(report, rec, by_id, repredict)
                                   for rec in report.recommendations])
    if plan_check is not None and report.plan is not None:
        found.plan = plan_verdict(plan_check, by_id.get(PLAN_TRIAL_ID))
    found.note(busy_note(results))
    return found


def _rec_verdict(report: Report, rec: Recommendation, by_id: dict[str, TrialResult],
                 repredict: Repredict | None) -> Validation:
    """One recommendation's verdict from its trial's result (an input trial re-predicts)."""
    from hwadvisor.trials.registry import TRIALS

    batch = report.workload.batch if report.workload is not None else 1
    trial_id = trial_for(rec)
    if trial_id is None:
        return verdict(rec, None, batch)  # unsupported: nothing measures it
    if trial_id not in TRIALS:
        return Validation(status="unsupported",
                          detail=f"trial {trial_id} is not available in this build")
    result = by_id.get(trial_id)
    spec = spec_for(rec)
    if result is not None and result.status == "ok" and spec is not None and spec.kind == "info":
        return input_verdict(report, rec, result, repredict)
    return verdict(rec, result, batch)


def gpu_unreachable(report: Report) -> bool:
    """Tell whether the report's device is a GPU torch cannot use (a CPU-only torch build).

    Trials would then run on the CPU: their figures say nothing of the GPU the advice is for.
    """
    device = report.devices[0] if report.devices else None
    if device is None or device.vendor not in GPU_VENDORS:
        return False
    return environment.cuda_device_count() == 0


def _unsupported_without_gpu(report: Report) -> Found:
    """Every recommendation (and the plan) unsupported: nothing here can measure them."""
    from hwadvisor.models import PlanValidation

    name = report.devices[0].name if report.devices else "the GPU"
    detail = f"{NO_GPU}: no trial can measure advice for {name} on this CPU"
    found = Found(recommendations=[Validation(status="unsupported", detail=detail)
                                   for _ in report.recommendations])
    if report.plan is not None:
        found.plan = PlanValidation(status="unsupported", detail=detail)
    found.note(f"{NO_GPU}: the advice for {name} was not validated (no trial ran)")
    return found


# ---------------------------------------------------------------------------------------
# probe --measure


def measured_from(results: list[TrialResult]) -> Measured | None:
    """Device.measured from the trials that provide its figures (trials/registry.py says which)."""
    measured = Measured()
    for result in results:
        figure = registry.provides(result.id)
        if result.status != "ok" or figure not in registry.DEVICE_FIGURES:
            continue
        effect = registry.TRIALS[result.id].effect or ""
        if figure == "memory_bandwidth" and effect in result.effect:
            measured.memory_bandwidth_gbps = result.effect[effect]
            measured.trial_ids.append(result.id)
        elif figure == "matmul_tflops":
            _matmul_figures(measured, result.effect, effect)
            if measured.matmul_tflops:
                measured.trial_ids.append(result.id)
    return measured if measured.trial_ids else None


def _matmul_figures(measured: Measured, effect: dict[str, float], suffix: str) -> None:
    """Split a matmul trial's effects into burst and sustained TFLOP/s by format."""
    sustained = "_sustained" + suffix
    for key, value in effect.items():
        if key.endswith(sustained):
            measured.matmul_sustained_tflops[key.removesuffix(sustained)] = value
        elif key.endswith(suffix):
            measured.matmul_tflops[key.removesuffix(suffix)] = value
