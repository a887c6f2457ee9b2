"""Placeholder: datasheet profiles (being written)."""

from hwadvisor.models import Device


def enrich_devices(devices: list[Device]) -> tuple[list[Device], list[str]]:
    """Match probed devices to profiles; returns devices and hint lines (none yet)."""
    return devices, []
