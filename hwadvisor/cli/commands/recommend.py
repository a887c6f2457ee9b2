"""`hwadvisor recommend`: ranked, predicted optimizations for a goal, here or on a plan."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Optional

import typer
from rich.markup import escape
from rich.table import Table

from hwadvisor.cli.console import (
    JsonOpt,
    MarkdownOpt,
    OutputOpt,
    console,
    exit_for_gates,
    print_notes,
    publish,
)
from hwadvisor.cli.options import (
    ActCkptOpt,
    ActivationDtypeOpt,
    BatchOpt,
    GenLenOpt,
    GpusOpt,
    GpusPerNodeOpt,
    GradAccumOpt,
    InterNodeGbpsOpt,
    KvDtypeOpt,
    ModelOpt,
    NodesOpt,
    OptimizerOpt,
    PhaseOpt,
    PromptLenOpt,
    WeightsDtypeOpt,
    workload_from_options,
    workload_values,
)
from hwadvisor.errors import UserError
from hwadvisor.models import Recommendation, Report
from hwadvisor.models.recommend import Goal
from hwadvisor.report.gates import FailOnOpt, MinBandwidthFractionOpt, apply_gates

# Inference latency is the default goal: it applies on every device class (a phone, a laptop,
# this CPU-only host, an H200), while training advice only makes sense where people train.
DEFAULT_GOAL: Goal = "inference-latency"
GOAL_ALIASES: dict[str, Goal] = {
    "a": "training-throughput",
    "training-throughput": "training-throughput",
    "b": "inference-latency",
    "inference-latency": "inference-latency",
    "c": "memory-footprint",
    "memory-footprint": "memory-footprint",
}
# The phase a goal implies when --phase is not given.
GOAL_PHASE: dict[Goal, str] = {
    "training-throughput": "training",
    "inference-latency": "inference",
    "memory-footprint": "inference",
}

GoalOpt = Annotated[
    Optional[str],  # noqa: UP007, UP045
    typer.Option(
        "--goal", "-g",
        help="training-throughput (a), inference-latency (b) or memory-footprint (c) "
        f"[default: {DEFAULT_GOAL}]",
        show_default=False,
    ),
]
DeviceOpt = Annotated[
    Optional[str],  # noqa: UP007, UP045
    typer.Option(
        "--device",
        help="Plan for a datasheet profile instead of this machine, e.g. h200-sxm, rtx-4090, "
        "m3-max (see 'hwadvisor profiles list'); --gpus N plans N of them.",
        show_default=False,
    ),
]
ValidateOpt = Annotated[
    bool,
    typer.Option("--validate", help="Run each recommendation's trial here to confirm or refute it "
                 "(needs torch; GPU trials need a GPU)."),
]


def parse_goal(value: str | None) -> Goal:
    """Return the goal for a name or alias (a, b, c); raise UserError listing the choices."""
    if value is None:
        return DEFAULT_GOAL
    goal = GOAL_ALIASES.get(value.strip().lower())
    if goal is None:
        raise UserError(
            f"unknown goal {value!r}",
            hint="valid goals: training-throughput (a), inference-latency (b), "
            "memory-footprint (c)",
        )
    return goal


def _planned_count(options: Mapping[str, object]) -> int:
    """How many devices to plan: --gpus, else nodes x gpus-per-node, else one."""
    gpus, nodes, per_node = options.get("gpus"), options.get("nodes"), options.get("gpus_per_node")
    if isinstance(gpus, int):
        return gpus
    if isinstance(per_node, int):
        return (nodes if isinstance(nodes, int) else 1) * per_node
    return 1


def build_recommend_report(
    goal: Goal,
    device_id: str | None,
    workload_options: Mapping[str, object],
) -> Report:
    """Resolve the hardware and workload, run the rules engine, and return the report."""
    from hwadvisor.probe.target import primary_device, resolve_target
    from hwadvisor.rules.engine import recommend

    options = dict(workload_options)
    if options.get("phase") is None:
        options["phase"] = GOAL_PHASE[goal]
    count = _planned_count(options)
    target = resolve_target(device_id, count)
    device = primary_device(target)
    notes = list(target.notes)
    layout_given = any(options.get(k) is not None for k in ("gpus", "nodes", "gpus_per_node"))
    if device_id is None and not layout_given and len(target.devices) > 1 \
            and options["phase"] == "training":
        # Training on a multi-GPU host: plan the GPUs that are there (sharding advice needs it).
        options["gpus"] = len(target.devices)
        notes.append(f"planning training on all {len(target.devices)} probed GPUs; pass --gpus to "
                     "plan fewer")
    workload = workload_from_options(options, device.memory_total_bytes, device.device_class)
    outcome = recommend(workload, device, goal, host=target.host)
    if workload.is_default:
        notes.append(
            f"no --model given: recommending for the default workload {workload.model} "
            f"({workload.phase}, batch {workload.batch}, prompt {workload.prompt_len}) chosen "
            f"for {device.name}; pass --model to plan for yours"
        )
    if workload.phase != GOAL_PHASE[goal] and goal != "memory-footprint":
        notes.append(f"goal {goal} with a {workload.phase} workload: most rules of the goal "
                     "are rejected for the phase")
    return Report(
        kind="recommend",
        host=target.host,
        devices=target.devices,
        device_class=device.device_class,
        notes=notes + outcome.notes,
        workload=workload,
        estimate=outcome.estimate,
        goal=goal,
        recommendations=outcome.recommendations,
        rejected=outcome.rejected,
    )


def recommend_table(report: Report) -> Table:
    """Build the table of ranked recommendations: rank, advice, predicted effect, verdict."""
    wl = report.workload
    title = f"hwadvisor recommend · goal {report.goal}"
    if wl is not None:
        title += f" · {wl.model} {wl.phase} batch {wl.batch}"
    if report.devices:
        title += f" · {len(report.devices)} x {report.devices[0].name}"
    table = Table(title=title, show_lines=True)
    table.add_column("#", justify="right")
    table.add_column("advice", ratio=3)
    table.add_column("predicted", ratio=3)
    table.add_column("validated", ratio=2)
    for rec in report.recommendations:
        table.add_row(str(rec.rank), f"[bold]{escape(rec.id)}[/]\n{escape(rec.title)}",
                      escape(rec.predicted.text or ""), escape(_verdict_text(rec)))
    return table


def _verdict_text(rec: Recommendation) -> str:
    """Say the verdict in a few words: status, prediction error, where the advice holds."""
    val = rec.validation
    if val.status == "pending":
        return "pending (--validate)" if rec.trial else "no trial"
    text: str = str(val.status)
    if val.prediction_error is not None:
        text += f", prediction error {val.prediction_error:+.0%}"
    if val.holds_where:
        text += f"; holds for {val.holds_where}"
    return text


def why_lines(report: Report) -> list[str]:
    """One paragraph per recommendation: the evidence that made it fire, then its caveats."""
    lines = []
    for rec in report.recommendations:
        lines.append(f"{rec.rank}. {rec.id}: {rec.why}")
        if rec.validation.detail and rec.validation.status != "pending":
            lines.append(f"   measured: {rec.validation.detail}")
        for caveat in rec.caveats[:2]:
            lines.append(f"   caveat: {caveat}")
    return lines


def rejected_table(report: Report) -> Table:
    """Build the table of the goal's rules that did not fire, and why not."""
    table = Table(title="not recommended", show_lines=False)
    table.add_column("id", no_wrap=True)
    table.add_column("why not")
    for rej in report.rejected:
        reason = rej.why_not.split(": ", 1)[1] if rej.why_not.startswith(rej.id) else rej.why_not
        table.add_row(rej.id, escape(reason))
    return table


def render(report: Report) -> None:
    """Print the recommend report for people: bottleneck, ranked table, why, not recommended."""
    if report.estimate is not None:
        console.print(f"bottleneck: {report.estimate.bottleneck} — "
                      f"{escape(report.estimate.bottleneck_why)}", highlight=False)
    console.print(recommend_table(report))
    for line in why_lines(report):
        console.print(escape(line), highlight=False)
    if report.rejected:
        console.print(rejected_table(report))


def register(app: typer.Typer) -> None:
    """Register `recommend`."""

    @app.command("recommend")
    def recommend_cmd(
        goal: GoalOpt = None,
        device: DeviceOpt = None,
        model: ModelOpt = None,
        phase: PhaseOpt = None,
        batch: BatchOpt = None,
        prompt_len: PromptLenOpt = None,
        gen_len: GenLenOpt = None,
        weights_dtype: WeightsDtypeOpt = None,
        kv_dtype: KvDtypeOpt = None,
        activation_dtype: ActivationDtypeOpt = None,
        optimizer: OptimizerOpt = None,
        grad_accum: GradAccumOpt = None,
        gpus: GpusOpt = None,
        nodes: NodesOpt = None,
        gpus_per_node: GpusPerNodeOpt = None,
        inter_node_gbps: InterNodeGbpsOpt = None,
        activation_checkpointing: ActCkptOpt = False,
        validate: ValidateOpt = False,
        as_json: JsonOpt = False,
        output: OutputOpt = None,
        markdown: MarkdownOpt = None,
        fail_on: FailOnOpt = None,
        min_bw_fraction: MinBandwidthFractionOpt = None,
    ) -> None:
        """Recommend optimizations for a goal, ranked by predicted gain, and say why not the rest.

        Without options: inference-latency advice for this machine and a default model.
        """
        workload_options = workload_values(locals())  # first: locals() is the parameters
        chosen = parse_goal(goal)
        report = build_recommend_report(chosen, device, workload_options)
        print_notes(report.notes, "note: ")
        if validate:
            try:
                from hwadvisor.validator.runner import validate_report
            except ImportError as exc:  # the validator (or torch) is not installed
                raise UserError(f"cannot validate: {exc}",
                                hint="pip install 'hwadvisor[validate]'") from None

            report = validate_report(report, progress=not as_json)
        report.gates_tripped = apply_gates(report, fail_on, min_bw_fraction)
        publish(report, render, as_json, output, markdown)
        exit_for_gates(report)
