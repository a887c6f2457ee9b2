"""The efficiency curves keep the shape physics gives them (perfmodel/efficiency.py)."""

from __future__ import annotations

import pytest

from hwadvisor import profiles
from hwadvisor.models import Device, ModelOptions
from hwadvisor.perfmodel import constants as C
from hwadvisor.perfmodel import efficiency as E
from hwadvisor.perfmodel import estimate
from hwadvisor.perfmodel.comm import Link, allreduce_s
from hwadvisor.perfmodel.resources import resolve
from hwadvisor.workload import WorkloadRequest, build_workload


def dev(profile_id: str) -> Device:
    return profiles.device_from_profile(profile_id, index=0)


SIZES = [1, 2, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 65536]


@pytest.mark.parametrize("half", [32.0, 128.0])
def test_gemm_shape_factor_is_monotone_and_at_most_one(half: float) -> None:
    for n, k in [(4096, 4096), (14336, 4096), (1024, 8192)]:
        factors = [E.gemm_shape_factor(m, n, k, half) for m in SIZES]
        assert factors == sorted(factors)  # non-decreasing in M
        assert all(0 < f <= 1.0 for f in factors)
    for m in (1, 64, 2048):
        assert [E.gemm_shape_factor(m, n, 4096, half) for n in SIZES] == sorted(
            E.gemm_shape_factor(m, n, 4096, half) for n in SIZES)
        assert [E.gemm_shape_factor(m, 4096, k, half) for k in SIZES] == sorted(
            E.gemm_shape_factor(m, 4096, k, half) for k in SIZES)
    assert E.gemm_shape_factor(8192, 8192, 8192, half) == pytest.approx(1.0)


def test_gemm_peak_share_is_a_share() -> None:
    for family in C.GEMM_PEAK_FRACTION:
        for dtype in ("bf16", "fp8", "fp4", "fp32"):
            assert 0 < E.gemm_peak_fraction(family, dtype) <= 1.0, (family, dtype)
    # Hopper's bf16 share is the H200 matmul-peak trial's (758.7 of 989.5 TFLOP/s)
    assert E.gemm_peak_fraction("nvidia-hopper", "bf16") == pytest.approx(758.7 / 989.5, abs=0.01)


@pytest.mark.parametrize("profile_id", profiles.ids() + profiles.variant_ids())
def test_achievable_bandwidth_never_exceeds_the_datasheet(profile_id: str) -> None:
    device = dev(profile_id)
    family = E.device_family(device)
    assert 0 < E.stream_fraction(family) <= 1.0
    res = resolve(build_workload(WorkloadRequest(model="llama-3.2-1b")), device, ModelOptions())
    assert res.stream_gbps <= res.bandwidth_gbps
    assert res.gemm_tflops <= res.peak_tflops


def test_every_table_share_is_positive() -> None:
    for table in (C.STREAM_BANDWIDTH_FRACTION, C.GEMV_EFFICIENCY, C.KERNEL_COMPUTE_FRACTION,
                  C.KV_READ_EFFICIENCY, C.KERNEL_FLOOR_S):
        assert all(v >= 0 for v in table.values())
    assert all(0 < v <= 1 for v in C.STREAM_BANDWIDTH_FRACTION.values())


def test_families() -> None:
    assert E.device_family(dev("h200-sxm")) == "nvidia-hopper"
    assert E.device_family(dev("a100-80gb")) == "nvidia-ampere-hbm"
    assert E.device_family(dev("rtx-4090")) == "nvidia-ada"
    assert E.device_family(dev("m2-ultra")) == "apple-ultra"
    assert E.device_family(dev("m3-max")) == "apple-max"
    assert E.device_family(dev("m4-pro")) == "apple-pro"
    assert E.device_family(dev("m4")) == "apple-base"
    assert E.device_family(dev("mi300x")) == "amd-cdna3"
    assert E.device_family(dev("rx-7900-xtx")) == "amd-rdna3"


def test_kernel_families_by_format_and_engine() -> None:
    hopper = "nvidia-hopper"
    from hwadvisor.engines import get_engine

    def kernel(dtype, engine, family, option=None):
        return E.quant_kernel(dtype, get_engine(engine).kernels, family, option)

    assert kernel("bf16", "vllm", hopper) == "cublas"
    assert kernel("int4", "vllm", hopper) == "marlin"
    # ROCm: vLLM's Triton W4A16 / ExLlama kernels, Marlin being CUDA-only
    assert kernel("int4", "vllm", "amd-cdna3") == "exllamav2"
    assert kernel("int4", "sglang", "amd-cdna3") == "torch-int4"
    assert kernel("int4", "hf", hopper) == "torch-int4"
    assert kernel("q4_0", "llamacpp", hopper) == "llamacpp"
    assert kernel("q4_k_m", "llamacpp", hopper) == "llamacpp-k"
    assert kernel("bf16", "llamacpp", hopper) == "llamacpp-f16"
    assert kernel("mlx-4bit", "mlx", "apple-max") == "mlx"
    assert kernel("fp8", "hf", hopper) == "torch-scaled-mm"
    assert kernel("fp8", "vllm", hopper) == "cutlass-fp8"
    assert kernel("nf4", "hf", hopper) == "bitsandbytes"
    assert kernel("int4", "exllamav2", "amd-cdna3") == "exllamav2"
    assert kernel("int4", "hf", hopper, "marlin") == "marlin"
    # K-quants stream a smaller share than the legacy quants on the same chip
    assert E.gemv_efficiency("llamacpp-k", "apple-max") < E.gemv_efficiency("llamacpp", "apple-max")


def test_collectives_grow_with_size_and_small_ones_pay_the_latency() -> None:
    link = Link(360.0, "nvlink", "test")
    times = [allreduce_s(s, 8, link) for s in (1e3, 1e5, 1e6, 25e6, 4e8, 1e9)]
    assert times == sorted(times)
    assert times[0] == pytest.approx(C.COLLECTIVE_LATENCY_S["nvlink"], rel=0.05)
    # bus bandwidth reached grows with the message (the H200 trial: 25 MiB < layer < 1 GiB)
    reached = [2 * 7 / 8 * s / (allreduce_s(s, 8, link) - 0) for s in (25e6, 4e8, 1e9)]
    assert reached == sorted(reached)


INFER = [("llama-3-8b", "hf", "h200-sxm"), ("llama-3-8b", "vllm", "h100-sxm"),
         ("mixtral-8x7b", "vllm", "h200-sxm"), ("llama-3-8b", "llamacpp", "rtx-4090"),
         ("qwen3-4b", "mlx", "m4-max")]


@pytest.mark.parametrize("model,engine,device", INFER)
def test_time_never_falls_as_tokens_grow(model: str, engine: str, device: str) -> None:
    d = dev(device)
    prefill = [estimate(build_workload(WorkloadRequest(model=model, prompt_len=p, gen_len=0,
                                                       engine=engine)), d)
               .times.prefill_s for p in (16, 128, 512, 2048, 8192)]
    assert prefill == sorted(prefill)
    decode = [estimate(build_workload(WorkloadRequest(model=model, batch=b,
                                                      engine=engine)), d).times.decode_step_s
              for b in (1, 2, 8, 32, 128)]
    assert decode == sorted(decode)
    context = [estimate(build_workload(WorkloadRequest(model=model, prompt_len=p,
                                                       engine=engine)), d).times.decode_step_s
               for p in (16, 1024, 8192)]
    assert context == sorted(context)


def test_training_time_never_falls_as_tokens_grow() -> None:
    d = dev("h200-sxm")
    steps = [estimate(build_workload(WorkloadRequest(model="llama-3.2-1b", phase="training",
                                                     batch=b)), d)
             .times.train_step_s for b in (1, 2, 4, 8)]
    assert steps == sorted(steps)


CASES = [("llama-3-8b", dict(batch=1)), ("llama-3-8b", dict(batch=32, prompt_len=512)),
         ("llama-3.2-1b", dict(phase="training", batch=4)), ("mixtral-8x7b", dict(batch=4)),
         ("llama-3-8b", dict(gen_len=0, batch=8))]


@pytest.mark.parametrize(("flag", "other", "model", "kw", "device"), [
    *[("compiled", "cuda_graphs", m, kw, d) for m, kw in CASES
      for d in ("h200-sxm", "rtx-4090", "a100-80gb")],
    *[("cuda_graphs", "compiled", m, kw, d) for m, kw in CASES
      if kw.get("phase") != "training" for d in ("h200-sxm", "rtx-4090", "mi300x")],
])
def test_compiling_or_graphs_are_never_slower(flag: str, other: str, model: str, kw: dict,
                                              device: str) -> None:
    w = build_workload(WorkloadRequest(model=model, **kw))
    d = dev(device)
    for setting in (False, True):
        before = estimate(w, d, ModelOptions(**{other: setting}))
        after = estimate(w, d, ModelOptions(**{other: setting, flag: True}))
        for key in ("prefill_s", "decode_step_s", "train_step_s"):
            slow, fast = getattr(before.times, key), getattr(after.times, key)
            if slow is not None:
                assert fast <= slow * (1 + 1e-9), key
        if flag == "cuda_graphs":
            assert after.times.launch_overhead_s <= before.times.launch_overhead_s


def test_ultra_chips_reach_a_smaller_share_of_their_bandwidth_with_llamacpp() -> None:
    def share(profile_id: str) -> float:
        d = dev(profile_id)
        est = estimate(build_workload(WorkloadRequest(model="llama-2-7b", weights_dtype="q4_0",
                                                      prompt_len=1, gen_len=128,
                                                      engine="llamacpp")), d)
        assert est.bytes_per_decode_step and est.tokens_per_s and d.memory_bandwidth_gbps
        return est.bytes_per_decode_step * est.tokens_per_s / (d.memory_bandwidth_gbps * 1e9)

    assert share("m2-ultra") < share("m2-max") < share("m2-pro")
    assert share("m3-ultra") < share("m3-max")


def test_int4_torch_kernel_loses_its_gain_as_batch_grows() -> None:
    d = dev("h200-sxm")
    gains = []
    for batch in (1, 4, 16, 64):
        bf16 = estimate(build_workload(WorkloadRequest(model="llama-3-8b", batch=batch,
                                                       engine="hf")), d,
                        ModelOptions(cuda_graphs=True))
        int4 = estimate(build_workload(WorkloadRequest(model="llama-3-8b", batch=batch, engine="hf",
                                       weights_dtype="int4")), d, ModelOptions(cuda_graphs=True))
        gains.append(bf16.times.decode_step_s / int4.times.decode_step_s)
    assert gains == sorted(gains, reverse=True)
    assert gains[0] > 1.2 and gains[-1] < 1.0


def test_power_cap_slows_compute_not_memory() -> None:
    from hwadvisor.models import NvidiaDetails

    d = dev("h100-sxm")
    capped = d.model_copy(update={"nvidia": NvidiaDetails(power_limit_w=500.0)})
    w = build_workload(WorkloadRequest(model="llama-3-8b", gen_len=0, batch=8))
    assert estimate(w, capped).times.prefill_compute_s > estimate(w, d).times.prefill_compute_s
    assert estimate(w, capped).bandwidth_gbps_used == estimate(w, d).bandwidth_gbps_used
