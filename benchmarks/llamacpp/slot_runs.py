"""Busy llama-server slots side by side or apart: the decode time a token, measured and modelled.

With its slot count set (--parallel N) and no --kv-unified, llama-server keeps one KV stream a
slot, and llama.cpp cuts each step into forward passes of consecutive sequence ids
(src/llama-kv-cache.cpp init_batch: split_equal(n_ubatch, sequential = true)). So k requests in
slots 0..k-1 decode in one pass a step, while the same k requests in slots 0, 2, 4, ... take k
passes. This script pins requests to slots (the /completion endpoint's id_slot), starts them
together, and reads llama-server's own per-request decode time (timings.predicted_per_token_ms)
for each placement, a few repetitions each, beside hwadvisor's step model for the same passes
(serving/simulate.py plays them the same way). Nothing here depends on the GPU: it runs
against a CPU build as well.

Usage:
  python benchmarks/llamacpp/slot_runs.py --server BUILD/bin/llama-server --model M.gguf \\
      --shape hwadvisor/workload/presets/llama-3.2-1b.json --weights-dtype q4_k_m \\
      --slots 8 --placements "0;0,1;0,4;0,1,2,3;0,2,4,6" --out slot_runs.json
"""

from __future__ import annotations

import argparse
import json
import random
import shlex
import statistics
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from serving_load_cpu import server, wait_health  # noqa: E402 - after the path is set

from hwadvisor import pipeline  # noqa: E402
from hwadvisor.models import ModelOptions  # noqa: E402
from hwadvisor.perfmodel.steps import StepModel  # noqa: E402
from hwadvisor.workload import WorkloadRequest  # noqa: E402
from hwadvisor.workload.settle import on_engine_defaults  # noqa: E402

HOST = "127.0.0.1"
T95 = {2: 12.71, 3: 4.30, 4: 3.18, 5: 2.78, 6: 2.57, 7: 2.45, 8: 2.36, 9: 2.31, 10: 2.26}


def runs_of(slots: list[int]) -> list[int]:
    """Sizes of the runs of consecutive ids (the forward passes llama.cpp makes of them)."""
    ordered = sorted(slots)
    sizes = [1]
    for a, b in zip(ordered, ordered[1:], strict=False):
        if b == a + 1:
            sizes[-1] += 1
        else:
            sizes.append(1)
    return sizes


def _complete(base: str, slot: int, prompt: list[int], gen: int, out: dict[int, Any]) -> None:
    body = json.dumps({"prompt": prompt, "n_predict": gen, "ignore_eos": True, "id_slot": slot,
                       "cache_prompt": False, "temperature": 0.0}).encode()
    req = urllib.request.Request(base + "/completion", data=body,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=300) as resp:  # noqa: S310 - loopback
            out[slot] = json.loads(resp.read())
    except OSError as exc:
        out[slot] = {"error": str(exc)}


def play(base: str, slots: list[int], prompt_len: int, gen: int, rng: random.Random,
         vocab: int) -> list[float]:
    """Start one request a slot together; return each one's decode ms a token (the server's)."""
    out: dict[int, Any] = {}
    threads = [threading.Thread(target=_complete, args=(
        base, s, [rng.randrange(300, vocab) for _ in range(prompt_len)], gen, out))
        for s in slots]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    values = []
    for s in slots:
        timings = out.get(s, {}).get("timings")
        if not timings:
            raise RuntimeError(f"slot {s}: {out.get(s)}")
        values.append(float(timings["predicted_per_token_ms"]))
    return values


def interval(samples: list[float]) -> tuple[float, float, float]:
    """Mean and its 95% t-interval."""
    mean = statistics.fmean(samples)
    if len(samples) < 2:
        return mean, mean, mean
    half = T95.get(len(samples), 1.96) * statistics.stdev(samples) / len(samples) ** 0.5
    return mean, mean - half, mean + half


def passes(slots: list[int], unified: bool) -> list[int]:
    """Rows of each forward pass: one per run of consecutive slots, or one (--kv-unified)."""
    return [len(slots)] if unified else runs_of(slots)


def model_ms(steps: StepModel, rows: list[int], context: float) -> float:
    """The step model's decode ms a token for these passes."""
    return 1e3 * sum(steps.step_s(size, context) for size in rows)


def main() -> int:
    """Start the server, time each placement, write measured beside modelled."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--server", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--shape", required=True, help="the preset (or config.json) it was made from")
    ap.add_argument("--weights-dtype", required=True)
    ap.add_argument("--device", default=None, help="profile id to model (default: probe)")
    ap.add_argument("--slots", type=int, default=8)
    ap.add_argument("--placements", default="0;0,1;0,4;0,1,2,3;0,2,4,6")
    ap.add_argument("--prompt-len", type=int, default=32)
    ap.add_argument("--gen-len", type=int, default=64)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--port", type=int, default=18390)
    ap.add_argument("--extra", default="", help="more llama-server flags (--threads 2, -ngl 999)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    request = WorkloadRequest(model=args.shape, engine="llamacpp", weights_dtype=args.weights_dtype,
                              batch=1, prompt_len=args.prompt_len, gen_len=args.gen_len)
    report = pipeline.estimate_report(request, args.device, ModelOptions())
    assert report.workload is not None
    device = report.devices[0]
    workload, options = on_engine_defaults(report.workload, device, ModelOptions())
    steps = StepModel(workload, device, options)
    vocab = steps.setup.spec.vocab_size
    context = args.prompt_len + args.gen_len / 2.0
    unified = bool({"-kvu", "--kv-unified"} & set(shlex.split(args.extra)))
    ctx = args.slots * 256 * (1 + (args.prompt_len + args.gen_len) // 256)
    cmd = [args.server, "-m", args.model, "--parallel", str(args.slots), "--ctx-size", str(ctx),
           *shlex.split(args.extra), "--host", HOST, "--port", str(args.port)]
    base = f"http://{HOST}:{args.port}"
    record: dict[str, Any] = {"command": cmd, "device": device.name, "date": time.strftime(
        "%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "placements": []}
    rng = random.Random(7)
    with server(cmd, Path(args.out).with_suffix(".log")) as proc:
        if not wait_health(base, proc, 300):
            record["error"] = "server did not become healthy"
            Path(args.out).write_text(json.dumps(record, indent=1), encoding="utf-8")
            return 1
        play(base, [0], args.prompt_len, 8, rng, vocab)  # warm-up
        for text in args.placements.split(";"):
            slots = [int(s) for s in text.split(",")]
            samples = [statistics.fmean(play(base, slots, args.prompt_len, args.gen_len, rng,
                                             vocab)) for _ in range(args.reps)]
            mean, low, high = interval(samples)
            rows = passes(slots, unified)
            row = {"slots": slots, "passes": len(rows), "samples_ms": samples,
                   "measured_ms": mean, "ci95_ms": [low, high],
                   "modelled_ms": model_ms(steps, rows, context)}
            record["placements"].append(row)
            print(f"slots {text:>12}: {len(rows)} pass(es), measured {mean:7.2f} ms "
                  f"[{low:.2f}, {high:.2f}], modelled {row['modelled_ms']:7.2f} ms", flush=True)
    Path(args.out).write_text(json.dumps(record, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
