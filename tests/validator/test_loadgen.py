"""The load generator against a tiny streaming server on loopback, at a known pace.

The fake server (tests/fake_openai_server.py) sends the first token 100 ms after a request and
one every 20 ms after it: the measured TTFT, ITL and TPOT percentiles must read that pace, the
bounds on time and count must hold, and failures must come back named, never as a traceback.
"""

from __future__ import annotations

import socket
import time

import pytest
from fake_openai_server import Pace, serving

from hwadvisor.errors import UserError
from hwadvisor.models import Report
from hwadvisor.models.hardware import HostInfo
from hwadvisor.models.serving import Lengths, Load, ServingFigures
from hwadvisor.validator.loadgen import Limits, parse_endpoint, play, server_model
from hwadvisor.validator.loadtest import EndpointSpec, decide_band, judged, measure_endpoint

# Loopback on a shared 2-core machine: a sleep overshoots by a few ms, never undershoots.
SLACK_S = 0.015


def _load(**kw: object) -> Load:
    base: dict[str, object] = {"prompt": Lengths(mean=16), "output": Lengths(mean=8),
                               "requests": 6, "source": "test"}
    base.update(kw)
    if "rate_rps" not in base and "concurrency" not in base:
        base["concurrency"] = 2
    return Load.model_validate(base)


def test_closed_loop_measures_the_servers_pace() -> None:
    with serving() as (url, pace):
        run = play(parse_endpoint(url), _load(concurrency=2, requests=6), "fake-model")
    assert run.stopped == "done" and len(run.completed) == 6 and not run.failed
    f = run.figures()
    assert f is not None
    assert pace.first_s <= f.ttft_p50_s <= pace.first_s + SLACK_S
    assert pace.every_s - 0.002 <= f.itl_p50_s <= pace.every_s + SLACK_S
    assert pace.every_s - 0.002 <= f.tpot_p50_s <= pace.every_s + SLACK_S
    # latency = first token + 7 more gaps; the server's own count of tokens is used
    assert f.request_latency_p50_s == pytest.approx(pace.first_s + 7 * pace.every_s, abs=0.03)
    assert all(s.output_tokens == 8 and s.prompt_tokens == 16 for s in run.completed)
    assert run.completed[0].engine_tpot_s == pytest.approx(pace.every_s)


def test_the_request_body_asks_for_exact_lengths() -> None:
    with serving() as (url, pace):
        play(parse_endpoint(url), _load(requests=2), "fake-model")
    body = pace.bodies[0]
    assert isinstance(body["prompt"], list) and len(body["prompt"]) == 16
    assert all(isinstance(t, int) for t in body["prompt"])
    assert body["max_tokens"] == 8 and body["min_tokens"] == 8 and body["ignore_eos"] is True
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["model"] == "fake-model"


def test_words_prompts_are_as_many_words() -> None:
    with serving() as (url, pace):
        play(parse_endpoint(url), _load(requests=1), None, prompt="words")
    assert len(pace.bodies[0]["prompt"].split()) == 16 and "model" not in pace.bodies[0]


def test_open_loop_sends_at_the_loads_arrivals() -> None:
    load = _load(rate_rps=20.0, arrivals="constant", requests=6)
    started = time.perf_counter()
    with serving() as (url, _):
        run = play(parse_endpoint(url), load)
    sent = [s.sent_s for s in run.samples]
    assert sent == sorted(sent)
    # constant arrivals at 20/s: 50 ms apart, each sent on time (a little late at worst)
    for i, at in enumerate(sent):
        assert i * 0.05 <= at + 0.001 <= i * 0.05 + SLACK_S + 0.01
    assert time.perf_counter() - started < 2.0
    f = run.figures()
    assert f is not None and f.ttft_p50_s < 0.1 + SLACK_S and not f.saturated


def test_the_count_bound_holds() -> None:
    with serving() as (url, pace):
        run = play(parse_endpoint(url), _load(concurrency=3, requests=5))
    assert len(run.samples) == 5 and len(pace.bodies) == 5


def test_the_time_limit_stops_the_run_and_cuts_what_is_open() -> None:
    slow = Pace(first_s=0.05, every_s=0.2)  # 40 tokens: 8 s a request
    load = _load(concurrency=2, requests=10, output=Lengths(mean=40))
    started = time.perf_counter()
    with serving(slow) as (url, _):
        run = play(parse_endpoint(url), load, limits=Limits(time_limit_s=1.0))
    took = time.perf_counter() - started
    assert took < 1.8, took
    assert run.stopped == "time limit"
    assert run.samples and all(s.error == "cut at the run's time limit" for s in run.samples)


def test_a_stalled_request_times_out() -> None:
    with serving(Pace(stall=True)) as (url, _):
        started = time.perf_counter()
        run = play(parse_endpoint(url), _load(concurrency=1, requests=1),
                   limits=Limits(request_timeout_s=0.5))
    assert time.perf_counter() - started < 1.5
    assert run.samples[0].error == "timed out (--request-timeout)"
    assert run.figures() is None


def test_a_server_error_is_named_in_the_result() -> None:
    with serving(Pace(status=500)) as (url, _):
        run = play(parse_endpoint(url), _load(requests=3))
    assert not run.completed
    assert run.errors() == ["3 x HTTP 500: the fake server failed on purpose"]


def test_a_stream_without_a_token_is_a_failure() -> None:
    with serving(Pace(cut=True)) as (url, _):
        run = play(parse_endpoint(url), _load(requests=1))
    assert run.errors() == ["the stream ended without a token"]


def test_a_refused_connection_is_a_user_error() -> None:
    with socket.socket() as sock:  # a port nothing listens on once this closes
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(UserError, match="connection refused"):
        server_model(parse_endpoint(f"http://127.0.0.1:{port}"))


@pytest.mark.parametrize("url", ["ftp://host", "localhost:8080", "http://", "http://h:x/",
                                 "http://h/v1?x=1"])
def test_a_bad_url_is_a_user_error(url: str) -> None:
    with pytest.raises(UserError):
        parse_endpoint(url)


@pytest.mark.parametrize(("url", "path"), [
    ("http://127.0.0.1:8080", "/v1/completions"), ("http://127.0.0.1:8080/v1/", "/v1/completions"),
    ("http://h:1/v1/completions", "/v1/completions"), ("http://h/api", "/api/v1/completions")])
def test_the_completions_path_is_found_from_the_base_url(url: str, path: str) -> None:
    assert parse_endpoint(url).path == path


def test_the_model_name_comes_from_the_server() -> None:
    with serving(Pace(model="served-name")) as (url, _):
        assert server_model(parse_endpoint(url)) == "served-name"


# ---------------------------------------------------------------------------------------------
# The verdict


def _figures(ttft: float, tpot: float) -> ServingFigures:
    values = {f"{name}_{q}_s": value for name, value in (("ttft", ttft), ("tpot", tpot),
                                                         ("itl", tpot), ("request_latency", 1.0))
              for q in ("p50", "p90", "p99", "mean")}
    return ServingFigures(**values, request_throughput_rps=1.0, output_tokens_per_s=8.0,
                          requests=12)


@pytest.mark.parametrize(("ci", "status"), [((0.95, 1.1), "confirmed"), ((0.5, 0.7), "refuted"),
                                            ((1.3, 1.5), "refuted"), ((0.7, 1.0), "inconclusive"),
                                            (None, "inconclusive")])
def test_the_band_decides_by_the_whole_interval(ci: tuple[float, float] | None,
                                                status: str) -> None:
    assert decide_band(ci, 1.0, 0.2) == status


def test_a_right_prediction_is_confirmed_and_a_wrong_one_refuted() -> None:
    with serving() as (url, pace):
        run = play(parse_endpoint(url), _load(concurrency=2, requests=12))
    right = judged(run, _figures(pace.first_s + 0.003, pace.every_s), "the pace")
    assert right.status == "confirmed", right.detail
    assert {c.figure for c in right.checks if c.judged} == {"ttft", "tpot"}
    wrong = judged(run, _figures(pace.first_s * 3, pace.every_s), "three times the TTFT")
    assert wrong.status == "refuted"
    assert [c.status for c in wrong.checks if c.figure == "ttft"] == ["refuted", "refuted"]


def test_too_few_requests_decide_nothing() -> None:
    with serving() as (url, pace):
        run = play(parse_endpoint(url), _load(concurrency=2, requests=4))
    test = judged(run, _figures(pace.first_s, pace.every_s), "the pace")
    assert test.status == "inconclusive" and "under 10" in test.detail
    assert all(c.ci_s is None for c in test.checks)


def test_measure_endpoint_predicts_measures_and_names_the_bench_command() -> None:
    from hwadvisor.workload import Sizing, WorkloadRequest
    from hwadvisor.workload.settle import build_workload

    workload = build_workload(WorkloadRequest(model="llama-3.2-1b", engine="llamacpp",
                                              prompt_len=16, gen_len=8),
                              Sizing(None, "cpu"), None)
    report = Report(kind="validate", host=HostInfo(os="Linux", cpu_cores=2, cpu_model="test",
                                                  memory_total_bytes=16 * 2**30),
                    workload=workload)
    with serving() as (url, _):
        found = measure_endpoint(report, EndpointSpec(url, _load(requests=4)))
    test = found.load_test
    assert test is not None and test.requests_completed == 4
    assert test.predicted is not None and test.prediction.startswith("serving.predict")
    assert test.bench_command is not None and test.bench_command.startswith("vllm bench serve")
    assert "--max-concurrency 2" in test.bench_command and "--model fake-model" in \
        test.bench_command


def test_no_run_sends_a_prompt_an_earlier_run_sent() -> None:
    # A server's prefix cache (vLLM, SGLang, llama-server's host prompt cache) would serve a
    # repeated prompt from memory: each run's text is new, while its lengths repeat with the seed.
    with serving() as (url, pace):
        play(parse_endpoint(url), _load(requests=4), "fake-model")
        play(parse_endpoint(url), _load(requests=4), "fake-model")
    first, second = pace.bodies[:4], pace.bodies[4:]
    assert [len(b["prompt"]) for b in first] == [len(b["prompt"]) for b in second]
    assert not {tuple(b["prompt"][:4]) for b in first} & {tuple(b["prompt"][:4]) for b in second}


def test_the_loads_prefix_share_opens_every_prompt_of_a_run() -> None:
    with serving() as (url, pace):
        play(parse_endpoint(url), _load(requests=4, prefix_share=0.5), "fake-model")
    prompts = [b["prompt"] for b in pace.bodies]
    assert all(p[:8] == prompts[0][:8] for p in prompts)  # half of 16 tokens shared
    assert len({tuple(p[8:]) for p in prompts}) == 4  # the rest differs request by request
