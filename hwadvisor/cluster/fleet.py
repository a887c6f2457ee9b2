"""The fleet view: which groups to measure, and what every rank sent turned into `Cluster`.

Groups (plan_rounds), measured one round at a time so that groups of a round run at once and
rounds never overlap:
1. world: every rank, all-reduce, all-gather and reduce-scatter (the collectives trial's ops);
2. intra-node: the ranks of each node, all nodes at once, all-reduce;
3. inter-node: the first rank of every node, all-reduce;
4. node pairs: the first ranks of neighbouring nodes (a ring of nodes, its edges coloured so
   that no node is in two pairs of one round), all-reduce at the largest size. A node's
   inter-node figure is the better of its two pairs: a slow node drags both of its pairs
   down, a healthy neighbour of it still has one good pair.
A group with the same ranks as an earlier one is not timed again: its figures are the earlier
group's (one rank per node: inter-node = world; two nodes: their pair = inter-node).

Outliers: a figure below OUTLIER_RATIO x the median of its peers (GPUs of the same model for
memory bandwidth and matmul TFLOP/s; all nodes for the link figures).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from pydantic import Field

from hwadvisor.models import (
    Cluster,
    ClusterCollective,
    ClusterNode,
    ClusterRank,
    Device,
    HostInfo,
    Measured,
    Outlier,
    TrialResult,
)
from hwadvisor.models.hardware import Strict
from hwadvisor.trials import registry
from hwadvisor.trials.distributed import ALL_OPS, GroupRun

# "Clearly below" the fleet: more than 10% under the median. On one H200 the memory-bandwidth
# trial read 4092-4239 GB/s and matmul-peak bf16 748-782 TFLOP/s over six runs (2026-11-30 and
# 12-01, docs/benchmarks.md): within ±2.3% of their middle, so a 10% deficit is not run-to-run
# noise. The same 10% marks a trial's own samples noisy (STYLE.md, "Trials are data").
OUTLIER_RATIO = 0.9
# A clock reading under this share of its maximum right after a trial counts as a lowered clock.
CLOCK_RATIO = 0.9
IDLE_REASONS = ("gpu_idle",)  # an idle GPU's clock drop is no cause


class RankPayload(Strict):
    """What one rank sends rank 0: who it is, what it probed and measured, what failed."""

    rank: int
    local_rank: int
    node_rank: int
    hostname: str
    host: HostInfo | None = None
    device: Device | None = None
    measured: Measured | None = None
    trials: list[TrialResult] = Field(default_factory=list)
    error: str | None = None
    nccl_env: dict[str, str] = Field(default_factory=dict)
    collectives: dict[str, list[dict[str, object]]] = Field(default_factory=dict)


class Identity(Strict):
    """The first message every rank sends every other: enough to plan the groups."""

    rank: int
    local_rank: int
    node_rank: int | None
    hostname: str
    has_gpu: bool


def node_of_ranks(identities: Sequence[Identity]) -> list[int]:
    """Return each rank's node rank: the launcher's, else numbered by hostname in rank order."""
    ordered = sorted(identities, key=lambda i: i.rank)
    if all(i.node_rank is not None for i in ordered):
        return [int(i.node_rank) for i in ordered]  # type: ignore[arg-type]
    hosts: dict[str, int] = {}
    for ident in ordered:
        hosts.setdefault(ident.hostname, len(hosts))
    return [hosts[i.hostname] for i in ordered]


def ranks_by_node(node_of_rank: Sequence[int]) -> dict[int, list[int]]:
    """Node rank -> its ranks, ascending; nodes in ascending order."""
    found: dict[int, list[int]] = {}
    for rank, node in enumerate(node_of_rank):
        found.setdefault(node, []).append(rank)
    return {node: found[node] for node in sorted(found)}


def ring_rounds(nodes: Sequence[int]) -> list[list[tuple[int, int]]]:
    """Pair neighbouring nodes of a ring in rounds where no node is in two pairs.

    Two nodes make one pair. For n >= 3 the ring's n edges take two rounds when n is even
    (alternate edges) and three when n is odd (the closing edge alone).
    """
    n = len(nodes)
    if n < 2:
        return []
    if n == 2:
        return [[(nodes[0], nodes[1])]]
    rounds: list[list[tuple[int, int]]] = [[], []] if n % 2 == 0 else [[], [], []]
    for i in range(n):
        colour = 2 if n % 2 and i == n - 1 else i % 2
        rounds[colour].append((nodes[i], nodes[(i + 1) % n]))
    return rounds


@dataclass
class GroupPlan:
    """Every group of the job (runs), the ones timed round by round, and the aliased ones."""

    runs: list[GroupRun] = field(default_factory=list)
    rounds: list[list[GroupRun]] = field(default_factory=list)
    aliases: dict[str, str] = field(default_factory=dict)  # key -> the key timed for it


def plan_groups(node_of_rank: Sequence[int], sizes: Sequence[tuple[str, int]]) -> GroupPlan:
    """Plan the world, intra-node, inter-node and node-pair groups (see the module docstring)."""
    plan = GroupPlan()
    if len(node_of_rank) < 2 or not sizes:
        return plan
    sizes = [(str(label), int(n)) for label, n in sizes]
    largest = [max(sizes, key=lambda s: s[1])]
    by_node = ranks_by_node(node_of_rank)
    leaders = {node: ranks[0] for node, ranks in by_node.items()}
    _add_round(plan, [GroupRun("world", list(range(len(node_of_rank))), list(ALL_OPS), sizes)])
    _add_round(plan, [GroupRun(f"intra-node:{node}", ranks, ["all_reduce"], sizes)
                      for node, ranks in by_node.items() if len(ranks) >= 2])
    if len(leaders) >= 2:
        _add_round(plan, [GroupRun("inter-node", list(leaders.values()), ["all_reduce"], sizes)])
    for pairs in ring_rounds(list(leaders)):
        _add_round(plan, [GroupRun(f"node-pair:{a}-{b}", sorted([leaders[a], leaders[b]]),
                                   ["all_reduce"], largest) for a, b in pairs])
    return plan


def _add_round(plan: GroupPlan, runs: list[GroupRun]) -> None:
    """Add a round; a group with the ranks of one timed before is an alias, not timed again."""
    timed = {tuple(run.ranks): run.key for round_ in plan.rounds for run in round_}
    this: list[GroupRun] = []
    for run in runs:
        plan.runs.append(run)
        same = timed.get(tuple(run.ranks))
        if same is not None:
            plan.aliases[run.key] = same
        else:
            timed[tuple(run.ranks)] = run.key
            this.append(run)
    if this:
        plan.rounds.append(this)


def scope_of(key: str) -> str:
    """Return the scope of a group key: 'intra-node:3' -> 'intra-node'."""
    return key.split(":", 1)[0]


def collectives_from(plan: GroupPlan, results: dict[str, list[dict[str, object]]],
                     node_of_rank: Sequence[int]) -> list[ClusterCollective]:
    """Turn the groups' results (by timed key) into report entries, aliased groups included."""
    entries: list[ClusterCollective] = []
    for run in plan.runs:
        labels = {label for label, _ in run.sizes}
        for item in results.get(plan.aliases.get(run.key, run.key), []):
            if item.get("op") in run.ops and item.get("label") in labels:
                entries.append(_entry(run, item, node_of_rank))
    return entries


def _number(item: dict[str, object], name: str) -> float | None:
    value = item.get(name)
    return float(value) if isinstance(value, (int, float)) else None


def _entry(run: GroupRun, item: dict[str, object],
           node_of_rank: Sequence[int]) -> ClusterCollective:
    status = str(item.get("status", "ok"))
    return ClusterCollective(
        scope=scope_of(run.key),  # type: ignore[arg-type]
        node_ranks=sorted({node_of_rank[r] for r in run.ranks}),
        group_size=len(run.ranks), op=str(item["op"]), size_label=str(item["label"]),
        bytes=int(str(item["bytes"])),
        busbw_gbps=_number(item, "busbw_gbps"), algbw_gbps=_number(item, "algbw_gbps"),
        status=status if status in ("ok", "unsupported") else "error",  # type: ignore[arg-type]
        reason=str(item["reason"]) if item.get("reason") else None,
        error=_number(item, "error"),
    )


# --- nodes -----------------------------------------------------------------------------------


def _largest_all_reduce(entries: Iterable[ClusterCollective]) -> ClusterCollective | None:
    ok = [e for e in entries if e.op == "all_reduce" and e.status == "ok" and e.busbw_gbps]
    return max(ok, key=lambda e: e.bytes) if ok else None


def intra_node_busbw(entries: Sequence[ClusterCollective], node: int) -> float | None:
    """All-reduce bus bandwidth among one node's ranks at the largest size (None: not run)."""
    best = _largest_all_reduce(e for e in entries
                               if e.scope == "intra-node" and e.node_ranks == [node])
    return best.busbw_gbps if best is not None else None


def inter_node_busbw(entries: Sequence[ClusterCollective], node: int) -> float | None:
    """Return the better of a node's pairs' all-reduce bus bandwidth at the largest size."""
    pairs = [e for e in entries if e.scope == "node-pair" and node in e.node_ranks]
    largest = _largest_all_reduce(pairs)
    if largest is None:
        return None
    figures = [e.busbw_gbps for e in pairs if e.bytes == largest.bytes and e.op == "all_reduce"
               and e.status == "ok" and e.busbw_gbps]
    return max(figures) if figures else None


def env_differences(here: dict[str, str], rank0: dict[str, str]) -> dict[str, str | None]:
    """Return the variables whose value here differs from rank 0's (None: not set here)."""
    keys = sorted(set(here) | set(rank0))
    return {k: here.get(k) for k in keys if here.get(k) != rank0.get(k)}


def cluster_rank(payload: RankPayload) -> ClusterRank:
    """Return the report's entry for one rank."""
    device = payload.device
    return ClusterRank(
        rank=payload.rank, local_rank=payload.local_rank,
        device_index=device.index if device is not None else None,
        device_name=device.name if device is not None else "cpu",
        measured=payload.measured, status="error" if payload.error else "ok",
        error=payload.error,
        failed_trials=[t.id for t in payload.trials if t.status == "error"],
    )


def build_nodes(payloads: Sequence[RankPayload], entries: Sequence[ClusterCollective]
                ) -> list[ClusterNode]:
    """Group the ranks by node, with each node's GPUs, link figures and NCCL differences."""
    rank0_env = payloads[0].nccl_env if payloads else {}
    grouped: dict[int, list[RankPayload]] = {}
    for payload in sorted(payloads, key=lambda p: p.rank):
        grouped.setdefault(payload.node_rank, []).append(payload)
    nodes = []
    for node, members in sorted(grouped.items()):
        devices = []
        for member in members:
            if member.device is not None:
                devices.append(member.device.model_copy(update={"measured": member.measured}))
        nodes.append(ClusterNode(
            node_rank=node, hostname=members[0].hostname,
            ranks=[cluster_rank(m) for m in members], devices=devices,
            intra_node_busbw_gbps=intra_node_busbw(entries, node),
            inter_node_busbw_gbps=inter_node_busbw(entries, node),
            nccl_env_differs=env_differences(members[0].nccl_env, rank0_env),
        ))
    return nodes


# --- outliers --------------------------------------------------------------------------------


def gpu_figures(measured: Measured | None) -> dict[str, float]:
    """Return the figures of one rank compared across the fleet: bandwidth and matmul."""
    if measured is None:
        return {}
    figures = {f"matmul_{fmt}_tflops": v for fmt, v in measured.matmul_tflops.items() if v}
    if measured.memory_bandwidth_gbps:
        figures["memory_bandwidth_gbps"] = measured.memory_bandwidth_gbps
    return figures


def below(values: dict[int, float], ratio: float) -> list[tuple[int, float, float]]:
    """(key, value, median) for the values under ratio x their median; none with < 2 values."""
    if len(values) < 2:
        return []
    median = statistics.median(values.values())
    if median <= 0:
        return []
    return [(k, v, median) for k, v in sorted(values.items()) if v < ratio * median]


def find_outliers(nodes: Sequence[ClusterNode], payloads: Sequence[RankPayload],
                  ratio: float = OUTLIER_RATIO) -> list[Outlier]:
    """Return the GPUs and nodes whose figures fall below ratio x their peers' median."""
    by_rank = {p.rank: p for p in payloads}
    node_of = {p.rank: n for n in nodes for p in n.ranks}
    found: list[Outlier] = []
    models: dict[str, list[RankPayload]] = {}
    for payload in payloads:
        name = payload.device.name if payload.device is not None else "cpu"
        models.setdefault(name, []).append(payload)
    for peers in models.values():
        metrics = sorted({m for p in peers for m in gpu_figures(p.measured)})
        for metric in metrics:
            values = {p.rank: gpu_figures(p.measured)[metric] for p in peers
                      if metric in gpu_figures(p.measured)}
            for rank, value, median in below(values, ratio):
                payload, node = by_rank[rank], node_of[rank]
                found.append(Outlier(
                    scope="gpu", node_rank=node.node_rank, hostname=node.hostname, rank=rank,
                    device_index=payload.device.index if payload.device is not None else None,
                    metric=metric, value=value, median=median, ratio=value / median,
                    causes=gpu_causes(payload, peers, metric)))
    for metric in ("intra_node_busbw_gbps", "inter_node_busbw_gbps"):
        values = {n.node_rank: getattr(n, metric) for n in nodes if getattr(n, metric)}
        for node_rank, value, median in below(values, ratio):
            node = next(n for n in nodes if n.node_rank == node_rank)
            found.append(Outlier(
                scope="node", node_rank=node_rank, hostname=node.hostname, metric=metric,
                value=value, median=median, ratio=value / median,
                causes=node_causes(node, nodes, metric)))
    return found


def _unique(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))


def _trial(payload: RankPayload, metric: str) -> TrialResult | None:
    trial_id = registry.providing("memory_bandwidth" if metric.startswith("memory")
                                  else "matmul_tflops")
    return next((t for t in payload.trials if t.id == trial_id), None)


def gpu_causes(payload: RankPayload, peers: Sequence[RankPayload], metric: str) -> list[str]:
    """List what the probe and the trial's readings show on this GPU that can lower the figure."""
    causes: list[str] = []
    device = payload.device
    nv = device.nvidia if device is not None else None
    trial = _trial(payload, metric)
    if trial is not None:
        env = trial.environment
        limits = _unique(r for r in (env.throttle_reasons_before or []) + (
            env.throttle_reasons or []) if r not in IDLE_REASONS)
        if limits:
            causes.append("clock limits around the trial: " + ", ".join(limits))
        if nv is not None:
            causes += _low_clock("SM", env.sm_clock_mhz, nv.sm_clock_max_mhz)
            causes += _low_clock("memory", env.memory_clock_mhz, nv.memory_clock_max_mhz)
        if env.other_processes:
            causes.append("other processes on the GPU: " + ", ".join(env.other_processes))
    if nv is None:
        return causes
    probed = [r for r in nv.throttle_reasons or [] if r not in IDLE_REASONS]
    if probed:
        causes.append("clock limits when probed: " + ", ".join(probed))
    causes += _power_cap(nv.power_limit_w, [p.device.nvidia.power_limit_w for p in peers
                                            if p.device is not None and p.device.nvidia])
    causes += memory_health(device)  # type: ignore[arg-type]
    if nv.mig_mode:
        causes.append("MIG is on: the rank measured one MIG slice, not the whole GPU")
    return causes


def _low_clock(which: str, current: int | None, maximum: int | None) -> list[str]:
    if current and maximum and current < CLOCK_RATIO * maximum:
        return [f"{which} clock {current} of {maximum} MHz right after the trial"]
    return []


def _power_cap(limit: float | None, peers: Sequence[float | None]) -> list[str]:
    known = [p for p in peers if p]
    if not limit or len(known) < 2:
        return []
    median = statistics.median(known)
    if limit < CLOCK_RATIO * median:
        return [f"power limit {limit:g} W against the fleet's {median:g} W"]
    return []


def memory_health(device: Device) -> list[str]:
    """List the uncorrectable ECC errors and row-remap trouble the probe read on the GPU."""
    nv = device.nvidia
    if nv is None:
        return []
    found = []
    if nv.ecc_errors_uncorrected:
        found.append(f"{nv.ecc_errors_uncorrected} uncorrectable ECC errors since the driver "
                     "loaded")
    if nv.remapped_rows_pending:
        found.append("a memory row remap is pending: the GPU needs a reset")
    if nv.remapped_rows_failed:
        found.append("row remapping failed: memory errors the GPU cannot map away")
    return found


def node_causes(node: ClusterNode, nodes: Sequence[ClusterNode], metric: str) -> list[str]:
    """List what the probe saw on a node's GPUs and NCCL settings that can slow its links."""
    causes: list[str] = []
    most_links = max((d.interconnect.nvlink.links_active or 0 for n in nodes for d in n.devices
                      if d.interconnect and d.interconnect.nvlink), default=0)
    for device in node.devices:
        link = device.interconnect
        pcie = link.pcie if link is not None else None
        if pcie is not None and pcie.width_current and pcie.width_max \
                and pcie.width_current < pcie.width_max:
            causes.append(f"GPU {device.index}: PCIe x{pcie.width_current} of "
                          f"x{pcie.width_max}")
        if pcie is not None and pcie.generation_current and pcie.generation_max \
                and pcie.generation_current < pcie.generation_max:
            causes.append(f"GPU {device.index}: PCIe gen {pcie.generation_current} of "
                          f"{pcie.generation_max} when probed (an idle link may drop its "
                          "generation to save power)")
        nvlink = link.nvlink if link is not None else None
        if metric.startswith("intra") and nvlink is not None and most_links \
                and (nvlink.links_active or 0) < most_links:
            causes.append(f"GPU {device.index}: {nvlink.links_active or 0} of {most_links} "
                          "NVLinks active")
        nv = device.nvidia
        limits = [r for r in (nv.throttle_reasons or []) if r not in IDLE_REASONS] if nv else []
        if limits:
            causes.append(f"GPU {device.index}: clock limits when probed: {', '.join(limits)}")
        causes += [f"GPU {device.index}: {c}" for c in memory_health(device)]
    for key, value in node.nccl_env_differs.items():
        causes.append(f"{key}={value} on this node" if value is not None
                      else f"{key} is not set on this node (rank 0 sets it)")
    return causes


def build_cluster(payloads: Sequence[RankPayload], plan: GroupPlan,
                  results: dict[str, list[dict[str, object]]], *, launcher: str,
                  job_id: str | None, backend: str, nccl_version: str | None,
                  ratio: float = OUTLIER_RATIO) -> Cluster:
    """Build the report's cluster section from every rank's payload and the groups' results."""
    ordered = sorted(payloads, key=lambda p: p.rank)
    node_of_rank = [p.node_rank for p in ordered]
    entries = collectives_from(plan, results, node_of_rank)
    nodes = build_nodes(ordered, entries)
    return Cluster(
        world_size=len(ordered), launcher=launcher,  # type: ignore[arg-type]
        job_id=job_id, backend=backend,  # type: ignore[arg-type]
        nccl_version=nccl_version, nodes=nodes, collectives=entries,
        outliers=find_outliers(nodes, ordered, ratio), outlier_ratio=ratio,
        nccl_env=dict(ordered[0].nccl_env) if ordered else {},
        failed_ranks=[p.rank for p in ordered if p.error],
    )
