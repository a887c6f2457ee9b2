"""Verdicts for advice whose trial measures an input (bus or PCIe bandwidth), not the effect."""

from hwadvisor.models import Effect, TrialResult
from hwadvisor.pipeline import recommend_report
from hwadvisor.validator.inputs import collectives_verdict, repredict, transfer_verdict
from hwadvisor.workload import WorkloadRequest


def _training_report(gpus: int = 2):
    # A model that fits, so sharding's prediction is of throughput, which bandwidth moves.
    return recommend_report(
        "training-throughput", "h200-sxm",
        WorkloadRequest(model="llama-3.2-1b", phase="training", gpus=gpus, engine="hf"),
    )


def _rec(report, rule_id):
    return next(r for r in report.recommendations if r.id == rule_id)


def _collectives(busbw: float, spread: float = 0.02) -> TrialResult:
    ci = [busbw * (1 - spread), busbw * (1 + spread)]
    return TrialResult(id="collectives", status="ok",
                       effects=[Effect.named("busbw_gbps", busbw, ci=ci, runs=20)])


def _transfer(pinned: float) -> TrialResult:
    return TrialResult(id="host-transfer", status="ok", effects=[
        Effect.named("pinned_gbps", pinned, ci=[pinned * 0.98, pinned * 1.02], runs=15)])


def test_fsdp_confirmed_with_a_healthy_measured_bus_bandwidth():
    report = _training_report()
    rec = _rec(report, "fsdp2-zero3")
    verdict = collectives_verdict(report, rec, _collectives(330.0), repredict)
    assert verdict.status == "confirmed"
    assert verdict.measured_factor is not None and verdict.prediction_error is not None
    assert verdict.ci is not None and verdict.ci[0] <= verdict.measured_factor <= verdict.ci[1]
    assert "330 GB/s" in verdict.detail


def test_repredict_moves_with_the_measured_bandwidth():
    report = _training_report()
    rec = _rec(report, "fsdp2-zero3")
    assert rec.predicted.metric == "estimate.tokens_per_s"
    assert repredict(report, rec, 400.0) is not None
    # Over a starved link sharding no longer pays: the rule stops firing and the advice is refuted.
    assert repredict(report, rec, 1.0) is None
    verdict = collectives_verdict(report, rec, _collectives(1.0), repredict)
    assert verdict.status == "refuted"


def test_offload_confirmed_or_refuted_by_pinned_bandwidth():
    report = recommend_report("memory-footprint", "rtx-4090", WorkloadRequest(model="llama-3-70b"))
    rec = _rec(report, "cpu-offload")
    fast = _transfer(24.0)
    slow = _transfer(3.0)
    assert transfer_verdict(report, rec, fast).status == "confirmed"
    refuted = transfer_verdict(report, rec, slow)
    assert refuted.status == "refuted" and refuted.holds_where
    assert refuted.ci is not None and refuted.threshold == 0.8


def test_a_bandwidth_interval_straddling_the_line_is_inconclusive():
    report = _training_report()
    rec = _rec(report, "fsdp2-zero3")
    # a point estimate without an interval never decides
    point = TrialResult(id="collectives", status="ok", effect={"busbw_gbps": 330.0})
    assert collectives_verdict(report, rec, point, repredict).status == "inconclusive"
    # an interval from a starved link up to a healthy one says neither
    wide = _collectives(150.0, spread=0.99)
    assert collectives_verdict(report, rec, wide, repredict).status == "inconclusive"
