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
