"""`hwadvisor validate`: run the kernel trials here, at the workload's shapes."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape
from rich.table import Table

from hwadvisor import units
from hwadvisor.cli import cluster, complete
from hwadvisor.cli import console as ui
from hwadvisor.cli.cluster import ClusterOptions
from hwadvisor.cli.console import NO_OUTPUT, GpuOpt, Output, output_options
from hwadvisor.cli.options import NO_GATES, Gates, gate_options, workload_options
from hwadvisor.errors import ExitCode, UserError
from hwadvisor.models import Report, TrialResult
from hwadvisor.report.gates import apply_gates
from hwadvisor.workload import WorkloadRequest

TrialOpt = Annotated[
    Optional[list[str]],  # noqa: UP007, UP045
    typer.Option("--trial", "-t", help="Run only this trial; repeatable. Default: all trials. "
                 "See 'hwadvisor validate --list'.", show_default=False,
                 autocompletion=complete.trials),
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
RepeatOpt = Annotated[int, typer.Option(
    "--repeat", min=1, max=20, help="Run the trials N times (in rounds) and keep every run's "
    "figures, so compare gates on the variation between runs, not within one; the run nearest "
    "the medians is the one shown. 3 or more makes the gate robust to one outlier run.")]
AllowUnsupportedOpt = Annotated[bool, typer.Option(
    "--allow-unsupported", help="Exit 0 even when no trial could run here (all unsupported: "
    "no torch, no GPU); without it that is exit 4, so a CI job missing the extra fails.")]
NvlsOpt = Annotated[bool, typer.Option(
    "--nvls/--no-nvls", help="Let NCCL use NVLink SHARP (multicast) in the collectives trial. "
    "Off by default: on some shared hosts multicast can take GPUs out of service; on an "
    "NVSwitch system it raises all-reduce bandwidth, so leaving it off under-reports it.")]


def trial_table(report: Report) -> Table:
    """Return a rich table of the trial results: status, effect, summary or reason."""
    table = Table(title="hwadvisor validate", show_lines=True)
    table.add_column("trial", overflow="fold", min_width=12)
    table.add_column("status", min_width=7)
    table.add_column("effect", min_width=16)
    table.add_column("summary / reason", ratio=2)
    for result in report.trials:
        # one effect per line: a cell wraps between effects, never inside a name
        effect = "\n".join(f"{e.name} {units.quantity(e.value, _unit(e.unit))}"
                           for e in result.effects)
        text = result.summary or ""
        if result.reason:
            text = f"{text}\n{result.reason}" if text else result.reason
        if result.busy_gpu:
            text += "\n(other processes on the GPU)"
        table.add_row(escape(result.id), escape(result.status), escape(effect), escape(text))
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
            figures = units.ratio(v.measured_factor)
            if rec.predicted.factor is not None:
                figures += f" / {units.ratio(rec.predicted.factor)}"
        detail = v.detail or ""
        if v.holds_where:
            detail += f"\nholds where: {v.holds_where}"
        table.add_row(escape(rec.id), escape(v.status), figures, escape(detail))
    return table


def _unit(unit: str | None) -> str:
    """Return the effect's unit as units.quantity knows it ('x' for ratios)."""
    if unit in (None, "", "ratio"):
        return "x" if unit == "ratio" else ""
    return unit


def render(report: Report, explain: bool = False) -> None:
    """Print what ran in a sentence, the trial results and the recommendations' verdicts."""
    from hwadvisor.report.plain import bottom_line

    ui.begin_view()
    ui.print_wrapped([bottom_line(report)], bold_first=True)
    ui.console.print(ui.keep_words(trial_table(report)))
    if report.recommendations:
        ui.console.print(ui.keep_words(verdict_table(report)))
    ui.end_view(report, explain)


def _require_gpu() -> None:
    from hwadvisor.validator.measure import cuda_available, torch_install_hint, torch_missing

    if torch_missing():
        raise UserError("--require-gpu: torch is not installed, so no GPU can be used",
                        hint=torch_install_hint(), code=ExitCode.NO_DEVICE)
    if not cuda_available():
        raise UserError("--require-gpu: torch sees no CUDA GPU",
                        hint="check nvidia-smi and that torch is a CUDA build "
                             "(python -c 'import torch; print(torch.version.cuda)')",
                        code=ExitCode.NO_DEVICE)


def _failed(trials: list[TrialResult]) -> list[TrialResult]:
    return [t for t in trials if t.status == "error"]


def _none_ran(report: Report) -> str | None:
    """Say why no trial ran (all unsupported, or none to run); None when one did."""
    if any(t.status == "ok" for t in report.trials):
        return None
    unsupported = [t for t in report.trials if t.status == "unsupported"]
    if not unsupported:
        return "no trial ran: there was none to run"
    reasons = sorted({t.reason or "unsupported" for t in unsupported})
    return (f"no trial could run here: all {len(unsupported)} unsupported ("
            + "; ".join(reasons[:2]) + (" ..." if len(reasons) > 2 else "") + ")")


def _none_ran_hint(report: Report) -> str:
    if any("torch is not installed" in (t.reason or "") for t in report.trials):
        return ("pip install 'hwadvisor[validate]' (torch), or pass --allow-unsupported to "
                "accept a run without trials")
    return "run on a machine the trials support, or pass --allow-unsupported"


def _stopped_before_trials() -> Report:
    """Return the report of a run stopped while it probed, built the workload or loaded torch.

    No trial had started, so it holds none; it is still written (interrupted), as README and
    docs/exit-codes.md promise a CI job's upload step.
    """
    from hwadvisor.cli import signals
    from hwadvisor.probe.host import probe_host

    with signals.deferred():  # a second signal waits until the report exists
        return Report(kind="validate", host=probe_host(), devices=[], interrupted=True,
                      notes=["stopped before the first trial started (while probing the "
                             "machine, building the workload or loading torch): no trial ran"])


def register(app: typer.Typer) -> None:
    """Register `validate`."""

    @app.command("validate")
    @workload_options
    @output_options()
    @gate_options
    @cluster.cluster_options
    def validate_cmd(
        request: WorkloadRequest,
        trial: TrialOpt = None,
        gpu: GpuOpt = None,
        quick: QuickOpt = False,
        require_gpu: RequireGpuOpt = False,
        list_trials: ListOpt = False,
        from_report: FromReportOpt = None,
        nvls: NvlsOpt = False,
        repeat: RepeatOpt = 1,
        allow_unsupported: AllowUnsupportedOpt = False,
        out: Output = NO_OUTPUT,
        gates: Gates = NO_GATES,
        launcher: ClusterOptions = cluster.PLAIN_RUN,
    ) -> None:
        """Run short real kernel trials here (bandwidth, matmul, FP8, INT4 ...), workload-sized.

        Exit 4 when a trial could not run (error), or when no trial ran at all (every one
        unsupported: no torch, no GPU) unless --allow-unsupported.
        Ctrl-C or SIGTERM stops the run and still writes the partial report (exit 130 / 143).

        Under torchrun or srun every rank runs the trials on its own GPU, the collectives trial
        runs across the whole job, and rank 0 writes one report (see docs/cluster.md).
        """
        from hwadvisor import pipeline
        from hwadvisor.probe.select import parse_gpu_option
        from hwadvisor.validator.measure import all_trial_ids, check_trial_ids

        if list_trials:
            for trial_id in all_trial_ids():
                typer.echo(trial_id)
            return
        if trial:
            trial = [t.strip().lower() for t in trial]  # ids read case-insensitively
            check_trial_ids(trial)
        gpus = parse_gpu_option(gpu) if gpu is not None else None
        if gpus and from_report is not None:
            raise UserError("--gpu picks GPUs of this machine; --report validates a saved "
                            "report on its first device", hint="pass one of them")
        if require_gpu:
            _require_gpu()
        launch = cluster.launch_for(launcher, out.output)
        if repeat > 1 and (from_report is not None or launch is not None):
            raise UserError("--repeat runs validate's own trials on this machine; it does not "
                            "apply to --report or a torchrun/srun job",
                            hint="drop --repeat, or run plain 'hwadvisor validate --repeat N'")
        if launch is not None and from_report is not None:
            raise UserError("--report does not run under torchrun or srun: it validates one "
                            "saved recommend report on one machine",
                            hint="run it without the launcher, or pass --no-cluster")
        bar = not out.as_json and sys.stderr.isatty() and (launch is None or launch.rank == 0)
        with ui.progress_bar(bar) as progress:
            if launch is not None:
                job = pipeline.cluster_validate_report(launch, trial, quick, request,
                                                       launcher.timeout_s, progress, nvls=nvls)
                gathered = cluster.gathered(job, out.output, launcher.all_ranks)
                if gathered is None:
                    return  # not rank 0: rank 0 writes the report
                report = gathered
            elif from_report is not None:
                report = pipeline.validate_saved_report(from_report, quick, progress, nvls=nvls)
            else:
                try:
                    report = pipeline.validate_trials_report(trial, quick, request, progress,
                                                             nvls=nvls, gpus=gpus, repeat=repeat)
                except KeyboardInterrupt:
                    report = _stopped_before_trials()
        ui.mark_interruption(report)
        ui.print_report_notes(report)
        report.gates_tripped = apply_gates(report, gates.fail_on, gates.min_bandwidth_fraction)
        ui.write_html(report, out.html)
        ui.publish(report, cluster.with_cluster(lambda r: render(r, bool(out.explain))), out)
        ui.exit_if_interrupted(report)
        failed = _failed(report.trials)
        if failed:
            for result in failed:
                ui.print_error(f"trial {result.id} could not run: {result.reason}")
            raise typer.Exit(int(ExitCode.TRIALS_FAILED))
        none_ran = _none_ran(report)
        if none_ran and not allow_unsupported:
            ui.print_error(none_ran, _none_ran_hint(report))
            raise typer.Exit(int(ExitCode.TRIALS_FAILED))
        if cluster.failed(report):
            raise typer.Exit(int(ExitCode.TRIALS_FAILED))
        ui.exit_for_gates(report)
