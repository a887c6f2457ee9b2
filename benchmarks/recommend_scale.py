"""How fast `recommend` is: the largest preset on 8 GPUs, and every preset x every profile.

Targets: one recommend for the largest preset on 8 GPUs <= 0.5 s (each goal); all presets x all
profiles (default goal) <= 3 s in total. Prints the figures; exits 1 when over a target.
Run: python benchmarks/recommend_scale.py [--all-goals]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from hwadvisor import profiles
from hwadvisor.pipeline import recommend_report
from hwadvisor.rules.playbook import DEFAULT_GOAL, GOAL_PHASE, GOALS
from hwadvisor.workload import WorkloadRequest, list_presets

LARGEST_TARGET_S = 0.5
MATRIX_TARGET_S = 3.0


def _options(model: str, gpus: int = 1) -> WorkloadRequest:
    return WorkloadRequest(model=model, gpus=gpus)


def largest_preset() -> str:
    """The preset with the most parameters."""
    from hwadvisor.workload import count_params, load_spec

    return max(list_presets(), key=lambda p: count_params(load_spec(p))[0])


def time_largest(model: str, repeats: int = 5) -> dict[str, float]:
    """Median seconds of one recommend per goal, for the model on 8 x h200-sxm."""
    out: dict[str, float] = {}
    for goal in GOALS:
        samples = []
        for _ in range(repeats):
            start = time.perf_counter()
            recommend_report(goal, "h200-sxm", _options(model, 8))
            samples.append(time.perf_counter() - start)
        out[goal] = statistics.median(samples)
    return out


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
    """Run both benchmarks, print the figures, return 1 when a target is missed."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--all-goals", action="store_true",
                        help="run the matrix for all three goals (target scaled by 3)")
    args = parser.parse_args()
    model = largest_preset()
    # warm-up: imports, profile and preset parsing, rule loading (cached after the first call)
    recommend_report(DEFAULT_GOAL, "h200-sxm", _options(model, 8))
    failed = False

    per_goal = time_largest(model)
    for goal, seconds in per_goal.items():
        verdict = "ok" if seconds <= LARGEST_TARGET_S else "OVER TARGET"
        failed |= seconds > LARGEST_TARGET_S
        print(f"largest preset {model} ({GOAL_PHASE[goal]}) on 8 x h200-sxm, goal {goal}: "  # type: ignore[index]
              f"{seconds * 1e3:.0f} ms (target {LARGEST_TARGET_S * 1e3:.0f} ms) {verdict}")

    goals = tuple(GOALS) if args.all_goals else (DEFAULT_GOAL,)
    target = MATRIX_TARGET_S * len(goals)
    seconds, runs = time_matrix(goals)
    verdict = "ok" if seconds <= target else "OVER TARGET"
    failed |= seconds > target
    print(f"{len(list_presets())} presets x {len(profiles.ids())} profiles x {len(goals)} goal(s) "
          f"= {runs} recommends: {seconds:.2f} s ({seconds / runs * 1e3:.1f} ms each; "
          f"target {target:.1f} s) {verdict}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
