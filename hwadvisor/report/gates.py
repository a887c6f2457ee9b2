"""CI gates over a report: pure functions that return the tripped gates, in words.

A command that offers gates (recommend, validate) calls `apply_gates`, stores the result in
`report.gates_tripped`, writes its outputs, and exits with ExitCode.GATE_TRIPPED when the list is
not empty (see hwadvisor.cli.console.exit_for_gates).
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import Enum

from hwadvisor.models import Report
from hwadvisor.report.figures import measured_bandwidth_gbps


class FailOn(str, Enum):
    """Verdicts (and trial statuses) that fail a CI run when asked with --fail-on."""

    REFUTED = "refuted"
    INCONCLUSIVE = "inconclusive"
    ERROR = "error"
    UNSUPPORTED = "unsupported"


def _values(fail_on: Iterable[FailOn | str] | None) -> set[str]:
    return {f.value if isinstance(f, FailOn) else str(f).lower() for f in (fail_on or [])}


def verdict_gates(report: Report, fail_on: Iterable[FailOn | str] | None) -> list[str]:
    """Tripped --fail-on gates: recommendations with a verdict in fail_on, trials, the load test.

    A trial is listed only when no tripped recommendation already names it.
    """
    wanted = _values(fail_on)
    if not wanted:
        return []
    tripped: list[str] = []
    named_trials: set[str] = set()
    for rec in report.recommendations:
        status = rec.validation.status
        if status in wanted:
            if rec.trial:
                named_trials.add(rec.trial)
            detail = f": {rec.validation.detail}" if rec.validation.detail else ""
            tripped.append(f"--fail-on {status}: recommendation {rec.id} was {status}{detail}")
    for trial in report.trials:
        if trial.status in wanted and trial.id not in named_trials:
            reason = f": {trial.reason}" if trial.reason else ""
            tripped.append(f"--fail-on {trial.status}: trial {trial.id} {trial.status}{reason}")
    test = report.load_test
    if test is not None and test.status in wanted:
        tripped.append(f"--fail-on {test.status}: the load test of {test.endpoint} was "
                       f"{test.status}: {test.detail}")
    return tripped


def bandwidth_gates(report: Report, min_fraction: float | None) -> list[str]:
    """Devices whose measured bandwidth is below min_fraction of the theoretical one.

    Fails closed: asking for the gate on a report that has nothing to check trips it, because a
    gate that passes when it could not look would let a broken CI setup pass silently.
    """
    if min_fraction is None:
        return []
    tripped: list[str] = []
    checked = 0
    for device in report.devices:
        theoretical = device.memory_bandwidth_gbps
        measured = measured_bandwidth_gbps(report, device)
        if not theoretical or measured is None:
            continue
        checked += 1
        value, source = measured
        fraction = value / theoretical
        if fraction < min_fraction:
            tripped.append(
                f"--min-bandwidth-fraction {min_fraction:g}: device {device.index} ({device.name}) "
                f"measured {value:.0f} GB/s ({source}) = {fraction:.1%} of the theoretical "
                f"{theoretical:.0f} GB/s"
            )
    if checked == 0:
        tripped.append(
            f"--min-bandwidth-fraction {min_fraction:g}: no device has both a measured and a "
            "theoretical memory bandwidth, so the gate could not be checked (run the "
            "memory-bandwidth trial, or probe --measure, on a device with a known datasheet)"
        )
    return tripped


def apply_gates(
    report: Report,
    fail_on: Iterable[FailOn | str] | None = None,
    min_bw_fraction: float | None = None,
) -> list[str]:
    """All tripped gates of the report, in words; empty when every asked gate passed."""
    return verdict_gates(report, fail_on) + bandwidth_gates(report, min_bw_fraction)
