"""The serving model against published runs under load (benchmarks/serving_published.toml).

For each run the workload is built as the source ran it (preset, engine and its release, GPUs and
tensor-parallel layout, weights and KV formats), put on the engine's defaults
(workload.settle.on_engine_defaults), and the load is played through `hwadvisor.serving.predict`:
a request rate or a concurrency, prompt and output lengths as a mean and a spread, the run's
request count (400 where the source does not state it, at least four rounds of a closed loop).
An infinite rate (every request sent at once) is a closed loop with one user per request.

Each published figure is compared with the predicted figure of the same statistic (TTFT mean with
TTFT mean, TPOT median with TPOT median, ...). For comparison the static-batch estimate is shown
too: `estimate` at batch = the run's concurrency (for a rate, the requests in flight by Little's
law: rate x the predicted mean request latency), its ttft_s, tpot_s and tokens_per_s.

Printed per split (tune, check, all) and per figure kind (TTFT, TPOT/ITL, output tokens/s, other):
the median and p90 of |error|, with the issue's targets (median within 20% for TTFT and TPOT,
15% for output tokens/s, on the check split). Tail statistics (p99) are reported apart.

Run: python benchmarks/serving_published.py [--split check|tune|all] [--json FILE] [--runs]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import tomllib

from hwadvisor import profiles
from hwadvisor.engines import parse_options
from hwadvisor.models import Device, ModelOptions, Workload
from hwadvisor.models.serving import Lengths, Load
from hwadvisor.perfmodel import estimate
from hwadvisor.report.io import write_text
from hwadvisor.serving import predict
from hwadvisor.workload import Sizing, WorkloadRequest, build_workload
from hwadvisor.workload.settle import on_engine_defaults

HERE = Path(__file__).resolve().parent
RUNS = HERE / "serving_published.toml"
DEFAULT_REQUESTS = 400
# Issue 40's targets, on the held-out (check) split: median |error| per figure kind.
TARGETS = {"ttft": 0.20, "tpot": 0.20, "output_tokens_per_s": 0.15}
KINDS = ("ttft", "tpot", "output_tokens_per_s", "other")
KIND_NAMES = {"ttft": "TTFT", "tpot": "TPOT/ITL", "output_tokens_per_s": "output tokens/s",
              "other": "other (E2E latency, requests/s)"}
FIGURE_KEYS = tuple(f"{fig}_{stat}_s" for fig in ("ttft", "tpot", "itl", "request_latency")
                    for stat in ("mean", "p50", "p90", "p99")) + (
    "output_tokens_per_s", "request_throughput_rps")


@dataclass
class Run:
    """One published run under load, as the data file gives it."""

    id: str
    source_id: str
    split: str
    engine: str
    engine_version: str
    model: str
    device: str
    gpus: int
    tp: int
    weights_dtype: str
    kv_dtype: str
    dataset: str
    prompt_mean: float
    prompt_spread: float
    output_mean: float
    output_spread: float
    source: str
    where: str
    rate_rps: float | None = None
    concurrency: int | None = None
    num_prompts: int | None = None
    expert_parallel: bool = False
    settings: str = ""  # the commands as the source states them
    figures: dict[str, float] = field(default_factory=dict)


def load_runs(path: Path = RUNS) -> list[Run]:
    """The published runs of the data file, their figures gathered in `figures`."""
    data = tomllib.loads(path.read_text())
    keep = {f for f in Run.__dataclass_fields__} - {"figures"}
    runs = []
    for raw in data["run"]:
        figures = {k: float(raw[k]) for k in FIGURE_KEYS if k in raw}
        runs.append(Run(**{k: v for k, v in raw.items() if k in keep}, figures=figures))
    return runs


def frozen_on(path: Path = RUNS) -> str:
    """The date the check split was last frozen (the data file's check_frozen_on)."""
    return str(tomllib.loads(path.read_text())["check_frozen_on"])


# What a check run is compared on: its load and layout and every published figure. A change to any
# of them changes the fingerprint the freeze test holds (tests/serving/test_serving_published.py).
FROZEN_FIELDS = ("id", "source_id", "engine", "engine_version", "model", "device", "gpus", "tp",
                 "expert_parallel", "weights_dtype", "kv_dtype", "rate_rps", "concurrency",
                 "dataset", "prompt_mean", "prompt_spread", "output_mean", "output_spread",
                 "num_prompts", "figures")


def check_fingerprint(runs: list[Run]) -> str:
    """SHA-256 of the check split: each check run's load, layout and figures, by id."""
    rows = []
    for run in sorted((r for r in runs if r.split == "check"), key=lambda r: r.id):
        row = {k: getattr(run, k) for k in FROZEN_FIELDS}
        row["rate_rps"] = repr(run.rate_rps)  # inf is not JSON
        rows.append(row)
    text = json.dumps(rows, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def kind_of(key: str) -> str:
    """The figure kind a figure key belongs to: ttft, tpot (TPOT or ITL), throughput, other."""
    if key.startswith("ttft_"):
        return "ttft"
    if key.startswith(("tpot_", "itl_")):
        return "tpot"
    if key == "output_tokens_per_s":
        return key
    return "other"


def is_tail(key: str) -> bool:
    """p99 figures: reported apart from the kind's summary (a tail is a handful of requests)."""
    return key.endswith("_p99_s")


# Engine flags a source's stated command sets that change how its scheduler runs, as the
# --engine-option each stands for: vLLM V0's multi-step scheduling (--num-scheduler-steps N).
STATED_FLAGS = {"--num-scheduler-steps": "scheduler_steps"}


def stated_options(settings: str) -> tuple[str, ...]:
    """The --engine-option pairs the run's own command line sets (STATED_FLAGS)."""
    words = settings.replace("=", " ").split()
    return tuple(f"{STATED_FLAGS[w]}={words[i + 1]}" for i, w in enumerate(words[:-1])
                 if w in STATED_FLAGS and words[i + 1].isdigit())


def build(run: Run) -> tuple[Workload, Device, ModelOptions]:
    """The workload on its engine's defaults, the device and the options the source ran."""
    device = profiles.device_from_profile(run.device)
    request = WorkloadRequest(
        model=run.model, phase="inference", batch=1, prompt_len=max(1, round(run.prompt_mean)),
        gen_len=max(1, round(run.output_mean)), weights_dtype=run.weights_dtype,
        kv_dtype=run.kv_dtype or None, gpus=run.gpus, engine=run.engine)
    workload = build_workload(request, Sizing(device.memory_total_bytes, device.device_class))
    if run.engine_version:  # the engine as that release ran it: its [[history]] defaults
        workload = workload.model_copy(update={"engine_version": run.engine_version})
    stated = parse_options(stated_options(run.settings))
    if stated:  # the engine flags the source's command sets
        workload = workload.model_copy(update={"engine_options": stated})
    given: dict[str, Any] = {}
    if run.tp > 1:
        given.update(sharding="tp", tp_size=run.tp)
    if run.expert_parallel:
        given["expert_parallel"] = True
    workload, options = on_engine_defaults(workload, device, ModelOptions(**given))
    return workload, device, options


def load_of(run: Run) -> Load:
    """The run's load: its rate or concurrency, lengths and request count."""
    prompt = Lengths(mean=run.prompt_mean, spread=run.prompt_spread)
    output = Lengths(mean=run.output_mean, spread=run.output_spread)
    users = run.concurrency
    requests = run.num_prompts or max(DEFAULT_REQUESTS, 4 * (users or 0))
    rate = run.rate_rps
    if rate is not None and math.isinf(rate):
        # every request sent at once: a closed loop with one user per request starts them all at 0
        rate, users = None, requests
    return Load(rate_rps=rate, concurrency=users if rate is None else None, prompt=prompt,
                output=output, requests=requests, dataset=run.dataset or None,
                source=f"published run {run.id}")


@dataclass
class Row:
    """One run's comparison: its figures, the predicted ones and the static-batch baseline."""

    run: Run
    predicted: dict[str, float] = field(default_factory=dict)
    baseline: dict[str, float] = field(default_factory=dict)
    errors: dict[str, float] = field(default_factory=dict)
    baseline_errors: dict[str, float] = field(default_factory=dict)
    baseline_batch: int = 0
    saturated: bool = False
    seconds: float = 0.0
    skipped: str = ""


def _baseline(run: Run, workload: Workload, device: Device, options: ModelOptions,
              batch: int) -> dict[str, float]:
    """The static-batch estimate's figures at `batch`, keyed as the published figures are."""
    est = estimate(workload.model_copy(update={"batch": batch}), device, options)
    t = est.times
    out: dict[str, float] = {}
    for key in run.figures:
        kind = kind_of(key)
        value = (t.ttft_s if kind == "ttft" else t.tpot_s if kind == "tpot"
                 else est.tokens_per_s if kind == "output_tokens_per_s" else None)
        if value:
            out[key] = float(value)
    return out


def evaluate(runs: list[Run]) -> list[Row]:
    """Predict every run; a run that cannot be built keeps the reason."""
    rows = []
    for run in runs:
        row = Row(run)
        started = time.perf_counter()
        try:
            workload, device, options = build(run)
            load = load_of(run)
            prediction = predict(workload, device, load, options)
        except Exception as exc:  # a benchmark reports what it could not run, and goes on
            row.skipped = f"{type(exc).__name__}: {exc}"
            rows.append(row)
            continue
        figs = prediction.figures
        row.saturated = figs.saturated
        for key, published in run.figures.items():
            value = float(getattr(figs, key))
            row.predicted[key] = value
            row.errors[key] = value / published - 1.0
        in_flight = (run.concurrency if run.concurrency else load.concurrency
                     if load.concurrency else (run.rate_rps or 0.0) * figs.request_latency_mean_s)
        row.baseline_batch = max(1, round(in_flight or 1))
        row.baseline = _baseline(run, workload, device, options, row.baseline_batch)
        row.baseline_errors = {k: v / run.figures[k] - 1.0 for k, v in row.baseline.items()}
        row.seconds = time.perf_counter() - started
        rows.append(row)
    return rows


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    return statistics.quantiles(ordered, n=100, method="inclusive")[round(q * 100) - 1]


@dataclass
class Summary:
    """|error| of one figure kind over one split: the model's and the static baseline's."""

    split: str
    kind: str
    figures: int
    median: float
    p90: float
    baseline_median: float | None
    baseline_p90: float | None
    target: float | None

    def met(self) -> bool | None:
        """Whether the median is within the target (None where the kind has none)."""
        return None if self.target is None else self.median <= self.target


def summarise(rows: list[Row], split: str, tails: bool = False) -> list[Summary]:
    """Per figure kind, the median and p90 of |error| (p99 figures only when `tails`)."""
    out = []
    for kind in KINDS:
        errs, base = [], []
        for row in rows:
            for key, err in row.errors.items():
                if kind_of(key) == kind and is_tail(key) == tails:
                    errs.append(abs(err))
                    if key in row.baseline_errors:
                        base.append(abs(row.baseline_errors[key]))
        if not errs:
            continue
        out.append(Summary(split, kind, len(errs), statistics.median(errs), _quantile(errs, 0.9),
                           statistics.median(base) if base else None,
                           _quantile(base, 0.9) if base else None,
                           None if tails else TARGETS.get(kind)))
    return out


def _pct(value: float | None) -> str:
    return "   -  " if value is None else f"{value:6.1%}"


def run_table(rows: list[Row]) -> list[str]:
    """The per-run table: each figure, published, predicted, error, and the static baseline."""
    lines = [f"{'run / figure':62s} {'split':5s} {'published':>10s} {'predicted':>10s} "
             f"{'error':>7s} {'static':>10s} {'error':>7s}"]
    for row in rows:
        if row.skipped:
            lines.append(f"{row.run.id:62s} {row.run.split:5s} skipped: {row.skipped}")
            continue
        flag = " (saturated)" if row.saturated else ""
        lines.append(f"{row.run.id}{flag}  [static batch {row.baseline_batch}, "
                     f"{row.seconds:.2f} s]")
        for key, published in row.run.figures.items():
            base = row.baseline.get(key)
            base_err = row.baseline_errors.get(key)
            lines.append(
                f"  {key:60s} {row.run.split:5s} {published:10.4g} {row.predicted[key]:10.4g} "
                f"{row.errors[key]:+7.0%} {'' if base is None else f'{base:10.4g}':>10s} "
                f"{'' if base_err is None else f'{base_err:+7.0%}':>7s}")
    return lines


def summary_lines(rows: list[Row], splits: list[str]) -> tuple[list[str], list[Summary]]:
    """The summary table per split and kind; the summaries themselves."""
    lines = [f"{'split':6s} {'figure kind':32s} {'n':>4s} {'median':>7s} {'p90':>7s}  "
             f"{'static med':>10s} {'static p90':>10s}  target"]
    every: list[Summary] = []
    for split in splits:
        subset = [r for r in rows if split == "all" or r.run.split == split]
        for tails in (False, True):
            for s in summarise(subset, split, tails):
                every.append(s)
                name = KIND_NAMES[s.kind] + (" p99" if tails else "")
                verdict = "" if s.target is None else (
                    f"{s.target:.0%} {'met' if s.met() else 'MISSED'}")
                lines.append(f"{split:6s} {name:32s} {s.figures:4d} {_pct(s.median)} "
                             f"{_pct(s.p90)}  {_pct(s.baseline_median):>10s} "
                             f"{_pct(s.baseline_p90):>10s}  {verdict}")
    return lines, every


def worst(rows: list[Row], count: int = 8) -> list[str]:
    """The largest misses (mean and median figures), with the run's settings to read them by."""
    misses = [(abs(e), r, k) for r in rows for k, e in r.errors.items() if not is_tail(k)]
    misses.sort(key=lambda m: m[0], reverse=True)
    return [f"{r.run.id} {k}: published {r.run.figures[k]:.4g}, predicted "
            f"{r.predicted[k]:.4g} ({r.errors[k]:+.0%})" for _, r, k in misses[:count]]


def to_json(rows: list[Row], summaries: list[Summary]) -> dict[str, Any]:
    """The comparison as data: every run's figures and errors, and the summaries."""
    return {
        "frozen_on": frozen_on(),
        "summaries": [asdict(s) for s in summaries],
        "runs": [{"id": r.run.id, "split": r.run.split, "source": r.run.source,
                  "skipped": r.skipped or None, "saturated": r.saturated,
                  "published": r.run.figures, "predicted": r.predicted, "errors": r.errors,
                  "static_batch": r.baseline_batch, "static": r.baseline,
                  "static_errors": r.baseline_errors} for r in rows],
    }


def main(argv: list[str] | None = None) -> int:
    """Print the comparison; exit 1 when a check-split target is missed."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--split", choices=("check", "tune", "all"), default="all",
                        help="only this split's runs (all: both, summarised apart)")
    parser.add_argument("--json", type=Path, help="also write the comparison to this JSON file")
    parser.add_argument("--runs", action="store_true", help="print the per-run table")
    args = parser.parse_args(argv)
    runs = load_runs()
    if args.split != "all":
        runs = [r for r in runs if r.split == args.split]
    started = time.perf_counter()
    rows = evaluate(runs)
    elapsed = time.perf_counter() - started
    splits = ["tune", "check", "all"] if args.split == "all" else [args.split]
    if args.runs:
        print("\n".join(run_table(rows)))
        print()
    lines, summaries = summary_lines(rows, splits)
    print("\n".join(lines))
    print()
    print("largest misses:")
    print("\n".join("  " + line for line in worst(rows)))
    skipped = [r for r in rows if r.skipped]
    print(f"\n{len(rows) - len(skipped)} runs predicted in {elapsed:.1f} s"
          + (f"; skipped {len(skipped)}: " + "; ".join(f"{r.run.id} ({r.skipped})"
                                                      for r in skipped) if skipped else ""))
    if args.json:
        write_text(args.json, json.dumps(to_json(rows, summaries), indent=2) + "\n")
    missed = [s for s in summaries if s.split == "check" and s.met() is False]
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
