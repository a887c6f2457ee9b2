"""The validator's runner, verdicts and CLI (validate, probe --measure), with fake trials."""

from __future__ import annotations

import json

import pytest
import report_factory as factory
from typer.testing import CliRunner

from hwadvisor.cli.app import app
from hwadvisor.models import (
    Effect,
    Measurement,
    Prediction,
    Recommendation,
    Report,
    TrialResult,
    Workload,
)
from hwadvisor.trials import registry
from hwadvisor.trials.base import TrialContext
from hwadvisor.validator import runner as v

runner = CliRunner()


class OutOfMemoryError(RuntimeError):
    """Named like torch.cuda.OutOfMemoryError: the runner recognises it by name."""


class FakeTrial:
    """A trial whose run() does what the test asks (effects with a ±1% interval)."""

    def __init__(self, trial_id: str, action: str = "ok", effect: dict[str, float] | None = None,
                 unsupported: str | None = None) -> None:
        self.id = trial_id
        self.title = f"fake {trial_id}"
        self.needs = "nothing"
        self.action = action
        self.effect = effect or {"speedup": 2.0}
        self.unsupported = unsupported
        self.runs = 0

    def unsupported_reason(self, ctx: TrialContext) -> str | None:
        return self.unsupported

    def run(self, ctx: TrialContext) -> TrialResult:
        self.runs += 1
        if self.action == "oom":
            raise OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        if self.action == "raise":
            raise ValueError("kernel exploded")
        if self.action == "ctrl-c":
            raise KeyboardInterrupt
        return TrialResult(id=self.id, status="ok", effects=[
            Effect.named(k, val, ci=[val * 0.99, val * 1.01], runs=10)
            for k, val in self.effect.items()],
            measurements=[Measurement(label="x", samples=[1.0, 1.0, 1.0])])


def loader_for(trials: dict[str, FakeTrial]):
    return lambda trial_id: trials[trial_id]


# --- runner ------------------------------------------------------------------------------


def test_oom_trial_is_error_and_the_rest_go_on():
    trials = {"a": FakeTrial("a", "oom"), "b": FakeTrial("b"), "c": FakeTrial("c", "raise")}
    results, interrupted = v.run_trials(["a", "b", "c"], TrialContext(), None, loader_for(trials))
    assert not interrupted
    assert [r.status for r in results] == ["error", "ok", "error"]
    assert results[0].reason.startswith("out of device memory: OutOfMemoryError")
    assert "kernel exploded" in results[2].reason
    assert trials["b"].runs == 1
    assert all(r.wall_s is not None for r in results)


def test_ctrl_c_returns_partial_results():
    trials = {"a": FakeTrial("a"), "b": FakeTrial("b", "ctrl-c"), "c": FakeTrial("c")}
    results, interrupted = v.run_trials(["a", "b", "c"], TrialContext(), None, loader_for(trials))
    assert interrupted
    assert [(r.id, r.status) for r in results] == [("a", "ok"), ("b", "interrupted")]
    assert trials["c"].runs == 0


def test_unsupported_is_checked_before_run():
    trial = FakeTrial("u", unsupported="needs a GPU")
    told = []
    results, _ = v.run_trials(["u"], TrialContext(), lambda *a: told.append(a),
                              loader_for({"u": trial}))
    assert results[0].status == "unsupported" and results[0].reason == "needs a GPU"
    assert trial.runs == 0
    assert told == [("u", 0, 1), ("", 1, 1)]  # progress: before the trial, then done


def test_import_failure_of_a_trial_module_is_an_error():
    def loader(trial_id):
        raise ImportError("No module named 'hwadvisor.trials.missing'")

    results, _ = v.run_trials(["m"], TrialContext(), None, loader)
    assert results[0].status == "error" and "ImportError" in results[0].reason


# --- verdicts ------------------------------------------------------------------------------


def rec(rec_id: str, trial: str | None, metric: str, factor: float | None) -> Recommendation:
    return Recommendation(id=rec_id, goal="inference-latency", title=rec_id, why="test",
                          predicted=Prediction(metric=metric, factor=factor), trial=trial)


def ok(trial_id: str, **effect: float) -> TrialResult:
    """A result whose effects carry a tight interval (±1%): the decision follows the value."""
    return TrialResult(id=trial_id, status="ok", effects=[
        Effect.named(k, v, ci=[v * 0.99, v * 1.01], runs=20) for k, v in effect.items()])


def point(trial_id: str, **effect: float) -> TrialResult:
    """A result with point values only (no interval)."""
    return TrialResult(id=trial_id, status="ok", effect=effect)


def test_confirmed_with_prediction_error_in_time_space():
    r = rec("cuda-graphs", "cuda-graphs", "estimate.times.decode_step_s", 0.5)
    val = v.verdict(r, ok("cuda-graphs", speedup=1.6))
    assert val.status == "confirmed"
    assert val.measured_factor == pytest.approx(1 / 1.6)
    assert val.prediction_error == pytest.approx((1 / 1.6 - 0.5) / 0.5)


def test_refuted_when_no_gain():
    r = rec("torch-compile", "torch-compile", "estimate.times.train_step_s", 0.8)
    val = v.verdict(r, ok("torch-compile", speedup=1.01))
    assert val.status == "refuted"
    assert val.prediction_error == pytest.approx((1 / 1.01 - 0.8) / 0.8)
    assert v.verdict(r, ok("torch-compile", speedup=0.7)).status == "refuted"


def test_a_speedup_within_the_timing_noise_is_inconclusive():
    """The FP8 decode GEMM of 2026-11-30 (0.84x to 1.31x across runs): a wide interval decides
    nothing, where the old point rule called it either way."""
    r = rec("fp8-weights", "fp8-gemm", "estimate.times.decode_step_s", 0.8)
    tight = TrialResult(id="fp8-gemm", status="ok", effects=[
        Effect.named("decode_speedup", 1.12, ci=[1.09, 1.15], runs=30)])
    wide = TrialResult(id="fp8-gemm", status="ok", effects=[
        Effect.named("decode_speedup", 1.12, ci=[0.84, 1.31], runs=8)],
        measurements=[Measurement(label="bf16", samples=[0.8, 1.0, 1.2, 0.85, 1.15])])
    assert v.verdict(r, tight).status == "confirmed"
    judged = v.verdict(r, wide)
    assert judged.status == "inconclusive"
    assert judged.ci == pytest.approx([1 / 1.31, 1 / 0.84])
    assert judged.threshold == pytest.approx(1 / 1.05)  # fp8-weights' min_gain 0.05
    assert "straddles" in judged.detail and "noisy" in judged.detail
    assert v.verdict(r, point("fp8-gemm", decode_speedup=1.5)).status == "inconclusive"


@pytest.mark.parametrize("rule,metric,predicted,effect,error", [
    # a rate metric takes the speedup as it is
    ("torch-compile", "estimate.tokens_per_s", 1.25, {"speedup": 1.5}, 0.2),
    ("kv-cache-quantization", "estimate.memory.kv_cache_bytes", 0.5, {"memory_factor": 0.52},
     0.04),
])
def test_measured_factor_in_the_predictions_terms(rule, metric, predicted, effect, error):
    r = rec(rule, rule, metric, predicted)
    val = v.verdict(r, ok(rule, **effect))
    assert val.status == "confirmed"
    assert val.measured_factor == pytest.approx(next(iter(effect.values())))
    assert val.prediction_error == pytest.approx(error)


def test_memory_factor_of_one_refutes():
    r = rec("kv-cache-quantization", "kv-cache-quantization", "estimate.memory.kv_cache_bytes", 0.5)
    assert v.verdict(r, ok("kv-cache-quantization", memory_factor=1.0)).status == "refuted"


def test_int4_narrowed_by_batch():
    effect = {"speedup_b1": 2.2, "speedup_b4": 1.9, "speedup_b16": 1.0, "speedup_b64": 0.6}
    r = rec("int4-weights", "int4-weight-only", "estimate.times.decode_step_s", 0.4)
    at_1 = v.verdict(r, ok("int4-weight-only", **effect), batch=1)
    assert at_1.status == "confirmed" and at_1.holds_where == "batch <= 4"
    assert at_1.measured_factor == pytest.approx(1 / 2.2)
    at_64 = v.verdict(r, ok("int4-weight-only", **effect), batch=48)  # nearest measured: 64
    assert at_64.status == "refuted" and at_64.holds_where == "batch <= 4"
    assert "64" in (at_64.detail or "")


def test_holds_everywhere_has_no_narrowing():
    effect = {"speedup_b1": 2.2, "speedup_b4": 1.9, "speedup_b16": 1.5, "speedup_b64": 1.2}
    r = rec("int4-weights", "int4-weight-only", "estimate.times.decode_step_s", 0.4)
    assert v.verdict(r, ok("int4-weight-only", **effect), batch=16).holds_where is None


def test_fp8_phase_narrowing():
    r = rec("fp8-weights", "fp8-gemm", "estimate.times.decode_step_s", 0.6)
    val = v.verdict(r, ok("fp8-gemm", prefill_speedup=1.7, decode_speedup=0.99, speedup=0.99))
    assert val.status == "refuted" and val.holds_where == "prefill only"
    train = rec("fp8-training", "fp8-gemm", "estimate.times.train_step_s", 0.7)
    assert v.verdict(train, ok("fp8-gemm", prefill_speedup=1.7, decode_speedup=0.99)).status \
        == "confirmed"


def test_bytes_prediction_with_speed_trial_has_no_prediction_error():
    r = rec("int4-weights", "int4-weight-only", "estimate.memory.weights_bytes", 0.3)
    val = v.verdict(r, ok("int4-weight-only", speedup_b1=2.0), batch=1)
    assert val.status == "confirmed" and val.prediction_error is None
    assert val.measured_factor == pytest.approx(2.0)


def test_ratio_effect_bf16_over_tf32():
    r = rec("bf16-mixed-precision", "matmul-peak", "estimate.times.train_step_s", 0.5)
    val = v.verdict(r, ok("matmul-peak", bf16_tflops=700.0, tf32_tflops=350.0))
    assert val.status == "confirmed" and val.measured_factor == pytest.approx(0.5)
    assert val.prediction_error == pytest.approx(0.0)


def test_unsupported_error_info_and_missing_effect():
    r = rec("cuda-graphs", "cuda-graphs", "estimate.times.decode_step_s", 0.5)
    unsupported = TrialResult(id="cuda-graphs", status="unsupported", reason="no CUDA")
    assert v.verdict(r, unsupported).status == "unsupported"
    assert "no CUDA" in v.verdict(r, unsupported).detail
    failed = TrialResult(id="cuda-graphs", status="error", reason="boom")
    assert v.verdict(r, failed).status == "error"
    assert v.verdict(r, ok("cuda-graphs", other=1.0)).status == "error"
    assert v.verdict(r, None).status == "pending"
    info = rec("fsdp2-zero3", "collectives", "estimate.tokens_per_s", 1.3)
    val = v.verdict(info, ok("collectives", busbw_gbps=400.0))
    assert val.status == "pending" and "no verdict" in val.detail
    # a rule no trial measures is unsupported, not pending
    none = rec("sliding-window-or-mla", None, "estimate.memory.kv_cache_bytes", 0.5)
    assert v.verdict(none, None).status == "unsupported"


def test_verdicts_for_runs_each_trial_once(monkeypatch):
    fake = FakeTrial("cuda-graphs", effect={"speedup": 1.5})
    monkeypatch.setattr(v, "get_trial", loader_for({"cuda-graphs": fake}))
    monkeypatch.setattr(v.environment, "cuda_device_count", lambda: 1)  # as on the H200 host
    report = factory.probe_report()
    report.workload = Workload(model="llama-3-8b")
    report.recommendations = [
        rec("cuda-graphs", "cuda-graphs", "estimate.times.decode_step_s", 0.5),
        rec("cuda-graphs-b", "cuda-graphs", "estimate.times.decode_step_s", 0.8),
        rec("sliding-window-or-mla", None, "estimate.memory.kv_cache_bytes", 0.5),
    ]
    found = v.verdicts_for(report, progress=None)
    assert fake.runs == 1
    assert [r.id for r in found.trials] == ["cuda-graphs"]
    assert [x.status for x in found.recommendations] == ["confirmed", "confirmed", "unsupported"]
    assert report.trials == []  # the validator reads the report; the pipeline fills it
    assert [x.validation.status for x in report.recommendations] == ["pending"] * 3


def test_measured_from_results():
    results = [ok("memory-bandwidth", copy_gbps=4200.0, triad_gbps=4300.0),
               ok("matmul-peak", bf16_tflops=750.0, fp8_tflops=1300.0)]
    m = v.measured_from(results)
    assert m is not None and m.memory_bandwidth_gbps == 4200.0
    assert m.matmul_tflops == {"bf16": 750.0, "fp8": 1300.0}
    assert m.trial_ids == ["memory-bandwidth", "matmul-peak"]
    assert v.measured_from([TrialResult(id="memory-bandwidth", status="error")]) is None


def test_busy_note_names_processes():
    r = ok("x", speedup=1.0)
    r.environment.other_processes = ["123 python (4.0 GiB)"]
    assert "123 python" in v.busy_note([r])
    assert v.busy_note([ok("x")]) is None


# --- CLI -----------------------------------------------------------------------------------


@pytest.fixture
def fake_registry(monkeypatch):
    trials = {"fake-ok": FakeTrial("fake-ok"), "fake-oom": FakeTrial("fake-oom", "oom"),
              "fake-unsupported": FakeTrial("fake-unsupported", unsupported="needs a GPU"),
              "fake-ctrl-c": FakeTrial("fake-ctrl-c", "ctrl-c"),
              "memory-bandwidth": FakeTrial("memory-bandwidth",
                                            effect={"copy_gbps": 100.0, "triad_gbps": 110.0}),
              "matmul-peak": FakeTrial("matmul-peak", effect={"fp32_tflops": 1.5})}
    for trial_id in trials:
        monkeypatch.setitem(registry.TRIALS, trial_id, registry.Entry("fake:Fake"))
    monkeypatch.setattr(v, "get_trial", loader_for(trials))
    return trials


def _json(result) -> dict:
    return json.loads(result.stdout)


def test_cli_unknown_trial_exits_2_with_valid_ids():
    result = runner.invoke(app, ["validate", "--trial", "nope", "--json"])
    assert result.exit_code == 2
    assert "memory-bandwidth" in result.stderr


def test_cli_ok_and_unsupported_exit_0(fake_registry):
    result = runner.invoke(app, ["validate", "-t", "fake-ok", "-t", "fake-unsupported", "--json",
                                 "--model", "llama-3.2-1b", "--batch", "4"])
    assert result.exit_code == 0, result.stderr
    data = _json(result)
    report = Report.model_validate(data)
    assert report.kind == "validate" and report.interrupted is False
    assert report.workload is not None and report.workload.batch == 4
    assert [(t.id, t.status) for t in report.trials] == [("fake-ok", "ok"),
                                                          ("fake-unsupported", "unsupported")]


def test_cli_error_exits_4_and_still_writes_report(fake_registry, tmp_path):
    out = tmp_path / "v.json"
    result = runner.invoke(app, ["validate", "-t", "fake-oom", "-t", "fake-ok", "--output",
                                 str(out)])
    assert result.exit_code == 4
    report = Report.model_validate_json(out.read_text())
    assert [t.status for t in report.trials] == ["error", "ok"]


def test_cli_ctrl_c_writes_partial_report(fake_registry, tmp_path):
    out = tmp_path / "partial.json"
    result = runner.invoke(app, ["validate", "-t", "fake-ok", "-t", "fake-ctrl-c", "-t",
                                 "fake-unsupported", "--output", str(out), "--json"])
    assert result.exit_code == 130
    report = Report.model_validate_json(out.read_text())
    assert report.interrupted is True
    assert [(t.id, t.status) for t in report.trials] == [("fake-ok", "ok"),
                                                          ("fake-ctrl-c", "interrupted")]


def test_cli_require_gpu_exits_3_without_cuda(monkeypatch):
    from hwadvisor.trials import base

    monkeypatch.setattr(base, "cuda_available", lambda: False)
    result = runner.invoke(app, ["validate", "--require-gpu", "--json"])
    assert result.exit_code == 3
    assert "GPU" in result.stderr


def test_cli_list_trials():
    result = runner.invoke(app, ["validate", "--list"])
    assert result.exit_code == 0
    assert set(result.stdout.split()) == set(registry.TRIALS)


def test_cli_validate_from_recommend_report(fake_registry, tmp_path, monkeypatch):
    fake_registry["cuda-graphs"] = FakeTrial("cuda-graphs", effect={"speedup": 0.9})
    monkeypatch.setitem(registry.TRIALS, "cuda-graphs", registry.Entry("fake:Fake"))
    monkeypatch.setattr(v.environment, "cuda_device_count", lambda: 1)  # as on the H200 host
    report = factory.probe_report()
    report.kind = "recommend"
    report.workload = Workload(model="llama-3-8b")
    report.recommendations = [rec("cuda-graphs", "cuda-graphs", "estimate.times.decode_step_s",
                                  0.5)]
    path = tmp_path / "rec.json"
    path.write_text(report.model_dump_json())
    result = runner.invoke(app, ["validate", "--report", str(path), "--json"])
    assert result.exit_code == 0, result.stderr
    data = Report.model_validate(_json(result))
    assert data.kind == "validate"
    assert data.recommendations[0].validation.status == "refuted"


def test_cli_validate_real_memory_bandwidth_quick():
    """The real trial through the CLI (host memory without a GPU), quick mode."""
    pytest.importorskip("torch")
    result = runner.invoke(app, ["validate", "-t", "memory-bandwidth", "--quick", "--json"])
    assert result.exit_code == 0, result.stderr
    trial = Report.model_validate(_json(result)).trials[0]
    assert trial.status == "ok" and trial.effect["copy_gbps"] > 0
    assert trial.environment.torch_version is not None


def test_cli_probe_measure(fake_registry):
    result = runner.invoke(app, ["probe", "--measure", "--json"])
    assert result.exit_code == 0, result.stderr
    report = Report.model_validate(_json(result))
    assert [t.id for t in report.trials] == ["memory-bandwidth", "matmul-peak"]
    for device in report.devices:  # GPUs torch can reach carry the figures
        if device.measured is not None:
            assert device.measured.memory_bandwidth_gbps == 100.0


def test_others_excludes_self_and_handles_pid_namespaces():
    import os

    from hwadvisor.models import GpuProcess

    me = GpuProcess(pid=os.getpid(), name="python")
    other = GpuProcess(pid=1, name="train.py")
    assert v.others([me, other], None) == [other]
    # in a container NVML shows host PIDs: the new PID is this run, the old one another job
    host_me = GpuProcess(pid=987654, name="python")
    assert v.others([host_me, other], {1}) == [other]
    assert v.others([host_me, other], None) == [host_me, other]


def test_a_saved_report_is_planned_again_with_the_facts_its_json_leaves_out(tmp_path) -> None:
    """validate --report: the devices' family and SoC part come back as the report was made."""
    from hwadvisor import profiles
    from hwadvisor.report.io import write_report
    from hwadvisor.validator.measure import saved_recommendations

    planned = profiles.device_from_profile("snapdragon-8-elite")
    report = factory.validate_report().model_copy(update={"devices": [planned]})
    path = tmp_path / "saved.json"
    write_report(path, report)
    assert '"soc_part"' not in path.read_text()
    (device,) = saved_recommendations(path).devices
    assert device == planned and (device.family, device.soc_part) == ("mobile", "SM8750")
