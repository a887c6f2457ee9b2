"""Settling the workload for the planned hardware: engine, precision, nodes, host, GPUs.

The pipeline chains these; each takes the user's request and what the hardware stage found,
and returns the request or workload to plan with and, where something was decided for the
user, a note that says so.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from hwadvisor.errors import UserError
from hwadvisor.models import Device, ModelOptions, Report, Workload
from hwadvisor.workload import build, limits
from hwadvisor.workload.configparse import ModelReader
from hwadvisor.workload.request import Sizing, WorkloadRequest


def build_workload(request: WorkloadRequest, sizing: Sizing,
                   read_model: ModelReader | None = None) -> Workload:
    """Build the workload and settle its engine: --engine, the format's, or the default.

    The engine's release (--engine vllm==0.6.0) and the user's --engine-option changes ride
    on the workload, so every stage reads the same engine (engines.engine_for). read_model
    reads a model_type the hand-written parsers lack (workload/configparse.py).
    """
    from hwadvisor.engines import (
        defaults_text,
        get_engine,
        parse_options,
        pick_engine,
        split_engine_spec,
    )

    cls = str(getattr(sizing.device_class, "value", sizing.device_class) or "cpu")
    name, version = split_engine_spec(request.engine) if request.engine else (None, None)
    draft = build.build_workload(request.with_changes(engine=name), sizing, read_model)
    given_dtype = draft.weights_dtype if request.weights_dtype is not None else None
    engine, why = pick_engine(name, given_dtype, cls, draft.phase, sizing.formats)
    options = parse_options(request.engine_options)
    chosen = get_engine(engine, version, options)  # checks the version and the options
    update: dict[str, object] = {
        "engine": engine, "engine_source": why, "engine_version": version,
        "engine_options": options, "engine_defaults": defaults_text(chosen, options)}
    update.update(_half_precision(request, draft, cls, sizing.formats))
    if given_dtype is None and draft.weights_dtype not in chosen.weight_formats:
        # The checkpoint's own format (an FP8 release, say) is not one this engine runs.
        update["weights_dtype"] = "bf16"
        update["weights_dtype_source"] = (
            f"{chosen.name} does not run the checkpoint's {draft.weights_dtype} "
            "weights: planned in bf16 (convert the checkpoint, or pass --engine)")
    return draft.model_copy(update=update)


def one_conversation(workload: Workload, device_class: str) -> tuple[Workload, str | None]:
    """Plan a batch above what the engine's runtime decodes at once there at its limit.

    An on-device runtime runs one conversation at a time (ExecuTorch's llama runner, LiteRT-LM,
    Genie, MLC LLM's phone app: the engine's [defaults] max_sequences_on); a plan for 64 of them
    would search changes for a memory and a speed no such app has, so the plan is for the
    conversation it serves, and the note says why.
    """
    from hwadvisor.engines import engine_for

    engine = engine_for(workload)
    most = engine.defaults.max_sequences_on.get(device_class)
    if workload.phase != "inference" or most is None or workload.batch <= most:
        return workload, None
    one = "one conversation" if most == 1 else f"{most} sequences"
    note = (f"--batch {workload.batch}: {engine.name} decodes {one} at a time on {device_class} "
            f"(its runtime has no setting for more), so batch {workload.batch} is not what it "
            f"serves: planned at batch {most}; for many users, serve on a GPU")
    return workload.model_copy(update={"batch": most}), note


def _half_precision(request: WorkloadRequest, draft: Workload, device_class: str,
                    formats: Sequence[str] | None) -> dict[str, object]:
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


def on_engine_defaults(workload: Workload, device: Device,
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


def split_into_nodes(request: WorkloadRequest, device: Device) -> tuple[WorkloadRequest,
                                                                        str | None]:
    """--gpus beyond one machine's GPUs without --nodes: split into machines, and say so.

    A DGX H100 has 8 GPUs: --gpus 32 plans 4 nodes of 8 (network between them). Desktop cards
    go up to a workstation's four in one machine (PCIe between them) before a split.
    """
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


def train_on_probed_gpus(request: WorkloadRequest, probed_gpus: int,
                         device_given: bool) -> tuple[WorkloadRequest, str | None]:
    """Training on a multi-GPU host without a layout: plan the GPUs that are there.

    Sharding advice needs the GPU count; a user who wants fewer says --gpus. Not for --device
    (a planned system, not this one) nor for serving.
    """
    if device_given or request.layout_given() or probed_gpus <= 1 \
            or request.phase != "training":
        return request, None
    return request.with_changes(gpus=probed_gpus), (
        f"planning training on all {probed_gpus} probed GPUs; pass --gpus to plan fewer")


def workload_notes(workload: Workload, device_name: str, goal: str,
                   goal_phase: str | None) -> list[str]:
    """Return notes on the workload planned for: the default one, or a phase off the goal.

    goal_phase: the phase the goal's rules are for; None for a goal that plans any phase.
    """
    notes = []
    if workload.is_default:
        notes.append(
            f"no --model given: recommending for the default workload {workload.model} "
            f"({workload.phase}, batch {workload.batch}, prompt {workload.prompt_len}) chosen "
            f"for {device_name}; pass --model to plan for yours"
        )
    if goal_phase is not None and workload.phase != goal_phase:
        article = "an" if workload.phase[:1] in "aeiou" else "a"
        notes.append(f"goal {goal} with {article} {workload.phase} workload: most rules of the "
                     "goal are rejected for the phase")
    return notes
