"""`validate --endpoint` and `recommend --validate --endpoint` against a loopback server."""

from __future__ import annotations

import json
import socket

from fake_openai_server import Pace, serving
from typer.testing import CliRunner

from hwadvisor.cli.app import app

runner = CliRunner()
WORKLOAD = ["--model", "llama-3.2-1b", "--engine", "llamacpp", "--prompt-len", "16",
            "--gen-len", "8"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_validate_endpoint_writes_measured_and_predicted_figures() -> None:
    with serving() as (url, pace):
        result = runner.invoke(app, ["validate", "--endpoint", url, "--concurrency", "2",
                                     "--requests", "12", *WORKLOAD, "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["kind"] == "validate" and data["trials"] == []
    test = data["load_test"]
    assert test["requests_completed"] == 12 and test["stopped_by"] == "done"
    measured = test["measured"]
    assert abs(measured["ttft_p50_s"] - pace.first_s) < 0.015
    assert abs(measured["tpot_p50_s"] - pace.every_s) < 0.005
    assert set(measured) >= {"ttft_p90_s", "itl_p50_s", "request_latency_p99_s",
                             "request_throughput_rps", "output_tokens_per_s"}
    assert test["predicted"] is not None and test["status"] in ("confirmed", "refuted",
                                                                "inconclusive")
    assert [c["figure"] for c in test["checks"] if c["judged"]] == ["ttft"] * 2 + ["tpot"] * 2
    assert test["bench_command"].startswith("vllm bench serve --backend openai")


def test_validate_endpoint_text_view_names_the_figures() -> None:
    with serving() as (url, _):
        result = runner.invoke(app, ["validate", "--endpoint", url, "--rate", "20",
                                     "--requests", "4", *WORKLOAD])
    assert result.exit_code == 0, result.output
    assert "load test:" in result.output and "TTFT p50: measured" in result.output


def test_a_refused_endpoint_is_exit_2_without_a_traceback() -> None:
    result = runner.invoke(app, ["validate", "--endpoint",
                                 f"http://127.0.0.1:{_free_port()}", *WORKLOAD])
    assert result.exit_code == 2
    assert "connection refused" in result.output and "Traceback" not in result.output


def test_a_failing_server_is_exit_4_and_says_what_failed() -> None:
    with serving(Pace(status=503)) as (url, _):
        result = runner.invoke(app, ["validate", "--endpoint", url, "--requests", "2",
                                     *WORKLOAD])
    assert result.exit_code == 4
    assert "HTTP 503" in result.output and "Traceback" not in result.output


def test_load_options_without_an_endpoint_are_refused() -> None:
    result = runner.invoke(app, ["validate", "--rate", "2"])
    assert result.exit_code == 2 and "--endpoint" in result.output


def test_rate_and_concurrency_together_are_refused() -> None:
    result = runner.invoke(app, ["validate", "--endpoint", "http://127.0.0.1:1", "--rate", "2",
                                 "--concurrency", "2"])
    assert result.exit_code == 2 and "two kinds of load" in result.output


def test_recommend_validate_endpoint_plays_the_plans_batch() -> None:
    with serving() as (url, _):
        result = runner.invoke(app, ["recommend", *WORKLOAD, "--batch", "2", "--validate",
                                     "--endpoint", url, "--json"])
    assert result.exit_code == 0, result.output
    test = json.loads(result.stdout)["load_test"]
    assert test["load"]["concurrency"] == 2 and test["requests_completed"] == 50
    assert test["prediction"].startswith("serving.predict")


def test_recommend_endpoint_needs_validate() -> None:
    result = runner.invoke(app, ["recommend", "--endpoint", "http://127.0.0.1:1"])
    assert result.exit_code == 2 and "--validate" in result.output
