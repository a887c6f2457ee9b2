"""The load: its requests' lengths and arrivals, drawn once from the load's description.

Lengths follow a lognormal around the mean (spread = its coefficient of variation), the shape
request lengths of chat traffic take (ShareGPT's prompt and output lengths are right-skewed); a
trace gives them request by request. Arrivals are Poisson at the rate (as vllm bench serve's
--request-rate and GuideLLM's poisson profile send them), evenly spaced for `constant`, the
trace's own times, or a closed loop of users. Every draw is seeded, so a load is the same load
each time it is played.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass
from pathlib import Path

from hwadvisor.errors import UserError
from hwadvisor.models.serving import Lengths, Load

SEED = 20261206

# Named length shapes (--dataset): prompt and output means and spreads, each with its source.
# The spreads are coefficients of variation of the lengths as the sources report them.
DATASETS: dict[str, tuple[Lengths, Lengths, str]] = {
    # ShareGPT as vllm bench serve samples it (benchmarks/datasets.py, ShareGPT_V3 filtered to
    # prompts >= 4 and outputs >= 4 tokens, Llama-3 tokenizer): mean prompt ~220, output ~200,
    # both with a standard deviation about their mean (a long right tail).
    "sharegpt": (Lengths(mean=220, spread=1.0), Lengths(mean=200, spread=1.0),
                 "ShareGPT_V3 as vllm bench serve samples it (mean prompt ~220, output ~200)"),
    # Chat with a system prompt and history: the 1k/256-ish shape serving benchmarks use for
    # chat (InferenceMAX's 1k/1k and vLLM's random 1024/128 bracket it).
    "chat": (Lengths(mean=1024, spread=0.5), Lengths(mean=256, spread=0.5),
             "chat: ~1k-token prompts (system prompt and history), ~256-token answers"),
    # Retrieval-augmented generation: long prompts of retrieved passages, short answers
    # (InferenceMAX's 8k/1k and the 'summarisation' 4k-8k in / 256-512 out shapes).
    "rag": (Lengths(mean=8192, spread=0.3), Lengths(mean=256, spread=0.5),
            "RAG: ~8k-token prompts of retrieved passages, ~256-token answers"),
    # Code completion: a file's context in, a few lines out (Copilot-style completions).
    "code-completion": (Lengths(mean=2048, spread=0.5), Lengths(mean=64, spread=0.5),
                        "code completion: ~2k tokens of file context, ~64-token completions"),
    # Offline batch jobs (summaries, extraction): long-ish prompts and outputs, all at once.
    "batch": (Lengths(mean=2048, spread=0.3), Lengths(mean=512, spread=0.3),
              "batch job: ~2k-token documents, ~512-token outputs"),
}


@dataclass(frozen=True)
class Requests:
    """The requests one load plays: lengths, and arrival times for an open loop."""

    prompt: tuple[int, ...]
    output: tuple[int, ...]
    arrivals: tuple[float, ...] | None  # None: a closed loop (each user sends on completion)

    def __len__(self) -> int:
        """Return how many requests there are."""
        return len(self.prompt)


def _lognormal(rng: random.Random, mean: float, spread: float) -> int:
    if spread <= 0:
        return max(1, round(mean))
    sigma2 = math.log(1.0 + spread * spread)
    mu = math.log(mean) - sigma2 / 2.0
    return max(1, round(rng.lognormvariate(mu, math.sqrt(sigma2))))


def draw_lengths(lengths: Lengths, count: int, rng: random.Random) -> tuple[int, ...]:
    """Return `count` lengths: the trace's own (cycled), else drawn around the mean."""
    if lengths.values:
        values = lengths.values
        return tuple(values[i % len(values)] for i in range(count))
    return tuple(_lognormal(rng, lengths.mean, lengths.spread) for _ in range(count))


def draw(load: Load, rate_rps: float | None = None, seed: int = SEED) -> Requests:
    """Draw the load's requests; rate_rps overrides the load's rate (a replica's share)."""
    rng = random.Random(seed)
    count = load.requests
    prompt = draw_lengths(load.prompt, count, rng)
    output = draw_lengths(load.output, count, rng)
    if load.concurrency is not None and load.rate_rps is None:
        return Requests(prompt, output, None)
    rate = rate_rps if rate_rps is not None else float(load.rate_rps or 1.0)
    if load.arrival_times_s is not None and rate_rps is None:
        times = load.arrival_times_s
        arrivals = tuple(times[i] if i < len(times) else times[-1] for i in range(count))
    elif load.arrivals == "constant":
        arrivals = tuple(i / rate for i in range(count))
    else:
        t, out = 0.0, []
        for _ in range(count):
            out.append(t)
            t += rng.expovariate(rate)
        arrivals = tuple(out)
    return Requests(prompt, output, arrivals)


def _summary(values: list[int]) -> Lengths:
    mean = sum(values) / len(values)
    var = sum((v - mean) ** 2 for v in values) / len(values)
    return Lengths(mean=mean, spread=min(3.0, math.sqrt(var) / mean), values=values)


def read_trace(path: Path) -> tuple[Lengths, Lengths, list[float] | None]:
    """Read a trace: JSON lines of prompt_len, gen_len and optional arrival_s (or timestamp).

    Returns the prompt and output lengths and the arrival times (from the first request, in
    seconds; None when no line has one). A bad line is a UserError naming the line.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UserError(f"cannot read the trace {path}: {exc.strerror or exc}",
                        hint="--trace takes a JSON-lines file: one object per request with "
                        "prompt_len, gen_len and optionally arrival_s") from None
    prompts: list[int] = []
    outputs: list[int] = []
    times: list[float] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        prompt, output, at = _trace_line(path, number, line)
        prompts.append(prompt)
        outputs.append(output)
        if at is not None:
            times.append(at)
    if not prompts:
        raise UserError(f"the trace {path} has no requests",
                        hint="one JSON object a line: {\"prompt_len\": 512, \"gen_len\": 128}")
    arrivals = None
    if times:
        if len(times) != len(prompts):
            raise UserError(f"the trace {path} gives arrival_s on some lines but not all",
                            hint="give arrival_s on every line, or on none (then --rate or "
                            "--concurrency sets the arrivals)")
        first = min(times)
        arrivals = sorted(t - first for t in times)
    return _summary(prompts), _summary(outputs), arrivals


def _trace_line(path: Path, number: int, line: str) -> tuple[int, int, float | None]:
    where = f"{path}:{number}"
    try:
        row = json.loads(line)
    except json.JSONDecodeError as exc:
        raise UserError(f"{where} is not JSON ({exc.msg})",
                        hint="one JSON object a line") from None
    if not isinstance(row, dict):
        raise UserError(f"{where} is not a JSON object", hint="one JSON object a line")
    prompt = row.get("prompt_len", row.get("input_len"))
    output = row.get("gen_len", row.get("output_len"))
    at = row.get("arrival_s", row.get("timestamp"))
    for name, value in (("prompt_len", prompt), ("gen_len", output)):
        if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 10_000_000:
            raise UserError(f"{where}: {name} must be a whole number of tokens from 1 up, "
                            f"got {value!r}", hint="e.g. {\"prompt_len\": 512, \"gen_len\": 128}")
    if at is not None and (not isinstance(at, (int, float)) or isinstance(at, bool)
                           or not math.isfinite(at) or at < 0):
        raise UserError(f"{where}: arrival_s must be seconds (a number from 0 up), got {at!r}",
                        hint="arrival_s: when the request arrives, in seconds")
    assert isinstance(prompt, int) and isinstance(output, int)  # checked above
    return prompt, output, float(at) if at is not None else None
