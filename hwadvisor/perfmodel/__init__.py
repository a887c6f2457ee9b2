"""The performance model: memory, FLOPs, bytes, op-group times, launches, communication, bottleneck.

Pure arithmetic on a Workload and a Device; `estimate()` is the one entry point.
"""

from hwadvisor.perfmodel.core import estimate

__all__ = ["estimate"]
