"""`memory-bandwidth`: device copy and triad bandwidth over buffers far larger than the cache.

copy:  dst.copy_(src)                       bytes = 2 x buffer (read src, write dst)
triad: torch.add(b, c, alpha=s, out=a)       bytes = 3 x buffer (read b, c; write a)
On a host without a GPU this measures host memory bandwidth through torch's CPU kernels; on
Apple Silicon (MPS) the unified memory through Metal kernels (timed after torch.mps.synchronize
or with mps events).
"""

from __future__ import annotations

from hwadvisor.models import Measurement, TrialResult
from hwadvisor.trials.base import (
    RequiresTrial,
    TrialContext,
    available_host_bytes,
    free_device_bytes,
    release_memory,
    torch_device,
)
from hwadvisor.trials.kit.timing import (
    bench,
    check_close,
    effects,
    poison,
    rate,
    rel_error,
    variants_result,
)

GIB = 1024**3
MIB = 1024**2
# One buffer of 2 GiB is ~35x the 60 MB L2 of an H200; three of them fit easily in 141 GB.
GPU_BUFFER_BYTES = 2 * GIB
GPU_BUFFER_BYTES_QUICK = 256 * MIB
CPU_BUFFER_BYTES = 256 * MIB
CPU_BUFFER_BYTES_QUICK = 32 * MIB
SAMPLE_ELEMENTS = 1 << 20  # elements checked against the float64 triad reference


def buffer_bytes(device: str, quick: bool) -> int:
    """Return the size of each of the three buffers: the target, capped by free memory / 15."""
    if device.startswith(("cuda", "mps")):
        target = GPU_BUFFER_BYTES_QUICK if quick else GPU_BUFFER_BYTES
        free = free_device_bytes(device) if device.startswith("cuda") else available_host_bytes()
    else:
        target = CPU_BUFFER_BYTES_QUICK if quick else CPU_BUFFER_BYTES
        free = available_host_bytes()
    if free is not None:
        target = min(target, free // 5 // 3)
    return max(MIB, target // MIB * MIB)


class MemoryBandwidthTrial(RequiresTrial):
    """Copy and triad bandwidth (GB/s, 1 GB = 1e9 bytes) of the device's memory."""

    id = "memory-bandwidth"
    title = "Memory bandwidth (copy, triad)"
    needs = "torch; a GPU for device memory, else host memory is measured"

    def run(self, ctx: TrialContext) -> TrialResult:
        """Measure copy and triad bandwidth, checking both results first."""
        import torch

        device = torch_device(ctx, mps=True)
        nbytes = buffer_bytes(device, ctx.quick)
        n = nbytes // 4
        # MPS: draw on the CPU and copy over (the mps generator differs across torch versions)
        where = "cpu" if device.startswith("mps") else device
        gen = torch.Generator(device=where).manual_seed(0)
        src = torch.rand(n, device=where, dtype=torch.float32, generator=gen).to(device)
        dst = torch.empty_like(src)
        c = torch.rand(n, device=where, dtype=torch.float32, generator=gen).to(device)
        scalar = 1.7
        repeats = 8 if ctx.quick else 20
        measurements: list[Measurement] = []
        try:
            poison(dst)
            dst.copy_(src)
            copy_ok = bool(torch.equal(dst, src))
            copy_err = 0.0 if copy_ok else float("inf")
            check_close("copy", copy_err, 0.0)
            copy = bench(lambda _i: dst.copy_(src), device=device, label="copy",  # noqa: F821
                         repeats=repeats, budget_s=ctx.budget_s / 3,
                         params={"buffer_bytes": n * 4, "bytes_moved": 2 * n * 4})
            copy.error = copy_err
            measurements.append(rate(copy, 2 * n * 4, "GB/s"))

            poison(dst)
            torch.add(src, c, alpha=scalar, out=dst)
            finite = bool(torch.isfinite(dst).all())
            idx = torch.randint(0, n, (min(n, SAMPLE_ELEMENTS),), device=where,
                                generator=gen).to(device)
            ref = src[idx].double() + scalar * c[idx].double()
            triad_err = rel_error(dst[idx], ref) if finite else float("inf")
            check_close("triad", triad_err, 1e-6)
            triad = bench(lambda _i: torch.add(src, c, alpha=scalar, out=dst), device=device,  # noqa: F821
                          label="triad", repeats=repeats, budget_s=ctx.budget_s / 3,
                          params={"buffer_bytes": n * 4, "bytes_moved": 3 * n * 4})
            triad.error = triad_err
            measurements.append(rate(triad, 3 * n * 4, "GB/s"))
        finally:
            del src, dst, c
            release_memory()
        copy_gbps, triad_gbps = measurements[0].value, measurements[1].value
        where = f"device memory ({device})" if device != "cpu" else (
            f"host memory (torch CPU kernels, {torch.get_num_threads()} threads)")
        return variants_result(
            self.id, measurements,
            ok=True,  # a failed check or timing raises: the runner reports it as an error
            effect=effects(copy_gbps=copy_gbps, triad_gbps=triad_gbps),
            summary=f"{where}: copy {copy_gbps or 0:.0f} GB/s, triad {triad_gbps or 0:.0f} GB/s "
                    f"over {n * 4 / MIB:.0f} MiB buffers",
        )
