"""One rank of a job started by torchrun or srun: join the job, exchange messages, measure.

The job's default process group is gloo, over the launcher's env:// rendezvous (torchrun's
agent store, or MASTER_ADDR/MASTER_PORT under srun): it carries the small control messages
(who is here, every rank's JSON, the exit code) on every host, with or without a GPU. Bus
bandwidth is measured over groups made for it (`new_group`): NCCL when every rank has a GPU
(a ROCm build's NCCL backend is RCCL), else gloo. Every exchange sends JSON as bytes in uint8
tensors; nothing received is unpickled.

Every wait has the job's timeout: the rendezvous, each collective, and `wait_for_all`, which
names the ranks that did not arrive (gloo's monitored_barrier).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from hwadvisor.errors import UserError
from hwadvisor.trials import _collective_worker as worker

ALL_OPS = ("all_reduce", "all_gather", "reduce_scatter")


class JobGroupError(RuntimeError):
    """The job's ranks could not meet or finish a step together."""

    def __init__(self, message: str, ranks: Sequence[int] = ()) -> None:
        super().__init__(message)
        self.ranks = list(ranks)


@dataclass
class GroupRun:
    """One group of ranks to measure: a key naming it, its ranks, ops and sizes."""

    key: str
    ranks: list[int]
    ops: list[str]
    sizes: list[tuple[str, int]]


@dataclass
class JobGroup:
    """A rank's membership of the job: the control group and the measuring backend."""

    rank: int
    world_size: int
    timeout_s: float
    cuda_index: int | None = None
    backend: str = "gloo"
    _groups: dict[str, Any] = field(default_factory=dict)

    # --- control messages over the default (gloo) group --------------------------------
    def all_gather_ints(self, values: Sequence[int]) -> list[list[int]]:
        """Return every rank's values (the same count on each rank), in rank order."""
        import torch
        import torch.distributed as dist

        mine = torch.tensor(list(values), dtype=torch.int64)
        out = [torch.empty_like(mine) for _ in range(self.world_size)]
        dist.all_gather(out, mine)
        return [[int(v) for v in t] for t in out]

    def gather_texts(self, text: str) -> list[str] | None:
        """Send text to rank 0; rank 0 gets every rank's text in rank order, others None."""
        return self._exchange(text, everyone=False)

    def all_gather_texts(self, text: str) -> list[str]:
        """Return every rank's text, in rank order, on every rank (small messages)."""
        texts = self._exchange(text, everyone=True)
        assert texts is not None
        return texts

    def _exchange(self, text: str, everyone: bool) -> list[str] | None:
        import torch
        import torch.distributed as dist

        data = text.encode("utf-8")
        lengths = [n for (n,) in self.all_gather_ints([len(data)])]
        mine = torch.zeros(max(max(lengths), 1), dtype=torch.uint8)  # equal sizes for gloo
        if data:
            mine[: len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        if everyone:
            out: list[Any] | None = [torch.empty_like(mine) for _ in range(self.world_size)]
            dist.all_gather(out, mine)  # type: ignore[arg-type]
        else:
            out = [torch.empty_like(mine) for _ in range(self.world_size)] \
                if self.rank == 0 else None
            dist.gather(mine, out, dst=0)
        if out is None:
            return None
        return [bytes(t[:n].tolist()).decode("utf-8") for t, n in zip(out, lengths, strict=True)]

    def broadcast_int(self, value: int) -> int:
        """Return rank 0's value on every rank."""
        import torch
        import torch.distributed as dist

        t = torch.tensor([value], dtype=torch.int64)
        dist.broadcast(t, src=0)
        return int(t[0])

    def wait_for_all(self, what: str) -> None:
        """Wait until every rank is here (at most the timeout); name the ranks that are not."""
        import torch.distributed as dist

        try:
            dist.monitored_barrier(timeout=timedelta(seconds=self.timeout_s), wait_all_ranks=True)
        except RuntimeError as exc:
            missing = missing_ranks(str(exc))
            who = f"rank{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))}" \
                if missing else "a rank"
            raise JobGroupError(f"{who} did not finish {what} within {self.timeout_s:g} s"
                                if self.rank == 0 else
                                f"rank 0 did not confirm {what} within {self.timeout_s:g} s: "
                                f"{_first_line(exc)}", missing) from None

    # --- measuring ----------------------------------------------------------------------
    def measure(self, rounds: Sequence[Sequence[GroupRun]], config: Mapping[str, Any]
                ) -> dict[str, list[dict[str, Any]]]:
        """Time each round's groups at once, round after round; return the groups this rank leads.

        Every rank creates every group in the same order (torch requires it); a rank times only
        the groups it belongs to, and the first rank of a group returns that group's results
        (the slowest rank's samples, as the collectives trial reports them).
        """
        import torch
        import torch.distributed as dist

        device = torch.device("cpu")
        if self.backend == "nccl" and self.cuda_index is not None:
            device = torch.device("cuda", self.cuda_index)
        dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[str(config.get("dtype", "bf16"))]
        led: dict[str, list[dict[str, Any]]] = {}
        # new_group waits for every rank of the job: make them all before timing any, or the
        # groups of one round would wait for each other and run one after another.
        groups = {run.key: self._group(run.ranks) for runs in rounds for run in runs}
        for runs in rounds:
            for run in runs:
                group = groups[run.key]
                if self.rank not in run.ranks:
                    continue
                cfg = dict(config, ops=list(run.ops), sizes=[list(s) for s in run.sizes])
                results = worker.measure(cfg, run.ranks.index(self.rank), len(run.ranks),
                                         device, dtype, group)
                if run.ranks[0] == self.rank:
                    led[run.key] = results
            dist.barrier()  # one round at a time: groups of different rounds share links
        return led

    def _group(self, ranks: list[int]) -> Any:
        import torch.distributed as dist

        key = ",".join(map(str, ranks))
        if key not in self._groups:
            self._groups[key] = dist.new_group(ranks, backend=self.backend,
                                               timeout=timedelta(seconds=self.timeout_s))
        return self._groups[key]

    def info(self) -> dict[str, Any]:
        """Return torch, NCCL and device names for the collectives' trial result."""
        import torch

        nccl = None
        if self.backend == "nccl":
            try:
                nccl = ".".join(str(v) for v in torch.cuda.nccl.version())
            except Exception:  # the version is informative only
                nccl = None
        device = "cpu"
        if self.cuda_index is not None:
            device = str(torch.cuda.get_device_name(self.cuda_index))
        return {"torch_version": str(torch.__version__), "nccl_version": nccl, "device": device}

    def close(self) -> None:
        """Leave the job's process group (safe to call twice)."""
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()
        self._groups.clear()


def join(rank: int, world_size: int, local_rank: int, timeout_s: float,
         env: Mapping[str, str]) -> JobGroup:
    """Join the job's process group (env:// with env applied); pick the measuring backend.

    Raises JobGroupError when the ranks do not meet within timeout_s, UserError when this node
    has fewer GPUs than its local ranks.
    """
    import torch.distributed as dist

    if not dist.is_available():
        raise UserError("this torch build has no torch.distributed",
                        hint="install a torch build with distributed support")
    os.environ.update(env)
    cuda_index = local_cuda_index(local_rank)
    try:
        dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=world_size,
                                timeout=timedelta(seconds=timeout_s))
    except (RuntimeError, TimeoutError, ValueError) as exc:
        where = f"{env.get('MASTER_ADDR', '?')}:{env.get('MASTER_PORT', '?')}"
        raise JobGroupError(f"rank {rank} could not join the job at {where} within "
                            f"{timeout_s:g} s: {_first_line(exc)}") from None
    group = JobGroup(rank=rank, world_size=world_size, timeout_s=timeout_s, cuda_index=cuda_index)
    has_gpu = [int(cuda_index is not None and dist.is_nccl_available())]
    everyone = group.all_gather_ints(has_gpu)
    group.backend = "nccl" if all(v == 1 for (v,) in everyone) else "gloo"
    if group.backend == "nccl":
        import torch

        assert cuda_index is not None
        torch.cuda.set_device(cuda_index)
    return group


def local_cuda_index(local_rank: int) -> int | None:
    """Return the torch GPU index of this local rank; None without a GPU.

    One visible GPU (srun --gpus-per-task, or CUDA_VISIBLE_DEVICES per task) is every local
    rank's; otherwise local rank N uses GPU N.
    """
    import torch

    if not torch.cuda.is_available():
        return None
    count = torch.cuda.device_count()
    if local_rank < count:
        return local_rank
    if count == 1:
        return 0
    raise UserError(f"local rank {local_rank} has no GPU: torch sees {count} on this node",
                    hint="start at most one process per GPU (torchrun --nproc-per-node, "
                    "srun --ntasks-per-node)")


def pci_bus_id(cuda_index: int) -> str | None:
    """Return the GPU's PCI address as 'dddd:bb:dd.0' (torch's device properties), or None."""
    import torch

    props = torch.cuda.get_device_properties(cuda_index)
    parts = [getattr(props, name, None) for name in ("pci_domain_id", "pci_bus_id",
                                                      "pci_device_id")]
    if not all(isinstance(p, int) for p in parts):
        return None
    domain, bus, dev = parts
    return f"{domain:04x}:{bus:02x}:{dev:02x}.0"


def missing_ranks(message: str) -> list[int]:
    """Return the ranks gloo's monitored_barrier error names ('Ranks 1, 3 failed to pass')."""
    match = re.search(r"Ranks? ([\d,\s]+) failed to pass", message)
    if match is None:
        return []
    return [int(r) for r in re.findall(r"\d+", match.group(1))]


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:300]
