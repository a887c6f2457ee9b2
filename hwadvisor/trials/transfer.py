"""`host-transfer`: pinned against pageable host-to-device copies (GB/s each, and the ratio).

A pageable copy is staged by the driver through a pinned bounce buffer; a pinned (page-locked)
source lets the copy engine read host memory directly (CUDA C Best Practices Guide, "Pinned
memory"). effect: pinned_gbps, pageable_gbps, speedup = pinned / pageable.
"""

from __future__ import annotations

from typing import Any

from hwadvisor.models import Measurement, TrialResult
from hwadvisor.trials.base import (
    Requires,
    RequiresTrial,
    TrialContext,
    available_host_bytes,
    release_memory,
    torch_device,
)
from hwadvisor.trials.kit import timing

MIB = 1024**2
TRANSFER_BYTES = 512 * MIB
TRANSFER_BYTES_QUICK = 128 * MIB


def _measure(kind: str, src: Any, dst: Any, device: str, repeats: int,
             budget_s: float) -> Measurement:
    """Check one host-to-device copy bit for bit, then time it (synchronous: non_blocking off)."""
    import torch

    timing.poison(dst)
    dst.copy_(src)
    same = bool(torch.equal(dst.cpu(), src))
    timing.check_close(f"{kind} copy", 0.0 if same else float("inf"), 0.0)
    m = timing.bench(lambda _i: dst.copy_(src), device=device, label=kind, repeats=repeats,
              budget_s=budget_s, params={"bytes": src.numel() * src.element_size(),
                                          "pinned": int(src.is_pinned())})
    m.error = 0.0
    return timing.rate(m, src.numel() * src.element_size(), "GB/s")


class HostTransferTrial(RequiresTrial):
    """Host-to-device bandwidth from pinned and from pageable memory."""

    id = "host-transfer"
    title = "Host-to-device copy: pinned vs pageable"
    needs = "CUDA GPU"

    requires = Requires(cuda=True)

    def run(self, ctx: TrialContext) -> TrialResult:
        """Time the same copy from a pageable and from a pinned host tensor."""
        import torch

        device = torch_device(ctx)
        nbytes = TRANSFER_BYTES_QUICK if ctx.quick else TRANSFER_BYTES
        host_free = available_host_bytes()
        if host_free is not None:
            nbytes = max(16 * MIB, min(nbytes, host_free // 8) // MIB * MIB)
        n = nbytes // 4
        repeats = 6 if ctx.quick else 15
        budget = ctx.budget_s / 2
        measurements: list[Measurement] = []
        dst = torch.empty(n, dtype=torch.float32, device=device)
        try:
            pageable = torch.rand(n, dtype=torch.float32)
            measurements.append(timing.guarded("pageable", lambda: _measure(
                "pageable", pageable, dst, device, repeats, budget)))  # noqa: F821
            del pageable
            try:
                pinned = torch.rand(n, dtype=torch.float32).pin_memory()
            except RuntimeError as exc:
                measurements.append(Measurement(label="pinned",
                                                skipped=f"pin_memory failed: {exc}"))
            else:
                measurements.append(timing.guarded("pinned", lambda: _measure(
                    "pinned", pinned, dst, device, repeats, budget)))  # noqa: F821
                del pinned
        finally:
            del dst
            release_memory()
        by_label = {m.label: m for m in timing.ran(measurements)}
        ratio = None
        if "pageable" in by_label and "pinned" in by_label:
            ratio = timing.speedup(by_label["pageable"], by_label["pinned"])
        found = timing.effects(
            pinned_gbps=by_label["pinned"].value if "pinned" in by_label else None,
            pageable_gbps=by_label["pageable"].value if "pageable" in by_label else None,
            speedup=ratio,
        )
        # max_error: 0.0 once a copy ran (each is checked bit for bit), None when none did.
        return timing.variants_result(
            self.id, measurements,
            ok=bool(by_label),
            effect=found,
            summary=", ".join(f"{k} {v:.2f}" for k, v in found.items()) + f" ({nbytes // MIB} MiB)",
        )
