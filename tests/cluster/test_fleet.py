"""The fleet view on synthetic figures: which groups are timed, nodes, outliers and causes.

Every figure here is made up for the test (a fleet of H200-like GPUs), not a measurement.
"""

from __future__ import annotations

import pytest

from hwadvisor.cluster import fleet, job
from hwadvisor.cluster.calibration import inter_node_figure
from hwadvisor.models import (
    Device,
    Interconnect,
    Measured,
    NvidiaDetails,
    NvLinkInfo,
    PcieLink,
    Report,
    TrialEnvironment,
    TrialResult,
)
from hwadvisor.perfmodel.calibration import calibrate_network
from hwadvisor.trials.distributed import missing_ranks

SIZES = [("ddp_bucket_25mib", 25 * 2**20), ("1gib", 2**30)]


def keys(rounds):
    return [[run.key for run in runs] for runs in rounds]


def test_two_nodes_of_eight():
    plan = fleet.plan_groups([0] * 8 + [1] * 8, SIZES)
    assert keys(plan.rounds) == [["world"], ["intra-node:0", "intra-node:1"], ["inter-node"]]
    assert plan.rounds[1][1].ranks == list(range(8, 16))
    assert plan.rounds[2][0].ranks == [0, 8]
    assert plan.aliases == {"node-pair:0-1": "inter-node"}  # two nodes: one pair, the same ranks
    assert plan.rounds[0][0].ops == ["all_reduce", "all_gather", "reduce_scatter"]
    assert all(run.ops == ["all_reduce"] for runs in plan.rounds[1:] for run in runs)


def test_one_node_times_the_world_once():
    plan = fleet.plan_groups([0, 0], SIZES)
    assert keys(plan.rounds) == [["world"]]
    assert plan.aliases == {"intra-node:0": "world"}


def test_one_rank_per_node_times_the_world_once():
    plan = fleet.plan_groups([0, 1], SIZES)
    assert keys(plan.rounds) == [["world"]]
    assert plan.aliases == {"inter-node": "world", "node-pair:0-1": "world"}


def test_a_single_rank_has_nothing_to_time():
    assert fleet.plan_groups([0], SIZES).runs == []


@pytest.mark.parametrize("n", [3, 4, 5, 8])
def test_ring_rounds_pair_every_node_twice_and_never_twice_a_round(n):
    rounds = fleet.ring_rounds(list(range(n)))
    pairs = [p for r in rounds for p in r]
    assert len(pairs) == n
    for node in range(n):
        assert sum(node in p for p in pairs) == 2
    for r in rounds:
        members = [node for p in r for node in p]
        assert len(members) == len(set(members))


def test_pairs_run_at_the_largest_size_only():
    plan = fleet.plan_groups([0, 0, 1, 1, 2, 2], SIZES)
    pair_runs = [run for runs in plan.rounds for run in runs if run.key.startswith("node-pair")]
    assert len(pair_runs) == 3 and all(run.sizes == [SIZES[1]] for run in pair_runs)


def _result(op, label, nbytes, busbw):
    return {"op": op, "label": label, "bytes": nbytes, "status": "ok", "busbw_gbps": busbw,
            "algbw_gbps": busbw, "error": 0.0, "samples_s": [1e-3]}


def _h200(index, pcie_width=16, links=18, limit_w=700.0, ecc=0, reasons=None):
    return Device(
        index=index, vendor="nvidia", device_class="datacenter-gpu", name="NVIDIA H200",
        source="probe",
        interconnect=Interconnect(
            pcie=PcieLink(generation_max=5, generation_current=5, width_max=16,
                          width_current=pcie_width),
            nvlink=NvLinkInfo(links_active=links, version=4, bandwidth_gbps=25.0 * links)),
        nvidia=NvidiaDetails(sm_clock_max_mhz=1980, memory_clock_max_mhz=3201,
                             power_limit_w=limit_w, ecc_enabled=True,
                             ecc_errors_uncorrected=ecc, throttle_reasons=reasons or []),
    )


def _payload(rank, node, bw=4200.0, bf16=780.0, device=None, env=None, nccl=None):
    trial = TrialResult(id="memory-bandwidth", status="ok",
                        environment=env or TrialEnvironment(sm_clock_mhz=1980))
    return fleet.RankPayload(
        rank=rank, local_rank=rank % 2, node_rank=node, hostname=f"node{node}",
        device=device or _h200(rank % 2),
        measured=Measured(memory_bandwidth_gbps=bw, matmul_tflops={"bf16": bf16},
                          trial_ids=["memory-bandwidth", "matmul-peak"]),
        trials=[trial], nccl_env=nccl or {"NCCL_IB_HCA": "mlx5"},
    )


def _build(payloads, results):
    plan = fleet.plan_groups([p.node_rank for p in payloads], SIZES)
    return fleet.build_cluster(payloads, plan, results, launcher="torchrun", job_id=None,
                               backend="nccl", nccl_version="2.28.9")


def test_a_slow_gpu_is_an_outlier_with_what_the_probe_saw():
    slow_env = TrialEnvironment(sm_clock_mhz=1200, throttle_reasons=["gpu_idle", "hw_slowdown"])
    payloads = [_payload(r, r // 2) for r in range(7)]
    payloads.append(_payload(7, 3, bw=3000.0, env=slow_env,
                             device=_h200(1, ecc=4, limit_w=500.0)))
    cluster = _build(payloads, {})
    assert len(cluster.outliers) == 1
    out = cluster.outliers[0]
    assert (out.scope, out.rank, out.node_rank, out.metric) == ("gpu", 7, 3,
                                                                "memory_bandwidth_gbps")
    assert out.value == 3000.0 and out.median == 4200.0
    assert out.ratio == pytest.approx(3000 / 4200)
    assert any("hw_slowdown" in c and "gpu_idle" not in c for c in out.causes)
    assert "SM clock 1200 of 1980 MHz right after the trial" in out.causes
    assert "4 uncorrectable ECC errors since the driver loaded" in out.causes
    assert "power limit 500 W against the fleet's 700 W" in out.causes


def test_within_ten_percent_is_no_outlier():
    payloads = [_payload(r, r // 2, bw=4200.0 - 40 * r, bf16=780.0 - 7 * r) for r in range(8)]
    assert _build(payloads, {}).outliers == []


def test_gpus_are_compared_with_their_own_model():
    payloads = [_payload(r, 0) for r in range(3)]
    slower_model = _h200(3).model_copy(update={"name": "NVIDIA H100"})
    payloads += [_payload(3, 1, bw=3000.0, device=slower_model),
                 _payload(4, 1, bw=3050.0, device=slower_model.model_copy(update={"index": 4}))]
    assert _build(payloads, {}).outliers == []


def test_a_slow_nodes_pairs_make_it_the_outlier_and_not_its_neighbours():
    # Four nodes of two ranks; the ring's pairs (0,1) (2,3) | (1,2) (3,0); node 2 is slow.
    payloads = [_payload(r, r // 2) for r in range(8)]
    gib = SIZES[1][1]
    pair = {"node-pair:0-1": 48.0, "node-pair:2-3": 20.0, "node-pair:1-2": 21.0,
            "node-pair:3-0": 47.0}
    results = {key: [_result("all_reduce", "1gib", gib, bw)] for key, bw in pair.items()}
    results["intra-node:1"] = [_result("all_reduce", "1gib", gib, 250.0)]
    for node in (0, 2, 3):
        results[f"intra-node:{node}"] = [_result("all_reduce", "1gib", gib, 330.0)]
    cluster = _build(payloads, results)
    inter = {n.node_rank: n.inter_node_busbw_gbps for n in cluster.nodes}
    assert inter == {0: 48.0, 1: 48.0, 2: 21.0, 3: 47.0}
    found = {(o.metric, o.node_rank) for o in cluster.outliers}
    assert found == {("inter_node_busbw_gbps", 2), ("intra_node_busbw_gbps", 1)}
    pairs = [c for c in cluster.collectives if c.scope == "node-pair"]
    assert sorted(c.node_ranks for c in pairs) == [[0, 1], [0, 3], [1, 2], [2, 3]]


def test_node_causes_name_links_and_nccl_settings():
    payloads = [_payload(0, 0), _payload(1, 0),
                _payload(2, 1, device=_h200(0, pcie_width=8, links=16)),
                _payload(3, 1, nccl={"NCCL_IB_HCA": "mlx5", "NCCL_IB_DISABLE": "1"})]
    payloads[2].nccl_env = {"NCCL_IB_DISABLE": "1"}
    gib = SIZES[1][1]
    results = {"intra-node:0": [_result("all_reduce", "1gib", gib, 330.0)],
               "intra-node:1": [_result("all_reduce", "1gib", gib, 200.0)]}
    cluster = _build(payloads, results)
    node1 = cluster.nodes[1]
    assert node1.nccl_env_differs == {"NCCL_IB_DISABLE": "1", "NCCL_IB_HCA": None}
    out = next(o for o in cluster.outliers if o.scope == "node")
    assert out.node_rank == 1 and out.metric == "intra_node_busbw_gbps"
    assert "GPU 0: PCIe x8 of x16" in out.causes
    assert "GPU 0: 16 of 18 NVLinks active" in out.causes
    assert "NCCL_IB_DISABLE=1 on this node" in out.causes


def test_aliased_groups_report_the_timed_figures_under_their_own_scope():
    payloads = [_payload(0, 0), _payload(1, 1)]
    world = [_result(op, label, n, 40.0) for label, n in SIZES
             for op in ("all_reduce", "all_gather", "reduce_scatter")]
    cluster = _build(payloads, {"world": world})
    scopes = [(c.scope, c.op, c.size_label) for c in cluster.collectives]
    assert scopes.count(("world", "all_gather", "1gib")) == 1
    assert ("inter-node", "all_reduce", "1gib") in scopes
    assert ("inter-node", "all_gather", "1gib") not in scopes  # inter-node times all-reduce
    assert [s for s in scopes if s[0] == "node-pair"] == [("node-pair", "all_reduce", "1gib")]
    assert cluster.nodes[0].inter_node_busbw_gbps == 40.0


def test_failed_ranks_and_the_report_round_trip():
    payloads = [_payload(0, 0), _payload(1, 1)]
    payloads[1].error = "RuntimeError: CUDA error"
    payloads[1].trials = [TrialResult(id="matmul-peak", status="error", reason="boom")]
    cluster = _build(payloads, {})
    assert cluster.failed_ranks == [1]
    assert cluster.nodes[1].ranks[0].failed_trials == ["matmul-peak"]
    local = Report(host={"os": "Linux"}, devices=[_h200(0), _h200(1)])
    report = job.gathered_report(local, cluster, payloads, None)
    assert Report.model_validate_json(report.model_dump_json()) == report
    assert job.failed(report)
    assert any("rank 1 (node1, node 1) failed: RuntimeError: CUDA error" in n
               for n in report.notes)
    assert report.devices[0].measured is not None  # rank 0's node-mates fill its host's GPUs


def test_pick_device_by_pci_address_then_visible_devices(monkeypatch):
    gpus = [_h200(i) for i in range(4)]
    for i, gpu in enumerate(gpus):
        assert gpu.nvidia is not None
        gpu.nvidia.pci_bus_id = f"00000000:{0x18 + i:02X}:00.0"
    place = job.Place(local_rank=0, cuda_index=0, pci_bus_id="0000:1a:00.0")
    assert job.pick_device(gpus, place).index == 2
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,1")
    assert job.pick_device(gpus, job.Place(0, 0, None)).index == 3
    assert job.pick_device(gpus, job.Place(1, None, None)) is None  # no GPU: the CPU
    assert job.physical_index(1, "GPU-uuid-a,GPU-uuid-b") == 1


def test_missing_ranks_from_gloo_messages():
    assert missing_ranks("[Rank 0]: Ranks 1, 3 failed to pass monitoredBarrier in 3000 ms") \
        == [1, 3]
    assert missing_ranks("[Rank 0]: Rank 2 failed to pass monitoredBarrier in 30 ms") == [2]
    assert missing_ranks("Connection closed by peer") == []


# --- planning with a cluster report's inter-node bandwidth (recommend --calibration) -------


def _cluster_report(busbw=12.5):
    payloads = [_payload(r, r // 8) for r in range(16)]
    gib = SIZES[1][1]
    cluster = _build(payloads, {"inter-node": [_result("all_reduce", "1gib", gib, busbw)]})
    return Report(kind="validate", host={"os": "Linux"}, cluster=cluster,
                  notes=["crafted test fixture: every figure is illustrative"])


def _training(**changes):
    from hwadvisor.workload import WorkloadRequest

    return WorkloadRequest(model="llama-3-8b", phase="training", **changes)


def test_the_measured_inter_node_bandwidth_goes_into_the_plan():
    from hwadvisor import pipeline

    layout = {"nodes": 2, "gpus_per_node": 8}
    request, notes = calibrate_network(_training(**layout), _cluster_report(), "cluster.json",
                                       inter_node_figure)
    assert request.inter_node_gbps == 12.5
    assert notes == ["calibration: inter-node bandwidth 12.5 GB/s per GPU, measured as "
                     "all-reduce bus bandwidth (1gib) across 2 nodes (cluster.json)"]
    plain = pipeline.recommend_report("training-throughput", "h200-sxm", _training(**layout))
    calibrated = pipeline.recommend_report("training-throughput", "h200-sxm", request)
    assert calibrated.workload is not None and plain.workload is not None
    assert calibrated.workload.inter_node_bandwidth_gbps == 12.5
    assert plain.workload.inter_node_bandwidth_gbps is None
    # A slower network than the DGX H200's 50 GB/s per GPU makes the training step longer.
    assert calibrated.estimate is not None and plain.estimate is not None
    assert calibrated.estimate.times != plain.estimate.times


def test_inter_node_gbps_given_wins_and_a_layout_is_suggested():
    request, notes = calibrate_network(_training(inter_node_gbps=25.0), _cluster_report(),
                                       "c.json", inter_node_figure)
    assert request.inter_node_gbps == 25.0 and "--inter-node-gbps 25 given" in notes[0]
    _, notes = calibrate_network(_training(), _cluster_report(), "c.json", inter_node_figure)
    assert "--nodes 2 --gpus-per-node 8 plans it" in notes[-1]


def test_a_report_without_an_inter_node_figure_changes_nothing():
    request = _training()
    assert calibrate_network(request, Report(host={}), "one-host.json",
                             inter_node_figure) == (request, [])


def test_joining_a_job_without_torch_is_a_user_error(monkeypatch):
    from hwadvisor.cluster.launcher import Launch
    from hwadvisor.errors import UserError

    monkeypatch.setattr(job, "torch_missing", lambda: "torch is not installed")
    launch = Launch(launcher="slurm", rank=3, world_size=8, local_rank=3, local_world_size=8,
                    node_rank=0, master_addr="gpu07", master_port=23456, hostname="gpu07")
    with pytest.raises(UserError, match="rank 3 of a slurm job: joining it needs torch"):
        job.run(launch, lambda place: job.LocalRun(report=None))


def test_a_wrong_result_from_another_rank_survives_the_json_trip():
    from hwadvisor.trials import collectives

    data = {"world_size": 2, "backend": "gloo", "nvls": False, "device": "cpu",
            "results": [{**_result("all_reduce", "1gib", 2**30, 5.0), "error": None}]}
    result = collectives.to_result(data, 0.0)
    assert result.status == "error" and "wrong collective results" in (result.reason or "")


def test_recommend_calibration_reads_a_cluster_report(tmp_path):
    """recommend --calibration cluster.json: the measured inter-node bandwidth plans the job."""
    import json

    from typer.testing import CliRunner

    from hwadvisor.cli.app import app

    path = tmp_path / "cluster.json"
    path.write_text(_cluster_report(busbw=12.5).model_dump_json())
    result = CliRunner().invoke(app, [
        "recommend", "--goal", "training-throughput", "--device", "h200-sxm", "--model",
        "llama-3-8b", "--phase", "training", "--nodes", "2", "--gpus-per-node", "8",
        "--calibration", str(path), "--json"])
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["workload"]["inter_node_bandwidth_gbps"] == 12.5
    assert any("inter-node bandwidth 12.5 GB/s" in n for n in data["notes"])
