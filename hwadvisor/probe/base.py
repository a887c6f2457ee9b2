"""The one small interface every vendor backend meets."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from hwadvisor.models import Device


@dataclass
class BackendResult:
    """What a backend found: its devices, and in a line why it found none (or what it skipped)."""

    devices: list[Device] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


class Backend(Protocol):
    """A vendor backend: reads its devices and never raises for a missing library or driver."""

    name: str

    def probe(self) -> BackendResult:
        """Return the devices this backend sees (empty with a note when none)."""
        ...


class GuardedBackend:
    """A backend whose `_probe` may raise: `probe` turns any exception into a note.

    A probe must not crash the CLI: an unexpected reading (a changed sysctl, an odd
    /proc file) costs this backend its devices, never the report.
    """

    name: str = ""

    def probe(self) -> BackendResult:
        """Return what `_probe` found; a note naming the failure when it raised."""
        try:
            return self._probe()
        except Exception as exc:  # a probe must not crash the CLI
            return BackendResult(notes=[f"{self.name}: probe failed ({exc})"])

    def _probe(self) -> BackendResult:
        raise NotImplementedError
