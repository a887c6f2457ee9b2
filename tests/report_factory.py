"""Crafted reports for the report tests (schema, compare, markdown, plot).

The figures are illustrative test data, not measurements: each crafted report says so in its
notes. Datasheet figures of the H200 SXM follow NVIDIA's H200 product brief (141 GB HBM3e,
4.8 TB/s, dense BF16 989 TFLOP/s, dense FP8 1979 TFLOP/s, dense TF32 494.7 TFLOP/s).
"""

from __future__ import annotations

from hwadvisor.models import (
    Device,
    Estimate,
    HostInfo,
    Measured,
    Measurement,
    MemoryEstimate,
    Prediction,
    Recommendation,
    Rejected,
    Report,
    Times,
    TrialEnvironment,
    TrialResult,
    Validation,
    Workload,
)

CRAFTED = "crafted test fixture: every figure is illustrative, not a measurement"
# Eight readings around each crafted median (spread ~1%): enough for the median's 95% interval
# (models/stats.py median_interval needs 6), so compare can gate on the crafted figures.
SPREAD = (0.99, 0.995, 0.998, 1.0, 1.0, 1.002, 1.005, 1.01)
H200_SOURCE_NOTE = "datasheet: NVIDIA H200 Tensor Core GPU product brief (SXM, dense)"


def host() -> HostInfo:
    return HostInfo(os="Linux 6.8", platform="x86_64", cpu_model="Example CPU", cpu_cores=16,
                    cpu_threads=32, memory_total_bytes=128 * 10**9,
                    memory_available_bytes=120 * 10**9, python_version="3.11.7")


def h200(measured_bw_gbps: float | None = None,
         measured_tflops: dict[str, float] | None = None) -> Device:
    measured = None
    if measured_bw_gbps is not None or measured_tflops:
        measured = Measured(memory_bandwidth_gbps=measured_bw_gbps,
                            matmul_tflops=measured_tflops or {})
    return Device(
        index=0, vendor="nvidia", device_class="datacenter-gpu", name="NVIDIA H200",
        memory_total_bytes=143_771_533_312, memory_type="HBM3e",
        memory_bandwidth_gbps=4800.0, memory_bandwidth_source="datasheet",
        compute_capability="9.0", architecture="hopper", compute_units=132,
        formats=["fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "int8"],
        peak_tflops={"tf32": 494.7, "bf16": 989.4, "fp16": 989.4, "fp8": 1978.9},
        peak_tflops_source="datasheet", source="probe", profile_id="h200-sxm",
        measured=measured, notes=[H200_SOURCE_NOTE],
    )


def probe_report(**device_kw: object) -> Report:
    return Report(kind="probe", host=host(), devices=[h200(**device_kw)],  # type: ignore[arg-type]
                  device_class="datacenter-gpu", notes=[CRAFTED])


def workload() -> Workload:
    return Workload(model="llama-3-8b", phase="inference", batch=1, prompt_len=2048, gen_len=256,
                    params_total=8_030_261_248, params_active=8_030_261_248)


def estimate() -> Estimate:
    # Llama-3-8B bf16 on an H200: ~16 GB of weights read per decode step.
    return Estimate(
        memory=MemoryEstimate(weights_bytes=16_060_522_496, kv_cache_bytes=302_000_000,
                              activations_bytes=200_000_000, gradients_bytes=0,
                              optimizer_bytes=0, runtime_bytes=1_000_000_000,
                              total_bytes=17_562_522_496, device_memory_bytes=143_771_533_312,
                              headroom_bytes=126_209_010_816),
        fits=True, bottleneck="memory-bandwidth",
        bottleneck_why="decode reads 16.1 GB per step at 4800 GB/s (3.35 ms) vs 0.016 ms compute",
        flops_per_token=16.06e9, bytes_per_decode_step=16.36e9, arithmetic_intensity=0.98,
        ridge_point=206.1, peak_tflops_used=989.4, bandwidth_gbps_used=4800.0,
        times=Times(prefill_s=0.0352, prefill_compute_s=0.0332, prefill_memory_s=0.00341,
                    decode_step_s=0.00345, decode_compute_s=1.62e-5, decode_memory_s=0.00341,
                    launch_overhead_s=4e-5),
        tokens_per_s=290.0,
    )


def matmul_trial(bf16_tflops: float = 760.0, fp8_tflops: float = 1310.0) -> TrialResult:
    size = 8192
    flops = 2.0 * size**3

    def m(fmt: str, tflops: float) -> Measurement:
        t = flops / (tflops * 1e12)
        return Measurement(label=fmt, unit="s", samples=[t * f for f in SPREAD],
                           value=tflops, value_unit="TFLOP/s",
                           params={"m": size, "n": size, "k": size, "input_sets": 2})

    return TrialResult(
        id="matmul-peak", status="ok",
        measurements=[m("bf16", bf16_tflops), m("fp8", fp8_tflops)],
        effect={"bf16_tflops": bf16_tflops, "fp8_tflops": fp8_tflops},
        summary=f"cuda:0 8192^3 TFLOP/s: bf16 {bf16_tflops:.1f}, fp8 {fp8_tflops:.1f}",
        environment=TrialEnvironment(device="NVIDIA H200", torch_version="2.x"),
        wall_s=3.1,
    )


def bandwidth_trial(copy_gbps: float = 4150.0) -> TrialResult:
    moved = 2 * 2**30
    t = moved / (copy_gbps * 1e9)
    return TrialResult(
        id="memory-bandwidth", status="ok",
        measurements=[Measurement(label="copy", samples=[t * f for f in SPREAD],
                                  value=copy_gbps, value_unit="GB/s",
                                  params={"buffer_bytes": moved // 2, "bytes_moved": moved})],
        effect={"copy_gbps": copy_gbps},
        summary=f"device memory (cuda:0): copy {copy_gbps:.0f} GB/s",
        environment=TrialEnvironment(device="NVIDIA H200"),
        wall_s=1.2,
    )


def cuda_graphs_trial(speedup: float = 1.8, graph_s: float = 0.0021) -> TrialResult:
    eager = graph_s * speedup
    return TrialResult(
        id="cuda-graphs", status="ok",
        measurements=[
            Measurement(label="eager", samples=[eager * f for f in SPREAD]),
            Measurement(label="graph", samples=[graph_s * f for f in SPREAD]),
        ],
        effect={"speedup": speedup},
        summary=f"decode block, batch 1: graph replay {speedup:.2f}x faster",
        environment=TrialEnvironment(device="NVIDIA H200"),
        wall_s=2.0,
    )


def recommendation(rec_id: str, status: str, rank: int, measured: float | None,
                   trial: str | None, predicted_factor: float = 1.5) -> Recommendation:
    return Recommendation(
        id=rec_id, goal="inference-latency", title=f"Use {rec_id}", rank=rank,
        why="decode is launch- and bandwidth-bound at batch 1 (3.45 ms per step)",
        predicted=Prediction(metric="decode_step_s", unit="s", before=0.00345,
                             after=0.00345 / predicted_factor, factor=predicted_factor),
        trial=trial,
        validation=Validation(status=status, measured_factor=measured,  # type: ignore[arg-type]
                              detail=None if measured is None else f"measured x{measured:.2f}"),
    )


def validate_report(bf16_tflops: float = 760.0, copy_gbps: float = 4150.0,
                    graphs_status: str = "confirmed", speedup: float = 1.8,
                    device_measured: bool = False) -> Report:
    device = h200(measured_bw_gbps=copy_gbps, measured_tflops={"bf16": bf16_tflops}) \
        if device_measured else h200()
    return Report(
        kind="validate", host=host(), devices=[device], device_class="datacenter-gpu",
        notes=[CRAFTED], workload=workload(), estimate=estimate(), goal="inference-latency",
        recommendations=[
            recommendation("cuda-graphs", graphs_status, 1, speedup, "cuda-graphs", 1.6),
            recommendation("fp8-weights", "refuted", 2, 0.97, "fp8-linear", 1.4),
            recommendation("speculative-decoding", "pending", 3, None, None, 2.0),
        ],
        rejected=[Rejected(id="tensor-parallel", why_not="the model fits one GPU with 126 GB "
                                                        "headroom")],
        trials=[matmul_trial(bf16_tflops), bandwidth_trial(copy_gbps),
                cuda_graphs_trial(speedup),
                TrialResult(id="fp8-linear", status="error", reason="illustrative error")],
    )
