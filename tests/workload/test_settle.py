"""Settling the workload for the planned hardware: a phone serves one conversation at a time."""

from __future__ import annotations

import pytest

from hwadvisor.pipeline import recommend_report
from hwadvisor.workload import WorkloadRequest
from hwadvisor.workload.settle import one_conversation

B = "inference-latency"


@pytest.mark.parametrize("engine", [None, "mlc-llm", "litert"])
def test_a_phone_plan_for_64_users_is_one_conversation_and_says_why(engine: str | None) -> None:
    request = WorkloadRequest(model="llama-3.2-1b", batch=64, engine=engine)
    report = recommend_report(B, "snapdragon-8-gen-3", request)
    assert report.workload.batch == 1
    assert any("--batch 64" in n and "one conversation at a time" in n for n in report.notes)
    assert report.plan is not None and report.plan.fits
    # no step taken to fit a batch the runtime never holds (chunked prefill it cannot say)
    steps = [s.id for s in report.plan.steps]
    assert "chunked-prefill" not in steps, steps


def test_servers_keep_the_batch_they_are_asked_for() -> None:
    gpu = recommend_report(B, "h100-sxm", WorkloadRequest(model="llama-3.2-1b", batch=64))
    assert gpu.workload.batch == 64
    mac = recommend_report(B, "m1-max", WorkloadRequest(model="llama-3.2-1b", batch=8,
                                                        engine="mlc-llm"))
    assert mac.workload.batch == 8  # mlc_llm serve on a Mac batches (mode server)


def test_training_is_not_capped() -> None:
    from hwadvisor.models import Workload

    workload = Workload(model="llama-3.2-1b", phase="training", batch=8, engine="executorch")
    assert one_conversation(workload, "mobile-soc") == (workload, None)


def test_the_largest_batch_a_phone_plan_says_is_the_one_conversation_it_runs() -> None:
    phone = recommend_report(B, "snapdragon-8-gen-3", WorkloadRequest(model="llama-3.2-1b"))
    assert phone.plan is not None and phone.plan.max_batch == 1  # the memory would hold 6
    gpu = recommend_report(B, "h100-sxm", WorkloadRequest(model="llama-3.2-1b"))
    assert gpu.plan is not None and (gpu.plan.max_batch or 0) > 64
