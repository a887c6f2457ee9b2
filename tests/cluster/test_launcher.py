"""Launcher detection from the environment: torchrun, srun (nodelists included), neither."""

from __future__ import annotations

import pytest

from hwadvisor.cluster import launcher
from hwadvisor.errors import UserError

TORCHRUN = {
    "RANK": "9", "WORLD_SIZE": "16", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "8",
    "GROUP_RANK": "1", "MASTER_ADDR": "node01", "MASTER_PORT": "29500",
    "TORCHELASTIC_RUN_ID": "job-7", "HWADVISOR_HOSTNAME": "node02",
}
# What srun gives task 9 of `srun --nodes 2 --ntasks-per-node 8` (Slurm's srun(1) "OUTPUT
# ENVIRONMENT VARIABLES"), inside a batch job that also carries the SLURM_JOB_* ones.
SRUN = {
    "SLURM_PROCID": "9", "SLURM_LOCALID": "1", "SLURM_NODEID": "1", "SLURM_NTASKS": "16",
    "SLURM_STEP_NUM_TASKS": "16", "SLURM_STEP_TASKS_PER_NODE": "8(x2)",
    "SLURM_STEP_NODELIST": "gpu[07-08]", "SLURM_JOB_NODELIST": "gpu[07-08]",
    "SLURM_JOB_ID": "123456", "SLURM_STEP_ID": "0", "HWADVISOR_HOSTNAME": "gpu08",
}


def test_no_launcher_is_a_plain_run():
    assert launcher.detect({"PATH": "/usr/bin", "SLURM_JOB_ID": "5"}) is None
    assert launcher.detect({"RANK": "0", "WORLD_SIZE": "1"}) is None  # stray shell variables


def test_torchrun():
    found = launcher.detect(TORCHRUN)
    assert found == launcher.Launch(
        launcher="torchrun", rank=9, world_size=16, local_rank=1, local_world_size=8,
        node_rank=1, master_addr="node01", master_port=29500, hostname="node02",
        job_id="job-7")
    assert found.torch_env()["GROUP_RANK"] == "1"


def test_other_launchers_setting_torch_variables_are_env():
    env = {k: v for k, v in TORCHRUN.items() if k not in ("TORCHELASTIC_RUN_ID", "GROUP_RANK")}
    found = launcher.detect(env)
    assert found is not None and found.launcher == "env" and found.node_rank is None


def test_srun_maps_slurm_variables_to_torch_ones():
    found = launcher.detect(SRUN)
    assert found is not None
    assert (found.launcher, found.rank, found.world_size, found.local_rank) == ("slurm", 9, 16, 1)
    assert (found.node_rank, found.local_world_size, found.job_id) == (1, 8, "123456")
    assert found.master_addr == "gpu07"  # the nodelist's first host
    assert found.master_port == 20000 + 123456 % 10000
    env = found.torch_env()
    assert env == {"RANK": "9", "WORLD_SIZE": "16", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "8",
                   "GROUP_RANK": "1", "MASTER_ADDR": "gpu07", "MASTER_PORT": "23456"}


def test_srun_keeps_a_master_the_user_set():
    found = launcher.detect({**SRUN, "MASTER_ADDR": "10.0.0.5", "MASTER_PORT": "31000"})
    assert found is not None and (found.master_addr, found.master_port) == ("10.0.0.5", 31000)


def test_a_batch_script_or_one_task_step_is_no_job():
    batch = {k: v for k, v in SRUN.items() if not k.startswith("SLURM_STEP")}
    assert launcher.detect(batch) is None  # SLURM_PROCID=0 and SLURM_NTASKS without srun
    assert launcher.detect({**SRUN, "SLURM_STEP_NUM_TASKS": "1", "SLURM_PROCID": "0"}) is None


@pytest.mark.parametrize(("text", "hosts"), [
    ("node[01-03,07]", ["node01", "node02", "node03", "node07"]),
    ("gpu5", ["gpu5"]),
    ("a[1-2],b3,c[08-10]", ["a1", "a2", "b3", "c08", "c09", "c10"]),
    ("r[1-2]n[1-2]", ["r1n1", "r1n2", "r2n1", "r2n2"]),
    ("dgx-[1,3]-ib", ["dgx-1-ib", "dgx-3-ib"]),
    ("", []),
])
def test_nodelists_expand_as_scontrol_prints_them(text, hosts):
    assert launcher.expand_nodelist(text) == hosts


@pytest.mark.parametrize("text", ["node[01-03", "node[a-b]", "node[1-]"])
def test_bad_nodelists_are_user_errors(text):
    with pytest.raises(UserError, match="nodelist"):
        launcher.expand_nodelist(text)


def test_tasks_per_node():
    assert launcher.tasks_per_node("2(x3),1") == [2, 2, 2, 1]
    assert launcher.tasks_per_node("8") == [8]
    with pytest.raises(UserError):
        launcher.tasks_per_node("8(x")


@pytest.mark.parametrize(("change", "message"), [
    ({"RANK": "16"}, "outside the world"),
    ({"RANK": "one"}, "not a whole number"),
    ({"MASTER_PORT": "0"}, "port"),
    ({"WORLD_SIZE": "0"}, "world size is 0"),
])
def test_inconsistent_launcher_variables_are_user_errors(change, message):
    with pytest.raises(UserError, match=message):
        launcher.detect({**TORCHRUN, **change})


def test_torch_variables_without_a_master_are_a_user_error():
    env = {k: v for k, v in TORCHRUN.items() if k != "MASTER_ADDR"}
    with pytest.raises(UserError, match="MASTER_ADDR"):
        launcher.detect(env)


def test_srun_without_a_nodelist_asks_for_master_addr():
    env = {k: v for k, v in SRUN.items() if "NODELIST" not in k}
    with pytest.raises(UserError) as caught:
        launcher.detect(env)
    assert "scontrol show hostnames" in (caught.value.hint or "")


def test_nccl_variables_are_recorded():
    env = {"NCCL_IB_HCA": "mlx5", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "3", "PATH": "/bin"}
    assert launcher.nccl_env(env) == {"NCCL_IB_HCA": "mlx5",
                                      "TORCH_NCCL_ASYNC_ERROR_HANDLING": "3"}


def test_hostname_override():
    assert launcher.hostname({"HWADVISOR_HOSTNAME": "node-b"}) == "node-b"
    assert launcher.hostname({}) != ""
