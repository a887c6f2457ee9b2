"""The one place the stages chain: probe → workload → perfmodel → rules → validator → report.

Each function builds one command's report from plain inputs and returns it; the CLI only
parses options, calls one of these, and renders or writes what comes back. Heavy stages are
imported inside the functions that need them, so `probe` never loads the rules and no stage
loads torch unless trials run.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hwadvisor.errors import ExitCode, UserError
from hwadvisor.models import (
    Device,
    Estimate,
    ModelOptions,
    Plan,
    Recommendation,
    Report,
    TrialResult,
    Workload,
)
from hwadvisor.models.recommend import Goal

if TYPE_CHECKING:  # the probe path must not import the workload package
    from hwadvisor.cluster.job import JobResult, LocalRun, Place
    from hwadvisor.cluster.launcher import Launch
    from hwadvisor.perfmodel.calibration import Calibration
    from hwadvisor.rules.context import Estimator
    from hwadvisor.validator.plan import PlanCheck
    from hwadvisor.workload import WorkloadRequest

# Told (trial id, trials done, trials in all) as trials run; the CLI draws a progress bar.
Progress = Callable[[str, int, int], None]


def _a(word: str) -> str:
    """Return the article for word ('an inference', 'a training')."""
    return "an" if word[:1].lower() in "aeiou" else "a"


def build_workload(request: WorkloadRequest, device_memory_bytes: int | None,
                   device_class: object, formats: list[str] | None = None) -> Workload:
    """Build the workload and settle its engine: --engine, the format's, or the default.

    The engine's release (--engine vllm==0.6.0) and the user's --engine-option changes ride
    on the workload, so every stage reads the same engine (engines.engine_for).
    """
    from hwadvisor.engines import (
        defaults_text,
        get_engine,
        parse_options,
        pick_engine,
        split_engine_spec,
    )
    from hwadvisor.trials.meta_model import describe_config
    from hwadvisor.workload import generic

    # A model_type the hand-written parsers lack is read from the module tree transformers
    # builds on the meta device (torch and transformers load only then, never at start-up).
    generic.use(describe_config)
    cls = str(getattr(device_class, "value", device_class) or "cpu")
    name, version = split_engine_spec(request.engine) if request.engine else (None, None)
    draft = request.with_changes(engine=name).build(device_memory_bytes, device_class)
    given_dtype = draft.weights_dtype if request.weights_dtype is not None else None
    engine, why = pick_engine(name, given_dtype, cls, draft.phase, formats)
    options = parse_options(request.engine_options)
    chosen = get_engine(engine, version, options)  # checks the version and the options
    update: dict[str, object] = {
        "engine": engine, "engine_source": why, "engine_version": version,
        "engine_options": options, "engine_defaults": defaults_text(chosen, options)}
    update.update(_half_precision(request, draft, cls, formats))
    if given_dtype is None and draft.weights_dtype not in chosen.weight_formats:
        # The checkpoint's own format (an FP8 release, say) is not one this engine runs.
        update["weights_dtype"] = "bf16"
        update["weights_dtype_source"] = (
            f"{chosen.name} does not run the checkpoint's {draft.weights_dtype} "
            "weights: planned in bf16 (convert the checkpoint, or pass --engine)")
    return draft.model_copy(update=update)



def _half_precision(request: WorkloadRequest, draft: Workload, device_class: str,
                    formats: list[str] | None) -> dict[str, object]:
    """On a GPU without bf16 (T4, V100), compute in fp16 where the user named no dtype.

    What people run there: fp16 mixed precision with loss scaling for training, --dtype half
    for serving (vLLM refuses bf16 below compute capability 8.0).
    """
    if formats is None or "bf16" in formats or "fp16" not in formats or \
            device_class not in ("datacenter-gpu", "consumer-gpu"):
        return {}
    update: dict[str, object] = {}
    if request.activation_dtype is None and draft.activation_dtype == "bf16":
        update["activation_dtype"] = "fp16"
    if request.kv_dtype is None and draft.kv_dtype == "bf16":
        update["kv_dtype"] = "fp16"
    if request.weights_dtype is None and draft.weights_dtype == "bf16":
        update["weights_dtype"] = "fp16"
        update["weights_dtype_source"] = "the checkpoint's bf16 weights run as fp16: this GPU " \
            "has no bf16"
    return update


def split_into_nodes(request: WorkloadRequest, device: Device) -> tuple[WorkloadRequest,
                                                                        str | None]:
    """--gpus beyond one machine's GPUs without --nodes: split into machines, and say so.

    A DGX H100 has 8 GPUs: --gpus 32 plans 4 nodes of 8 (network between them). Desktop cards
    go up to a workstation's four in one machine (PCIe between them) before a split.
    """
    from hwadvisor.workload import limits

    limits.check("--gpus", request.gpus)  # before the split: the user's number, the user's name
    most = device.max_gpus_per_node or device.gpus_per_node
    gpus = request.gpus
    if gpus is None or request.nodes is not None or request.gpus_per_node is not None \
            or not most or gpus <= most:
        return request, None
    # The fewest nodes that hold the GPUs evenly: 12 on 8-GPU systems are 2 nodes x 6 (one
    # NVLink domain holds 8, not 12); 13 have no even split but 13 x 1.
    nodes = next(n for n in range(-(-gpus // most), gpus + 1) if gpus % n == 0)
    per_node = gpus // nodes
    note = (f"--gpus {gpus} is more than one {device.name} system holds ({most} per node): "
            f"planned as {nodes} nodes x {per_node} GPUs; pass --nodes and --gpus-per-node to "
            "plan another split")
    return request.with_changes(gpus=None, nodes=nodes, gpus_per_node=per_node), note


def planned_host(report: Report, request: WorkloadRequest) -> tuple[Report, str | None]:
    """--host-memory-gb: the host RAM of the planned system (offload checks read it)."""
    if request.host_memory_gb is None:
        return report, None
    if not math.isfinite(request.host_memory_gb) or not 1 <= request.host_memory_gb <= 1e6:
        raise UserError(f"--host-memory-gb must be between 1 and 1,000,000 GB, got "
                        f"{request.host_memory_gb}", hint="e.g. --host-memory-gb 512")
    host = report.host.model_copy(update={
        "memory_total_bytes": int(request.host_memory_gb * 1e9)})
    return report.model_copy(update={"host": host}), (
        f"host memory {request.host_memory_gb:g} GB (--host-memory-gb)")


def probe_report(measure: bool = False, progress: Progress | None = None,
                 gpus: list[int] | None = None) -> Report:
    """Probe this machine, only the GPUs `gpus` names when given (probe -i).

    With measure, also run the bandwidth and matmul trials on each of them torch can see.
    """
    from hwadvisor.probe import collect
    from hwadvisor.probe.select import select_devices, visibility_note

    report = select_devices(collect(), gpus)
    note = visibility_note(report)
    if note:
        report.notes.append(note)
    if measure:  # the validator's trials; torch is imported only on this path
        report = _measure(report, progress)
        for trial in report.trials:
            if trial.status != "ok":
                report.notes.append(f"--measure: trial {trial.id} {trial.status}: {trial.reason}")
    return report


def load_calibration(path: Path | None, device: Device) -> tuple[Calibration | None, list[str]]:
    """Return the measured figures of `device` in the report at path, and a note saying which.

    None without a path. A report that measured nothing, or only another device, is a
    UserError (exit 2): the user asked for calibration, so silently using the datasheet would
    mislead.
    """
    if path is None:
        return None, []
    from hwadvisor.perfmodel.calibration import from_report, measured_devices
    from hwadvisor.report.io import load_report

    report = load_report(path)
    found = from_report(report, device, source=str(path))
    if found is None and _has_network(report):
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
    figures = [name for name, value in (
        ("memory bandwidth", found.memory_bandwidth_gbps),
        ("matmul " + "/".join(sorted(found.matmul_tflops)), found.matmul_tflops),
        ("attention", found.attention_tflops), ("launch latency", found.kernel_floor_s),
        ("host transfer", found.host_transfer_gbps), ("bus bandwidth", found.busbw_gbps))
        if value]
    return found, [f"calibration: {', '.join(figures)} measured on {found.device} ({path})"]


def _check_plausible(found: Calibration, device: Device, path: Path) -> None:
    """UserError (exit 2) when a calibration figure is outside the device's physical range."""
    from hwadvisor.perfmodel.calibration import implausible

    wrong = implausible(found, device)
    if wrong:
        raise UserError(f"--calibration {path}: {'; '.join(wrong[:3])}"
                        + (f" (and {len(wrong) - 3} more)" if len(wrong) > 3 else ""),
                        hint="that is not a measurement of this device: pass the report "
                        "'hwadvisor validate --output FILE' or 'probe --measure' wrote on it, "
                        "or drop --calibration")


def _has_network(report: Report) -> bool:
    from hwadvisor.cluster.calibration import inter_node_figure

    return inter_node_figure(report) is not None


def network_calibration(request: WorkloadRequest, path: Path | None,
                        device: Device | None = None) -> tuple[WorkloadRequest, list[str]]:
    """--calibration of a cluster report: plan with its measured inter-node bandwidth."""
    if path is None:
        return request, []
    from hwadvisor.report.io import load_report

    return calibrate_network(request, load_report(path), str(path), device)


def calibrated(device: Device, calibration: Calibration | None) -> Device:
    """Return the device with the calibration's bandwidth and matmul in its measured field."""
    if calibration is None:
        return device
    return device.model_copy(update={"measured": calibration.measured(device.measured)})


def _estimator(calibration: Calibration | None) -> Estimator:
    """estimate() with the calibration's figures (the rules engine calls it per what-if)."""
    from hwadvisor.perfmodel import PerfModel

    return PerfModel(calibration)


def _measure(report: Report, progress: Progress | None) -> Report:
    """Run the validator's MEASURE_TRIALS on each GPU torch can see (else once, on the CPU).

    GPUs are matched to torch's by PCI bus id or CUDA_VISIBLE_DEVICES (trials.base
    cuda_ordinal), so each figure lands on the device it was measured on.
    """
    from hwadvisor.trials.base import TrialContext, cuda_ordinal
    from hwadvisor.trials.registry import MEASURE_TRIALS
    from hwadvisor.validator.runner import busy_note, measured_from, run_trials

    gpus = [d for d in report.devices if d.vendor in ("nvidia", "amd")
            and cuda_ordinal(d) is not None]
    targets: list[Device | None] = list(gpus) if gpus else [None]
    for device in targets:
        ctx = TrialContext(device=device, budget_s=5.0)
        results, interrupted = run_trials(MEASURE_TRIALS, ctx, progress)
        attribute_trials(results, device)
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


def attribute_trials(results: list[TrialResult], device: Device | None) -> None:
    """Record in each trial's environment which report device (NVML index) it ran on."""
    from hwadvisor.trials.base import cuda_ordinal

    on_gpu = device is not None and cuda_ordinal(device) is not None
    for result in results:
        if result.status in ("ok", "error") and on_gpu and device is not None:
            result.environment.device_index = device.index


def trial_target(report: Report, chosen: bool = False) -> Device | None:
    """Return the device trials run on: the GPU torch calls cuda:0, else the first listed.

    chosen (validate -i): the first listed GPU torch can see; UserError (exit 3) when torch
    sees GPUs but none of those, rather than measuring another GPU under their name.
    """
    from hwadvisor.trials.base import cuda_available, cuda_ordinal

    gpus = [d for d in report.devices if d.vendor in ("nvidia", "amd")]
    ordinals = [(cuda_ordinal(d), d) for d in gpus]
    visible = [(o, d) for o, d in ordinals if o is not None]
    if visible:
        return visible[0][1] if chosen else min(visible, key=lambda pair: pair[0])[1]
    if chosen and gpus and cuda_available():
        names = ", ".join(str(d.index) for d in gpus)
        raise UserError(f"--gpu {names}: torch cannot see that GPU (CUDA_VISIBLE_DEVICES / "
                        "HIP_VISIBLE_DEVICES hide it)",
                        hint="pick a GPU torch can see, or unset the variable",
                        code=ExitCode.NO_DEVICE)
    return report.devices[0] if report.devices else None


def estimate_report(request: WorkloadRequest, device_id: str | None,
                    options: ModelOptions, calibration: Path | None = None) -> Report:
    """Resolve the hardware and the workload, run the performance model, return the report.

    calibration: a report whose measurements of this device replace the datasheet figures.
    """
    from hwadvisor.perfmodel import estimate
    from hwadvisor.probe.target import MAX_PLANNED_DEVICES, primary_device, resolve_target

    target = resolve_target(device_id, 1)
    device = primary_device(target)
    measured, calibration_notes = load_calibration(calibration, device)
    device = calibrated(device, measured)
    request, network_notes = network_calibration(request, calibration, device)
    calibration_notes += network_notes
    request, split = split_into_nodes(request, device)
    workload = build_workload(request, device.memory_total_bytes, target.device_class,
                              device.formats)
    if device_id is not None and workload.gpus > 1:
        # The report lists the devices of one node (the plan's per-node GPUs).
        per_node = workload.gpus_per_node or workload.gpus // workload.nodes
        target = resolve_target(device_id, min(per_node, MAX_PLANNED_DEVICES))
    workload, options = _on_engine_defaults(workload, device, options)
    result = estimate(workload, device, options, calibration=measured)
    notes = list(target.notes) + ([split] if split else []) + calibration_notes
    if not target.devices:
        notes.append("no accelerator found: estimated for the CPU (see the assumptions)")
    return target.model_copy(update={
        "kind": "estimate", "workload": workload, "estimate": result, "notes": notes,
        "devices": target.devices or [device],
    })


def _on_engine_defaults(workload: Workload, device: Device,
                        options: ModelOptions) -> tuple[Workload, ModelOptions]:
    """Start from what the engine does by default, as recommend does; the user's flags on top.

    The what-if flags of estimate only turn things on (or, --fp32-training, mixed precision
    off), so each one that differs from ModelOptions' default is the user's word.
    """
    from hwadvisor.engines import baseline

    workload, start = baseline(workload, device)
    given = {k: v for k, v in options.model_dump().items()
             if v != ModelOptions.model_fields[k].default}
    return workload, start.model_copy(update=given)


def recommend_report(goal: Goal, device_id: str | None, request: WorkloadRequest,
                     calibration: Path | None = None,
                     min_tokens_per_s: float | None = None) -> Report:
    """Resolve the hardware and workload, run the rules engine, and return the report.

    calibration: a report whose measurements of this device replace the datasheet figures in
    every estimate the rules engine makes.
    """
    from hwadvisor.probe.target import MAX_PLANNED_DEVICES, primary_device, resolve_target
    from hwadvisor.rules.advise import recommend
    from hwadvisor.rules.playbook import GOAL_PHASE

    if request.phase is None:
        request = request.with_changes(phase=GOAL_PHASE[goal])
    # As estimate does: the report lists one node's devices, however many GPUs the plan has.
    target = resolve_target(device_id, request.devices_per_node(MAX_PLANNED_DEVICES))
    device = primary_device(target)
    measured, calibration_notes = load_calibration(calibration, device)
    device = calibrated(device, measured)
    request, network_notes = network_calibration(request, calibration, device)
    notes = list(target.notes) + calibration_notes + network_notes
    request, split = split_into_nodes(request, device)
    target, host_note = planned_host(target, request)
    notes += [n for n in (split, host_note) if n]
    if device_id is None and not request.layout_given() and len(target.devices) > 1 \
            and request.phase == "training":
        # Training on a multi-GPU host: plan the GPUs that are there (sharding advice needs it).
        request = request.with_changes(gpus=len(target.devices))
        notes.append(f"planning training on all {len(target.devices)} probed GPUs; pass --gpus to "
                     "plan fewer")
    workload = build_workload(request, device.memory_total_bytes, device.device_class,
                              device.formats)
    outcome = recommend(workload, device, goal, host=target.host,
                        estimator=_estimator(measured) if measured is not None else None,
                        min_tokens_per_s=min_tokens_per_s)
    if workload.is_default:
        notes.append(
            f"no --model given: recommending for the default workload {workload.model} "
            f"({workload.phase}, batch {workload.batch}, prompt {workload.prompt_len}) chosen "
            f"for {device.name}; pass --model to plan for yours"
        )
    if workload.phase != GOAL_PHASE[goal] and goal != "memory-footprint":
        notes.append(f"goal {goal} with {_a(workload.phase)} {workload.phase} workload: most "
                     "rules of the goal are rejected for the phase")
    return Report(
        kind="recommend",
        host=target.host,
        devices=target.devices,
        device_class=device.device_class,
        notes=notes + outcome.notes,
        workload=workload,
        estimate=outcome.estimate,
        goal=goal,
        plan=outcome.plan,
        recommendations=outcome.recommendations,
        rejected=outcome.rejected,
    )


def calibrate_network(request: WorkloadRequest, report: Report, source: str,
                      device: Device | None = None) -> tuple[WorkloadRequest, list[str]]:
    """Plan with the inter-node bus bandwidth a cluster report measured (--calibration).

    Returns the request with inter_node_gbps set and a note saying so; unchanged, with no
    note, when the report has no inter-node figure (a one-host report still calibrates the
    device). --inter-node-gbps, when given, wins: the user said so.
    """
    from hwadvisor.cluster.calibration import inter_node_figure

    found = inter_node_figure(report)
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


def repredict(report: Report, rec: Recommendation, busbw_gbps: float) -> float | None:
    """Predict a recommendation's factor again with a measured bus bandwidth (GB/s).

    None when the rule no longer fires with that bandwidth. The validator calls this for
    advice whose trial measures an input of the prediction (the collectives trial).
    """
    from hwadvisor.perfmodel import estimate
    from hwadvisor.probe.target import primary_device
    from hwadvisor.rules.advise import recommend

    if report.workload is None or report.goal is None:
        return None
    device = primary_device(report)

    def measured(workload: Workload, dev: Device, options: ModelOptions) -> Estimate:
        return estimate(workload, dev, options, measured_busbw_gbps=busbw_gbps)

    outcome = recommend(report.workload, device, report.goal, host=report.host, estimator=measured)
    again = next((r for r in outcome.recommendations if r.id == rec.id), None)
    return again.predicted.factor if again is not None else None


def plan_check(report: Report) -> PlanCheck | None:
    """Return what the validator needs to measure the plan as a whole (None without a plan)."""
    from hwadvisor.probe.target import primary_device
    from hwadvisor.rules.plancheck import metric_words, predicted_ratio, trial_spec
    from hwadvisor.validator.plan import PlanCheck

    plan = report.plan
    if plan is None or report.workload is None or report.goal is None:
        return None
    ratio = _plan_ratio(plan)
    if not plan.steps:
        return PlanCheck(spec=None, plan_ratio=ratio, no_steps=True)
    device = primary_device(report)
    workload = report.workload
    spec, unmeasured = trial_spec(workload, device, report.goal, plan)
    if spec is None:
        return PlanCheck(spec=None, unmeasured=unmeasured, plan_ratio=ratio)

    def predict(applied: dict[str, Any]) -> float | None:
        assert spec is not None
        return predicted_ratio(workload, device, spec.phase, spec.metric, applied)

    return PlanCheck(spec=spec, unmeasured=unmeasured, predict=predict, plan_ratio=ratio,
                     metric=metric_words(spec))


def _plan_ratio(plan: Plan) -> float | None:
    """Return the whole plan's predicted ratio: a speedup for speed goals, a factor for memory."""
    before, after = plan.metric.before, plan.metric.after
    if not before or not after:
        return None
    if plan.metric.name == "memory_per_gpu_bytes":
        return after / before
    return after / before if plan.metric.better == "higher" else before / after


def validate_recommendations(report: Report, progress: Progress | None = None,
                             quick: bool = False, nvls: bool = False) -> Report:
    """Run each recommendation's trial and the plan's stacked step; set the verdicts."""
    from hwadvisor.validator.runner import validate_report

    before = len(report.trials)
    report = validate_report(report, progress=progress, quick=quick, repredict=repredict,
                             nvls=nvls, plan_check=plan_check(report))
    attribute_trials(report.trials[before:], report.devices[0] if report.devices else None)
    return report


def validate_trials_report(trial_ids: list[str] | None, quick: bool, request: WorkloadRequest,
                           progress: Progress | None = None, nvls: bool = False,
                           gpus: list[int] | None = None) -> Report:
    """Probe, build the workload, run the trials; return the validate report (maybe partial).

    The trials run on the first GPU of `gpus` (validate -i) that torch can see, else on the
    first GPU torch sees (cuda:0); the report lists the probed GPUs (or those of -i).
    """
    from hwadvisor.probe import collect
    from hwadvisor.probe.select import select_devices, visibility_note
    from hwadvisor.trials.registry import trial_ids as all_ids
    from hwadvisor.validator.runner import busy_note, context_for, run_trials

    hardware = select_devices(collect(), gpus)
    target = trial_target(hardware, chosen=bool(gpus))
    report = _validate_report_for(hardware, target, request)
    note = visibility_note(hardware)
    if note:
        report.notes.append(note)
    ctx = context_for(report, quick, nvls=nvls)
    ctx.device = target
    cpu_only = cpu_torch_note(target)
    if cpu_only:
        report.notes.append(cpu_only)
    results, interrupted = run_trials(trial_ids or all_ids(), ctx, progress)
    attribute_trials(results, target)
    report.trials = results
    report.interrupted = interrupted
    busy = busy_note(results)
    if busy:
        report.notes.append(busy)
    return report


def cpu_torch_note(target: Device | None) -> str | None:
    """Return a note when torch cannot use the trials' GPU (they measure the CPU instead)."""
    from hwadvisor.trials.environment import cuda_device_count
    from hwadvisor.validator.runner import GPU_VENDORS, NO_GPU

    if target is None or target.vendor not in GPU_VENDORS or cuda_device_count() > 0:
        return None
    return (f"{NO_GPU}: the trials ran on the CPU; their figures are the CPU's, not "
            f"{target.name}'s")


def _validate_report_for(hardware: Report, device: Device | None,
                         request: WorkloadRequest) -> Report:
    """Return a validate report of the probed hardware, its workload sized for device."""
    workload = build_workload(
        request,
        device.memory_total_bytes if device else hardware.host.memory_total_bytes,
        device.device_class if device else hardware.device_class,
    )
    return Report(kind="validate", host=hardware.host, devices=hardware.devices,
                  device_class=hardware.device_class, notes=list(hardware.notes),
                  workload=workload)


def validate_saved_report(path: Path, quick: bool, progress: Progress | None = None,
                          nvls: bool = False) -> Report:
    """Validate the recommendations of a saved recommend report."""
    from hwadvisor.report.io import load_report

    report = load_report(path)
    if not report.recommendations:
        raise UserError(f"{path} has no recommendations to validate",
                        hint="pass a report written by 'hwadvisor recommend --output FILE'")
    report = validate_recommendations(report, progress=progress, quick=quick, nvls=nvls)
    report.kind = "validate"
    return report


# ---------------------------------------------------------------------------------------
# runs under torchrun or srun: every rank does its own part, rank 0 gathers (hwadvisor.cluster)


def cluster_probe_report(launch: Launch, measure: bool, timeout_s: float,
                         progress: Progress | None = None) -> JobResult:
    """Probe this rank's host and GPU (with measure: its trials, then the job's collectives)."""
    from hwadvisor.cluster import job

    def work(place: Place) -> LocalRun:
        from hwadvisor.probe import collect

        report = collect()
        device = job.pick_device(report.devices, place)
        if not measure:
            return job.LocalRun(report=report, device=device)
        from hwadvisor.trials.registry import MEASURE_TRIALS

        run = _rank_trials(report, device, place, list(MEASURE_TRIALS), False, False, progress)
        report.notes += [f"--measure: trial {t.id} {t.status}: {t.reason}"
                         for t in report.trials if t.status != "ok"]
        return run

    return job.run(launch, work, timeout_s=timeout_s, measure_collectives=measure)


def cluster_validate_report(launch: Launch, trial_ids: list[str] | None, quick: bool,
                            request: WorkloadRequest, timeout_s: float,
                            progress: Progress | None = None, nvls: bool = False) -> JobResult:
    """Run the trials on this rank's GPU; the collectives trial runs across the whole job."""
    from hwadvisor.cluster import job
    from hwadvisor.trials.registry import trial_ids as all_ids

    wanted = list(trial_ids or all_ids())
    on_rank = [t for t in wanted if t != "collectives"]  # the job measures it, all ranks at once

    def work(place: Place) -> LocalRun:
        from hwadvisor.probe import collect

        hardware = collect()
        device = job.pick_device(hardware.devices, place)
        report = _validate_report_for(hardware, device, request)
        return _rank_trials(report, device, place, on_rank, quick, nvls, progress)

    result = job.run(launch, work, timeout_s=timeout_s, quick=quick, nvls=nvls,
                     measure_collectives="collectives" in wanted)
    if result.report is not None:  # the job's collectives came last; put them in asked order
        result.report.trials.sort(key=lambda t: wanted.index(t.id) if t.id in wanted
                                  else len(wanted))
    return result


def _rank_trials(report: Report, device: Device | None, place: Place, ids: list[str],
                 quick: bool, nvls: bool, progress: Progress | None) -> LocalRun:
    """Run trials on this rank's GPU (the CPU without one); its figures go to device.measured."""
    from hwadvisor.cluster import job
    from hwadvisor.trials.base import TrialContext
    from hwadvisor.validator.runner import busy_note, measured_from, run_trials

    ctx = TrialContext(device=device, workload=report.workload, budget_s=3.0 if quick else 5.0,
                       quick=quick, nvls=nvls, cuda_index=place.cuda_index)
    results, interrupted = run_trials(ids, ctx, progress)
    report.trials = results
    report.interrupted = interrupted
    measured = measured_from(results)
    if device is not None:
        device.measured = measured
    busy = busy_note(results)
    if busy:
        report.notes.append(busy)
    return job.LocalRun(report=report, device=device, measured=measured)
