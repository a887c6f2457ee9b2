"""The performance model: memory, FLOPs, bytes, op-group times, launches, communication, bottleneck.

Pure arithmetic on a Workload and a Device; `estimate()` is the entry point (`estimate_memory()`
its memory part alone; `PerfModel` both, as the rules engine calls them).
"""

from hwadvisor.perfmodel.core import PerfModel, estimate, estimate_memory

__all__ = ["PerfModel", "estimate", "estimate_memory"]
