"""Hardware probes: one module per vendor backend behind one interface; detect.py picks them."""

from hwadvisor.probe.detect import collect

__all__ = ["collect"]
