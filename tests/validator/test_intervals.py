"""The statistics that decide: intervals on synthetic samples, the decision rule, the paired
timing helper, the new trials in quick mode, and the MPS / ROCm paths with fakes."""

from __future__ import annotations

import math
import random

import pytest

from hwadvisor.models import Prediction, Recommendation, TrialResult
from hwadvisor.models.stats import (
    geomean_estimate,
    log_estimate,
    median_interval,
    quotient_estimate,
    ratio_estimate,
    t_975,
)
from hwadvisor.models.trial import Effect
from hwadvisor.validator.verdicts import decide, verdict


def _samples(center: float, noise: float, n: int, seed: int) -> list[float]:
    """Multiplicative noise around center (what GPU timings look like)."""
    rng = random.Random(seed)
    return [center * math.exp(rng.gauss(0.0, noise)) for _ in range(n)]


def _paired(speedup: float, noise: float, n: int, seed: int) -> tuple[list[float], list[float]]:
    """Times of A (1 ms) and B (1 ms / speedup), each with its own noise."""
    a = _samples(1e-3, noise, n, seed)
    b = _samples(1e-3 / speedup, noise, n, seed + 1)
    return a, b


# --- intervals ------------------------------------------------------------------------------


def test_t_quantiles_match_the_table_and_the_normal_limit():
    assert t_975(1) == pytest.approx(12.706)
    assert t_975(10) == pytest.approx(2.228)
    assert t_975(30) == pytest.approx(2.042)
    assert t_975(120) == pytest.approx(1.980, abs=1e-3)
    assert t_975(10**6) == pytest.approx(1.95996, abs=1e-4)
    assert t_975(10.5) == pytest.approx((2.228 + 2.201) / 2, abs=0.01)
    assert t_975(0) == math.inf


def test_ratio_interval_covers_the_true_ratio():
    """95% intervals from 20 noisy pairs hold the true ratio in about 95 of 100 draws."""
    hits = 0
    for seed in range(200):
        a, b = _paired(1.6, 0.05, 20, seed * 7)
        ci = ratio_estimate(a, b).ci
        hits += ci[0] <= 1.6 <= ci[1]
    assert 0.90 <= hits / 200 <= 0.99


def test_interval_narrows_with_more_pairs_and_needs_two():
    a, b = _paired(1.3, 0.05, 100, 3)
    few, many = ratio_estimate(a[:6], b[:6]), ratio_estimate(a, b)
    assert many.relative_halfwidth < few.relative_halfwidth
    assert ratio_estimate(a[:1], b[:1]).ci is None
    assert log_estimate([]) is None


def test_geomean_and_quotient_combine_intervals():
    parts = [ratio_estimate(*_paired(s, 0.03, 20, i)) for i, s in enumerate((1.2, 1.5, 1.8))]
    g = geomean_estimate(parts)
    assert g.value == pytest.approx((parts[0].value * parts[1].value * parts[2].value) ** (1 / 3))
    assert g.ci[0] < g.value < g.ci[1]
    assert g.n == sum(p.n for p in parts)
    q = quotient_estimate(parts[2], parts[0])
    assert q.value == pytest.approx(parts[2].value / parts[0].value)
    assert q.halfwidth > max(parts[0].halfwidth, parts[2].halfwidth)
    inv = parts[0].inverse()
    assert inv.value == pytest.approx(1 / parts[0].value)
    assert inv.ci[0] == pytest.approx(1 / parts[0].ci[1])


def test_median_interval_is_distribution_free():
    xs = list(range(1, 21))
    low, high = median_interval([float(x) for x in xs])
    assert (low, high) == (6.0, 15.0)  # n = 20: the 6th and 15th order statistics (95.9%)
    assert median_interval([1.0, 2.0, 3.0]) is None
    assert median_interval([float(x) for x in range(6)]) == (0.0, 5.0)


# --- the decision rule on synthetic sample sets -----------------------------------------------


@pytest.mark.parametrize("better", ["higher", "lower"])
def test_decide_on_interval_against_threshold(better):
    t = 1.05 if better == "higher" else 0.95
    win = [1.2, 1.3] if better == "higher" else [0.7, 0.8]
    loss = [0.8, 0.9] if better == "higher" else [1.1, 1.2]
    assert decide(win, t, better) == "confirmed"
    assert decide(loss, t, better) == "refuted"
    assert decide([0.9, 1.2], t, better) == "inconclusive"
    assert decide(None, t, better) == "inconclusive"
    assert decide([t, 1.5] if better == "higher" else [0.5, t], t, better) == "inconclusive"


def _rec(metric: str = "estimate.times.decode_step_s") -> Recommendation:
    return Recommendation(id="cuda-graphs", goal="inference-latency", title="t", why="w",
                          predicted=Prediction(metric=metric, factor=0.6), trial="cuda-graphs")


def _result(a: list[float], b: list[float]) -> TrialResult:
    est = ratio_estimate(a, b)
    return TrialResult(id="cuda-graphs", status="ok",
                       effects=[Effect.named("speedup", est.value, ci=est.ci, runs=est.n)])


def test_clear_win_is_confirmed_with_its_interval():
    val = verdict(_rec(), _result(*_paired(1.6, 0.05, 20, 11)))
    assert val.status == "confirmed"
    assert val.runs == 20 and val.ci is not None
    # in the prediction's after/before space: a time factor, its interval and threshold flipped
    assert val.ci[0] < val.measured_factor < val.ci[1] < val.threshold
    assert val.threshold == pytest.approx(1 / 1.02)  # cuda-graphs' min_gain 0.02


def test_clear_loss_is_refuted():
    val = verdict(_rec(), _result(*_paired(0.7, 0.05, 20, 12)))
    assert val.status == "refuted" and val.ci[0] > val.threshold


def test_straddle_is_inconclusive():
    """A ~2% gain under 15% noise: the interval straddles the 2% threshold."""
    val = verdict(_rec(), _result(*_paired(1.02, 0.15, 8, 13)))
    assert val.status == "inconclusive"
    assert val.ci[0] < val.threshold < val.ci[1]
    assert "straddles" in val.detail


def test_the_kernel_note_names_what_was_measured_and_what_is_assumed():
    rec = Recommendation(id="int4-weights", goal="inference-latency", title="t", why="w",
                         predicted=Prediction(metric="estimate.times.decode_step_s", factor=0.6),
                         trial="int4-weight-only")
    est = ratio_estimate(*_paired(1.6, 0.03, 20, 5))
    result = TrialResult(id="int4-weight-only", status="ok", kernel="torch _weight_int4pack_mm",
                         effects=[Effect.named("speedup_b1", est.value, ci=est.ci, runs=20)])
    val = verdict(rec, result, batch=1)
    assert val.status == "confirmed"
    assert ("measured with torch _weight_int4pack_mm; the advice assumes the engine's 4-bit "
            "kernel (Marlin-class" in val.detail)


# --- the paired timing helper -----------------------------------------------------------------


def test_interleaved_rotates_and_stops_when_narrow():
    from hwadvisor.trials.kit.timing import Variant, interleaved

    order: list[str] = []

    def work(name: str, n: int):
        def fn(_i: int) -> None:
            if not order or order[-1] != name:
                order.append(name)
            sum(range(n))
        return fn

    out = interleaved(Variant("a", work("a", 4000)), Variant("b", work("b", 2000)),
                      device="cpu", budget_s=2.0, target=0.2)
    assert out.stopped in ("narrow", "budget")
    assert len(out.baseline.samples) == len(out.variants["b"].samples) == out.rounds
    assert out.rounds >= 3
    est = out.ratio("b")
    assert est is not None and est.value > 1.2  # b does half the work
    # the start rotates: after the calibration, rounds alternate ab, ba, ab ...
    assert "".join(order[-6:]) in ("ababab", "bababa")
    assert out.baseline.params["role"] == "baseline" and out.variants["b"].params["inner"] >= 1


def test_interleaved_keeps_to_its_budget():
    import time

    from hwadvisor.trials.kit.timing import Variant, interleaved

    slow = Variant("slow", lambda _i: time.sleep(0.02))
    started = time.perf_counter()
    out = interleaved(slow, Variant("slow too", lambda _i: time.sleep(0.02)), device="cpu",
                      budget_s=0.1, target=1e-6, min_sample_s=1e-4)
    assert time.perf_counter() - started < 1.0
    assert out.stopped == "budget" and out.rounds == 3  # MIN_ROUNDS_FLOOR


# --- the new trials, for real, quick on the CPU -----------------------------------------------

torch = pytest.importorskip("torch")

NEW_TRIALS = ("fused-adamw", "continuous-batching", "speculative-verify", "prefix-reuse")


@pytest.fixture(scope="module")
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize("trial_id", NEW_TRIALS)
def test_new_trials_run_quick_on_cpu(trial_id, _one_thread):
    from hwadvisor.models import Workload
    from hwadvisor.trials.base import TrialContext
    from hwadvisor.trials.registry import get_trial

    ctx = TrialContext(workload=Workload(model="llama-3-8b", batch=4), quick=True, budget_s=1.0)
    r = get_trial(trial_id).run(ctx)
    assert r.status == "ok", r.reason
    assert r.max_error is not None and r.max_error < 1e-4
    key = "throughput_speedup" if trial_id == "continuous-batching" else "speedup"
    effect = r.effect_of(key)
    assert effect is not None and effect.ci is not None and effect.runs >= 3
    assert effect.ci[0] <= effect.value <= effect.ci[1]
    assert (r.wall_s or 0) < 10


def test_cached_forward_matches_the_full_forward():
    from hwadvisor.trials import serving
    from hwadvisor.trials.kit import blocks, common

    shape = common.scaled_shape(None, max_heads=4, layers=2, batch=2, seq_len=24,
                                quick_head_dim=8)
    stack = blocks.build_stack(shape, "cpu", torch.float64, seed=3).eval()
    for new in (1, 4, 12):
        err = serving.check_cached_forward(stack, shape, "cpu", torch.float64, 2, 24, new, 9)
        assert err < 1e-10


def test_kv_cache_speed_part_is_left_out_without_fp8():
    from hwadvisor.trials import kv_quant
    from hwadvisor.trials.base import TrialContext

    r = kv_quant.KvCacheQuantizationTrial().run(TrialContext(quick=True, budget_s=1.0))
    assert r.status == "ok"
    assert "speedup" not in r.effect and "needs a GPU with FP8" in (r.summary or "")
    assert r.effect_of("memory_factor").ci == [r.effect["memory_factor"]] * 2


def test_kv_rule_for_latency_without_speed_is_unsupported():
    rec = Recommendation(id="kv-cache-quantization", goal="inference-latency", title="t",
                         why="w", predicted=Prediction(metric="estimate.times.decode_step_s",
                                                       factor=0.9),
                         trial="kv-cache-quantization")
    counted = TrialResult(id="kv-cache-quantization", status="ok",
                          effects=[Effect.named("memory_factor", 0.5, ci=[0.5, 0.5], runs=1)])
    assert verdict(rec, counted).status == "unsupported"
    est = ratio_estimate(*_paired(0.5, 0.02, 20, 1))
    timed = TrialResult(id="kv-cache-quantization", status="ok", kernel="torch SDPA dequant",
                        effects=[Effect.named("memory_factor", 0.5, ci=[0.5, 0.5], runs=1),
                                 Effect.named("speedup", est.value, ci=est.ci, runs=20)])
    val = verdict(rec, timed)
    assert val.status == "refuted" and "fused FP8-KV" in val.detail


def test_every_recommendation_gets_a_decision_under_validate(_one_thread, monkeypatch):
    """recommend --validate (quick, CPU): nothing stays pending; decided ones carry ci."""
    from hwadvisor import pipeline
    from hwadvisor.validator import runner
    from hwadvisor.workload import WorkloadRequest

    real = runner.context_for

    def short(report, quick=False, nvls=False):
        ctx = real(report, quick, nvls)
        ctx.budget_s = 0.5
        return ctx

    monkeypatch.setattr(runner, "context_for", short)
    report = pipeline.recommend_report("inference-latency", "h200-sxm",
                                       WorkloadRequest(model="llama-3.2-1b", batch=4))
    report = pipeline.validate_recommendations(report, quick=True)
    assert report.recommendations
    for rec in report.recommendations:
        v = rec.validation
        assert v.status in ("confirmed", "refuted", "inconclusive", "unsupported", "error"), rec.id
        if v.status in ("confirmed", "refuted"):
            assert v.ci is not None and v.threshold is not None and v.runs, rec.id


# --- MPS and ROCm, with fakes -----------------------------------------------------------------


def test_mps_device_sync_and_events(monkeypatch):
    from hwadvisor.trials import base
    from hwadvisor.trials.base import TrialContext
    from hwadvisor.trials.kit import timing

    monkeypatch.setattr(base, "cuda_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    ctx = TrialContext()
    assert base.torch_device(ctx, mps=True) == "mps"
    assert base.torch_device(ctx) == "cpu"  # trials without an MPS path stay on the CPU
    synced: list[str] = []
    monkeypatch.setattr(torch.mps, "synchronize", lambda: synced.append("sync"))

    class FakeEvent:
        clock = 0.0

        def __init__(self, enable_timing: bool = False) -> None:
            self.at = 0.0

        def record(self) -> None:
            FakeEvent.clock += 2.0  # ms
            self.at = FakeEvent.clock

        def synchronize(self) -> None:
            synced.append("event")

        def elapsed_time(self, other: FakeEvent) -> float:
            return other.at - self.at

    monkeypatch.setattr(torch.mps, "Event", FakeEvent, raising=False)
    timing.sync("mps")
    assert synced == ["sync"]
    seconds = timing._time_mps(lambda _i: None, 4, [0], "mps")
    assert seconds == pytest.approx(2.0 / 1e3 / 4)
    assert synced[-1] == "event"
    assert timing.timer_for("mps") is timing._time_mps
    from hwadvisor.trials.kit import common

    assert common.compute_dtype("mps") == "fp16"


def test_rocm_fp8_and_capability(monkeypatch):
    from hwadvisor.trials import base
    from hwadvisor.trials.kit import fp8_ops

    class Props:
        gcnArchName = "gfx942:sramecc+:xnack-"

    monkeypatch.setattr(torch.version, "hip", "6.2.0", raising=False)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda _d: Props())
    assert base.rocm_build()
    assert base.compute_capability("cuda:0") is None  # "9.4" is no NVIDIA capability
    assert base.rocm_arch("cuda:0") == "gfx942"
    assert base.has_fp8("cuda:0")
    assert fp8_ops.fp8_dtype("cuda:0") == torch.float8_e4m3fnuz
    Props.gcnArchName = "gfx90a:sramecc+:xnack-"  # MI250: no FP8
    assert not base.has_fp8("cuda:0")
    q, scale = fp8_ops.quantize_fp8(torch.randn(16, 32), rowwise=False,
                                    dtype=torch.float8_e4m3fnuz)
    assert q.dtype == torch.float8_e4m3fnuz and float(q.float().abs().max()) <= 240.0


def test_runner_reads_no_nvml_on_rocm(monkeypatch):
    from hwadvisor.models import Device
    from hwadvisor.trials.base import TrialContext
    from hwadvisor.trials.kit import environment
    from hwadvisor.validator import runner

    amd = Device(index=0, vendor="amd", device_class="datacenter-gpu", name="MI300X",
                 source="profile")
    assert runner.gpu_state(TrialContext(device=amd)) == (None, None)
    monkeypatch.setattr(environment, "is_rocm", lambda: True)
    monkeypatch.setattr(environment, "device_for", lambda _ctx: "cuda:0")
    assert runner.gpu_state(TrialContext()) == (None, None)


def test_runner_records_clocks_and_throttle_reasons_before_and_after(monkeypatch):
    from hwadvisor.probe import nvml
    from hwadvisor.trials.base import TrialContext
    from hwadvisor.trials.kit import environment
    from hwadvisor.validator import runner

    readings = iter([(1980, []), (1755, ["sw_power_cap"])])
    state = {}

    def clocks(_index):
        state["now"] = next(readings)
        return {"sm_mhz": state["now"][0], "memory_mhz": 3201}

    monkeypatch.setattr(nvml, "current_clocks", clocks)
    monkeypatch.setattr(nvml, "throttle_reasons", lambda _i: state["now"][1])
    monkeypatch.setattr(nvml, "gpu_processes", lambda _i: [])
    monkeypatch.setattr(environment, "device_for", lambda _ctx: "cuda:0")
    monkeypatch.setattr(environment, "is_rocm", lambda: False)
    monkeypatch.setattr(environment, "device_name", lambda _d, _c: "NVIDIA H200")
    monkeypatch.setattr(environment, "torch_version", lambda: "2.13")

    class Trial:
        id, title, needs = "t", "t", "n"

        def unsupported_reason(self, ctx):
            return None

        def run(self, ctx):
            est = ratio_estimate(*_paired(1.6, 0.02, 20, 2))
            return TrialResult(id="t", status="ok", effects=[
                Effect.named("speedup", est.value, ci=est.ci, runs=20)])

    result = runner.run_one("t", TrialContext(), loader=lambda _id: Trial())
    env = result.environment
    assert (env.sm_clock_mhz_before, env.throttle_reasons_before) == (1980, [])
    assert (env.sm_clock_mhz, env.throttle_reasons) == (1755, ["sw_power_cap"])
    val = verdict(_rec(), result.model_copy(update={"id": "cuda-graphs"}))
    assert "clocks were limited during the trial (sw_power_cap)" in val.detail
