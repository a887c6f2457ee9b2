"""The 4-bit GGUF format a plan picks: Q4_K_M, or Q4_0 where the K-quant mix would fall back.

llama-quantize stores a K-quant tensor whose rows are not a multiple of 256 values in a 32-block
type (src/llama-quant.cpp tensor_type_fallback): Qwen2.5-0.5B (hidden 896) in Q4_K_M came out
at 6.34 bits a weight on the H200 (benchmarks/llamacpp/results_heldout4), its Q4_0 at 4.5.
"""

from __future__ import annotations

from hwadvisor.models import Report
from hwadvisor.pipeline import recommend_report
from hwadvisor.workload import WorkloadRequest


def _plan(model: str) -> Report:
    request = WorkloadRequest(model=model, prompt_len=1024, gen_len=256, engine="llamacpp",
                              quality="int4")
    return recommend_report("memory-footprint", "snapdragon-8-gen-3", request)


def test_rows_off_the_k_quant_block_take_q4_0() -> None:
    report = _plan("qwen2.5-0.5b")
    assert report.plan is not None and report.plan.engine_config is not None
    step = next(s for s in report.plan.steps if s.id == "int4-weights")
    assert "Format q4_0, not q4_k_m" in step.why
    assert step.changes.get("weights_dtype") == "q4_0"
    assert any("GGUF Q4_0" in note for note in report.plan.engine_config.notes)


def test_rows_that_fit_the_block_keep_q4_k_m() -> None:
    report = _plan("llama-3.2-1b")
    assert report.plan is not None and report.plan.engine_config is not None
    step = next(s for s in report.plan.steps if s.id == "int4-weights")
    assert step.changes.get("weights_dtype") == "q4_k_m"
    assert not any("GGUF Q4_0" in note for note in report.plan.engine_config.notes)
