"""Small helpers the model-level trials share.

The guarded run() (unsupported first, an exception becomes an error result, memory released),
the result with its environment record and wall time, and the workload's block shape scaled to
a few-second trial.

torch is imported only inside functions.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from hwadvisor.models import Measurement, ModelSpec, TrialEnvironment, TrialResult, Workload
from hwadvisor.models.trial import named_effects
from hwadvisor.trials.base import RequiresTrial, Trial, TrialContext, release_memory

# When the workload has no architecture spec, the trials use Llama-3-8B's block widths
# (config.json of meta-llama/Meta-Llama-3-8B: hidden 4096, 32 heads, 8 KV heads, head_dim 128,
# intermediate 14336, 32 layers).
DEFAULT_SPEC = {
    "hidden_size": 4096,
    "num_heads": 32,
    "num_kv_heads": 8,
    "head_dim": 128,
    "intermediate_size": 14336,
    "num_layers": 32,
}


@dataclass(frozen=True)
class BlockShape:
    """The shapes of one transformer block as a trial builds it (possibly scaled down)."""

    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    layers: int
    batch: int
    seq_len: int
    source: str  # the spec's name, or "default (llama-3-8b widths)"

    def params(self) -> dict[str, float | int | str]:
        """Return the shape as Measurement.params."""
        return dict(asdict(self))


def spec_of(workload: Workload | None) -> tuple[dict[str, int], str]:
    """Return the block widths of the workload's spec (or the default) and their source."""
    spec: ModelSpec | None = workload.spec if workload is not None else None
    if spec is None:
        return dict(DEFAULT_SPEC), "default (llama-3-8b widths)"
    inter = spec.intermediate_size
    if spec.num_experts and spec.moe_intermediate_size:
        # An MoE layer's expert is narrower than the dense MLP; the trial runs one expert's width.
        inter = spec.moe_intermediate_size
    widths = {
        "hidden_size": spec.hidden_size,
        "num_heads": spec.num_heads,
        "num_kv_heads": spec.num_kv_heads,
        "head_dim": spec.head_dim,
        "intermediate_size": inter,
        "num_layers": spec.num_layers,
    }
    return widths, spec.name


def scaled_shape(
    workload: Workload | None,
    *,
    max_heads: int,
    layers: int,
    batch: int,
    seq_len: int,
    quick_head_dim: int | None = None,
) -> BlockShape:
    """Scale the workload's block to at most `max_heads` query heads.

    The GQA ratio, head_dim and the MLP-to-hidden ratio are kept; `layers` layers,
    `batch` x `seq_len` tokens.

    Fewer heads keep a trial to a few seconds while the per-head kernel shapes stay the
    workload's; `quick_head_dim` shrinks head_dim too (CPU tests only).
    """
    w, source = spec_of(workload)
    heads, kv = w["num_heads"], w["num_kv_heads"]
    group = max(1, heads // kv) if kv else 1
    new_heads = min(heads, max_heads)
    new_heads = max(group, (new_heads // group) * group)  # keep whole GQA groups
    new_kv = max(1, new_heads // group)
    head_dim = quick_head_dim or w["head_dim"]
    hidden = new_heads * head_dim
    ratio = w["intermediate_size"] / w["hidden_size"]
    inter = max(8, int(round(hidden * ratio / 8)) * 8)
    return BlockShape(
        hidden_size=hidden,
        num_heads=new_heads,
        num_kv_heads=new_kv,
        head_dim=head_dim,
        intermediate_size=inter,
        layers=max(1, min(layers, w["num_layers"])),
        batch=batch,
        seq_len=seq_len,
        source=source,
    )


def environment(device: str) -> TrialEnvironment:
    """Where the trial ran: the device name and the torch version."""
    import torch

    name = device
    if device.startswith("cuda"):
        try:
            name = torch.cuda.get_device_name(torch.device(device))
        except Exception:  # a name is nice to have, never worth failing a trial over
            name = device
    return TrialEnvironment(device=name, torch_version=str(torch.__version__))


def unsupported(trial_id: str, reason: str) -> TrialResult:
    """Build a result with status "unsupported" and its reason."""
    return TrialResult(id=trial_id, status="unsupported", reason=reason)


def failed(trial_id: str, exc: BaseException, started: float) -> TrialResult:
    """Build a result with status "error" naming the exception."""
    return TrialResult(
        id=trial_id,
        status="error",
        reason=f"{type(exc).__name__}: {exc}"[:2000],
        wall_s=time.perf_counter() - started,
    )


def run_guarded(
    trial: Trial,
    ctx: TrialContext,
    body: Callable[[TrialContext, float], TrialResult],
    cleanup: Callable[[], None] | None = None,
) -> TrialResult:
    """Run a model-level trial: unsupported first, then body(ctx, started), guarded.

    An exception becomes an error result (the runner records it; the next trial still runs).
    Either way cleanup (when given) runs, then release_memory.
    """
    reason = trial.unsupported_reason(ctx)
    if reason:
        return unsupported(trial.id, reason)
    started = time.perf_counter()
    try:
        return body(ctx, started)
    except Exception as exc:  # the runner records the failure; the next trial still runs
        return failed(trial.id, exc, started)
    finally:
        if cleanup is not None:
            cleanup()
        release_memory()


class GuardedTrial(RequiresTrial):
    """A model-level trial: `body(ctx, started)` runs through run_guarded, `cleanup` after it."""

    def run(self, ctx: TrialContext) -> TrialResult:
        """Check what it needs, then run the body; an exception becomes an error result."""
        return run_guarded(self, ctx, self.body, cleanup=self.cleanup)

    def body(self, ctx: TrialContext, started: float) -> TrialResult:
        """Measure; see the trial's module docstring."""
        raise NotImplementedError

    def cleanup(self) -> None:
        """Undo process-wide state the body left (torch.compile's caches); nothing by default."""


def finished(
    trial_id: str,
    device: str,
    started: float,
    *,
    ok: bool,
    reason: str | None,
    measurements: list[Measurement],
    effect: dict[str, float],
    summary: str,
    max_error: float | None,
    intervals: dict[str, tuple[tuple[float, float] | None, int]] | None = None,
    kernel: str | None = None,
) -> TrialResult:
    """Build a model-level trial's result: status from ok, its environment and wall time.

    intervals maps effect names to (95% interval, runs) for the effects that carry one.
    """
    return TrialResult(
        id=trial_id,
        status="ok" if ok else "error",
        reason=reason,
        measurements=measurements,
        effects=named_effects(effect, intervals),
        summary=summary,
        kernel=kernel,
        max_error=max_error,
        environment=environment(device),
        wall_s=time.perf_counter() - started,
    )


@dataclass(frozen=True)
class Checked:
    """A trial's output checked against its reference: the error, the bound, what differs."""

    error: float
    tolerance: float
    differs: str  # "compiled output differs from eager"

    @property
    def ok(self) -> bool:
        """Whether the error is within the bound (a NaN error is not)."""
        return self.error <= self.tolerance

    def reason(self) -> str | None:
        """Say why the result is an error, or None when the check passed."""
        return None if self.ok else f"{self.differs}: {self.error:.2e} > {self.tolerance:.0e}"

    def max_error(self) -> float | None:
        """Return the error as the report holds it (None when not finite: JSON has no NaN)."""
        finite = self.error == self.error and self.error != float("inf")
        return self.error if finite else None


def checked_result(trial_id: str, device: str, started: float, check: Checked,
                   **parts: Any) -> TrialResult:
    """Build the result of a checked trial (`finished` with ok, reason and max_error)."""
    return finished(trial_id, device, started, ok=check.ok, reason=check.reason(),
                    max_error=check.max_error(), **parts)


def torch_dtype(name: str) -> Any:
    """Return the torch dtype by short name ("bf16", "fp16", "fp32")."""
    import torch

    return {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[name]


def compute_dtype(device: str) -> str:
    """Return bf16 on a GPU (what LLMs run in), fp16 on MPS, fp32 on a CPU (exact there)."""
    if device.startswith("mps"):
        return "fp16"  # Metal's native half type; bf16 needs macOS 14 and is slower there
    return "bf16" if device.startswith("cuda") else "fp32"


def tolerance(dtype: str) -> float:
    """Relative-error bound for a comparison in this dtype (METHOD.md: bf16 lands 1e-3..1e-2)."""
    return {"fp32": 1e-4, "bf16": 3e-2, "fp16": 5e-3}[dtype]
