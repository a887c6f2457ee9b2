"""The registry is the one place that says which trial provides which hardware figure."""

from __future__ import annotations

import pytest

from hwadvisor.models import TrialResult
from hwadvisor.perfmodel import calibration
from hwadvisor.trials import registry
from hwadvisor.validator.runner import measured_from

# Where each figure lands in a --calibration (perfmodel/calibration.Calibration's fields):
# perfmodel may not import trials/, so its reader keys on trial ids; this holds them together.
CALIBRATION_FIELD = {"memory_bandwidth": "memory_bandwidth_gbps", "matmul_tflops": "matmul_tflops",
                     "attention_tflops": "attention_tflops", "launch_floor": "kernel_floor_s",
                     "host_transfer": "host_transfer_gbps", "bus_bandwidth": "busbw_gbps"}


def test_every_figure_has_one_trial() -> None:
    provided = [e.provides for e in registry.TRIALS.values() if e.provides is not None]
    assert sorted(provided) == sorted(CALIBRATION_FIELD)  # each figure once, none forgotten
    assert registry.MEASURE_TRIALS == ("memory-bandwidth", "matmul-peak")


@pytest.mark.parametrize("trial_id", [i for i, e in registry.TRIALS.items()
                                      if e.effect is not None and not e.effect.startswith("_")])
def test_calibration_reads_the_registered_effect(trial_id: str) -> None:
    entry = registry.TRIALS[trial_id]
    assert entry.provides is not None and entry.effect is not None
    result = TrialResult(id=trial_id, status="ok", effect={entry.effect: 123.0})
    found = calibration._from_trials([result], None)
    assert found[CALIBRATION_FIELD[entry.provides]] == 123.0


def test_matmul_figures_by_format() -> None:
    result = TrialResult(id=registry.providing("matmul_tflops"), status="ok",
                         effect={"bf16_tflops": 700.0, "bf16_sustained_tflops": 650.0})
    found = calibration._from_trials([result], None)
    assert found["matmul_tflops"] == {"bf16": 700.0, "bf16_sustained": 650.0}
    measured = measured_from([result])
    assert measured is not None
    assert measured.matmul_tflops == {"bf16": 700.0}
    assert measured.matmul_sustained_tflops == {"bf16": 650.0}


def test_measured_from_reads_bandwidth_by_figure() -> None:
    result = TrialResult(id=registry.providing("memory_bandwidth"), status="ok",
                         effect={"copy_gbps": 4100.0, "triad_gbps": 4000.0})
    measured = measured_from([result])
    assert measured is not None and measured.memory_bandwidth_gbps == 4100.0
    assert measured.trial_ids == ["memory-bandwidth"]
    assert measured_from([TrialResult(id="fp8-gemm", status="ok", effect={"speedup": 1.8})]) is None
