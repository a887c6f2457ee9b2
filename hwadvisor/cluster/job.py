"""One rank's part in a job under torchrun or srun, from joining to rank 0's gathered report.

Each rank: join the job's process group (trials.distributed), say who it is, do its own work
(probe its host, run trials on its GPU: the `work` callback the pipeline hands in), wait for
every rank (the ranks that do not come are named), time the job-wide collectives group by
group, and send rank 0 its payload as JSON. Rank 0 builds one report: its own, plus `cluster`.
Other ranks return their own report only; what is written, and where, the CLI decides.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

from hwadvisor.cluster import fleet
from hwadvisor.cluster.launcher import Launch, nccl_env
from hwadvisor.errors import ExitCode, UserError
from hwadvisor.models import Cluster, Device, Measured, Report, TrialResult
from hwadvisor.trials import collectives, distributed
from hwadvisor.trials.base import TrialContext, torch_missing

DEFAULT_TIMEOUT_S = 600.0
_TIMEOUT_HINT = ("look at that rank's own output; if its trials need longer, raise "
                 "--cluster-timeout")


@dataclass(frozen=True)
class Place:
    """Where a rank runs: its local rank, its torch GPU index and PCI address (None: CPU)."""

    local_rank: int
    cuda_index: int | None
    pci_bus_id: str | None


@dataclass
class LocalRun:
    """What a rank's own work produced: its report, the device it used, its figures."""

    report: Report | None
    device: Device | None = None
    measured: Measured | None = None
    error: str | None = None

    @classmethod
    def of(cls, report: Report, device: Device | None, measured: Measured | None) -> LocalRun:
        """Return the rank's run: its report, its device as the report lists it, its figures."""
        if device is not None:
            device = next((d for d in report.devices if d.index == device.index), device)
        return cls(report=report, device=device, measured=measured)


@dataclass
class JobResult:
    """A rank's outcome: its own report and, on rank 0, the gathered one."""

    rank: int
    local: Report | None
    report: Report | None = None


Work = Callable[[Place], LocalRun]


def run(launch: Launch, work: Work, *, timeout_s: float = DEFAULT_TIMEOUT_S,
        measure_collectives: bool = False, quick: bool = False, nvls: bool = False) -> JobResult:
    """Run this rank's part of the job; see the module docstring.

    measure_collectives: time the job-wide collectives (world, intra-node, inter-node, node
    pairs) after every rank's own work. nvls: let NCCL use NVLink SHARP (off by default, as in
    the collectives trial).
    """
    if not timeout_s > 0:
        raise UserError(f"--cluster-timeout must be a positive number of seconds, got "
                        f"{timeout_s:g}", hint="e.g. --cluster-timeout 900")
    if torch_missing():
        raise UserError(f"rank {launch.rank} of a {launch.launcher} job: joining it needs torch "
                        "(torch.distributed), which is not installed",
                        hint="pip install 'hwadvisor[validate]' on every node, or pass "
                        "--no-cluster to run each process on its own")
    _set_multicast(nvls)
    try:
        group = distributed.join(launch.rank, launch.world_size, launch.local_rank, timeout_s,
                                 launch.torch_env())
    except distributed.JobGroupError as exc:
        raise UserError(str(exc), hint="start every rank with the same launcher settings; "
                        "check that MASTER_ADDR is reachable from this node",
                        code=ExitCode.TRIALS_FAILED) from None
    try:
        return _run(group, launch, work, measure_collectives, quick, nvls)
    except distributed.JobGroupError as exc:
        raise UserError(str(exc), hint=_TIMEOUT_HINT, code=ExitCode.TRIALS_FAILED) from None
    finally:
        group.close()


def _set_multicast(nvls: bool) -> None:
    """Force NVLS off (the collectives trial's default) unless asked for, before NCCL starts."""
    for key, value in collectives.SAFE_ENV.items():
        if nvls:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def _run(group: distributed.JobGroup, launch: Launch, work: Work, measure_collectives: bool,
         quick: bool, nvls: bool) -> JobResult:
    place = Place(launch.local_rank, group.cuda_index,
                  distributed.pci_bus_id(group.cuda_index)
                  if group.cuda_index is not None else None)
    node_of_rank = _introduce(group, launch)
    local = guarded(work, place)
    group.wait_for_all("its own probe and trials")
    plan, results, started = fleet.GroupPlan(), {}, time.perf_counter()
    if measure_collectives and launch.world_size >= 2:
        workload = local.report.workload if local.report is not None else None
        mine = collectives.run_config(TrialContext(workload=workload, quick=quick, nvls=nvls),
                                      group.backend, launch.world_size)
        config = json.loads(group.all_gather_texts(json.dumps(mine))[0])  # rank 0's sizes
        plan = fleet.plan_groups(node_of_rank, [(str(s[0]), int(s[1])) for s in config["sizes"]])
        try:
            results = group.measure(plan.rounds, config)
        except RuntimeError as exc:
            raise distributed.JobGroupError(
                f"the job-wide collectives failed on rank {launch.rank}: {exc}") from None
    payload = _payload(launch, node_of_rank, local, results)
    texts = group.gather_texts(payload.model_dump_json())
    if texts is None:
        return JobResult(rank=launch.rank, local=local.report)
    payloads = [fleet.RankPayload.model_validate_json(t) for t in texts]
    info = group.info()
    merged = {k: v for p in payloads for k, v in p.collectives.items()}
    cluster = fleet.build_cluster(
        payloads, plan, merged, launcher=launch.launcher, job_id=launch.job_id,
        backend=group.backend, nccl_version=info["nccl_version"])
    world = None
    if measure_collectives and launch.world_size < 2:
        world = TrialResult(id=collectives.TRIAL_ID, status="unsupported",
                            reason="the job has one rank: collectives need two or more")
    elif "world" in merged:
        world = collectives.to_result({
            "world_size": launch.world_size, "backend": group.backend,
            "results": merged["world"], "nvls": nvls, **info}, started)
    report = gathered_report(local.report, cluster, payloads, world)
    return JobResult(rank=launch.rank, local=local.report, report=report)


def _introduce(group: distributed.JobGroup, launch: Launch) -> list[int]:
    """Exchange who every rank is; return each rank's node rank (the same list on every rank)."""
    me = fleet.Identity(rank=launch.rank, local_rank=launch.local_rank,
                        node_rank=launch.node_rank, hostname=launch.hostname,
                        has_gpu=group.cuda_index is not None)
    everyone = [fleet.Identity.model_validate_json(t)
                for t in group.all_gather_texts(me.model_dump_json())]
    return fleet.node_of_ranks(everyone)


def guarded(work: Work, place: Place) -> LocalRun:
    """Run this rank's work; an error becomes the rank's error, so the job still meets."""
    try:
        return work(place)
    except UserError as exc:
        return LocalRun(report=None, error=exc.message)
    except Exception as exc:  # reported by rank 0 for this rank; the other ranks go on
        text = str(exc).strip().splitlines()
        return LocalRun(report=None, error=f"{type(exc).__name__}: {text[0] if text else ''}"
                        .rstrip(": ")[:500])


def _payload(launch: Launch, node_of_rank: list[int], local: LocalRun,
             results: dict[str, list[dict[str, object]]]) -> fleet.RankPayload:
    report = local.report
    return fleet.RankPayload(
        rank=launch.rank, local_rank=launch.local_rank, node_rank=node_of_rank[launch.rank],
        hostname=launch.hostname, host=report.host if report is not None else None,
        device=local.device, measured=local.measured,
        trials=list(report.trials) if report is not None else [], error=local.error,
        nccl_env=nccl_env(), collectives=results,  # type: ignore[arg-type]
    )


def pick_device(devices: list[Device], place: Place) -> Device | None:
    """Return the probed GPU this rank uses: matched by PCI address, else by index.

    The probe numbers GPUs as NVML does (all GPUs of the host); torch numbers the visible ones.
    The PCI address ties the two together; without it, CUDA_VISIBLE_DEVICES's list (when it
    holds numbers) maps torch's index to NVML's, else the two are taken to agree.
    """
    if place.cuda_index is None:
        return None
    gpus = [d for d in devices if d.vendor in ("nvidia", "amd")]
    if place.pci_bus_id:
        for device in gpus:
            bus = device.nvidia.pci_bus_id if device.nvidia is not None else None
            if bus and _same_bus(bus, place.pci_bus_id):
                return device
    index = physical_index(place.cuda_index, os.environ.get("CUDA_VISIBLE_DEVICES"))
    return next((d for d in gpus if d.index == index), None)


def physical_index(cuda_index: int, visible: str | None) -> int:
    """Map torch's GPU index to the host's through CUDA_VISIBLE_DEVICES ('2,3': 1 -> 3)."""
    if not visible:
        return cuda_index
    entries = [e.strip() for e in visible.split(",") if e.strip()]
    if cuda_index < len(entries) and entries[cuda_index].isdigit():
        return int(entries[cuda_index])
    return cuda_index


def _same_bus(a: str, b: str) -> bool:
    """Compare PCI addresses written as '00000000:0A:00.0' or '0000:0a:00.0'."""
    def parts(text: str) -> tuple[int, ...] | None:
        try:
            domain, bus, rest = text.strip().lower().rsplit(":", 2)
            device = rest.split(".")[0]
            return int(domain, 16), int(bus, 16), int(device, 16)
        except ValueError:
            return None

    pa, pb = parts(a), parts(b)
    return pa is not None and pa == pb


def gathered_report(local: Report | None, cluster: Cluster, payloads: list[fleet.RankPayload],
                    world: TrialResult | None) -> Report:
    """Return rank 0's report with the cluster section, the job-wide trial and the fleet's notes."""
    if local is None:
        first = payloads[0]
        raise UserError(f"rank 0's own work failed: {first.error}",
                        hint="rank 0 writes the report; fix its error and run again",
                        code=ExitCode.TRIALS_FAILED)
    report = local.model_copy(deep=True)
    report.cluster = cluster
    _fill_node_zero(report, payloads)
    if world is not None:
        report.trials.append(world)
    report.notes += fleet_notes(cluster, payloads)
    return report


def _fill_node_zero(report: Report, payloads: list[fleet.RankPayload]) -> None:
    """Put what rank 0's node-mates measured on their GPUs into report.devices (rank 0's host)."""
    node = payloads[0].node_rank
    by_index = {d.index: d for d in report.devices}
    for payload in payloads:
        if payload.node_rank == node and payload.device is not None and payload.measured:
            device = by_index.get(payload.device.index)
            if device is not None:
                device.measured = payload.measured


def fleet_notes(cluster: Cluster, payloads: list[fleet.RankPayload]) -> list[str]:
    """Return one note per failed rank, failed trial on another rank, and outlier."""
    notes = []
    for payload in payloads:
        where = f"rank {payload.rank} ({payload.hostname}, node {payload.node_rank})"
        if payload.error:
            notes.append(f"{where} failed: {payload.error}")
        if payload.rank == 0:
            continue
        for trial in payload.trials:
            if trial.status == "error":
                notes.append(f"{where}: trial {trial.id} error: {trial.reason}")
    for out in cluster.outliers:
        device = "cpu" if out.device_index is None else f"GPU {out.device_index}"
        where = f"rank {out.rank} ({device})" if out.scope == "gpu" else "node"
        notes.append(
            f"outlier: {out.hostname} (node {out.node_rank}) {where}: {out.metric} "
            f"{out.value:.4g} = {out.ratio:.2f} x the fleet's median {out.median:.4g}"
            + (f"; seen: {'; '.join(out.causes)}" if out.causes else ""))
    return notes


def failed(report: Report) -> bool:
    """Tell whether any rank's own work or any of its trials failed."""
    cluster = report.cluster
    return cluster is not None and any(r.status == "error" or r.failed_trials
                                       for n in cluster.nodes for r in n.ranks)
