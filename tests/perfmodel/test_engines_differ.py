"""vLLM and SGLang where their defaults differ: CUDA-graph capture sizes and prefill chunks.

The figures are the engines' own (hwadvisor/engines/data/{vllm,sglang}.toml, with their source
lines): vLLM captures decode graphs up to min(2 x max_num_seqs, 512) sequences, SGLang's
cuda_graph_max_bs and chunked_prefill_size follow the GPU's memory and TP degree.
"""

from __future__ import annotations

import pytest

from hwadvisor import profiles
from hwadvisor.engines import baseline_options, engine_for
from hwadvisor.engines.schema import graph_batch_limit
from hwadvisor.models import ModelOptions
from hwadvisor.pipeline import estimate_report
from hwadvisor.workload import WorkloadRequest, build_workload


def _limit(engine: str, memory_gib: float, tp: int) -> int | None:
    workload = build_workload(WorkloadRequest(model="llama-3.2-1b", phase="inference",
                                              engine=engine))
    return graph_batch_limit(engine_for(workload).costs.graph_limits, memory_gib, tp)


@pytest.mark.parametrize(("engine", "memory_gib", "tp", "largest"), [
    ("vllm", 79.6, 1, 512),      # H100 80GB: min(2 x 1024, 512)
    ("sglang", 79.6, 1, 256),    # H100 80GB, TP < 4
    ("sglang", 79.6, 8, 512),    # H100 80GB, TP >= 4
    ("sglang", 39.4, 1, 32),     # A100 40GB, TP < 4
    ("sglang", 192.0, 1, 512),   # MI300X
    ("trtllm", 79.6, 1, 128),    # CudaGraphConfig's default max_batch_size
])
def test_each_engine_captures_the_decode_graphs_its_code_sizes(
        engine: str, memory_gib: float, tp: int, largest: int) -> None:
    assert _limit(engine, memory_gib, tp) == largest


def _tpot(engine: str, batch: int, gpus: int) -> float:
    request = WorkloadRequest(model="tinyllama-1.1b", phase="inference", batch=batch,
                              prompt_len=16, gen_len=16, engine=engine, gpus=gpus)
    est = estimate_report(request, "h100-sxm", ModelOptions()).estimate
    assert est is not None and est.times.tpot_s is not None
    return est.times.tpot_s


def test_a_batch_above_sglangs_graphs_pays_eager_launches_where_vllm_replays() -> None:
    # 300 sequences at TP2 on H100s: within vLLM's 512, above SGLang's 256; the step of a 1.1B
    # model is short enough there that the eager launches, not the GPU, set its time.
    assert _tpot("sglang", 300, 2) > 1.1 * _tpot("vllm", 300, 2)


def test_above_both_engines_graphs_they_run_alike() -> None:
    assert _tpot("sglang", 768, 2) == pytest.approx(_tpot("vllm", 768, 2))


def _chunk(engine: str, device: str, options: dict[str, str] | None = None) -> int | None:
    workload = build_workload(WorkloadRequest(model="llama-3.1-8b", phase="inference",
                                              engine=engine))
    if options:
        workload = workload.model_copy(update={"engine_options": options})
    opts = baseline_options(workload, profiles.device_from_profile(device))
    return opts.prefill_chunk_tokens


@pytest.mark.parametrize(("engine", "device", "tokens"), [
    ("sglang", "h100-sxm", 8192),
    ("sglang", "mi300x", 16384),     # >= 160 GB: chunked_prefill_size 16384
    ("sglang", "a100-40gb", 4096),   # < 60 GB
    ("vllm", "mi300x", 8192),        # >= 70 GiB: "GPUs like H100 and MI300x"
    ("vllm", "l40s", 2048),          # below 70 GiB: `vllm serve` takes 2048
    ("vllm", "rtx-4090", 2048),
])
def test_the_prefill_chunk_is_the_engines_for_the_gpus_memory(
        engine: str, device: str, tokens: int) -> None:
    assert _chunk(engine, device) == tokens


def test_a_chunk_the_user_sets_holds_on_every_gpu() -> None:
    assert _chunk("sglang", "mi300x", {"prefill_chunk_tokens": "2048"}) == 2048


def _runs_eagerly(engine: str, batch: int) -> bool:
    request = WorkloadRequest(model="llama-3.1-8b", phase="inference", batch=batch,
                              prompt_len=512, gen_len=128, engine=engine)
    est = estimate_report(request, "h100-sxm", ModelOptions()).estimate
    assert est is not None
    return any("captures CUDA graphs for by default" in a for a in est.assumptions)


@pytest.mark.parametrize(("batch", "vllm_eager", "sglang_eager"), [
    (256, False, False),
    (300, False, True),   # above SGLang's 256 on an 80 GB GPU at TP 1, within vLLM's 512
    (768, True, True),    # above both
])
def test_which_engine_decodes_eagerly_on_one_h100(
        batch: int, vllm_eager: bool, sglang_eager: bool) -> None:
    assert _runs_eagerly("vllm", batch) is vllm_eager
    assert _runs_eagerly("sglang", batch) is sglang_eager
