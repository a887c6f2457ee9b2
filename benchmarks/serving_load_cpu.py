"""llama-server under load here: measured by hwadvisor's load generator, beside the model.

Starts llama-server (built from the pinned llama.cpp source, CPU or GPU) on loopback with the
given flags, plays each load point with hwadvisor.validator.loadgen (open loop at each --rates
value, closed loop at each --concurrencies value; prompts of exactly --prompt-len token ids,
exactly --gen-len output tokens), and writes one JSON: per point the measured ServingFigures, the
model's prediction for the same load (hwadvisor.serving.predict for --preset on this machine,
or on --device, with llama-server's --parallel as the scheduler's sequence slots), the checks
and verdict of `validate --endpoint`, and the engine's own timings as a cross-check.

A random-weight GGUF of a preset's shapes times like the real model (benchmarks/llamacpp/
make_gguf.py writes one; llama-quantize makes its Q4_K_M). Every wait is bounded; the server is
stopped at the end, whatever happens.

Usage:
  python benchmarks/serving_load_cpu.py --server BUILD/bin/llama-server --model M.gguf \\
      --preset llama-3.2-1b --weights-dtype q4_k_m --parallel 2 --prompt-len 128 --gen-len 32 \\
      --rates 0.1,0.3 --concurrencies 1,2 --requests 12 --out result.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hwadvisor import pipeline  # noqa: E402 - after the path is set
from hwadvisor.models import ModelOptions, Report  # noqa: E402
from hwadvisor.models.serving import Lengths, Load  # noqa: E402
from hwadvisor.probe.target import primary_device  # noqa: E402
from hwadvisor.serving import Knobs, predict  # noqa: E402
from hwadvisor.validator.loadgen import Limits, parse_endpoint, play  # noqa: E402
from hwadvisor.validator.loadtest import judged  # noqa: E402
from hwadvisor.workload import WorkloadRequest  # noqa: E402

HOST = "127.0.0.1"


@contextmanager
def server(cmd: list[str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """Run the server with its output in `log`; stop it on the way out, whatever happens."""
    with log.open("wb") as sink:
        proc = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.STDOUT)  # noqa: S603
        try:
            yield proc
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()


def wait_health(base: str, proc: subprocess.Popen[bytes], limit_s: float) -> bool:
    """Poll /health until it answers 200, the server exits, or the limit passes."""
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        if proc.poll() is not None:
            return False
        try:
            with urllib.request.urlopen(base + "/health", timeout=2) as resp:  # noqa: S310
                if resp.status == 200:
                    return True
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.25)
    return False


def planned(args: argparse.Namespace) -> Report:
    """Return the estimate report of the preset on llama-server here (or on --device)."""
    request = WorkloadRequest(model=args.preset, engine="llamacpp", phase="inference",
                              weights_dtype=args.weights_dtype, batch=args.parallel,
                              prompt_len=args.prompt_len, gen_len=args.gen_len)
    return pipeline.estimate_report(request, args.device, ModelOptions())


def load_points(args: argparse.Namespace) -> list[Load]:
    """Return the loads to play: each rate (open loop), then each concurrency (closed loop)."""
    lengths = {"prompt": Lengths(mean=args.prompt_len), "output": Lengths(mean=args.gen_len),
               "requests": args.requests, "source": "benchmarks/serving_load_cpu.py"}
    rates = [float(r) for r in args.rates.split(",") if r]
    users = [int(c) for c in args.concurrencies.split(",") if c]
    return ([Load(rate_rps=r, **lengths) for r in rates]  # type: ignore[arg-type]
            + [Load(concurrency=c, **lengths) for c in users])  # type: ignore[arg-type]


def point(args: argparse.Namespace, base: str, report: Report, load: Load) -> dict[str, Any]:
    """Play one load and return its measured and predicted figures, checks and verdict."""
    assert report.workload is not None
    device = primary_device(report)
    prediction = predict(report.workload, device, load, knobs=Knobs(max_seqs=args.parallel))
    how = (f"serving.predict: {report.workload.model} {report.workload.weights_dtype} on "
           f"{device.name}, llama-server --parallel {args.parallel}")
    run = play(parse_endpoint(base), load, limits=Limits(time_limit_s=args.time_limit,
                                                          request_timeout_s=args.time_limit))
    test = judged(run, prediction.figures, how)
    print(f"{load.words()}: {test.requests_completed}/{test.requests_sent} in "
          f"{test.duration_s:.1f} s, {test.status}: {test.detail}", file=sys.stderr)
    return test.model_dump(mode="json")


def main() -> None:
    """Start llama-server, play every load point, write the JSON, stop the server."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--server", required=True, help="the llama-server binary")
    parser.add_argument("--model", required=True, help="the GGUF file it serves")
    parser.add_argument("--preset", required=True, help="hwadvisor's preset of the model's shape")
    parser.add_argument("--weights-dtype", default="q4_k_m")
    parser.add_argument("--device", default=None, help="a profile id (default: this machine)")
    parser.add_argument("--parallel", type=int, default=1, help="llama-server --parallel")
    parser.add_argument("--threads", type=int, default=None, help="llama-server --threads")
    parser.add_argument("--flags", default="", help="more llama-server flags")
    parser.add_argument("--prompt-len", type=int, default=128)
    parser.add_argument("--gen-len", type=int, default=32)
    parser.add_argument("--rates", default="", help="requests/s, comma-separated")
    parser.add_argument("--concurrencies", default="1", help="users, comma-separated")
    parser.add_argument("--requests", type=int, default=12, help="requests a point")
    parser.add_argument("--time-limit", type=float, default=120.0, help="seconds a point")
    parser.add_argument("--port", type=int, default=18080)
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args()

    report = planned(args)
    ctx = args.parallel * (args.prompt_len + args.gen_len + 64)
    cmd = [args.server, "-m", args.model, "--host", HOST, "--port", str(args.port),
           "--parallel", str(args.parallel), "--ctx-size", str(ctx), *args.flags.split()]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    base = f"http://{HOST}:{args.port}"
    log = args.out.with_suffix(".server.log")
    with server(cmd, log) as proc:
        if not wait_health(base, proc, 120.0):
            raise SystemExit(f"llama-server did not come up: see {log}")
        points = [point(args, base, report, load) for load in load_points(args)]
    result = {"server": " ".join(cmd), "model": args.model, "preset": args.preset,
              "weights_dtype": args.weights_dtype, "device": primary_device(report).name,
              "tool_version": report.tool_version, "points": points}
    args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
