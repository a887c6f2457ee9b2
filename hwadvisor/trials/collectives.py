"""Trial `collectives`: all-reduce, all-gather and reduce-scatter bus bandwidth over local GPUs.

hwadvisor launches one process per GPU itself (`sys.executable -m
hwadvisor.trials._collective_worker`, env RANK / WORLD_SIZE / LOCAL_RANK / MASTER_ADDR=127.0.0.1 /
MASTER_PORT=a free port); they join a torch.distributed NCCL group, check each collective's
values (each rank fills rank+1: the all-reduce sum must be n(n+1)/2, all-gather pieces must come
in rank order, reduce-scatter chunks must hold their sums), time it with CUDA events, and rank 0
writes the results to a temporary JSON file. The whole launch has a timeout; children still
running then are killed.

Sizes: the workload's 25 MiB DDP gradient bucket (torch DDP's default bucket_cap_mb=25), one
layer's bf16 parameters (what FSDP all-gathers and reduce-scatters per layer) from the spec,
and 1 GiB (the bandwidth plateau).

Bus bandwidth follows nccl-tests' convention (NVIDIA/nccl-tests, doc/PERFORMANCE.md):
algbw = S / t, busbw = algbw x 2(n-1)/n for all-reduce and algbw x (n-1)/n for all-gather and
reduce-scatter, S the full buffer size; GB/s are 1e9 bytes per second.

NVLink SHARP (NVLS, multicast) is off unless the user asks for it (`validate --nvls`): the
children's environment carries NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1 and
NVSHMEM_DISABLE_NVLS=1. On some shared or virtualised GPU hosts a program that creates
multicast objects can leave the GPUs unusable until the host is reset, so off is the safe
default. On a healthy NVSwitch system (HGX H100/H200/B200) NVLS raises all-reduce bus bandwidth,
so with it off the trial under-reports what NCCL reaches there; the result says which it was.

ctx.collective (base.CollectiveSettings): the backend ("nccl" by default; "gloo" runs the same
launcher on CPU processes for tests), the world size (default: every visible GPU; 2 for gloo),
the sizes ((label, bytes) pairs) and the timeout.

Effect keys:
- busbw_gbps: all-reduce bus bandwidth at 1 GiB (or the largest size run)
- <op>_<size label>_busbw_gbps, e.g. all_reduce_ddp_bucket_25mib_busbw_gbps
"""

from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from hwadvisor.models import Measurement, TrialEnvironment, TrialResult, Workload
from hwadvisor.models.trial import named_effects
from hwadvisor.trials.base import RequiresTrial, TrialContext
from hwadvisor.trials.kit import common

TRIAL_ID = "collectives"
OPS = ("all_reduce", "all_gather", "reduce_scatter")
MIB = 1024 * 1024
GIB = 1024 * MIB
DDP_BUCKET_BYTES = 25 * MIB  # torch.nn.parallel.DistributedDataParallel bucket_cap_mb=25
DEFAULT_TIMEOUT_S = 180.0
SAFE_ENV = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}
TOLERANCE = 1e-2  # bf16 holds the small integer sums exactly; anything off is a wrong result


class CollectiveLaunchError(RuntimeError):
    """The worker processes failed or timed out."""


class CollectivesTrial(RequiresTrial):
    """NCCL collectives' bus bandwidth at the workload's bucket sizes and 1 GiB."""

    id = TRIAL_ID
    title = "Collectives: all-reduce / all-gather / reduce-scatter bus bandwidth (NCCL)"
    needs = "torch with NCCL and >= 2 CUDA GPUs on this host"

    def also_needs(self, ctx: TrialContext) -> str | None:
        """Need torch.distributed with the backend, and >= 2 GPUs for NCCL."""
        import torch
        import torch.distributed as dist

        backend = ctx.collective.backend
        if not dist.is_available():
            return "this torch build has no torch.distributed"
        if backend == "gloo":
            return None if dist.is_gloo_available() else "this torch build has no gloo backend"
        if backend != "nccl":
            return f"unknown backend {backend!r} (nccl or gloo)"
        if not dist.is_nccl_available():
            return "this torch build has no NCCL backend (a CPU-only or ROCm-less build)"
        found = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if found < 2:
            return f"needs ≥ 2 CUDA GPUs; found {found}"
        return None

    def run(self, ctx: TrialContext) -> TrialResult:
        """Launch the ranks, collect rank 0's results; see the module docstring."""
        reason = self.unsupported_reason(ctx)
        if reason:
            return common.unsupported(TRIAL_ID, reason)
        started = time.perf_counter()
        backend = ctx.collective.backend
        try:
            world = _world_size(ctx, backend)
            config = run_config(ctx, backend, world)
            data = launch(world, config, timeout_s=_timeout(ctx))
        except Exception as exc:  # the runner records the failure; the next trial still runs
            return common.failed(TRIAL_ID, exc, started)
        return to_result(data, started)


def _timeout(ctx: TrialContext) -> float:
    given = ctx.collective.timeout_s
    return float(given) if given is not None else DEFAULT_TIMEOUT_S


def _world_size(ctx: TrialContext, backend: str) -> int:
    requested = ctx.collective.world_size
    if backend == "gloo":
        return int(requested) if isinstance(requested, int) else 2
    import torch

    found = torch.cuda.device_count()
    return min(found, requested) if isinstance(requested, int) and requested >= 2 else found


def layer_param_bytes(workload: Workload | None, bytes_per_param: int = 2) -> int:
    """One transformer layer's parameter bytes (attention + MLP + norms) from the spec widths."""
    w, _ = common.spec_of(workload)
    h, d = w["hidden_size"], w["head_dim"]
    attn = h * w["num_heads"] * d * 2 + h * w["num_kv_heads"] * d * 2  # q, o; k, v
    mlp = 3 * h * w["intermediate_size"]  # gate, up, down
    spec = workload.spec if workload is not None else None
    if spec is not None and spec.num_experts and spec.moe_intermediate_size:
        # An MoE layer: every routed and shared expert's weights sit in the layer.
        experts = spec.num_experts + spec.num_shared_experts
        mlp = 3 * h * spec.moe_intermediate_size * experts
    return (attn + mlp + 2 * h) * bytes_per_param


def sizes_for(workload: Workload | None) -> list[tuple[str, int]]:
    """(label, bytes): the DDP bucket, one layer's bf16 params, and 1 GiB."""
    layer = layer_param_bytes(workload)
    sizes = [("ddp_bucket_25mib", DDP_BUCKET_BYTES), ("fsdp_layer", layer), ("1gib", GIB)]
    return [(label, n) for label, n in sizes if n <= 4 * GIB]  # huge MoE layers: skip


def run_config(ctx: TrialContext, backend: str, world: int) -> dict[str, Any]:
    """Return the ranks' config: ops, sizes (the workload's, or small ones for gloo), repeats."""
    sizes: Any = ctx.collective.sizes
    if sizes is None:
        sizes = [("4kib", 4096), ("256kib", 256 * 1024)] if backend == "gloo" or ctx.quick \
            else sizes_for(ctx.workload)
    quick = ctx.quick or backend == "gloo"
    return {
        "backend": backend,
        "dtype": "bf16",
        "ops": list(OPS),
        "sizes": [[str(label), int(n)] for label, n in sizes],
        "warmup": 2 if quick else 5,
        "iters": 2 if quick else 10,
        "repeats": 3 if quick else 10,
        "timeout_s": _timeout(ctx),
        "nvls": bool(ctx.nvls),
    }


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that was free a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def child_env(rank: int, world: int, port: int, nvls: bool = False) -> dict[str, str]:
    """Build one rank's environment: ours, the rendezvous variables, the NVLS switches.

    Without nvls the multicast switches are forced off whatever the caller's environment says;
    with it they are removed, so NCCL picks NVLS where the system supports it.
    """
    env = dict(os.environ)
    package_root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    env.update({
        "RANK": str(rank),
        "LOCAL_RANK": str(rank),
        "WORLD_SIZE": str(world),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "OMP_NUM_THREADS": env.get("OMP_NUM_THREADS", "1"),
    })
    if nvls:
        for key in SAFE_ENV:
            env.pop(key, None)
    else:
        env.update(SAFE_ENV)
    return env


def launch(world: int, config: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    """Start `world` worker processes, wait (at most timeout_s), return rank 0's results."""
    with tempfile.TemporaryDirectory(prefix="hwadvisor-coll-") as tmp:
        cfg_path = os.path.join(tmp, "config.json")
        out_path = os.path.join(tmp, "result.json")
        with open(cfg_path, "w") as fh:
            json.dump(config, fh)
        port = free_port()
        procs: list[subprocess.Popen[bytes]] = []
        logs = []
        try:
            for rank in range(world):
                log = open(os.path.join(tmp, f"rank{rank}.log"), "wb")
                logs.append(log)
                procs.append(subprocess.Popen(
                    [sys.executable, "-m", "hwadvisor.trials._collective_worker", cfg_path,
                     out_path],
                    env=child_env(rank, world, port, bool(config.get("nvls"))),
                    stdout=log, stderr=subprocess.STDOUT,
                ))
            _wait(procs, timeout_s, tmp)
        finally:
            for p in procs:  # only our own children, by their handles
                if p.poll() is None:
                    p.kill()
                    p.wait()
            for log in logs:
                log.close()
        if not os.path.exists(out_path):
            raise CollectiveLaunchError("rank 0 wrote no results" + _tail(tmp, 0))
        with open(out_path) as fh:
            return json.load(fh)  # type: ignore[no-any-return]


def _tail(tmp: str, rank: int, chars: int = 1500) -> str:
    path = os.path.join(tmp, f"rank{rank}.log")
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return ""
    return f"\nrank {rank} output (last lines):\n{text[-chars:]}" if text else ""


def _wait(procs: list[subprocess.Popen[bytes]], timeout_s: float, tmp: str) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        codes = [p.poll() for p in procs]
        failed = [(i, c) for i, c in enumerate(codes) if c not in (None, 0)]
        if failed:
            rank, code = failed[0]
            raise CollectiveLaunchError(f"rank {rank} exited with code {code}" + _tail(tmp, rank))
        if all(c == 0 for c in codes):
            return
        if time.monotonic() > deadline:
            raise CollectiveLaunchError(
                f"collectives did not finish within {timeout_s:.0f} s; the ranks were killed"
                + _tail(tmp, 0))
        time.sleep(0.05)


def to_result(data: dict[str, Any], started: float) -> TrialResult:
    """Turn rank 0's JSON into the TrialResult."""
    world = int(data["world_size"])
    measurements = []
    effect: dict[str, float] = {}
    wrong = []
    errors = []
    for r in data["results"]:
        params: dict[str, float | int | str] = {
            "op": r["op"], "size_label": r["label"], "bytes": int(r["bytes"]),
            "world_size": world, "backend": data["backend"], "status": r["status"],
        }
        if r["status"] != "ok":
            params["reason"] = str(r.get("reason"))
            measurements.append(Measurement(label=f"{r['op']} {r['label']}", params=params))
            continue
        if r.get("algbw_gbps") is not None:
            params["algbw_gbps"] = float(r["algbw_gbps"])
        # JSON from other ranks carries an infinite error (NaN or unwritten output) as null
        err = float(r["error"]) if r.get("error") is not None else math.inf
        errors.append(err)
        if not err <= TOLERANCE:
            wrong.append(f"{r['op']} {r['label']} (error {err:.2e})")
        measurements.append(Measurement(
            label=f"{r['op']} {r['label']}", unit="s", samples=list(r["samples_s"]),
            value=r.get("busbw_gbps"), value_unit="GB/s busbw", error=err, params=params,
        ))
        if r.get("busbw_gbps") is not None:
            effect[f"{r['op']}_{r['label']}_busbw_gbps"] = float(r["busbw_gbps"])
    all_reduce = [m for m in measurements if m.params.get("op") == "all_reduce" and m.value]
    if all_reduce:
        largest = max(all_reduce, key=lambda m: int(m.params["bytes"]))
        effect["busbw_gbps"] = float(largest.value or 0.0)
    unsupported = [m.label for m in measurements if m.params.get("status") == "unsupported"]
    nvls = "NVLS on" if data.get("nvls") else "NVLS off"
    summary = (
        f"{world} ranks ({data['backend']}"
        + (f", NCCL {data['nccl_version']}" if data.get("nccl_version") else "")
        + (f", {nvls}" if data["backend"] == "nccl" else "") + "): "
        + ", ".join(f"{m.label} {m.value:.1f} GB/s" for m in measurements if m.value)
        + (f"; unsupported: {', '.join(unsupported)}" if unsupported else "")
    )
    return TrialResult(
        id=TRIAL_ID,
        status="error" if wrong or not effect else "ok",
        reason=("wrong collective results: " + "; ".join(wrong)) if wrong
        else (None if effect else "no collective ran"),
        measurements=measurements,
        effects=named_effects(effect),
        summary=summary,
        max_error=max(errors) if errors and max(errors) != float("inf") else None,
        environment=TrialEnvironment(device=f"{world} x {data.get('device')}",
                                     torch_version=data.get("torch_version")),
        wall_s=time.perf_counter() - started,
    )
