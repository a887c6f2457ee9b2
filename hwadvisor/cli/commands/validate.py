"""`hwadvisor validate`: run the kernel trials here, at the workload's shapes."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer
from rich.markup import escape
from rich.table import Table

from hwadvisor import units
from hwadvisor.cli import cluster, complete
from hwadvisor.cli import console as ui
from hwadvisor.cli.cluster import ClusterOptions
from hwadvisor.cli.console import NO_OUTPUT, GpuOpt, Output, output_options
from hwadvisor.cli.options import NO_GATES, DeviceOpt, Gates, gate_options, workload_options
from hwadvisor.errors import ExitCode, UserError
from hwadvisor.models import Report, TrialResult
from hwadvisor.report.gates import apply_gates
from hwadvisor.workload import WorkloadRequest

if TYPE_CHECKING:
    from hwadvisor.models.serving import Load
    from hwadvisor.validator.loadgen import PromptKind
    from hwadvisor.validator.loadtest import EndpointSpec

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
_LOAD_PANEL = "Load test (--endpoint)"
EndpointOpt = Annotated[
    Optional[str],  # noqa: UP007, UP045
    typer.Option("--endpoint", help="Measure a running OpenAI-compatible server at this URL "
                 "(e.g. http://127.0.0.1:8080) under a load instead of running trials: TTFT, "
                 "TPOT, ITL and latency percentiles, held against the model's prediction for "
                 "the workload. Only this URL is contacted.", show_default=False,
                 rich_help_panel=_LOAD_PANEL),
]
RateOpt = Annotated[
    Optional[float],  # noqa: UP007, UP045
    typer.Option("--rate", help="Open loop: requests per second (Poisson arrivals).",
                 show_default=False, rich_help_panel=_LOAD_PANEL),
]
ConcurrencyOpt = Annotated[
    Optional[int],  # noqa: UP007, UP045
    typer.Option("--concurrency", help="Closed loop: users each sending their next request when "
                 "the last one ends. Default (no --rate): 1.", show_default=False,
                 rich_help_panel=_LOAD_PANEL),
]
SpreadOpt = Annotated[float, typer.Option(
    "--spread", help="Spread of the prompt and output lengths around --prompt-len and --gen-len "
    "(coefficient of variation of a lognormal; 0: every request has the mean).",
    rich_help_panel=_LOAD_PANEL)]
DatasetOpt = Annotated[
    Optional[str],  # noqa: UP007, UP045
    typer.Option("--dataset", help="A named length shape: sharegpt, chat, rag, code-completion, "
                 "batch.", show_default=False, rich_help_panel=_LOAD_PANEL),
]
TraceOpt = Annotated[
    Optional[Path],  # noqa: UP007, UP045
    typer.Option("--trace", help="JSON lines of prompt_len, gen_len and optionally arrival_s: "
                 "the requests to play (their own arrival times unless --rate or "
                 "--concurrency).", dir_okay=False, show_default=False,
                 rich_help_panel=_LOAD_PANEL),
]
RequestsOpt = Annotated[int, typer.Option(
    "--requests", min=1, max=100_000, help="Requests to send, at most.",
    rich_help_panel=_LOAD_PANEL)]
TimeLimitOpt = Annotated[float, typer.Option(
    "--time-limit", min=1.0, help="Seconds the whole load test may take; open requests are cut "
    "then.", rich_help_panel=_LOAD_PANEL)]
RequestTimeoutOpt = Annotated[float, typer.Option(
    "--request-timeout", min=0.1, help="Seconds one request may take.",
    rich_help_panel=_LOAD_PANEL)]
ServedModelOpt = Annotated[
    Optional[str],  # noqa: UP007, UP045
    typer.Option("--served-model", help="The model name each request sends (default: the "
                 "first the server lists at /v1/models).", show_default=False,
                 rich_help_panel=_LOAD_PANEL),
]
PromptOpt = Annotated[str, typer.Option(
    "--prompt", help="ids: each prompt is its length in random token ids (exact); words: as "
    "many random words (the server's own count is reported).", rich_help_panel=_LOAD_PANEL)]
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
    if report.load_test is not None:
        from hwadvisor.report.loadtext import load_test_lines

        ui.print_wrapped(load_test_lines(report))
    if report.trials:
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


def endpoint_load(request: WorkloadRequest, rate: float | None, concurrency: int | None,
                  spread: float, dataset: str | None, trace: Path | None,
                  requests: int) -> Load:
    """Build the load a load test plays from its options; a UserError names what is wrong."""
    from hwadvisor.models import Workload
    from hwadvisor.models.serving import Lengths, Load
    from hwadvisor.serving.load import DATASETS, read_trace

    if rate is not None and concurrency is not None:
        raise UserError("--rate and --concurrency are two kinds of load", hint="pass one: "
                        "--rate for arrivals at a pace, --concurrency for users in a loop")
    if rate is not None and rate <= 0:
        raise UserError(f"--rate must be above 0 requests/s, got {rate:g}", hint="e.g. --rate 2")
    if concurrency is not None and concurrency < 1:
        raise UserError(f"--concurrency must be 1 or more, got {concurrency}",
                        hint="e.g. --concurrency 4")
    if not 0 <= spread <= 3:
        raise UserError(f"--spread must be from 0 to 3, got {spread:g}", hint="e.g. --spread 0.5")
    if dataset is not None and trace is not None:
        raise UserError("--dataset and --trace both give the lengths", hint="pass one")
    fields = Workload.model_fields
    prompt_mean = request.prompt_len or fields["prompt_len"].default
    output_mean = request.gen_len or fields["gen_len"].default
    prompt, output = Lengths(mean=prompt_mean, spread=spread), Lengths(mean=output_mean,
                                                                       spread=spread)
    arrivals, source = None, f"--prompt-len {prompt_mean} --gen-len {output_mean}"
    if trace is not None:
        prompt, output, arrivals = read_trace(trace)
        source = f"--trace {trace.name}"
    elif dataset is not None:
        if dataset not in DATASETS:
            raise UserError(f"unknown --dataset {dataset!r}",
                            hint="one of: " + ", ".join(DATASETS))
        prompt, output, source = DATASETS[dataset]
    kind = "poisson"
    if rate is None and concurrency is None and arrivals:
        span = max(arrivals[-1], 1e-3)
        rate, kind = len(arrivals) / span, "trace"  # the trace's own pace
    elif rate is None and concurrency is None:
        concurrency = 1
    return Load(rate_rps=rate, concurrency=concurrency, prompt=prompt, output=output,
                arrivals=kind, arrival_times_s=arrivals if kind == "trace" else None,
                requests=requests, dataset=dataset, source=source)


def endpoint_spec(url: str, load: Load, served_model: str | None, prompt: str,
                  time_limit: float, request_timeout: float) -> EndpointSpec:
    """Check the URL and the prompt kind; return what the load test plays, and its bounds."""
    from hwadvisor.validator.loadgen import Limits, parse_endpoint
    from hwadvisor.validator.loadtest import EndpointSpec

    parse_endpoint(url)  # a bad URL stops here, before anything is planned
    if prompt not in ("ids", "words"):
        raise UserError(f"--prompt must be ids or words, got {prompt!r}",
                        hint="ids sends exact token counts; words suits servers that refuse ids")
    kind: PromptKind = "ids" if prompt == "ids" else "words"
    return EndpointSpec(url, load, served_model, kind, Limits(time_limit, request_timeout))


def _load_test(request: WorkloadRequest, device: str | None, spec: EndpointSpec,
               out: Output, gates: Gates) -> None:
    """Measure the endpoint under the load, beside the model's prediction; write the report."""
    from hwadvisor import pipeline
    from hwadvisor.models import ModelOptions
    from hwadvisor.validator.loadtest import measure_endpoint

    report = pipeline.estimate_report(request.with_changes(phase="inference"), device,
                                      ModelOptions())
    with ui.progress_bar(not out.as_json and sys.stderr.isatty()) as progress:
        found = measure_endpoint(report, spec, progress)
    report = pipeline.with_found(report, found).model_copy(update={"kind": "validate"})
    ui.mark_interruption(report)
    ui.print_report_notes(report)
    report.gates_tripped = apply_gates(report, gates.fail_on, gates.min_bandwidth_fraction)
    ui.write_html(report, out.html)
    ui.publish(report, lambda r: render(r, bool(out.explain)), out)
    ui.exit_if_interrupted(report)
    test = report.load_test
    if test is not None and test.status == "error":
        ui.print_error(f"the load test failed: {test.detail}",
                       "check that the server serves /v1/completions with streaming")
        raise typer.Exit(int(ExitCode.TRIALS_FAILED))
    ui.exit_for_gates(report)


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
        endpoint: EndpointOpt = None,
        device: DeviceOpt = None,
        rate: RateOpt = None,
        concurrency: ConcurrencyOpt = None,
        spread: SpreadOpt = 0.0,
        dataset: DatasetOpt = None,
        trace: TraceOpt = None,
        requests: RequestsOpt = 50,
        time_limit: TimeLimitOpt = 300.0,
        request_timeout: RequestTimeoutOpt = 120.0,
        served_model: ServedModelOpt = None,
        prompt: PromptOpt = "ids",
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

        With --endpoint URL it runs no trial: it plays a load (--rate or --concurrency, the
        lengths of --prompt-len/--gen-len/--spread, --dataset or --trace) against a running
        OpenAI-compatible server and holds the measured TTFT and TPOT against the model's
        prediction for the workload on --device (default: this machine). Exit 4 when no
        request completed.
        """
        from hwadvisor import pipeline
        from hwadvisor.probe.select import parse_gpu_option
        from hwadvisor.validator.measure import all_trial_ids, check_trial_ids

        if endpoint is not None:
            spec = endpoint_spec(endpoint, endpoint_load(
                request, rate, concurrency, spread, dataset, trace, requests), served_model,
                prompt, time_limit, request_timeout)
            _load_test(request, device, spec, out, gates)
            return
        for given, name in ((rate, "--rate"), (concurrency, "--concurrency"),
                            (dataset, "--dataset"), (trace, "--trace"), (device, "--device")):
            if given is not None:
                raise UserError(f"{name} is an option of the load test", hint="pass --endpoint "
                                "URL with it (the server to measure)")

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
