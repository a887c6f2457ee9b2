"""Disaggregated prefill/decode (serving/disagg.py): searched only where an engine has a P/D mode
and a GPU link, planned only where it meets what colocated configs cannot, and emitted as one
command per instance with the router in front, each taking only flags its program takes."""

from __future__ import annotations

import functools

from engine_flag_check import check_config

from hwadvisor import pipeline
from hwadvisor.models import ModelOptions
from hwadvisor.models.serving import Lengths, Load, Targets
from hwadvisor.serving import disagg
from hwadvisor.serving.candidates import Inputs
from hwadvisor.serving.search import search
from hwadvisor.workload import WorkloadRequest
from hwadvisor.workload.settle import on_engine_defaults


@functools.cache
def _planned(model: str, device: str, engine: str):  # type: ignore[no-untyped-def]
    request = WorkloadRequest(model=model, engine=engine, prompt_len=8192, gen_len=512)
    report = pipeline.estimate_report(request, device, ModelOptions())
    assert report.workload is not None
    device_ = report.devices[0]
    workload, options = on_engine_defaults(report.workload, device_, ModelOptions())
    return workload, device_, options


def _inputs(rate: float | None = 4.0, concurrency: int | None = None, gpus: int | None = None,
            prompt: int = 8192, tpot: float = 0.025, model: str = "llama-3-70b",
            device: str = "h100-sxm", engine: str = "vllm") -> Inputs:
    workload, device_, options = _planned(model, device, engine)
    load = Load(rate_rps=rate, concurrency=concurrency, prompt=Lengths(mean=prompt, spread=0.3),
                output=Lengths(mean=512, spread=0.3), requests=200, source="test")
    return Inputs(workload, device_, options, load, Targets(ttft_s=3.0, tpot_s=tpot), gpus, 8)


def test_it_is_searched_only_for_an_engine_with_a_pd_mode_over_a_gpu_link_at_a_rate() -> None:
    assert disagg.why_not(_inputs()) is None
    assert "no prefill/decode" in str(disagg.why_not(_inputs(engine="llamacpp")))
    assert "datacenter" in str(disagg.why_not(_inputs(device="rtx-4090", model="llama-3-8b")))
    assert "PCIe" in str(disagg.why_not(_inputs(device="l40s", model="llama-3-8b")))
    assert "request rate" in str(disagg.why_not(_inputs(rate=None, concurrency=32)))
    assert "one short chunk" in str(disagg.why_not(_inputs(prompt=512)))


def test_a_tight_tpot_on_long_prompts_takes_a_pd_group_on_fewer_gpus() -> None:
    # 8k-token prompts, TPOT p90 <= 25 ms for a 70B: colocated, every prompt chunk stalls the
    # decode steps; apart, the decode instances run bare steps (DistServe's case)
    plan = search(_inputs())
    assert plan.best is not None and plan.best.config.disaggregated
    assert plan.best.meets_targets and plan.best.source == "simulation"
    colocated = [p for p in plan.top if not p.config.disaggregated and p.meets_targets]
    assert colocated and plan.best.config.gpus < min(p.config.gpus for p in colocated)
    # no prompt chunk in a decode step: the tail of ITL stays near its median (a colocated
    # config's p99 ITL is a step with a prompt chunk in it)
    f = plan.best.figures
    assert f.itl_p99_s < 1.25 * f.itl_p50_s
    assert all(p.figures.itl_p99_s > 2 * p.figures.itl_p50_s for p in colocated
               if p.source == "simulation")
    assert "disaggregated prefill/decode groups were screened" in plan.method


def test_where_colocated_configs_meet_on_the_given_gpus_they_stay() -> None:
    plan = search(_inputs(gpus=8, tpot=0.06, rate=2.0))
    assert plan.best is not None and not plan.best.config.disaggregated
    assert any("disaggregated prefill/decode searched" in n for n in plan.notes)


def test_the_fewest_gpus_never_fall_when_the_rate_rises_with_pd_groups() -> None:
    counts = [search(_inputs(rate=rate)).fewest_gpus for rate in (1.0, 4.0, 8.0)]
    assert None not in counts and counts == sorted(counts), counts


def _config(engine: str) -> tuple[str, str]:
    from hwadvisor.rules.playbooks.goals import parse_goal
    from hwadvisor.serving.request import LoadRequest

    request = WorkloadRequest(model="llama-3-70b", engine=engine, prompt_len=8192, gen_len=512)
    report = pipeline.recommend_report(parse_goal("inference-latency"), "h100-sxm", request,
                                       load=LoadRequest(rate=4.0, ttft_ms=3000, tpot_ms=25))
    assert report.serving is not None and report.serving.config is not None
    assert report.serving.config.disaggregated
    assert report.plan is not None and report.plan.engine_config is not None
    config = report.plan.engine_config
    return config.text, config.version


def test_the_emitted_launch_starts_each_instance_and_the_router_with_their_own_flags() -> None:
    for engine, router in (("vllm", "toy_proxy_server.py"), ("sglang", "sglang_router")):
        text, version = _config(engine)
        assert text.count("# prefill instance") >= 1 and text.count("# decode instance") >= 1
        assert router in text.splitlines()[-1]
        assert check_config(engine, "cli", text, version) == [], text
        bad = text.replace("--port 8000", "--port 8000 --no-such-flag")
        assert check_config(engine, "cli", bad, version) != []
