"""A cluster rank's trials come back as what they found; the rank's report is not changed."""

from __future__ import annotations

import pytest
import report_factory as factory

from hwadvisor.cluster.job import LocalRun, Place
from hwadvisor.pipeline import with_found
from hwadvisor.validator import measure, runner


def test_rank_trials_returns_its_findings_and_leaves_the_report_and_device_alone(
        monkeypatch: pytest.MonkeyPatch) -> None:
    report = factory.probe_report().model_copy(update={"workload": factory.workload()})
    device = report.devices[0]
    trial = factory.bandwidth_trial(copy_gbps=4150.0)
    monkeypatch.setattr(runner, "run_trials", lambda ids, ctx, progress: ([trial], False))
    place = Place(local_rank=0, cuda_index=0, pci_bus_id=None)

    found = measure.rank_trials(report, device, place, ["memory-bandwidth"], True, False, None)

    assert report.trials == [] and device.measured is None  # read, not written
    assert found.trials == [trial] and found.rank_measured is not None
    run = LocalRun.of(with_found(report, found), device, found.rank_measured)
    assert run.report is not None and run.report.trials == [trial]
    assert run.device is not None and run.device.measured == found.rank_measured
    assert run.report.devices[0].measured == found.rank_measured
