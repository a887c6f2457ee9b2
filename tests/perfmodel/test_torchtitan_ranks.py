"""One torchtitan rank's memory against its own code's allocator peaks on the H200.

benchmarks/data/torchtitan_memory_h200.json: torchtitan 0.2.2's Llama 3.1 8B (FSDP 8, per-op
selective checkpointing) and 70B (FSDP 32 x TP 8, full checkpointing, loss parallel) ranks under
the fake process group with the published world sizes, bf16, eager (no torch.compile, no Float8).
"""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest
from script_loader import load_script

ROOT = Path(__file__).resolve().parents[2]
DATA = json.loads((ROOT / "benchmarks" / "data" / "torchtitan_memory_h200.json").read_text())
GIB = 2**30

# the measured case and the published row whose setup it runs (bf16, eager)
CASES = {"8b": "torchtitan-h100-llama3.1-8b-fsdp8-bf16",
         "70b": "torchtitan-h100-llama3.1-70b-fsdp32-tp8-bf16"}


def _published() -> ModuleType:
    return load_script("benchmarks/published.py")


def _measured(case: str) -> dict:
    result = next(r for r in DATA["results"] if r["case"]["name"] == case)
    return result["ranks"][0]


def _predicted_allocated(case: str) -> float:
    """Return the model's allocated peak (GiB) for the measured case's setup, eager."""
    from hwadvisor.perfmodel import estimate

    published = _published()
    fig = next(f for f in published.load_figures() if f.id == CASES[case])
    workload, device, options = published.build(fig)
    measured = _measured(case)
    # the measurement ran eager, as its JSON says; the 70B bf16 row was published compiled
    assert DATA["compile"] is False and DATA["float8"] is False
    options = options.model_copy(update={"compiled": False})
    assert workload.batch == _measured_case(case)["local_batch"]
    assert workload.prompt_len == _measured_case(case)["seq_len"]
    assert measured["status"] == "ok"
    memory = estimate(workload, device, options).memory
    return (memory.total_bytes - memory.runtime_bytes) / GIB


def _measured_case(case: str) -> dict:
    return next(r for r in DATA["results"] if r["case"]["name"] == case)["case"]


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_torchtitan_ranks_allocated_peak_is_within_5_percent(case: str) -> None:
    measured = _measured(case)["steady_max_allocated_gib"]
    assert _predicted_allocated(case) == pytest.approx(measured, rel=0.05)


def test_the_70b_ranks_reserved_peak_lies_in_the_sharded_range() -> None:
    from hwadvisor.perfmodel.memory import reserved_peak_range

    low, high = reserved_peak_range(_predicted_allocated("70b") * GIB, True, sharded=True)
    assert low <= _measured("70b")["steady_max_reserved_gib"] * GIB <= high


def test_the_loss_parallel_backward_holds_four_fp32_copies_of_the_local_logits() -> None:
    from hwadvisor.perfmodel import constants as C

    # from the end of the forward (bf16 logits, the saved fp32 log-softmax, the layer inputs)
    # to the step's peak: the bf16 logits are freed, the loss's backward adds the rest
    case, rank = _measured_case("70b"), _measured("70b")
    step = rank["steps"][-1]
    elements = case["local_batch"] * case["seq_len"] * 128256 / case["tp"]
    rise = (step["max_allocated_gib"] - step["after_forward_allocated_gib"]) * GIB / elements
    saved_log_softmax, bf16_logits = 4.0, 2.0
    assert C.TRAIN_LOGIT_BYTES_LOSS_PARALLEL - saved_log_softmax - bf16_logits == \
        pytest.approx(rise, rel=0.05)


def test_pipeline_ranks_hold_either_the_micro_batches_in_flight_or_the_loss() -> None:
    """The 405B run (FSDP 8 x TP 8 x PP 8, interleaved 1F1B): the first and last stages' ranks.

    benchmarks/data/torchtitan_memory_405b_h200.json: rank 0 (first stage, the most
    micro-batches in flight) 57.6 GiB allocated, rank 448 (last stage, the loss) 53.5 GiB; one
    rank never holds both (the model counted both: 68.9 GiB).
    """
    from hwadvisor.perfmodel import estimate

    data = json.loads((ROOT / "benchmarks" / "data" /
                       "torchtitan_memory_405b_h200.json").read_text())
    ranks = data["results"][0]["ranks"]
    assert [r["status"] for r in ranks] == ["ok", "ok"]
    measured = max(r["steady_max_allocated_gib"] for r in ranks)
    published = _published()
    fig = next(f for f in published.load_figures()
               if f.id == "torchtitan-h100-llama3.1-405b-fsdp8-tp8-pp8-fp8")
    workload, device, options = published.build(fig)
    options = options.model_copy(update={"compiled": False})  # the measurement ran eager
    memory = estimate(workload, device, options).memory
    predicted = (memory.total_bytes - memory.runtime_bytes) / GIB
    assert predicted == pytest.approx(measured, rel=0.10)


def test_per_op_sac_recomputes_wk_wo_and_w3() -> None:
    """torchtitan's per-op SAC keeps wq, wv, w1, w2 and SDPA: the backward redoes the rest."""
    from hwadvisor.models import ModelOptions
    from hwadvisor.perfmodel.compute import op_sac_recomputed_share
    from hwadvisor.pipeline import estimate_report
    from hwadvisor.workload.build import load_spec
    from hwadvisor.workload.request import WorkloadRequest

    spec = load_spec("llama-3-8b")
    h, q, kv, inter = 4096.0, 4096.0, 1024.0, 14336.0
    assert op_sac_recomputed_share(spec) == pytest.approx(
        (h * kv + q * h + h * inter) / (h * (q + 2 * kv) + q * h + 3 * h * inter))

    def step_s(checkpointing: str) -> float:
        request = WorkloadRequest(model="llama-3-8b", phase="training", batch=2, prompt_len=8192,
                                  engine="torchtitan",
                                  engine_options=(f"checkpointing={checkpointing}",))
        report = estimate_report(request, "h100-sxm", ModelOptions())
        assert report.estimate is not None and report.estimate.times.train_step_s
        return report.estimate.times.train_step_s

    plain, sac = step_s("none"), step_s("selective")
    # about a third of the forward's matmuls again: ~10% of a step, not attention's ~3%
    assert 1.07 < sac / plain < 1.2
