"""Trial ids -> "module:Class" strings, imported lazily so torch never loads on the probe path.

Registering a trial is one line in TRIALS. The class must meet hwadvisor.trials.base.Trial and
take no constructor arguments.
"""

from __future__ import annotations

import importlib

from hwadvisor.errors import UserError
from hwadvisor.trials.base import Trial

TRIALS: dict[str, str] = {
    # hardware trials (probe --measure uses the first two)
    "memory-bandwidth": "hwadvisor.trials.bandwidth:MemoryBandwidthTrial",
    "matmul-peak": "hwadvisor.trials.matmul:MatmulPeakTrial",
    "fp8-gemm": "hwadvisor.trials.fp8:Fp8GemmTrial",
    "int4-weight-only": "hwadvisor.trials.int4:Int4WeightOnlyTrial",
    "host-transfer": "hwadvisor.trials.transfer:HostTransferTrial",
    # workload-block trials (blocks.py, checkpointing.py, cuda_graphs.py, attention.py,
    # compile.py, kv_quant.py, collectives.py, optimizer.py, serving.py) are registered below,
    # one line each.
    "activation-checkpointing": "hwadvisor.trials.checkpointing:ActivationCheckpointingTrial",
    "cuda-graphs": "hwadvisor.trials.cuda_graphs:CudaGraphsTrial",
    "attention-backends": "hwadvisor.trials.attention:AttentionBackendsTrial",
    "torch-compile": "hwadvisor.trials.compile:TorchCompileTrial",
    "kv-cache-quantization": "hwadvisor.trials.kv_quant:KvCacheQuantizationTrial",
    "collectives": "hwadvisor.trials.collectives:CollectivesTrial",
    "fused-adamw": "hwadvisor.trials.optimizer:FusedAdamWTrial",
    "continuous-batching": "hwadvisor.trials.serving:ContinuousBatchingTrial",
    "speculative-verify": "hwadvisor.trials.serving:SpeculativeVerifyTrial",
    "prefix-reuse": "hwadvisor.trials.serving:PrefixReuseTrial",
}

# The trials `probe --measure` runs: their figures go into Device.measured.
MEASURE_TRIALS: tuple[str, ...] = ("memory-bandwidth", "matmul-peak")


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
    """Import and instantiate the trial registered under trial_id."""
    check_ids([trial_id])
    module_name, _, class_name = TRIALS[trial_id].partition(":")
    module = importlib.import_module(module_name)
    return getattr(module, class_name)()  # type: ignore[no-any-return]
