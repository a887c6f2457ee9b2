"""The collectives trial: its launcher run for real with gloo on 2 CPU processes, its sizes and
its bandwidth arithmetic; NCCL on >= 2 GPUs behind the gpu/multigpu markers."""

from __future__ import annotations

import time

import pytest

from hwadvisor.models import ModelSpec, Workload
from hwadvisor.trials import collectives
from hwadvisor.trials._collective_worker import BUS_FACTOR
from hwadvisor.trials.base import CollectiveSettings, TrialContext

torch = pytest.importorskip("torch")

requires_two_cuda = pytest.mark.skipif(
    not (torch.cuda.is_available() and torch.cuda.device_count() >= 2),
    reason="needs >= 2 CUDA GPUs",
)

GLOO = TrialContext(quick=True, collective=CollectiveSettings(backend="gloo", world_size=2,
                                                                timeout_s=120))


def test_gloo_launch_two_ranks_checks_values_and_returns_results():
    r = collectives.CollectivesTrial().run(GLOO)
    assert r.status == "ok", r.reason
    ran = [m for m in r.measurements if m.params["status"] == "ok"]
    # all-reduce and all-gather are in every gloo build; reduce-scatter may be missing
    ops = {m.params["op"] for m in ran}
    assert {"all_reduce", "all_gather"} <= ops
    for m in r.measurements:
        if m.params["status"] == "unsupported":
            assert m.params["op"] == "reduce_scatter" and m.params["reason"]
    for m in ran:
        assert m.error == 0.0  # small integers are exact: any difference is a wrong result
        assert len(m.samples) == 3 and all(s > 0 for s in m.samples)
        assert m.params["world_size"] == 2 and m.params["backend"] == "gloo"
        algbw = m.params["bytes"] / m.median / 1e9
        assert m.value == pytest.approx(algbw * BUS_FACTOR[m.params["op"]](2), rel=1e-9)
        assert r.effect[f"{m.params['op']}_{m.params['size_label']}_busbw_gbps"] == m.value
    largest = max((m for m in ran if m.params["op"] == "all_reduce"),
                  key=lambda m: m.params["bytes"])
    assert r.effect["busbw_gbps"] == largest.value


def test_bus_factors_follow_nccl_tests():
    # nccl-tests doc/PERFORMANCE.md: all-reduce 2(n-1)/n, all-gather and reduce-scatter (n-1)/n
    assert BUS_FACTOR["all_reduce"](8) == pytest.approx(1.75)
    assert BUS_FACTOR["all_gather"](8) == pytest.approx(0.875)
    assert BUS_FACTOR["reduce_scatter"](2) == pytest.approx(0.5)


def test_children_always_get_the_multicast_switches(monkeypatch):
    monkeypatch.setenv("NCCL_NVLS_ENABLE", "1")  # a caller's setting must not leak through
    env = collectives.child_env(rank=1, world=4, port=12345)
    assert env["NCCL_NVLS_ENABLE"] == "0"
    assert env["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1"
    assert env["NVSHMEM_DISABLE_NVLS"] == "1"
    assert (env["RANK"], env["LOCAL_RANK"], env["WORLD_SIZE"]) == ("1", "1", "4")
    assert (env["MASTER_ADDR"], env["MASTER_PORT"]) == ("127.0.0.1", "12345")


def test_launch_timeout_kills_the_ranks(monkeypatch):
    """Rank 1 never arrives (a stand-in process that sleeps): rank 0 waits for it at the
    rendezvous, so the launcher must hit its timeout and kill both children."""
    import subprocess

    original = subprocess.Popen
    children = []

    def rank1_never_joins(args, env=None, **kw):
        if env["RANK"] != "0":
            args = [args[0], "-c", "import time; time.sleep(600)"]
        p = original(args, env=env, **kw)
        children.append(p)
        return p

    monkeypatch.setattr(subprocess, "Popen", rank1_never_joins)
    config = {"backend": "gloo", "dtype": "fp32", "ops": ["all_reduce"], "sizes": [["x", 64]],
              "warmup": 1, "iters": 1, "repeats": 1, "timeout_s": 300}
    started = time.monotonic()
    with pytest.raises(collectives.CollectiveLaunchError, match="did not finish"):
        collectives.launch(2, config, timeout_s=3.0)
    assert time.monotonic() - started < 30
    assert len(children) == 2
    assert all(p.poll() is not None for p in children), "a child survived the timeout"


def test_failed_rank_reports_its_output():
    config = {"backend": "no-such-backend", "dtype": "fp32", "ops": ["all_reduce"],
              "sizes": [["x", 64]], "warmup": 1, "iters": 1, "repeats": 1, "timeout_s": 30}
    with pytest.raises(collectives.CollectiveLaunchError, match="exited with code"):
        collectives.launch(1, config, timeout_s=60)


def test_layer_bytes_of_llama3_8b():
    # Llama-3-8B: 8.03e9 params, of which 2 x 128256 x 4096 are embeddings/head, the rest in 32
    # layers: about 218e6 params per layer (config.json widths).
    spec = ModelSpec(name="llama-3-8b", model_type="llama", hidden_size=4096, num_layers=32,
                     num_heads=32, num_kv_heads=8, head_dim=128, intermediate_size=14336,
                     vocab_size=128256)
    layer = collectives.layer_param_bytes(Workload(model="x", spec=spec))
    assert layer == 2 * (4096 * 4096 * 2 + 4096 * 1024 * 2 + 3 * 4096 * 14336 + 2 * 4096)
    assert layer / 2 == pytest.approx((8.03e9 - 2 * 128256 * 4096) / 32, rel=0.01)
    labels = [label for label, _ in collectives.sizes_for(Workload(model="x", spec=spec))]
    assert labels == ["ddp_bucket_25mib", "fsdp_layer", "1gib"]


def test_nccl_with_one_gpu_is_unsupported_with_the_count(monkeypatch):
    import torch.distributed as dist

    monkeypatch.setattr(dist, "is_available", lambda: True)
    monkeypatch.setattr(dist, "is_nccl_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    r = collectives.CollectivesTrial().run(TrialContext())
    assert r.status == "unsupported"
    assert r.reason == "needs ≥ 2 CUDA GPUs; found 1"


@pytest.mark.gpu
@pytest.mark.multigpu
@requires_two_cuda
def test_nccl_collectives_on_all_local_gpus():
    r = collectives.CollectivesTrial().run(TrialContext(budget_s=30))
    assert r.status == "ok", r.reason
    assert r.effect["busbw_gbps"] > 1.0
    for op in ("all_reduce", "all_gather", "reduce_scatter"):
        assert f"{op}_1gib_busbw_gbps" in r.effect
    assert all(m.error == 0.0 for m in r.measurements if m.params["status"] == "ok")
