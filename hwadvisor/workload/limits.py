"""The range of every numeric option, in one place.

Every command reads its bounds here: the workload builder (estimate, recommend, validate)
checks the workload options against them, cli/options.py the what-if options and puts each
range into --help. A value outside its range is no workload but a typo, or a number that
would push the model past what its figures can hold (inf seconds, 0 tokens/s).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hwadvisor.errors import UserError


@dataclass(frozen=True)
class Limit:
    """The physical range of one numeric option, both ends included."""

    low: float
    high: float
    example: str
    integer: bool = False

    def text(self) -> str:
        """Return the range in words for --help: '1-65,536', '0-1', '0.1-100,000'."""
        return f"{_num(self.low)}-{_num(self.high)}"


def _num(value: float) -> str:
    return f"{int(value):,}" if float(value).is_integer() else f"{value:g}"


# 1 GPU per node up to 1024 (the planner lists one node's devices; no system has more per
# node); 2^20 GPUs in all (past the largest clusters built); 2^16 sequences per step and 2^24
# tokens per sequence (past the longest context of any released model), so that a report's
# byte counts stay well inside 64-bit integers.
LIMITS: dict[str, Limit] = {
    "--batch": Limit(1, 1 << 16, "--batch 8", integer=True),
    "--prompt-len": Limit(1, 1 << 24, "--prompt-len 4096", integer=True),
    "--gen-len": Limit(0, 1 << 24, "--gen-len 256", integer=True),
    "--grad-accum": Limit(1, 1 << 16, "--grad-accum 4", integer=True),
    "--gpus": Limit(1, 1 << 20, "--gpus 8", integer=True),
    "--nodes": Limit(1, 1 << 16, "--nodes 2", integer=True),
    "--gpus-per-node": Limit(1, 1 << 10, "--gpus-per-node 8", integer=True),
    # 0.1 GB/s (1 Gb/s Ethernet) to 100 TB/s per GPU, far beyond any network (400 Gb/s
    # InfiniBand NDR per GPU = 50)
    "--inter-node-gbps": Limit(0.1, 1e5, "--inter-node-gbps 50"),
    "--offload-fraction": Limit(0, 1, "--offload-fraction 0.5"),
    "--prefix-cache-hit": Limit(0, 1, "--prefix-cache-hit 0.5"),
    # accepted tokens per target forward: speculative decoding accepts a few; 64 is far past
    "--speculative-tokens": Limit(1, 64, "--speculative-tokens 2.5"),
    # the CI gates: a fraction of the datasheet bandwidth; a percent a figure may worsen
    "--min-bandwidth-fraction": Limit(0, 1, "--min-bandwidth-fraction 0.85"),
    "--min-tokens-per-s": Limit(0, 100_000, "--min-tokens-per-s 5"),
    "--max-regression": Limit(0, 10_000, "--max-regression 5"),
    "--min-effect": Limit(0, 10_000, "--min-effect 20"),
}


def check(option: str, value: float | int | None) -> float | int | None:
    """Return value when it is inside its option's range; UserError (exit 2) naming it if not."""
    if value is None:
        return None
    limit = LIMITS[option]
    kind = "an integer" if limit.integer else "a number"
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (
            limit.integer and not isinstance(value, int)):
        raise UserError(f"{option} must be {kind}, got {value!r}", hint=f"e.g. {limit.example}")
    number = float(value)
    if not math.isfinite(number) or not limit.low <= number <= limit.high:
        raise UserError(f"{option} must be {kind} in {limit.text()}, got {value}",
                        hint=f"e.g. {limit.example}")
    return value
