"""The report: the one JSON document every command produces."""

import datetime as _dt
from typing import Literal

from pydantic import Field

from hwadvisor import __version__
from hwadvisor.models.cluster import Cluster
from hwadvisor.models.estimate import Estimate
from hwadvisor.models.hardware import Device, DeviceClass, HostInfo, Strict
from hwadvisor.models.loadtest import LoadTest
from hwadvisor.models.plan import Plan
from hwadvisor.models.recommend import Goal, Recommendation, Rejected
from hwadvisor.models.serving import ServingPlan
from hwadvisor.models.trial import TrialResult
from hwadvisor.models.workload import Workload

# MAJOR.MINOR: MINOR grows when keys are added (old readers still work);
# MAJOR grows when a key is removed, renamed or changes meaning (see docs/schema-versioning.md).
SCHEMA_VERSION = "1.16"

ReportKind = Literal["probe", "estimate", "recommend", "validate"]


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


class Report(Strict):
    """A probe, estimate, recommend or validate report; later sections stay null in earlier ones."""

    schema_version: str = SCHEMA_VERSION
    tool_version: str = __version__
    generated_at: str = Field(default_factory=_now)
    kind: ReportKind = "probe"
    host: HostInfo
    devices: list[Device] = Field(default_factory=list)
    device_class: DeviceClass = Field(
        DeviceClass.CPU,
        description="The class the advice is shaped for: the first device's, else cpu",
    )
    notes: list[str] = Field(default_factory=list)
    workload: Workload | None = None
    estimate: Estimate | None = None
    goal: Goal | None = None
    plan: Plan | None = Field(
        None, description="recommend: the stack of changes for the goal, with its effect and fit")
    serving: ServingPlan | None = Field(
        None, description="estimate and recommend with a load (--rate or --concurrency): the "
        "load planned for, the latency targets met or missed, the figures, and (recommend) the "
        "config the search chose, the fewest GPUs and the Pareto front; left out without a load")
    recommendations: list[Recommendation] = Field(default_factory=list)
    rejected: list[Rejected] = Field(default_factory=list)
    trials: list[TrialResult] = Field(default_factory=list)
    interrupted: bool = Field(
        False, description="True when Ctrl-C or SIGTERM cut the run short (a partial report)")
    gates_tripped: list[str] = Field(
        default_factory=list,
        description="CI gates (--fail-on, --min-bandwidth-fraction) this report tripped, in words",
    )
    cluster: Cluster | None = Field(
        None, description="probe and validate under torchrun or srun: every rank's node, "
        "device and figures, the job-wide collectives and the outliers, gathered on rank 0")
    load_test: LoadTest | None = Field(
        None, description="validate --endpoint and recommend --validate --endpoint: a load "
        "played against a running server, its measured latencies against the prediction")
