"""Does `compare` hold on a shared runner? Real back-to-back `validate` runs, gated.

1. --pairs same-code pairs of `hwadvisor validate --quick` (each run a fresh process), each
   compared at the default limit: every pair should exit 0.
2. A throttled pair: `validate --quick --repeat R -t T...` against the same with a real 10%
   slowdown (every host-timed sample sleeps a tenth of its own duration inside the timed
   window, so times read 1.1x and rates 1/1.1; on a GPU the device idles a tenth of the timed
   work between the last kernel and the end event), and a same-code pair of those for contrast:
   exit 1 and exit 0 expected where the trials' runs are steadier than 10%. The plain
   single-run command with the same slowdown is compared too (one run a side does not gate
   timings: that pair exits 0 by design).
3. A lost trial: a run whose int4-weight-only trial fails (an injected error) against a
   same-code run: exit 1, the lost trial named in the headline.
4. A memory regression: `validate --quick -t activation-checkpointing` against the same with
   one block in four no longer checkpointed (a pinned path that keeps its activations): the
   activation bytes are deterministic, so this gates on a CPU too; exit 1 expected.

Writes every report, comparison and a summary.json under --out; prints a markdown table.

    python benchmarks/gate_pairs.py --out /tmp/gate-pairs --pairs 20
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SLOWDOWN = 0.10
LOST_TRIAL = "int4-weight-only"


def _child(mode: str, argv: list[str]) -> None:
    """Run the CLI in this process with a throttle or a lost trial injected, then exit."""
    sys.path.insert(0, str(REPO))
    if mode == "throttle":
        from hwadvisor.trials.kit import timing

        def slower(fn: Any, inner: int, counter: list[int], device: str) -> float:
            timing.sync(device)
            t0 = time.perf_counter()
            for _ in range(inner):
                fn(counter[0])
                counter[0] += 1
            timing.sync(device)
            time.sleep((time.perf_counter() - t0) * SLOWDOWN)  # inside the timed window
            return (time.perf_counter() - t0) / inner

        def slower_events(event_type: Any, fn: Any, inner: int, counter: list[int]) -> float:
            # The GPU's clock: the queue is drained, the host sleeps a tenth of the work's time,
            # then the end event is queued, so the device sits idle inside the timed window.
            start = event_type(enable_timing=True)
            end = event_type(enable_timing=True)
            t0 = time.perf_counter()
            start.record()
            for _ in range(inner):
                fn(counter[0])
                counter[0] += 1
            done = event_type(enable_timing=True)
            done.record()
            done.synchronize()
            time.sleep((time.perf_counter() - t0) * SLOWDOWN)
            end.record()
            end.synchronize()
            return float(start.elapsed_time(end)) / 1e3 / inner

        timing._time_host = slower  # what timer_for hands out for the CPU
        timing._time_events = slower_events  # CUDA/HIP and Metal events
    elif mode == "partial-checkpoint":
        import torch.utils.checkpoint as ckpt

        real_checkpoint = ckpt.checkpoint
        calls = [0]

        def partial(function: Any, *args: Any, **kwargs: Any) -> Any:
            calls[0] += 1
            if calls[0] % 4 == 1:  # this block keeps its activations: no recompute
                return function(*args)
            return real_checkpoint(function, *args, **kwargs)

        ckpt.checkpoint = partial
    elif mode == "lose":
        from hwadvisor.models import TrialResult
        from hwadvisor.validator import runner

        real = runner.run_one

        def losing(trial_id: str, *args: Any, **kwargs: Any) -> TrialResult:
            if trial_id == LOST_TRIAL:
                return TrialResult(id=trial_id, status="error",
                                   reason="injected: the int4 kernel is gone in this build")
            return real(trial_id, *args, **kwargs)

        runner.run_one = losing
    from hwadvisor.__main__ import main

    sys.argv = ["hwadvisor", *argv]
    main()


def validate(out: Path, name: str, *extra: str, mode: str | None = None) -> dict[str, Any]:
    """Run validate --quick in a fresh process; return its exit code, wall time and path."""
    path = out / f"{name}.json"
    args = ["validate", "--quick", "-o", str(path), *extra]
    cmd = ([sys.executable, __file__, "--child", mode, "--", *args] if mode
           else [sys.executable, "-m", "hwadvisor", *args])
    started = time.perf_counter()
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, check=False)
    return {"path": str(path), "exit": done.returncode,
            "wall_s": round(time.perf_counter() - started, 1),
            "stderr_tail": done.stderr.strip().splitlines()[-1:] if done.returncode not in (0,)
            else []}


def compare(out: Path, name: str, base: dict[str, Any], cur: dict[str, Any]) -> dict[str, Any]:
    """Compare two reports at the default limit; return exit code, headline, regressions."""
    path = out / f"{name}.compare.json"
    done = subprocess.run([sys.executable, "-m", "hwadvisor", "compare", base["path"],
                           cur["path"], "--json", "-o", str(path)],
                          cwd=REPO, capture_output=True, text=True, check=False)
    result: dict[str, Any] = {"name": name, "exit": done.returncode,
                              "runs_s": [base["wall_s"], cur["wall_s"]],
                              "validate_exits": [base["exit"], cur["exit"]]}
    if path.exists():
        data = json.loads(path.read_text())
        result["headline"] = data["headline"]
        result["regressions"] = data["regressions"][:5]
        result["gated"] = sum(1 for f in data["figures"] if f["gated"])
        result["figures"] = len(data["figures"])
    else:
        result["error"] = done.stderr.strip()[-300:]
    return result


def versions() -> dict[str, str]:
    """Python, torch, the CPU and the number of cores: where the pairs ran."""
    import os

    torch = subprocess.run([sys.executable, "-c", "import torch; print(torch.__version__)"],
                           capture_output=True, text=True, check=False).stdout.strip()
    cpu = next((line.split(":", 1)[1].strip() for line in
                Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor()) \
        if Path("/proc/cpuinfo").exists() else platform.processor()
    return {"python": platform.python_version(), "torch": torch, "cpu": cpu,
            "cores": str(os.cpu_count()), "load_at_start": " ".join(
                f"{x:.2f}" for x in os.getloadavg())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--pairs", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--throttle-trial", action="append",
                        default=None, help="trials of the throttled pair (repeatable)")
    parser.add_argument("--only-memory", action="store_true",
                        help="run only the memory-regression pairs (4.)")
    parser.add_argument("--max-s", type=float, default=3600.0,
                        help="stop starting same-code pairs once this much time is spent")
    args = parser.parse_args()
    trials = args.throttle_trial or ["matmul-peak", "memory-bandwidth"]
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    summary: dict[str, Any] = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                               "machine": versions(), "pairs": [], "throttled": [], "lost": []}

    def save() -> None:
        summary["elapsed_s"] = round(time.perf_counter() - started, 1)
        (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")

    if args.only_memory:
        memory_pairs(out, summary)
        save()
        print_table(summary)
        return
    picked = [a for t in trials for a in ("-t", t)]
    repeat = ["--repeat", str(args.repeat), *picked]
    base = validate(out, "throttle-base", *repeat)
    same = validate(out, "throttle-same", *repeat)
    slow = validate(out, "throttle-slow", *repeat, mode="throttle")
    summary["throttled"].append(compare(out, "repeat same code", base, same))
    summary["throttled"].append(compare(out, "repeat 10% slower", base, slow))
    one_base = validate(out, "single-base")
    one_slow = validate(out, "single-slow", mode="throttle")
    summary["throttled"].append(compare(out, "single run 10% slower", one_base, one_slow))
    lost = validate(out, "lost", mode="lose")
    summary["lost"].append(compare(out, "lost trial", one_base, lost))
    memory_pairs(out, summary)
    save()
    for i in range(args.pairs):
        if time.perf_counter() - started > args.max_s:
            break
        a = validate(out, f"pair{i:02d}-a")
        b = validate(out, f"pair{i:02d}-b")
        summary["pairs"].append(compare(out, f"pair {i}", a, b))
        save()
    print_table(summary)


def memory_pairs(out: Path, summary: dict[str, Any]) -> None:
    """The checkpointing trial as is, again, and with one block in four not checkpointed."""
    ckpt = ["-t", "activation-checkpointing"]
    full = validate(out, "ckpt-base", *ckpt)
    same = validate(out, "ckpt-same", *ckpt)
    partial = validate(out, "ckpt-partial", *ckpt, mode="partial-checkpoint")
    summary["lost"].append(compare(out, "checkpointing same code", full, same))
    summary["lost"].append(compare(out, "one block in four not checkpointed", full, partial))


def print_table(summary: dict[str, Any]) -> None:
    """Print the results as a markdown table."""
    print(f"{summary['date']}, {summary['machine']}")
    print("| pair | compare exit | validate exits | wall s | headline |")
    print("|---|---|---|---|---|")
    for row in summary["throttled"] + summary["lost"] + summary["pairs"]:
        print(f"| {row['name']} | {row['exit']} | {row['validate_exits']} | {row['runs_s']} | "
              f"{row.get('headline', row.get('error', ''))} |")


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        _child(sys.argv[2], sys.argv[4:])
    else:
        main()
