"""The plan's layout in words: FSDP shards, HSDP shards x replicas, TP groups and replicas."""

from __future__ import annotations

import pytest

from hwadvisor.models import PlanLayout
from hwadvisor.report.plantext import _data_parallel


@pytest.mark.parametrize(("layout", "shards", "replicas", "words"), [
    (PlanLayout(gpus=32, nodes=4, dp=32, sharding="hsdp"), 8, 4, ["8 shards", "4 replicas"]),
    (PlanLayout(gpus=8, nodes=1, dp=8, sharding="fsdp"), 8, 1, ["8 shards"]),
    (PlanLayout(gpus=8, nodes=1, tp=8, dp=1, sharding="tp"), 1, 1, ["1 replica"]),
    (PlanLayout(gpus=4, nodes=1, dp=4, sharding="ddp"), 1, 4, ["4 replicas"]),
])
def test_data_parallel_degrees_and_words(layout, shards, replicas, words):
    assert layout.shard_degree() == shards
    assert layout.replicas() == replicas
    assert _data_parallel(layout) == words
