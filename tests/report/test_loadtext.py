"""The load test in the report's views (text, markdown) and in the --fail-on gate."""

from __future__ import annotations

from hwadvisor.models import Report
from hwadvisor.models.hardware import HostInfo
from hwadvisor.models.loadtest import FigureCheck, LoadTest
from hwadvisor.models.serving import Lengths, Load, ServingFigures
from hwadvisor.report.gates import verdict_gates
from hwadvisor.report.loadtext import load_test_lines
from hwadvisor.report.markdown import render_markdown
from hwadvisor.report.plain import bottom_line


def _figures(ttft: float) -> ServingFigures:
    values = {f"{n}_{q}_s": v for n, v in (("ttft", ttft), ("tpot", 0.02), ("itl", 0.02),
                                           ("request_latency", 1.0))
              for q in ("p50", "p90", "p99", "mean")}
    return ServingFigures(**values, request_throughput_rps=2.0, output_tokens_per_s=64.0,
                          requests=20)


def _report(status: str) -> Report:
    load = Load(rate_rps=2, prompt=Lengths(mean=128), output=Lengths(mean=32), requests=20,
                source="test")
    check = FigureCheck(figure="ttft", percentile=50, predicted_s=0.1, measured_s=0.25,
                        ci_s=[0.2, 0.3], ratio=2.5, tolerance=0.2, status="refuted")
    test = LoadTest(endpoint="http://127.0.0.1:8080/v1/completions", load=load,
                    requests_sent=20, requests_completed=20, requests_failed=0,
                    duration_s=11.0, time_limit_s=300, request_timeout_s=120,
                    measured=_figures(0.25), predicted=_figures(0.1), checks=[check],
                    status=status, detail="measured/predicted ttft p50 2.50x",  # type: ignore[arg-type]
                    bench_command="vllm bench serve --request-rate 2")
    return Report(kind="validate", host=HostInfo(os="Linux"), load_test=test)


def test_the_views_say_measured_predicted_and_the_verdict() -> None:
    report = _report("refuted")
    assert bottom_line(report).startswith("Load test of http://127.0.0.1:8080/v1/completions")
    text = "\n".join(load_test_lines(report))
    assert "TTFT p50: measured 250.0 ms (95% 200.0–300.0 ms), predicted 100.0 ms" in text
    assert "vllm bench serve --request-rate 2" in text
    markdown = render_markdown(report)
    assert "## Load test" in markdown and "| TTFT p50 | 250.0 ms |" in markdown


def test_fail_on_refuted_trips_on_a_refuted_load_test() -> None:
    assert verdict_gates(_report("refuted"), ["refuted"])
    assert verdict_gates(_report("confirmed"), ["refuted"]) == []


def test_the_report_round_trips_through_json() -> None:
    report = _report("refuted")
    again = Report.model_validate_json(report.model_dump_json())
    assert again.load_test == report.load_test
