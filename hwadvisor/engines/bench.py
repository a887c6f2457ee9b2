"""The engine's own serving benchmark for a load: its data file's [bench_serve], filled in.

A load's lengths are a mean and a spread (a lognormal's coefficient of variation); the
benchmarks draw random lengths uniformly. The renderer keeps the mean and the spread: a uniform
law of half-width h around the mean has a coefficient of variation h / (mean x sqrt(3)), so
h = spread x sqrt(3) x mean (capped below the mean: lengths stay positive). The tools say the
range two ways (engines/schema.py BenchServe.range_form) and take one ratio for both lengths:
the prompt's spread is kept (it shapes prefill), and the output's mean (for SGLang's
[len x ratio, len], len is set so that the mean stays the load's).
"""

from __future__ import annotations

import math
import shlex
import urllib.parse

from hwadvisor.engines.catalog import get_engine
from hwadvisor.engines.schema import BenchServe
from hwadvisor.models.serving import Load

MAX_RATIO = 0.95  # symmetric ratios must stay under 1 (vLLM and TensorRT-LLM refuse 1)


def range_ratio(form: str, mean: float, spread: float) -> tuple[int, float]:
    """Return (length, ratio) the tool takes for lengths of this mean and spread."""
    half = min(spread * math.sqrt(3.0), MAX_RATIO)  # the half-width, as a share of the mean
    if form == "symmetric":
        return max(1, round(mean)), round(half, 3)
    high = max(1, round(mean * (1.0 + half)))  # fraction-of-max: uniform in [len x r, len]
    low = mean * (1.0 - half)
    return high, round(min(1.0, low / high), 3)


def root_url(url: str | None, bench: BenchServe) -> str:
    """Return the server's root URL the tool takes (--base-url): no /v1 path."""
    if not url:
        return f"http://127.0.0.1:{bench.port}"
    parts = urllib.parse.urlsplit(url)
    path = parts.path.rstrip("/")
    for tail in ("/completions", "/v1"):
        path = path.removesuffix(tail)
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def render_bench(engine_id: str, load: Load, base_url: str | None = None,
                 model: str | None = None) -> str | None:
    """Return the engine's serving benchmark command for the load; None when it has none."""
    bench = get_engine(engine_id).bench_serve
    if bench is None:
        return None
    # One ratio serves both lengths in these tools: the prompt's (its spread shapes prefill).
    prompt_len, ratio = range_ratio(bench.range_form, load.prompt.mean, load.prompt.spread)
    gen_len = max(1, round(load.output.mean))
    if bench.range_form == "fraction-of-max":  # uniform in [len x ratio, len]: mean len(1+r)/2
        gen_len = max(1, round(2.0 * load.output.mean / (1.0 + ratio)))
    values = {"base_url": shlex.quote(root_url(base_url, bench)), "prompt_len": prompt_len,
              "gen_len": gen_len, "range_ratio": f"{ratio:g}", "requests": load.requests,
              "model": shlex.quote(model) if model else "",
              "rate": f"{load.rate_rps:g}" if load.rate_rps is not None else "",
              "concurrency": load.concurrency or ""}
    parts = [bench.command]
    if model and bench.model:
        parts.append(bench.model)
    if load.rate_rps is not None:
        parts.append(bench.rate)
    else:
        parts.append(bench.concurrency)
    return " ".join(parts).format(**values)
