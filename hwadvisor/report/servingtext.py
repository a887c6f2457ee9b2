"""The serving plan as lines: the load, the targets met or missed, the figures, the configs.

One source for the text view (cli), markdown and HTML, so every view says the same: the load
planned for, each target with its margin, TTFT/TPOT/ITL/latency at p50, p90 and p99 in ms,
requests/s and output tokens/s, the chosen config, the fewest GPUs, the Pareto front.
"""

from __future__ import annotations

from hwadvisor import units
from hwadvisor.models.serving import ServingFigures, ServingPlan, ServingPoint

FIGURE_ROWS = (("TTFT", "ttft"), ("TPOT", "tpot"), ("ITL", "itl"),
               ("request latency", "request_latency"))


def tpot_words(plan: ServingPlan) -> str:
    """Say which TPOT the figures and the target use."""
    if plan.targets.tpot_definition == "itl":
        return ("the TPOT target is held against ITL, the gaps between tokens; TPOT is per "
                "request: (latency - TTFT) / (output tokens - 1)")
    return ("TPOT is per request: (latency - TTFT) / (output tokens - 1), as vllm bench serve, "
            "GuideLLM and aiperf report it; ITL is the gaps between tokens")


def figure_rows(figures: ServingFigures) -> list[list[str]]:
    """Rows of (figure, p50, p90, p99, mean) in ms."""
    rows = []
    for name, key in FIGURE_ROWS:
        rows.append([name] + [units.ms(getattr(figures, f"{key}_{q}_s"))
                              for q in ("p50", "p90", "p99", "mean")])
    return rows


def throughput_words(figures: ServingFigures) -> str:
    """Say the throughput: '20.0 requests/s, 5,120 output tokens/s'."""
    state = " (saturated: the queue grows as long as the load lasts)" if figures.saturated else ""
    return (f"{units.rate(figures.request_throughput_rps, 'requests/s')}, "
            f"{units.rate(figures.output_tokens_per_s, 'output tokens/s')} over "
            f"{figures.requests} requests{state}")


def point_words(point: ServingPoint) -> str:
    """Say one config of the list: its layout and knobs, its speed per GPU and per user."""
    met = "meets the targets" if point.meets_targets else "misses a target"
    goodput = point.goodput_tokens_per_s_per_gpu
    return (f"{point.config.words()}: {units.rate(point.tokens_per_s_per_gpu)} per GPU "
            f"at this load" + (f", {units.rate(goodput)} per GPU at its capacity" if goodput
                               else "")
            + f", {units.rate(point.tokens_per_s_per_user)} per user; {met} ({point.source})")


def front_rows(plan: ServingPlan) -> list[list[str]]:
    """Rows of the Pareto front: tokens/s per user, per GPU, the config."""
    return [[units.rate(p.tokens_per_s_per_user), units.rate(p.tokens_per_s_per_gpu),
             p.config.split_words(), p.config.weights_dtype,
             p.config.kv_dtype + (" unified" if p.config.kv_unified else ""),
             p.config.speculative or "—", str(p.config.max_sequences),
             f"{p.config.step_tokens:,}"] for p in plan.pareto]


FRONT_HEADER = ["tokens/s per user", "tokens/s per GPU", "layout", "weights", "KV",
                "drafter", "sequences", "step tokens"]
FIGURE_HEADER = ["figure", "p50", "p90", "p99", "mean"]


def serving_lines(plan: ServingPlan, front: bool = True) -> list[str]:
    """Return the serving plan as plain lines (text view); front: list the Pareto front too."""
    lines = [f"load planned for: {plan.load.words()} ({plan.load.source})"]
    targets = plan.targets.words()
    lines.append(f"targets: {targets}" if targets else "targets: none given (--ttft, --tpot, "
                 "--e2e in ms)")
    lines += [f"  {c.words()}" for c in plan.checks]
    if plan.config is not None:
        lines.append(f"config: {plan.config.words()}")
    if plan.figures is not None:
        lines.append(f"figures ({plan.figures_words()}):")
        for row in figure_rows(plan.figures):
            lines.append(f"  {row[0]}: p50 {row[1]}, p90 {row[2]}, p99 {row[3]} (mean {row[4]})")
        lines.append(f"  throughput: {throughput_words(plan.figures)}")
    if plan.searched:
        fewest = (f"{plan.fewest_gpus} GPU{'s' if plan.fewest_gpus != 1 else ''}"
                  if plan.fewest_gpus is not None else "none: no config meets the targets")
        lines.append(f"fewest GPUs for this load: {fewest}")
        lines.append(f"searched: {plan.searched} configs")
    if plan.top:
        lines.append("top configs:")
        lines += [f"  {i}. {point_words(p)}" for i, p in enumerate(plan.top, start=1)]
    if plan.pareto and not front:
        lines.append(f"Pareto front: {len(plan.pareto)} configs (serving.pareto in the JSON, a "
                     "chart in the HTML and PNG views)")
    elif plan.pareto:
        lines.append(f"Pareto front (tokens/s per GPU against tokens/s per user, {len(plan.pareto)}"
                     " configs no other beats on both):")
        for row in front_rows(plan):
            lines.append(f"  {row[0]} per user, {row[1]} per GPU: {row[2]}, {row[3]} weights, "
                         f"{row[4]} KV, drafter {row[5]}, {row[6]} sequences")
    lines.append(f"method: {plan.method}")
    lines.append(tpot_words(plan))
    lines += [f"note: {n}" for n in plan.notes]
    return lines
