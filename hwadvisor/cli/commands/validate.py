"""`hwadvisor validate`: run the kernel trials here, at the workload's shapes."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
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
    note,
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
from hwadvisor.errors import ExitCode, UserError
from hwadvisor.models import Report, TrialResult
from hwadvisor.report.gates import FailOnOpt, MinBandwidthFractionOpt, apply_gates

INTERRUPTED_EXIT = 130  # the shell's code for Ctrl-C (128 + SIGINT)

TrialOpt = Annotated[
    Optional[list[str]],  # noqa: UP007, UP045
    typer.Option("--trial", "-t", help="Run only this trial; repeatable. Default: all trials. "
                 "See 'hwadvisor validate --list'.", show_default=False),
]
QuickOpt = Annotated[bool, typer.Option("--quick", help="Smaller sizes, fewer repeats (seconds).")]
RequireGpuOpt = Annotated[bool, typer.Option(
    "--require-gpu", help="Exit 3 when torch sees no CUDA GPU (instead of measuring the CPU).")]
ListOpt = Annotated[bool, typer.Option("--list", help="List the trial ids and exit.")]
FromReportOpt = Annotated[
    Optional[Path],  # noqa: UP007, UP045
    typer.Option("--report", help="Validate the recommendations of this recommend report (its "
                 "workload sizes the trials; the workload options are then ignored).",
                 dir_okay=False, show_default=False),
]


def trial_table(report: Report) -> Table:
    """Return a rich table of the trial results: status, effect, summary or reason."""
    table = Table(title="hwadvisor validate", show_lines=True)
    table.add_column("trial")
    table.add_column("status")
    table.add_column("effect")
    table.add_column("summary / reason")
    for result in report.trials:
        effect = ", ".join(f"{k} {v:.3g}" for k, v in result.effect.items())
        text = result.summary or ""
        if result.reason:
            text = f"{text}\n{result.reason}" if text else result.reason
        if result.busy_gpu:
            text += "\n(other processes on the GPU)"
        table.add_row(result.id, result.status, escape(effect), escape(text))
    return table


def verdict_table(report: Report) -> Table:
    """Return the recommendations and their verdicts."""
    table = Table(title="verdicts", show_lines=True)
    table.add_column("recommendation")
    table.add_column("verdict")
    table.add_column("measured / predicted")
    table.add_column("detail")
    for rec in report.recommendations:
        v = rec.validation
        figures = ""
        if v.measured_factor is not None:
            figures = f"{v.measured_factor:.3g}"
            if rec.predicted.factor is not None:
                figures += f" / {rec.predicted.factor:.3g}"
        detail = v.detail or ""
        if v.holds_where:
            detail += f"\nholds where: {v.holds_where}"
        table.add_row(rec.id, v.status, figures, escape(detail))
    return table


def render(report: Report) -> None:
    """Print the trial results and, when the report has recommendations, their verdicts."""
    console.print(trial_table(report))
    if report.recommendations:
        console.print(verdict_table(report))


def _require_gpu() -> None:
    from hwadvisor.trials.base import TORCH_MISSING, cuda_available, torch_missing

    if torch_missing():
        raise UserError("--require-gpu: torch is not installed, so no GPU can be used",
                        hint=TORCH_MISSING.split(": ", 1)[1], code=ExitCode.NO_DEVICE)
    if not cuda_available():
        raise UserError("--require-gpu: torch sees no CUDA GPU",
                        hint="check nvidia-smi and that torch is a CUDA build "
                             "(python -c 'import torch; print(torch.version.cuda)')",
                        code=ExitCode.NO_DEVICE)


def run_validate(trial_ids: list[str] | None, quick: bool,
                 workload_options: Mapping[str, object], progress: bool) -> Report:
    """Probe, build the workload, run the trials; return the validate report (maybe partial)."""
    from hwadvisor.probe import collect
    from hwadvisor.trials.registry import trial_ids as all_ids
    from hwadvisor.validator.runner import busy_note, context_for, run_trials

    hardware = collect()
    first = hardware.devices[0] if hardware.devices else None
    workload = workload_from_options(
        workload_options,
        first.memory_total_bytes if first else hardware.host.memory_total_bytes,
        first.device_class if first else hardware.device_class,
    )
    report = Report(kind="validate", host=hardware.host, devices=hardware.devices,
                    device_class=hardware.device_class, notes=list(hardware.notes),
                    workload=workload)
    results, interrupted = run_trials(trial_ids or all_ids(), context_for(report, quick), progress)
    report.trials = results
    report.interrupted = interrupted
    busy = busy_note(results)
    if busy:
        report.notes.append(busy)
    return report


def validate_from_report(path: Path, quick: bool, progress: bool) -> Report:
    """Validate the recommendations of a saved recommend report."""
    from hwadvisor.report.io import load_report
    from hwadvisor.validator.runner import validate_report

    report = load_report(path)
    if not report.recommendations:
        raise UserError(f"{path} has no recommendations to validate",
                        hint="pass a report written by 'hwadvisor recommend --output FILE'")
    report = validate_report(report, progress=progress, quick=quick)
    report.kind = "validate"
    return report


def _failed(trials: list[TrialResult]) -> list[TrialResult]:
    return [t for t in trials if t.status == "error"]


def register(app: typer.Typer) -> None:
    """Register `validate`."""

    @app.command("validate")
    def validate_cmd(
        trial: TrialOpt = None,
        quick: QuickOpt = False,
        require_gpu: RequireGpuOpt = False,
        list_trials: ListOpt = False,
        from_report: FromReportOpt = None,
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
        as_json: JsonOpt = False,
        output: OutputOpt = None,
        markdown: MarkdownOpt = None,
        fail_on: FailOnOpt = None,
        min_bw_fraction: MinBandwidthFractionOpt = None,
    ) -> None:
        """Run short real kernel trials here (bandwidth, matmul, FP8, INT4 ...), workload-sized.

        Exit 4 when a trial could not run (error); unsupported trials are reported, not failed.
        Ctrl-C stops the run and still writes the partial report (exit 130).
        """
        workload_options = workload_values(locals())  # first: locals() is the parameters
        from hwadvisor.trials.registry import TRIALS, check_ids

        if list_trials:
            for trial_id in TRIALS:
                typer.echo(trial_id)
            return
        if trial:
            check_ids(trial)
        if require_gpu:
            _require_gpu()
        progress = not as_json and sys.stderr.isatty()
        if from_report is not None:
            report = validate_from_report(from_report, quick, progress)
        else:
            report = run_validate(trial, quick, workload_options, progress)
        print_notes(report.notes, "note: ")
        report.gates_tripped = apply_gates(report, fail_on, min_bw_fraction)
        publish(report, render, as_json, output, markdown)
        if report.interrupted:
            note("interrupted: the report holds the trials that finished")
            raise typer.Exit(INTERRUPTED_EXIT)
        failed = _failed(report.trials)
        if failed:
            for result in failed:
                note(f"error: trial {result.id} could not run: {result.reason}")
            raise typer.Exit(int(ExitCode.TRIALS_FAILED))
        exit_for_gates(report)
