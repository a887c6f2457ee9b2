"""llama.cpp multiplies F16 weights in fp32 on an x86 CPU (ggml converts them with F16C), so a
CPU's measured fp32 rate prices them, not its (absent or slow) bf16 one; an ARM CPU with FP16
vector arithmetic keeps fp16 (ggml-cpu/simd-mappings.h at the pinned 0c1e57098)."""

from __future__ import annotations

from hwadvisor.models import Device, DeviceClass, ModelOptions
from hwadvisor.perfmodel.resources import compute_dtype
from hwadvisor.workload import WorkloadRequest, build_workload


def _cpu(vendor: str) -> Device:
    return Device(index=0, vendor=vendor, device_class=DeviceClass.CPU, name="a CPU",
                  memory_total_bytes=32 << 30, source="probe")


def _workload(engine: str):  # type: ignore[no-untyped-def]
    return build_workload(WorkloadRequest(model="llama-3.2-1b", engine=engine,
                                          weights_dtype="fp16"))


def test_llama_cpp_f16_matmuls_run_in_fp32_on_x86() -> None:
    wl = _workload("llamacpp")
    assert compute_dtype(wl, ModelOptions(), _cpu("amd")) == "fp32"
    assert compute_dtype(wl, ModelOptions(), _cpu("intel")) == "fp32"
    assert compute_dtype(wl, ModelOptions(), _cpu("arm")) != "fp32"


def test_other_engines_keep_their_half_precision_on_x86() -> None:
    assert compute_dtype(_workload("hf"), ModelOptions(), _cpu("amd")) != "fp32"
