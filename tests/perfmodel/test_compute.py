"""Kernels per forward: DeepSeek's MLA + MoE layers launch far more kernels than a Llama layer."""

from __future__ import annotations

from hwadvisor import profiles
from hwadvisor.engines import baseline_options
from hwadvisor.models import ModelOptions
from hwadvisor.perfmodel import estimate
from hwadvisor.workload import Sizing, WorkloadRequest, build_workload


def _decode(model: str, batch: int, graphs: bool, gpus: int = 8,
            engine: str = "sglang==0.4.1") -> tuple[float, float]:
    """(tokens/s, decode kernels) of SGLang (0.4.1 unless told) serving `model` on 8 x H200."""
    device = profiles.device_from_profile("h200-sxm")
    wl = build_workload(WorkloadRequest(model=model, phase="inference", batch=batch, prompt_len=128,
                                        gen_len=256, weights_dtype="fp8", gpus=gpus, nodes=1,
                                        gpus_per_node=gpus, engine=engine.split("==")[0]),
                        Sizing(device.memory_total_bytes, device.device_class))
    if "==" in engine:  # the release's [[history]] figures (engines/catalog.py)
        wl = wl.model_copy(update={"engine_version": engine.split("==")[1]})
    opts = baseline_options(wl, device).model_dump()
    opts.update(sharding="tp", tp_size=gpus, cuda_graphs=graphs)
    est = estimate(wl, device, ModelOptions.model_validate(opts))
    kernels = next(float(a.split(" kernels")[0].split()[-1]) for a in est.assumptions
                   if a.startswith("decode step:"))
    return est.tokens_per_s or 0.0, kernels


def test_deepseek_layers_count_mla_and_grouped_router_kernels() -> None:
    # SGLang 0.4.x keeps the generic count (sglang.toml history): 61 layers x (11 fused + 21
    # MLA) + 58 MoE layers x (6 grouped + 22 DeepSeek block) + 10
    _, kernels = _decode("deepseek-v3", 1, graphs=True)
    assert kernels == 61 * 32 + 58 * 28 + 10
    _, llama = _decode("llama-3.1-70b", 1, graphs=True)
    assert llama < 1000  # 80 layers x 11 + 10: unchanged for dense Llama layers


def test_newer_sglang_releases_launch_fewer_deepseek_kernels() -> None:
    # 0.5.3: fa3 MLA, DeepGEMM, bf16 W_UK/W_UV, one-kernel rotary and routing, the shared expert
    # fused (attention 16, MoE block 10); 0.5.7 also folds both norms into the all-reduces (14)
    _, at_053 = _decode("deepseek-v3", 1, graphs=True, engine="sglang==0.5.3")
    _, at_057 = _decode("deepseek-v3", 1, graphs=True, engine="sglang==0.5.7")
    assert at_053 == 3 * (16 + 5) + 58 * (16 + 10) + 10
    assert at_057 == 3 * (14 + 5) + 58 * (14 + 10) + 10
    # vLLM states no count of its own: the generic MLA and DeepSeek-block extras apply
    _, vllm = _decode("deepseek-v3", 1, graphs=True, engine="vllm")
    assert vllm == 61 * (11 + 21) + 58 * (6 + 22) + 10


def test_deepseek_v3_batch_1_is_launch_bound_without_graphs() -> None:
    # SGLang 0.4.1.post2 (sgl-project/sglang#2643): 30.29 tok/s at batch 1, 760.52 at batch 32
    eager_1, _ = _decode("deepseek-v3", 1, graphs=False)
    eager_32, _ = _decode("deepseek-v3", 32, graphs=False)
    assert 20.0 < eager_1 < 40.0, eager_1
    assert 550.0 < eager_32 < 1000.0, eager_32
    graphed_1, _ = _decode("deepseek-v3", 1, graphs=True)
    assert graphed_1 > 1.5 * eager_1  # graphs replay the ~3,800 small kernels without the host
