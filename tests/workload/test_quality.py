"""The quality ladder names loss classes: 8-bit formats are near-lossless whatever the hardware.

An RTX 4090, a Mac or an A100 has no FP8 units; its 8-bit formats (Q8_0, MLX 8-bit, INT8) sit in
the same class as FP8 (llama.cpp's Llama-3-8B scoreboard: q8_0 KL divergence 0.0014 to FP16), so
the default budget allows them. When something must give, the smaller loss goes first.
"""

from __future__ import annotations

from functools import cache

from hwadvisor.models import Report, Workload
from hwadvisor.pipeline import recommend_report
from hwadvisor.workload import WorkloadRequest
from hwadvisor.workload.quality import rank, within


def test_8_bit_formats_share_a_class_and_sit_above_5_and_4_bits() -> None:
    assert rank("fp8") == rank("int8") == rank("q8_0") == rank("mlx-8bit") == 1
    assert rank("bf16") < rank("q8_0") < rank("q6_k") == rank("q5_k_m") < rank("q4_k_m")
    assert within("q8_0", "bf16", "8-bit") and within("mlx-8bit", "bf16", "8-bit")
    assert not within("q6_k", "bf16", "8-bit") and within("q6_k", "bf16", "6-bit")
    assert not within("q4_k_m", "bf16", "6-bit") and within("q4_k_m", "bf16", "4-bit")


def test_the_earlier_names_read_as_their_class() -> None:
    assert within("q8_0", "bf16", "fp8") and within("int8", "bf16", "fp8")
    assert not within("int4", "bf16", "int8") and within("int4", "bf16", "int4")
    base = {"model": "m", "phase": "inference", "batch": 1, "prompt_len": 1, "gen_len": 1,
            "weights_dtype": "bf16"}
    for old, new in (("fp8", "8-bit"), ("int8", "8-bit"), ("int4", "4-bit")):
        assert Workload.model_validate({**base, "quality": old}).quality == new
    assert Workload.model_validate(base).quality == "8-bit"


@cache
def _plan(goal: str, device: str, model: str, engine: str, quality: str | None = None,
          prompt_len: int | None = None, batch: int | None = None) -> Report:
    request = WorkloadRequest(model=model, engine=engine, quality=quality,
                              prompt_len=prompt_len, batch=batch)
    return recommend_report(goal, device, request)


def _final(report: Report, key: str) -> str:
    """The format a plan leaves: its last step's change of it, else the workload's own."""
    assert report.plan is not None
    changed = [str(s.changes[key]) for s in report.plan.steps if key in s.changes]
    return changed[-1] if changed else str(getattr(report.workload, key))


def test_a_4090_serves_q8_0_within_the_default_budget() -> None:
    report = _plan("inference-latency", "rtx-4090", "llama-3-8b", "llamacpp")
    assert _final(report, "weights_dtype") == "q8_0"


def test_the_smaller_loss_goes_first_when_something_must_give() -> None:
    # Llama-3-8B at 8k x 8 on a 24 GB card, nothing below 16 bits allowed for speed: to fit,
    # 8-bit weights and KV cache (near-lossless) before 4-bit weights
    report = _plan("memory-footprint", "rtx-4090", "llama-3-8b", "llamacpp", "lossless",
                   8192, 8)
    assert report.plan is not None and report.plan.fits
    weights, kv = _final(report, "weights_dtype"), _final(report, "kv_dtype")
    assert rank(weights) <= 1 and rank(kv) <= 1, (weights, kv)


def test_a_phone_plans_within_the_4_bit_class_by_default() -> None:
    # Meta's, Qualcomm's and Apple's own on-device releases are 4-bit (SpinQuant / QAT, w4a16,
    # Core ML int4): a 3B on an iPhone takes the 4-bit recipe, not INT8 at the memory limit
    report = recommend_report("inference-latency", "a17-pro",
                              WorkloadRequest(model="llama-3.2-3b"))
    assert report.workload is not None and report.workload.quality == "4-bit"
    assert rank(_final(report, "weights_dtype")) == 3
    said = recommend_report("inference-latency", "a17-pro",
                            WorkloadRequest(model="llama-3.2-3b", quality="8-bit"))
    assert said.workload is not None and said.workload.quality == "8-bit"  # the user's word
