"""The serving plan a report carries, with the targets met or missed and one sentence.

recommend: the search's answer under the load; estimate: one config's figures under it.
"""

from __future__ import annotations

from hwadvisor import units
from hwadvisor.engines import engine_for
from hwadvisor.models import Device, ModelOptions, Workload
from hwadvisor.models.serving import (
    Load,
    ServingConfig,
    ServingPlan,
    Targets,
)
from hwadvisor.perfmodel.calibration import Calibration
from hwadvisor.serving import predict
from hwadvisor.serving.candidates import Inputs, searchable
from hwadvisor.serving.figures import checks_of
from hwadvisor.serving.request import LoadRequest, build
from hwadvisor.serving.search import search


def _fewest_words(plan: ServingPlan) -> str:
    if plan.fewest_gpus is None:
        return "no count of GPUs does, with the knobs searched"
    return f"the fewest GPUs that would: {plan.fewest_gpus}"


def verdict(plan: ServingPlan, device: Device) -> str:
    """Say the search's answer in one sentence: the load, the targets met or missed, the config."""
    load = plan.load.words()
    wanted = plan.targets.words() or "no latency target"
    where = f"{plan.gpus} x {device.name}" if plan.gpus else device.name
    best = plan.best
    if best is not None:
        met = "; ".join(c.words() for c in best.checks) or "no target set"
        count = best.config.gpus
        fewest = " (the fewest)" if plan.gpus is None else ""
        return (f"Serves {load} within {wanted} on {count} x {device.name}{fewest}: "
                f"{best.config.words()} — {met}; "
                f"{units.rate(best.goodput_tokens_per_s_per_gpu)} per GPU at the most load the "
                "targets allow.")
    if plan.top:
        missed = "; ".join(c.words() for c in plan.top[0].checks if not c.met)
        return (f"No config meets {wanted} at {load} on {where}: the closest, "
                f"{plan.top[0].config.words()}, misses ({missed}); "
                f"{_fewest_words(plan)}.")
    return (f"No config meets {wanted} at {load} on {where}; {_fewest_words(plan)}.")


def _headroom(plan: ServingPlan) -> str | None:
    """Say how much more load the best config takes before it misses a target."""
    best = plan.best
    if best is None:
        return None
    if best.capacity_rps is not None and plan.load.rate_rps:
        room = best.capacity_rps / plan.load.rate_rps
        return (f"headroom: the config meets the targets up to about "
                f"{units.rate(best.capacity_rps, 'requests/s')} ({units.ratio(room)} this load), "
                "by the screen")
    if best.capacity_users is not None and plan.load.concurrency:
        return (f"headroom: the config meets the targets up to about {best.capacity_users} "
                "concurrent users, by the screen")
    return None


def recommend_plan(inputs: Inputs) -> ServingPlan | None:
    """Search the engine's knobs under the load (None: the engine batches statically)."""
    if not searchable(inputs.workload):
        return None
    plan = search(inputs)
    # none meets on the given GPUs: the config emitted is the closest, which the verdict names
    closest = plan.top[0].config if plan.top and plan.gpus is not None else None
    plan.config = plan.best.config if plan.best is not None else closest
    plan.verdict = verdict(plan, inputs.device)
    notes = [n for n in (_headroom(plan),) if n] + plan.notes
    layers = engine_for(inputs.workload).defaults.sharding == "layers"
    notes.append(("layer splits within a node are searched (the engine's default across "
                  "GPUs); " if layers else "pipeline parallelism is not searched; ")
                 + "tensor parallelism stays within a node")
    plan.notes = notes
    return plan


def estimate_plan(workload: Workload, device: Device, options: ModelOptions, load: Load,
                  targets: Targets, calibration: Calibration | None = None) -> ServingPlan:
    """Simulate the workload as configured (the engine's defaults) under the load."""
    prediction = predict(workload, device, load, options, calibration=calibration)
    sched = prediction.scheduler
    figures = prediction.figures
    checks = checks_of(figures, targets)
    replicas = prediction.replicas
    config = ServingConfig(
        engine=workload.engine, gpus_per_replica=max(workload.gpus // replicas, 1),
        replicas=replicas, tensor_parallel=max(workload.gpus // replicas, 1),
        max_sequences=sched.max_seqs, step_tokens=sched.step_tokens,
        weights_dtype=workload.weights_dtype, kv_dtype=workload.kv_dtype,
        kv_pool_tokens=sched.kv_pool_tokens, speculative=options.speculative_drafter,
        prefix_caching=engine_for(workload).defaults.prefix_caching)
    met = "; ".join(c.words() for c in checks)
    f = figures
    shown = (f"TTFT p50/p90 {units.ms(f.ttft_p50_s)}/{units.ms(f.ttft_p90_s)}, TPOT p50/p90 "
             f"{units.ms(f.tpot_p50_s)}/{units.ms(f.tpot_p90_s)}, "
             f"{units.rate(f.output_tokens_per_s)}")
    state = " — saturated: arrivals outpace the server" if f.saturated else ""
    sentence = (f"Under {load.words()} on {workload.gpus} x {device.name} "
                f"({config.words()}): "
                f"{shown}{state}" + (f"; {met}." if met else "."))
    return ServingPlan(
        load=load, targets=targets, config=config, figures=figures, checks=checks,
        method=(f"a discrete-event simulation of {engine_for(workload).name}'s scheduler "
                f"({sched.policy}, {load.requests} requests, seeded) with the estimate's step "
                "times"),
        verdict=sentence, gpus=workload.gpus)


def under_load(request: LoadRequest | None, workload: Workload, device: Device,
               options: ModelOptions,
               calibration: Calibration | None = None, search_knobs: bool = False,
               gpus: int | None = None) -> ServingPlan | None:
    """Return the serving plan for the load asked for (None: no load option was given).

    estimate (search_knobs off): the workload as configured, simulated under the load.
    recommend: the search over the engine's knobs, from the engine's defaults; gpus is --gpus,
    or None for the fewest.
    """
    from hwadvisor.workload.settle import on_engine_defaults

    built = build(request, workload) if request is not None else None
    if built is None:
        return None
    load, targets = built
    if not search_knobs:
        return estimate_plan(workload, device, options, load, targets, calibration)
    start, opts = on_engine_defaults(workload, device, options)
    per_node = workload.gpus_per_node or device.max_gpus_per_node or device.gpus_per_node or 8
    plan = recommend_plan(Inputs(start, device, opts, load, targets, gpus, per_node, calibration))
    if plan is not None:
        return plan
    plan = estimate_plan(start, device, opts, load, targets, calibration)
    plan.notes.append(f"{engine_for(start).name} runs a static batch: it has no scheduler "
                      "knobs to search (a serving engine batches continuously)")
    return plan
