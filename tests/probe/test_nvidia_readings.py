"""NVML readings checked field by field (issue 43): one impossible reading costs that field, not
the GPU; device names reach the terminal clean; a slow NVML is cut off by the probe's deadline.

Before: one negative reading (a power limit, a bus width) raised in pydantic and every GPU was
dropped (the headline then planned for the CPU), memory -1 printed as "-1 B", an escape in a
name reached the terminal, and a 0.3 s NVML call made `probe` take 43 s with no note.
"""

from __future__ import annotations

import time

import pytest
from nvml_fakes import FakeNvml, h200_gpu

from hwadvisor.probe.nvidia import NvidiaBackend, clean_name
from hwadvisor.probe.nvml import Nvml


def _probe(fake: FakeNvml):
    return NvidiaBackend(Nvml(backend=fake)).probe()


@pytest.mark.parametrize("field, value, dropped", [
    ("power_limit_mw", -1000, "power_limit_w"),
    ("bus_width", -8, "memory_bus_width_bits"),
    ("memory_total", -1, "memory_total_bytes"),
    ("memory_used", -5, "memory_used_bytes"),
    ("power_usage_mw", -3, "power_draw_w"),
])
def test_one_impossible_reading_drops_that_field_and_keeps_the_gpu(field: str, value: int,
                                                                   dropped: str) -> None:
    gpu = h200_gpu()
    setattr(gpu, field, value)
    result = _probe(FakeNvml([gpu]))
    assert len(result.devices) == 1
    device = result.devices[0]
    assert device.name == "NVIDIA H200"
    assert any(dropped in n and "cannot be" in n for n in result.notes), result.notes
    assert (device.memory_total_bytes or 0) >= 0 and (device.power_w or 0) >= 0
    if dropped == "memory_total_bytes":
        assert device.memory_total_bytes is None


def test_device_names_carry_no_control_characters() -> None:
    gpu = h200_gpu()
    gpu.name = "NVIDIA \x1b[31mH200\x1b[0m\x07\r\n"
    assert _probe(FakeNvml([gpu])).devices[0].name == "NVIDIA H200"
    assert clean_name("\x1b]0;title\x07GPU\x9b") == "0;titleGPU"
    assert clean_name("\x00\x1b") == "unnamed NVIDIA GPU"


class SlowNvml(FakeNvml):
    """Every NVML call takes `delay` seconds, as on a struggling driver."""

    delay = 0.05

    def __getattribute__(self, name: str):
        found = super().__getattribute__(name)
        if name.startswith("nvmlDevice") and callable(found):
            def slow(*args):
                time.sleep(SlowNvml.delay)
                return found(*args)
            return slow
        return found


def test_a_slow_nvml_is_cut_off_by_the_probe_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HWADVISOR_PROBE_DEADLINE_S", "0.3")
    started = time.monotonic()
    result = _probe(SlowNvml([h200_gpu(), h200_gpu()]))
    took = time.monotonic() - started
    assert took < 1.5, took  # without the deadline: ~60 calls x 0.05 s = 3 s
    assert any("answered slowly" in n and "HWADVISOR_PROBE_DEADLINE_S" in n
               for n in result.notes), result.notes
