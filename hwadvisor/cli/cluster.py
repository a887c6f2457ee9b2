"""`probe` and `validate` as one rank of a torchrun or srun job: shared options, output, tables.

Under a launcher every rank runs the command; rank 0 prints and writes the gathered report,
the other ranks print and write nothing unless --all-ranks asks each for its own report
(NAME.rank<N>.json beside --output). A rank whose own work failed says so on its stderr;
rank 0's report and exit status carry every rank's outcome.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from hwadvisor.cli.console import console, note
from hwadvisor.cli.params import Param, default_of, flag_option, inject
from hwadvisor.errors import UserError
from hwadvisor.models import Report
from hwadvisor.report.io import check_target, write_report

if TYPE_CHECKING:
    from rich.table import Table

    from hwadvisor.cluster.job import JobResult
    from hwadvisor.cluster.launcher import Launch

NoClusterOpt = flag_option(
    "--no-cluster", help_text="Under torchrun or srun: run this process on its own, as without "
    "a launcher (every rank then prints and writes its own report).")
ClusterTimeoutOpt = Annotated[float, typer.Option(
    "--cluster-timeout", help="Under torchrun or srun: seconds a rank waits for the others "
    "(to meet, to finish their own trials, for each collective) before it stops and names the "
    "ranks that did not come.")]
AllRanksOpt = flag_option(
    "--all-ranks", help_text="Under torchrun or srun: every rank also writes its own report "
    "beside --output, as NAME.rank<N>.json; rank 0 writes the gathered one to --output.")
DEFAULT_TIMEOUT_S = 600.0  # hwadvisor.cluster.job.DEFAULT_TIMEOUT_S, without importing it


@dataclass(frozen=True)
class ClusterOptions:
    """How a command runs under torchrun or srun (probe, validate)."""

    no_cluster: bool = False
    timeout_s: float = DEFAULT_TIMEOUT_S
    all_ranks: bool = False


PLAIN_RUN = ClusterOptions()  # the `launcher` parameter's default; the options replace it

CLUSTER_PARAMS: tuple[Param, ...] = (
    Param("no_cluster", NoClusterOpt, default_of(ClusterOptions, "no_cluster")),
    Param("cluster_timeout", ClusterTimeoutOpt, default_of(ClusterOptions, "timeout_s")),
    Param("all_ranks", AllRanksOpt, default_of(ClusterOptions, "all_ranks")),
)

cluster_options = inject(
    CLUSTER_PARAMS, "launcher", lambda v: ClusterOptions(
        no_cluster=v["no_cluster"], timeout_s=v["cluster_timeout"], all_ranks=v["all_ranks"]),
    in_place=True)


def launch_for(opts: ClusterOptions, output: Path | None) -> Launch | None:
    """Return this process's Launch under torchrun or srun (None: a plain run); check options."""
    from hwadvisor.cluster.launcher import detect

    all_ranks = opts.all_ranks
    launch = None if opts.no_cluster else detect()
    if launch is None:
        if all_ranks:
            note("note: --all-ranks has no effect without torchrun or srun")
        return None
    if all_ranks and output is None:
        raise UserError("--all-ranks needs --output: each rank's file is named after it",
                        hint="e.g. --output cluster.json --all-ranks (rank 1 writes "
                        "cluster.rank1.json)")
    # Only the ranks that write check their target: another node may lack rank 0's folder.
    if output is not None and (launch.rank == 0 or all_ranks):
        check_target(rank_path(output, launch.rank) if launch.rank else output)
    return launch


def rank_path(output: Path, rank: int) -> Path:
    """Return rank N's own report path beside --output: cluster.json -> cluster.rankN.json."""
    return output.with_name(f"{output.stem}.rank{rank}{output.suffix or '.json'}")


def gathered(result: JobResult, output: Path | None, all_ranks: bool) -> Report | None:
    """Write this rank's own report when asked; return the gathered report on rank 0 only."""
    if result.local is None and result.rank != 0:
        note(f"rank {result.rank}: its own probe or trials failed; rank 0's report says why")
    if all_ranks and output is not None and result.local is not None:
        write_report(rank_path(output, result.rank), result.local)
    return result.report


def with_cluster(render: Callable[[Report], None]) -> Callable[[Report], None]:
    """Return render followed by the cluster tables when the report has a cluster section."""

    def both(report: Report) -> None:
        render(report)
        for table in cluster_tables(report):
            console.print(table)

    return both


def _gbps(value: float | None) -> str:
    return "—" if value is None else f"{value:.3g}"


def cluster_tables(report: Report) -> list[Table]:
    """Return the nodes, the job-wide collectives and the outliers as rich tables."""
    from rich.markup import escape
    from rich.table import Table

    cluster = report.cluster
    if cluster is None:
        return []
    nodes = Table(title=f"cluster · {cluster.world_size} ranks on {len(cluster.nodes)} nodes "
                  f"({cluster.launcher}, {cluster.backend})")
    for column in ("node", "host", "ranks", "GPUs", "intra-node GB/s", "inter-node GB/s"):
        nodes.add_column(column)
    for node in cluster.nodes:
        gpus = ", ".join(sorted({r.device_name or "cpu" for r in node.ranks}))
        ranks = ", ".join(str(r.rank) + ("!" if r.status == "error" else "") for r in node.ranks)
        nodes.add_row(str(node.node_rank), escape(node.hostname), ranks, escape(gpus),
                      _gbps(node.intra_node_busbw_gbps), _gbps(node.inter_node_busbw_gbps))
    tables = [nodes]
    if cluster.collectives:
        coll = Table(title="job-wide collectives (bus bandwidth, GB/s)")
        for column in ("scope", "nodes", "ranks", "op", "size", "busbw"):
            coll.add_column(column)
        for entry in cluster.collectives:
            coll.add_row(entry.scope, ",".join(map(str, entry.node_ranks)),
                         str(entry.group_size), entry.op, entry.size_label,
                         _gbps(entry.busbw_gbps) if entry.status == "ok" else entry.status)
        tables.append(coll)
    if cluster.outliers:
        out = Table(title=f"outliers (below {cluster.outlier_ratio:g} x the fleet's median)",
                    show_lines=True)
        for column in ("where", "metric", "value / median", "seen"):
            out.add_column(column)
        for o in cluster.outliers:
            where = f"{o.hostname} node {o.node_rank}" + (
                f" rank {o.rank} GPU {o.device_index}" if o.scope == "gpu" else "")
            out.add_row(escape(where), o.metric, f"{o.value:.4g} / {o.median:.4g} "
                        f"({o.ratio:.2f})", escape("\n".join(o.causes) or "—"))
        tables.append(out)
    return tables


def failed(report: Report) -> bool:
    """Tell whether any rank's own work, or a trial on another rank, failed."""
    if report.cluster is None:
        return False  # a plain run: the job module (and its trials) need not load
    from hwadvisor.cluster.job import failed as job_failed

    return job_failed(report)
