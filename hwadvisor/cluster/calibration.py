"""Measured inter-node bandwidth from a saved cluster report, for planning (--calibration).

The figure is the all-reduce bus bandwidth of the inter-node group (the first rank of every
node) at its largest size. With one rank per node in that group, bus bandwidth is what each
GPU's network path carried in one direction: nccl-tests' busbw (doc/PERFORMANCE.md in
NVIDIA/nccl-tests) is defined so that it compares with a link's own speed. That is the unit of
Workload.inter_node_bandwidth_gbps (GB/s per GPU, one direction), which the time model caps
collectives with across nodes.
"""

from __future__ import annotations

from dataclasses import dataclass

from hwadvisor.models import Report


@dataclass(frozen=True)
class InterNodeFigure:
    """The measured inter-node bus bandwidth and where it came from."""

    gbps: float
    size_label: str
    nodes: int
    ranks_per_node: int


def inter_node_figure(report: Report) -> InterNodeFigure | None:
    """Return the report's inter-node all-reduce bus bandwidth at its largest size, if any."""
    cluster = report.cluster
    if cluster is None:
        return None
    measured = [c for c in cluster.collectives if c.scope == "inter-node"
                and c.op == "all_reduce" and c.status == "ok" and c.busbw_gbps]
    if not measured:
        return None
    largest = max(measured, key=lambda c: c.bytes)
    per_node = max((len(n.ranks) for n in cluster.nodes), default=1)
    return InterNodeFigure(gbps=float(largest.busbw_gbps or 0.0), size_label=largest.size_label,
                           nodes=len(cluster.nodes), ranks_per_node=per_node)
