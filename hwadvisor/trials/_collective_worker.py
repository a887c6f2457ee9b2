"""One rank of the `collectives` trial: `python -m hwadvisor.trials._collective_worker CONFIG OUT`.

hwadvisor.trials.collectives starts one of these per GPU with RANK, WORLD_SIZE, LOCAL_RANK,
MASTER_ADDR and MASTER_PORT set. Each rank joins a torch.distributed process group (nccl on
GPUs, gloo for the CPU test), checks each collective's values, times it, and rank 0 writes the
results to OUT as JSON (atomically: a temporary file, then os.replace).

CONFIG is JSON: {"backend", "dtype", "ops", "sizes": [[label, bytes], ...], "warmup", "iters",
"repeats", "timeout_s"}. `measure` runs the same checks and timings over any process group; the
job-wide runs under torchrun or srun (hwadvisor.trials.distributed) call it per sub-group.
Bandwidth follows nccl-tests' convention (doc/PERFORMANCE.md in NVIDIA/nccl-tests):
algbw = S / t with S the full buffer size in bytes, and busbw = algbw x 2(n-1)/n for
all-reduce, algbw x (n-1)/n for all-gather and reduce-scatter.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from datetime import timedelta
from typing import Any

BUS_FACTOR = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
}


def write_json_atomic(path: str, data: dict[str, Any]) -> None:
    """Write JSON to a temporary file beside path, then rename it over path."""
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=".json")
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(data, fh)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


class _Op:
    """Buffers, a fill that gives checkable values, the call, and its check, for one collective."""

    def __init__(self, name: str, numel: int, rank: int, world: int, device: Any,
                 dtype: Any, group: Any = None) -> None:
        import torch

        self.name, self.rank, self.world, self.group = name, rank, world, group
        chunk = numel // world
        self.chunk = chunk
        if name == "all_reduce":
            self.inp = torch.empty(numel, device=device, dtype=dtype)
            self.out = self.inp  # in place
        elif name == "all_gather":
            self.inp = torch.empty(chunk, device=device, dtype=dtype)
            self.out = torch.empty(chunk * world, device=device, dtype=dtype)
        elif name == "reduce_scatter":
            self.inp = torch.empty(chunk * world, device=device, dtype=dtype)
            self.out = torch.empty(chunk, device=device, dtype=dtype)
        else:
            raise ValueError(f"unknown collective {name}")

    def fill(self) -> None:
        """Rank r holds r+1 (all-reduce, all-gather); chunk j on rank r holds (r+1)(j+1)."""
        import torch

        if self.name == "reduce_scatter":
            scale = torch.arange(1, self.world + 1, device=self.inp.device, dtype=self.inp.dtype)
            self.inp.view(self.world, self.chunk).copy_(
                (self.rank + 1) * scale[:, None].expand(self.world, self.chunk))
        else:
            self.inp.fill_(self.rank + 1)

    def call(self) -> None:
        """Run the collective."""
        import torch.distributed as dist

        # torch 2.13 renamed the *_into_tensor / *_tensor forms to *_single (same call); the
        # old names still work there but warn on every call.
        if self.name == "all_reduce":
            dist.all_reduce(self.inp, group=self.group)
        elif self.name == "all_gather":
            gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
            gather(self.out, self.inp, group=self.group)
        else:
            scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
            scatter(self.out, self.inp, group=self.group)

    def expected(self) -> Any:
        """Return what out must hold, as a tensor shaped like out."""
        import torch

        n = self.world
        total = n * (n + 1) / 2
        if self.name == "all_reduce":
            return torch.full_like(self.out, total)
        if self.name == "all_gather":
            pieces = torch.arange(1, n + 1, device=self.out.device, dtype=self.out.dtype)
            return pieces[:, None].expand(n, self.chunk).reshape(-1)
        return torch.full_like(self.out, (self.rank + 1) * total)

    def check(self) -> float:
        """Poison, run once, and return the relative error of out (inf for NaN/unwritten)."""
        import math

        import torch

        self.fill()
        if self.out is not self.inp:
            self.out.fill_(float("nan"))
        self.call()
        if self.inp.is_cuda:
            torch.cuda.synchronize(self.inp.device)
        out = self.out.double()
        if not bool(torch.isfinite(out).all()):
            return math.inf
        ref = self.expected().double()
        return float(torch.linalg.vector_norm(out - ref) / torch.linalg.vector_norm(ref))


def _time(op: _Op, iters: int, repeats: int, warmup: int) -> list[float]:
    """Seconds per call for `repeats` samples of `iters` back-to-back calls (slowest rank)."""
    import torch
    import torch.distributed as dist

    cuda = op.inp.is_cuda
    op.fill()
    for _ in range(warmup):
        op.call()
    samples = []
    for _ in range(repeats):
        op.fill()  # keep sums small: values grow n-fold per all-reduce
        if cuda:
            torch.cuda.synchronize(op.inp.device)
        dist.barrier(group=op.group)
        if cuda:
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(iters):
                op.call()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) / 1e3 / iters)
        else:
            t0 = time.perf_counter()
            for _ in range(iters):
                op.call()
            samples.append((time.perf_counter() - t0) / iters)
    # Every rank's samples, reduced to the slowest rank's: a collective is as fast as its
    # slowest participant.
    device = op.inp.device
    t = torch.tensor(samples, dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=op.group)
    return [float(x) for x in t.cpu()]


def measure(cfg: dict[str, Any], rank: int, world: int, device: Any, dtype: Any,
            group: Any = None) -> list[dict[str, Any]]:
    """Check and time each op at each size of cfg over group (None: the default group).

    rank and world are this process's rank in the group and the group's size.
    """
    return [
        _one(name, label, int(nbytes), cfg, rank, world, device, dtype, group)
        for label, nbytes in cfg["sizes"]
        for name in cfg["ops"]
    ]


def _one(name: str, label: str, nbytes: int, cfg: dict[str, Any], rank: int, world: int,
         device: Any, dtype: Any, group: Any = None) -> dict[str, Any]:
    import torch

    elem = torch.tensor([], dtype=dtype).element_size()
    numel = max(world, (nbytes // elem) // world * world)
    size_bytes = numel * elem
    entry: dict[str, Any] = {"op": name, "label": label, "bytes": size_bytes, "status": "ok"}
    try:
        op = _Op(name, numel, rank, world, device, dtype, group)
        entry["error"] = op.check()
        samples = _time(op, int(cfg["iters"]), int(cfg["repeats"]), int(cfg["warmup"]))
    except (RuntimeError, NotImplementedError, ValueError) as exc:
        # gloo, for one, has no reduce_scatter on several torch versions.
        entry.update(status="unsupported", reason=f"{type(exc).__name__}: {exc}"[:1000])
        return entry
    finally:
        if device.type == "cuda":
            torch.cuda.empty_cache()
    entry["samples_s"] = samples
    med = sorted(samples)[len(samples) // 2]
    entry["algbw_gbps"] = size_bytes / med / 1e9 if med > 0 else None
    entry["busbw_gbps"] = (entry["algbw_gbps"] * BUS_FACTOR[name](world)
                           if entry["algbw_gbps"] is not None else None)
    return entry


def main(argv: list[str]) -> int:
    """Run this rank; rank 0 writes the results."""
    import torch
    import torch.distributed as dist

    cfg = json.loads(open(argv[0]).read())
    out_path = argv[1]
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    backend = cfg["backend"]
    if backend == "nccl":
        torch.cuda.set_device(local)
        device = torch.device("cuda", local)
    else:
        device = torch.device("cpu")
    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[cfg.get("dtype", "bf16")]
    dist.init_process_group(backend=backend, rank=rank, world_size=world,
                            timeout=timedelta(seconds=float(cfg.get("timeout_s", 120))))
    try:
        results = measure(cfg, rank, world, device, dtype)
        if rank == 0:
            nccl = None
            if backend == "nccl":
                try:
                    nccl = ".".join(str(v) for v in torch.cuda.nccl.version())
                except Exception:  # the version is informative only
                    nccl = None
            write_json_atomic(out_path, {
                "backend": backend, "world_size": world, "dtype": cfg.get("dtype", "bf16"),
                "torch_version": str(torch.__version__), "nccl_version": nccl,
                "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
                "nvls": bool(cfg.get("nvls", False)), "results": results,
            })
        dist.barrier()
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
