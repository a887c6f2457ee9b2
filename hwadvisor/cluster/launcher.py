"""Where this process stands in a job started by torchrun or srun, read from its environment.

Nothing here imports torch: `detect` only reads variables, so the probe can ask cheaply.

- torchrun (and launchers that set torch's variables: RANK, WORLD_SIZE, LOCAL_RANK,
  LOCAL_WORLD_SIZE, GROUP_RANK = the node's rank, MASTER_ADDR, MASTER_PORT). torchrun also
  sets TORCHELASTIC_RUN_ID, which tells it apart from other launchers.
- srun: SLURM_PROCID (rank), SLURM_STEP_NUM_TASKS (world size), SLURM_LOCALID,
  SLURM_NODEID, SLURM_STEP_TASKS_PER_NODE ("2(x3),1"), SLURM_STEP_NODELIST ("node[01-03,07]"),
  SLURM_JOB_ID. Only srun sets the SLURM_STEP_* variables; a batch script itself carries
  SLURM_PROCID=0 and SLURM_NTASKS too, and must not be taken for rank 0 of a job. A step of one
  task (`srun --pty bash`) is no job either. MASTER_ADDR defaults to the first host of the
  nodelist, MASTER_PORT to 20000 + the job id modulo 10000; set either to choose.

HWADVISOR_HOSTNAME, when set, is the node name a rank reports instead of the host's own name:
for containers whose hostname is not the node's, and for tests that run two "nodes" on one host.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from hwadvisor.errors import UserError

LauncherName = Literal["torchrun", "env", "slurm"]
HOSTNAME_VAR = "HWADVISOR_HOSTNAME"
SLURM_PORT_BASE = 20000  # MASTER_PORT under srun: SLURM_PORT_BASE + job id % SLURM_PORT_SPAN
SLURM_PORT_SPAN = 10000
NCCL_PREFIXES = ("NCCL_", "TORCH_NCCL_")
_HINT = "run hwadvisor under torchrun or srun unchanged, or pass --no-cluster to run this " \
        "process on its own"


@dataclass(frozen=True)
class Launch:
    """A process's place in the job: its ranks, its node, and where the job meets."""

    launcher: LauncherName
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int | None
    node_rank: int | None  # None: the launcher did not say; nodes are then told by hostname
    master_addr: str
    master_port: int
    hostname: str
    job_id: str | None = None

    def torch_env(self) -> dict[str, str]:
        """Return the variables torch.distributed's env:// rendezvous reads, for this rank."""
        env = {
            "RANK": str(self.rank),
            "WORLD_SIZE": str(self.world_size),
            "LOCAL_RANK": str(self.local_rank),
            "MASTER_ADDR": self.master_addr,
            "MASTER_PORT": str(self.master_port),
        }
        if self.local_world_size is not None:
            env["LOCAL_WORLD_SIZE"] = str(self.local_world_size)
        if self.node_rank is not None:
            env["GROUP_RANK"] = str(self.node_rank)
        return env


def detect(env: Mapping[str, str] | None = None) -> Launch | None:
    """Return this process's Launch under torchrun or srun, None when no launcher started it.

    A launcher's variables that do not add up (a rank beyond the world, text for a number)
    are a UserError: joining a job with them would hang or fail far from the cause.
    """
    env = os.environ if env is None else env
    if "RANK" in env and "WORLD_SIZE" in env:
        if env.get("WORLD_SIZE") == "1" and not env.get("MASTER_ADDR"):
            return None  # a stray RANK=0 WORLD_SIZE=1 in a shell; torchrun sets MASTER_ADDR
        return _from_torch(env)
    if "SLURM_PROCID" in env and "SLURM_STEP_NUM_TASKS" in env:
        return _from_slurm(env)
    return None


def hostname(env: Mapping[str, str] | None = None) -> str:
    """Return the node name this rank reports: HWADVISOR_HOSTNAME, else the host's name."""
    env = os.environ if env is None else env
    return env.get(HOSTNAME_VAR) or socket.gethostname()


def nccl_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """Return the NCCL_* and TORCH_NCCL_* variables set in env (they steer NCCL's choices)."""
    env = os.environ if env is None else env
    return {k: env[k] for k in sorted(env) if k.startswith(NCCL_PREFIXES)}


def _int(env: Mapping[str, str], name: str, default: int | None = None) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        if default is not None:
            return default
        raise UserError(f"{name} is not set, but the launcher's other variables are", hint=_HINT)
    try:
        return int(raw)
    except ValueError:
        raise UserError(f"{name}={raw!r} is not a whole number", hint=_HINT) from None


def _optional_int(env: Mapping[str, str], name: str) -> int | None:
    return _int(env, name) if env.get(name) not in (None, "") else None


def _check(rank: int, world: int, local_rank: int, where: str) -> None:
    if world < 1:
        raise UserError(f"{where}: the world size is {world}", hint=_HINT)
    if not 0 <= rank < world:
        raise UserError(f"{where}: rank {rank} is outside the world of {world}", hint=_HINT)
    if local_rank < 0:
        raise UserError(f"{where}: local rank {local_rank} is negative", hint=_HINT)


def _port(raw: str, name: str) -> int:
    try:
        port = int(raw)
    except ValueError:
        raise UserError(f"{name}={raw!r} is not a port number", hint=_HINT) from None
    if not 1 <= port <= 65535:
        raise UserError(f"{name}={port} is not a port number (1-65535)", hint=_HINT)
    return port


def _from_torch(env: Mapping[str, str]) -> Launch:
    rank, world = _int(env, "RANK"), _int(env, "WORLD_SIZE")
    local = _int(env, "LOCAL_RANK", default=rank if world == 1 else None)
    _check(rank, world, local, "RANK/WORLD_SIZE")
    addr = env.get("MASTER_ADDR")
    if not addr or not env.get("MASTER_PORT"):
        raise UserError("RANK and WORLD_SIZE are set but MASTER_ADDR or MASTER_PORT is not",
                        hint="start hwadvisor with torchrun, which sets them, set both, or "
                        "pass --no-cluster to run this process on its own")
    return Launch(
        launcher="torchrun" if "TORCHELASTIC_RUN_ID" in env else "env",
        rank=rank, world_size=world, local_rank=local,
        local_world_size=_optional_int(env, "LOCAL_WORLD_SIZE"),
        node_rank=_optional_int(env, "GROUP_RANK"),
        master_addr=addr, master_port=_port(env["MASTER_PORT"], "MASTER_PORT"),
        hostname=hostname(env), job_id=env.get("TORCHELASTIC_RUN_ID") or None,
    )


def _from_slurm(env: Mapping[str, str]) -> Launch | None:
    world = _int(env, "SLURM_STEP_NUM_TASKS")
    if world <= 1:
        return None  # `srun --pty bash` and other one-task steps: a plain run
    rank, local = _int(env, "SLURM_PROCID"), _int(env, "SLURM_LOCALID", default=0)
    _check(rank, world, local, "SLURM_PROCID/SLURM_STEP_NUM_TASKS")
    node = _int(env, "SLURM_NODEID", default=0)
    per_node = tasks_per_node(env.get("SLURM_STEP_TASKS_PER_NODE")
                              or env.get("SLURM_TASKS_PER_NODE") or "")
    job = env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID")
    return Launch(
        launcher="slurm", rank=rank, world_size=world, local_rank=local,
        local_world_size=per_node[node] if node < len(per_node) else None,
        node_rank=node, master_addr=env.get("MASTER_ADDR") or _first_host(env),
        master_port=_port(env["MASTER_PORT"], "MASTER_PORT") if env.get("MASTER_PORT")
        else slurm_port(job),
        hostname=hostname(env), job_id=job,
    )


def slurm_port(job_id: str | None) -> int:
    """Return the rendezvous port for a Slurm job: every task of the job computes the same one."""
    digits = re.sub(r"\D", "", job_id or "")
    return SLURM_PORT_BASE + (int(digits) % SLURM_PORT_SPAN if digits else 0)


def _first_host(env: Mapping[str, str]) -> str:
    nodelist = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST") or ""
    hosts = expand_nodelist(nodelist)
    if not hosts:
        raise UserError("srun started this task but no nodelist is set (SLURM_STEP_NODELIST, "
                        "SLURM_JOB_NODELIST), so rank 0's host is unknown",
                        hint="export MASTER_ADDR=$(scontrol show hostnames | head -n1)")
    return hosts[0]


def tasks_per_node(text: str) -> list[int]:
    """Expand Slurm's tasks-per-node list: '2(x3),1' -> [2, 2, 2, 1]; '' -> []."""
    counts: list[int] = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        match = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part)
        if match is None:
            raise UserError(f"cannot read Slurm's tasks per node {text!r}", hint=_HINT)
        counts += [int(match.group(1))] * int(match.group(2) or 1)
    return counts


def expand_nodelist(text: str) -> list[str]:
    """Expand a Slurm hostlist: 'node[01-03,07],gpu5' -> node01, node02, node03, node07, gpu5.

    Zero padding is kept ('[08-10]' -> 08, 09, 10) and a name may hold several bracket groups
    ('r[1-2]n[1-2]' -> r1n1, r1n2, r2n1, r2n2), as `scontrol show hostnames` prints them.
    """
    return [host for part in _split_top(text) for host in _expand_host(part)]


def _split_top(text: str) -> list[str]:
    """Split at the commas that are not inside brackets."""
    parts, depth, current = [], 0, ""
    for char in text.strip():
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    if depth != 0:
        raise UserError(f"cannot read the Slurm nodelist {text!r}: unbalanced brackets",
                        hint="set MASTER_ADDR to rank 0's host")
    return [p.strip() for p in [*parts, current] if p.strip()]


def _expand_host(pattern: str) -> list[str]:
    match = re.search(r"\[([^\]]*)\]", pattern)
    if match is None:
        return [pattern]
    head, tail = pattern[:match.start()], pattern[match.end():]
    return [head + value + rest for value in _expand_range(match.group(1), pattern)
            for rest in _expand_host(tail)]


def _expand_range(body: str, pattern: str) -> list[str]:
    values: list[str] = []
    for item in filter(None, (i.strip() for i in body.split(","))):
        low, sep, high = item.partition("-")
        if not low.isdigit() or (sep and not high.isdigit()):
            raise UserError(f"cannot read the Slurm nodelist entry {pattern!r}",
                            hint="set MASTER_ADDR to rank 0's host")
        if not sep:
            values.append(low)
            continue
        width = len(low)
        values += [str(n).zfill(width) for n in range(int(low), int(high) + 1)]
    return values
