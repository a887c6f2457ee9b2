"""The analytic steady state of a serving engine: a fast screen of many configs under a load.

The simulation (simulate.py) plays every step and costs 20-250 ms a config; a search over a
thousand configs needs an answer in microseconds. The screen solves the steady state instead:

- **the step time is a fixed point** (Little's law): at a rate λ per replica, decode rows are
  b = λ (O - 1) T / τ (O output tokens, τ tokens a decode step yields with speculation), and
  the prompt tokens to prefill each second are λ U (U uncached prompt tokens); a step carries
  its decode rows and, in a share of steps, a prompt chunk of up to the step budget less the
  rows. With c the seconds a prompt token adds to a step at that chunk, the prefill takes a
  share ρ = λ U c of the time and T = decode_step(b) / (1 - ρ);
- **saturation** is ρ >= 1, the prompt tokens a step must carry above its budget, the running
  sequences above the slots or the KV pool;
- **TTFT** is the rest of the step in progress, the wait behind other prompts (M/G/1 on the
  prefill work: λ E[S²] / 2(1 - ρ), an exponential tail for its percentiles), the prompt's own
  chunks, and the wait for a sequence slot (Sakasegawa's M/G/c approximation);
- **TPOT** is T / τ plus the prompts that arrive during a request's decode (their work's
  standard deviation, √(λ D E[U²]), for the percentiles); **ITL** is the decode step, or the
  decode step with a chunk in it for the share of steps that carry one;
- a **closed loop** of N users keeps min(N, slots) sequences running and the rest waiting.

Lengths are the load's lognormals (their quantiles for the percentiles). The screen ranks the
candidates; the few best are simulated (`predict`) before any figure is reported as theirs.
tests/serving/test_screen.py holds it against the simulation on a grid of cases.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable
from dataclasses import dataclass, field

from hwadvisor.models.serving import Lengths, Load, ServingFigures, Targets
from hwadvisor.perfmodel.steps import StepModel

# Standard normal quantiles and exponential-tail factors of the percentiles a target may name.
_Z = {50: 0.0, 90: 1.2816, 95: 1.6449, 99: 2.3263}
PERCENTILES = (50, 90, 95, 99)
_PER_DOUBLING = 4  # grid points of the row tables per doubling of the rows (19% apart)
_MAX_ROWS = 1 << 16
_GRID = sorted({round(2.0 ** (k / _PER_DOUBLING)) for k in range(16 * _PER_DOUBLING + 1)}
               | {_MAX_ROWS + 1})


@dataclass(frozen=True)
class Shape:
    """The load's lengths as the screen reads them: means, quantiles, second moments."""

    prompt: float  # mean prompt tokens (the KV cache a sequence holds)
    uncached: float  # mean prompt tokens prefilled (after prefix-cache hits)
    uncached_sq: float  # E[U²] of the prefilled tokens
    output: float  # mean output tokens
    output_cv: float
    uncached_q: dict[int, float]  # quantiles of the prefilled tokens
    output_q: dict[int, float]

    @staticmethod
    def of(load: Load, prefix_caching: bool = True) -> Shape:
        """Read a load's lengths; prefix-cache hits count only with prefix caching on."""
        share = load.prefix_share if prefix_caching else 0.0
        keep = 1.0 - share
        p, o = load.prompt, load.output
        return Shape(prompt=p.mean, uncached=max(1.0, p.mean * keep),
                     uncached_sq=(p.mean * keep) ** 2 * (1.0 + p.spread ** 2),
                     output=max(1.0, o.mean), output_cv=o.spread,
                     uncached_q={q: max(1.0, length_quantile(p, q) * keep) for q in PERCENTILES},
                     output_q={q: max(1.0, length_quantile(o, q)) for q in PERCENTILES})


def length_quantile(lengths: Lengths, q: int) -> float:
    """Return the q-th percentile of a lognormal of the lengths' mean and spread (or values)."""
    if lengths.values:
        ordered = sorted(lengths.values)
        return float(ordered[min(len(ordered) - 1, int(len(ordered) * q / 100.0))])
    if lengths.spread <= 0:
        return lengths.mean
    sigma = math.sqrt(math.log(1.0 + lengths.spread ** 2))
    mu = math.log(lengths.mean) - sigma * sigma / 2.0
    return math.exp(mu + _Z[q] * sigma)


class Table:
    """One replica's step times, tabulated by rows on a geometric grid and interpolated.

    decode(n): a step of n decode rows at the load's mean context (step_s); dense(n, prefill):
    the rows' part alone (StepModel.dense_s); each grid point is computed once, when needed.
    """

    def __init__(self, steps: StepModel, context: float, prompt: float,
                 like: Table | None = None, pool_wide: bool = False) -> None:
        """Tabulate for decode rows at `context` and prompts of `prompt` tokens.

        like: a table of the same steps and context whose row tables this one shares (the
        same replica with prefix caching on and off differs only in the prompt it prefills).
        pool_wide: each decode row reads the whole used cache, every row's context (a unified
        llama-server cache, simulate.Scheduler.unified_pool), not its own.
        """
        self.steps = steps
        self.context = context
        self.pool_wide = pool_wide
        shared = like is not None and like.steps is steps and like.context == context \
            and like.pool_wide == pool_wide
        self._decode: dict[int, float] = like._decode if shared and like else {}
        self._dense_prefill: dict[int, float] = like._dense_prefill if shared and like else {}
        self._dense_decode: dict[int, float] = like._dense_decode if shared and like else {}
        whole = max(int(prompt), 1)
        # attention a prompt token costs, averaged over a whole prompt's causal positions
        self.prefill_attention_s = max(
            0.0, steps.step_s(0, 0.0, whole, 1, 0.0) - steps.dense_s(whole, True)) / whole

    def _interp(self, n: float, table: dict[int, float],
                one: Callable[[int], float]) -> float:
        """one(n) interpolated linearly between the grid's row counts either side of n."""
        # the screen's innermost call (a few per step-map evaluation): kept flat
        x = 1.0 if n <= 1.0 else (n if n <= _MAX_ROWS else float(_MAX_ROWS))
        i = bisect.bisect_right(_GRID, x)
        low = _GRID[i - 1]
        f_low = table.get(low)
        if f_low is None:
            f_low = table[low] = one(low)
        if x == low:
            return f_low
        high = _GRID[i]
        f_high = table.get(high)
        if f_high is None:
            f_high = table[high] = one(high)
        return f_low + (f_high - f_low) * (x - low) / (high - low)

    def decode(self, rows: float) -> float:
        """Seconds of a decode step of `rows` rows (at least one)."""
        return self._interp(rows, self._decode, self._decode_one)

    def dense(self, rows: float, prefill: bool) -> float:
        """Seconds of the rows' part of a step (no attention)."""
        if prefill:
            return self._interp(rows, self._dense_prefill, self._dense_prefill_one)
        return self._interp(rows, self._dense_decode, self._dense_decode_one)

    def _decode_one(self, rows: int) -> float:
        return self.steps.step_s(rows, self.context * rows if self.pool_wide else self.context)

    def _dense_prefill_one(self, rows: int) -> float:
        return self.steps.dense_s(rows, True)

    def _dense_decode_one(self, rows: int) -> float:
        return self.steps.dense_s(rows, False)

    def chunk_s(self, rows: float, chunk: float, mixed: bool) -> float:
        """Seconds a prompt chunk adds: to a decode step of `rows` rows (mixed), or on its own."""
        attention = chunk * self.prefill_attention_s
        if not mixed:
            return self.dense(chunk, True) + attention
        return max(0.0, self.dense(rows + chunk, True) - self.dense(rows, False)) + attention


@dataclass
class Point:
    """The steady state of one replica at one load: step time, occupancy, latency figures."""

    ok: bool  # False: saturated (the queue grows)
    why: str = ""
    step_s: float = 0.0  # mean seconds between a sequence's decode steps
    decode_s: float = 0.0  # a decode step alone
    chunk_s: float = 0.0  # what a step with a prompt chunk adds
    share: float = 0.0  # share of steps that carry a prompt chunk
    rho: float = 0.0  # share of the time spent on prompt tokens
    running: float = 0.0  # sequences held (decoding and prefilling)
    rate_rps: float = 0.0
    tokens_per_step: float = 1.0
    ttft_mean_s: float = 0.0
    ttft_s: dict[int, float] = field(default_factory=dict)
    tpot_s: dict[int, float] = field(default_factory=dict)
    itl_s: dict[int, float] = field(default_factory=dict)
    e2e_s: dict[int, float] = field(default_factory=dict)
    e2e_mean_s: float = 0.0


@dataclass(frozen=True)
class Limits:
    """What one replica's scheduler allows: the policy, its budget and slots, its KV pool."""

    mixed: bool
    step_tokens: int
    max_seqs: int
    kv_pool_tokens: int
    tokens_per_step: float = 1.0  # tokens a decode step yields a sequence (speculation)
    verify_tokens: float = 1.0  # rows a decode step verifies a sequence
    draft_cost: float = 0.0  # the drafter's share of a step
    request_s: float = 0.0  # the API server's own time a request (engine costs.request_overhead_s)
    # llama-server's slots, each its own KV stream (simulate.Scheduler.stream_per_slot): a step
    # decodes one forward pass per run of consecutive busy slot ids; 0: one pass a step
    slot_streams: int = 0

    def slots(self, shape: Shape) -> float:
        """Sequences the replica can hold: its slots, or what its KV pool holds at mean length."""
        per_seq = shape.prompt + shape.output / 2.0
        return max(0.0, min(float(self.max_seqs), self.kv_pool_tokens / max(per_seq, 1.0)))


def decode_s(table: Table, limits: Limits, rows: float) -> float:
    """Seconds of a decode step of `rows` rows, as one pass or one per run of busy slots.

    k busy slots placed at random among n make k - k(k-1)/n runs of consecutive ids on average
    (n - 1 neighbouring id pairs, each busy on both sides with probability k(k-1)/(n(n-1)), and
    each such pair joins two runs); the server's least-recently-used choice scatters them that
    way once requests of unequal lengths have come and gone. Each pass carries its share of
    the rows.
    """
    n = limits.slot_streams
    if n <= 1 or rows <= 1.0:
        return table.decode(rows)
    k = min(rows, float(n))
    runs = max(1.0, k - k * (k - 1.0) / n)
    return runs * table.decode(rows / runs)


@dataclass(slots=True)
class _Step:
    """One evaluation of the step-time map at a guess t."""

    value: float  # the step time the guess implies (inf: no steady state)
    why: str = ""
    decode: float = 0.0
    extra: float = 0.0
    chunk: float = 1.0
    room: float = 0.0
    c: float = 0.0
    rho: float = 0.0


def _step_map(table: Table, limits: Limits, shape: Shape, rate: float, t: float) -> _Step:
    """Return the step time a guess t implies: decode rows and prompt work from Little's law."""
    tau = limits.tokens_per_step
    verify = limits.verify_tokens if limits.verify_tokens > tau else tau
    rows = rate * max(shape.output - 1.0, 0.0) / tau * t
    rows = (rows if rows > 1.0 else 1.0) * verify
    budget = float(limits.step_tokens)
    room = budget - rows if limits.mixed else budget
    if room <= 1.0:
        return _Step(math.inf, "the decode rows fill the step budget")
    u = shape.uncached
    chunk = min(room, max(u, rate * u * t))
    extra = table.chunk_s(rows, chunk, limits.mixed)
    c = extra / chunk
    rho = rate * u * c
    if rho >= 0.999:
        return _Step(math.inf, "prompts arrive faster than the steps can prefill them")
    if limits.slot_streams > 1 and rows > 1.0:
        decode = decode_s(table, limits, rows)
    else:
        decode = table.decode(rows)
    if tau > 1.0:
        decode *= 1.0 + limits.draft_cost
    return _Step(decode / (1.0 - rho), "", decode, extra, chunk, room, c, rho)


def open_point(table: Table, limits: Limits, shape: Shape, rate: float,
               start: float | None = None) -> Point:
    """Solve one replica's steady state at `rate` requests/s (slots not yet counted).

    The smallest fixed point of T = map(T), found by the secant method from below (the map is
    increasing in T: more time a step, more rows and more prompt work in the next one).
    """
    point = Point(ok=False, rate_rps=rate, tokens_per_step=limits.tokens_per_step)
    low = decode_s(table, limits, max(limits.verify_tokens, limits.tokens_per_step))
    t0 = low if start is None else start
    s0 = _step_map(table, limits, shape, rate, t0)
    if start is not None and s0.value < t0:  # a warm start above the fixed point: start low
        t0 = low
        s0 = _step_map(table, limits, shape, rate, t0)
    t1, s1 = s0.value, s0
    if math.isfinite(t1) and abs(t1 - t0) <= 1e-3 * t1:
        t1, s1 = t0, s0  # the start is the fixed point already (a warm start from the curve)
    elif math.isfinite(t1):
        s1 = _step_map(table, limits, shape, rate, t1)
    for _ in range(40):
        if not math.isfinite(s1.value):
            point.why = s1.why or s0.why
            return point
        h0, h1 = s0.value - t0, s1.value - t1
        if abs(h1) <= 1e-3 * t1:
            break
        if 0.0 < h0 <= h1 and t1 > t0:
            # the map runs ahead of the guess ever faster: T - map(T) is convex, so no fixed
            # point lies further on; the step map at a far guess says why (else: unbounded)
            far = _step_map(table, limits, shape, rate, t1 * 1e3)
            point.why = far.why or "the step time grows without bound"
            return point
        slope = (h1 - h0) / (t1 - t0) if t1 != t0 else 0.0
        guess = t1 - h1 / slope if slope < 0 else s1.value
        if not math.isfinite(guess) or guess <= 0 or guess > 1e3 * t1:
            guess = s1.value
        t0, s0 = t1, s1
        t1 = guess
        s1 = _step_map(table, limits, shape, rate, t1)
    else:
        point.why = "the step time grows without bound"
        return point
    t = t1
    if limits.mixed and rate * shape.uncached * t > s1.room + 1e-9:
        point.why = "the prompt tokens a step must carry exceed its budget"
        return point
    point.ok = True
    point.step_s, point.decode_s, point.chunk_s, point.rho = t, s1.decode, s1.extra, s1.rho
    point.share = min(1.0, rate * shape.uncached * t / s1.chunk)
    _latencies(point, shape, rate, s1.room, s1.c)
    if limits.request_s:  # as predict() adds it: on the first token and on the whole request
        point.ttft_mean_s += limits.request_s
        point.e2e_mean_s += limits.request_s
        for q in PERCENTILES:
            point.ttft_s[q] += limits.request_s
            point.e2e_s[q] += limits.request_s
    return point


def _latencies(point: Point, shape: Shape, rate: float, room: float, c: float) -> None:
    """Fill TTFT, TPOT, ITL and request latency percentiles of a solved point."""
    # Run for every point of every curve of a search: written flat, with the percentiles'
    # wait tails (wait_tail) and a prompt's own chunks (service) inline.
    tau, t, d, share = point.tokens_per_step, point.step_s, point.decode_s, point.share
    long_step = d + point.chunk_s
    mean_step = d * (1.0 - share) + long_step * share
    second = d * d * (1.0 - share) + long_step * long_step * share
    residual = second / (2.0 * max(mean_step, 1e-12))
    rho = point.rho
    wait_mean = rate * c * c * shape.uncached_sq / (2.0 * (1.0 - rho)) if rho > 0 else 0.0
    per_chunk = max(room, 1.0)
    own = math.ceil(shape.uncached / per_chunk) * d + shape.uncached * c
    decode_time = max(shape.output - 1.0, 0.0) * t / tau
    point.running = rate * (own + decode_time)
    ttft_mean = point.ttft_mean_s = residual + wait_mean + own
    tpot_mean = t / tau
    spread = c * math.sqrt(rate * max(decode_time, t) * shape.uncached_sq)
    per_token = max(shape.output - 1.0, 1.0)
    e2e_mean = point.e2e_mean_s = ttft_mean + decode_time
    ttft, tpot, itl, e2e = point.ttft_s, point.tpot_s, point.itl_s, point.e2e_s
    tail = wait_mean > 0 and rho > 0
    for q in PERCENTILES:
        above = 1.0 - q / 100.0
        u = shape.uncached_q[q]
        wait_q = wait_mean / rho * math.log(rho / above) if tail and rho > above else 0.0
        ttft[q] = value = residual + math.ceil(u / per_chunk) * d + u * c + wait_q
        tpot[q] = tpot_q = tpot_mean + _Z[q] * spread / per_token
        itl[q] = (long_step if above < share else d) / tau
        dev_ttft = value - ttft_mean
        dev_out = (shape.output_q[q] - shape.output) * t / tau
        dev_tpot = (tpot_q - tpot_mean) * per_token
        e2e[q] = e2e_mean + math.copysign(
            math.sqrt(dev_ttft * dev_ttft + dev_out * dev_out + dev_tpot * dev_tpot),
            dev_ttft + dev_out + dev_tpot)


def wait_tail(mean: float, busy: float, q: int) -> float:
    """Return the q-th percentile of a wait: 0 w.p. 1 - busy, else exponential (mean/busy)."""
    if mean <= 0 or busy <= 0 or busy <= 1.0 - q / 100.0:
        return 0.0
    return mean / busy * math.log(busy / (1.0 - q / 100.0))


def margin(point: Point, targets: Targets) -> float:
    """Return the smallest margin over the targets, (target - value) / target (-inf: saturated)."""
    if not point.ok:
        return -math.inf
    q = targets.percentile
    worst = math.inf
    tpot = point.itl_s if targets.tpot_definition == "itl" else point.tpot_s
    for target, series in ((targets.ttft_s, point.ttft_s), (targets.tpot_s, tpot),
                           (targets.request_latency_s, point.e2e_s)):
        if target is not None:
            worst = min(worst, (target - series[q]) / target)
    return worst if worst != math.inf else 1.0


def with_slots(point: Point, limits: Limits, shape: Shape) -> Point:
    """Add the wait for a sequence slot (Sakasegawa's M/G/c) to an open-loop point."""
    if not point.ok:
        return point
    slots = limits.slots(shape)
    if slots < 1.0:
        return Point(ok=False, why="the KV pool holds no whole request")
    util = point.running / slots
    if util >= 0.98:
        return Point(ok=False, why=f"{point.running:.0f} sequences running, more than the "
                     f"{slots:.0f} the slots and KV pool hold")
    service = point.running / max(point.rate_rps, 1e-12)
    busy = util ** (math.sqrt(2.0 * (slots + 1.0)) - 1.0)
    wait = busy * service * (1.0 + shape.output_cv ** 2) / 2.0 / (slots * (1.0 - util))
    if wait < 1e-6:
        return point
    out = Point(**{**point.__dict__, "ttft_s": dict(point.ttft_s), "e2e_s": dict(point.e2e_s)})
    out.ttft_mean_s += wait
    out.e2e_mean_s += wait
    for q in PERCENTILES:
        extra = wait_tail(wait, busy, q)
        out.ttft_s[q] += extra
        out.e2e_s[q] += extra
    return out


def closed_point(table: Table, limits: Limits, shape: Shape, users: int) -> Point:
    """Solve one replica's steady state with `users` closed-loop users (no think time)."""
    slots = limits.slots(shape)
    if slots < 1.0:
        return Point(ok=False, why="the KV pool holds no whole request")
    running = min(float(users), math.floor(slots))
    # throughput X from the running sequences: X = running / time a sequence is held
    rate = running / max(shape.output * decode_s(table, limits, running * limits.verify_tokens),
                         1e-9)
    point = Point(ok=False, why="no steady state")
    for _ in range(40):
        point = open_point(table, limits, shape, rate, point.step_s or None)
        if not point.ok:
            rate *= 0.7
            continue
        held = point.running / rate  # seconds a request holds a slot
        new = running / max(held, 1e-9)
        if abs(new - rate) <= 1e-3 * new:
            rate = new
            break
        rate = 0.5 * rate + 0.5 * new
    point = open_point(table, limits, shape, rate, point.step_s or None)
    if not point.ok:
        return point
    waiting = users - running
    if waiting > 0:  # the users beyond the slots wait for one: Little's law on the queue
        wait = waiting / rate
        point.ttft_mean_s += wait
        point.e2e_mean_s += wait
        for q in PERCENTILES:
            point.ttft_s[q] += wait
            point.e2e_s[q] += wait
    return point


def figures_of(point: Point, shape: Shape, replicas: int = 1,
               requests: int = 0) -> ServingFigures:
    """Return the screen's figures as ServingFigures (throughputs over all replicas)."""
    values: dict[str, float] = {}
    for name, series, mean in (("ttft", point.ttft_s, point.ttft_mean_s),
                               ("tpot", point.tpot_s, point.step_s / point.tokens_per_step),
                               ("itl", point.itl_s, point.step_s / point.tokens_per_step),
                               ("request_latency", point.e2e_s, point.e2e_mean_s)):
        for q in (50, 90, 99):
            values[f"{name}_p{q}_s"] = series.get(q, 0.0)
        values[f"{name}_mean_s"] = mean
    return ServingFigures(
        **values, request_throughput_rps=point.rate_rps * replicas,
        output_tokens_per_s=point.rate_rps * shape.output * replicas, requests=requests,
        saturated=not point.ok)
