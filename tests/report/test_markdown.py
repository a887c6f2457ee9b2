"""The markdown summary carries the sections a CI step summary needs."""

from __future__ import annotations

import report_factory as factory

from hwadvisor.report.gates import apply_gates
from hwadvisor.report.markdown import cell, num, render_markdown


def test_validate_summary_has_every_section() -> None:
    report = factory.validate_report()
    text = render_markdown(report)
    for heading in ("# hwadvisor validate report", "## Device", "## Workload", "## Estimate",
                    "## Recommendations for inference-latency", "## Trials", "## Gates"):
        assert heading in text
    assert "NVIDIA H200" in text and "llama-3-8b" in text
    assert "**Bottleneck: memory-bandwidth**" in text
    # Ranked recommendations with predicted and validated figures, in rank order.
    assert text.index("cuda-graphs | Use") < text.index("fp8-weights | Use")
    assert "(×1.60)" in text and "×1.80" in text and "❌ refuted" in text
    assert "tensor-parallel" in text  # rejected rules, folded
    assert "measured GB/s" in text and "4,150" in text
    assert "✅ No gate tripped." in text


def test_tripped_gates_are_listed() -> None:
    report = factory.validate_report()
    report.gates_tripped = apply_gates(report, ["refuted"], 0.9)
    text = render_markdown(report)
    gates = text[text.index("## Gates"):]
    assert "fp8-weights" in gates and "--min-bandwidth-fraction 0.9" in gates
    assert "No gate tripped" not in gates


def test_probe_summary_leaves_out_absent_sections() -> None:
    text = render_markdown(factory.probe_report())
    assert "## Device" in text and "## Workload" not in text and "## Trials" not in text


def test_cells_escape_pipes_and_show_unknowns_as_dashes() -> None:
    assert cell("a|b\nc") == "a\\|b c"
    assert cell(None) == "—" and num(None) == "—"
    assert num(0.0) == "0"  # a real zero stays zero
    assert num(4150.0) == "4,150" and num(0.001234) == "0.00123"


def test_interrupted_reports_say_so() -> None:
    report = factory.validate_report()
    report.interrupted = True
    assert "**interrupted**" in render_markdown(report)
