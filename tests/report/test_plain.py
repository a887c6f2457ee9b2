"""The plain view's first line (report/plain.py bottom_line)."""

from __future__ import annotations

from hwadvisor.pipeline import recommend_report
from hwadvisor.report.plain import bottom_line
from hwadvisor.workload import WorkloadRequest


def test_what_would_work_is_the_plan_on_more_gpus_before_a_larger_change() -> None:
    # Llama-3-70B training on one RTX 4090: the plan (QLoRA) fits on 4 cards; a full fine-tune
    # on 48 is faster per token but is not the direct answer to "it does not fit here"
    report = recommend_report("training-throughput", "rtx-4090",
                              WorkloadRequest(model="llama-3-70b", phase="training", batch=1,
                                              prompt_len=2048))
    assert report.plan is not None and not report.plan.fits
    fitting = [a for a in report.plan.alternatives if a.fits]
    assert fitting[0].id != "more-gpus"  # the alternatives' own order leads with another
    line = bottom_line(report)
    more = next(a for a in fitting if a.id == "more-gpus")
    assert f"What would work: {more.title}." in line, line
