"""Check the validator's measuring method on a real GPU (the lead runs this on the H200).

1. memory-bandwidth and matmul-peak through the trial API, against independent plain-torch
   timings of the same operations in the same process (targets: bandwidth >= 0.98x, matmul
   >= 0.97x of the plain figure: the method must not lose throughput to its own overhead);
2. the whole suite, `python -m hwadvisor validate --json`, in a subprocess, wall time including
   start-up (target <= 60 s), with each trial's status.
Prints a table last; writes everything as JSON to --out.

    python benchmarks/validate_h200.py --out $OUT/validate_h200.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

BANDWIDTH_TARGET = 0.98
MATMUL_TARGET = 0.97
SUITE_TARGET_S = 60.0


def _events_time(fn: Any, calls: int = 20, rounds: int = 7, warmup: int = 5) -> float:
    """Plain timing: median over rounds of (events around `calls` back-to-back calls) / calls."""
    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(rounds):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3 / calls)
    return statistics.median(times)


def plain_copy_gbps(buffer_bytes: int) -> float:
    """Independent device-to-device copy bandwidth (bytes read + written) over one buffer pair."""
    import torch

    n = buffer_bytes // 4
    src = torch.rand(n, device="cuda")
    dst = torch.empty_like(src)
    t = _events_time(lambda: dst.copy_(src))  # noqa: F821
    del src, dst
    torch.cuda.empty_cache()
    return 2 * n * 4 / t / 1e9


def plain_triad_gbps(buffer_bytes: int) -> float:
    """Independent triad bandwidth a = b + s*c (3 x bytes)."""
    import torch

    n = buffer_bytes // 4
    a = torch.empty(n, device="cuda")
    b = torch.rand(n, device="cuda")
    c = torch.rand(n, device="cuda")
    t = _events_time(lambda: torch.add(b, c, alpha=1.7, out=a))  # noqa: F821
    del a, b, c
    torch.cuda.empty_cache()
    return 3 * n * 4 / t / 1e9


def plain_matmul_tflops(fmt: str, size: int) -> float | None:
    """Independent torch.mm (or torch._scaled_mm for fp8) TFLOP/s at size^3."""
    import torch

    flops = 2.0 * size**3
    if fmt == "fp8":
        if torch.cuda.get_device_capability() < (8, 9):
            return None
        a = torch.randn(size, size, device="cuda").to(torch.float8_e4m3fn)
        b = torch.randn(size, size, device="cuda").to(torch.float8_e4m3fn)
        one = torch.tensor(1.0, device="cuda")

        def call() -> Any:
            return torch._scaled_mm(a, b.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16,  # noqa: F821
                                    use_fast_accum=True)
    else:
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "tf32": torch.float32}[fmt]
        a = torch.randn(size, size, device="cuda", dtype=dtype)
        b = torch.randn(size, size, device="cuda", dtype=dtype)

        def call() -> Any:
            return torch.mm(a, b.t())  # noqa: F821
    previous = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = fmt == "tf32"
    try:
        # One event pair per product, median of 30: the same burst pattern as the trial and as
        # triton's do_bench. Twenty back-to-back 8192^3 products per timing run the H200 into its
        # power limit (seen 2026-11-30: 688 vs 775 TFLOP/s), which measures something else.
        t = _events_time(call, calls=1, rounds=30)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous
    del a, b
    torch.cuda.empty_cache()
    return flops / t / 1e12


def run_suite(quick: bool) -> dict[str, Any]:
    """Run the whole validate suite in a fresh interpreter; wall time includes start-up."""
    cmd = [sys.executable, "-m", "hwadvisor", "validate", "--json"]
    if quick:
        cmd.append("--quick")
    started = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=400, check=False)
    wall = time.perf_counter() - started
    out: dict[str, Any] = {"wall_s": wall, "exit_code": proc.returncode,
                           "stderr_tail": proc.stderr[-3000:]}
    try:
        report = json.loads(proc.stdout)
        # Keep the whole validate report too: docs/benchmarks.md quotes it.
        Path(os.environ.get("HWADVISOR_SUITE_REPORT", "validate_suite_report.json")).write_text(
            proc.stdout, encoding="utf-8")
        out["trials"] = [
            {"id": t["id"], "status": t["status"], "wall_s": t.get("wall_s"),
             "effect": t.get("effect"), "reason": t.get("reason"), "summary": t.get("summary"),
             "max_error": t.get("max_error"), "busy_gpu": t.get("busy_gpu")}
            for t in report.get("trials", [])
        ]
    except json.JSONDecodeError:
        out["trials"] = []
        out["stdout_head"] = proc.stdout[:2000]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("validate_h200.json"))
    parser.add_argument("--skip-suite", action="store_true")
    parser.add_argument("--suite-quick", action="store_true", help="run the suite with --quick")
    args = parser.parse_args()

    result: dict[str, Any] = {"rows": []}
    # The suite runs first, in its own process, before this one opens a CUDA context: otherwise
    # this process holds GPU memory and the suite rightly reports the GPU as busy.
    if not args.skip_suite:
        result["suite"] = run_suite(args.suite_quick)

    import torch

    from hwadvisor.trials.bandwidth import buffer_bytes
    from hwadvisor.trials.base import TrialContext
    from hwadvisor.validator.runner import run_trials

    if not torch.cuda.is_available():
        print("no CUDA GPU: nothing to check")
        return 3
    result.update({"device": torch.cuda.get_device_name(0), "torch": torch.__version__})
    rows: list[dict[str, Any]] = result["rows"]

    ctx = TrialContext(quick=False)
    t0 = time.perf_counter()
    trials, _ = run_trials(["memory-bandwidth", "matmul-peak"], ctx, progress=None)
    result["trials_wall_s"] = time.perf_counter() - t0
    result["trials"] = [json.loads(t.model_dump_json()) for t in trials]
    bw, mm = trials
    torch.cuda.empty_cache()

    nbytes = buffer_bytes("cuda:0", quick=False)
    plain = {"copy_gbps": plain_copy_gbps(nbytes), "triad_gbps": plain_triad_gbps(nbytes)}
    for key, target in (("copy_gbps", BANDWIDTH_TARGET), ("triad_gbps", BANDWIDTH_TARGET)):
        ours = bw.effect.get(key)
        rows.append({"what": key, "trial": ours, "plain": plain[key], "target": target,
                     "ratio": ours / plain[key] if ours else None})
    from hwadvisor.trials.matmul import GPU_SIZE

    for fmt in ("bf16", "fp16", "tf32", "fp8"):
        ours = mm.effect.get(f"{fmt}_tflops")
        try:
            theirs = plain_matmul_tflops(fmt, GPU_SIZE)
        except Exception as exc:  # noqa: BLE001 - report and go on
            theirs = None
            rows.append({"what": f"{fmt}_tflops plain failed", "error": str(exc)[:200]})
        rows.append({"what": f"{fmt}_tflops", "trial": ours, "plain": theirs,
                     "target": MATMUL_TARGET,
                     "ratio": ours / theirs if ours and theirs else None})
    torch.cuda.empty_cache()

    tmp = args.out.with_suffix(".tmp")
    tmp.write_text(json.dumps(result, indent=2))
    os.replace(tmp, args.out)

    print(f"\ndevice {result['device']} · torch {result['torch']}")
    if "suite" in result:
        suite = result["suite"]
        print(f"\nsuite: exit {suite['exit_code']}, wall {suite['wall_s']:.1f} s "
              f"(target <= {SUITE_TARGET_S:.0f} s)")
        for t in suite["trials"]:
            effect = ", ".join(f"{k}={v:.3g}" for k, v in (t["effect"] or {}).items())[:110]
            wall = f"{t['wall_s']:.1f}s" if t["wall_s"] is not None else "-"
            print(f"  {t['id']:<26} {t['status']:<12} {wall:>6}  {effect}")
            if t["reason"]:
                print(f"      reason: {t['reason'][:200]}")
    print(f"\n{'figure':<14} {'trial':>10} {'plain':>10} {'ratio':>7} {'target':>7}  ok")
    for row in rows:
        if "error" in row:
            print(f"{row['what']}: {row['error']}")
            continue
        ratio = row["ratio"]
        ok = ratio is not None and ratio >= row["target"]
        fmt = lambda x: f"{x:10.1f}" if x is not None else f"{'-':>10}"  # noqa: E731
        print(f"{row['what']:<14} {fmt(row['trial'])} {fmt(row['plain'])} "
              f"{(f'{ratio:7.3f}' if ratio else '      -')} {row['target']:7.2f}  "
              f"{'yes' if ok else 'NO'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
