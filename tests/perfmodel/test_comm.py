"""Communication model: DDP, FSDP, TP volumes, link choice, overlap, multi-node."""

from __future__ import annotations

import pytest

from hwadvisor import profiles
from hwadvisor.models import Device, ModelOptions
from hwadvisor.perfmodel import constants as C
from hwadvisor.perfmodel import estimate
from hwadvisor.perfmodel.comm import Link, allreduce_s, gather_s, intra_node_link
from hwadvisor.perfmodel.efficiency import collective_protocol_s
from hwadvisor.workload import WorkloadRequest, build_workload

GB = 1e9


def dev(profile_id: str) -> Device:
    return profiles.device_from_profile(profile_id, index=0)


def train(gpus=8, **kw):
    return build_workload(WorkloadRequest(model="llama-3-8b", phase="training", batch=1, gpus=gpus,
                                          **kw))


def test_single_gpu_has_no_communication():
    est = estimate(train(gpus=1), dev("h100-sxm"), ModelOptions(sharding="fsdp"))
    assert est.times.communication_s == 0.0
    assert est.communication == {}


def test_collective_formulas():
    link = Link(100.0, "nvlink", "test")
    fixed = C.COLLECTIVE_LATENCY_S["nvlink"] + collective_protocol_s(8e9, "nvlink")
    gather_bw = 100e9 * C.COLLECTIVE_OP_EFFICIENCY["all_gather"]
    assert allreduce_s(8e9, 8, link) == pytest.approx(2 * 7 / 8 * 8e9 / 100e9 + fixed)
    assert gather_s(8e9, 8, link) == pytest.approx(7 / 8 * 8e9 / gather_bw + fixed)
    # a decode step's 16 KB all-reduce pays the latency, not the protocol overhead
    assert allreduce_s(16e3, 8, link) < 1.2 * C.COLLECTIVE_LATENCY_S["nvlink"]


def test_ddp_allreduces_the_gradients():
    est = estimate(train(), dev("h100-sxm"), ModelOptions(sharding="ddp"))
    grads = est.params_total * 2  # bf16 gradients under mixed precision
    assert est.communication["ddp_allreduce_bytes"] == pytest.approx(2 * 7 / 8 * grads)
    busbw = est.communication["bus_bandwidth_gbps"]
    assert busbw == pytest.approx(450 * C.NVLINK_BUS_EFFICIENCY)
    assert est.times.communication_s >= 2 * 7 / 8 * grads / (busbw * GB)
    assert est.times.communication_exposed_s == est.times.communication_s  # no overlap


def test_fsdp_moves_about_three_times_the_params():
    est = estimate(train(), dev("h100-sxm"), ModelOptions(sharding="fsdp"))
    volume = est.communication["fsdp_allgather_bytes"] + est.communication[
        "fsdp_reduce_scatter_bytes"]
    assert volume == pytest.approx(3 * 7 / 8 * est.params_total * 2)


def test_comm_overlap_hides_behind_compute():
    base = estimate(train(), dev("h100-sxm"), ModelOptions(sharding="fsdp"))
    over = estimate(train(), dev("h100-sxm"), ModelOptions(sharding="fsdp", comm_overlap=True))
    roofline = max(over.times.train_compute_s, over.times.train_memory_s)
    assert over.times.communication_s == pytest.approx(base.times.communication_s)
    assert over.times.communication_exposed_s == pytest.approx(
        max(0.0, over.times.communication_s - roofline))
    assert over.times.train_step_s < base.times.train_step_s


def test_pcie_is_slower_than_nvlink():
    sxm = dev("h100-sxm")
    no_nvlink = sxm.model_copy(update={"interconnect": sxm.interconnect.model_copy(
        update={"nvlink": None})})
    fast = estimate(train(), sxm, ModelOptions(sharding="ddp"))
    slow = estimate(train(), no_nvlink, ModelOptions(sharding="ddp"))
    assert slow.communication["bus_bandwidth_gbps"] == 50.0  # gen5 x16 effective
    assert slow.times.communication_s > 5 * fast.times.communication_s


def test_unknown_link_assumes_pcie_gen4_and_says_so():
    bare = dev("h100-sxm").model_copy(update={"interconnect": None})
    link = intra_node_link(bare)
    assert link.kind == "pcie" and link.gbps == 25.0
    est = estimate(train(), bare, ModelOptions(sharding="ddp"))
    assert any("assumed" in a and "PCIe gen4" in a for a in est.assumptions)


def test_measured_bus_bandwidth_is_used():
    w, d = train(), dev("h100-sxm")
    base = estimate(w, d, ModelOptions(sharding="ddp"))
    measured = estimate(w, d, ModelOptions(sharding="ddp"), measured_busbw_gbps=180.0)
    assert measured.communication["bus_bandwidth_gbps"] == 180.0
    assert measured.times.communication_s > 1.9 * base.times.communication_s * 0.99
    assert any("measured bus bandwidth" in a for a in measured.assumptions)


def test_multi_node_uses_the_network():
    d = dev("h100-sxm")
    one_node = estimate(train(gpus=8), d, ModelOptions(sharding="fsdp"))
    two_nodes = estimate(build_workload(WorkloadRequest(model="llama-3-8b", phase="training",
                                                        batch=1, nodes=2, gpus_per_node=8)),
                         d, ModelOptions(sharding="fsdp"))
    assert two_nodes.communication["bus_bandwidth_gbps"] == C.INTER_NODE_DEFAULT_GBPS
    assert two_nodes.times.communication_s > one_node.times.communication_s
    slower = estimate(build_workload(WorkloadRequest(model="llama-3-8b", phase="training", batch=1,
                                                     nodes=2, gpus_per_node=8,
                                                     inter_node_gbps=25.0)), d,
                      ModelOptions(sharding="fsdp"))
    assert slower.communication["bus_bandwidth_gbps"] == 25.0
    assert slower.times.communication_s > two_nodes.times.communication_s


def test_tensor_parallel_decode_pays_latency_per_layer():
    est = estimate(build_workload(WorkloadRequest(model="llama-3-70b", gpus=8)), dev("h100-sxm"),
                   ModelOptions(sharding="tp"))
    layers = 80
    assert est.communication["tp_decode_s"] >= layers * 2 * C.COLLECTIVE_LATENCY_S["nvlink"]
    # prefill moves batch x prompt x hidden activations, twice per layer
    expected = layers * 2 * 2 * 7 / 8 * 2048 * 8192 * 2
    assert est.communication["tp_prefill_bytes"] == pytest.approx(expected)


def test_tensor_parallel_across_nodes_is_exposed_even_with_overlap():
    w = build_workload(WorkloadRequest(model="llama-3-70b", nodes=2, gpus_per_node=8,
                                       engine="vllm"))
    est = estimate(w, dev("h100-sxm"), ModelOptions(sharding="tp", comm_overlap=True,
                                                     cuda_graphs=True))
    assert est.times.communication_exposed_s == est.times.communication_s > 0
    assert any("across nodes" in a for a in est.assumptions)
    assert est.bottleneck == "communication"


def test_tensor_parallel_training_four_allreduces_per_layer():
    w = train(prompt_len=1024)
    est = estimate(w, dev("h100-sxm"), ModelOptions(sharding="tp"))
    group_batch = 1  # batch is per data-parallel rank: the TP group of 8 shares its sequence
    expected = 32 * 4 * 2 * 7 / 8 * group_batch * 1024 * 4096 * 2
    assert est.communication["tp_allreduce_bytes"] == pytest.approx(expected)


def test_tp_and_ddp_training_compare_at_equal_global_batch():
    d = dev("h100-sxm")
    w = train(prompt_len=1024)
    # batch is per data-parallel rank: 8 DDP ranks of 1 = one TP group of 8 with 8
    w8 = w.model_copy(update={"batch": w.batch * 8})
    ddp = estimate(w, d, ModelOptions(sharding="ddp", attention_kernel="flash"))
    tp = estimate(w8, d, ModelOptions(sharding="tp", attention_kernel="flash"))
    # same FLOPs per GPU; TP's GEMMs are narrower (N / 8) and taller (8 sequences): their
    # efficiency differs a little, so the compute times agree to within 10%
    assert tp.flops_per_step == pytest.approx(ddp.flops_per_step)
    assert tp.times.train_compute_s == pytest.approx(ddp.times.train_compute_s, rel=0.1)
    # TP shards the optimizer step too; DDP runs it in full on every GPU
    assert tp.times.optimizer_s == pytest.approx(ddp.times.optimizer_s / 8, rel=1e-3)
    assert tp.memory.optimizer_bytes == pytest.approx(ddp.memory.optimizer_bytes / 8)


def test_tp_training_across_nodes_keeps_tp_inside_the_node():
    w = build_workload(WorkloadRequest(model="llama-3-8b", phase="training", batch=1, nodes=2,
                                       gpus_per_node=8))
    est = estimate(w, dev("h100-sxm"), ModelOptions(sharding="tp"))
    assert est.communication["tp_bus_bandwidth_gbps"] == pytest.approx(450 * 0.8)
    assert est.communication["bus_bandwidth_gbps"] == C.INTER_NODE_DEFAULT_GBPS
    # data parallel between the two TP groups all-reduces the 1/8-sharded gradients
    grads = est.params_total * 2 / 8
    assert est.communication["tp_dp_allreduce_bytes"] == pytest.approx(2 * 1 / 2 * grads)
    assert not any("across nodes" in a for a in est.assumptions)


def test_default_strategy_when_gpus_given_without_sharding():
    train_est = estimate(train(), dev("h100-sxm"))
    assert "ddp_allreduce_bytes" in train_est.communication
    infer_est = estimate(build_workload(WorkloadRequest(model="llama-3-70b", gpus=8)),
                         dev("h100-sxm"))
    assert "tp_decode_bytes" in infer_est.communication


def test_multi_node_takes_the_network_from_the_profile_unless_given():
    two_nodes = {"phase": "training", "batch": 1, "nodes": 2, "gpus_per_node": 8}
    a100 = dev("a100-80gb")  # DGX A100: one 200 Gb/s HDR NIC per GPU = 25 GB/s
    assert a100.interconnect is not None and a100.interconnect.network_gbps == 25.0
    planned = estimate(build_workload(WorkloadRequest(model="llama-3-8b", **two_nodes)), a100,
                       ModelOptions(sharding="fsdp"))
    assert planned.communication["bus_bandwidth_gbps"] == 25.0
    assert any("profile's reference system" in a for a in planned.assumptions)
    given = estimate(build_workload(WorkloadRequest(model="llama-3-8b", inter_node_gbps=100.0,
                                                    **two_nodes)), a100,
                     ModelOptions(sharding="fsdp"))
    assert given.communication["bus_bandwidth_gbps"] == 100.0
    h100 = dev("h100-sxm")  # the same NVLink GPU with no reference-system network: assumed
    assert h100.interconnect is not None
    bare = h100.model_copy(update={"interconnect": h100.interconnect.model_copy(
        update={"network_gbps": None})})
    assumed = estimate(build_workload(WorkloadRequest(model="llama-3-8b", **two_nodes)), bare,
                       ModelOptions(sharding="fsdp"))
    assert assumed.communication["bus_bandwidth_gbps"] == C.INTER_NODE_DEFAULT_GBPS
    assert any("assumed 400 Gb/s" in a for a in assumed.assumptions)


def _fsdp_pp(grad_accum: int, stages: int) -> dict[str, float]:
    wl = build_workload(WorkloadRequest(model="llama-3-8b", phase="training", batch=1, gpus=8,
                                        grad_accum=grad_accum, engine="torchtitan"))
    opts = ModelOptions(sharding="fsdp", pipeline_stages=stages)
    return estimate(wl, dev("h100-sxm"), opts).communication


def test_fsdp_with_pipeline_stages_gathers_once_per_step_not_per_micro_batch():
    # torchtitan keeps a stage's parameters gathered across micro-batches under PP and
    # torch.distributed.pipelining reduces gradients on the last backward only.
    one, eight = _fsdp_pp(1, 4), _fsdp_pp(8, 4)
    assert eight["fsdp_allgather_bytes"] == pytest.approx(one["fsdp_allgather_bytes"])
    assert eight["fsdp_reduce_scatter_bytes"] == pytest.approx(one["fsdp_reduce_scatter_bytes"])
    # without stages every micro-batch gathers twice and reduce-scatters
    flat1, flat8 = _fsdp_pp(1, 1), _fsdp_pp(8, 1)
    assert flat8["fsdp_allgather_bytes"] == pytest.approx(8 * flat1["fsdp_allgather_bytes"])


def _tp_fsdp(engine: str, overlap: bool):
    wl = build_workload(WorkloadRequest(model="llama-3.1-70b", phase="training", batch=4,
                                        prompt_len=8192, gpus=16, nodes=2, gpus_per_node=8,
                                        engine=engine, activation_checkpointing=True))
    opts = ModelOptions(sharding="fsdp", tp_size=8, comm_overlap=overlap, compiled=True)
    return estimate(wl, dev("h100-sxm"), opts)


def test_async_tp_hides_part_of_the_tp_traffic_and_none_of_fsdp():
    from hwadvisor.engines import engine_for

    wl_engine = engine_for(build_workload(WorkloadRequest(model="llama-3-8b", phase="training",
                                                          engine="torchtitan")))
    hidden = wl_engine.costs.tp_overlap_hidden
    assert 0.0 < hidden < 1.0
    vanilla, asynctp = _tp_fsdp("torchtitan", False), _tp_fsdp("torchtitan", True)
    tp = asynctp.communication["tp_train_s"]
    saved = vanilla.times.communication_exposed_s - asynctp.times.communication_exposed_s
    # async TP takes its share of the TP collectives off the step, and nothing of FSDP's
    assert saved == pytest.approx(hidden * tp, rel=1e-6)
    # Megatron's overlap switch covers TP and data-parallel traffic, up to the compute
    megatron = _tp_fsdp("megatron", True)
    assert megatron.times.communication_exposed_s < asynctp.times.communication_exposed_s


def test_geforce_pairs_have_no_peer_access_and_collectives_go_through_the_host():
    # NVIDIA disables P2P on GeForce RTX 40 / 50 cards: NCCL stages through host memory.
    link = intra_node_link(dev("rtx-4090"), 2)
    assert link.kind == "host-staged"
    assert link.gbps == pytest.approx(25.0 * C.HOST_STAGED_BUS_SHARE)
    assert intra_node_link(dev("l40s"), 2).kind == "pcie"  # a datacenter PCIe card has P2P


def test_a_probed_device_whose_peers_all_refuse_p2p_is_host_staged():
    from hwadvisor.models.hardware import Interconnect, PeerLink

    probed = dev("h100-pcie").model_copy(update={"interconnect": Interconnect(
        peers=[PeerLink(peer_index=1, link="PHB", p2p=False)])})
    assert intra_node_link(probed, 2).kind == "host-staged"


def test_lora_reduces_the_adapters_gradients_only():
    full = estimate(train(gpus=2), dev("h100-pcie"), ModelOptions(sharding="ddp"))
    lora = estimate(train(gpus=2), dev("h100-pcie"),
                    ModelOptions(sharding="ddp", finetune="lora", lora_rank=16))
    # 8B gradients in bf16 (16 GB) against ~42M fp32 adapter gradients (~0.17 GB)
    assert lora.communication["ddp_allreduce_bytes"] < full.communication[
        "ddp_allreduce_bytes"] / 50
