"""Trial ids -> entries ("module:Class" and the hardware figure it provides), imported lazily.

Registering a trial is one line in TRIALS. The class must meet hwadvisor.trials.base.Trial and
take no constructor arguments. An entry's `provides` names the hardware figure its result
measures (a field of `Device.measured` or of a `--calibration`), with the effect that holds
it: the one place that says which trial measures which figure (`probe --measure`, the
validator's `Device.measured` and the cluster's outlier causes read it from here).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Literal

from hwadvisor.errors import UserError
from hwadvisor.trials.base import Trial

# The hardware figures a trial can provide, named as the calibration and Device.measured
# name them (perfmodel/calibration.Calibration; models/hardware.Measured).
Figure = Literal["memory_bandwidth", "matmul_tflops", "attention_tflops", "launch_floor",
                 "host_transfer", "bus_bandwidth"]

# The figures probe --measure stores on each device (Device.measured).
DEVICE_FIGURES: tuple[Figure, ...] = ("memory_bandwidth", "matmul_tflops")


@dataclass(frozen=True)
class Entry:
    """One registered trial: where its class lives and the hardware figure it provides."""

    path: str  # "module:Class"
    provides: Figure | None = None
    effect: str | None = None  # the effect key holding the figure ("_tflops" keys: a suffix)


TRIALS: dict[str, Entry] = {
    # hardware trials
    "memory-bandwidth": Entry("hwadvisor.trials.bandwidth:MemoryBandwidthTrial",
                              provides="memory_bandwidth", effect="copy_gbps"),
    "matmul-peak": Entry("hwadvisor.trials.matmul:MatmulPeakTrial",
                         provides="matmul_tflops", effect="_tflops"),
    "fp8-gemm": Entry("hwadvisor.trials.fp8:Fp8GemmTrial"),
    "int4-weight-only": Entry("hwadvisor.trials.int4:Int4WeightOnlyTrial"),
    "host-transfer": Entry("hwadvisor.trials.transfer:HostTransferTrial",
                           provides="host_transfer", effect="pinned_gbps"),
    # workload-block trials, one line each
    "activation-checkpointing": Entry(
        "hwadvisor.trials.checkpointing:ActivationCheckpointingTrial"),
    "cuda-graphs": Entry("hwadvisor.trials.cuda_graphs:CudaGraphsTrial",
                         provides="launch_floor"),
    "attention-backends": Entry("hwadvisor.trials.attention:AttentionBackendsTrial",
                                provides="attention_tflops"),
    "torch-compile": Entry("hwadvisor.trials.compile:TorchCompileTrial"),
    "kv-cache-quantization": Entry("hwadvisor.trials.kv_quant:KvCacheQuantizationTrial"),
    "collectives": Entry("hwadvisor.trials.collectives:CollectivesTrial",
                         provides="bus_bandwidth", effect="busbw_gbps"),
    "fused-adamw": Entry("hwadvisor.trials.optimizer:FusedAdamWTrial"),
    "continuous-batching": Entry("hwadvisor.trials.serving:ContinuousBatchingTrial"),
    "speculative-verify": Entry("hwadvisor.trials.serving:SpeculativeVerifyTrial"),
    "prefix-reuse": Entry("hwadvisor.trials.serving:PrefixReuseTrial"),
}

# The plan's stacked step (recommend --validate): not in the suite, it needs a plan to run.
PLAN_TRIAL_ID = "plan-step"
PLAN_TRIAL = Entry("hwadvisor.trials.plan_step:PlanStepTrial")


def providing(figure: Figure) -> str:
    """Return the id of the trial that provides a hardware figure."""
    return next(i for i, entry in TRIALS.items() if entry.provides == figure)


def provides(trial_id: str) -> Figure | None:
    """Return the hardware figure a trial provides (None: a trial of advice, not hardware)."""
    entry = TRIALS.get(trial_id)
    return entry.provides if entry is not None else None


# The trials `probe --measure` runs: their figures go into Device.measured.
MEASURE_TRIALS: tuple[str, ...] = tuple(providing(f) for f in DEVICE_FIGURES)


def trial_ids() -> list[str]:
    """Every registered trial id, in registration order."""
    return list(TRIALS)


def check_ids(ids: list[str]) -> None:
    """Raise a UserError (exit 2) naming the valid ids when any id is unknown."""
    unknown = [i for i in ids if i not in TRIALS]
    if unknown:
        raise UserError(f"unknown trial id: {', '.join(unknown)}",
                        hint="valid trial ids: " + ", ".join(trial_ids()))


def get_trial(trial_id: str) -> Trial:
    """Import and instantiate the trial registered under trial_id (or the plan's trial)."""
    if trial_id == PLAN_TRIAL_ID:
        entry = PLAN_TRIAL
    else:
        check_ids([trial_id])
        entry = TRIALS[trial_id]
    module_name, _, class_name = entry.path.partition(":")
    module = importlib.import_module(module_name)
    return getattr(module, class_name)()  # type: ignore[no-any-return]
