"""A serving step's time (perfmodel/steps.py): its shortcuts give what the long way gives."""

from __future__ import annotations

import pytest

from hwadvisor import pipeline
from hwadvisor.models import ModelOptions
from hwadvisor.perfmodel.core import _setup
from hwadvisor.perfmodel.steps import _EXACT_ROWS, _ROW_STEP, StepModel
from hwadvisor.workload import WorkloadRequest
from hwadvisor.workload.settle import on_engine_defaults

# dense on one GPU, tensor parallel (collectives by rows), MoE with expert parallelism and
# data-parallel attention, llama.cpp (physical batches of n_ubatch)
CASES = (
    ("llama-3-8b", "vllm", "h100-sxm", 1, ModelOptions()),
    ("llama-3-70b", "vllm", "h100-sxm", 4, ModelOptions()),
    ("qwen3-30b-a3b", "sglang", "h200-sxm", 8,
     ModelOptions(expert_parallel=True, dp_attention=True)),
    ("llama-3-8b", "llamacpp", "rtx-4090", 1, ModelOptions()),
)


def _steps(model: str, engine: str, device: str, gpus: int,
           options: ModelOptions) -> tuple[StepModel, object]:
    request = WorkloadRequest(model=model, engine=engine, gpus=gpus)
    report = pipeline.estimate_report(request, device, options)
    assert report.workload is not None
    dev = report.devices[0]
    workload, opts = on_engine_defaults(report.workload, dev, options)
    return StepModel(workload, dev, opts), (workload, dev, opts)


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}-{c[1]}-{c[3]}" for c in CASES])
def test_a_step_of_n_rows_costs_what_a_whole_new_set_up_of_batch_n_gives(case: tuple) -> None:
    steps, (workload, dev, opts) = _steps(*case)
    for rows in (2, 7, 64, 300, 2048):
        kept = steps._dense_s(rows, False)
        whole = _setup(steps._workload.model_copy(update={"batch": rows}), dev, opts, None)
        steps._setup_for = lambda _rows, whole=whole: whole  # type: ignore[method-assign]
        steps._dense_cache.clear()
        assert steps._dense_s(rows, False) == pytest.approx(kept, rel=1e-12)
        del steps._setup_for  # back to the class's own
        steps._dense_cache.clear()


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}-{c[1]}-{c[3]}" for c in CASES])
def test_above_64_rows_a_steps_dense_part_is_within_half_a_percent_of_its_own(
        case: tuple) -> None:
    steps, _ = _steps(*case)
    assert _EXACT_ROWS == 64 and _ROW_STEP == 16
    for rows in list(range(65, 400, 7)) + list(range(1000, 4200, 37)):
        exact = steps._pieces_s(rows, False)
        assert steps._pieces_s(rows, False, near=True) == pytest.approx(exact, rel=5e-3)
    exact_rows = [1, 17, 64, 80, 512]  # on the grid or below it
    if steps._ubatch == 512:  # llama.cpp: a step of 560 rows is 512 + 48, each exact
        exact_rows += [513, 560, 1024 + 33]
    for rows in exact_rows:
        assert steps._pieces_s(rows, False, near=True) == steps._pieces_s(rows, False)
