"""The plan's engine in the loop: its own benchmark, run with the emitted config, against the model.

When the engine the plan chose is installed where hwadvisor runs, this builds the engine's own
benchmark command from the emitted config and the workload, runs it (an argument list, never a
shell, with a timeout), parses what it prints and returns an EngineValidation: measured TTFT,
TPOT and tokens/s next to the prediction, their ratios, and a verdict by a stated tolerance.

Benchmarks, by engine (their output formats as of the versions hwadvisor pins):
- llamacpp: `llama-bench -o json` at batch 1 (pp P and tg G tests: tokens/s with a stddev over
  the repetitions); `llama-batched-bench` at batch > 1 (its markdown table: T_PP, S_PP, T_TG,
  S_TG for -npp P -ntg G -npl B,B,B: the first run warms the batch's kernels up, the others
  are timed and averaged).
- vllm: `vllm bench latency --output-json` (avg_latency of one batch of B requests, P in, G out).
- sglang: `python -m sglang.benchmark.one_batch --result-filename` (JSON lines:
  prefill_latency, median_decode_latency, their throughputs).
- mlx: `mlx_lm.benchmark` ("prompt_tps=..., generation_tps=..." averages; the whole batch's
  rates when -b > 1).

The model must be a local file or folder (a GGUF file for llama.cpp): a preset name gives
`unsupported` with that reason, as does an engine not on PATH. No torch here.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from hwadvisor.models import EngineConfig, EngineFigures, EngineValidation, PlanValidation, Report

TOLERANCE = 0.15  # the ±15% the engine's figures must land within to confirm the model
# llama-batched-bench warms up on 16 tokens only, so its first run of a batch shape also loads
# that shape's kernels (prefill of 512 tokens timed 4-25x slow on the H200). The batch is run
# BATCHED_RUNS times; the first is the warm-up and the others are timed.
BATCHED_RUNS = 3
LLAMA_BENCH_REPS = 5  # llama-bench repetitions at batch 1; the first is left out (_bench_test)
TIMEOUT_S = 600.0
FIGURES = ("ttft_s", "tpot_s", "prefill_tokens_per_s", "decode_tokens_per_s")

# llama-server flags with a llama-bench / llama-batched-bench equivalent (common/arg.cpp and
# tools/llama-bench/llama-bench.cpp at llama.cpp 0c1e57098): name -> the bench's flag.
LLAMACPP_BENCH_FLAGS = {
    "--n-gpu-layers": "-ngl",
    "-ngl": "-ngl",
    "--flash-attn": "-fa",
    "-fa": "-fa",
    "--cache-type-k": "-ctk",
    "-ctk": "-ctk",
    "--cache-type-v": "-ctv",
    "-ctv": "-ctv",
    "--ubatch-size": "-ub",
    "-ub": "-ub",
    "--batch-size": "-b",
    "-b": "-b",
    "--split-mode": "-sm",
    "-sm": "-sm",
    "--threads": "-t",
    "-t": "-t",
}
# Server-only settings: the benchmark runs one batch of the workload without them.
LLAMACPP_SERVER_ONLY = {
    "--parallel": "the benchmark runs the batch itself (-npl), not server slots",
    "--ctx-size": "the benchmark sizes its context to the batch x (prompt + generation)",
    "--spec-type": "llama-bench and llama-batched-bench run no drafter",
    "--spec-ngram-mod-n-max": "llama-bench and llama-batched-bench run no drafter",
}


@dataclass(frozen=True)
class BenchWorkload:
    """One inference workload as the benchmark runs it: its model file and its lengths."""

    model: str
    batch: int
    prompt_len: int
    gen_len: int


@dataclass(frozen=True)
class BenchRun:
    """What a benchmark run gave: the figures, the spread of its repetitions, its version."""

    figures: EngineFigures
    spread: float | None = None
    version: str | None = None


Runner = Callable[[list[str], float], "subprocess.CompletedProcess[str]"]


def run_command(cmd: list[str], timeout_s: float) -> subprocess.CompletedProcess[str]:
    """Run an argument list (no shell), capturing its output; raise on timeout."""
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)  # noqa: S603


def flag_pairs(config: EngineConfig | None) -> list[tuple[str, str | None]]:
    """Return the emitted config's flags as (flag, value) pairs, the command and model left out."""
    if config is None or config.format != "cli":
        return []
    words = config.text.replace("\\\n", " ").split()
    pairs: list[tuple[str, str | None]] = []
    i = 0
    while i < len(words):
        w = words[i]
        if w.startswith("-"):
            value = (
                words[i + 1] if i + 1 < len(words) and not words[i + 1].startswith("-") else None
            )
            pairs.append((w, value))
            i += 2 if value is not None else 1
        else:
            i += 1
    return [(f, v) for f, v in pairs if f not in ("-m", "--model")]


# --- llama.cpp -------------------------------------------------------------------------------


def llamacpp_command(
    work: BenchWorkload, config: EngineConfig | None, out_dir: Path
) -> tuple[list[str], list[str]]:
    """llama-bench (batch 1) or llama-batched-bench (batch > 1) from the emitted flags.

    Returns the argument list and the emitted settings the benchmark cannot take, with why.
    """
    del out_dir  # both tools print their results
    extra: list[str] = []
    not_run: list[str] = []
    for flag, value in flag_pairs(config):
        if flag in LLAMACPP_BENCH_FLAGS and value is not None:
            extra += [LLAMACPP_BENCH_FLAGS[flag], value]
        elif flag in LLAMACPP_SERVER_ONLY:
            not_run.append(f"{flag}: {LLAMACPP_SERVER_ONLY[flag]}")
        else:
            not_run.append(f"{flag}: no benchmark flag")
    if "-ngl" not in extra:
        extra += ["-ngl", "99"]  # all layers on the GPU, as -ngl 999 in the emitted line
    if work.batch == 1:
        cmd = [
            "llama-bench",
            "-m",
            work.model,
            "-p",
            str(work.prompt_len),
            "-n",
            str(work.gen_len),
            "-r",
            str(LLAMA_BENCH_REPS),
            "-o",
            "json",
            *extra,
        ]
    else:
        ctx = work.batch * (work.prompt_len + work.gen_len) + 256
        cmd = [
            "llama-batched-bench",
            "-m",
            work.model,
            "-c",
            str(ctx),
            "-npp",
            str(work.prompt_len),
            "-ntg",
            str(work.gen_len),
            "-npl",
            ",".join([str(work.batch)] * BATCHED_RUNS),
            *extra,
        ]
    return cmd, not_run


def _bench_test(row: dict | None) -> tuple[float | None, float | None]:
    """One llama-bench test's tokens/s and relative spread, its cold first repetition left out.

    llama-bench warms up once before its tests, yet on CUDA the first timed repetition of a
    short prompt still runs cold (1B Q4_K_M pp512 on the H200: 28,919 tokens/s, then ~42,400
    four times). With LLAMA_BENCH_REPS samples the first is dropped, the others averaged.
    """
    if row is None or not row.get("avg_ts"):
        return None, None
    samples = [float(x) for x in row.get("samples_ts") or [] if x]
    if len(samples) >= 3:
        timed = samples[1:]
        mean = sum(timed) / len(timed)
        return mean, statistics.stdev(timed) / mean
    return float(row["avg_ts"]), float(row.get("stddev_ts", 0.0)) / float(row["avg_ts"])


def parse_llama_bench(text: str, work: BenchWorkload) -> BenchRun:
    """llama-bench -o json: the pp (n_gen 0) and tg (n_prompt 0) tests' tokens/s and spread."""
    start = text.find("[")
    rows = json.loads(text[start:]) if start >= 0 else []
    pp = next((r for r in rows if r.get("n_gen") == 0 and r.get("n_prompt", 0) > 0), None)
    tg = next((r for r in rows if r.get("n_prompt") == 0 and r.get("n_gen", 0) > 0), None)
    if pp is None and tg is None:
        raise ValueError("llama-bench printed no pp or tg test")
    (pp_ts, pp_spread), (tg_ts, tg_spread) = _bench_test(pp), _bench_test(tg)
    spreads = [x for x in (pp_spread, tg_spread) if x is not None]
    first = pp or tg or {}
    version = f"llama.cpp {first.get('build_commit', '?')} (build {first.get('build_number', '?')})"
    return BenchRun(
        EngineFigures(
            ttft_s=work.prompt_len / pp_ts if pp_ts else None,
            tpot_s=1.0 / tg_ts if tg_ts else None,
            prefill_tokens_per_s=pp_ts,
            decode_tokens_per_s=tg_ts,
        ),
        spread=max(spreads) if spreads else None,
        version=version,
    )


BATCHED_ROW = re.compile(
    r"^\|\s*(\d+)\s*\|\s*(\d+)\s*\|\s*(\d+)\s*\|\s*(\d+)\s*\|"
    r"\s*([\d.]+)\s*\|\s*([\d.]+)\s*\|\s*([\d.]+)\s*\|\s*([\d.]+)\s*\|"
)


def parse_batched_bench(text: str, work: BenchWorkload) -> BenchRun:
    """llama-batched-bench's table (or its jsonl): the row of -npp P -ntg G -npl B.

    T_PP is the whole batch's prefill (the last sequence's first token), T_TG / G one decode step.
    """
    rows: list[tuple[int, int, int, float, float, float, float]] = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{") and '"speed_pp"' in line:
            d = json.loads(line)
            rows.append(
                (d["pp"], d["tg"], d["pl"], d["t_pp"], d["speed_pp"], d["t_tg"], d["speed_tg"])
            )
            continue
        m = BATCHED_ROW.match(line)
        if m:
            pp, tg, pl = int(m[1]), int(m[2]), int(m[3])
            rows.append((pp, tg, pl, float(m[5]), float(m[6]), float(m[7]), float(m[8])))
    match = [r for r in rows if r[:3] == (work.prompt_len, work.gen_len, work.batch)]
    if not match:
        raise ValueError(
            f"llama-batched-bench printed no row for PP {work.prompt_len}, TG {work.gen_len}, "
            f"B {work.batch}"
        )
    timed = match[1:] or match  # a repeated batch's first row is its warm-up (BATCHED_RUNS)
    tg = timed[0][1]
    t_pp, s_pp = _mean(r[3] for r in timed), _mean(r[4] for r in timed)
    t_tg, s_tg = _mean(r[5] for r in timed), _mean(r[6] for r in timed)
    return BenchRun(
        EngineFigures(
            ttft_s=t_pp,
            tpot_s=t_tg / tg if tg else None,
            prefill_tokens_per_s=s_pp,
            decode_tokens_per_s=s_tg,
        ),
        spread=_spread(timed) if len(timed) > 1 else None,
    )


def _mean(values: Iterable[float]) -> float:
    xs = list(values)
    return sum(xs) / len(xs)


def _spread(rows: list[tuple[int, int, int, float, float, float, float]]) -> float:
    """Return the larger relative standard deviation of the timed runs' two speeds.

    The same measure as llama-bench's stddev_ts / avg_ts, so both tools' verdicts read alike.
    """
    out = 0.0
    for col in (4, 6):
        xs = [r[col] for r in rows]
        if _mean(xs) > 0:
            out = max(out, statistics.stdev(xs) / _mean(xs))
    return out


def parse_llamacpp(text: str, work: BenchWorkload) -> BenchRun:
    """Parse the output of whichever llama.cpp tool llamacpp_command chose."""
    return parse_llama_bench(text, work) if work.batch == 1 else parse_batched_bench(text, work)


# --- vLLM, SGLang, MLX ----------------------------------------------------------------------

VLLM_PASSTHROUGH = (
    "--max-model-len",
    "--quantization",
    "--kv-cache-dtype",
    "--dtype",
    "--tensor-parallel-size",
    "--enforce-eager",
    "--gpu-memory-utilization",
)


def vllm_command(
    work: BenchWorkload, config: EngineConfig | None, out_dir: Path
) -> tuple[list[str], list[str]]:
    """Vllm bench latency: one batch of B requests, P tokens in, G out, JSON to a file."""
    cmd = [
        "vllm",
        "bench",
        "latency",
        "--model",
        work.model,
        "--input-len",
        str(work.prompt_len),
        "--output-len",
        str(work.gen_len),
        "--batch-size",
        str(work.batch),
        "--num-iters-warmup",
        "2",
        "--num-iters",
        "5",
        "--output-json",
        str(out_dir / "vllm.json"),
    ]
    not_run: list[str] = []
    for flag, value in flag_pairs(config):
        if flag in VLLM_PASSTHROUGH:
            cmd += [flag] if value is None else [flag, value]
        else:
            not_run.append(f"{flag}: not passed to vllm bench latency")
    return cmd, not_run


def parse_vllm_latency(text: str, work: BenchWorkload) -> BenchRun:
    """Vllm bench latency's JSON: avg_latency (s) of the whole batch, and its latencies."""
    d = json.loads(text)
    avg = float(d["avg_latency"])
    lat = [float(x) for x in d.get("latencies", [])]
    spread = None
    if len(lat) > 1:
        mean = sum(lat) / len(lat)
        spread = math.sqrt(sum((x - mean) ** 2 for x in lat) / (len(lat) - 1)) / mean
    return BenchRun(
        EngineFigures(decode_tokens_per_s=work.batch * work.gen_len / avg if avg > 0 else None),
        spread=spread,
    )


def sglang_command(
    work: BenchWorkload, config: EngineConfig | None, out_dir: Path
) -> tuple[list[str], list[str]]:
    """Python -m sglang.benchmark.one_batch at the workload's batch and lengths.

    The one-batch benchmark moved from sglang/bench_one_batch.py to sglang/benchmark/one_batch.py
    (sglang 0.5.23, the pinned release, has only the latter; its own tests run it so:
    sglang/test/test_utils.py run_bench_one_batch).
    """
    del config
    return (
        [
            sys.executable,
            "-m",
            "sglang.benchmark.one_batch",
            "--model-path",
            work.model,
            "--batch-size",
            str(work.batch),
            "--input-len",
            str(work.prompt_len),
            "--output-len",
            str(work.gen_len),
            "--result-filename",
            str(out_dir / "sglang.jsonl"),
        ],
        ["the emitted server flags: bench_one_batch takes the workload only"],
    )


def parse_sglang(text: str, work: BenchWorkload) -> BenchRun:
    """bench_one_batch's JSON lines: prefill_latency, median_decode_latency and throughputs."""
    rows = [json.loads(ln) for ln in text.splitlines() if ln.strip().startswith("{")]
    # the file is opened for appending: the last row of this batch size is this run's
    row = next((r for r in reversed(rows) if r.get("batch_size") == work.batch),
               rows[-1] if rows else None)
    if row is None:
        raise ValueError("bench_one_batch wrote no result")
    step = row.get("median_decode_latency")
    return BenchRun(
        EngineFigures(
            ttft_s=row.get("prefill_latency"),
            tpot_s=step,
            prefill_tokens_per_s=row.get("prefill_throughput"),
            decode_tokens_per_s=row.get("median_decode_throughput"),
        )
    )


def mlx_command(
    work: BenchWorkload, config: EngineConfig | None, out_dir: Path
) -> tuple[list[str], list[str]]:
    """mlx_lm.benchmark at the workload's lengths and batch."""
    del config, out_dir
    return (
        [
            "mlx_lm.benchmark",
            "--model",
            work.model,
            "-p",
            str(work.prompt_len),
            "-g",
            str(work.gen_len),
            "-b",
            str(work.batch),
        ],
        ["the emitted server flags: the benchmark takes the workload only"],
    )


MLX_TPS = re.compile(r"prompt_tps=([\d.]+).*?generation_tps=([\d.]+)", re.S)


def parse_mlx(text: str, work: BenchWorkload) -> BenchRun:
    """mlx_lm.benchmark's last averages line: prompt_tps and generation_tps.

    At batch 1 they are one sequence's rates (stream_generate's GenerationResponse); at a larger
    batch they are the whole batch's (batch_generate's BatchStats: every sequence's tokens over
    the shared prompt / generation time, mlx_lm/generate_utils.py at mlx-lm 0.32.2). Published
    runs show it: Qwen3-Next-80B-A3B 4-bit gives generation_tps=65.3 at -b 1 and 301.9 at -b 16
    (ml-explore/mlx-lm#478), not 16 x 65.
    """
    found = MLX_TPS.findall(text)
    if not found:
        raise ValueError("mlx_lm.benchmark printed no prompt_tps / generation_tps")
    p_tps, g_tps = (float(x) for x in found[-1])
    return BenchRun(
        EngineFigures(
            ttft_s=work.batch * work.prompt_len / p_tps if p_tps else None,
            tpot_s=work.batch / g_tps if g_tps else None,
            prefill_tokens_per_s=p_tps,
            decode_tokens_per_s=g_tps,
        )
    )


@dataclass(frozen=True)
class EngineBench:
    """How one engine is benchmarked: the executable that must be on PATH, command, parser."""

    executable: str
    command: Callable[[BenchWorkload, EngineConfig | None, Path], tuple[list[str], list[str]]]
    parse: Callable[[str, BenchWorkload], BenchRun]
    output_file: str | None = None  # where the result lands, when not on stdout
    needs_file: bool = False  # the model must be one file (GGUF), not a folder


BENCHES: dict[str, EngineBench] = {
    "llamacpp": EngineBench("llama-bench", llamacpp_command, parse_llamacpp, needs_file=True),
    "vllm": EngineBench("vllm", vllm_command, parse_vllm_latency, output_file="vllm.json"),
    "sglang": EngineBench("sglang", sglang_command, parse_sglang, output_file="sglang.jsonl"),
    "mlx": EngineBench("mlx_lm.benchmark", mlx_command, parse_mlx),
}


def installed(engine: str, bench: EngineBench, work: BenchWorkload) -> str | None:
    """None when the engine's benchmark can run here, else the reason it cannot."""
    if engine == "sglang":
        import importlib.util

        if importlib.util.find_spec("sglang") is None:
            return "sglang is not installed in this Python"
    elif shutil.which(bench.executable) is None:
        return f"{bench.executable} is not on PATH"
    if engine == "llamacpp" and work.batch > 1 and shutil.which("llama-batched-bench") is None:
        return "llama-batched-bench is not on PATH"
    return None


def model_problem(bench: EngineBench, model: str) -> str | None:
    """None when the model is a local file (or folder, where the engine takes one), else why not."""
    path = Path(model)
    if not path.exists():
        return (
            f"the model {model!r} is not a local file: the engine's benchmark needs the weights "
            "(pass --model with a path)"
        )
    if bench.needs_file and not path.is_file():
        return f"{model} is not a file: llama.cpp needs one GGUF file"
    return None


def compare(measured: EngineFigures, predicted: EngineFigures | None) -> dict[str, float]:
    """Measured / predicted for each figure both sides give."""
    if predicted is None:
        return {}
    out: dict[str, float] = {}
    for name in FIGURES:
        m, p = getattr(measured, name), getattr(predicted, name)
        if m and p:
            out[name] = m / p
    return out


def verdict(
    ratio: dict[str, float], spread: float | None, tolerance: float
) -> tuple[str, str | None]:
    """Decide confirmed / refuted / inconclusive from the ratios, the spread and the tolerance."""
    if not ratio:
        return "inconclusive", "no figure both measured and predicted"
    if spread is not None and spread > tolerance:
        return (
            "inconclusive",
            f"the run's repetitions spread {spread:.0%}, more than the ±{tolerance:.0%} tolerance",
        )
    off = {k: v for k, v in ratio.items() if abs(v - 1.0) > tolerance}
    if off:
        return "refuted", "beyond ±{:.0%}: {}".format(
            tolerance, ", ".join(f"{k} x{v:.2f}" for k, v in off.items())
        )
    return "confirmed", None


def validate_engine(
    engine: str,
    work: BenchWorkload,
    config: EngineConfig | None,
    predicted: EngineFigures | None,
    *,
    tolerance: float = TOLERANCE,
    timeout_s: float = TIMEOUT_S,
    runner: Runner = run_command,
) -> EngineValidation:
    """Run the engine's own benchmark for the workload with the emitted config; compare."""
    bench = BENCHES.get(engine)
    if bench is None:
        return EngineValidation(
            engine=engine,
            status="unsupported",
            tolerance=tolerance,
            predicted=predicted,
            reason=f"no benchmark wired for engine {engine!r}",
        )
    why = installed(engine, bench, work) or model_problem(bench, work.model)
    if why:
        return EngineValidation(
            engine=engine,
            status="unsupported",
            reason=why,
            tolerance=tolerance,
            predicted=predicted,
        )
    with tempfile.TemporaryDirectory(prefix="hwadvisor-engine-") as tmp:
        cmd, not_run = bench.command(work, config, Path(tmp))
        base = {
            "engine": engine,
            "command": cmd,
            "tolerance": tolerance,
            "predicted": predicted,
            "not_run": not_run,
        }
        try:
            proc = runner(cmd, timeout_s)
        except subprocess.TimeoutExpired:
            return EngineValidation(
                **base, status="error", reason=f"the benchmark ran past {timeout_s:.0f} s"
            )
        except OSError as e:
            return EngineValidation(**base, status="error", reason=f"could not start {cmd[0]}: {e}")
        if proc.returncode != 0:
            tail = (proc.stderr or proc.stdout or "").strip().splitlines()[-3:]
            return EngineValidation(
                **base,
                status="error",
                reason=f"{cmd[0]} exited {proc.returncode}: {' | '.join(tail)}",
            )
        text = proc.stdout
        if bench.output_file is not None:
            out = Path(tmp) / bench.output_file
            text = out.read_text() if out.exists() else ""
        try:
            run = bench.parse(text, work)
        except (ValueError, KeyError, TypeError) as e:
            return EngineValidation(
                **base, status="error", reason=f"could not read {cmd[0]}'s output: {e}"
            )
    ratio = compare(run.figures, predicted)
    status, reason = verdict(ratio, run.spread, tolerance)
    return EngineValidation(
        **base,
        status=status,
        reason=reason,
        version=run.version,
        measured=run.figures,
        ratio=ratio,
        spread=run.spread,
    )


def predicted_figures(
    batch: int, prompt_len: int, ttft_s: float | None, tpot_s: float | None
) -> EngineFigures:
    """Return the model's figures in the benchmark's terms: TTFT, TPOT, tokens/s over the batch."""
    return EngineFigures(
        ttft_s=ttft_s,
        tpot_s=tpot_s,
        prefill_tokens_per_s=batch * prompt_len / ttft_s if ttft_s else None,
        decode_tokens_per_s=batch / tpot_s if tpot_s else None,
    )


def validate_plan_engine(report: Report, model_file: str | None) -> EngineValidation | None:
    """Run the plan's engine benchmark for the report's workload; None without plan or workload.

    The prediction compared is the report's baseline estimate (the workload on the engine with
    its defaults): the benchmarks run one batch without server-only steps (slots, drafters), so
    the plan's own figures, which include those, are not what they measure.
    """
    plan, wl, est = report.plan, report.workload, report.estimate
    if plan is None or wl is None or est is None or wl.phase != "inference":
        return None
    # The baseline is the workload on its own engine: that engine is benchmarked, with the
    # emitted config where the plan stays on it. A plan that moves to another engine (llama.cpp
    # -> vLLM) emits that engine's config, whose figures are the plan's, not the baseline's.
    engine = wl.engine
    config = plan.engine_config
    moved = None
    if config is not None and config.engine != engine:
        moved = (f"the plan moves to {config.engine}: its config is not benchmarked here; "
                 f"{engine} runs at its defaults, as the baseline it is compared with")
        config = None
    work = BenchWorkload(model_file or wl.model, wl.batch, wl.prompt_len, max(wl.gen_len, 1))
    # the benchmarks run batches, not the server: its per-sequence host work is left out
    tpot = est.times.tpot_s
    if tpot is not None and est.times.server_host_s:
        tpot -= est.times.server_host_s
    predicted = predicted_figures(wl.batch, wl.prompt_len, est.times.ttft_s, tpot)
    result = validate_engine(engine, work, config, predicted)
    if moved is not None:
        result = result.model_copy(update={"not_run": [moved, *result.not_run]})
    return result


def engine_verdict(report: Report, so_far: PlanValidation | None,
                   model_file: Path | None) -> PlanValidation | None:
    """Return the plan's validation with the engine's own benchmark against the prediction.

    An inference plan always gets a result: measured where the engine is installed and a model
    file is given, else `unsupported` with the reason (no engine here, no model file). The
    plan's stacked-step verdict so far, if any, is kept beside it. None: no engine to run.
    """
    engine = validate_plan_engine(report, str(model_file) if model_file is not None else None)
    if engine is None:
        return None
    validation = so_far or PlanValidation(
        status="unsupported", detail="no stacked step of this plan runs as a trial here")
    return validation.model_copy(update={"engine": engine})
