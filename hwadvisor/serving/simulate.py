"""A discrete-event simulation of a serving engine's scheduler over a stream of requests.

Each step the scheduler admits waiting requests (while it has sequence slots and KV cache),
then builds the step as the engine does:
- `mixed` (vLLM V1, TensorRT-LLM in-flight batching, llama-server): every running sequence's
  decode token first, then prompt tokens of the sequences still prefilling, up to the step's
  token budget, a long prompt in chunks over several steps;
- `prefill-first` (SGLang's default, no mixed chunks): a step of prompt tokens alone whenever a
  prompt waits, decode steps only when none does;
- `static` (transformers generate()): a batch of waiting requests runs to its longest output
  before the next batch starts.
A step lasts what perfmodel/steps.py says for its rows and contexts; a sequence's first token
comes at the end of the step that finishes its prompt, each later token at the end of a decode
step. When a step has no prompt work and nothing can be admitted, many decode steps are taken at
once (their time grows linearly with the contexts), so a run costs events, not tokens.

Why a simulation and not a closed formula: TTFT under load is queueing plus chunked prefill
interleaved with decode, and TPOT carries the prefill chunks mixed into decode steps; both
depend on the lengths' spread and the arrivals, which a simulation plays as they come.
"""

from __future__ import annotations

import math
import random
from collections import deque
from dataclasses import dataclass, field
from typing import Literal, Protocol

from hwadvisor.serving.load import Requests

Policy = Literal["mixed", "prefill-first", "static"]
_ITL_POINTS = 4  # samples kept of a block of identical decode steps (their times grow linearly)


class StepTimes(Protocol):
    """Anything that times a step (perfmodel.steps.StepModel, or a test's stand-in)."""

    def step_s(self, decode_rows: int, decode_context: float, prefill_tokens: int = 0,
               prefill_seqs: int = 0, prefill_start: float = 0.0) -> float:
        """Seconds of one step."""
        ...


@dataclass(frozen=True)
class Scheduler:
    """How one replica schedules: the policy, its limits and its KV pool."""

    policy: Policy
    max_seqs: int
    step_tokens: int
    kv_pool_tokens: int
    prefix_share: float = 0.0
    tokens_per_step: float = 1.0  # tokens a decode step yields per sequence (speculation)
    # With speculation the target verifies every drafted token plus its own (k + 1 rows a
    # sequence, however many are accepted) and the drafter runs first: draft_cost of a step.
    verify_tokens: float = 1.0
    draft_cost: float = 0.0
    # llama-server with a slot count set (--parallel N) and no --kv-unified: each slot is its
    # own KV stream, and llama_kv_cache::init_batch splits a step with split_equal(sequential)
    # (src/llama-kv-cache.cpp, llama-batch.cpp at 0c1e57098), which puts one run of
    # consecutive sequence ids in each forward pass: k busy slots scattered over the ids cost
    # up to k passes where one would do. The server picks the least recently used idle slot
    # (server-context.cpp get_available_slot, prompts sharing no prefix), so the ids scatter
    # as requests of unequal lengths finish.
    stream_per_slot: bool = False
    # llama-server with --kv-unified and several slots: one KV buffer that every sequence's
    # attention reads up to its last used cell (the flash-attention kernel's KV_max, masked
    # per sequence), so a decode row reads about the whole used pool, not its own context.
    unified_pool: bool = False
    # vLLM V0 with --num-scheduler-steps N (multi-step scheduling, 0.5.5-0.7.x): a decode batch
    # runs N steps back to back and prompts that arrived meanwhile are taken only between runs
    # (vllm/core/scheduler.py at v0.6.0: the running batch is scheduled for N steps).
    decode_run: int = 1


@dataclass(slots=True)
class _Seq:
    index: int
    arrival: float
    prompt: int
    output: int
    prefill_left: int
    prefill_done: int  # prompt tokens already in the cache (prefix hits count as done)
    generated: int = 0
    first_token: float = -1.0
    admitted: float = -1.0
    slot: int = -1  # the server slot it runs in (stream_per_slot only)

    @property
    def context(self) -> int:
        return self.prompt + self.generated


@dataclass
class Outcome:
    """Per-request times of one simulated run, and the inter-token gaps as weighted samples."""

    arrival: list[float]
    first_token: list[float]
    finish: list[float]
    output: list[int]
    itl: list[tuple[float, float]] = field(default_factory=list)  # (seconds, weight)
    end_s: float = 0.0
    preemptions: int = 0
    saturated: bool = False
    slots: list[int] = field(default_factory=list)  # the slot each request ran in (stream_per_slot)


class _Run:
    """The state of one simulation: the clock, the queue, the running sequences."""

    def __init__(self, requests: Requests, sched: Scheduler, steps: StepTimes,
                 concurrency: int | None) -> None:
        self.req, self.s, self.steps = requests, sched, steps
        n = len(requests)
        self.t = 0.0
        self.waiting: deque[_Seq] = deque()
        self.running: list[_Seq] = []
        self.out = Outcome([0.0] * n, [0.0] * n, [0.0] * n, list(requests.output))
        self.done = 0
        self.sent = 0
        self.concurrency = concurrency
        self.kv_used = 0
        self.decode_steps = 0  # decode steps since the last prompt step (decode_run)
        self.slot_last = _served_before(sched.max_seqs) if sched.stream_per_slot else []
        self.slot_busy = [False] * len(self.slot_last)

    # --- arrivals ----------------------------------------------------------------------------
    def _new_seq(self, i: int, at: float) -> _Seq:
        prompt = self.req.prompt[i]
        cached = min(prompt - 1, int(prompt * self.s.prefix_share))
        self.out.arrival[i] = at
        return _Seq(i, at, prompt, max(1, self.req.output[i]), prompt - cached, cached)

    def _send(self, at: float) -> None:
        if self.sent < len(self.req):
            self.waiting.append(self._new_seq(self.sent, at))
            self.sent += 1

    def start(self) -> None:
        """Queue the first requests: the closed loop's users, or none yet for an open loop."""
        if self.req.arrivals is None:
            for _ in range(min(self.concurrency or 1, len(self.req))):
                self._send(0.0)

    def arrive(self) -> None:
        """Queue every open-loop request that has arrived by now."""
        arrivals = self.req.arrivals
        if arrivals is None:
            return
        while self.sent < len(self.req) and arrivals[self.sent] <= self.t + 1e-12:
            self.waiting.append(self._new_seq(self.sent, arrivals[self.sent]))
            self.sent += 1

    def next_arrival(self) -> float:
        """When the next open-loop request arrives (inf: none, or a closed loop)."""
        arrivals = self.req.arrivals
        if arrivals is None or self.sent >= len(self.req):
            return math.inf
        return arrivals[self.sent]

    # --- admission and KV --------------------------------------------------------------------
    def admit(self) -> None:
        """Move waiting requests into the running batch while slots and KV cache allow."""
        pool = self.s.kv_pool_tokens
        while self.waiting and len(self.running) < self.s.max_seqs:
            seq = self.waiting[0]
            if self.kv_used + seq.prompt + 1 > pool and self.running:
                break
            self.waiting.popleft()
            seq.admitted = self.t
            seq.slot = self._take_slot()
            if seq.slot >= 0:
                self.out.slots.append(seq.slot)
            self.running.append(seq)
            self.kv_used += seq.prompt

    def _take_slot(self) -> int:
        """Take the least recently used idle slot; ties go to the last (the server's `<=`)."""
        best = -1
        for i, busy in enumerate(self.slot_busy):
            if not busy and (best < 0 or self.slot_last[i] <= self.slot_last[best]):
                best = i
        if best >= 0:
            self.slot_busy[best] = True
        return best

    def _free_slot(self, seq: _Seq) -> None:
        if seq.slot >= 0:
            self.slot_busy[seq.slot] = False
            self.slot_last[seq.slot] = self.t
            seq.slot = -1

    def _preempt(self) -> None:
        """Out of KV cache: the newest sequence gives its cache back and waits to recompute."""
        while self.kv_used > self.s.kv_pool_tokens and len(self.running) > 1:
            seq = self.running.pop()
            self._free_slot(seq)
            self.kv_used -= seq.context
            # vLLM's recompute preemption: the prompt and what it generated are prefilled again
            seq.prefill_left, seq.prefill_done = seq.context, 0
            seq.prompt, seq.output = seq.context, seq.output - seq.generated
            seq.generated = 0
            self.waiting.appendleft(seq)
            self.out.preemptions += 1

    def finish(self, seq: _Seq) -> None:
        """Record a finished request, free its cache; in a closed loop its user sends again."""
        self.out.finish[seq.index] = self.t
        self._free_slot(seq)
        self.kv_used -= seq.context
        self.done += 1
        if self.req.arrivals is None:
            self._send(self.t)


def _served_before(slots: int) -> list[float]:
    """Each slot's last release time (server_slot::t_last_used) in a server that has served.

    A fresh llama-server hands out slots last to first (t_last_used -1 everywhere, `<=`), a
    neat rotation that keeps overlapping requests in neighbouring slots; once requests of
    unequal lengths have come and gone the least-recently-used order is a shuffle. The run
    starts from one (seeded, so a prediction repeats): the server as users meet it.
    """
    order = list(range(slots))
    random.Random(slots).shuffle(order)
    return [-1.0 - rank for rank in order]


def _decoding(run: _Run) -> list[_Seq]:
    return [q for q in run.running if q.prefill_left == 0]


def _mean_context(seqs: list[_Seq]) -> float:
    return sum(q.prompt + q.generated for q in seqs) / len(seqs) if seqs else 0.0


def _passes(run: _Run, decoding: list[_Seq]) -> list[list[_Seq]]:
    """Group the decoding sequences into the step's forward passes: one, or one a slot run."""
    if not decoding:
        return []
    if not run.s.stream_per_slot:
        return [decoding]
    ordered = sorted(decoding, key=lambda q: q.slot)
    groups = [[ordered[0]]]
    for seq in ordered[1:]:
        if seq.slot == groups[-1][-1].slot + 1:
            groups[-1].append(seq)
        else:
            groups.append([seq])
    return groups


def _rows(run: _Run, n: int) -> int:
    verify = max(run.s.verify_tokens, run.s.tokens_per_step)
    return int(math.ceil(n * verify)) if verify > 1 else n


def _context(run: _Run, group: list[_Seq], ahead: float = 0.0) -> float:
    """Return the KV a decode row of the group reads: its context, or the used unified pool."""
    if run.s.unified_pool:
        return run.kv_used + ahead * len(run.running)
    return _mean_context(group) + ahead


def _decode_s(run: _Run, groups: list[list[_Seq]], ahead: float = 0.0) -> float:
    """Seconds of the decode passes of a step, `ahead` tokens later than now."""
    return sum(run.steps.step_s(_rows(run, len(g)), _context(run, g, ahead)) for g in groups)


def _prefill_plan(run: _Run, budget: int, prefilling: list[_Seq]) -> list[tuple[_Seq, int]]:
    plan = []
    for seq in prefilling:
        if budget <= 0:
            break
        take = min(seq.prefill_left, budget)
        plan.append((seq, take))
        budget -= take
    return plan


def _emit_tokens(run: _Run, decoding: list[_Seq], dt: float) -> None:
    """Each decoding sequence gets its step's tokens; those that reach their output finish."""
    per = run.s.tokens_per_step
    if decoding:
        run.out.itl.append((dt / per, float(len(decoding)) * per))
    if per == 1.0:  # one token each (the common case, kept short: it runs every step)
        run.kv_used += len(decoding)
        done = []
        for seq in decoding:
            seq.generated += 1
            if seq.generated >= seq.output:
                done.append(seq)
        for seq in done:
            run.running.remove(seq)
            run.finish(seq)
        return
    for seq in decoding:
        gained = min(per, seq.output - seq.generated)
        seq.generated += max(1, int(round(gained)))
        run.kv_used += int(round(gained))
        if seq.generated >= seq.output:
            run.running.remove(seq)
            run.finish(seq)


def _prefill_tokens_done(run: _Run, plan: list[tuple[_Seq, int]]) -> None:
    for seq, take in plan:
        seq.prefill_left -= take
        seq.prefill_done += take
        if seq.prefill_left == 0:
            if seq.first_token < 0:  # a recomputed (preempted) sequence had its first token
                seq.first_token = run.t
                run.out.first_token[seq.index] = run.t
            seq.generated = 1
            run.kv_used += 1
            if seq.output <= 1:
                run.running.remove(seq)
                run.finish(seq)


def _step(run: _Run, decoding: list[_Seq], plan: list[tuple[_Seq, int]]) -> None:
    """Run one step: time it, advance the clock, hand out its tokens."""
    tokens = sum(take for _, take in plan)
    start = sum(seq.prefill_done + take / 2.0 for seq, take in plan) / len(plan) if plan else 0.0
    rows = len(decoding)
    groups = _passes(run, decoding) or [[]]
    # the prompt tokens ride with the first pass (the step's rows are cut into n_ubatch pieces)
    first = groups[0]
    dt = run.steps.step_s(_rows(run, len(first)), _context(run, first) if first else 0.0,
                          tokens, len(plan), max(0.0, start))
    dt += _decode_s(run, groups[1:])
    if rows and run.s.tokens_per_step > 1:
        dt *= 1.0 + run.s.draft_cost  # the drafter's own forwards, before the verification
    run.t += dt
    _emit_tokens(run, decoding, dt)
    _prefill_tokens_done(run, plan)
    run._preempt()


def _fast_forward(run: _Run, decoding: list[_Seq]) -> int:
    """Take many identical decode steps at once where nothing else can happen meanwhile.

    Return the steps taken (0: none, take one step the ordinary way).

    Possible when no prompt waits to be prefilled and no request can be admitted before the
    next completion; stops early at the next arrival if that one could be admitted. Under
    speculation each step gives every sequence the same whole tokens (_emit_tokens), so a block
    runs until the first sequence is within one step's tokens of its end.
    """
    if len(decoding) != len(run.running) or not decoding:
        return 0
    can_admit_more = len(run.running) < run.s.max_seqs
    if run.waiting and can_admit_more:
        return 0
    per = run.s.tokens_per_step
    gain, kv_gain = max(1, int(round(per))), int(round(per))
    # steps after which every sequence still has a whole step's tokens to go (per 1: its end)
    left = min(int((q.output - q.generated - per) // gain) + 1 for q in decoding)
    room = (run.s.kv_pool_tokens - run.kv_used) // (len(decoding) * max(kv_gain, 1))
    steps = min(left, room)
    if steps <= 2:
        return 0
    rows, groups = len(decoding), _passes(run, decoding)
    draft = 1.0 + run.s.draft_cost if per > 1 else 1.0  # the drafter's forwards (_step)
    first = _decode_s(run, groups) * draft
    last = _decode_s(run, groups, (steps - 1) * gain) * draft
    slope = (last - first) / max(steps - 1, 1)
    arrival = run.next_arrival() if can_admit_more else math.inf
    if arrival < math.inf:
        # steps that end before the arrival, then one more (the one it arrives during)
        k = _steps_within(first, slope, arrival - run.t) + 1
        steps = min(steps, max(1, k))
    if steps <= 2:
        return 0
    total = steps * first + slope * steps * (steps - 1) / 2.0
    points = min(_ITL_POINTS, steps)
    for j in range(points):
        at = (j + 0.5) * steps / points - 0.5  # the mean step index of its share: k = 0..steps-1
        run.out.itl.append(((first + slope * at) / per, rows * per * steps / points))
    run.t += total
    for seq in decoding:
        seq.generated += steps * gain
    run.kv_used += rows * steps * kv_gain
    for seq in [q for q in decoding if q.generated >= q.output]:
        run.running.remove(seq)
        run.finish(seq)
    return steps


def _steps_within(first: float, slope: float, room: float) -> int:
    """How many steps of growing length (first, first+slope, ...) fit within `room` seconds."""
    if room <= 0:
        return 0
    if slope <= 1e-15:
        return int(room / first) if first > 0 else 10**9
    # slope/2 k^2 + (first - slope/2) k - room = 0
    a, b = slope / 2.0, first - slope / 2.0
    return int((-b + math.sqrt(b * b + 4 * a * room)) / (2 * a))


def _mixed_step(run: _Run) -> None:
    decoding = _decoding(run)
    if _fast_forward(run, decoding):
        return
    budget = max(run.s.step_tokens - len(decoding), 0)
    prefilling = [q for q in run.running if q.prefill_left > 0]
    _step(run, decoding, _prefill_plan(run, budget, prefilling))


def _prefill_first_step(run: _Run) -> None:
    prefilling = [q for q in run.running if q.prefill_left > 0]
    decoding = _decoding(run)
    # prompts go first, but not in the middle of a multi-step decode run (decode_run steps)
    if prefilling and (not decoding or run.decode_steps % run.s.decode_run == 0):
        _step(run, [], _prefill_plan(run, run.s.step_tokens, prefilling))
        run.decode_steps = 0
        return
    taken = _fast_forward(run, decoding) if not prefilling else 0
    if not taken:
        _step(run, decoding, [])
        taken = 1
    run.decode_steps += taken


def _static_batch(run: _Run) -> None:
    """Run a static batch (transformers generate()): prefilled together, decoded to its end."""
    batch = list(run.running)
    longest = max(q.prompt for q in batch)
    cached = min(q.prefill_done for q in batch)
    run.t += run.steps.step_s(0, 0.0, (longest - cached) * len(batch), len(batch), cached)
    for seq in batch:
        seq.prefill_left, seq.generated = 0, 1
        seq.first_token = run.t
        run.out.first_token[seq.index] = run.t
    steps = max(q.output for q in batch) - 1
    rows, ctx = len(batch), float(longest)
    for j in range(steps):  # padded: every row decodes until the longest is done
        dt = run.steps.step_s(rows, ctx + j)
        run.t += dt
        run.out.itl.append((dt, float(sum(1 for q in batch if q.generated < q.output))))
        for seq in batch:
            if seq.generated < seq.output:
                seq.generated += 1
                if seq.generated >= seq.output:
                    run.out.finish[seq.index] = run.t
    for seq in batch:
        if seq.output <= 1:
            run.out.finish[seq.index] = run.t
        run.running.remove(seq)
        run.kv_used -= seq.prompt
        run.done += 1
        if run.req.arrivals is None:
            run._send(run.t)


def simulate(requests: Requests, sched: Scheduler, steps: StepTimes,
             concurrency: int | None = None, max_events: int = 2_000_000) -> Outcome:
    """Play the requests through the scheduler; return every request's times."""
    run = _Run(requests, sched, steps, concurrency)
    run.start()
    events = 0
    while run.done < len(requests) and events < max_events:
        events += 1
        run.arrive()
        run.admit()
        if not run.running:
            nxt = run.next_arrival()
            if nxt == math.inf:
                break  # nothing left that can run (a request larger than the KV pool)
            run.t = max(run.t, nxt)
            continue
        if sched.policy == "static":
            _static_batch(run)
        elif sched.policy == "prefill-first":
            _prefill_first_step(run)
        else:
            _mixed_step(run)
    run.out.end_s = run.t
    run.out.saturated = _saturated(run)
    return run.out


def _saturated(run: _Run) -> bool:
    """Tell whether an open loop's queue kept growing (late requests waited far longer)."""
    arrivals = run.req.arrivals
    n = len(arrivals or ())
    if arrivals is None or n < 8:
        return False
    waits = [run.out.first_token[i] - arrivals[i] for i in range(n)]
    quarter = max(n // 4, 1)
    early = sum(waits[:quarter]) / quarter
    late = sum(waits[-quarter:]) / quarter
    offered = n / max(arrivals[-1], 1e-9)
    served = n / max(run.t, 1e-9)
    return late > 3.0 * max(early, 1e-3) and served < 0.97 * offered
