"""The one place the stages chain: probe → workload → perfmodel → serving → rules → validator.

Each function builds one command's report from plain inputs; the CLI parses options, calls
one, and renders what comes back. Stage work lives in its stage (workload/settle.py,
perfmodel/calibration.calibrate, validator/measure.py); stages load inside the functions that
need them, so `probe` never loads the rules and torch loads only when trials run.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from hwadvisor.models import Device, ModelOptions, Report, Workload
from hwadvisor.models.recommend import Goal

if TYPE_CHECKING:  # the probe path must not import the workload package
    from hwadvisor.cluster.job import JobResult, LocalRun, Place
    from hwadvisor.cluster.launcher import Launch
    from hwadvisor.perfmodel.calibration import Calibration
    from hwadvisor.serving.request import LoadRequest
    from hwadvisor.validator.found import Found
    from hwadvisor.validator.runner import Progress  # told (trial id, done, in all) as trials run
    from hwadvisor.workload import Sizing, WorkloadRequest


def build_workload(request: WorkloadRequest, sizing: Sizing) -> Workload:
    """Build the workload (workload/settle.py), any model type readable (the generic reader)."""
    from hwadvisor.validator.measure import read_any_model
    from hwadvisor.workload import settle

    return settle.build_workload(request, sizing, read_any_model)


def probe_report(measure: bool = False, progress: Progress | None = None,
                 gpus: list[int] | None = None) -> Report:
    """Probe this machine, only the GPUs `gpus` names when given (probe -i).

    With measure, also run the bandwidth and matmul trials on each of them torch can see.
    """
    from hwadvisor.probe import collect
    from hwadvisor.probe.select import select_devices, visibility_note

    report = select_devices(collect(), gpus)
    report.notes += [n for n in (visibility_note(report),) if n]
    if measure:  # the validator's trials; torch is imported only on this path
        from hwadvisor.validator import measure as measuring

        report = with_found(report, measuring.measure(report, progress))
    return report


@dataclass
class _Planned:
    """The hardware to plan for, calibrated, and the request split into nodes."""

    target: Report
    device: Device
    calibration: Calibration | None
    request: WorkloadRequest
    calibration_notes: list[str]
    split: str | None


def _planned(device_id: str | None, count: int, request: WorkloadRequest,
             calibration: Path | None) -> _Planned:
    """Resolve, calibrate and split: the preamble estimate and recommend share."""
    from hwadvisor.cluster.calibration import inter_node_figure
    from hwadvisor.perfmodel.calibration import calibrate
    from hwadvisor.probe.target import primary_device, resolve_target
    from hwadvisor.workload.settle import split_into_nodes

    target = resolve_target(device_id, count)
    done = calibrate(calibration, primary_device(target), request, inter_node_figure)
    request, split = split_into_nodes(done.request, done.device)
    return _Planned(target, done.device, done.calibration, request, done.notes, split)


def estimate_report(request: WorkloadRequest, device_id: str | None, options: ModelOptions,
                    calibration: Path | None = None, load: LoadRequest | None = None) -> Report:
    """Model the workload on the hardware (calibrated), under a load if given; the report."""
    from hwadvisor.perfmodel import estimate
    from hwadvisor.probe.target import MAX_PLANNED_DEVICES, resolve_target
    from hwadvisor.workload import Sizing
    from hwadvisor.workload.settle import on_engine_defaults

    p = _planned(device_id, 1, request, calibration)
    target, device = p.target, p.device
    workload = build_workload(p.request, Sizing(device.memory_total_bytes, target.device_class,
                                                device.formats))
    if device_id is not None and workload.gpus > 1:
        # The report lists the devices of one node (the plan's per-node GPUs).
        per_node = workload.gpus_per_node or workload.gpus // workload.nodes
        target = resolve_target(device_id, min(per_node, MAX_PLANNED_DEVICES))
    workload, options = on_engine_defaults(workload, device, options)
    result = estimate(workload, device, options, calibration=p.calibration)
    notes = list(target.notes) + ([p.split] if p.split else []) + p.calibration_notes
    if not target.devices:
        notes.append("no accelerator found: estimated for the CPU (see the assumptions)")
    serving = None
    if load is not None:  # the serving room loads only under a load
        from hwadvisor.serving.plan import under_load

        serving = under_load(load, workload, device, options, p.calibration)
    return target.model_copy(update={"kind": "estimate", "workload": workload, "notes": notes,
                                     "estimate": result, "devices": target.devices or [device],
                                     "serving": serving})


def recommend_report(goal: Goal, device_id: str | None, request: WorkloadRequest,
                     calibration: Path | None = None, min_tokens_per_s: float | None = None,
                     load: LoadRequest | None = None) -> Report:
    """Resolve the hardware and workload, run the rules engine, and return the report.

    calibration: measurements replacing the datasheet's in every estimate; load: the search
    under it (report.serving) gives the plan's config and sentence.
    """
    from hwadvisor.perfmodel import PerfModel
    from hwadvisor.probe.target import MAX_PLANNED_DEVICES
    from hwadvisor.rules.advise import recommend
    from hwadvisor.rules.playbooks.goals import goal_spec
    from hwadvisor.workload import Sizing, settle

    if request.phase is None:
        request = request.with_changes(phase=goal_spec(goal).phase)
    # As estimate does: the report lists one node's devices, however many GPUs the plan has.
    p = _planned(device_id, request.devices_per_node(MAX_PLANNED_DEVICES), request, calibration)
    device = p.device
    target, host_note = settle.planned_host(p.target, p.request)
    request, all_gpus = settle.train_on_probed_gpus(p.request, len(target.devices),
                                                    device_id is not None)
    notes = list(target.notes) + p.calibration_notes
    workload, one = settle.one_conversation(build_workload(request, Sizing.of(device)),
                                            str(device.device_class))
    notes += [n for n in (p.split, host_note, all_gpus, one) if n]
    serving = None
    if load is not None:
        from hwadvisor.serving.plan import under_load

        serving = under_load(load, workload, device, ModelOptions(), p.calibration, True,
                             workload.gpus if request.layout_given() else None)
    outcome = recommend(workload, device, goal, host=target.host,
                        estimator=PerfModel(p.calibration) if p.calibration is not None else None,
                        min_tokens_per_s=min_tokens_per_s, serving=serving)
    spec = goal_spec(goal)
    notes += settle.workload_notes(workload, device.name, goal,
                                   None if spec.any_phase else spec.phase)
    return Report(kind="recommend", host=target.host, devices=target.devices,
                  device_class=device.device_class, notes=notes + outcome.notes,
                  workload=workload, estimate=outcome.estimate, goal=goal, plan=outcome.plan,
                  recommendations=outcome.recommendations, rejected=outcome.rejected,
                  serving=serving)


def validate_recommendations(report: Report, progress: Progress | None = None,
                             quick: bool = False, nvls: bool = False,
                             engine_model: Path | None = None) -> Report:
    """Run each recommendation's trial, the plan's stacked step and the engine's benchmark."""
    from hwadvisor.validator.measure import validate_recommend_report

    return with_found(report, validate_recommend_report(report, progress, quick, nvls,
                                                        engine_model))


def with_found(report: Report, found: Found) -> Report:
    """Return the report with what the validator found: trials, verdicts, figures, notes."""
    recs = report.recommendations
    if found.recommendations is not None:
        recs = [r.model_copy(update={"validation": v})
                for r, v in zip(recs, found.recommendations, strict=True)]
    plan = report.plan
    if plan is not None and found.plan is not None:
        plan = plan.model_copy(update={"validation": found.plan})
    devices = [d.model_copy(update={"measured": found.measured[d.index]})
               if d.index in found.measured else d for d in report.devices]
    return report.model_copy(update={
        "trials": list(report.trials) + found.trials, "recommendations": recs, "plan": plan,
        "devices": devices, "interrupted": report.interrupted or found.interrupted,
        "load_test": found.load_test or report.load_test,
        "notes": report.notes + [n for n in found.notes if n not in report.notes]})


def validate_trials_report(trial_ids: list[str] | None, quick: bool, request: WorkloadRequest,
                           progress: Progress | None = None, nvls: bool = False,
                           gpus: list[int] | None = None, repeat: int = 1) -> Report:
    """Probe, build the workload, run the trials `repeat` times; return the validate report.

    The report may be partial (interrupted). The trials run on the first GPU of `gpus`
    (validate -i) that torch can see, else on the first GPU torch sees (cuda:0); the report
    lists the probed GPUs (or those of -i).
    """
    from hwadvisor.probe import collect
    from hwadvisor.probe.select import select_devices, visibility_note
    from hwadvisor.validator.measure import report_for, run_here, trial_target

    hardware = select_devices(collect(), gpus)
    target = trial_target(hardware, chosen=bool(gpus))
    report = report_for(hardware, target, request)
    report.notes += [n for n in (visibility_note(hardware),) if n]
    return with_found(report, run_here(report, target, trial_ids, quick, nvls, progress, repeat))


def validate_saved_report(path: Path, quick: bool, progress: Progress | None = None,
                          nvls: bool = False) -> Report:
    """Validate the recommendations of a saved recommend report."""
    from hwadvisor.validator.measure import saved_recommendations

    report = validate_recommendations(saved_recommendations(path), progress, quick, nvls)
    return report.model_copy(update={"kind": "validate"})


# ---------------------------------------------------------------------------------------
# runs under torchrun or srun: every rank does its own part, rank 0 gathers (hwadvisor.cluster)


def cluster_probe_report(launch: Launch, measure: bool, timeout_s: float,
                         progress: Progress | None = None) -> JobResult:
    """Probe this rank's host and GPU (with measure: its trials, then the job's collectives)."""
    from hwadvisor.cluster import job

    def work(place: Place) -> LocalRun:
        from hwadvisor.probe import collect
        from hwadvisor.validator.measure import failed_notes, measure_trial_ids, rank_trials

        report = collect()
        device = job.pick_device(report.devices, place)
        if not measure:
            return job.LocalRun(report=report, device=device)
        found = rank_trials(report, device, place, measure_trial_ids(), False, False, progress)
        found.notes += failed_notes(found.trials)
        return job.LocalRun.of(with_found(report, found), device, found.rank_measured)

    return job.run(launch, work, timeout_s=timeout_s, measure_collectives=measure)


def cluster_validate_report(launch: Launch, trial_ids: list[str] | None, quick: bool,
                            request: WorkloadRequest, timeout_s: float,
                            progress: Progress | None = None, nvls: bool = False) -> JobResult:
    """Run the trials on this rank's GPU; the collectives trial runs across the whole job."""
    from hwadvisor.cluster import job
    from hwadvisor.validator.measure import all_trial_ids, in_asked_order, rank_trials, report_for

    wanted = list(trial_ids or all_trial_ids())
    on_rank = [t for t in wanted if t != "collectives"]  # the job measures it, all ranks at once

    def work(place: Place) -> LocalRun:
        from hwadvisor.probe import collect

        hardware = collect()
        device = job.pick_device(hardware.devices, place)
        report = report_for(hardware, device, request)
        found = rank_trials(report, device, place, on_rank, quick, nvls, progress)
        return job.LocalRun.of(with_found(report, found), device, found.rank_measured)

    result = job.run(launch, work, timeout_s=timeout_s, quick=quick, nvls=nvls,
                     measure_collectives="collectives" in wanted)
    if result.report is not None:  # the job's collectives came last
        in_asked_order(result.report.trials, wanted)
    return result
