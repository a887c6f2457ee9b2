"""llama-server under load: the project's load generator against the model's prediction.

Starts llama-server once per model file (loopback only; every wait bounded), warms it up, then
plays each load (open loop at several request rates, closed loop at several concurrencies) with
hwadvisor's own load generator (hwadvisor/validator/loadgen.py) and holds the measured TTFT, TPOT,
ITL and latency percentiles against `hwadvisor.serving.predict` for the same workload, slots and
KV pool. The server's own timings (prompt_ms, predicted_per_token_ms per request) ride along as
a cross-check. Rates are chosen from the model's own capacity at the slots (a closed loop at
`--slots` users): a share of it from light load to past saturation, so every GPU or CPU gets
loads of the same shape.

Usage: python serve_load.py --server BIN --model GGUF --shape PRESET.json --weights-dtype q4_k_m
       --slots 16 --prompt-len 512 --gen-len 128 --out RESULT.json [--device h200-sxm]
       [--shares 0.25,0.6,0.9,1.3] [--concurrency 4,16] [--requests 150] [--port 18300]
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from serving_load_cpu import server, wait_health  # noqa: E402 - after the path is set

from hwadvisor.models import ModelOptions  # noqa: E402
from hwadvisor.models.serving import Lengths, Load, ServingFigures  # noqa: E402
from hwadvisor.serving import Knobs, predict  # noqa: E402
from hwadvisor.validator.loadgen import Limits, parse_endpoint, play  # noqa: E402
from hwadvisor.workload import WorkloadRequest  # noqa: E402

HOST = "127.0.0.1"
KEYS = ("ttft_p50_s", "ttft_p90_s", "tpot_p50_s", "tpot_p90_s", "itl_p50_s", "itl_p90_s",
        "request_latency_p50_s", "output_tokens_per_s")


def _workload(args: argparse.Namespace) -> tuple[Any, Any, ModelOptions]:
    from hwadvisor import pipeline
    from hwadvisor.workload.settle import on_engine_defaults

    request = WorkloadRequest(model=args.shape, engine="llamacpp", weights_dtype=args.weights_dtype,
                              batch=args.slots, prompt_len=args.prompt_len, gen_len=args.gen_len)
    report = pipeline.estimate_report(request, args.device, ModelOptions())
    device = report.devices[0]
    workload, options = on_engine_defaults(report.workload, device, ModelOptions())
    return workload, device, options


def _load(args: argparse.Namespace, rate: float | None = None,
          users: int | None = None, requests: int | None = None) -> Load:
    return Load(rate_rps=rate, concurrency=users,
                prompt=Lengths(mean=args.prompt_len, spread=args.spread),
                output=Lengths(mean=args.gen_len, spread=args.spread),
                requests=requests or args.requests, source="serve_load.py")


def _row(kind: str, value: float, measured: ServingFigures | None,
         predicted: ServingFigures, run: Any) -> dict[str, Any]:
    row: dict[str, Any] = {"load": kind, "value": value,
                           "predicted": {k: getattr(predicted, k) for k in KEYS},
                           "predicted_saturated": predicted.saturated}
    if measured is not None:
        row["measured"] = {k: getattr(measured, k) for k in KEYS}
        row["measured_saturated"] = measured.saturated
        row["ratio"] = {k: (getattr(measured, k) / getattr(predicted, k)
                            if getattr(predicted, k) else None) for k in KEYS}
    done = run.completed
    tpots = sorted(s.engine_tpot_s for s in done if s.engine_tpot_s)
    prompts = sorted(s.engine_prompt_s for s in done if s.engine_prompt_s)
    row["server_timings"] = {
        "predicted_per_token_p50_s": tpots[len(tpots) // 2] if tpots else None,
        "prompt_p50_s": prompts[len(prompts) // 2] if prompts else None}
    row["requests_ok"], row["requests_failed"] = len(done), len(run.failed)
    row["errors"] = run.errors()[:5]
    row["stopped"], row["duration_s"] = run.stopped, run.duration_s
    return row


def main() -> int:
    """Start the server, play each load, write measured beside predicted."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--server", required=True)
    ap.add_argument("--model", required=True, help="the GGUF file llama-server loads")
    ap.add_argument("--shape", required=True, help="the preset (or config.json) it was made from")
    ap.add_argument("--weights-dtype", required=True)
    ap.add_argument("--device", default=None, help="profile id to predict for (default: probe)")
    ap.add_argument("--slots", type=int, default=16)
    ap.add_argument("--prompt-len", type=int, default=512)
    ap.add_argument("--gen-len", type=int, default=128)
    ap.add_argument("--spread", type=float, default=0.5)
    ap.add_argument("--shares", default="0.25,0.6,0.9,1.3")
    ap.add_argument("--concurrency", default="4,16")
    ap.add_argument("--requests", type=int, default=150)
    ap.add_argument("--time-limit", type=float, default=90.0, help="seconds per load at most")
    ap.add_argument("--port", type=int, default=18300)
    ap.add_argument("--extra", default="--n-gpu-layers 999", help="more llama-server flags")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    workload, device, options = _workload(args)
    ctx = args.slots * int((args.prompt_len + args.gen_len) * 4)  # room for the long tail
    extra = shlex.split(args.extra)
    unified = True if {"-kvu", "--kv-unified"} & set(extra) else None  # else the server's rule
    knobs = Knobs(max_seqs=args.slots, kv_pool_tokens=ctx, kv_unified=unified)
    capacity = predict(workload, device, _load(args, users=args.slots, requests=200), options,
                       knobs).figures.request_throughput_rps
    cmd = [args.server, "-m", args.model, "--parallel", str(args.slots), "--ctx-size", str(ctx),
           *extra, "--host", HOST, "--port", str(args.port)]
    base = f"http://{HOST}:{args.port}"
    record: dict[str, Any] = {"command": cmd, "device": device.name, "workload": {
        "shape": args.shape, "weights_dtype": args.weights_dtype, "slots": args.slots,
        "prompt_len": args.prompt_len, "gen_len": args.gen_len, "spread": args.spread},
        "predicted_capacity_rps": capacity, "runs": []}
    with server(cmd, Path(args.out).with_suffix(".log")) as proc:
        if not wait_health(base, proc, 180):
            record["error"] = "server did not become healthy"
            return _write(args.out, record, 1)
        endpoint = parse_endpoint(base)
        limits = Limits(time_limit_s=args.time_limit, request_timeout_s=60.0)
        play(endpoint, _load(args, users=args.slots, requests=2 * args.slots), limits=limits)
        loads = [("rate", capacity * float(s)) for s in args.shares.split(",")]
        loads += [("concurrency", float(c)) for c in args.concurrency.split(",")]
        for kind, value in loads:
            load = (_load(args, rate=value) if kind == "rate"
                    else _load(args, users=int(value)))
            run = play(endpoint, load, limits=limits)
            predicted = predict(workload, device, load, options, knobs).figures
            row = _row(kind, value, run.figures(), predicted, run)
            record["runs"].append(row)
            ratio = row.get("ratio", {})
            print(f"{Path(args.model).name} {kind}={value:.2f}: measured/predicted "
                  + " ".join(f"{k[:-2]}={ratio.get(k) or 0:.2f}" for k in KEYS[:6]),
                  flush=True)
    return _write(args.out, record, 0)


def _write(path: str, record: dict[str, Any], code: int) -> int:
    Path(path).write_text(json.dumps(record, indent=1), encoding="utf-8")
    return code


if __name__ == "__main__":
    raise SystemExit(main())
