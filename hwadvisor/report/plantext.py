"""The plan in words: the bottom line, the numbered steps, the numbers that matter, the config.

The human view (cli/commands/recommend.py) and the markdown summary (report/markdown.py) both
start with these lines, so the plan reads the same in a terminal and in a CI step summary.
"""

from __future__ import annotations

from hwadvisor import units
from hwadvisor.models import Plan, PlanLayout, Report

METRIC_LABEL = {
    "tokens_per_s": "throughput",
    "request_latency_s": "request latency",
    "memory_per_gpu_bytes": "memory per GPU",
}


def metric_text(plan: Plan, value: float | None) -> str:
    """Return the goal's metric of the plan as people read it."""
    return units.quantity(value, plan.metric.unit)


def headline(report: Report) -> str:
    """Return 'plan for training-throughput: llama-3-8b training on 8 x H100 with torchtitan'."""
    plan = report.plan
    wl = report.workload
    if plan is None or wl is None:
        return ""
    from hwadvisor.report.plain import engine_name, machine

    return (f"plan for {report.goal}: {wl.model} {wl.phase}, batch {wl.batch}, "
            f"{wl.prompt_len} tokens{f' + {wl.gen_len} generated' if wl.gen_len else ''}, "
            f"{machine(report)}, engine {engine_name(plan.engine, short=True)}")


def step_lines(plan: Plan, on_gpu: bool = True) -> list[str]:
    """Return one line per step: what to change, the metric and memory after it, and its fit."""
    label = METRIC_LABEL.get(plan.metric.name, plan.metric.name)
    if not on_gpu and label == "memory per GPU":
        label = "memory"
    per = " per GPU" if on_gpu else ""
    lines = []
    for i, step in enumerate(plan.steps, start=1):
        fit = "fits" if step.fits_after else "does not fit yet"
        why = " (to fit)" if step.needed_to_fit else ""
        lines.append(f"{i}. {step.title}{why} → {label} {metric_text(plan, step.metric_after)}, "
                     f"{units.gb(step.memory_per_gpu_bytes_after)}{per}, {fit}")
        if step.changes_method:
            lines.append(f"   changes the method: {step.changes_method}")
        for effect in step.side_effects[:3]:
            lines.append(f"   also: {effect}")
    return lines


def numbers_line(report: Report) -> str:
    """Return TTFT / TPOT / throughput / max batch / max context / layout, as far as they apply."""
    plan = report.plan
    if plan is None:
        return ""
    parts = []
    if plan.ttft_s is not None:
        parts.append(f"TTFT {units.seconds(plan.ttft_s)}")
    if plan.tpot_s is not None:
        parts.append(f"TPOT {units.seconds(plan.tpot_s)}")
    if plan.tokens_per_s is not None:
        batch = report.workload.batch if report.workload else 1
        parts.append(f"{units.rate(plan.tokens_per_s)} at batch {batch}")
    if plan.max_batch is not None:
        parts.append(f"max batch {plan.max_batch:,}")
    if plan.max_context is not None:
        parts.append(f"max context {plan.max_context:,}")
    layout = plan.layout
    if layout is not None and layout.gpus > 1:
        shape = [f"{name} {value}" for name, value in
                 (("TP", layout.tp), ("PP", layout.pp), ("CP", layout.cp)) if value > 1]
        shape.extend(_data_parallel(layout))
        parts.append(f"layout {' x '.join(shape)} ({layout.sharding}"
                     f"{', EP' if layout.ep else ''})")
    return " · ".join(parts)


def _data_parallel(layout: PlanLayout) -> list[str]:
    """Name the data-parallel part: FSDP's shards, HSDP's shards x replicas, or replicas."""
    def count(n: int, what: str) -> str:
        return f"{n} {what}{'s' if n != 1 else ''}"

    if layout.sharding == "hsdp":
        return [count(layout.shard_degree(), "shard"), count(layout.replicas(), "replica")]
    if layout.sharding == "fsdp":
        return [count(layout.shard_degree(), "shard")]
    return [count(layout.replicas(), "replica")]


def plan_lines(report: Report) -> list[str]:
    """Return the whole plan in plain lines, bottom line first."""
    plan = report.plan
    if plan is None:
        return []
    lines = [plan.summary, headline(report)]
    on_gpu = str(report.device_class) in ("datacenter-gpu", "consumer-gpu")
    label = METRIC_LABEL.get(plan.metric.name, plan.metric.name)
    if not on_gpu and label == "memory per GPU":
        label = "memory"
    if plan.steps:
        lines.append(f"{label}: {metric_text(plan, plan.metric.before)} on the engine's defaults "
                     f"→ {metric_text(plan, plan.metric.after)} with the plan")
        lines += step_lines(plan, on_gpu)
    else:
        lines.append(f"no change beats the engine's defaults: {label} "
                     f"{metric_text(plan, plan.metric.after)}")
    numbers = numbers_line(report)
    if numbers:
        lines.append(numbers)
    if not plan.fits and plan.min_gpus is not None:
        lines.append(f"fits on {plan.min_gpus} of these GPUs (min_gpus)")
    if plan.alternatives and plan.alternatives_order:
        lines.append(f"alternatives, {plan.alternatives_order}:")
    for alt in plan.alternatives:
        lines.append(f"alternative ({alt.id}): {alt.text}")
    lines += validation_lines(plan)
    return [line for line in lines if line]


def validation_lines(plan: Plan) -> list[str]:
    """Return the plan's measured check (recommend --validate), when it ran."""
    v = plan.validation
    if v is None:
        return []
    head = f"plan measured: {v.status}"
    if v.measured_ratio is not None:
        ci = f" [{v.ci[0]:.2f}, {v.ci[1]:.2f}]" if v.ci else ""
        head += f", {units.ratio(v.measured_ratio)}{ci} ({v.metric})"
        if v.predicted_ratio is not None:
            head += f", predicted {units.ratio(v.predicted_ratio)} for the same step"
    lines = [head]
    if v.measured_ratio is None and v.detail:
        lines.append(f"   {v.detail}")
    if v.measured_steps:
        lines.append(f"   ran: {', '.join(v.measured_steps)}")
    lines += [f"   not measured: {item}" for item in v.unmeasured_steps]
    if v.kernel:
        lines.append(f"   kernels: {v.kernel}")
    return lines


# The heading over the launcher's commands of a config file run on several nodes.
LAUNCH_HEADING = "to start it on the nodes:"


def file_heading(name: str) -> str:
    """Return the line above a file the config names (--emit writes it beside the config)."""
    return f"{name} (the file the command names; --emit writes it beside):"


def file_fence(name: str) -> str:
    """Return the language of a file the config names, for a code fence: json or yaml."""
    return "json" if name.endswith(".json") else "yaml"


def config_lines(plan: Plan) -> list[str]:
    """Return the plan in the engine's own words, and what it could not say."""
    config = plan.engine_config
    if config is None:
        return []
    from hwadvisor.report.plain import engine_name

    what = "command" if config.format == "cli" else f"{config.format} config"
    # a version that names its packages ('transformers 5.24.0, ...') needs no engine name
    named = config.version if not config.version[:1].isdigit() else \
        f"{engine_name(config.engine, short=True)} {config.version}"
    lines = [f"the {what} to run ({named}):",
             *config.text.splitlines()]
    if config.launch:
        lines += [LAUNCH_HEADING, *config.launch.splitlines()]
    for name, text in config.files.items():
        lines += [file_heading(name), *text.splitlines()]
    lines += [f"not in the config: {item}" for item in config.not_expressed]
    lines += [f"note: {item}" for item in config.notes]
    return lines


def other_config_blocks(plan: Plan) -> list[list[str]]:
    """Return the same plan for the engine's other tools (Genie, coremltools), one block each.

    Each block is shaped as config_lines: a heading, the text to paste, then what it could
    not say.
    """
    config = plan.engine_config
    blocks = []
    for other in config.also if config is not None else []:
        lines = [f"the same plan for {other.tool} ({other.format}):", *other.text.splitlines()]
        lines += [f"not in the {other.tool} config: {item}" for item in other.not_expressed]
        lines += [f"note: {item}" for item in other.notes]
        blocks.append(lines)
    return blocks
