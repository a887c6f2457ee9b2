"""The search under latency targets: the config that serves a load at the most tokens/s per GPU.

Candidates are the engine's own knobs: tensor parallelism within a node, weights and KV-cache
formats within the --quality budget (workload/quality.py) and the device's formats, the
drafters the engine runs for the model, the step's token budget, the sequences a replica runs
at once, and prefix caching where the load has a shared prefix. Replicas (data parallel) are
not a knob but an answer: how many of a config the load needs.

Every candidate is judged by the analytic screen (screen.py): for each (formats, layout,
drafter, step budget) one curve of steady states over rising rates, from which each slot count
reads the most load it serves within the targets (its capacity) in microseconds. The ranking is
by goodput per GPU (output tokens/s per GPU at that capacity); the fewest GPUs is the least
replicas x GPUs per replica over all candidates (ceil(rate / capacity), so it never falls as the
rate rises). The best few are then simulated (predict) at the load itself, and only a config the
simulation confirms is reported as meeting the targets.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass

from hwadvisor.engines import engine_for
from hwadvisor.models.serving import (
    Load,
    ServingConfig,
    ServingFigures,
    ServingPlan,
    ServingPoint,
    Targets,
)
from hwadvisor.perfmodel.efficiency import engine_time
from hwadvisor.serving import disagg
from hwadvisor.serving.candidates import (
    Candidate,
    Family,
    Inputs,
    Replica,
    drafter_options,
    drafters,
    knob_values,
    kv_formats,
    layouts,
    pool_of,
    prefix_caching,
    replica,
    table_of,
    weight_formats,
)
from hwadvisor.serving.figures import checks_of
from hwadvisor.serving.scheduler import (
    Knobs,
    default_max_seqs,
    default_step_tokens,
    kv_streams,
    policy_of,
    speculation,
)
from hwadvisor.serving.screen import (
    Limits,
    Point,
    Shape,
    Table,
    decode_s,
    figures_of,
    margin,
    open_point,
    with_slots,
)
from hwadvisor.workload.quality import BUDGET_RANK, budget

TOP_N = 5  # configs listed beside the best
CONFIRM = 3  # configs simulated before one is reported as meeting the targets
FRONT_POINTS = 24  # points of the Pareto front kept (evenly by tokens/s per user)
# The rates of a curve, as powers of two of its top rate (near saturation): half a doubling
# apart from an eighth of the top up, where margins fall fastest and capacities lie (they are
# interpolated between points); a doubling apart below, where a step is nearly the bare decode
# step and the points differ little (the Pareto front merges points within 1% per user).
_CURVE_EXPONENTS = (-7.5, -6.5, -5.5, -4.5, -3.5) + tuple(k / 2.0 for k in range(-6, 3))
MOST_GPUS = 4096  # the fewest GPUs is looked for up to this many


@dataclass
class _Curve:
    """Steady states of one (family, drafter, budget, prefix caching) over rising rates."""

    model: Replica
    drafter: str | None
    step_tokens: int
    prefix_caching: bool
    shape: Shape
    limits: Limits  # with the largest slot count; each candidate replaces max_seqs
    points: list[Point]
    kv_unified: bool = False


@dataclass
class Judged:
    """A candidate with its capacity under the targets and what the load needs of it."""

    candidate: Candidate
    curve: _Curve
    capacity: float  # requests/s (open loop) or users (closed loop) one replica serves
    replicas: int | None  # replicas the load needs (None: it meets the targets at no load)
    gpus_per_replica: int
    goodput_per_gpu: float

    @property
    def gpus(self) -> int | None:
        """GPUs the load needs of this config."""
        return None if self.replicas is None else self.replicas * self.gpus_per_replica


# --- candidates --------------------------------------------------------------------------------


# --- curves and capacities ----------------------------------------------------------------------

def _curve(model: Replica, inputs: Inputs, drafter: str | None, step_tokens: int,
           prefix_caching: bool, most_seqs: int, kv_unified: bool = False) -> _Curve | None:
    """Solve the steady states of one replica over rising rates, up to saturation.

    kv_unified: llama-server's slots share one cache (one pass a step, each row reading the
    used cache); otherwise such an engine decodes a pass per run of busy slot ids.
    """
    shape = Shape.of(inputs.load, prefix_caching)
    pool = pool_of(model, inputs, step_tokens)
    if pool < shape.prompt + shape.output:
        return None  # the KV pool does not hold one request: the model does not fit this way
    accepted, verify, cost = speculation(drafter_options(inputs.options, drafter,
                                                          model.workload))
    slot = model.slot
    if slot is not None:
        # a cache allocated slot by slot (llama-server --ctx-size = --parallel x the slot):
        # the slots must fit the memory, and they are the pool
        if most_seqs * slot > pool:
            return None
        pool = most_seqs * slot
    mixed = policy_of(model.workload) == "mixed"
    overhead = engine_time(model.workload, model.steps.setup.res.family).request_overhead_s
    per_slot, unified = (False, False) if slot is None else kv_streams(
        model.workload, Knobs(max_seqs=most_seqs, kv_unified=kv_unified or None), most_seqs)
    limits = Limits(mixed, step_tokens, most_seqs, pool, accepted, verify, cost, overhead,
                    most_seqs if per_slot else 0)
    table = table_of(model, shape, prefix_caching, unified)
    top = _top_rate(table, limits, shape)
    rates = [top * 2.0 ** e for e in _CURVE_EXPONENTS]
    points: list[Point] = []
    warm: float | None = None
    for i, rate in enumerate(rates):
        point = open_point(table, limits, shape, rate, warm)
        if not point.ok:
            points += _toward(table, limits, shape, points[-1] if points else None, rate)
            points.append(point)
            break
        points.append(point)
        warm = point.step_s
        if len(points) >= 2 and i + 1 < len(rates):
            # the step time rises convexly with the rate: the line through the last two points
            # stays below the next fixed point, a closer start from below
            ahead = (rates[i + 1] - rate) / (rate - rates[i - 1])
            warm += (points[-1].step_s - points[-2].step_s) * ahead
    return _Curve(model, drafter, step_tokens, prefix_caching, shape, limits, points,
                  kv_unified)


def _toward(table: Table, limits: Limits, shape: Shape, last: Point | None,
            failing: float) -> list[Point]:
    """Steady states between the last rate that held and the first that saturated (bisection)."""
    if last is None:
        return []
    low, high, out = last.rate_rps, failing, []
    for _ in range(4):  # to 1.5% of the rate
        mid = (low + high) / 2.0
        point = open_point(table, limits, shape, mid, last.step_s)
        if point.ok:
            out.append(point)
            low, last = mid, point
        else:
            high = mid
    return out


def _top_rate(table: Table, limits: Limits, shape: Shape) -> float:
    """Return a rate near one replica's saturation: the prefill's or the slots' decode pace."""
    chunk = min(shape.uncached, float(limits.step_tokens))
    per_token = table.chunk_s(1.0, chunk, limits.mixed) / chunk
    prefill = 1.0 / max(shape.uncached * per_token, 1e-12)
    slots = max(limits.slots(shape), 1.0)
    step = decode_s(table, limits, slots * limits.verify_tokens) * (1.0 + limits.draft_cost)
    decode = slots * limits.tokens_per_step / max(shape.output * step, 1e-12)
    return min(prefill, decode) * 1.2


def _with_seqs(curve: _Curve, max_seqs: int) -> Limits:
    lim = curve.limits
    return dataclasses.replace(lim, max_seqs=max_seqs)


def capacity(curve: _Curve, max_seqs: int, targets: Targets, closed: bool) -> float:
    """Return the most load one replica serves within the targets with `max_seqs` slots.

    Open loop: requests/s; closed loop: users (the sequences it holds at that rate, which a
    closed loop of that many users keeps running). 0 when even the lightest load misses. The
    margin falls as the load rises, so the crossing is found by bisection over the curve's
    points and placed between two of them by their margins.
    """
    limits = _with_seqs(curve, max_seqs)
    points = curve.points

    def judged(i: int) -> tuple[float, float, bool]:
        point = points[i]
        held = with_slots(point, limits, curve.shape)
        return (point.running if closed else point.rate_rps), margin(held, targets), held.ok

    first = judged(0)
    if first[1] < 0:
        return 0.0
    low, high = 0, len(points)  # points[low] meets; points[high] misses (or is past the end)
    while high - low > 1:
        mid = (low + high) // 2
        if judged(mid)[1] >= 0:
            low = mid
        else:
            high = mid
    load_low, m_low, _ = judged(low)
    if high >= len(points):
        return load_low
    load_high, m_high, ok_high = judged(high)
    if ok_high and math.isfinite(m_high):
        return load_low + (load_high - load_low) * m_low / (m_low - m_high)
    return load_low


# --- the search ---------------------------------------------------------------------------------

@dataclass
class Searched:
    """Everything the search judged, for the plan and for tests."""

    judged: list[Judged]
    curves: list[_Curve]
    seconds: float
    below_budget: str | None = None  # the looser budget taken because nothing within held it


def judge_all(inputs: Inputs) -> Searched:
    """Judge every candidate by the screen: its capacity, replicas and GPUs for the load.

    When no config within the --quality budget holds the model, the next loss class is
    searched (the smaller loss first, as the plan's own fit does), and the plan says so.
    """
    started = time.perf_counter()
    searched = _judge_formats(inputs, None)
    allowed = BUDGET_RANK[budget(inputs.workload.quality)]
    for name, rank in sorted(BUDGET_RANK.items(), key=lambda kv: kv[1]):
        if searched.judged or rank <= allowed:
            continue
        searched = _judge_formats(inputs, name)
        searched.below_budget = name
    searched.seconds = time.perf_counter() - started
    return searched


def _judge_formats(inputs: Inputs, quality: str | None) -> Searched:
    """Judge every candidate whose weights are within `quality` (None: the workload's)."""
    seqs_values, step_values = knob_values(inputs.workload)
    closed = inputs.load.concurrency is not None
    prefixes = (prefix_caching(inputs),)
    per_slot = engine_for(inputs.workload).defaults.stream_per_slot
    judged: list[Judged] = []
    curves: list[_Curve] = []
    # A layer split runs a step in the time of one GPU holding every layer: more GPUs in it
    # only hold more cache. Once a split holds every slot count searched, a wider one of the
    # same formats serves no more than it does (replicas would), so it is not searched.
    holds_all: set[tuple[int, str, str]] = set()
    for tp, layers_over in layouts(inputs):
        for weights in weight_formats(inputs, quality):
            for kv in kv_formats(inputs):
                if layers_over > 1 and (tp, weights, kv) in holds_all:
                    continue
                model = replica(inputs, Family(tp, weights, kv, layers_over))
                if model is None:
                    continue
                if model.slot is not None and all(
                        len(_fitting(model, inputs, step, list(seqs_values))) == len(seqs_values)
                        for step in step_values):
                    holds_all.add((tp, weights, kv))
                for drafter in drafters(inputs):
                    for step_tokens in step_values:
                        seqs = [s for s in seqs_values if s <= step_tokens]
                        fitting = _fitting(model, inputs, step_tokens, seqs)
                        for prefix in prefixes:
                            for group, unified in _slot_groups(per_slot, fitting):
                                curve = _curve(model, inputs, drafter, step_tokens, prefix,
                                               max(group), unified)
                                if curve is None:
                                    continue
                                curves.append(curve)
                                for max_seqs in group:
                                    cand = Candidate(model.family, drafter, max_seqs,
                                                     step_tokens, prefix, unified)
                                    judged.append(_judge(cand, curve, inputs, closed))
    return Searched(judged, curves, 0.0)


def _fitting(model: Replica, inputs: Inputs, step_tokens: int, seqs: list[int]) -> list[int]:
    """Keep the slot counts whose slots fit the memory (all of them for a paged cache)."""
    if model.slot is None:
        return seqs
    pool = pool_of(model, inputs, step_tokens)
    return [n for n in seqs if n * model.slot <= pool]


def _slot_groups(per_slot: bool, seqs: list[int]) -> list[tuple[list[int], bool]]:
    """Group the slot counts that share one curve, with whether their cache is unified.

    A paged engine's step times do not depend on its sequence limit: one curve serves every
    count. Where each slot is its own KV stream (llama-server), the passes a step takes do, so
    each count gets its own curve; with the slots in one unified cache (--kv-unified, also a
    candidate) a step is one pass again, and one curve serves every count.
    """
    if not per_slot or not seqs:
        return [(seqs, False)] if seqs else []
    return [([n], False) for n in seqs] + [(seqs, True)]


def _judge(cand: Candidate, curve: _Curve, inputs: Inputs, closed: bool) -> Judged:
    cap = capacity(curve, cand.max_seqs, inputs.targets, closed)
    if closed:
        cap = math.floor(cap)
    gpr = cand.family.gpus
    asked = float((inputs.load.concurrency if closed else inputs.load.rate_rps) or 0.0)
    replicas = math.ceil(asked / cap - 1e-9) if cap > 0 else None
    if replicas is not None and replicas * gpr > MOST_GPUS:
        replicas = None
    rate = _rate_at(curve, cap) if closed else cap
    goodput = rate * curve.shape.output / gpr
    return Judged(cand, curve, cap, replicas, gpr, goodput)


def _rate_at(curve: _Curve, users: float) -> float:
    """Return the rate at which one replica holds `users` sequences (a closed loop's throughput)."""
    last = (0.0, 0.0)
    for point in curve.points:
        if not point.ok:
            break
        if point.running >= users:
            low_users, low_rate = last
            span = point.running - low_users
            return low_rate + (point.rate_rps - low_rate) * (users - low_users) / span \
                if span > 0 else point.rate_rps
        last = (point.running, point.rate_rps)
    return last[1]


def _fits_gpus(j: Judged, gpus: int | None) -> bool:
    """Tell whether a judged config meets the load on the given GPUs (or on some count)."""
    if j.replicas is None:
        return False
    if gpus is None:
        return True
    return gpus % j.gpus_per_replica == 0 and gpus // j.gpus_per_replica >= j.replicas


def changes(c: Candidate, inputs: Inputs, seqs: int, step: int) -> int:
    """Count the knobs a candidate turns away from the engine's defaults (ties go to fewer)."""
    wl = inputs.workload
    return sum((c.family.tp != 1, c.family.weights_dtype != wl.weights_dtype,
                c.family.kv_dtype != wl.kv_dtype, c.drafter is not None,
                c.max_seqs != seqs, c.step_tokens != step, not c.prefix_caching,
                c.kv_unified))


def ranked(searched: Searched, inputs: Inputs) -> list[Judged]:
    """Configs that meet the load, best first: fewest GPUs (when free), then goodput per GPU.

    Goodputs within 1% are a tie, which the config nearer the engine's defaults wins.
    """
    gpus = inputs.gpus
    meeting = [j for j in searched.judged if _fits_gpus(j, gpus)]
    wl, device = inputs.workload, inputs.device
    pool = meeting[0].curve.limits.kv_pool_tokens if meeting else 0
    window = wl.spec.max_position_embeddings if wl.spec is not None else None
    seqs, step = default_max_seqs(wl, device, pool, window), default_step_tokens(wl, device)

    def key(j: Judged) -> tuple[int, float, int]:
        level = round(math.log(max(j.goodput_per_gpu, 1e-9)) / math.log(1.01))
        return ((j.gpus or 0) if gpus is None else 0, -level,
                changes(j.candidate, inputs, seqs, step))

    return sorted(meeting, key=key)


def _scaled_out(j: Judged, replicas: int, inputs: Inputs) -> ServingPoint | None:
    """Where the screen was too hopeful: one or half again more replicas, simulated."""
    for more in sorted({replicas + 1, math.ceil(replicas * 1.5)}):
        point = _point(j, more, inputs, simulate_config(j, more, inputs), "simulation")
        if point.meets_targets:
            return point
    return None


def _closest(searched: Searched, gpus: int) -> Judged | None:
    """Return the config on these GPUs that serves the most load within the targets (or nearest)."""
    here = [j for j in searched.judged if gpus % j.gpus_per_replica == 0]
    if not here:
        return None
    return max(here, key=lambda j: (j.capacity * (gpus // j.gpus_per_replica),
                                    j.curve.points[-1].rate_rps * (gpus // j.gpus_per_replica)))


def distinct(order: list[Judged]) -> list[Judged]:
    """Keep the first of each layout, formats and drafter: the list shows real alternatives."""
    seen: set[tuple[Family, str | None]] = set()
    out = []
    for j in order:
        key = (j.candidate.family, j.candidate.drafter)
        if key not in seen:
            seen.add(key)
            out.append(j)
    return out


def fewest_gpus(searched: Searched) -> int | None:
    """Return the fewest GPUs any config needs for the load within the targets (None: none can)."""
    counts = [j.gpus for j in searched.judged if j.gpus is not None]
    return min(counts) if counts else None


def _replicas_on(j: Judged, gpus: int | None) -> int:
    if gpus is None:
        return j.replicas or 1
    return max(gpus // j.gpus_per_replica, 1)


def _replica_load(load: Load, replicas: int) -> Load:
    if load.rate_rps is not None:
        return load.model_copy(update={"rate_rps": load.rate_rps / replicas})
    users = -(-(load.concurrency or 1) // replicas)
    return load.model_copy(update={"concurrency": users})


def config_of(j: Judged, replicas: int, inputs: Inputs) -> ServingConfig:
    """Return the judged candidate as the report states a config."""
    c = j.candidate
    return ServingConfig(
        engine=inputs.workload.engine, gpus_per_replica=j.gpus_per_replica, replicas=replicas,
        tensor_parallel=c.family.tp, pipeline_parallel=c.family.layers_over,
        max_sequences=c.max_seqs,
        step_tokens=c.step_tokens, weights_dtype=c.family.weights_dtype,
        kv_dtype=c.family.kv_dtype, kv_pool_tokens=j.curve.limits.kv_pool_tokens,
        speculative=c.drafter, prefix_caching=c.prefix_caching, kv_unified=c.kv_unified,
        slot_tokens=j.curve.model.slot)


def simulate_config(j: Judged, replicas: int, inputs: Inputs) -> ServingFigures:
    """Simulate the config at its share of the load (predict); figures over all replicas."""
    from hwadvisor.serving import predict

    c = j.candidate
    model = j.curve.model
    options = drafter_options(model.options, c.drafter, model.workload)
    load = _replica_load(inputs.load, replicas)
    if not c.prefix_caching:
        load = load.model_copy(update={"prefix_share": 0.0})
    one = predict(model.workload, inputs.device, load, options,
                  Knobs(c.max_seqs, c.step_tokens, j.curve.limits.kv_pool_tokens,
                        c.kv_unified or None),
                  steps=model.steps).figures
    return one.model_copy(update={
        "request_throughput_rps": one.request_throughput_rps * replicas,
        "output_tokens_per_s": one.output_tokens_per_s * replicas,
        "requests": one.requests * replicas})


def _point(j: Judged, replicas: int, inputs: Inputs, figures: ServingFigures,
           source: str) -> ServingPoint:
    checks = checks_of(figures, inputs.targets)
    gpus = j.gpus_per_replica * replicas
    closed = inputs.load.concurrency is not None
    return ServingPoint(
        config=config_of(j, replicas, inputs), figures=figures,
        tokens_per_s_per_gpu=figures.output_tokens_per_s / gpus,
        tokens_per_s_per_user=1.0 / figures.tpot_p50_s if figures.tpot_p50_s > 0 else 0.0,
        meets_targets=all(c.met for c in checks) and not figures.saturated, checks=checks,
        source=source,  # type: ignore[arg-type]
        capacity_rps=None if closed else j.capacity * replicas,
        capacity_users=int(j.capacity) * replicas if closed else None,
        goodput_tokens_per_s_per_gpu=j.goodput_per_gpu)


def screen_figures(j: Judged, replicas: int, inputs: Inputs) -> ServingFigures:
    """Return the screen's figures for a config at its share of the load."""
    curve = j.curve
    load = _replica_load(inputs.load, replicas)
    limits = _with_seqs(curve, j.candidate.max_seqs)
    table = table_of(curve.model, curve.shape, j.candidate.prefix_caching)
    if load.rate_rps is not None:
        point = with_slots(open_point(table, limits, curve.shape, load.rate_rps), limits,
                           curve.shape)
    else:
        from hwadvisor.serving.screen import closed_point

        point = closed_point(table, limits, curve.shape, load.concurrency or 1)
    return figures_of(point, curve.shape, replicas, inputs.load.requests)


def front(searched: Searched, inputs: Inputs) -> list[ServingPoint]:
    """Return the Pareto front of tokens/s per GPU against tokens/s per user, over every curve.

    Each curve's steady states are the config swept over its load (the sequences it holds at
    each rate are the concurrency a closed loop of that many users keeps); a point no other
    beats on both axes is kept, by tokens/s per user.
    """
    rows: list[tuple[float, float, _Curve, Point]] = []
    for curve in searched.curves:
        slots = curve.limits.slots(curve.shape)
        for point in curve.points:
            if not point.ok or point.running > slots or point.tpot_s.get(50, 0) <= 0:
                continue
            per_gpu = point.rate_rps * curve.shape.output / curve.model.family.gpus
            rows.append((per_gpu, 1.0 / point.tpot_s[50], curve, point))
    rows.sort(key=lambda r: (-r[1], -r[0]))
    kept: list[tuple[float, float, _Curve, Point]] = []
    best_gpu = -math.inf
    for row in rows:  # by falling speed per user: kept when it beats every faster one per GPU
        if row[0] > best_gpu:
            if kept and (row[1] > kept[-1][1] * 0.99
                         or (row[0] < kept[-1][0] * 1.02 and row[1] > kept[-1][1] * 0.98)):
                # within 1% per user, or 2% on both axes: one point, the better per GPU
                kept[-1] = row
            else:
                kept.append(row)
            best_gpu = row[0]
    if len(kept) > FRONT_POINTS:
        step = (len(kept) - 1) / (FRONT_POINTS - 1)
        kept = [kept[round(i * step)] for i in range(FRONT_POINTS)]
    out = []
    for per_gpu, per_user, curve, point in kept:
        seqs = max(1, math.ceil(point.running))
        cand = Candidate(curve.model.family, curve.drafter, seqs, curve.step_tokens,
                         curve.prefix_caching)
        j = Judged(cand, curve, point.rate_rps, 1, curve.model.family.gpus, per_gpu)
        figures = figures_of(point, curve.shape, 1, inputs.load.requests)
        checks = checks_of(figures, inputs.targets)
        out.append(ServingPoint(
            config=config_of(j, 1, inputs), figures=figures, tokens_per_s_per_gpu=per_gpu,
            tokens_per_s_per_user=per_user, meets_targets=all(c.met for c in checks),
            checks=checks, source="screen", capacity_rps=point.rate_rps,
            capacity_users=seqs))
    return sorted(out, key=lambda p: p.tokens_per_s_per_user)


def search(inputs: Inputs) -> ServingPlan:
    """Search the engine's knobs for the config that meets the targets at the most tokens/s/GPU.

    The screen ranks every candidate; the best CONFIRM are simulated at the load, and the first
    the simulation confirms is the answer. The plan also says the fewest GPUs for the load and
    the Pareto front.
    """
    started = time.perf_counter()
    searched = judge_all(inputs)
    order = distinct(ranked(searched, inputs))
    top: list[ServingPoint] = []
    best: ServingPoint | None = None
    chosen: Judged | None = None
    for j in order[:CONFIRM]:
        replicas = _replicas_on(j, inputs.gpus)
        point = _point(j, replicas, inputs, simulate_config(j, replicas, inputs), "simulation")
        if not point.meets_targets and inputs.gpus is None:
            point = _scaled_out(j, replicas, inputs) or point
        top.append(point)
        if best is None and point.meets_targets:
            best, chosen = point, j
    if not order and inputs.gpus is not None:
        closest = _closest(searched, inputs.gpus)
        if closest is not None:  # none meets here: how far the nearest one misses, simulated
            replicas = _replicas_on(closest, inputs.gpus)
            near = _point(closest, replicas, inputs, simulate_config(closest, replicas, inputs),
                          "simulation")
            top.append(near)
            if near.meets_targets:  # the screen's margin was too thin: the simulation decides
                best = near
    for j in order[CONFIRM:CONFIRM + max(TOP_N - CONFIRM, 0)]:
        replicas = _replicas_on(j, inputs.gpus)
        top.append(_point(j, replicas, inputs, screen_figures(j, replicas, inputs), "screen"))
    fewest = fewest_gpus(searched)
    if best is not None and (inputs.gpus is None or fewest is None or best.config.gpus < fewest):
        fewest = best.config.gpus  # what the simulation confirmed
    pd_notes: list[str] = []
    models = [c.model for c in searched.curves if c.drafter is None]
    pd = disagg.best_group(models, inputs, pd_notes)
    colocated = order[0] if order else None
    grouped = disagg.as_point(pd, inputs) if pd is not None and disagg.wins(
        pd, colocated.gpus if colocated else None, best is not None, inputs) else None
    if grouped is not None and grouped.meets_targets:
        best, chosen = grouped, None
        top.insert(0, grouped)
        fewest = min(fewest or grouped.config.gpus, grouped.config.gpus)
    elif grouped is not None:
        pd_notes[-1] += ("; not planned: the simulation of the group misses a target ("
                         + "; ".join(c.words() for c in grouped.checks if not c.met) + ")")
    elif pd is not None:
        pd_notes[-1] += ("; not planned: a colocated config meets the targets on "
                         + ("as few GPUs" if inputs.gpus is None else "these GPUs")
                         + ", and disaggregation does not raise throughput (vLLM's "
                         "disaggregated-prefill guide): it pays where prompt chunks would "
                         "break a TPOT target")
    plan = ServingPlan(
        load=inputs.load, targets=inputs.targets,
        method=(f"an analytic steady state of {engine_for(inputs.workload).name}'s scheduler "
                f"ranked {len(searched.judged)} configs; "
                + (f"the best {min(CONFIRM, len(order))} were" if order else
                   "none met the targets there; the closest was" if top else
                   "none met the targets there, so none was" if searched.judged else
                   "none held the model, so none was")
                + f" simulated ({inputs.load.requests} requests, seeded) at the load"),
        figures=best.figures if best is not None else (top[0].figures if top else None),
        checks=best.checks if best is not None else (top[0].checks if top else []),
        best=best, fewest_gpus=fewest, pareto=front(searched, inputs), top=top,
        searched=len(searched.judged), gpus=inputs.gpus,
        search_s=time.perf_counter() - started)
    if chosen is not None:
        plan.notes.append(breaks_first(chosen, inputs))
    if best is not None and best.config.disaggregated:
        plan.method += ("; disaggregated prefill/decode groups were screened too, and the best, "
                        "simulated (its prefill queue, the cache's trip and each decode "
                        "instance's scheduler), met what no colocated config did: the targets "
                        "here, or the load on fewer GPUs")
    plan.notes += pd_notes
    if searched.below_budget is not None:
        plan.notes.insert(0, f"no config within the --quality {inputs.workload.quality} budget "
                          f"holds the model on these GPUs: searched with {searched.below_budget} "
                          f"weights too, below the budget (--quality {searched.below_budget} "
                          "allows them for speed)")
    return plan


def breaks_first(j: Judged, inputs: Inputs) -> str:
    """Say what gives out first as the load grows past the config's capacity, by the screen.

    The first target the margin crosses, or (when the targets hold to saturation) why the
    steady state ends: the step budget, the prefill's pace, the slots or the KV pool.
    """
    limits = _with_seqs(j.curve, j.candidate.max_seqs)
    first = None
    for point in j.curve.points:
        held = with_slots(point, limits, j.curve.shape)
        if not held.ok:
            first = held.why or point.why
            break
        if margin(held, inputs.targets) < 0:
            first = _missed_target(held, inputs.targets)
            break
    return (f"what breaks first as the load grows: {first or 'nothing within the rates tried'}"
            " (the screen)")


def _missed_target(point: Point, targets: Targets) -> str:
    q = targets.percentile
    tpot = point.itl_s if targets.tpot_definition == "itl" else point.tpot_s
    for name, target, series in (("TTFT", targets.ttft_s, point.ttft_s),
                                 ("TPOT", targets.tpot_s, tpot),
                                 ("request latency", targets.request_latency_s, point.e2e_s)):
        if target is not None and series[q] > target:
            return f"the {name} p{q} target"
    return "a target"
