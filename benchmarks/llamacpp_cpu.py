"""llama.cpp on this machine's CPU against hwadvisor's prediction for it (issue 42).

A ground truth every developer and CI can measure without a GPU: a random-weight GGUF file of a
preset's shape (benchmarks/llamacpp/make_gguf.py) in F16, quantised to Q8_0 and Q4_K_M with
llama-quantize, timed with `llama-bench -p 512 -n 128 -r 3` (prefill pp512, decode tg128 from an
empty context, batch 1) and `llama-batched-bench -npp 512 -ntg 128 -npl 1,8,1,8` (batch 1 and 8;
the second pass of each batch is read, as benchmarks/llamacpp/compare.py does). Each figure is
compared with `hwadvisor estimate` for this machine (no --device: the probed host), the engine's
batch benchmark (`--engine-option server=false`).

Nothing is built: --bin names a folder with llama-bench, llama-batched-bench and llama-quantize
(a CPU build of the pinned llama.cpp). Timing on a busy machine measures the other work: the
script refuses while the 1-minute load average is above --max-load (1.5), unless --force.

--measured FILE re-predicts the figures of a saved run (its --json file) without timing
anything: the machine may be busy, and the saved figures stay what was measured.

Usage: python benchmarks/llamacpp_cpu.py [--bin DIR] [--gguf-py DIR] [--preset qwen2.5-1.5b]
       [--work DIR] [--threads N] [--json OUT.json] [--force] [--measured SAVED.json]
Run from the repository root with PYTHONPATH=. so this checkout's hwadvisor predicts.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hwadvisor.validator.engine_bench import (  # noqa: E402
    BenchWorkload,
    parse_batched_bench,
    parse_llama_bench,
)

PROMPT, GEN = 512, 128
# GGUF file type -> hwadvisor's --weights-dtype
WEIGHTS = {"f16": "fp16", "q8_0": "q8_0", "q4_k_m": "q4_k_m"}
QUANT_NAME = {"q8_0": "Q8_0", "q4_k_m": "Q4_K_M"}


@dataclass
class Row:
    """One measured figure and its prediction (tokens/s)."""

    weights: str
    tool: str
    batch: int
    phase: str
    measured: float
    predicted: float

    @property
    def ratio(self) -> float:
        """Measured over predicted."""
        return self.measured / self.predicted


def _run(cmd: list[str], out: Path | None = None, env: dict[str, str] | None = None) -> str:
    """Run a command (no shell), keep its stdout in `out`, fail loudly with its stderr."""
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False, cwd=ROOT)
    if done.returncode != 0:
        raise SystemExit(f"{cmd[0]} failed ({done.returncode}): {done.stderr[-2000:]}")
    if out is not None:
        out.write_text(done.stdout)
    return done.stdout


def model_files(args: argparse.Namespace) -> dict[str, Path]:
    """The F16 file of the preset's shape and its two quantisations (made once, kept)."""
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    shape = ROOT / "benchmarks" / "llamacpp" / "shapes" / f"{args.preset}.json"
    if not shape.exists():
        shape = ROOT / "hwadvisor" / "workload" / "presets" / f"{args.preset}.json"
    files = {w: work / f"{args.preset}-{w}.gguf" for w in WEIGHTS}
    if not files["f16"].exists():
        env = dict(os.environ, PYTHONPATH=args.gguf_py)
        _run([sys.executable, str(ROOT / "benchmarks" / "llamacpp" / "make_gguf.py"), str(shape),
              str(files["f16"])], env=env)
    for w, name in QUANT_NAME.items():
        if not files[w].exists():
            _run([str(Path(args.bin) / "llama-quantize"), str(files["f16"]), str(files[w]), name,
                  str(args.threads)])
    return files


@functools.cache
def predict(preset: str, weights: str, batch: int, prompt: int, gen: int) -> tuple[float, float]:
    """hwadvisor's (prefill tokens/s, decode tokens/s over the batch) for this machine."""
    text = _run([sys.executable, "-m", "hwadvisor", "estimate", "--model", preset, "--engine",
                 "llamacpp", "--weights-dtype", WEIGHTS[weights], "--batch", str(batch),
                 "--prompt-len", str(max(prompt, 1)), "--gen-len", str(gen),
                 "--engine-option", "server=false", "--json"])
    times = json.loads(text)["estimate"]["times"]
    return batch * max(prompt, 1) / times["ttft_s"], batch / times["tpot_s"]


def measure(args: argparse.Namespace, files: dict[str, Path]) -> list[Row]:
    """Time every file with both tools and pair each figure with its prediction."""
    out = Path(args.work)
    rows: list[Row] = []
    binary = Path(args.bin)
    for w, path in files.items():
        bench = _run([str(binary / "llama-bench"), "-m", str(path), "-p", str(PROMPT), "-n",
                      str(GEN), "-r", "3", "-t", str(args.threads), "-o", "json"],
                     out / f"llama_bench_{w}.json")
        run = parse_llama_bench(bench, BenchWorkload(path.name, 1, PROMPT, GEN)).figures
        pre, _ = predict(args.preset, w, 1, PROMPT, GEN)
        _, dec = predict(args.preset, w, 1, 0, GEN)  # tgN decodes from an empty context
        if run.ttft_s:
            rows.append(Row(w, "llama-bench", 1, "prefill", PROMPT / run.ttft_s, pre))
        if run.tpot_s:
            rows.append(Row(w, "llama-bench", 1, "decode", 1 / run.tpot_s, dec))
        batched = _run([str(binary / "llama-batched-bench"), "-m", str(path), "-c",
                        str(8 * (PROMPT + GEN) + 256), "-b", "2048", "-ub", "512", "-npp",
                        str(PROMPT), "-ntg", str(GEN), "-npl", "1,8,1,8", "-t",
                        str(args.threads), "--output-format", "md"],
                       out / f"batched_{w}.txt")
        for batch in (1, 8):
            figs = parse_batched_bench(batched, BenchWorkload(path.name, batch, PROMPT,
                                                              GEN)).figures
            pre, dec = predict(args.preset, w, batch, PROMPT, GEN)
            if figs.prefill_tokens_per_s:
                rows.append(Row(w, "batched-bench", batch, "prefill", figs.prefill_tokens_per_s,
                                pre))
            if figs.decode_tokens_per_s:
                rows.append(Row(w, "batched-bench", batch, "decode", figs.decode_tokens_per_s,
                                dec))
    return rows


def predicted_for(preset: str, row: Row) -> float:
    """The prediction for one measured figure, made as measure() makes it."""
    if row.tool == "llama-bench":
        pre, _ = predict(preset, row.weights, 1, PROMPT, GEN)
        _, dec = predict(preset, row.weights, 1, 0, GEN)  # tgN decodes from an empty context
    else:
        pre, dec = predict(preset, row.weights, row.batch, PROMPT, GEN)
    return pre if row.phase == "prefill" else dec


def repredict(saved: Path, preset: str) -> list[Row]:
    """A saved run's measured figures, each with this checkout's prediction."""
    rows = [Row(**item) for item in json.loads(saved.read_text())]
    return [Row(r.weights, r.tool, r.batch, r.phase, r.measured, predicted_for(preset, r))
            for r in rows]


def table(rows: list[Row]) -> str:
    """A markdown table: measured, predicted, measured / predicted, within 15%."""
    lines = ["| weights | tool | batch | phase | measured t/s | predicted t/s | ratio | 15% |",
             "|---|---|---:|---|---:|---:|---:|---|"]
    for r in rows:
        ok = "yes" if abs(r.ratio - 1) <= 0.15 else "no"
        lines.append(f"| {r.weights} | {r.tool} | {r.batch} | {r.phase} | {r.measured:,.1f} | "
                     f"{r.predicted:,.1f} | {r.ratio:.2f} | {ok} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Make the files, time them, print the comparison; exit 1 when a figure is off by > 15%."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bin", default="/work/llama/build-cpu/bin")
    parser.add_argument("--gguf-py", default="/work/llama/src/gguf-py")
    parser.add_argument("--preset", default=None,
                        help="the preset timed (default qwen2.5-1.5b; with --measured, the one "
                        "the saved file is named after, llama-3.2-1b_DATE.json)")
    parser.add_argument("--work", default="/tmp/llamacpp_cpu")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--max-load", type=float, default=1.5)
    parser.add_argument("--force", action="store_true", help="time even on a busy machine")
    parser.add_argument("--json", help="write the rows here")
    parser.add_argument("--measured", help="re-predict this saved run (a --json file) instead "
                        "of timing; the preset must be the run's")
    args = parser.parse_args(argv)
    if args.preset is None:
        stem = Path(args.measured).name.split("_")[0] if args.measured else ""
        args.preset = stem if (ROOT / "hwadvisor" / "workload" / "presets" /
                               f"{stem}.json").is_file() else "qwen2.5-1.5b"
    if args.measured:
        rows = repredict(Path(args.measured), args.preset)
        print(table(rows))
        within = sum(abs(r.ratio - 1) <= 0.15 for r in rows)
        print(f"\n{within} of {len(rows)} figures within 15%")
        if args.json:
            Path(args.json).write_text(json.dumps([asdict(r) for r in rows], indent=1) + "\n")
        return 0 if within == len(rows) else 1
    load = os.getloadavg()[0]
    if load > args.max_load and not args.force:
        print(f"the machine is busy (load average {load:.2f} > {args.max_load}): timing now would "
              "measure the other work; run again when it is quiet, or pass --force",
              file=sys.stderr)
        return 2
    rows = measure(args, model_files(args))
    print(table(rows))
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(r) for r in rows], indent=1) + "\n")
    return 0 if all(abs(r.ratio - 1) <= 0.15 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
