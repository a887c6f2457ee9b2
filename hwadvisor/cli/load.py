"""The load and latency-target options of estimate and recommend, declared once.

A command takes them as one `LoadRequest` (serving/request.py), every option None when not
given; the serving room checks the combinations (rate or concurrency, targets need a load) and
the ranges, so the error text and exit code 2 are hwadvisor's own::

    @load_options
    def estimate(..., load: LoadRequest = NO_LOAD) -> None: ...

Latency targets are milliseconds here, as engineers state them; the report holds seconds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from hwadvisor.cli.params import Param, group_options
from hwadvisor.serving.load import DATASETS
from hwadvisor.serving.request import NO_LOAD, LoadRequest

__all__ = ["LOAD_PARAMS", "NO_LOAD", "LoadRequest", "load_options"]

_PANEL = "Load and latency targets (serving)"


def _opt(flag: str, help_text: str, kind: Any) -> Any:
    # Optional[...] rather than "X | None": typer resolves these at runtime on Python 3.10 too.
    return Annotated[Optional[kind],  # noqa: UP007, UP045
                     typer.Option(flag, help=help_text, rich_help_panel=_PANEL,
                                  show_default=False)]


LOAD_PARAMS: tuple[Param, ...] = (
    Param("rate", _opt("--rate", "Requests per second arriving (open loop, Poisson): plan for "
                       "this load instead of a batch; --batch keeps its meaning for offline "
                       "work", float)),
    Param("concurrency", _opt("--concurrency", "Users each waiting for its answer before "
                              "sending the next (closed loop); instead of --rate", int)),
    Param("prompt_spread", _opt("--prompt-spread", "Spread of the prompt lengths around "
                                "--prompt-len: coefficient of variation of a lognormal (0-3) "
                                "\\[default: 0]", float)),
    Param("gen_spread", _opt("--gen-spread", "Spread of the output lengths around --gen-len "
                             "(coefficient of variation, 0-3) \\[default: 0]", float)),
    Param("dataset", _opt("--dataset", "A named length shape instead of --prompt-len/--gen-len: "
                          + ", ".join(sorted(DATASETS)), str)),
    Param("trace", _opt("--trace", "A JSON-lines file of requests: prompt_len, gen_len and "
                        "optionally arrival_s (then no --rate is needed)", Path)),
    Param("prefix_share", _opt("--prefix-share", "Share of each prompt the prefix cache serves "
                               "(a shared system prompt), 0-0.99 \\[default: 0]", float)),
    Param("requests", _opt("--requests", "Requests the simulation plays \\[default: 400]", int)),
    Param("ttft_ms", _opt("--ttft", "Time-to-first-token target, milliseconds", float)),
    Param("tpot_ms", _opt("--tpot", "Time-per-output-token target, milliseconds", float)),
    Param("e2e_ms", _opt("--e2e", "Request latency target (end to end), milliseconds", float)),
    Param("percentile", _opt("--percentile", "The percentile the targets hold at: 50, 90, 95 "
                             "or 99 \\[default: 90]", int)),
    Param("tpot_definition", _opt("--tpot-definition", "request: (latency - TTFT) / (output - "
                                  "1) per request, as vllm bench serve, GuideLLM and aiperf "
                                  "report TPOT; itl: the gaps between tokens \\[default: "
                                  "request]", str)),
)

load_options = group_options(LoadRequest, LOAD_PARAMS, "load")
