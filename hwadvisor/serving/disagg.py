"""Disaggregated prefill and decode (xPyD): prompts on their own instances, decoding on others.

An engine with a P/D mode (vLLM's KV connectors, SGLang's --disaggregation-mode, TensorRT-LLM's
context and generation servers) runs x prefill instances and y decode instances of one layout
behind a router; each request prefills on one of the x, its KV cache crosses the GPU link to one
of the y, and decodes there without ever sharing a step with a prompt. What that buys is the
decode steps' freedom from prompt chunks (TPOT and ITL at the bare decode step, however long the
prompts); what it costs is GPUs that only prefill, the cache's trip, and a queue per pool.

The screen of one group (DistServe, arXiv:2401.09670, section 3, takes the same two queues):

- **prefill pool**: x servers behind the router, a prompt of U uncached tokens taking U c
  seconds alone (c the seconds a prompt token costs in a chunk of min(U, budget) tokens);
  the wait is Sakasegawa's M/G/x with the prompts' spread, its percentiles an exponential tail
  (as the colocated screen's slot wait);
- **the cache's trip**: U tokens' KV per GPU over the GPU link (one direction, the device's
  datasheet rate), shard to shard in parallel;
- **decode pool**: y servers each at rate/y; the decode rows are a fixed point of Little's law,
  n = (rate / y) (O - 1) T(n), and a token takes T(n), the bare decode step; the first token
  comes from the decode instance's first step; the slots wait as the colocated screen's do.

Only a load given as a request rate is searched (a closed loop's users are not split over two
pools here), only within a node (the cache crosses NVLink or xGMI, not the network), and only
for an engine that has a P/D mode at its version. The figures are the screen's: the simulation
plays colocated engines only, which the plan says.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

from hwadvisor.engines import engine_for
from hwadvisor.models.serving import ServingConfig, ServingFigures, ServingPoint, Targets
from hwadvisor.perfmodel.memory import kv_cache_bytes
from hwadvisor.serving.candidates import (
    Family,
    Inputs,
    Replica,
    knob_values,
    pool_of,
    prefix_caching,
    table_of,
)
from hwadvisor.serving.figures import checks_of, figures
from hwadvisor.serving.screen import (
    PERCENTILES,
    Limits,
    Point,
    Shape,
    Table,
    decode_s,
    margin,
    wait_tail,
    with_slots,
)

# Instances a pool may have within one group (and GPUs a group may take: one node).
MOST_INSTANCES = 7
# Prompts shorter than this prefill in one short chunk: nothing to take off the decode steps
# (the inference playbook's pd-disaggregation rule, min_prompt_len).
MIN_PROMPT = 1024


@dataclass(frozen=True)
class Split:
    """One P/D group: x prefill and y decode instances of one family."""

    prefill: int
    decode: int


@dataclass
class PdJudged:
    """A P/D group with its capacity under the targets and what the load needs of it."""

    family: Family
    split: Split
    max_seqs: int  # sequences a decode instance runs at once
    step_tokens: int  # a prefill instance's step budget
    kv_pool_tokens: int  # the KV pool of a decode instance
    capacity: float  # requests/s one group serves within the targets
    groups: int | None  # groups the load needs (None: none meets the targets)
    goodput_per_gpu: float
    model: Replica
    shape: Shape
    limits: Limits  # a decode instance's

    @property
    def gpus_per_group(self) -> int:
        """GPUs of one group: its instances times the family's GPUs."""
        return (self.split.prefill + self.split.decode) * self.family.gpus

    @property
    def gpus(self) -> int | None:
        """GPUs the load needs of this group layout."""
        return None if self.groups is None else self.groups * self.gpus_per_group


def why_not(inputs: Inputs) -> str | None:
    """Say why P/D is not searched for this engine, device and load (None: it is)."""
    engine = engine_for(inputs.workload)
    device_class = str(inputs.device.device_class)
    if engine.cannot("pd-disaggregation", device_class):
        return f"{engine.name} {engine.version} has no prefill/decode disaggregation"
    if engine.config_for("inference").pd is None:
        return f"hwadvisor has no P/D launch for {engine.name} to emit"
    if device_class != "datacenter-gpu":
        return "disaggregation ships each request's KV cache between GPUs: datacenter GPUs only"
    link = inputs.device.interconnect
    if link is None or link.gpu_link_kind not in ("nvlink", "xgmi") or not link.gpu_link_gbps:
        return "the KV cache would cross PCIe between the pools: no NVLink or xGMI"
    if inputs.load.rate_rps is None:
        return "searched for a request rate only (a closed loop's users are not split)"
    if inputs.load.prompt.mean < MIN_PROMPT:
        return (f"prompts of {inputs.load.prompt.mean:,.0f} tokens prefill in one short chunk: "
                "nothing to take off the decode steps")
    return None


@dataclass(frozen=True)
class Costs:
    """One family's costs a P/D group is judged on."""

    per_token_s: float  # a prompt token's prefill seconds, in a chunk of the prompt's size
    transfer_s: float  # a prompt token's KV over the GPU link, per GPU
    request_s: float  # the API server's own time a request


def costs_of(model: Replica, table: Table, inputs: Inputs, shape: Shape,
             step_tokens: int) -> Costs:
    """Return a family's prefill cost a prompt token, its KV's trip and the request's own time."""
    from hwadvisor.perfmodel.efficiency import engine_time

    chunk = max(1.0, min(shape.uncached, float(step_tokens)))
    per_token = table.chunk_s(0.0, chunk, False) / chunk
    setup = model.steps.setup
    spec = setup.spec
    link = inputs.device.interconnect
    gbps = link.gpu_link_gbps if link is not None and link.gpu_link_gbps else 0.0
    kv = kv_cache_bytes(spec, model.workload.kv_dtype, 1, 1, setup.layout.attn_tp) \
        if spec is not None else 0.0
    transfer = kv / (gbps * 1e9) if gbps > 0 else math.inf
    overhead = engine_time(model.workload, setup.res.family).request_overhead_s
    return Costs(per_token, transfer, overhead)


def _mgc_wait(rate: float, servers: int, mean_s: float, cv2: float) -> tuple[float, float]:
    """Return (mean wait, P(wait)) of an M/G/c queue by Sakasegawa's approximation."""
    util = rate * mean_s / servers
    if util >= 0.98:
        return math.inf, 1.0
    if util <= 0:
        return 0.0, 0.0
    busy = util ** (math.sqrt(2.0 * (servers + 1.0)) - 1.0)
    return busy * mean_s * (1.0 + cv2) / 2.0 / (servers * (1.0 - util)), busy


def _decode_rows(table: Table, limits: Limits, shape: Shape, rate: float) -> tuple[float, float]:
    """Return (rows, step seconds) of one decode instance at `rate` requests/s (inf: no end)."""
    t = decode_s(table, limits, 1.0)
    for _ in range(60):
        rows = max(1.0, rate * max(shape.output - 1.0, 0.0) * t)
        new = decode_s(table, limits, rows)
        if not math.isfinite(new) or new > 1e3:
            return math.inf, math.inf
        if abs(new - t) <= 1e-4 * new:
            return rows, new
        t = new
    return math.inf, math.inf


def point(table: Table, limits: Limits, shape: Shape, costs: Costs, split: Split,
          rate: float) -> Point:
    """Solve one P/D group's steady state at `rate` requests/s: figures as the screen's Point."""
    out = Point(ok=False, rate_rps=rate)
    u_mean, cv2 = shape.uncached, max(shape.uncached_sq / shape.uncached ** 2 - 1.0, 0.0)
    service = u_mean * costs.per_token_s
    wait, busy = _mgc_wait(rate, split.prefill, service, cv2)
    if not math.isfinite(wait):
        out.why = "prompts arrive faster than the prefill instances prefill them"
        return out
    per_decode = rate / split.decode
    rows, step = _decode_rows(table, limits, shape, per_decode)
    if not math.isfinite(step):
        out.why = "the decode steps grow without bound"
        return out
    # one decode instance's own view, for the wait for a sequence slot
    mine = Point(ok=True, rate_rps=per_decode, running=rows, step_s=step, decode_s=step)
    first = step + costs.request_s
    mine.ttft_mean_s = wait + service + u_mean * costs.transfer_s + first
    for q in PERCENTILES:
        u = shape.uncached_q[q]
        own = u * (costs.per_token_s + costs.transfer_s)
        mine.ttft_s[q] = wait_tail(wait, busy, q) + own + first
        mine.tpot_s[q] = mine.itl_s[q] = step  # no prompt chunk ever shares a decode step
    decode_time = max(shape.output - 1.0, 0.0) * step
    mine.e2e_mean_s = mine.ttft_mean_s + decode_time
    for q in PERCENTILES:
        dev_ttft = mine.ttft_s[q] - mine.ttft_mean_s
        dev_out = (shape.output_q[q] - shape.output) * step
        mine.e2e_s[q] = mine.e2e_mean_s + math.copysign(math.hypot(dev_ttft, dev_out),
                                                       dev_ttft + dev_out)
    held = with_slots(mine, limits, shape)
    if not held.ok:
        out.why = held.why
        return out
    held.rate_rps, held.running = rate, rows * split.decode
    return held


def capacity(table: Table, limits: Limits, shape: Shape, costs: Costs, split: Split,
             targets: Targets) -> float:
    """Return the most requests/s one group serves within the targets (0: not even a trickle)."""
    low = 1e-3
    if margin(point(table, limits, shape, costs, split, low), targets) < 0:
        return 0.0
    high = low
    while high < 1e6 and margin(point(table, limits, shape, costs, split, high * 2), targets) >= 0:
        high *= 2
    high *= 2
    for _ in range(24):  # the margin falls as the rate rises
        mid = math.sqrt(low * high)
        if margin(point(table, limits, shape, costs, split, mid), targets) >= 0:
            low = mid
        else:
            high = mid
        if high / low < 1.005:
            break
    return low


def judge(model: Replica, table: Table, inputs: Inputs, shape: Shape, step_tokens: int,
          pool: int, max_seqs: int) -> list[PdJudged]:
    """Judge every split of one family that fits a node: its capacity and groups for the load."""
    costs = costs_of(model, table, inputs, shape, step_tokens)
    if not math.isfinite(costs.transfer_s):
        return []
    limits = Limits(False, step_tokens, max_seqs, pool, request_s=0.0)
    asked = float(inputs.load.rate_rps or 0.0)
    fam = model.family
    out = []
    for x in range(1, MOST_INSTANCES + 1):
        for y in range(1, MOST_INSTANCES + 1):
            if (x + y) * fam.gpus > inputs.per_node:
                continue
            split = Split(x, y)
            cap = capacity(table, limits, shape, costs, split, inputs.targets)
            groups = math.ceil(asked / cap - 1e-9) if cap > 0 else None
            gpus = (x + y) * fam.gpus
            out.append(PdJudged(fam, split, max_seqs, step_tokens, pool, cap, groups,
                                cap * shape.output / gpus, model, shape, limits))
    return out


# --- the search's side: the best group of the families it built, and whether it is planned ----

def best_group(models: list[Replica], inputs: Inputs, notes: list[str]) -> PdJudged | None:
    """Judge P/D groups of every family given; the best that meets the load, if any.

    A group's prefill instances take the largest step budget (they carry no decode rows to
    protect), its decode instances the most sequences their KV pool holds. `notes` gets why
    P/D was not searched, or how the best group fared.
    """
    why = why_not(inputs)
    if why is not None:
        notes.append(f"disaggregated prefill/decode is not searched: {why}")
        return None
    seqs_values, step_values = knob_values(inputs.workload)
    step = max(step_values)
    prefix = prefix_caching(inputs)
    shape = Shape.of(inputs.load, prefix)
    judged: list[PdJudged] = []
    seen: set[Family] = set()
    for model in models:
        if model.slot is not None or model.family in seen:
            continue
        seen.add(model.family)
        pool = pool_of(model, inputs, step)
        if pool < shape.prompt + shape.output:
            continue
        table = table_of(model, shape, prefix)
        judged += judge(model, table, inputs, shape, step, pool, max(seqs_values))
    meeting = [p for p in judged if _fits(p, inputs.gpus)]
    if not meeting:
        notes.append(f"disaggregated prefill/decode: none of {len(judged)} groups (prefill and "
                     "decode instances within a node) meets the load within the targets")
        return None
    gpus = inputs.gpus
    best = min(meeting, key=lambda p: ((p.gpus or 0) if gpus is None else 0,
                                       -p.goodput_per_gpu, p.gpus_per_group))
    notes.append(f"disaggregated prefill/decode searched ({len(judged)} groups): the best, "
                 f"{best.split.prefill} prefill + {best.split.decode} decode instances of "
                 f"{best.family.gpus} GPU{'s' if best.family.gpus != 1 else ''}, serves "
                 f"{best.goodput_per_gpu:,.0f} output tokens/s per GPU within the targets "
                 "(the screen)")
    return best


def _fits(p: PdJudged, gpus: int | None) -> bool:
    if p.groups is None:
        return False
    return gpus is None or (gpus // p.gpus_per_group >= p.groups)


def wins(p: PdJudged, colocated_gpus: int | None, colocated_meets: bool,
         inputs: Inputs) -> bool:
    """Tell whether a P/D group is planned instead of the best colocated config.

    Only where it meets what colocated configs cannot: the targets on the given GPUs, or the
    load on fewer GPUs (when --gpus is left out). Where both meet on the same GPUs, the
    colocated config stays: vLLM's own guide says disaggregated prefill does not improve
    throughput (docs/features/disagg_prefill.md: it tunes TTFT and the tail of ITL apart),
    and a second pool, a router and a KV connector are more to run.
    """
    if not colocated_meets:
        return True
    if inputs.gpus is None and p.gpus is not None and colocated_gpus is not None:
        return p.gpus < colocated_gpus
    return False


def as_point(p: PdJudged, inputs: Inputs) -> ServingPoint:
    """Return a P/D group layout at the load as the plan states a config, simulated."""
    groups = max(p.groups or 1, 1)
    if inputs.gpus is not None:
        groups = max(inputs.gpus // p.gpus_per_group, 1)
    figures = simulate_group(p, inputs, groups)
    checks = checks_of(figures, inputs.targets)
    fam = p.family
    config = ServingConfig(
        engine=inputs.workload.engine, gpus_per_replica=p.gpus_per_group, replicas=groups,
        tensor_parallel=fam.tp, pipeline_parallel=fam.layers_over, max_sequences=p.max_seqs,
        step_tokens=p.step_tokens, weights_dtype=fam.weights_dtype, kv_dtype=fam.kv_dtype,
        kv_pool_tokens=p.kv_pool_tokens, prefix_caching=prefix_caching(inputs),
        prefill_instances=p.split.prefill, decode_instances=p.split.decode)
    return ServingPoint(
        config=config, figures=figures,
        tokens_per_s_per_gpu=figures.output_tokens_per_s / config.gpus,
        tokens_per_s_per_user=1.0 / figures.tpot_p50_s if figures.tpot_p50_s > 0 else 0.0,
        meets_targets=all(c.met for c in checks) and not figures.saturated, checks=checks,
        source="simulation", capacity_rps=p.capacity * groups,
        goodput_tokens_per_s_per_gpu=p.goodput_per_gpu)


# --- the group played request by request ---------------------------------------------------------

def simulate_group(p: PdJudged, inputs: Inputs, groups: int) -> ServingFigures:
    """Play one group's share of the load: its prefill pool, the cache's trip, its decode pool.

    The load's requests (drawn as predict draws them) queue first-come for the x prefill
    instances, each prompt's prefill taking its uncached tokens at the chunk's rate; its cache
    then crosses the GPU link; the router hands the requests to the y decode instances in turn
    (vLLM's proxy and SGLang's router both round-robin), and each decode instance is the
    engine's own scheduler simulated with the cache already there (one token left to prefill,
    as the decode instance computes the last prompt token's logits). Figures over all groups.
    """
    from hwadvisor.serving.load import Requests, draw
    from hwadvisor.serving.scheduler import Knobs, scheduler_for
    from hwadvisor.serving.simulate import simulate

    rate = float(inputs.load.rate_rps or 0.0) / groups
    reqs = draw(inputs.load, rate_rps=rate)
    prefix = prefix_caching(inputs)
    share = inputs.load.prefix_share if prefix else 0.0
    table = table_of(p.model, p.shape, prefix)
    costs = costs_of(p.model, table, inputs, p.shape, p.step_tokens)
    assert reqs.arrivals is not None  # P/D is searched for a request rate only
    free = [0.0] * p.split.prefill  # when each prefill instance is next free
    ready: list[float] = []
    for at, prompt in zip(reqs.arrivals, reqs.prompt, strict=True):
        uncached = max(1.0, prompt * (1.0 - share))
        chunk = max(1.0, min(uncached, float(p.step_tokens)))
        service = uncached * table.chunk_s(0.0, chunk, False) / chunk
        start = max(at, heapq.heappop(free))
        heapq.heappush(free, start + service)
        ready.append(start + service + prompt * costs.transfer_s)
    model = p.model
    sched = scheduler_for(model.steps, model.workload, inputs.device, model.options,
                          Knobs(p.max_seqs, p.step_tokens, p.kv_pool_tokens), 1.0)
    ttft = [0.0] * len(reqs)
    latency = [0.0] * len(reqs)
    itl: list[tuple[float, float]] = []
    saturated = False
    end = 0.0
    for d in range(p.split.decode):
        mine = sorted(range(d, len(reqs), p.split.decode), key=lambda i: ready[i])
        if not mine:
            continue
        part = Requests(tuple(reqs.prompt[i] for i in mine), tuple(reqs.output[i] for i in mine),
                        tuple(ready[i] for i in mine))
        out = simulate(part, sched, model.steps)
        for k, i in enumerate(mine):
            ttft[i] = out.first_token[k] - reqs.arrivals[i] + costs.request_s
            latency[i] = out.finish[k] - reqs.arrivals[i] + costs.request_s
        itl += out.itl
        saturated |= out.saturated
        end = max(end, out.end_s)
    one = figures(ttft, latency, list(reqs.output), itl, end - min(reqs.arrivals), saturated)
    return one.model_copy(update={
        "request_throughput_rps": one.request_throughput_rps * groups,
        "output_tokens_per_s": one.output_tokens_per_s * groups,
        "requests": one.requests * groups})
