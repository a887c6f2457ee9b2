"""llama.cpp across GPUs as it runs: its default --split-mode layer (issue 42).

Each GPU holds a run of layers and a token passes them one after the other, so a decode step
takes the stages' sum; llama_decode pipelines the micro-batches (n_ubatch) of one logical batch
(n_batch) across the GPUs (PR #6017), so a long prompt's chunks overlap.
"""

from __future__ import annotations

import pytest

from hwadvisor import profiles
from hwadvisor.engines import baseline_options
from hwadvisor.perfmodel import estimate
from hwadvisor.perfmodel.core import _setup, layer_pipeline_share
from hwadvisor.workload import Sizing, WorkloadRequest, build_workload


def _run(gpus: int, prompt: int, engine: str = "llamacpp"):
    device = profiles.device_from_profile("rtx-4090")
    request = WorkloadRequest(model="llama-3-70b", phase="inference", batch=1,
                              prompt_len=prompt, gen_len=64,
                              weights_dtype="q4_k_m" if engine == "llamacpp" else "int4",
                              gpus=gpus, engine=engine)
    wl = build_workload(request, Sizing(device.memory_total_bytes, device.device_class))
    return wl, device, baseline_options(wl, device)


def test_the_layer_split_is_the_default_and_a_token_runs_the_stages_in_turn() -> None:
    wl, device, opts = _run(2, 512)
    assert (opts.sharding, opts.tp_size, opts.pipeline_stages) == ("tp", 1, 2)
    layer = estimate(wl, device, opts).times.decode_step_s
    tensor = estimate(wl, device, opts.model_copy(
        update={"tp_size": 2, "pipeline_stages": 1})).times.decode_step_s
    assert layer is not None and tensor is not None
    assert layer > 1.6 * tensor  # the sum of the two halves against each GPU reading half


@pytest.mark.parametrize(("prompt", "share"), [(512, 1.0), (2048, 5 / 8), (4096, 5 / 8),
                                               (2560, (5 + 2) / 10)])
def test_a_prompts_chunks_overlap_within_a_logical_batch(prompt: int, share: float) -> None:
    wl, device, opts = _run(2, prompt)
    forwards = -(-prompt // 512)
    assert layer_pipeline_share(_setup(wl, device, opts, None), forwards) == pytest.approx(share)


def test_engines_without_a_layer_split_are_not_pipelined() -> None:
    wl, device, opts = _run(2, 2048, engine="vllm")
    staged = opts.model_copy(update={"tp_size": 1, "pipeline_stages": 2,
                                     "prefill_chunk_tokens": 512})
    assert layer_pipeline_share(_setup(wl, device, staged, None), 4) == 1.0
