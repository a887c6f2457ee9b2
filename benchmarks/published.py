"""The model's predictions against published measurements (and this project's own H200 runs).

Figures: benchmarks/published_figures.toml (214 public figures; fields at its top; `split`
tune / check, about half held out) plus the end-to-end runs of whole models in plain PyTorch on
an H200 (benchmarks/data/h200_e2e_2026-12-01.json, from benchmarks/e2e_torch.py). For each
figure the workload is built as the source ran it (preset, engine, weights, batch, lengths,
GPUs and parallel layout, the engine's defaults from hwadvisor/engines/data/), `estimate` runs,
and the predicted rate is compared with the published one:
decode: batch / time per output token (or batch x output tokens / request latency where the
source timed whole requests), prefill: prompt tokens / time to first token, training:
tokens / s / GPU. Then the validator's H200 trials are compared with the model's prediction
for the trials' own shapes (benchmarks/trials_vs_model.py).

Constants of perfmodel/constants.py marked "fit to the tune split" were fitted on the tune
figures only; the check figures are held out and reported apart. Each fitted constant names its
tune figures in hwadvisor/perfmodel/fits.toml (tests/perfmodel/test_held_out.py checks that none
of them is a check figure).

The check split is frozen (benchmarks/published_check.json): its date, a digest of every check
figure, and the check split's median and 90th-percentile |error| per class (datacenter,
consumer-gpu, apple, phone, training, cpu) as recorded. A test fails when a check figure changes,
appears or goes without a new freeze (`--freeze DATE`, a later date, on purpose), and when a
class's check median or p90 rises above the recorded value; `--record` lowers the recorded values
where the model improved and never raises them.

Targets: median |error| <= 15% and worst <= 35% on the tune split, on the check split and over
all; every training figure within 20% (reported per split); every trial within +-25%. Exit 1
when a target is missed.

Run: python benchmarks/published.py [--markdown] [--split tune|check] [--by-class]
     [--freeze YYYY-MM-DD | --record]
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import math
import re
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomllib

from hwadvisor import profiles
from hwadvisor.engines import baseline_options
from hwadvisor.errors import UserError
from hwadvisor.models import Device, Estimate, ModelOptions, NvidiaDetails, Workload
from hwadvisor.perfmodel import estimate
from hwadvisor.perfmodel.memory import reserved_peak_range
from hwadvisor.workload import Sizing, WorkloadRequest, build_workload, list_presets

HERE = Path(__file__).resolve().parent
GIB = 2**30
FIGURES = HERE / "published_figures.toml"
E2E = HERE / "data" / "h200_e2e_2026-12-01.json"
CHECK_LOCK = HERE / "published_check.json"
# The classes the check split is reported by (issue 42); training is its own class whatever the
# device, the others follow the device's profile class.
CLASSES = ("datacenter", "consumer-gpu", "apple", "phone", "training", "cpu")
_CLASS_OF_DEVICE = {"datacenter-gpu": "datacenter", "consumer-gpu": "consumer-gpu",
                    "apple-silicon": "apple", "mobile-soc": "phone", "cpu": "cpu"}
# Slack on the recorded medians and p90s: float noise across platforms, not a tolerance.
RECORD_SLACK = 1e-6
MEDIAN_TARGET = 0.15
WORST_TARGET = 0.35
# Training figures (tokens/s/GPU, 1 to 512 GPUs): every one within 20%, per split.
TRAINING_TARGET = 0.20

# Training frameworks that overlap their collectives with compute: NeMo / Megatron-Bridge
# recipes set overlap_grad_reduce and overlap_param_gather (and TP comm overlap); torchtitan
# overlaps TP only with AsyncTP (its FSDP2 prefetch is the model's implicit FSDP overlap).
OVERLAPPING = ("megatron",)


@dataclass
class Figure:
    """One published (or own) figure and how to rebuild its run."""

    id: str
    device: str
    model: str
    engine: str
    phase: str
    weights_dtype: str
    kv_dtype: str
    batch: int
    prompt_len: int
    gen_len: int
    gpus: int
    nodes: int
    parallel: str
    activation_checkpointing: bool
    value: float
    split: str
    metric: str = ""
    settings: str = ""
    notes: str = ""
    engine_version: str = ""
    device_variant: str = ""
    source: str = ""
    options: dict[str, Any] = field(default_factory=dict)  # own runs: ModelOptions overrides
    per_request: bool | None = None  # decode rate over whole requests (prefill included)
    engine_options: dict[str, str] = field(default_factory=dict)  # --engine-option KEY=VALUE
    memory_gib: float | None = None  # training: the published peak memory per GPU
    memory_measure: str = ""  # what that peak is ("max_memory_reserved")


def load_figures(path: Path = FIGURES) -> list[Figure]:
    """The published figures of the TOML file."""
    data = tomllib.loads(path.read_text())
    keep = {f for f in Figure.__dataclass_fields__}
    return [Figure(**{k: v for k, v in raw.items() if k in keep}) for raw in data["figure"]]


def e2e_figures(path: Path = E2E) -> list[Figure]:
    """The H200 end-to-end runs in plain PyTorch + transformers, as figures (engine hf).

    tune: the ones the hf constants were fitted on (eager decode at batch 1 for the host cost,
    the graphed decode steps for the kernel floor and the KV passes, prefill at batch 1 and the
    foreach training step); check: the rest, held out.
    """
    run = json.loads(path.read_text())
    llama, train = run["llama_3_8b"], run["llama_3_2_1b_training"]
    prompt = int(llama["prompt_len"])
    src = "benchmarks/data/h200_e2e_2026-12-01.json (benchmarks/e2e_torch.py)"

    def fig(fid: str, split: str, phase: str, batch: int, value: float, **kw: Any) -> Figure:
        base: dict[str, Any] = dict(
            id=f"e2e-h200-{fid}", device="h200-sxm", model="llama-3-8b", engine="hf",
            phase=phase, weights_dtype="bf16", kv_dtype="bf16", batch=batch,
            prompt_len=prompt, gen_len=0, gpus=1, nodes=1, parallel="",
            activation_checkpointing=False, value=value, split=split, source=src)
        base.update(kw)
        return Figure(**base)

    def rate(key: str, batch: int) -> float:
        return batch / float(llama[key]["median_s"])

    out = [
        fig("llama3-8b-prefill-b1", "tune", "prefill", 1,
            prompt / float(llama["prefill_b1"]["median_s"]), metric="plain forward, all logits",
            options={"logits_all_positions": True}),
        fig("llama3-8b-prefill-b16", "check", "prefill", 16,
            16 * prompt / float(llama["prefill_b16"]["median_s"]),
            metric="plain forward, all logits", options={"logits_all_positions": True}),
        fig("llama3-8b-decode-eager-b1", "tune", "decode", 1, rate("decode_eager_b1", 1),
            gen_len=1, metric="eager decode step, DynamicCache, context 2048"),
        fig("llama3-8b-decode-eager-b16", "check", "decode", 16, rate("decode_eager_b16", 16),
            gen_len=1, metric="eager decode step, DynamicCache, context 2048"),
        fig("llama3-8b-decode-graph-b1", "tune", "decode", 1, rate("decode_graph_b1", 1),
            gen_len=1, metric="CUDA-graphed decode step, StaticCache",
            options={"cuda_graphs": True}),
        fig("llama3-8b-decode-graph-b16", "tune", "decode", 16, rate("decode_graph_b16", 16),
            gen_len=1, metric="CUDA-graphed decode step, StaticCache",
            options={"cuda_graphs": True}),
        fig("llama3-8b-generate-b1", "check", "decode", 1,
            float(llama["generate_b1"]["tokens_per_s"]), gen_len=int(
                llama["generate_b1"]["new_tokens"]), metric="generate() tokens/s (prefill in)",
            per_request=True),
    ]
    tb, seq = int(train["batch"]), int(train["seq_len"])
    for key, split, opts, ckpt in (("eager", "tune", {"fused_optimizer": False}, False),
                                   ("fused_adamw", "check", {"fused_optimizer": True}, False),
                                   ("checkpointing", "check", {"fused_optimizer": True}, True)):
        out.append(fig(f"llama3.2-1b-train-{key}", split, "training", tb,
                       float(train[key]["tokens_per_s"]), model="llama-3.2-1b", prompt_len=seq,
                       activation_checkpointing=ckpt, options=opts,
                       metric="tokens/s, fp32 weights + bf16 autocast, AdamW"))
    return out


class Skip(Exception):
    """A figure this benchmark cannot rebuild (no profile or preset)."""


def _device(fig: Figure) -> Device:
    """The figure's profile (its GPU-core variant); a stated power cap as nvidia-smi shows it."""
    cores = re.match(r"(\d+)-core GPU", fig.device_variant or "")
    ids = profiles.ids() + profiles.variant_ids()
    candidates = [f"{fig.device}-{cores.group(1)}c"] if cores else []
    for pid in [*candidates, fig.device]:
        if pid in ids:
            device = profiles.device_from_profile(pid)
            cap = re.search(r"(\d+) W power limit", fig.device_variant or "")
            if cap:
                device = device.model_copy(update={"nvidia": NvidiaDetails(
                    power_limit_w=float(cap.group(1)))})
            return device
    raise Skip(f"no profile {fig.device}")


def _degrees(parallel: str) -> dict[str, int]:
    found: dict[str, int] = {}
    for name, value in re.findall(r"(Megatron-FSDP|FSDP|DP|TP|PP|CP|VP)\s*(\d+)", parallel):
        found["FSDP" if name == "Megatron-FSDP" else name] = int(value)
    return found


def _grad_accum(fig: Figure, dp: int) -> int:
    text = fig.settings
    pp = _degrees(fig.parallel).get("PP", 1)
    if fig.engine == "torchtitan" and pp > 1:
        # torchtitan at 9dec370 (Dec 2024): experimental.pipeline_parallel_microbatches = None,
        # "defaults to the number of pipeline stages": the local batch in pp micro-batches.
        return pp
    ga = re.search(r"\bGA (\d+)", text)
    if ga:
        return int(ga.group(1))
    gbs = re.search(r"\bGBS (\d+)", text) or re.search(r"global batch (\d+)", text)
    if gbs:
        return max(1, int(gbs.group(1)) // max(1, fig.batch * dp))
    return 1


def build(fig: Figure) -> tuple[Workload, Device, ModelOptions]:
    """The workload, device and options of a figure's run."""
    if fig.model not in list_presets():
        raise Skip(f"no preset {fig.model}")
    device = _device(fig)
    deg = _degrees(fig.parallel)
    tp, pp, cp = deg.get("TP", 1), deg.get("PP", 1), deg.get("CP", 1)
    training = fig.phase == "training"
    batch = fig.batch
    if training and fig.engine == "torchtitan" and pp > 1:
        # the local batch (per data-parallel rank) runs as pp micro-batches (_grad_accum)
        batch = max(1, round(fig.batch / pp))
    # hwadvisor's training batch is per data-parallel rank, as the sources' local batch is: a
    # tensor-parallel group shares its sequences.
    dp = max(1, fig.gpus // (tp * pp * cp))
    per_node = max(1, fig.gpus // max(1, fig.nodes))
    try:
        request = WorkloadRequest(
            model=fig.model, phase="training" if training else "inference", batch=batch,
            prompt_len=max(1, fig.prompt_len), gen_len=fig.gen_len if fig.phase == "decode"
            else 0, weights_dtype=fig.weights_dtype, kv_dtype=fig.kv_dtype or None,
            gpus=fig.gpus, nodes=fig.nodes, gpus_per_node=per_node,
            grad_accum=_grad_accum(fig, dp) if training else None,
            activation_checkpointing=fig.activation_checkpointing, engine=fig.engine)
        workload = build_workload(request, Sizing(device.memory_total_bytes, device.device_class))
    except UserError as exc:
        raise Skip(str(exc)) from None
    release = _engine_release(fig)
    if release:  # the engine as that release ran it: its [[history]] defaults and kernel rates
        workload = workload.model_copy(update={"engine_version": release})
    options = dict(fig.engine_options)  # e.g. compute_unit = gpu: llama.cpp's OpenCL on a phone
    if fig.engine == "llamacpp":
        # llama.cpp's figures are its benchmarks' (llama-bench, llama.rn's bench): no server slots
        options.setdefault("server", "false")
    if options:
        workload = workload.model_copy(update={"engine_options": options})
    opts = baseline_options(workload, device).model_dump()
    opts.update(_layout_options(fig, deg, training))
    opts.update(_run_options(fig, training))
    opts.update(fig.options)
    return workload, device, ModelOptions.model_validate(opts)


def _layout_options(fig: Figure, deg: dict[str, int], training: bool) -> dict[str, Any]:
    tp, pp, cp = deg.get("TP", 1), deg.get("PP", 1), deg.get("CP", 1)
    out: dict[str, Any] = {}
    if fig.gpus <= 1:
        return out
    if "layer split" in fig.parallel:  # llama.cpp -sm layer: stages one after the other
        return {"sharding": "tp", "tp_size": 1, "pipeline_stages": fig.gpus}
    if "FSDP" in deg:
        out["sharding"] = "fsdp"
        if tp > 1:
            out["tp_size"] = tp
    elif tp > 1:
        out.update(sharding="tp", tp_size=tp)
    elif training:
        out["sharding"] = "ddp"
    else:
        out.update(sharding="tp", tp_size=fig.gpus)
    if pp > 1:
        out["pipeline_stages"] = pp
    if deg.get("VP", 1) > 1:
        out["virtual_pipeline_stages"] = deg["VP"]
    if cp > 1:
        out["context_parallel"] = cp
    return out


def _engine_release(fig: Figure) -> str | None:
    """The release a figure ran, as the engine's [[history]] reads it; None when not stated.

    llama.cpp's build ('b2843' from '4426e298 (2843)' or 'b2843'); another engine's numbered
    release ('0.4.1' from '0.4.1.post2', '0.10.2' from '0.10.2 (ROCm 7.0.0 docker ...)').
    """
    if fig.engine == "llamacpp":
        build = (re.search(r"\((\d{4,5})\)", fig.engine_version)
                 or re.fullmatch(r"b(\d{4,5})", fig.engine_version.strip()))
        return f"b{build.group(1)}" if build else None
    release = re.match(r"v?(\d+\.\d+\.\d+)", fig.engine_version.strip())
    return release.group(1) if release else None


def _run_options(fig: Figure, training: bool) -> dict[str, Any]:
    """What the source's settings say beyond the engine's defaults."""
    text = f"{fig.settings} {fig.notes}".lower()
    out: dict[str, Any] = {}
    if training:
        out["compiled"] = "torch.compile" in text and "eager" not in fig.settings.lower()
        if fig.engine in OVERLAPPING or "asynctp" in fig.settings.lower().replace(" ", ""):
            out["comm_overlap"] = True
        if fig.activation_checkpointing and "selective" in text:
            out["selective_checkpointing"] = True
    if fig.engine == "llamacpp" and ("flash attention off" in text or "did not exist" in text):
        out["attention_kernel"] = "math"  # no FA: llama.cpp materialises KQ and softmax
    if fig.engine == "torchtitan" and _degrees(fig.parallel).get("PP", 1) > 1:
        # torchtitan's interleaved 1F1B runs two stages per rank (its 405B recipe).
        out["virtual_pipeline_stages"] = 2 if "interleaved" in fig.parallel.lower() else 1
    return out


def per_request(fig: Figure) -> bool:
    """Whether the published decode rate includes the prefill (whole requests timed)."""
    if fig.per_request is not None:
        return fig.per_request
    text = f"{fig.metric} {fig.notes}".lower()
    return fig.phase == "decode" and ("latency" in text or "include the" in text
                                      or "peak throughput" in text)


def predicted_rate(fig: Figure, est: Estimate) -> float:
    """The figure's metric from an estimate."""
    t = est.times
    if fig.phase == "training":
        return (est.tokens_per_s or 0.0) / fig.gpus
    if fig.phase == "prefill":
        return fig.batch * fig.prompt_len / (t.ttft_s or t.prefill_s or 1.0)
    if per_request(fig):
        return fig.batch * fig.gen_len / (t.request_latency_s or 1.0)
    return est.tokens_per_s or 0.0


@dataclass
class Row:
    """One figure's comparison."""

    fig: Figure
    predicted: float | None
    error: float | None
    bottleneck: str = ""
    skipped: str = ""
    tensors_bytes: float | None = None  # training: the predicted allocated peak
    full_checkpointing: bool = False  # training: whole layers recomputed (not selective)
    sharded: bool = False  # training: FSDP or TP shards the model (the sharded reserved range)


def evaluate(figures: list[Figure]) -> list[Row]:
    """Predict every figure; skipped ones keep the reason."""
    rows = []
    for fig in figures:
        try:
            workload, device, options = build(fig)
        except Skip as why:
            rows.append(Row(fig, None, None, skipped=str(why)))
            continue
        est = estimate(workload, device, options)
        value = predicted_rate(fig, est)
        tensors = est.memory.total_bytes - est.memory.runtime_bytes
        full = workload.activation_checkpointing and not options.selective_checkpointing
        sharded = options.sharding in ("fsdp", "hsdp") or (options.tp_size or 1) > 1
        rows.append(Row(fig, value, value / fig.value - 1.0, est.bottleneck,
                        tensors_bytes=float(tensors), full_checkpointing=full, sharded=sharded))
    return rows


def summary(rows: list[Row]) -> tuple[float, float, str] | None:
    """(median |error|, worst |error|, worst id) over rows that ran."""
    errors = [(abs(r.error), r.fig.id) for r in rows if r.error is not None]
    if not errors:
        return None
    worst = max(errors)
    return statistics.median(e for e, _ in errors), worst[0], worst[1]


def _table(rows: list[Row], markdown: bool) -> list[str]:
    lines = []
    if markdown:
        lines += ["| figure | split | published | predicted | error | bottleneck |",
                  "|---|---|---|---|---|---|"]
    for r in rows:
        if r.error is None:
            continue
        unit = "tok/s/GPU" if r.fig.phase == "training" else "tok/s"
        if markdown:
            lines.append(f"| {r.fig.id} | {r.fig.split} | {r.fig.value:,.4g} {unit} | "
                         f"{r.predicted:,.4g} | {r.error:+.0%} | {r.bottleneck} |")
        else:
            lines.append(f"{r.fig.id:58s} {r.fig.split:5s} {r.fig.value:10.4g} "
                         f"{r.predicted:10.4g} {r.error:+7.1%}  {r.bottleneck}")
    return lines


def _training_lines(rows: list[Row]) -> list[str]:
    """Training figures apart, per split: every one must lie within TRAINING_TARGET."""
    lines = []
    for name in ("tune", "check"):
        subset = [r for r in rows if r.fig.phase == "training" and r.fig.split == name
                  and r.error is not None]
        if not subset:
            continue
        errors = [abs(r.error) for r in subset if r.error is not None]
        worst = max(subset, key=lambda r: abs(r.error or 0.0))
        over = [r.fig.id for r in subset if abs(r.error or 0.0) > TRAINING_TARGET]
        lines.append(f"training {name}: {len(subset)} figures, median |error| "
                     f"{statistics.median(errors):.1%}, worst {max(errors):.1%} "
                     f"({worst.fig.id}; every one within {TRAINING_TARGET:.0%}) "
                     + ("ok" if not over else "MISSED: " + ", ".join(over)))
    return lines


def _memory_lines(rows: list[Row]) -> list[str]:
    """Published training peaks against the model's, the same measure on both sides.

    torchtitan's "memory" is the allocator's reserved peak: it is compared with the
    predicted tensors' (allocated) peak and the range the reserved peak lies in above it
    (perfmodel/memory.py reserved_peak_range, measured on this project's H200 runs: single-GPU
    runs, or torchtitan's own sharded ranks where the run shards). No
    target: the range is not fitted on these figures, and what it leaves is reported.
    """
    lines = []
    for r in rows:
        fig = r.fig
        if fig.memory_gib is None or r.tensors_bytes is None:
            continue
        if fig.memory_measure != "max_memory_reserved":
            continue
        # selective checkpointing keeps most activations: the range without full checkpointing
        low, high = reserved_peak_range(r.tensors_bytes, r.full_checkpointing, r.sharded)
        pub = fig.memory_gib * GIB
        where = "in range" if low <= pub <= high else (
            f"{pub / high - 1:+.0%} above" if pub > high else f"{pub / low - 1:+.0%} below")
        lines.append(f"memory {fig.id:55s} published {fig.memory_gib:6.2f} GiB reserved; "
                     f"predicted allocated {r.tensors_bytes / GIB:5.1f}, reserved "
                     f"{low / GIB:5.1f}-{high / GIB:5.1f} GiB: published {where}")
    return lines


def report(rows: list[Row], markdown: bool = False) -> tuple[list[str], bool]:
    """The printed table and verdicts; True when every target is met."""
    lines = _table(rows, markdown)
    ok = True
    lines.append("")
    lines.append("Constants marked 'fit to the tune split' in hwadvisor/perfmodel/constants.py "
                 "were fitted on the tune figures only; check figures are held out.")
    for name, subset in (("tune", [r for r in rows if r.fig.split == "tune"]),
                         ("check", [r for r in rows if r.fig.split == "check"]),
                         ("all", rows)):
        got = summary(subset)
        if got is None:
            continue
        median, worst, worst_id = got
        hit = median <= MEDIAN_TARGET and worst <= WORST_TARGET
        ok &= hit
        n = sum(1 for r in subset if r.error is not None)
        lines.append(f"{name:5s}: {n} figures, median |error| {median:.1%} (target "
                     f"{MEDIAN_TARGET:.0%}), worst {worst:.1%} ({worst_id}; target "
                     f"{WORST_TARGET:.0%}) {'ok' if hit else 'MISSED'}")
    lines += _training_lines(rows)
    lines += _memory_lines(rows)
    ok &= all(abs(r.error) <= TRAINING_TARGET for r in rows
              if r.error is not None and r.fig.phase == "training")
    skipped = [r for r in rows if r.skipped]
    if skipped:
        lines.append(f"skipped {len(skipped)}: " + "; ".join(
            f"{r.fig.id} ({r.skipped})" for r in skipped))
    return lines, ok


# --- The held-out discipline: a frozen check split, per-class records ----------------------

def figure_class(fig: Figure) -> str:
    """The class a figure is reported in: training, or its device's class."""
    if fig.phase == "training":
        return "training"
    try:
        device_class = _device(fig).device_class
    except Skip:
        # no profile yet: the data file's own words for the device
        return "cpu" if fig.device.startswith("core-") else "apple" if fig.device.startswith(
            "m") else "consumer-gpu"
    return _CLASS_OF_DEVICE[str(getattr(device_class, "value", device_class))]


def figure_digest(fig: Figure) -> str:
    """A digest of what defines a figure's run and value (every field but the notes)."""
    fields = dataclasses.asdict(fig)
    fields.pop("notes")
    text = json.dumps(fields, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def p90(values: list[float]) -> float:
    """The 90th percentile by nearest rank (the value at or below which 90% of them lie)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.9 * len(ordered)) - 1)]


def class_stats(rows: list[Row], split: str) -> dict[str, dict[str, float]]:
    """Per class of a split: figures, median and p90 of |error| (rows that ran)."""
    out: dict[str, dict[str, float]] = {}
    for name in CLASSES:
        errors = [abs(r.error) for r in rows if r.error is not None and r.fig.split == split
                  and figure_class(r.fig) == name]
        if errors:
            out[name] = {"n": len(errors), "median": round(statistics.median(errors), 4),
                         "p90": round(p90(errors), 4)}
    return out


def load_lock(path: Path = CHECK_LOCK) -> dict[str, Any]:
    """The frozen check split: its date, each check figure's digest, the recorded stats."""
    return dict(json.loads(path.read_text()))


def check_digests(figures: list[Figure]) -> dict[str, str]:
    """Each check figure's digest, by id."""
    return {f.id: figure_digest(f) for f in figures if f.split == "check"}


def frozen_drift(figures: list[Figure], lock: dict[str, Any]) -> list[str]:
    """How the check split differs from the frozen one (empty when it does not)."""
    now, then = check_digests(figures), dict(lock["figures"])
    lines = [f"added to check: {i}" for i in sorted(set(now) - set(then))]
    lines += [f"gone from check: {i}" for i in sorted(set(then) - set(now))]
    lines += [f"changed: {i}" for i in sorted(set(now) & set(then)) if now[i] != then[i]]
    return lines


def worse_than_recorded(rows: list[Row], lock: dict[str, Any]) -> list[str]:
    """Classes whose check median or p90 rose above the recorded value."""
    recorded = lock["recorded"]["check"]
    lines = []
    for name, got in class_stats(rows, "check").items():
        for key in ("median", "p90"):
            was = recorded.get(name, {}).get(key)
            if was is None or got[key] > was + RECORD_SLACK:
                lines.append(f"check {name} {key} {got[key]:.1%} > recorded "
                             + ("(none)" if was is None else f"{was:.1%}"))
    return lines


def freeze(rows: list[Row], figures: list[Figure], date: str,
           lock: dict[str, Any] | None) -> dict[str, Any]:
    """A new frozen check split at `date`, later than the one it replaces."""
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", date):
        raise ValueError(f"--freeze takes YYYY-MM-DD, not {date!r}")
    if lock is not None and date <= str(lock["frozen"]):
        raise ValueError(f"--freeze {date} is not later than the frozen {lock['frozen']}: a new "
                         "check split needs a new date")
    return {"frozen": date, "figures": check_digests(figures),
            "recorded": {"check": class_stats(rows, "check"), "tune": class_stats(rows, "tune")}}


def record(rows: list[Row], lock: dict[str, Any]) -> dict[str, Any]:
    """The lock with its recorded check stats lowered where the model improved (never raised);
    the tune stats are written as they are (they are reported, not held)."""
    out = json.loads(json.dumps(lock))
    for name, got in class_stats(rows, "check").items():
        was = out["recorded"]["check"].setdefault(name, dict(got))
        for key in ("median", "p90"):
            was[key] = min(float(was[key]), got[key])
        was["n"] = got["n"]
    out["recorded"]["tune"] = class_stats(rows, "tune")
    return out


def class_lines(rows: list[Row], markdown: bool = False) -> list[str]:
    """Median and p90 |error| per class and split."""
    lines = (["| class | tune: n, median, p90 | check: n, median, p90 |", "|---|---|---|"]
             if markdown else [])
    tune, check = class_stats(rows, "tune"), class_stats(rows, "check")

    def cell(got: dict[str, float] | None) -> str:
        return "-" if got is None else f"{got['n']:.0f}, {got['median']:.1%}, {got['p90']:.1%}"

    for name in CLASSES:
        if name not in tune and name not in check:
            continue
        if markdown:
            lines.append(f"| {name} | {cell(tune.get(name))} | {cell(check.get(name))} |")
        else:
            lines.append(f"{name:13s} tune {cell(tune.get(name)):22s} "
                         f"check {cell(check.get(name))}")
    return lines


def _write_lock(lock: dict[str, Any]) -> None:
    from hwadvisor.report.io import write_text

    write_text(CHECK_LOCK, json.dumps(lock, indent=1, sort_keys=True) + "\n")


def main(argv: list[str] | None = None) -> int:
    """Print the comparison; exit 1 when a target is missed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", action="store_true", help="print markdown tables")
    parser.add_argument("--split", choices=("tune", "check"), help="only this split")
    parser.add_argument("--no-trials", action="store_true", help="skip the trial comparison")
    parser.add_argument("--by-class", action="store_true",
                        help="median and p90 |error| per class and split, and the frozen check")
    parser.add_argument("--freeze", metavar="YYYY-MM-DD",
                        help="freeze the check split as it is now, at this (later) date")
    parser.add_argument("--record", action="store_true",
                        help="lower the recorded check medians / p90s where the model improved")
    args = parser.parse_args(argv)
    figures = load_figures() + e2e_figures()
    if args.freeze or args.record:
        rows = evaluate(figures)
        lock = load_lock() if CHECK_LOCK.exists() else None
        if args.freeze:
            try:
                new = freeze(rows, figures, args.freeze, lock)
            except ValueError as exc:
                print(f"error: {exc}", file=sys.stderr)
                return 2
            _write_lock(new)
        elif lock is not None:
            _write_lock(record(rows, lock))
        print("\n".join(class_lines(rows)))
        return 0
    if args.by_class:
        rows = evaluate(figures)
        lock = load_lock()
        problems = frozen_drift(figures, lock) + worse_than_recorded(rows, lock)
        print("\n".join(class_lines(rows, args.markdown)))
        print(f"check split frozen {lock['frozen']}: "
              + ("unchanged, no class worse than recorded" if not problems
                 else "; ".join(problems)))
        return 0 if not problems else 1
    if args.split:
        figures = [f for f in figures if f.split == args.split]
    lines, ok = report(evaluate(figures), args.markdown)
    print("\n".join(lines))
    if not args.no_trials:
        sys.path.insert(0, str(HERE))
        from trials_vs_model import compare, render

        text, trials_ok = render(compare(), args.markdown)
        print()
        print(text)
        ok &= trials_ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
