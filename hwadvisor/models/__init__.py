"""pydantic models: the contract between the parts and the JSON users get.

The model modules do not use `from __future__ import annotations`: with it every field's
annotation is a string pydantic must compile and evaluate when it builds the class, a share of
each command's start-up. Forward references are quoted where they occur.
"""

from hwadvisor.models.cluster import (
    Cluster,
    ClusterCollective,
    ClusterNode,
    ClusterRank,
    Outlier,
)
from hwadvisor.models.estimate import Bottleneck, Estimate, MemoryEstimate, ModelOptions, Times
from hwadvisor.models.hardware import (
    Device,
    DeviceClass,
    GpuProcess,
    HostInfo,
    Interconnect,
    Measured,
    NvidiaDetails,
    NvLinkInfo,
    PcieLink,
    PeerLink,
)
from hwadvisor.models.plan import (
    EngineConfig,
    EngineFigures,
    EngineValidation,
    Plan,
    PlanAlternative,
    PlanLayout,
    PlanMetric,
    PlanStep,
    PlanTrialSpec,
    PlanValidation,
)
from hwadvisor.models.recommend import Goal, Prediction, Recommendation, Rejected, Validation
from hwadvisor.models.report import SCHEMA_VERSION, Report
from hwadvisor.models.trial import Effect, Measurement, TrialEnvironment, TrialResult
from hwadvisor.models.workload import ModelSpec, Workload

__all__ = [
    "SCHEMA_VERSION",
    "Bottleneck",
    "Cluster",
    "ClusterCollective",
    "ClusterNode",
    "ClusterRank",
    "Device",
    "Effect",
    "EngineConfig",
    "EngineFigures",
    "EngineValidation",
    "DeviceClass",
    "Estimate",
    "Goal",
    "GpuProcess",
    "HostInfo",
    "Interconnect",
    "Measured",
    "Measurement",
    "MemoryEstimate",
    "ModelOptions",
    "ModelSpec",
    "NvLinkInfo",
    "NvidiaDetails",
    "Outlier",
    "PcieLink",
    "PeerLink",
    "Plan",
    "PlanAlternative",
    "PlanLayout",
    "PlanMetric",
    "PlanStep",
    "PlanTrialSpec",
    "PlanValidation",
    "Prediction",
    "Recommendation",
    "Rejected",
    "Report",
    "Times",
    "TrialEnvironment",
    "TrialResult",
    "Validation",
    "Workload",
]
