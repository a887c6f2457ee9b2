"""Start-up time of `hwadvisor probe --json` against two references.

- `python -m torch.utils.collect_env` (target: probe <= 0.10 x collect_env);
- merely importing the probe's own dependencies, `python -c "import pydantic, typer, psutil,
  pynvml"` (target: probe <= 1.5 x deps): what hwadvisor itself adds on top of them. Two more
  lines show where that floor lies: `deps_basemodel` also imports pydantic's BaseModel (a bare
  `import pydantic` is a lazy shim that loads almost nothing), and `models_floor` defines
  hwadvisor's models and builds one empty report, the least a probe built on them can do.

All run as fresh subprocesses of this interpreter, alternating, several times each; the
medians are printed, and probe/deps as the median of each round's own ratio with its 95%
interval (the host's speed drifts between rounds). Without torch, collect_env fails and
only the deps ratio is given.

    python benchmarks/probe_startup.py [--runs 5] [--json out.json] [--bytecompile]
"""

from __future__ import annotations

import argparse
import compileall
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from hwadvisor.models.stats import median_interval

TARGET_RATIO = 0.10
TARGET_DEPS_RATIO = 1.5
COMMANDS = {
    "probe": [sys.executable, "-m", "hwadvisor", "probe", "--json"],
    "collect_env": [sys.executable, "-m", "torch.utils.collect_env"],
    "deps": [sys.executable, "-c", "import pydantic, typer, psutil, pynvml"],
    "deps_basemodel": [sys.executable, "-c", "import pydantic, typer, psutil, pynvml; "
                       "from pydantic import BaseModel, ConfigDict, Field"],
    "models_floor": [sys.executable, "-c", "import os; os.environ['PYDANTIC_DISABLE_PLUGINS']"
                     " = '__all__'; import pydantic, typer, psutil, pynvml; from hwadvisor."
                     "models import HostInfo, Report; Report(host=HostInfo()).model_dump_json()"],
}


# Top-level packages the probe imports: when one has no cached bytecode and writing it is off
# (PYTHONDONTWRITEBYTECODE), every run compiles it from source, which a pip install avoids.
PROBE_PATH_PACKAGES = ("hwadvisor", "typer", "pydantic", "pydantic_core", "annotated_types",
                       "psutil", "pynvml")


def without_bytecode(packages: tuple[str, ...] = PROBE_PATH_PACKAGES) -> list[str]:
    """Packages on the probe path whose main file has no cached bytecode next to it."""
    missing = []
    for name in packages:
        spec = importlib.util.find_spec(name)
        origin = spec.origin if spec else None
        if origin and origin.endswith(".py"):
            if not Path(importlib.util.cache_from_source(origin)).exists():
                missing.append(name)
    return missing


def bytecompile(packages: tuple[str, ...] = PROBE_PATH_PACKAGES) -> list[str]:
    """Byte-compile the packages as pip does on install; return those that failed."""
    failed = []
    for name in packages:
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.origin:
            continue
        origin = Path(spec.origin)
        if spec.submodule_search_locations:
            ok = compileall.compile_dir(origin.parent, quiet=2)
        else:
            ok = origin.suffix != ".py" or compileall.compile_file(origin, quiet=2)
        if not ok:
            failed.append(name)
    return failed


def time_once(argv: list[str], timeout_s: float) -> float | None:
    """Wall seconds of one run; None when the command failed (its time would mislead)."""
    start = time.perf_counter()
    try:
        done = subprocess.run(argv, capture_output=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    elapsed = time.perf_counter() - start
    return elapsed if done.returncode == 0 else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="runs of each command (default 5)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per run")
    parser.add_argument("--json", type=Path, default=None, help="write the figures here")
    parser.add_argument("--bytecompile", action="store_true",
                        help="byte-compile the probe's packages first, as a pip install does")
    parser.add_argument("--no-collect-env", action="store_true",
                        help="leave collect_env out (seconds per round, and it disturbs the "
                        "host): many rounds of the deps ratio alone")
    args = parser.parse_args(argv)
    commands = {name: argv_ for name, argv_ in COMMANDS.items()
                if not (args.no_collect_env and name == "collect_env")}
    if args.bytecompile:
        failed = bytecompile()
        print("byte-compiled the probe's packages"
              + (f"; failed: {', '.join(failed)}" if failed else ""))

    no_bytecode = without_bytecode()
    if no_bytecode:
        print(f"note: no cached bytecode for {', '.join(no_bytecode)}"
              + (" and PYTHONDONTWRITEBYTECODE is set: each run compiles them from source"
                 if os.environ.get("PYTHONDONTWRITEBYTECODE") else
                 " (the warm-up run writes it)"))
    samples: dict[str, list[float]] = {name: [] for name in COMMANDS}
    failures: dict[str, int] = {name: 0 for name in COMMANDS}
    rounds: dict[str, list[float | None]] = {name: [] for name in COMMANDS}
    # One warm-up run each (file cache, .pyc), not counted; then alternate so drift hits both.
    for argv_ in commands.values():
        time_once(argv_, args.timeout)
    for _ in range(args.runs):
        for name, argv_ in commands.items():
            seconds = time_once(argv_, args.timeout)
            rounds[name].append(seconds)
            if seconds is None:
                failures[name] += 1
            else:
                samples[name].append(seconds)

    medians = {name: statistics.median(s) if s else None for name, s in samples.items()}
    ratio = (medians["probe"] / medians["collect_env"]
             if medians["probe"] and medians["collect_env"] else None)
    # The host's speed drifts between rounds by more than the difference sought: each round's
    # probe is divided by the same round's deps run, and the median of those ratios (with
    # its distribution-free 95% interval) decides.
    paired = [p / d for p, d in zip(rounds["probe"], rounds["deps"], strict=True) if p and d]
    deps_ratio = statistics.median(paired) if paired else None
    deps_ci = median_interval(paired)
    floors = {name: medians[name] / medians["deps"] if medians[name] and medians["deps"]
              else None for name in ("deps_basemodel", "models_floor")}
    for name in commands:
        median = medians[name]
        shown = "failed" if median is None else f"{median * 1000:8.1f} ms"
        spread = (f"(min {min(samples[name]) * 1000:.1f}, max {max(samples[name]) * 1000:.1f})"
                  if samples[name] else "")
        print(f"{name:12s} median {shown} {spread}  runs {len(samples[name])}, "
              f"failed {failures[name]}")
    if ratio is None:
        print("ratio probe/collect_env: n/a (" + ("not run" if args.no_collect_env
                                                   else "a command failed") + ")")
    else:
        verdict = "meets" if ratio <= TARGET_RATIO else "misses"
        print(f"ratio probe/collect_env = {ratio:.3f} ({verdict} the {TARGET_RATIO:.2f}x target)")
    if deps_ratio is None:
        print("ratio probe/deps: n/a (a command failed)")
    else:
        verdict = "meets" if deps_ratio <= TARGET_DEPS_RATIO else "misses"
        if deps_ci is not None and deps_ci[1] <= TARGET_DEPS_RATIO:
            verdict = "meets, the whole interval below"
        elif deps_ci is not None and deps_ci[0] > TARGET_DEPS_RATIO:
            verdict = "misses, the whole interval above"
        interval = f" [{deps_ci[0]:.2f}, {deps_ci[1]:.2f}]" if deps_ci else ""
        print(f"ratio probe/deps = {deps_ratio:.2f}{interval}, the median of {len(paired)} "
              f"rounds' ratios ({verdict} the {TARGET_DEPS_RATIO:.1f}x target: the probe "
              "against importing pydantic, typer, psutil and pynvml)")
        for name, floor in floors.items():
            if floor is not None:
                print(f"  for scale: {name}/deps = {floor:.2f}")

    if args.json is not None:
        record = {
            "what": "median wall seconds of fresh subprocesses, alternating",
            "commands": {name: " ".join(Path(a).name if i == 0 else a for i, a in enumerate(c))
                         for name, c in COMMANDS.items()},
            "samples_s": samples,
            "failures": failures,
            "median_s": medians,
            "ratio": ratio,
            "target_ratio": TARGET_RATIO,
            "deps_ratio": deps_ratio,
            "deps_ratio_ci95": deps_ci,
            "deps_ratios_by_round": paired,
            "target_deps_ratio": TARGET_DEPS_RATIO,
            "floor_ratios": floors,
            "without_bytecode": no_bytecode,
            "dont_write_bytecode": bool(os.environ.get("PYTHONDONTWRITEBYTECODE")),
            "python": platform.python_version(),
            "machine": platform.machine(),
            "cpu_count": os.cpu_count(),
            "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        _write_atomic(args.json, json.dumps(record, indent=2) + "\n")
    return 0 if ratio is not None or deps_ratio is not None else 1


def _write_atomic(path: Path, text: str) -> None:
    folder = path.parent if str(path.parent) else Path(".")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


if __name__ == "__main__":
    sys.exit(main())
