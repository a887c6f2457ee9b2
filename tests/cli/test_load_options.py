"""estimate and recommend under a load: the options, their errors, the report's serving keys and
the views that say the load and the targets."""

from __future__ import annotations

import functools
import json

import pytest
from typer.testing import CliRunner

from hwadvisor.cli.app import app
from hwadvisor.models import Report

runner = CliRunner()
BASE = ("--model", "llama-3-8b", "--device", "h100-sxm")


@pytest.mark.parametrize(("args", "says"), [
    (("--rate", "5", "--concurrency", "3"), "--rate and --concurrency together"),
    (("--ttft", "100"), "a latency target without a load"),
    (("--rate", "-2"), "--rate must be a number above 0"),
    (("--rate", "5", "--tpot", "0"), "--tpot must be a number above 0"),
    (("--rate", "5", "--percentile", "80"), "--percentile must be one of"),
    (("--rate", "5", "--dataset", "nope"), "no such dataset shape"),
    (("--rate", "5", "--phase", "training"), "for serving, not training"),
])
@pytest.mark.parametrize("command", ["estimate", "recommend"])
def test_bad_load_options_exit_2_with_a_hint(command: str, args: tuple[str, ...],
                                             says: str) -> None:
    result = runner.invoke(app, [command, *BASE, *args])
    assert result.exit_code == 2, result.output
    assert says in result.output and "hint:" in result.output
    assert "Traceback" not in result.output


@functools.cache
def _json(command: str, *args: str) -> dict:  # type: ignore[type-arg]
    result = runner.invoke(app, [command, *BASE, *args, "--json"])
    assert result.exit_code == 0, result.output
    data: dict = json.loads(result.stdout)  # type: ignore[type-arg]
    Report.model_validate(data)
    return data


FIGURE_KEYS = {f"{name}_{stat}_s" for name in ("ttft", "tpot", "itl", "request_latency")
               for stat in ("p50", "p90", "p99", "mean")} | {"request_throughput_rps",
                                                           "output_tokens_per_s"}


def test_recommend_json_carries_the_load_the_targets_and_the_search() -> None:
    data = _json("recommend", "--rate", "20", "--ttft", "1000", "--tpot", "50")
    serving = data["serving"]
    assert serving["load"]["rate_rps"] == 20
    assert serving["targets"] == {"ttft_s": 1.0, "tpot_s": 0.05, "request_latency_s": None,
                                  "percentile": 90, "tpot_definition": "request"}
    assert FIGURE_KEYS <= set(serving["figures"])
    assert [c["figure"] for c in serving["checks"]] == ["ttft", "tpot"]
    assert all(c["met"] and c["margin"] > 0 for c in serving["checks"])
    best = serving["best"]
    assert best["meets_targets"] and best["source"] == "simulation"
    assert serving["fewest_gpus"] == best["config"]["replicas"] * best["config"][
        "gpus_per_replica"]
    assert len(serving["pareto"]) >= 3 and serving["searched"] >= 1000
    # the emitted config is the search's, not the batch-1 plan's
    text = data["plan"]["engine_config"]["text"]
    assert f"--max-num-seqs {best['config']['max_sequences']}" in text
    assert "--max-num-seqs 230" not in text
    assert data["plan"]["summary"] == serving["verdict"]


def test_estimate_json_simulates_the_configured_engine() -> None:
    data = _json("estimate", "--concurrency", "8", "--dataset", "chat", "--e2e", "20000")
    serving = data["serving"]
    assert serving["load"]["concurrency"] == 8 and serving["load"]["dataset"] == "chat"
    assert FIGURE_KEYS <= set(serving["figures"])
    assert serving["checks"][0]["figure"] == "request_latency"
    assert serving["config"]["max_sequences"] == 1024  # vLLM's default on an H100
    assert serving["best"] is None and serving["searched"] == 0


def test_no_load_no_serving_key() -> None:
    assert "serving" not in _json("estimate")
    assert "serving" not in _json("recommend", "--batch", "4")


@pytest.mark.parametrize("command", ["estimate", "recommend"])
def test_the_text_view_says_the_load_and_the_targets(command: str) -> None:
    result = runner.invoke(app, [command, *BASE, "--rate", "4", "--ttft", "800", "--tpot", "60",
                                 "--tpot-definition", "itl"])
    assert result.exit_code == 0, result.output
    out = " ".join(result.stdout.split())
    assert "load planned for: 4 requests/s" in out
    assert "ITL p90 ≤ 60 ms" in out and "TTFT p90 ≤ 800 ms" in out
    assert "spare" in out or "missed" in out
    assert "TPOT is per request" in out or "held against ITL" in out


def test_the_markdown_and_html_say_the_load_and_the_targets(tmp_path) -> None:  # type: ignore[no-untyped-def]
    md, html = tmp_path / "r.md", tmp_path / "r.html"
    result = runner.invoke(app, ["recommend", *BASE, "--rate", "20", "--ttft", "1000",
                                 "--tpot", "50", "--markdown", str(md), "--html", str(html)])
    assert result.exit_code == 0, result.output
    for text in (md.read_text(), html.read_text()):
        assert "Serving under load" in text and "20 requests/s" in text
        assert "TTFT p90" in text and "Pareto" in text
    assert "<svg" in html.read_text().split('id="serving"')[1]
