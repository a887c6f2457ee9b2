"""The Apple Neural Engine on Macs: its own (lower) memory bandwidth caps Core ML decode."""

from __future__ import annotations

from hwadvisor import profiles
from hwadvisor.engines import baseline_options
from hwadvisor.models import Estimate
from hwadvisor.perfmodel import estimate
from hwadvisor.workload import Sizing, WorkloadRequest, build_workload


def _decode(device_id: str, unit: str) -> Estimate:
    device = profiles.device_from_profile(device_id)
    wl = build_workload(WorkloadRequest(model="llama-2-7b", weights_dtype="int4", prompt_len=64,
                                        gen_len=80, engine="coreml"),
                        Sizing(device.memory_total_bytes, device.device_class))
    wl = wl.model_copy(update={"engine_options": {"compute_unit": unit}})
    return estimate(wl, device, baseline_options(wl, device))


def test_neural_engine_decode_streams_at_its_measured_bandwidth() -> None:
    # ANEMLL-Bench: the M1 Max Neural Engine reads 54.62 GB/s of the chip's 400.
    ane, gpu = _decode("m1-max", "npu"), _decode("m1-max", "gpu")
    assert ane.tokens_per_s and gpu.tokens_per_s
    assert 4.0 <= gpu.tokens_per_s / ane.tokens_per_s <= 8.5
    assert any("npu reaches 54.62 GB/s" in a for a in ane.assumptions)
    assert not any("reaches" in a for a in gpu.assumptions)


def test_the_m3_max_neural_engine_reads_twice_the_m1_max_one() -> None:
    m1, m3 = _decode("m1-max", "npu"), _decode("m3-max", "npu")
    assert m1.tokens_per_s and m3.tokens_per_s
    assert 1.8 <= m3.tokens_per_s / m1.tokens_per_s <= 2.4  # 120.22 vs 54.62 GB/s


def test_mac_profiles_mark_their_neural_engine_rate_as_derived() -> None:
    for pid in ("m1-max", "m2", "m2-pro", "m3", "m3-max", "m4"):
        paths = [p for p in profiles.device_from_profile(pid).compute_paths if p.unit == "npu"]
        assert len(paths) == 1, pid
        assert paths[0].kind == "effective" and paths[0].basis.startswith("derived")
        assert paths[0].bandwidth_gbps and "ANEMLL-Bench" in paths[0].bandwidth_basis
