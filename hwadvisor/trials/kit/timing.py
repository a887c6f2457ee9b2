"""The one measuring method every trial shares (see the team's METHOD.md).

- Correct first: `rel_error(out, ref)` = ||out - ref|| / ||ref|| in float64; NaN or Inf never
  passes (it returns inf). `poison(t)` fills an output with NaN (or a sentinel for integer
  tensors) before a run, so an unwritten element shows up as an error.
- Random data, never zeros: `random_like`/`randn` helpers draw fresh inputs.
- Time properly: `bench(fn, device=...)` warms up, calibrates how many calls one sample spans
  (short kernels are timed in batches so launch/event overhead stays out), then records
  `repeats` samples with device events (CUDA) or `time.perf_counter` around synchronous work
  (CPU, after a synchronize on MPS). `fn(i)` gets a call counter so it can rotate among several
  input sets whose total size is well beyond the last-level cache (`rotation_sets`).
- Keep raw samples: the result is a `Measurement` (median, spread, noisy are derived).
- Compare by interleaving: `interleaved({...})` times a baseline and one or more variants in
  rotating order within each round (ABAB..., the start rotating so slow drifts of clock or
  temperature fall on every variant alike), after a warm-up that runs until the per-call time
  is steady, and repeats rounds until the 95% interval of every ratio baseline / variant (a
  t-interval on the log-ratios, models/stats.py) is within ±`target` or the budget is spent.
  Every A/B trial (and the lead's stacked-step plan check) goes through it.

torch is imported only inside these functions, never at module import time.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from hwadvisor.models import Measurement, TrialResult
from hwadvisor.models.stats import LogEstimate, geomean_estimate, ratio_estimate
from hwadvisor.models.trial import named_effects

# H200 L2 is 60 MiB (NVIDIA H200 datasheet / Hopper tuning guide: 50 MB on H100 SXM, 60 MB on
# H200); a rotation total of 4x the largest L2 we target keeps every timed call reading DRAM.
DEFAULT_CACHE_BYTES = 60 * 1024 * 1024
ROTATION_FACTOR = 4


# Paired comparisons: stop when every ratio's 95% interval is within ±5% (TARGET_HALFWIDTH),
# after at least MIN_ROUNDS rounds; never fewer than MIN_ROUNDS_FLOOR, even when over budget.
TARGET_HALFWIDTH = 0.05
MIN_ROUNDS = 6
MIN_ROUNDS_FLOOR = 3
MAX_ROUNDS = 200
# Warm-up to steady clocks: timed warm-up passes until two in a row agree within STEADY_TOLERANCE
# (an idle H200 sits at 345 MHz and takes tens of ms to reach 1980 MHz under load).
STEADY_TOLERANCE = 0.03


def sync(device: str) -> None:
    """Wait until all queued work on device ("cuda", "cuda:0", "mps", "cpu") has finished.

    ROCm builds of torch answer to the same torch.cuda calls (torch.version.hip is set).
    """
    if device.startswith("cpu"):
        return  # CPU kernels run synchronously
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize(device)
    elif device.startswith("mps"):
        torch.mps.synchronize()


def rotation_sets(bytes_per_set: int, cache_bytes: int = DEFAULT_CACHE_BYTES,
                  max_sets: int = 64) -> int:
    """How many input sets to rotate among so their total is ROTATION_FACTOR x the cache."""
    if bytes_per_set <= 0:
        return 1
    need = math.ceil(ROTATION_FACTOR * cache_bytes / bytes_per_set)
    return max(1, min(max_sets, need))


def rel_error(out: Any, ref: Any) -> float:
    """||out - ref|| / ||ref|| computed in float64; inf when out has NaN/Inf or shapes differ."""
    import torch

    o = out.detach().to("cpu", torch.float64)
    r = ref.detach().to("cpu", torch.float64)
    if o.shape != r.shape or not bool(torch.isfinite(o).all()):
        return math.inf
    denom = float(torch.linalg.vector_norm(r))
    diff = float(torch.linalg.vector_norm(o - r))
    if denom == 0.0:
        return 0.0 if diff == 0.0 else math.inf
    return diff / denom


def poison(t: Any) -> Any:
    """Fill an output tensor with NaN (floats) or its dtype's max (integers) before a run."""
    import torch

    if t.is_floating_point():
        try:
            t.fill_(float("nan"))
        except RuntimeError:  # float8 types cannot be filled on every torch version
            t.view(torch.uint8).fill_(0x7F)  # 0x7F is NaN in float8_e4m3fn
    else:
        t.fill_(torch.iinfo(t.dtype).max)
    return t


def _time_cuda(fn: Callable[[int], object], inner: int, counter: list[int], device: str) -> float:
    import torch

    with torch.cuda.device(torch.device(device)):
        return _time_events(torch.cuda.Event, fn, inner, counter)


def _time_mps(fn: Callable[[int], object], inner: int, counter: list[int], device: str) -> float:
    """Time on Apple's Metal queue with torch.mps events (torch >= 2.1), else the host clock."""
    import torch

    event_type = getattr(getattr(torch, "mps", None), "Event", None)
    if event_type is None:
        return _time_host(fn, inner, counter, device)
    return _time_events(event_type, fn, inner, counter)


def _time_events(event_type: Any, fn: Callable[[int], object], inner: int,
                 counter: list[int]) -> float:
    """Time `inner` calls between two device-queue events (CUDA/HIP or Metal); s per call."""
    start = event_type(enable_timing=True)
    end = event_type(enable_timing=True)
    start.record()
    for _ in range(inner):
        fn(counter[0])
        counter[0] += 1
    end.record()
    end.synchronize()
    return float(start.elapsed_time(end)) / 1e3 / inner


def timer_for(device: str) -> Callable[[Callable[[int], object], int, list[int], str], float]:
    """Return the sample timer of a device: CUDA/ROCm events, MPS events, or the host clock."""
    if device.startswith("cuda"):
        return _time_cuda
    if device.startswith("mps"):
        return _time_mps
    return _time_host


def _time_host(fn: Callable[[int], object], inner: int, counter: list[int], device: str) -> float:
    sync(device)
    t0 = time.perf_counter()
    for _ in range(inner):
        fn(counter[0])
        counter[0] += 1
    sync(device)
    return (time.perf_counter() - t0) / inner


def bench(
    fn: Callable[[int], object],
    *,
    device: str,
    label: str,
    repeats: int = 20,
    warmup: int | None = None,
    min_sample_s: float = 1e-3,
    max_inner: int = 200,
    budget_s: float = 2.0,
    params: dict[str, float | int | str] | None = None,
) -> Measurement:
    """Time fn(i) on device: warm-up, calibrated batches, `repeats` samples of seconds per call.

    `min_sample_s` sets how long one sample should span at least: calls shorter than that are
    batched (`inner` calls between two events) so event and launch overhead stay out of the
    figure. The number of samples shrinks (to at least 3) when `budget_s` would be exceeded.
    `warmup` calls (default 3 on a GPU, 1 on the CPU) run before anything is timed.
    """
    on_gpu = not device.startswith("cpu")
    timer = timer_for(device)
    if warmup is None:
        # GPU: module load, cuBLAS handle and heuristics settle over the first calls; a CPU
        # call only needs its first-touch allocation out of the way.
        warmup = 3 if on_gpu else 1
    counter = [0]
    for _ in range(max(1, warmup)):
        fn(counter[0])
        counter[0] += 1
    sync(device)
    once = max(timer(fn, 1, counter, device), 1e-9)
    inner = max(1, min(max_inner, math.ceil(min_sample_s / once)))
    per_sample = once * inner
    fit = int(budget_s / per_sample) if per_sample > 0 else repeats
    n = max(3, min(repeats, fit))
    samples = [timer(fn, inner, counter, device) for _ in range(n)]
    extra: dict[str, float | int | str] = {"inner": inner, "warmup": warmup, "device": device}
    if params:
        extra.update(params)
    return Measurement(label=label, unit="s", samples=samples, params=extra)


@dataclass
class Variant:
    """One side of a paired comparison: a label, the call fn(i), and its Measurement params.

    calls: how many of the measured operations one fn call runs (a replayed graph of several);
    samples are divided by it, so they stay the time of one operation.
    """

    label: str
    fn: Callable[[int], object]
    params: dict[str, float | int | str] = field(default_factory=dict)
    calls: int = 1


# Calls one graph of a kernel micro-benchmark holds: enough to rotate through the input sets
# and to make the replay's own launch (~10 us) small against the kernels.
GRAPH_CALLS = 16


def graphed(variant: Variant, device: str, calls: int = GRAPH_CALLS) -> Variant:
    """Capture `calls` consecutive calls of the variant in one CUDA graph; replay it instead.

    Kernel micro-benchmarks at decode shapes run for microseconds, less than the host needs to
    launch some of them (torch._scaled_mm's dispatch alone takes ~10-20 us): timed eagerly,
    they measure the host's launch rate, which moves from run to run with the host's state.
    Serving engines replay decode as CUDA graphs (vLLM, SGLang, TensorRT-LLM), so a replayed
    graph times what the advice is about: the kernels. Off CUDA the variant is returned as is.
    """
    if not device.startswith("cuda"):
        return variant
    import torch

    with torch.cuda.device(torch.device(device)):
        side = torch.cuda.Stream(device=device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            for i in range(3):  # warm-up off the capture (torch.cuda.graphs docs)
                variant.fn(i)
        torch.cuda.current_stream(device).wait_stream(side)
        torch.cuda.synchronize(device)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for i in range(calls):
                variant.fn(i)
        torch.cuda.synchronize(device)

    def replay(_i: int) -> object:
        graph.replay()
        return graph

    return Variant(variant.label, replay, {**variant.params, "timed_as": f"CUDA graph of {calls}"},
                   calls=variant.calls * calls)


@dataclass
class Interleaved:
    """The outcome of `interleaved`: one Measurement per variant, samples in round order.

    Sample i of every variant belongs to round i, so ratio(label) pairs them up again; the
    measurements are all a report keeps, and the ratios can be recomputed from them.
    """

    baseline: Measurement
    variants: dict[str, Measurement]
    rounds: int
    stopped: str  # "narrow", "budget" or "max rounds"

    @property
    def measurements(self) -> list[Measurement]:
        """Baseline first, then the variants, in the order given."""
        return [self.baseline, *self.variants.values()]

    def ratio(self, label: str) -> LogEstimate | None:
        """Baseline time / this variant's time per round, as an estimate (> 1: variant faster)."""
        m = self.variants.get(label)
        if m is None:
            return None
        return ratio_estimate(self.baseline.samples, m.samples)


def _steady_warmup(variants: list[Variant], device: str, counters: list[list[int]],
                   warmup: int, max_s: float) -> int:
    """Run every variant `warmup` times, then timed passes until the pass time is steady.

    Returns the number of passes run. On a CPU one pass is enough (no clocks to ramp).
    """
    for _ in range(max(1, warmup)):
        for v, c in zip(variants, counters, strict=True):
            v.fn(c[0])
            c[0] += 1
    sync(device)
    if device.startswith("cpu"):
        return 1
    timer = timer_for(device)
    started = time.perf_counter()
    previous: float | None = None
    passes = 0
    while time.perf_counter() - started < max_s:
        now = sum(timer(v.fn, 1, c, device) for v, c in zip(variants, counters, strict=True))
        passes += 1
        if previous is not None and abs(now - previous) <= STEADY_TOLERANCE * previous:
            break
        previous = now
    return passes


def interleaved(
    baseline: Variant,
    *others: Variant,
    device: str,
    budget_s: float = 2.0,
    target: float = TARGET_HALFWIDTH,
    min_rounds: int = MIN_ROUNDS,
    max_rounds: int = MAX_ROUNDS,
    warmup: int | None = None,
    min_sample_s: float = 1e-3,
    max_inner: int = 200,
    params: dict[str, float | int | str] | None = None,
) -> Interleaved:
    """Time a baseline and variants interleaved until every ratio's 95% interval is narrow.

    Each round times one sample of every variant (a batch of `inner` calls between two device
    events, calibrated per variant so a sample spans >= min_sample_s), starting with a
    different variant each round. Rounds go on until, after `min_rounds`, the interval of
    baseline / variant is within ±target for every variant, or `budget_s` is spent (never
    fewer than MIN_ROUNDS_FLOOR rounds), or `max_rounds`. The warm-up (budget_s / 5 at most)
    runs each variant `warmup` times (3 on a GPU, 1 on a CPU), then timed passes until steady.
    """
    variants = [baseline, *others]
    on_cpu = device.startswith("cpu")
    warmup = (1 if on_cpu else 3) if warmup is None else warmup
    timer = timer_for(device)
    counters = [[0] for _ in variants]
    started = time.perf_counter()
    passes = _steady_warmup(variants, device, counters, warmup, max_s=budget_s / 5)
    inners = []
    for v, c in zip(variants, counters, strict=True):
        once = max(timer(v.fn, 1, c, device), 1e-9)
        inners.append(max(1, min(max_inner, math.ceil(min_sample_s / once))))
    samples: list[list[float]] = [[] for _ in variants]
    stopped = "max rounds"
    rounds = 0
    while rounds < max_rounds:
        k = len(variants)
        for j in range(k):
            index = (rounds + j) % k
            samples[index].append(timer(variants[index].fn, inners[index], counters[index],
                                        device))
        rounds += 1
        if rounds < MIN_ROUNDS_FLOOR:
            continue
        if rounds >= min_rounds and _narrow(samples, target):
            stopped = "narrow"
            break
        if time.perf_counter() - started >= budget_s:
            stopped = "budget"
            break
    common: dict[str, float | int | str] = {"device": device, "rounds": rounds,
                                            "stopped": stopped, "warmup_passes": passes,
                                            "order": "interleaved, rotating start"}
    if params:
        common.update(params)
    built = [Measurement(label=v.label, unit="s", samples=[x / v.calls for x in s],
                         params={**common, "inner": inner, "role": "baseline" if i == 0
                                 else "variant", **v.params})
             for i, (v, s, inner) in enumerate(zip(variants, samples, inners, strict=True))]
    return Interleaved(baseline=built[0], variants={m.label: m for m in built[1:]},
                       rounds=rounds, stopped=stopped)


def _narrow(samples: list[list[float]], target: float) -> bool:
    """Tell whether every ratio baseline / variant has a 95% interval within ±target."""
    for other in samples[1:]:
        est = ratio_estimate(samples[0], other)
        if est is None or est.relative_halfwidth > target:
            return False
    return True


def paired(a: Variant, b: Variant, *, device: str, budget_s: float = 2.0,
           **kwargs: Any) -> tuple[Measurement, Measurement, LogEstimate | None]:
    """A/B: (measurement of a, measurement of b, estimate of time a / time b)."""
    result = interleaved(a, b, device=device, budget_s=budget_s, **kwargs)
    return result.baseline, result.variants[b.label], result.ratio(b.label)


def combined(estimates: Sequence[LogEstimate | None]) -> LogEstimate | None:
    """Return the geometric mean of several ratios (one per shape) with its combined interval."""
    return geomean_estimate([e for e in estimates if e is not None])


def with_interval(name: str, estimate: LogEstimate | None,
                  out: dict[str, tuple[tuple[float, float] | None, int]]) -> float | None:
    """Return the estimate's value and note its interval under `name` in out (for effects)."""
    if estimate is None:
        return None
    out[name] = (estimate.ci, estimate.n)
    return estimate.value


# A sustained stream: long enough for the power limit to bite (an H200 reaches its 700 W cap
# within tens of ms of back-to-back 8192^3 products), in chunks timed back to back; the first
# quarter of the chunks (the ramp into the cap) is left out of the samples.
SUSTAINED_CHUNKS = 12


def sustained(fn: Callable[[int], object], *, device: str, label: str, per_call_s: float,
              seconds: float, params: dict[str, float | int | str] | None = None) -> Measurement:
    """Time a back-to-back stream of fn(i) lasting about `seconds`: seconds per call per chunk.

    Unlike `bench`, nothing waits between chunks (on a GPU each chunk ends at an event recorded
    in the stream, read once at the end), so the device never idles and settles at the clocks
    it can hold: the sustained rate, next to the burst rate of one call per timing.
    """
    calls = max(1, math.ceil(seconds / SUSTAINED_CHUNKS / max(per_call_s, 1e-9)))
    counter = [0]
    times: list[float] = []
    sync(device)
    if device.startswith("cuda"):
        import torch

        with torch.cuda.device(torch.device(device)):
            events = [torch.cuda.Event(enable_timing=True) for _ in range(SUSTAINED_CHUNKS + 1)]
            events[0].record()
            for chunk in range(SUSTAINED_CHUNKS):
                for _ in range(calls):
                    fn(counter[0])
                    counter[0] += 1
                events[chunk + 1].record()
            events[-1].synchronize()
            times = [events[c].elapsed_time(events[c + 1]) / 1e3 / calls
                     for c in range(SUSTAINED_CHUNKS)]
    else:
        timer = timer_for(device)
        times = [timer(fn, calls, counter, device) for _ in range(SUSTAINED_CHUNKS)]
    kept = times[SUSTAINED_CHUNKS // 4:]
    extra: dict[str, float | int | str] = {"calls_per_chunk": calls, "mode": "sustained",
                                           "chunks_dropped": SUSTAINED_CHUNKS // 4,
                                           "device": device}
    if params:
        extra.update(params)
    return Measurement(label=label, unit="s", samples=kept, params=extra)


def rate(measurement: Measurement, amount: float, unit: str, scale: float = 1e9) -> Measurement:
    """Set measurement.value = amount / median seconds / scale (e.g. bytes -> GB/s with 1e9)."""
    med = measurement.median
    measurement.value = (amount / med / scale) if med else None
    measurement.value_unit = unit
    return measurement


def rate_interval(measurement: Measurement, amount: float,
                  scale: float = 1e9) -> tuple[tuple[float, float], int] | None:
    """Return (95% interval of amount / median time / scale, samples); None under 6 samples.

    The interval is the median's distribution-free one (models.stats.median_interval).
    """
    from hwadvisor.models.stats import median_interval

    found = median_interval(measurement.samples)
    if found is None or found[0] <= 0:
        return None
    low_t, high_t = found
    return (amount / high_t / scale, amount / low_t / scale), len(measurement.samples)


def speedup(baseline: Measurement, new: Measurement) -> float | None:
    """Baseline median time over the new median time (> 1 means the new variant is faster)."""
    if not baseline.median or not new.median:
        return None
    return baseline.median / new.median


def geomean(values: list[float]) -> float | None:
    """Geometric mean of positive values (None when there are none)."""
    vals = [v for v in values if v is not None and v > 0 and math.isfinite(v)]
    if not vals:
        return None
    return math.exp(sum(math.log(v) for v in vals) / len(vals))


class CorrectnessError(RuntimeError):
    """A kernel's output missed its reference by more than the tolerance: its timing is void."""


def check_close(label: str, error: float, tolerance: float) -> float:
    """Return error when it is finite and within tolerance, else raise CorrectnessError."""
    if not math.isfinite(error) or error > tolerance:
        raise CorrectnessError(
            f"{label}: relative error {error:.3g} against the reference exceeds {tolerance:g}"
        )
    return error


def max_error(measurements: list[Measurement]) -> float | None:
    """Return the largest relative error among measurements that carry one."""
    errors = [m.error for m in measurements if m.error is not None]
    return max(errors) if errors else None


def effects(**values: float | None) -> dict[str, float]:
    """Return a trial's effect dict without the figures that could not be measured (never 0)."""
    return {k: float(v) for k, v in values.items() if v is not None and math.isfinite(v)}


def guarded(label: str, measure: Callable[[], Measurement]) -> Measurement:
    """Run one variant; an exception other than a correctness failure skips only this variant.

    Correctness failures propagate (a wrong kernel voids the trial); KeyboardInterrupt is not an
    Exception and propagates too. Out-of-memory frees the cache before the next variant.
    """
    try:
        return measure()
    except CorrectnessError:
        raise
    except Exception as exc:  # each variant is independently guarded by design
        if "OutOfMemory" in type(exc).__name__:
            _empty_cache()
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return Measurement(label=label, skipped=f"{type(exc).__name__}: {message}"[:300])


def _empty_cache() -> None:
    import gc

    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def skipped_note(measurements: list[Measurement]) -> str | None:
    """One line naming the variants that did not run and why (None when all ran)."""
    skipped = [f"{m.label}: {m.skipped}" for m in measurements if m.skipped]
    return "; ".join(skipped) if skipped else None


def ran(measurements: list[Measurement]) -> list[Measurement]:
    """Return the variants that produced samples."""
    return [m for m in measurements if not m.skipped and m.samples]


def variants_result(
    trial_id: str,
    measurements: list[Measurement],
    *,
    ok: bool,
    effect: dict[str, float],
    summary: str,
    intervals: dict[str, tuple[tuple[float, float] | None, int]] | None = None,
    kernel: str | None = None,
) -> TrialResult:
    """Build a hardware trial's result: status from ok, skipped variants as reason, max error."""
    return TrialResult(
        id=trial_id,
        status="ok" if ok else "error",
        reason=skipped_note(measurements),
        measurements=measurements,
        effects=named_effects(effect, intervals),
        summary=summary,
        kernel=kernel,
        max_error=max_error(measurements),
    )
