"""probe and validate under a launcher, run for real: two torchrun "nodes" on this host (gloo).

Each test starts torchrun twice, `--nnodes 2 --nproc-per-node 1 --node-rank 0|1`, meeting on
127.0.0.1 at a free port; HWADVISOR_HOSTNAME gives each "node" its own name. The GPU tests at
the end (gpu / multigpu markers) compare the job-wide collectives with the trial's own launcher.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hwadvisor.cli.app import app
from hwadvisor.trials.collectives import free_port

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
pytestmark = pytest.mark.skipif(
    not (dist.is_available() and dist.is_gloo_available()),
    reason="needs torch.distributed with gloo (torchrun)")

REPO = Path(__file__).resolve().parents[2]
TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]


def _env(node: str) -> dict[str, str]:
    env = dict(os.environ)
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    env.update({"HWADVISOR_HOSTNAME": node, "PYTHONPATH": path, "OMP_NUM_THREADS": "1",
                "CUDA_VISIBLE_DEVICES": ""})  # the CPU test stays on the CPU everywhere
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    return env


def two_nodes(args: list[str], cwd: Path, timeout: float = 120):
    """Run `hwadvisor ARGS` as two one-rank nodes under torchrun; return both outcomes."""
    port = free_port()
    procs = []
    for node in (0, 1):
        cmd = [*TORCHRUN, "--nnodes", "2", "--nproc-per-node", "1", "--node-rank", str(node),
               "--master-addr", "127.0.0.1", "--master-port", str(port),
               "-m", "hwadvisor", *args]
        procs.append(subprocess.Popen(cmd, cwd=cwd, env=_env(f"node-{'ab'[node]}"),
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    done = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=timeout)
            done.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    finally:
        for proc in procs:  # only the two agents this test started
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return done


@pytest.mark.slow
def test_validate_across_two_nodes_gathers_one_report(tmp_path):
    args = ["validate", "--trial", "memory-bandwidth", "--trial", "collectives", "--quick",
            "--json", "--output", str(tmp_path / "cluster.json")]
    rank0, rank1 = two_nodes(args, tmp_path)
    assert rank0.returncode == 0, rank0.stderr[-3000:]
    assert rank1.returncode == 0, rank1.stderr[-3000:]
    assert rank1.stdout == ""  # other ranks print nothing on stdout ...
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cluster.json"]  # ... and write nothing
    report = json.loads((tmp_path / "cluster.json").read_text())
    assert json.loads(rank0.stdout) == report
    cluster = report["cluster"]
    assert (cluster["world_size"], cluster["launcher"], cluster["backend"]) == (
        2, "torchrun", "gloo")
    assert [(n["node_rank"], n["hostname"]) for n in cluster["nodes"]] == [
        (0, "node-a"), (1, "node-b")]
    for node in cluster["nodes"]:
        (rank,) = node["ranks"]
        assert rank["status"] == "ok" and rank["device_name"] == "cpu"
        assert rank["measured"]["memory_bandwidth_gbps"] > 0
    entries = cluster["collectives"]
    assert {e["scope"] for e in entries} == {"world", "inter-node", "node-pair"}
    world = [e for e in entries if e["scope"] == "world" and e["status"] == "ok"]
    assert {"all_reduce", "all_gather"} <= {e["op"] for e in world}
    assert all(e["node_ranks"] == [0, 1] and e["group_size"] == 2 for e in entries)
    assert all(e["error"] == 0.0 for e in world)
    largest = max((e for e in entries if e["scope"] == "inter-node"), key=lambda e: e["bytes"])
    assert cluster["nodes"][1]["inter_node_busbw_gbps"] == largest["busbw_gbps"] > 0
    trials = {t["id"]: t for t in report["trials"]}
    assert list(trials) == ["memory-bandwidth", "collectives"]
    assert trials["collectives"]["status"] == "ok"
    assert "NCCL_NVLS_ENABLE" in cluster["nccl_env"]  # the multicast switch set for the job


@pytest.mark.slow
def test_probe_across_two_nodes_with_every_rank_writing(tmp_path):
    out = tmp_path / "fleet.json"
    rank0, rank1 = two_nodes(["probe", "--output", str(out), "--all-ranks"], tmp_path)
    assert rank0.returncode == 0, rank0.stderr[-3000:]
    assert rank1.returncode == 0, rank1.stderr[-3000:]
    assert rank1.stdout == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "fleet.json", "fleet.rank0.json", "fleet.rank1.json"]
    report = json.loads(out.read_text())
    assert report["kind"] == "probe"
    assert [n["hostname"] for n in report["cluster"]["nodes"]] == ["node-a", "node-b"]
    assert report["cluster"]["collectives"] == []  # plain probe measures nothing
    own = json.loads((tmp_path / "fleet.rank1.json").read_text())
    assert own["kind"] == "probe" and own["cluster"] is None
    assert "cluster · 2 ranks on 2 nodes" in rank0.stdout  # the table for people


RANK_SCRIPT = textwrap.dedent("""
    import json, sys, time
    from hwadvisor.cluster import job
    from hwadvisor.cluster.launcher import Launch
    from hwadvisor.errors import UserError
    from hwadvisor.models import Report

    rank, port = int(sys.argv[1]), int(sys.argv[2])
    launch = Launch(launcher="env", rank=rank, world_size=2, local_rank=0, local_world_size=1,
                    node_rank=rank, master_addr="127.0.0.1", master_port=port,
                    hostname=f"node{rank}")

    def work(place):
        if rank == 1:
            time.sleep(60)  # this rank never finishes its own trials in time
        return job.LocalRun(report=Report(host={}))

    try:
        job.run(launch, work, timeout_s=4)
        print(json.dumps({"ok": True}))
    except UserError as exc:
        print(json.dumps({"message": exc.message, "code": int(exc.code)}))
""")


@pytest.mark.slow
def test_a_rank_that_does_not_finish_is_named_and_nobody_hangs(tmp_path):
    port = free_port()
    env = _env("x")
    procs = [subprocess.Popen([sys.executable, "-c", RANK_SCRIPT, str(rank), str(port)],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for rank in (0, 1)]
    try:
        out, err = procs[0].communicate(timeout=60)
    finally:
        for proc in procs:  # rank 1 sleeps on: end it, by its handle
            if proc.poll() is None:
                proc.kill()
            proc.wait()
    result = json.loads(out.strip().splitlines()[-1])
    assert result == {"message": "rank 1 did not finish its own probe and trials within 4 s",
                      "code": 4}, err[-2000:]


def _invoke(args: list[str], env: dict[str, str]):
    try:
        runner = CliRunner(mix_stderr=False)  # type: ignore[call-arg]
    except TypeError:
        runner = CliRunner()
    return runner.invoke(app, args, env=env)


LAUNCHED = {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": "29999", "TORCHELASTIC_RUN_ID": "t"}


def test_no_cluster_runs_a_rank_on_its_own():
    result = _invoke(["probe", "--json", "--no-cluster"], LAUNCHED)
    assert result.exit_code == 0
    assert json.loads(result.stdout)["cluster"] is None


@pytest.mark.parametrize(("args", "message"), [
    (["probe", "--all-ranks"], "--all-ranks needs --output"),
    (["validate", "--report", "r.json"], "--report does not run under torchrun"),
    (["probe", "--cluster-timeout", "0"], "--cluster-timeout must be a positive"),
])
def test_bad_cluster_options_exit_2_without_a_traceback(args, message):
    result = _invoke(args, LAUNCHED)
    assert result.exit_code == 2
    assert message in result.stderr and "Traceback" not in result.stderr


def test_broken_launcher_variables_exit_2():
    result = _invoke(["probe"], {**LAUNCHED, "RANK": "5"})
    assert result.exit_code == 2
    assert "rank 5 is outside the world of 2" in result.stderr


# --- GPUs ------------------------------------------------------------------------------------

requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
requires_two_cuda = pytest.mark.skipif(
    not (torch.cuda.is_available() and torch.cuda.device_count() >= 2),
    reason="needs >= 2 CUDA GPUs")


def _hw(args: list[str], torchrun: list[str] | None, timeout: float = 420) -> dict:
    cmd = [*TORCHRUN, "--standalone", *torchrun, "-m", "hwadvisor"] if torchrun \
        else [sys.executable, "-m", "hwadvisor"]
    done = subprocess.run([*cmd, *args, "--json"], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "PYTHONPATH": os.pathsep.join(
                              p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


@pytest.mark.gpu
@requires_cuda
def test_one_gpu_rank_measures_its_own_gpu():
    report = _hw(["probe", "--measure"], ["--nproc-per-node", "1"])
    cluster = report["cluster"]
    assert (cluster["world_size"], cluster["backend"]) == (1, "nccl")
    (rank,) = cluster["nodes"][0]["ranks"]
    assert rank["device_index"] == report["devices"][0]["index"]
    assert rank["device_name"] == report["devices"][0]["name"]
    assert rank["measured"]["memory_bandwidth_gbps"] > 100
    assert cluster["nodes"][0]["devices"][0]["measured"] == rank["measured"]


@pytest.mark.gpu
@pytest.mark.multigpu
@requires_two_cuda
def test_torchrun_collectives_match_the_trials_own_launcher():
    """torchrun --nproc-per-node 2 gives the bus bandwidth of the trial's own launcher (±5%)."""
    own = _hw(["validate", "--trial", "collectives"], None)
    job = _hw(["validate", "--trial", "collectives"], ["--nproc-per-node", "2"])
    (own_trial,) = own["trials"]
    (job_trial,) = job["trials"]
    own_fx = {e["name"]: e["value"] for e in own_trial["effects"]}
    job_fx = {e["name"]: e["value"] for e in job_trial["effects"]}
    compared = [k for k in own_fx if k.endswith("_1gib_busbw_gbps")]
    assert len(compared) == 3
    for key in compared:
        assert job_fx[key] == pytest.approx(own_fx[key], rel=0.05), key
    assert job["cluster"]["world_size"] == 2
