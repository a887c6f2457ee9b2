"""A running endpoint under a load, held against the model: the load test's verdict.

`measure_endpoint` plays the load (validator/loadgen.py), turns the requests' times into
`ServingFigures` (serving/figures.py, as the model's own are made), and holds each predicted
figure against the measured one:

- the interval: a percentile bootstrap over the completed requests (BOOTSTRAP resamples,
  seeded; each resample redraws whole requests, so a request's gaps stay together) gives a 95%
  interval of each measured percentile; with fewer than MIN_REQUESTS completed requests no
  interval is drawn and nothing is decided;
- the decision, as the trials decide (validator/verdicts.py `decide`): `confirmed` when the
  whole interval lies within predicted x (1 +- tolerance), `refuted` when it lies wholly
  outside, `inconclusive` when it straddles an edge. The tolerances are the issue's: 20% at
  p50, 30% at p90;
- the load test's verdict rests on TTFT and TPOT (p50 and p90), the two figures a serving
  target names: refuted when any of them is, confirmed when all are; ITL and request latency
  are checked and shown but do not count.

The prediction is the report's serving plan's figures when it has them for the same load, else
`serving.predict()` for the report's workload on its first device (the host's CPU when the
report has none).
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from hwadvisor.errors import UserError
from hwadvisor.models import Report
from hwadvisor.models.loadtest import FigureCheck, LoadTest, LoadVerdict
from hwadvisor.models.serving import Lengths, Load, ServingFigures
from hwadvisor.serving.figures import percentile, weighted_percentile
from hwadvisor.validator.found import Found
from hwadvisor.validator.loadgen import (
    Limits,
    Progress,
    PromptKind,
    Run,
    Sample,
    parse_endpoint,
    play,
    server_model,
)

TOLERANCE = {50: 0.20, 90: 0.30}  # the band a measured percentile must lie in (issue 40)
JUDGED = ("ttft", "tpot")  # the figures the verdict rests on
FIGURES = ("ttft", "tpot", "itl", "request_latency")
BOOTSTRAP = 500  # resamples; the 2.5th and 97.5th percentiles of them bound the interval
MIN_REQUESTS = 10  # fewer completed requests: no interval, no decision
BOOTSTRAP_SEED = 40


@dataclass(frozen=True)
class EndpointSpec:
    """What to play against which endpoint, and its bounds."""

    url: str
    load: Load
    served_model: str | None = None
    prompt: PromptKind = "ids"
    limits: Limits = Limits()


def planned_load(report: Report, requests: int = 50) -> Load:
    """Return the load the report planned for: its serving plan's, else its batch as users.

    A report without a serving plan planned a batch: `batch` users in a closed loop, each
    request of the workload's prompt and output lengths, is the load that batch serves.
    """
    plan = getattr(report, "serving", None)
    load = getattr(plan, "load", None)
    if isinstance(load, Load):
        return load
    workload = report.workload
    if workload is None:
        raise UserError("the report has no workload to plan a load from",
                        hint="run recommend with a model (--model)")
    return Load(concurrency=workload.batch, prompt=Lengths(mean=workload.prompt_len),
                output=Lengths(mean=max(1, workload.gen_len)), requests=requests,
                source=f"the plan's batch of {workload.batch} as concurrent users")


def measure_endpoint(report: Report, spec: EndpointSpec,
                     progress: Progress | None = None) -> Found:
    """Play the load against the endpoint, and judge the report's prediction by what it gives.

    A URL that is not one, or a server that does not answer, is a UserError (exit 2) before
    anything is sent; requests that fail during the run are counted and named in the result.
    """
    endpoint = parse_endpoint(spec.url)
    model = spec.served_model or server_model(endpoint)
    predicted, how = prediction(report, spec.load)
    run = play(endpoint, spec.load, model, spec.prompt, spec.limits, progress)
    test = judged(run, predicted, how)
    test = test.model_copy(update={"bench_command": _bench_command(report, spec, model)})
    found = Found(interrupted=run.stopped == "interrupted")
    found.load_test = test
    return found


def prediction(report: Report, load: Load) -> tuple[ServingFigures | None, str]:
    """Return the model's figures for the load on the report's plan, and how they were made."""
    plan = getattr(report, "serving", None)  # the serving plan, where the report has one
    planned = getattr(plan, "figures", None)
    if isinstance(planned, ServingFigures) and getattr(plan, "load", None) == load:
        return planned, f"the report's serving plan ({getattr(plan, 'method', '')})"
    workload = report.workload
    if workload is None:
        return None, "no prediction: the report has no workload to predict for"
    if workload.phase != "inference":
        return None, "no prediction: the workload is not inference"
    from hwadvisor.probe.target import primary_device
    from hwadvisor.serving import predict

    device = primary_device(report)  # the first device, else the host's CPU
    try:
        result = predict(workload, device, load)
    except (UserError, ValueError, KeyError) as exc:
        return None, f"no prediction: {exc}"
    sched = result.scheduler
    return result.figures, (
        f"serving.predict: {workload.model} on {device.name} with {workload.engine}, "
        f"{result.replicas} replica(s), a simulation of the engine's scheduler ("
        f"{sched.policy}, {sched.max_seqs} sequences, {sched.step_tokens} tokens a step) "
        f"over the same {load.requests} requests")


def judged(run: Run, predicted: ServingFigures | None, how: str) -> LoadTest:
    """Build the load test's result: what was measured, the checks, and the verdict."""
    measured = run.figures()
    done = run.completed
    checks = figure_checks(done, measured, predicted) if measured and predicted else []
    status, detail = verdict(checks, measured, predicted, run, how)
    counted = [s.prompt_tokens for s in done if s.prompt_tokens is not None]
    outputs = [s.output_tokens for s in done if s.output_tokens is not None]
    engine_tpot = [s.engine_tpot_s for s in done if s.engine_tpot_s is not None]
    engine_prefill = [s.engine_prompt_s for s in done if s.engine_prompt_s is not None]
    return LoadTest(
        endpoint=run.endpoint.url, served_model=run.model, load=run.load, prompt=run.prompt,
        requests_sent=len(run.samples), requests_completed=len(done),
        requests_failed=len(run.failed), errors=run.errors()[:5], stopped_by=run.stopped,
        duration_s=run.duration_s, time_limit_s=run.limits.time_limit_s,
        request_timeout_s=run.limits.request_timeout_s,
        prompt_tokens_mean=statistics.fmean(counted) if counted else None,
        output_tokens_mean=statistics.fmean(outputs) if outputs else None,
        measured=measured,
        engine_prefill_p50_s=percentile(engine_prefill, 50) if engine_prefill else None,
        engine_tpot_p50_s=percentile(engine_tpot, 50) if engine_tpot else None,
        engine_tpot_p90_s=percentile(engine_tpot, 90) if engine_tpot else None,
        predicted=predicted, prediction=how, checks=checks,
        interval_method=(f"percentile bootstrap over the completed requests ({BOOTSTRAP} "
                         f"resamples, seed {BOOTSTRAP_SEED}; none under {MIN_REQUESTS} "
                         "requests)"),
        status=status, detail=detail, notes=_notes(run, predicted))


def _per_request(done: Sequence[Sample]) -> dict[str, Callable[[list[int]], list[float]]]:
    """Return, per figure, how to collect its values over a resample of request indices."""
    def ttft(idx: list[int]) -> list[float]:
        return [done[i].ttft_s or 0.0 for i in idx]

    def latency(idx: list[int]) -> list[float]:
        return [done[i].latency_s or 0.0 for i in idx]

    def tpot(idx: list[int]) -> list[float]:
        return [((done[i].latency_s or 0.0) - (done[i].ttft_s or 0.0)) / (done[i].tokens - 1)
                for i in idx if done[i].tokens > 1]

    def itl(idx: list[int]) -> list[float]:
        return [g for i in idx for g in done[i].gaps]

    return {"ttft": ttft, "tpot": tpot, "itl": itl, "request_latency": latency}


def _value(figure: str, values: list[float], q: int) -> float:
    """Return a percentile the way serving/figures.py makes it (ITL: by weighted rank)."""
    if figure == "itl":
        return weighted_percentile([(v, 1.0) for v in values], q)
    return percentile(values, q)


def intervals(done: Sequence[Sample]) -> dict[tuple[str, int], tuple[float, float]]:
    """Return the 95% bootstrap interval of each (figure, percentile) over the requests."""
    if len(done) < MIN_REQUESTS:
        return {}
    rng = random.Random(BOOTSTRAP_SEED)
    collect = _per_request(done)
    draws: dict[tuple[str, int], list[float]] = {(f, q): [] for f in FIGURES for q in TOLERANCE}
    n = len(done)
    for _ in range(BOOTSTRAP):
        idx = [rng.randrange(n) for _ in range(n)]
        for figure in FIGURES:
            values = collect[figure](idx)
            for q in TOLERANCE:
                draws[(figure, q)].append(_value(figure, values, q) if values else 0.0)
    return {key: (percentile(vals, 2.5), percentile(vals, 97.5)) for key, vals in draws.items()}


def decide_band(ci: tuple[float, float] | None, predicted: float, tolerance: float) -> LoadVerdict:
    """Decide where the interval lies against predicted x (1 +- tolerance)."""
    if ci is None or predicted <= 0:
        return "inconclusive"
    low, high = min(ci), max(ci)
    band_low, band_high = predicted * (1 - tolerance), predicted * (1 + tolerance)
    if low >= band_low and high <= band_high:
        return "confirmed"
    if high < band_low or low > band_high:
        return "refuted"
    return "inconclusive"


def figure_checks(done: Sequence[Sample], measured: ServingFigures,
                  predicted: ServingFigures) -> list[FigureCheck]:
    """Hold each figure at p50 and p90 against the prediction."""
    cis = intervals(done)
    checks = []
    for figure in FIGURES:
        for q, tolerance in TOLERANCE.items():
            want, got = predicted.at(figure, q), measured.at(figure, q)
            ci = cis.get((figure, q))
            checks.append(FigureCheck(
                figure=figure, percentile=q, predicted_s=want, measured_s=got,  # type: ignore[arg-type]
                ci_s=list(ci) if ci is not None else None,
                ratio=got / want if want > 0 else None, tolerance=tolerance,
                status=decide_band(ci, want, tolerance), judged=figure in JUDGED))
    return checks


def verdict(checks: list[FigureCheck], measured: ServingFigures | None,
            predicted: ServingFigures | None, run: Run, how: str) -> tuple[str, str]:
    """Return the load test's status and its sentence."""
    if measured is None:
        first = run.errors()[0] if run.errors() else "no request was sent"
        return "error", f"no request completed ({len(run.samples)} sent): {first}"
    if predicted is None:
        return "inconclusive", f"measured only: {how}"
    judged_ = [c for c in checks if c.judged]
    ratios = ", ".join(f"{c.figure} p{c.percentile} {c.ratio:.2f}x" for c in judged_
                       if c.ratio is not None)
    if len(run.completed) < MIN_REQUESTS:
        return "inconclusive", (f"only {len(run.completed)} requests completed (under "
                                f"{MIN_REQUESTS}): no interval; measured/predicted {ratios}")
    statuses = {c.status for c in judged_}
    status = "refuted" if "refuted" in statuses else (
        "confirmed" if statuses == {"confirmed"} else "inconclusive")
    off = [f"{c.figure} p{c.percentile}" for c in judged_ if c.status != "confirmed"]
    tail = f"; not confirmed: {', '.join(off)}" if off else ""
    return status, (f"measured/predicted {ratios} (within 20% at p50 and 30% at p90 "
                    f"confirms, by the 95% interval){tail}")


def _notes(run: Run, predicted: ServingFigures | None) -> list[str]:
    """Say what the reader of the figures should know about this run."""
    notes = []
    if run.stopped != "done":
        notes.append(f"the run stopped early ({run.stopped}): {len(run.samples)} of "
                     f"{run.load.requests} requests sent")
    if run.waited_for_slots:
        notes.append(f"{run.waited_for_slots} requests were sent late: {run.limits.max_in_flight}"
                     " were already open (the generator's bound), so the arrivals fell behind")
    if run.saturated() or (predicted is not None and predicted.saturated):
        notes.append("the server is saturated (measured or predicted): latencies grow with the "
                     "run's length; both sides play the same requests, so they compare, but "
                     "only at this length")
    asked = [s.output_len for s in run.completed]
    got = [s.tokens for s in run.completed]
    if asked and sum(got) < 0.95 * sum(asked):
        notes.append(f"the server returned {sum(got)} output tokens of the {sum(asked)} asked: "
                     "it stopped early (no ignore_eos support?), so TPOT is over fewer tokens")
    return notes


def _bench_command(report: Report, spec: EndpointSpec, model: str | None) -> str | None:
    """Return the planned engine's own serving benchmark for this load, if it has one."""
    from hwadvisor.engines.bench import render_bench

    engine = report.workload.engine if report.workload is not None else None
    if engine is None:
        return None
    return render_bench(engine, spec.load, base_url=spec.url, model=model)
