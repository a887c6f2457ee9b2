"""The fleet view of a run under torchrun or srun: nodes, job-wide collectives, outliers."""

from typing import Literal

from pydantic import Field

from hwadvisor.models.hardware import Device, Measured, Strict

CollectiveScope = Literal["world", "intra-node", "inter-node", "node-pair"]


class ClusterRank(Strict):
    """One process of the job and the device it measured."""

    rank: int
    local_rank: int
    device_index: int | None = Field(
        None, description="The GPU this rank used, as the probe numbers them on its host "
        "(devices[].index); null on the CPU")
    device_name: str | None = Field(None, description="That GPU's name, or 'cpu'")
    measured: Measured | None = Field(
        None, description="Memory bandwidth and matmul TFLOP/s this rank measured (probe "
        "--measure, or validate's memory-bandwidth and matmul-peak trials); CPU figures too")
    status: Literal["ok", "error"] = "ok"
    error: str | None = Field(None, description="Why this rank's own work failed, when it did")
    failed_trials: list[str] = Field(
        default_factory=list, description="Trials that ended in error on this rank")


class ClusterNode(Strict):
    """One node (host) of the job: its ranks, their GPUs, its link figures."""

    node_rank: int = Field(description="The launcher's node rank (GROUP_RANK, SLURM_NODEID)")
    hostname: str
    ranks: list[ClusterRank] = Field(default_factory=list)
    devices: list[Device] = Field(
        default_factory=list, description="The GPUs this node's ranks used, as probed there")
    intra_node_busbw_gbps: float | None = Field(
        None, description="All-reduce bus bandwidth among this node's ranks at the largest "
        "size, GB/s (null with one rank on the node)")
    inter_node_busbw_gbps: float | None = Field(
        None, description="Best all-reduce bus bandwidth of this node's first rank with a "
        "neighbouring node's (node-pair scope) at the largest size, GB/s; null on one node")
    nccl_env_differs: dict[str, str | None] = Field(
        default_factory=dict, description="NCCL variables whose value on this node's first "
        "rank differs from rank 0's (null: not set here)")


class ClusterCollective(Strict):
    """One collective at one size over one group of the job's ranks."""

    scope: CollectiveScope = Field(
        description="world: every rank; intra-node: the ranks of one node; inter-node: the "
        "first rank of every node; node-pair: the first ranks of two neighbouring nodes")
    node_ranks: list[int] = Field(description="The nodes whose ranks took part")
    group_size: int = Field(description="Ranks in the group")
    op: str = Field(description="all_reduce, all_gather or reduce_scatter")
    size_label: str
    bytes: int
    busbw_gbps: float | None = Field(
        None, description="Bus bandwidth, GB/s: algbw x 2(n-1)/n for all-reduce, x (n-1)/n for "
        "all-gather and reduce-scatter (nccl-tests doc/PERFORMANCE.md)")
    algbw_gbps: float | None = Field(None, description="Bytes / time of the slowest rank, GB/s")
    status: Literal["ok", "unsupported", "error"] = "ok"
    reason: str | None = None
    error: float | None = Field(None, description="Relative error of the reduced values")


class Outlier(Strict):
    """A GPU or node whose figure falls clearly below the fleet's median."""

    scope: Literal["gpu", "node"]
    node_rank: int
    hostname: str
    rank: int | None = Field(None, description="The rank that measured it (gpu scope)")
    device_index: int | None = None
    metric: str = Field(description="memory_bandwidth_gbps, matmul_<format>_tflops, "
                        "intra_node_busbw_gbps or inter_node_busbw_gbps")
    value: float
    median: float = Field(description="The fleet's median of the metric")
    ratio: float = Field(description="value / median")
    causes: list[str] = Field(
        default_factory=list, description="What the probe saw on that GPU or node that can "
        "explain it (clocks, clock-limit reasons, PCIe link, ECC, other processes, NCCL "
        "settings); empty when it saw nothing")


class Cluster(Strict):
    """A run across the ranks of a torchrun or srun job, gathered on rank 0."""

    world_size: int
    launcher: Literal["torchrun", "env", "slurm"] = Field(
        description="torchrun, slurm (srun), or env (another launcher setting RANK/WORLD_SIZE)")
    job_id: str | None = Field(None, description="SLURM_JOB_ID, or torchrun's run id")
    backend: Literal["nccl", "gloo"] = Field(
        description="The backend of the measured collectives: nccl on GPUs (RCCL on ROCm), "
        "gloo on CPUs")
    nccl_version: str | None = None
    nodes: list[ClusterNode] = Field(default_factory=list)
    collectives: list[ClusterCollective] = Field(default_factory=list)
    outliers: list[Outlier] = Field(default_factory=list)
    outlier_ratio: float = Field(
        description="A figure below this fraction of the fleet's median is an outlier")
    nccl_env: dict[str, str] = Field(
        default_factory=dict, description="NCCL_* and TORCH_NCCL_* variables set on rank 0, "
        "including the NVLS switches hwadvisor sets")
    failed_ranks: list[int] = Field(
        default_factory=list, description="Ranks whose own work (probe, trials) failed")
