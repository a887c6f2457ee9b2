"""predict(): a load through the engine's scheduler, held to the estimate where they must agree."""

from __future__ import annotations

import pytest

from hwadvisor.engines import engine_for
from hwadvisor.models import ModelOptions
from hwadvisor.models.serving import Lengths, Load
from hwadvisor.perfmodel import estimate
from hwadvisor.serving import predict
from hwadvisor.workload import WorkloadRequest
from hwadvisor.workload.settle import on_engine_defaults


def _planned(model: str, device: str, engine: str, dtype: str = "bf16", batch: int = 1,
             prompt: int = 1024, gen: int = 256):  # type: ignore[no-untyped-def]
    from hwadvisor import pipeline

    request = WorkloadRequest(model=model, engine=engine, weights_dtype=dtype, batch=batch,
                              prompt_len=prompt, gen_len=gen)
    report = pipeline.estimate_report(request, device, ModelOptions())
    assert report.workload is not None
    device_ = report.devices[0]
    workload, options = on_engine_defaults(report.workload, device_, ModelOptions())
    return workload, device_, options


def _load(**kw: object) -> Load:
    base: dict[str, object] = dict(prompt=Lengths(mean=1024), output=Lengths(mean=256),
                                   source="test", requests=60)
    base.update(kw)
    return Load(**base)  # type: ignore[arg-type]


def test_one_user_at_a_time_decodes_at_the_estimates_batch_one_step() -> None:
    workload, device, options = _planned("llama-3-8b", "h100-sxm", "vllm")
    got = predict(workload, device, _load(concurrency=1), options).figures
    est = estimate(workload, device, options)
    assert est.times.tpot_s is not None
    assert got.tpot_p50_s == pytest.approx(est.times.tpot_s, rel=0.03)
    # the first token: the prompt's prefill (one step of 1,024 tokens), not a batch's, and the
    # API server's own time per request
    overhead = engine_for(workload).costs.request_overhead_s
    assert overhead > 0
    assert got.ttft_p50_s - overhead == pytest.approx(est.times.ttft_s, rel=0.25)


def test_more_load_means_longer_latencies_and_more_throughput() -> None:
    workload, device, options = _planned("llama-3-8b", "h100-sxm", "vllm")
    light = predict(workload, device, _load(rate_rps=1.0), options).figures
    heavy = predict(workload, device, _load(rate_rps=20.0), options).figures
    assert heavy.tpot_p50_s > light.tpot_p50_s
    assert heavy.output_tokens_per_s > 5 * light.output_tokens_per_s
    assert not light.saturated


def test_arrivals_beyond_the_servers_pace_are_saturated_and_queue() -> None:
    workload, device, options = _planned("llama-3-8b", "h100-sxm", "vllm")
    got = predict(workload, device, _load(rate_rps=200.0, requests=300), options).figures
    assert got.saturated
    assert got.ttft_p90_s > 1.0  # waiting in the queue, not prefilling



def test_llama_server_with_its_slots_set_runs_a_stream_a_slot_unless_told_unified() -> None:
    from hwadvisor.serving.scheduler import Knobs

    workload, device, options = _planned("llama-3.2-1b", "h100-sxm", "llamacpp", "q4_k_m",
                                         prompt=512, gen=128)
    load = _load(rate_rps=5.0, prompt=Lengths(mean=512, spread=0.5),
                 output=Lengths(mean=128, spread=0.5), requests=120)
    auto = predict(workload, device, load, options)  # --parallel auto: 4 slots, unified
    assert auto.scheduler.unified_pool and not auto.scheduler.stream_per_slot
    per_slot = predict(workload, device, load, options, Knobs(max_seqs=16))
    unified = predict(workload, device, load, options, Knobs(max_seqs=16, kv_unified=True))
    assert per_slot.scheduler.stream_per_slot and not per_slot.scheduler.unified_pool
    assert unified.scheduler.unified_pool and not unified.scheduler.stream_per_slot
    # scattered slots decode as several passes: slower tokens at this light load
    assert per_slot.figures.tpot_p50_s > 1.3 * unified.figures.tpot_p50_s
    # vLLM has no such streams
    vllm, dev, opts = _planned("llama-3.2-1b", "h100-sxm", "vllm")
    sched = predict(vllm, dev, load, opts, Knobs(max_seqs=16)).scheduler
    assert not sched.stream_per_slot and not sched.unified_pool
