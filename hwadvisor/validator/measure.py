"""Where trials run and whose figures they are: measuring, targeting, attributing.

The pipeline chains these; they are the only doors from the planning side to `trials/`
(the trial registry, torch's view of the GPUs, the generic model reader), so neither the
pipeline nor the CLI imports `trials/` itself. Trial functions are looked up on their modules
at call time (`base.cuda_ordinal`, `runner.run_trials`) so a test can stand in for torch.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from hwadvisor.errors import ExitCode, UserError
from hwadvisor.models import Device, ModelSpec, Report, TrialResult
from hwadvisor.trials import base, registry
from hwadvisor.trials.base import TrialContext
from hwadvisor.trials.kit import environment
from hwadvisor.validator import runner
from hwadvisor.validator.found import Found
from hwadvisor.validator.runner import Progress

if TYPE_CHECKING:
    from hwadvisor.cluster.job import Place
    from hwadvisor.workload import WorkloadRequest


def read_any_model(config: dict[str, Any], source: str) -> ModelSpec:
    """Read any causal LM's config with the generic reader (trials/meta_model.py).

    A model_type the hand-written parsers lack is read from the module tree transformers
    builds on the meta device (torch and transformers load only then, never at start-up),
    once per config: validator/model_cache.py keeps the counted shapes. The pipeline hands
    this to the workload's builder, as it hands calibrate the cluster's network reader.
    """
    from hwadvisor.trials.meta_model import describe_config
    from hwadvisor.validator.model_cache import cached

    return cached(describe_config)(config, source)


def torch_missing() -> str | None:
    """Return why torch cannot be imported (with the install hint), or None."""
    return base.torch_missing()


def torch_install_hint() -> str:
    """Return the pip line that installs the trials' torch."""
    return base.TORCH_MISSING.split(": ", 1)[1]


def cuda_available() -> bool:
    """Return whether torch sees a CUDA (or ROCm) GPU."""
    return base.cuda_available()


def all_trial_ids() -> list[str]:
    """Return every trial id, in the order validate runs them."""
    return registry.trial_ids()


def check_trial_ids(ids: list[str]) -> None:
    """UserError (exit 2) for an unknown trial id, with the valid ones in the hint."""
    registry.check_ids(ids)


def measure_trial_ids() -> list[str]:
    """Return the trials `probe --measure` runs (the device's own figures)."""
    return list(registry.MEASURE_TRIALS)


def measure(report: Report, progress: Progress | None) -> Found:
    """Run the MEASURE_TRIALS on each GPU torch can see (else once, on the CPU).

    GPUs are matched to torch's by PCI bus id or CUDA_VISIBLE_DEVICES (trials.base
    cuda_ordinal), so each figure lands on the device it was measured on (Found.measured, by
    the device's index).
    """
    gpus = [d for d in report.devices if d.vendor in ("nvidia", "amd")
            and base.cuda_ordinal(d) is not None]
    targets: list[Device | None] = list(gpus) if gpus else [None]
    found = Found()
    for device in targets:
        ctx = TrialContext(device=device, budget_s=5.0)
        results, interrupted = runner.run_trials(registry.MEASURE_TRIALS, ctx, progress)
        attribute_trials(results, device)
        found.trials += results
        if device is not None:
            found.measured[device.index] = runner.measured_from(results)
        if interrupted:
            found.interrupted = True
            break
    found.note(runner.busy_note(list(report.trials) + found.trials))
    found.notes += failed_notes(found.trials)
    return found


def attribute_trials(results: list[TrialResult], device: Device | None) -> None:
    """Record in each trial's environment which report device (NVML index) it ran on."""
    on_gpu = device is not None and base.cuda_ordinal(device) is not None
    for result in results:
        if result.status in ("ok", "error") and on_gpu and device is not None:
            result.environment.device_index = device.index


def trial_target(report: Report, chosen: bool = False) -> Device | None:
    """Return the device trials run on: the GPU torch calls cuda:0, else the first listed.

    chosen (validate -i): the first listed GPU torch can see; UserError (exit 3) when torch
    sees GPUs but none of those, rather than measuring another GPU under their name.
    """
    gpus = [d for d in report.devices if d.vendor in ("nvidia", "amd")]
    ordinals = [(base.cuda_ordinal(d), d) for d in gpus]
    visible = [(o, d) for o, d in ordinals if o is not None]
    if visible:
        return visible[0][1] if chosen else min(visible, key=lambda pair: pair[0])[1]
    if chosen and gpus and base.cuda_available():
        names = ", ".join(str(d.index) for d in gpus)
        raise UserError(f"--gpu {names}: torch cannot see that GPU (CUDA_VISIBLE_DEVICES / "
                        "HIP_VISIBLE_DEVICES hide it)",
                        hint="pick a GPU torch can see, or unset the variable",
                        code=ExitCode.NO_DEVICE)
    return report.devices[0] if report.devices else None


def cpu_torch_note(target: Device | None) -> str | None:
    """Return a note when torch cannot use the trials' GPU (they measure the CPU instead)."""
    if target is None or target.vendor not in runner.GPU_VENDORS \
            or environment.cuda_device_count() > 0:
        return None
    return (f"{runner.NO_GPU}: the trials ran on the CPU; their figures are the CPU's, not "
            f"{target.name}'s")


def run_here(report: Report, target: Device | None, ids: list[str] | None, quick: bool,
             nvls: bool, progress: Progress | None, repeat: int = 1) -> Found:
    """Run the trials (all without ids) on target, `repeat` times; return what they found."""
    ctx = runner.context_for(report, quick, nvls=nvls)
    ctx.device = target
    found = Found()
    found.note(cpu_torch_note(target))
    found.trials, found.interrupted = runner.run_repeated(ids or all_trial_ids(), ctx, repeat,
                                                          progress)
    attribute_trials(found.trials, target)
    found.note(runner.busy_note(found.trials))
    return found


def rank_trials(report: Report, device: Device | None, place: Place, ids: list[str],
                quick: bool, nvls: bool, progress: Progress | None) -> Found:
    """Run trials on one rank's GPU (the CPU without one); return what they found.

    The rank's report and device are read, not changed: the pipeline puts the trials, the
    device's figures and the notes in (pipeline.with_found), then cluster/job.py gathers it.
    """
    ctx = TrialContext(device=device, workload=report.workload, budget_s=3.0 if quick else 5.0,
                       quick=quick, nvls=nvls, cuda_index=place.cuda_index)
    results, interrupted = runner.run_trials(ids, ctx, progress)
    found = Found(trials=results, interrupted=interrupted,
                  rank_measured=runner.measured_from(results))
    if device is not None:
        found.measured[device.index] = found.rank_measured
    found.note(runner.busy_note(results))
    return found


def report_for(hardware: Report, device: Device | None, request: WorkloadRequest) -> Report:
    """Return a validate report of the probed hardware, its workload sized for device."""
    from hwadvisor.workload import Sizing, settle

    memory = device.memory_total_bytes if device else hardware.host.memory_total_bytes
    sizing = Sizing(memory, device.device_class if device else hardware.device_class)
    workload = settle.build_workload(request, sizing, read_any_model)
    return Report(kind="validate", host=hardware.host, devices=hardware.devices,
                  device_class=hardware.device_class, notes=list(hardware.notes),
                  workload=workload)


def in_asked_order(trials: list[TrialResult], wanted: list[str]) -> None:
    """Sort trials into the order asked (the job's collectives come back last)."""
    trials.sort(key=lambda t: wanted.index(t.id) if t.id in wanted else len(wanted))


def saved_recommendations(path: Path) -> Report:
    """Read a saved recommend report to validate (validate --report); exit 2 without advice.

    Its devices get back the facts the JSON leaves out (family, SoC part), as the probe or the
    profile set them when the report was made, so the advice is predicted again the same way.
    """
    from hwadvisor.profiles import restore_facts
    from hwadvisor.report.io import load_report

    report = load_report(path)
    # The saved run's interruption is its own; this run is interrupted only if it is stopped.
    report.interrupted = False
    if not report.recommendations:
        raise UserError(f"{path} has no recommendations to validate",
                        hint="pass a report written by 'hwadvisor recommend --output FILE'")
    return report.model_copy(update={"devices": [restore_facts(d) for d in report.devices]})


def failed_notes(trials: list[TrialResult]) -> list[str]:
    """Return one --measure note for each trial that did not run cleanly."""
    return [f"--measure: trial {t.id} {t.status}: {t.reason}" for t in trials if t.status != "ok"]


def validate_recommend_report(report: Report, progress: Progress | None, quick: bool,
                              nvls: bool, engine_model: Path | None) -> Found:
    """Run each recommendation's trial, the plan's stacked step and the engine's benchmark.

    The trials' results are credited to the device they ran on (attribute_trials); the
    engine's own benchmark runs on `engine_model` where the engine is installed.
    """
    from hwadvisor.validator.engine_bench import engine_verdict
    from hwadvisor.validator.inputs import repredict
    from hwadvisor.validator.plan import plan_check
    from hwadvisor.validator.runner import verdicts_for

    found = verdicts_for(report, progress=progress, quick=quick, repredict=repredict,
                         nvls=nvls, plan_check=plan_check(report))
    attribute_trials(found.trials, report.devices[0] if report.devices else None)
    if report.plan is not None:
        so_far = found.plan or report.plan.validation
        found.plan = engine_verdict(report, so_far, engine_model) or found.plan
    return found
