"""Do verdicts hold still? Repeat recommend --validate and time the validate suite (CUDA host).

1. The whole `hwadvisor validate --json` suite in a fresh process, wall time including start-up
   (target <= 60 s on an H200), run first, before this process opens a CUDA context.
2. `recommend --goal inference-latency --model llama-3-8b --batch B --validate --json`, in
   process through hwadvisor.pipeline, --runs times (3) for each B in --batches (1, 4, 16).

Prints a compact table last: one row per (batch, rule), one column per run with the verdict,
the measured factor (after/before of the rule's metric) and its 95% interval, and whether the
verdict flipped between runs ("FLIP" when confirmed and refuted both occur, "wavers" when a run
was inconclusive). Full JSON reports go under --out. Stops starting new runs once --max-s
(330 s) is spent so the whole script stays within 6 minutes.

    python benchmarks/validate_stability.py --out $OUT/stability
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

SUITE_TARGET_S = 60.0
DECIDED = ("confirmed", "refuted")


def run_suite(out: Path, timeout_s: float) -> dict[str, Any]:
    """The whole validate suite in a fresh interpreter; wall time includes start-up."""
    cmd = [sys.executable, "-m", "hwadvisor", "validate", "--json"]
    started = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s,
                              check=False)
    except subprocess.TimeoutExpired:
        return {"wall_s": time.perf_counter() - started, "exit_code": None,
                "error": f"timed out after {timeout_s:.0f} s", "trials": []}
    wall = time.perf_counter() - started
    (out / "validate_suite.json").write_text(proc.stdout, encoding="utf-8")
    result: dict[str, Any] = {"wall_s": wall, "exit_code": proc.returncode,
                              "stderr_tail": proc.stderr[-2000:], "trials": []}
    try:
        report = json.loads(proc.stdout)
    except json.JSONDecodeError:
        result["stdout_head"] = proc.stdout[:2000]
        return result
    result["trials"] = [{"id": t["id"], "status": t["status"], "wall_s": t.get("wall_s"),
                         "reason": t.get("reason")} for t in report.get("trials", [])]
    return result


def one_run(batch: int) -> Any:
    """recommend --goal inference-latency --model llama-3-8b --batch B --validate, in process."""
    from hwadvisor import pipeline
    from hwadvisor.workload import WorkloadRequest

    report = pipeline.recommend_report("inference-latency", None,
                                       WorkloadRequest(model="llama-3-8b", batch=batch))
    return pipeline.validate_recommendations(report)


def cell(v: dict[str, Any]) -> str:
    """Verdict, measured factor and interval in a few characters."""
    status = v.get("status") or "?"
    factor, ci = v.get("measured_factor"), v.get("ci")
    text = status[:5]
    if factor is not None:
        text += f" {factor:.3g}"
    if ci:
        text += f" [{ci[0]:.3g},{ci[1]:.3g}]"
    return text


def stability(statuses: list[str]) -> str:
    """FLIP when confirmed and refuted both occur, wavers when decided and inconclusive mix."""
    seen = set(statuses)
    if {"confirmed", "refuted"} <= seen:
        return "FLIP"
    if len(seen) > 1:
        return "wavers"
    return "stable"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("stability"))
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--max-s", type=float, default=330.0,
                        help="start no new run after this many seconds (whole script)")
    parser.add_argument("--skip-suite", action="store_true")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    summary: dict[str, Any] = {"runs": {}, "skipped_runs": []}

    if not args.skip_suite:
        summary["suite"] = run_suite(args.out, timeout_s=120.0)

    import torch

    if not torch.cuda.is_available():
        print("no CUDA GPU: nothing to check (the verdicts would be of the CPU)")
        return 3
    summary["device"] = torch.cuda.get_device_name(0)
    summary["torch"] = torch.__version__

    table: dict[tuple[int, str], list[dict[str, Any]]] = {}
    walls: dict[str, float] = {}
    for run in range(1, args.runs + 1):
        for batch in args.batches:
            name = f"b{batch}_run{run}"
            if time.perf_counter() - started > args.max_s:
                summary["skipped_runs"].append(name)
                continue
            t0 = time.perf_counter()
            report = one_run(batch)
            walls[name] = time.perf_counter() - t0
            data = json.loads(report.model_dump_json())
            (args.out / f"recommend_{name}.json").write_text(json.dumps(data, indent=1),
                                                            encoding="utf-8")
            for rec in data["recommendations"]:
                entry = dict(rec["validation"], run=run)
                table.setdefault((batch, rec["id"]), []).append(entry)
    summary["run_wall_s"] = walls

    rows = []
    flips = 0
    for (batch, rule), entries in sorted(table.items()):
        verdict = stability([e["status"] for e in entries])
        flips += verdict == "FLIP"
        rows.append({"batch": batch, "rule": rule, "stability": verdict,
                     "runs": [{k: e.get(k) for k in ("run", "status", "measured_factor", "ci",
                                                     "threshold", "runs")} for e in entries]})
    summary["rows"] = rows
    summary["flips"] = flips
    summary["wall_s"] = time.perf_counter() - started
    (args.out / "stability.json").write_text(json.dumps(summary, indent=1), encoding="utf-8")

    suite = summary.get("suite")
    if suite:
        ok = suite["wall_s"] <= SUITE_TARGET_S
        print(f"validate suite: {suite['wall_s']:.1f} s wall incl. start-up "
              f"(target <= {SUITE_TARGET_S:.0f} s: {'ok' if ok else 'MISSED'}), exit "
              f"{suite['exit_code']}")
        for t in suite["trials"]:
            print(f"  {t['id']:26s} {t['status']:12s} {t['wall_s'] or 0:6.1f} s")
    print(f"\n{'B':>3} {'rule':28s} " + " ".join(f"{'run ' + str(r):32s}"
                                             for r in range(1, args.runs + 1)) + " stability")
    for row in rows:
        cells = [cell(e) for e in row["runs"]]
        print(f"{row['batch']:>3} {row['rule']:28s} " + " ".join(f"{c:32s}" for c in cells)
              + f" {row['stability']}")
    print(f"\nflipped (confirmed and refuted across runs): {flips}; "
          f"skipped runs: {summary['skipped_runs'] or 'none'}; total {summary['wall_s']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
