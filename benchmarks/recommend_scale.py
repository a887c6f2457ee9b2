"""How fast `recommend` (the whole plan search) is.

Targets (the plans issue): for the largest preset (a 671B MoE) on 8 GPUs, <= 20 ms per call in
process and <= 0.5 s wall from the CLI, per goal; every preset x every profile with the default
goal at <= 25 ms per recommend on average. Prints the figures; exits 1 when over a target.
Run: python benchmarks/recommend_scale.py [--all-goals] [--no-matrix] [--bytecompile]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

from hwadvisor import profiles
from hwadvisor.pipeline import recommend_report
from hwadvisor.rules.playbooks.goals import DEFAULT_GOAL, GOALS, goal_spec
from hwadvisor.workload import WorkloadRequest, list_presets

IN_PROCESS_TARGET_S = 0.020
CLI_TARGET_S = 0.5
MATRIX_PER_RUN_TARGET_S = 0.025


def _options(model: str, gpus: int = 1) -> WorkloadRequest:
    return WorkloadRequest(model=model, gpus=gpus)


def largest_preset() -> str:
    """The preset with the most parameters."""
    from hwadvisor.workload import count_params, load_spec

    return max(list_presets(), key=lambda p: count_params(load_spec(p))[0])


def median_s(run: Callable[[], object], repeats: int) -> float:
    """Median seconds of `repeats` calls of run."""
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def time_largest(model: str, repeats: int = 7) -> dict[str, float]:
    """Median seconds of one recommend per goal, for the model on 8 x h200-sxm, in process."""
    return {goal: median_s(lambda g=goal: recommend_report(g, "h200-sxm", _options(model, 8)),
                           repeats) for goal in GOALS}


def time_cli(model: str, repeats: int = 3) -> dict[str, float]:
    """Median wall seconds of `hwadvisor recommend --json` per goal, a fresh process each."""
    def run(goal: str) -> None:
        subprocess.run([sys.executable, "-m", "hwadvisor", "recommend", "--goal", goal,
                        "--device", "h200-sxm", "--model", model, "--gpus", "8", "--json"],
                       check=True, capture_output=True)

    return {goal: median_s(lambda g=goal: run(g), repeats) for goal in GOALS}


def time_matrix(goals: tuple[str, ...]) -> tuple[float, int]:
    """Seconds for recommend over every preset x profile (x goal), and how many runs."""
    runs = 0
    start = time.perf_counter()
    for profile_id in profiles.ids():
        for model in list_presets():
            for goal in goals:
                recommend_report(goal, profile_id, _options(model))  # type: ignore[arg-type]
                runs += 1
    return time.perf_counter() - start, runs


def main() -> int:
    """Run the benchmarks, print the figures, return 1 when a target is missed."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--all-goals", action="store_true",
                        help="run the matrix for all three goals")
    parser.add_argument("--no-matrix", action="store_true", help="skip the preset x profile run")
    parser.add_argument("--bytecompile", action="store_true",
                        help="byte-compile the CLI's packages first, as a pip install does")
    args = parser.parse_args()
    # The CLI figures are a fresh process each: without cached bytecode (an editable install
    # under PYTHONDONTWRITEBYTECODE) every run compiles hwadvisor from source, which users'
    # installs do not (probe_startup.py has the same check).
    from probe_startup import bytecompile, without_bytecode

    if args.bytecompile:
        failed = bytecompile()
        print("byte-compiled the CLI's packages" + (f"; failed: {', '.join(failed)}"
                                                    if failed else ""))
    missing = without_bytecode()
    if missing:
        print(f"note: no cached bytecode for {', '.join(missing)}: the CLI figures include "
              "compiling them (--bytecompile for an installed package's figures)")
    model = largest_preset()
    # warm-up: imports, profile and preset parsing, rule loading (cached after the first call)
    recommend_report(DEFAULT_GOAL, "h200-sxm", _options(model, 8))
    failed = False
    for label, timings, target in (("in process", time_largest(model), IN_PROCESS_TARGET_S),
                                   ("CLI, fresh process", time_cli(model), CLI_TARGET_S)):
        for goal, seconds in timings.items():
            verdict = "ok" if seconds <= target else "OVER TARGET"
            failed |= seconds > target
            print(f"{model} ({goal_spec(goal).phase}) on 8 x h200-sxm, goal {goal}, {label}: "  # type: ignore[index]
                  f"{seconds * 1e3:.0f} ms (target {target * 1e3:.0f} ms) {verdict}")
    if not args.no_matrix:
        goals = tuple(GOALS) if args.all_goals else (DEFAULT_GOAL,)
        seconds, runs = time_matrix(goals)
        per_run = seconds / runs
        verdict = "ok" if per_run <= MATRIX_PER_RUN_TARGET_S else "OVER TARGET"
        failed |= per_run > MATRIX_PER_RUN_TARGET_S
        print(f"{len(list_presets())} presets x {len(profiles.ids())} profiles x {len(goals)} "
              f"goal(s) = {runs} recommends: {seconds:.2f} s ({per_run * 1e3:.1f} ms each; "
              f"target {MATRIX_PER_RUN_TARGET_S * 1e3:.0f} ms) {verdict}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
