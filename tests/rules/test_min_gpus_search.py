"""The fewest-GPUs search: the same answer as trying every count, with fewer plan searches."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hwadvisor.pipeline import recommend_report
from hwadvisor.rules.sizing import _counts, _fewest
from hwadvisor.workload import WorkloadRequest

LIMIT = 100.0


def _fit_at(needed: int, sharded: float, fixed: float, calls: list[int]):
    """A fake plan search: fits from `needed` GPUs; memory a + b / n otherwise."""
    def fit_at(count: int):
        calls.append(count)
        est = SimpleNamespace(memory=SimpleNamespace(total_bytes=fixed + sharded / count))
        return count >= needed, est
    return fit_at


@settings(max_examples=300, deadline=None, derandomize=True)
@given(per_node=st.sampled_from([1, 2, 4, 8]), current=st.sampled_from([1, 2, 8]),
       needed=st.integers(1, 1100), sharded=st.floats(1.0, 1e5), fixed=st.floats(0.0, 99.0),
       seeded=st.booleans())
def test_fewest_is_the_first_count_that_fits(per_node, current, needed, sharded, fixed, seeded):
    counts = _counts(current, per_node)
    calls: list[int] = []
    seed = [(current, fixed + sharded / current)] if seeded else []
    found = _fewest(counts, _fit_at(needed, sharded, fixed, calls), LIMIT, seed)
    first = next((i for i, c in enumerate(counts) if c >= needed), None)
    assert found == first
    assert len(set(calls)) == len(calls)  # no count is searched twice
    # Never worse than bisecting the whole list, with a doubling phase in front.
    assert len(set(calls)) <= 2 * max(1, len(counts)).bit_length() + 2


def test_a_good_guess_needs_two_searches():
    """Memory exactly a + b / n: one miss (the a = 0 guess), then the secant lands on 48."""
    counts = _counts(8, 8)
    calls: list[int] = []
    # 8 GPUs need 500 units per GPU with 20 fixed: b = 3840; fits below 100 from 48 GPUs.
    found = _fewest(counts, _fit_at(48, 3840.0, 20.0, calls), LIMIT, [(8, 20.0 + 3840.0 / 8)])
    assert counts[found] == 48
    assert calls == [40, 48]


def test_nothing_fits_within_the_search():
    counts = _counts(8, 8)
    calls: list[int] = []
    assert _fewest(counts, _fit_at(10**6, 1e9, 0.0, calls), LIMIT, []) is None
    assert calls[-1] == counts[-1]


@pytest.mark.parametrize("gpus", [40, 48, 80, 88, 96])
def test_deepseek_training_needs_88_h200s_or_48_with_cpu_offload(gpus):
    """The 671B MoE fine-tune with torchtitan: 88 x H200 (11 nodes) hold it on the GPUs alone.

    torchtitan shards an fp32 model (16 bytes a parameter: fp32 shard, fp32 gradient, two Adam
    moments, no 16-bit copy; measured on its own ranks, benchmarks/data/
    torchtitan_memory_h200.json), so 671B x 16 B / 88 = 122 GB a GPU fits the H200 with the
    activations and 80 do not. It has no 8-bit optimizer and its only offload is FSDP2's
    CPUOffloadPolicy (parameters, gradients and Adam state in host RAM over the nodes' hosts):
    with it 48 GPUs (6 nodes of 2 TB) fit, 40 do not.
    """
    report = recommend_report("training-throughput", "h200-sxm",
                              WorkloadRequest(model="deepseek-v3", gpus=8))
    assert report.plan is not None and not report.plan.fits
    assert report.plan.min_gpus == 48
    at = recommend_report("training-throughput", "h200-sxm",
                          WorkloadRequest(model="deepseek-v3", gpus=gpus))
    assert at.plan is not None and at.plan.fits == (gpus >= 48)
    offloaded = "optimizer-offload" in {s.id for s in at.plan.steps}
    assert offloaded == (48 <= gpus < 88)
