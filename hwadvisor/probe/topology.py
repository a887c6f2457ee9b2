"""GPU topology helpers: NVLink facts as data, CPU-affinity masks, and `nvidia-smi topo -m`.

`nvidia-smi topo -m` is the fallback when NVML's link queries fail: it prints the link between
each pair of GPUs (NV18 = a bonded set of 18 NVLinks; PIX, PXB, PHB, NODE, SYS = PCIe paths)
and each GPU's CPU and NUMA affinity.
"""

from __future__ import annotations

import re
import shutil
import subprocess  # noqa: F401 - kept so `topology.subprocess` still names the module
from collections.abc import Sequence
from dataclasses import dataclass, field

from hwadvisor.probe.runcmd import Runner, run_command

# NVML's nvmlDeviceGetNvLinkVersion returns NVML_NVLINK_VERSION_* (nvml.h), not the NVLink
# generation: 1 = 1.0, 2 = 2.0, 3 = 2.2, 4 = 3.0, 5 = 3.1, 6 = 4.0, 7 = 5.0, 8 = 6.0.
# An H100/H200 reports 6, i.e. NVLink 4 (see tests/fixtures/nvidia-h200x2/nvml-links.json).
NVML_NVLINK_VERSION_TO_GENERATION: dict[int, int] = {1: 1, 2: 2, 3: 2, 4: 3, 5: 3, 6: 4, 7: 5, 8: 6}

# GB/s per link in ONE direction, by NVLink generation. Derived from NVIDIA's per-GPU totals
# (https://www.nvidia.com/en-us/data-center/nvlink/ and the P100/V100/A100/H100/B200
# datasheets): P100 4 links = 160 GB/s bidirectional -> 20; V100 6 links = 300 -> 25;
# A100 12 links = 600 -> 25; H100 18 links = 900 -> 25; B200 18 links = 1800 -> 50.
NVLINK_GBPS_PER_LINK_PER_DIRECTION: dict[int, float] = {1: 20.0, 2: 25.0, 3: 25.0, 4: 25.0,
                                                         5: 50.0}

# PCIe GB/s per lane in ONE direction, by generation: the raw rate after line coding (8b/10b for
# Gen1-2, 128b/130b for Gen3-5, FLIT/PAM4 for Gen6), per the PCI-SIG base specifications
# (https://pcisig.com/specifications): Gen3 8 GT/s = 0.985, Gen4 = 1.969, Gen5 = 3.938.
PCIE_GBPS_PER_LANE_PER_DIRECTION: dict[int, float] = {
    1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563,
}

# `nvidia-smi topo -m` legend codes, nearest first.
PCIE_LINK_CODES: tuple[str, ...] = ("PIX", "PXB", "PHB", "NODE", "SYS")

# nvmlDeviceGetTopologyCommonAncestor levels (nvml.h nvmlGpuTopologyLevel_t) -> topo -m codes.
NVML_TOPOLOGY_LEVEL_TO_CODE: dict[int, str] = {
    10: "PIX",   # NVML_TOPOLOGY_SINGLE
    20: "PXB",   # NVML_TOPOLOGY_MULTIPLE
    30: "PHB",   # NVML_TOPOLOGY_HOSTBRIDGE
    40: "NODE",  # NVML_TOPOLOGY_NODE
    50: "SYS",   # NVML_TOPOLOGY_SYSTEM
}

_NV_CODE = re.compile(r"^NV(\d+)$")
_GPU_NAME = re.compile(r"^GPU(\d+)$")


def nvlink_generation(nvml_version: int | None) -> int | None:
    """NVLink generation (4 for H100/H200) from NVML's NVML_NVLINK_VERSION_* value."""
    if nvml_version is None:
        return None
    return NVML_NVLINK_VERSION_TO_GENERATION.get(int(nvml_version))


def nvlink_bandwidth_gbps(links_active: int | None, generation: int | None) -> float | None:
    """Aggregate NVLink GB/s, one direction: links x per-link rate (None if unknown)."""
    if not links_active or generation is None:
        return None
    per_link = NVLINK_GBPS_PER_LINK_PER_DIRECTION.get(generation)
    return None if per_link is None else links_active * per_link


def pcie_bandwidth_gbps(generation: int | None, width: int | None) -> float | None:
    """PCIe GB/s one direction for a link generation and width (None when either is unknown)."""
    if not generation or not width:
        return None
    per_lane = PCIE_GBPS_PER_LANE_PER_DIRECTION.get(generation)
    return None if per_lane is None else round(per_lane * width, 1)


def nvlinks_in_code(code: str | None) -> int | None:
    """Count the NVLinks in a topo -m code: 'NV18' -> 18; PCIe codes -> None."""
    if not code:
        return None
    match = _NV_CODE.match(code.strip())
    return int(match.group(1)) if match else None


def cpu_ranges(cpus: Sequence[int]) -> str | None:
    """CPU ids as compact ranges, e.g. [0, 1, 2, 3, 8] -> '0-3,8' (None when empty)."""
    ordered = sorted(set(cpus))
    if not ordered:
        return None
    parts: list[str] = []
    start = prev = ordered[0]
    for cpu in ordered[1:]:
        if cpu == prev + 1:
            prev = cpu
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = cpu
    parts.append(str(start) if start == prev else f"{start}-{prev}")
    return ",".join(parts)


def cpus_from_masks(masks: Sequence[int]) -> list[int]:
    """CPU ids set in NVML's affinity words (64 CPUs per word, lowest word first)."""
    cpus: list[int] = []
    for word_index, word in enumerate(masks):
        value = int(word)
        for bit in range(64):
            if value >> bit & 1:
                cpus.append(word_index * 64 + bit)
    return cpus


@dataclass
class TopoMatrix:
    """What `nvidia-smi topo -m` says: links between GPUs and each GPU's affinity."""

    gpus: list[int] = field(default_factory=list)
    links: dict[tuple[int, int], str] = field(default_factory=dict)
    cpu_affinity: dict[int, str | None] = field(default_factory=dict)
    numa_node: dict[int, int | None] = field(default_factory=dict)

    def link(self, gpu: int, peer: int) -> str | None:
        """Return the code between two GPUs (e.g. 'NV18', 'SYS'), None when not listed."""
        return self.links.get((gpu, peer))


def _cells(line: str) -> list[str]:
    # nvidia-smi separates columns with tabs; fall back to runs of 2+ spaces if a copy lost them.
    parts = line.split("\t") if "\t" in line else re.split(r" {2,}", line)
    return [part.strip() for part in parts]


def _int_or_none(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def parse_topo_matrix(text: str) -> TopoMatrix:
    """Parse `nvidia-smi topo -m` output; unknown or missing cells become None, never raise."""
    matrix = TopoMatrix()
    lines = [line for line in text.splitlines() if line.strip()]
    header_index = next((i for i, line in enumerate(lines) if "GPU0" in line
                         and not _GPU_NAME.match(_cells(line)[0] or "")), None)
    if header_index is None:
        return matrix
    header = [cell for cell in _cells(lines[header_index]) if cell]
    columns: list[str] = []
    for cell in header:
        if "Affinity" in cell or "NUMA" in cell:
            break
        columns.append(cell)
    for line in lines[header_index + 1:]:
        cells = _cells(line)
        row = _GPU_NAME.match(cells[0]) if cells else None
        if row is None:
            if line.startswith("Legend"):
                break
            continue
        gpu = int(row.group(1))
        matrix.gpus.append(gpu)
        values = cells[1:1 + len(columns)]
        for column, value in zip(columns, values, strict=False):
            peer = _GPU_NAME.match(column)
            if peer is not None and int(peer.group(1)) != gpu and value and value != "X":
                matrix.links[(gpu, int(peer.group(1)))] = value
        rest = [cell for cell in cells[1 + len(columns):] if cell]
        affinity = rest[0] if rest else None
        matrix.cpu_affinity[gpu] = affinity if affinity not in (None, "N/A") else None
        matrix.numa_node[gpu] = _int_or_none(rest[1]) if len(rest) > 1 else None
    return matrix


# The runner lives in runcmd.py (shared by every backend); these names stay for old callers.
_run = run_command


def read_topo_matrix(runner: Runner | None = None, timeout_s: float = 10.0) -> TopoMatrix | None:
    """Run `nvidia-smi topo -m` (no shell, with a timeout) and parse it; None when unavailable."""
    binary = shutil.which("nvidia-smi")
    if runner is None:
        if binary is None:
            return None
        runner = _run
    text = runner([binary or "nvidia-smi", "topo", "-m"], timeout_s)
    if not text:
        return None
    matrix = parse_topo_matrix(text)
    return matrix if matrix.gpus else None
