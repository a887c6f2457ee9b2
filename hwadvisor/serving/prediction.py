"""predict(): one config's figures under a load, the serving room's entry point."""

from __future__ import annotations

from dataclasses import dataclass

from hwadvisor.models import Device, ModelOptions, Workload
from hwadvisor.models.serving import Load, ServingFigures
from hwadvisor.perfmodel.calibration import Calibration
from hwadvisor.perfmodel.efficiency import engine_time
from hwadvisor.perfmodel.steps import StepModel
from hwadvisor.serving.figures import figures
from hwadvisor.serving.load import SEED, draw
from hwadvisor.serving.scheduler import Knobs, scheduler_for
from hwadvisor.serving.simulate import Outcome, Scheduler, simulate


@dataclass(frozen=True)
class Prediction:
    """One config's figures under a load, with the scheduler it was simulated with."""

    figures: ServingFigures
    scheduler: Scheduler
    replicas: int
    outcome: Outcome


def replica_load(load: Load, replicas: int) -> tuple[float | None, int | None]:
    """(rate, concurrency) one of `replicas` identical replicas sees behind a balancer."""
    rate = load.rate_rps / replicas if load.rate_rps is not None else None
    users = -(-load.concurrency // replicas) if load.concurrency is not None else None
    return rate, users


def predict(workload: Workload, device: Device, load: Load, options: ModelOptions | None = None,
            knobs: Knobs | None = None, calibration: Calibration | None = None,
            steps: StepModel | None = None, seed: int = SEED) -> Prediction:
    """Simulate the load on the workload's replicas; return the figures over all of them.

    Replicas (the layout's data-parallel degree) share the load evenly: each one is simulated
    once at its share, and throughputs are summed over them.
    """
    options = options or ModelOptions()
    steps = steps or StepModel(workload, device, options, calibration)
    replicas = steps.replicas
    sched = scheduler_for(steps, workload, device, options, knobs or Knobs(), load.prefix_share,
                          options.speculative_tokens_per_step)
    rate, users = replica_load(load, replicas)
    requests = draw(load, rate_rps=rate if load.rate_rps is not None else None, seed=seed)
    outcome = simulate(requests, sched, steps, concurrency=users)
    # the API server's own time per request (engines' costs.request_overhead_s) comes on top
    extra = engine_time(workload, steps.setup.res.family).request_overhead_s
    ttft = [f - a + extra for f, a in zip(outcome.first_token, outcome.arrival, strict=True)]
    latency = [f - a + extra for f, a in zip(outcome.finish, outcome.arrival, strict=True)]
    start = min(outcome.arrival) if outcome.arrival else 0.0
    one = figures(ttft, latency, outcome.output, outcome.itl, outcome.end_s - start,
                  outcome.saturated)
    scaled = one.model_copy(update={
        "request_throughput_rps": one.request_throughput_rps * replicas,
        "output_tokens_per_s": one.output_tokens_per_s * replicas,
        "requests": one.requests * replicas})
    return Prediction(scaled, sched, replicas, outcome)
