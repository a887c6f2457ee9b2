"""`hwadvisor recommend`: ranked, predicted optimizations for a goal, here or on a plan."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape
from rich.table import Table

from hwadvisor.cli import complete
from hwadvisor.cli.console import (
    NO_OUTPUT,
    Output,
    begin_view,
    console,
    end_view,
    exit_for_gates,
    exit_if_interrupted,
    html_file,
    keep_words,
    mark_interruption,
    output_options,
    print_report_notes,
    print_wrapped,
    progress_bar,
    publish,
)
from hwadvisor.cli.load import NO_LOAD, LoadRequest, load_options
from hwadvisor.cli.options import (
    NO_GATES,
    DeviceOpt,
    Gates,
    MinTokensPerSOpt,
    calibration_options,
    gate_options,
    workload_options,
)
from hwadvisor.errors import UserError
from hwadvisor.models import Recommendation, Report
from hwadvisor.report.gates import apply_gates
from hwadvisor.rules.playbooks.goals import DEFAULT_GOAL, parse_goal
from hwadvisor.workload import WorkloadRequest

GoalOpt = Annotated[
    Optional[str],  # noqa: UP007, UP045
    typer.Option(
        "--goal", "-g",
        help="training-throughput (a), inference-latency (b) or memory-footprint (c) "
        f"\\[default: {DEFAULT_GOAL}]",
        show_default=False, autocompletion=complete.goals,
    ),
]
EmitOpt = Annotated[
    Optional[Path],  # noqa: UP007, UP045
    typer.Option("--emit", help="Write the plan in the engine's own words (its command line, "
                 "TOML or JSON config, or Python arguments) to this file.", dir_okay=False,
                 show_default=False),
]
EngineModelOpt = Annotated[
    Optional[Path],  # noqa: UP007, UP045
    typer.Option("--engine-model", help="The model file or folder the engine itself loads (a GGUF "
                 "for llama.cpp, a Hugging Face folder for vLLM, SGLang or MLX): with --validate, "
                 "the engine's own benchmark (llama-bench, vllm bench latency, "
                 "sglang.benchmark.one_batch, mlx_lm.benchmark) runs on it where the engine is "
                 "installed, and plan.validation.engine holds measured against predicted.",
                 show_default=False),
]
EndpointOpt = Annotated[
    Optional[str],  # noqa: UP007, UP045
    typer.Option("--endpoint", help="With --validate: measure this running OpenAI-compatible "
                 "server (e.g. http://127.0.0.1:8080) under the plan's load instead of running "
                 "trials, and hold its TTFT and TPOT against the plan's prediction "
                 "(report.load_test). Only this URL is contacted.", show_default=False),
]
ValidateOpt = Annotated[
    bool,
    typer.Option("--validate", help="Run each recommendation's trial here to confirm or refute it "
                 "(needs torch; GPU trials need a GPU)."),
]


def recommend_table(report: Report) -> Table:
    """Build the table of ranked recommendations: rank, advice, predicted effect, verdict."""
    wl = report.workload
    title = f"hwadvisor recommend · goal {report.goal}"
    if wl is not None:
        title += f" · {wl.model} {wl.phase} batch {wl.batch}"
    if report.devices:
        title += f" · {len(report.devices)} x {report.devices[0].name}"
    table = Table(title=escape(title), show_lines=True)
    table.add_column("#", justify="right", max_width=10)
    table.add_column("advice")
    table.add_column("predicted")
    table.add_column("validated")
    for rec in report.recommendations:
        where = f"step {rec.step}" if rec.in_plan else (
            "needs retraining" if rec.needs_retraining else "not in the plan")
        table.add_row(where, f"[bold]{escape(rec.id)}[/]\n{escape(rec.title)}",
                      escape(rec.predicted.text or ""), escape(_verdict_text(rec)))
    return table


def recommend_lines(report: Report) -> list[str]:
    """Return the recommendations as lines (narrow terminals): id, prediction, verdict."""
    lines = ["recommendations:"]
    for rec in report.recommendations:
        where = f"step {rec.step}" if rec.in_plan else (
            "needs retraining" if rec.needs_retraining else "not in the plan")
        lines.append(f"  {where} · {rec.id}: {rec.title}")
        lines.append(f"     predicted: {rec.predicted.text or '—'}; validated: "
                     f"{_verdict_text(rec)}")
    return lines


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
        table.add_row(escape(rej.id), escape(reason))
    return table


def _emit_text(report: Report) -> str:
    """Return the plan's engine config as its engine reads it; UserError when there is none."""
    config = report.plan.engine_config if report.plan is not None else None
    if config is None:
        raise UserError("--emit: the plan has no engine config to write",
                        hint="pass --engine with an engine hwadvisor can write a config for")
    return config.text if config.text.endswith("\n") else config.text + "\n"


def _emitted(report: Report, emit: Path) -> list[tuple[Path, str]]:
    """Return the --emit file and the files its config names, to write beside it.

    Beside it, or in the working directory when --emit names a device (/dev/stdout).
    """
    files = [(emit, _emit_text(report))]
    config = report.plan.engine_config if report.plan is not None else None
    where = Path.cwd() if str(emit).startswith("/dev/") else emit.parent
    for name, text in (config.files.items() if config is not None else []):
        files.append((where / name, text))
    return files


def goal_for(goal: str | None, phase: str | None) -> tuple[str | None, str | None]:
    """Return the goal to plan for, and a note when --phase chose it (no --goal given).

    --phase training without --goal means training throughput (goal A): planning a training
    run for inference latency answers a question nobody asked.
    """
    if goal is None and phase == "training":
        return "training-throughput", ("no --goal given: --phase training plans for "
                                       "training-throughput (goal A); pass --goal to change it")
    return goal, None


def render(report: Report, explain: bool = True) -> None:
    """Print the recommend report: the sentence to act on, the plan, then the details."""
    from hwadvisor.report.plain import bottom_line
    from hwadvisor.report.plantext import config_lines, other_config_blocks, plan_lines

    begin_view()
    print_wrapped([bottom_line(report)], bold_first=True)
    if report.serving is not None:
        from hwadvisor.report.servingtext import serving_lines

        print_wrapped(serving_lines(report.serving))
    if report.plan is not None:
        print_wrapped(plan_lines(report))
        for config in [config_lines(report.plan), *other_config_blocks(report.plan)]:
            if not config:
                continue
            print_wrapped(config[:1], bold_first=True)
            # the config itself is not wrapped: it is pasted as printed
            body = [line for line in config[1:] if not line.startswith(("note: ", "not in "))]
            for line in body:
                console.print("  " + line, highlight=False, markup=False, soft_wrap=True)
            print_wrapped("  " + line for line in config[1 + len(body):])
    console.print("details", style="bold", highlight=False)
    if report.estimate is not None:
        est = report.estimate
        print_wrapped([f"bottleneck on the engine's defaults: {est.bottleneck} — "
                       f"{est.bottleneck_why}"])
    if report.recommendations:
        from hwadvisor.cli import helpfmt

        if console.width < helpfmt.NARROW_COLUMNS:  # four columns would be too narrow
            print_wrapped(recommend_lines(report))
        else:
            console.print(keep_words(recommend_table(report), cap=36))
        print_wrapped(why_lines(report))
    if report.rejected:
        console.print(keep_words(rejected_table(report)))
    if report.load_test is not None:
        from hwadvisor.report.loadtext import load_test_lines

        print_wrapped(load_test_lines(report))
    end_view(report, explain)


def _load_test(report: Report, endpoint: str, out: Output) -> Report:
    """Play the plan's load against the endpoint; return the report with the load test."""
    from hwadvisor import pipeline
    from hwadvisor.validator.loadgen import parse_endpoint
    from hwadvisor.validator.loadtest import EndpointSpec, measure_endpoint, planned_load

    parse_endpoint(endpoint)  # a bad URL stops here
    spec = EndpointSpec(endpoint, planned_load(report))
    with progress_bar(not out.as_json and sys.stderr.isatty()) as progress:
        report = pipeline.with_found(report, measure_endpoint(report, spec, progress))
    mark_interruption(report)
    return report


def register(app: typer.Typer) -> None:
    """Register `recommend`."""

    @app.command("recommend")
    @workload_options
    @calibration_options
    @load_options
    @output_options()
    @gate_options
    def recommend_cmd(
        request: WorkloadRequest,
        calibration: Path | None,
        goal: GoalOpt = None,
        device: DeviceOpt = None,
        validate: ValidateOpt = False,
        engine_model: EngineModelOpt = None,
        endpoint: EndpointOpt = None,
        emit: EmitOpt = None,
        out: Output = NO_OUTPUT,
        gates: Gates = NO_GATES,
        min_tokens_per_s: MinTokensPerSOpt = None,
        load: LoadRequest = NO_LOAD,
    ) -> None:
        """Recommend optimizations for a goal, ranked by predicted gain, and say why not the rest.

        Without options: inference-latency advice for this machine and a default model. With
        --rate or --concurrency and --ttft/--tpot: the config that meets the targets at the most
        tokens/s per GPU, and the fewest GPUs when --gpus is left out.
        """
        from hwadvisor import pipeline
        from hwadvisor.report.io import check_target

        # Every output target is checked before anything runs or is written: a run that exits
        # 2 leaves no file behind (--emit, --markdown and --output alike).
        for path in (emit, out.markdown, out.output):
            if path is not None:
                check_target(path)
        goal, goal_note = goal_for(goal, request.phase)
        report = pipeline.recommend_report(parse_goal(goal), device, request,
                                           calibration=calibration,
                                           min_tokens_per_s=min_tokens_per_s,
                                           load=load if load.given() else None)
        if goal_note:
            report.notes.insert(0, goal_note)
        print_report_notes(report)
        if endpoint is not None and not validate:
            raise UserError("--endpoint measures a server for --validate",
                            hint="pass --validate --endpoint URL")
        if endpoint is not None:
            report = _load_test(report, endpoint, out)
        elif validate:
            from hwadvisor.validator.measure import torch_install_hint, torch_missing

            if torch_missing():  # the validator's trials need torch
                raise UserError("cannot validate: torch is not installed",
                                hint=torch_install_hint())
            with progress_bar(not out.as_json and sys.stderr.isatty()) as progress:
                report = pipeline.validate_recommendations(report, progress=progress,
                                                           engine_model=engine_model)
            mark_interruption(report)
        report.gates_tripped = apply_gates(report, gates.fail_on, gates.min_bandwidth_fraction)
        extra = _emitted(report, emit) if emit is not None else []
        extra += html_file(report, out.html)  # written with the rest, all or nothing
        publish(report, lambda r: render(r, out.explain is not False), out, extra or None)
        exit_if_interrupted(report)
        exit_for_gates(report)
