"""The load and the targets as a user asked for them (--rate, --ttft, ...), checked and built.

The CLI fills a `LoadRequest` (every option None when not given); `build` turns it into the
`Load` and `Targets` the search and the simulation read, with the workload's --prompt-len and
--gen-len as the lengths' means. Bad combinations are UserErrors (exit 2) with a hint.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from pathlib import Path

from hwadvisor.errors import UserError
from hwadvisor.models import Workload
from hwadvisor.models.serving import Lengths, Load, Targets
from hwadvisor.serving.load import DATASETS, read_trace

PERCENTILE_CHOICES = (50, 90, 95, 99)
TPOT_DEFINITIONS = ("request", "itl")
_LOAD_HINT = ("a load is --rate R (requests/s, open loop) or --concurrency C (users, closed "
              "loop), e.g. --rate 20 --ttft 1000 --tpot 50")


@dataclass(frozen=True)
class LoadRequest:
    """The load and latency-target options; None means "not given"."""

    rate: float | None = None
    concurrency: int | None = None
    prompt_spread: float | None = None
    gen_spread: float | None = None
    dataset: str | None = None
    trace: Path | None = None
    prefix_share: float | None = None
    requests: int | None = None
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2e_ms: float | None = None
    percentile: int | None = None
    tpot_definition: str | None = None

    def given(self) -> bool:
        """Tell whether any load or target option was given."""
        return any(getattr(self, f.name) is not None for f in fields(self))

    def targets_given(self) -> bool:
        """Tell whether a latency target was given."""
        return any(v is not None for v in (self.ttft_ms, self.tpot_ms, self.e2e_ms))


NO_LOAD = LoadRequest()

# Each number's option and its range: (low, high, low included).
_RANGES: dict[str, tuple[str, float, float, bool]] = {
    "rate": ("--rate", 0.0, 1e6, False),
    "concurrency": ("--concurrency", 1, 100_000, True),
    "prompt_spread": ("--prompt-spread", 0.0, 3.0, True),
    "gen_spread": ("--gen-spread", 0.0, 3.0, True),
    "prefix_share": ("--prefix-share", 0.0, 0.99, True),
    "requests": ("--requests", 1, 100_000, True),
    "ttft_ms": ("--ttft", 0.0, 1e7, False),
    "tpot_ms": ("--tpot", 0.0, 1e7, False),
    "e2e_ms": ("--e2e", 0.0, 1e8, False),
}


def check(request: LoadRequest) -> None:
    """Refuse values out of range and options that do not go together (UserError, exit 2)."""
    for name, (option, low, high, closed) in _RANGES.items():
        value = getattr(request, name)
        if value is None:
            continue
        below = value < low if closed else value <= low
        if not math.isfinite(value) or below or value > high:
            edge = f"from {low:g}" if closed else f"above {low:g}"
            raise UserError(f"{option} must be a number {edge} up to {high:g}, got {value:g}",
                            hint=_LOAD_HINT)
    if request.rate is not None and request.concurrency is not None:
        raise UserError("--rate and --concurrency together: a load is one or the other",
                        hint="--rate R for requests arriving at a rate (open loop), "
                        "--concurrency C for C users each waiting for its answer (closed loop)")
    if request.dataset is not None and request.trace is not None:
        raise UserError("--dataset and --trace together: the lengths come from one of them",
                        hint="--dataset NAME for a named shape, --trace FILE for your own requests")
    if request.dataset is not None and request.dataset not in DATASETS:
        raise UserError(f"no such dataset shape {request.dataset!r}",
                        hint="--dataset takes " + ", ".join(sorted(DATASETS)))
    if request.percentile is not None and request.percentile not in PERCENTILE_CHOICES:
        raise UserError(f"--percentile must be one of 50, 90, 95, 99, got {request.percentile}",
                        hint="--percentile 90 checks the targets at p90 (the default)")
    if request.tpot_definition is not None and request.tpot_definition not in TPOT_DEFINITIONS:
        raise UserError(f"--tpot-definition must be request or itl, got "
                        f"{request.tpot_definition!r}",
                        hint="request: (latency - TTFT) / (output - 1) per request, as vllm bench "
                        "serve reports TPOT; itl: the gaps between tokens")
    driven = request.rate is not None or request.concurrency is not None \
        or request.trace is not None
    if request.given() and not driven:
        what = "a latency target" if request.targets_given() else "a load option"
        raise UserError(f"{what} without a load: the targets are met or missed at a rate or a "
                        "concurrency", hint=_LOAD_HINT)


def build(request: LoadRequest, workload: Workload) -> tuple[Load, Targets] | None:
    """Return the load and targets asked for (None when no load option was given)."""
    if not request.given():
        return None
    check(request)
    if workload.phase != "inference":
        raise UserError("a load and latency targets are for serving, not training",
                        hint="drop --rate/--concurrency and the targets, or plan --phase inference")
    prompt = Lengths(mean=workload.prompt_len, spread=request.prompt_spread or 0.0)
    output = Lengths(mean=max(workload.gen_len, 1), spread=request.gen_spread or 0.0)
    arrivals = None
    source = "--prompt-len/--gen-len"
    if request.dataset is not None:
        prompt, output, words = DATASETS[request.dataset]
        source = f"--dataset {request.dataset} ({words})"
    elif request.trace is not None:
        prompt, output, arrivals = read_trace(request.trace)
        source = f"--trace {request.trace.name} ({len(prompt.values or [])} requests)"
    rate = request.rate
    if rate is None and request.concurrency is None:
        if arrivals is None or len(arrivals) < 2 or arrivals[-1] <= 0:
            raise UserError(f"the trace {request.trace} gives no arrival times to set the rate",
                            hint=_LOAD_HINT)
        rate = (len(arrivals) - 1) / arrivals[-1]
    count = request.requests or (len(prompt.values) if prompt.values else Load.model_fields[
        "requests"].default)
    load = Load(
        rate_rps=rate, concurrency=request.concurrency, prompt=prompt, output=output,
        prefix_share=request.prefix_share or 0.0,
        arrivals="trace" if arrivals is not None and request.rate is None
        and request.concurrency is None else ("closed-loop" if request.concurrency else "poisson"),
        arrival_times_s=arrivals if request.rate is None and request.concurrency is None else None,
        requests=count, dataset=request.dataset, source=source)
    targets = Targets(
        ttft_s=_seconds(request.ttft_ms), tpot_s=_seconds(request.tpot_ms),
        request_latency_s=_seconds(request.e2e_ms),
        percentile=request.percentile or 90,  # type: ignore[arg-type]  # checked above
        tpot_definition=request.tpot_definition or "request")  # type: ignore[arg-type]
    return load, targets


def _seconds(ms: float | None) -> float | None:
    return ms / 1000.0 if ms is not None else None
