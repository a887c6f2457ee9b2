"""Compare the collectives trial's own launcher with the same trial run across a torchrun job.

    python benchmarks/cluster_compare.py OWN.json TORCHRUN.json [--out compare.json]

OWN.json: `hwadvisor validate --trial collectives --json`; TORCHRUN.json: `torchrun
--nproc-per-node N -m hwadvisor validate --trial collectives --json` on the same host. Prints
each op's bus bandwidth at each size from both, their ratio, and whether the job is within
±5% of the own launcher at the largest size (the target); exit 1 when it is not, 0 when it is
or when there is nothing to compare (one GPU), which it says.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

TARGET = 0.05  # torchrun must give the own launcher's bus bandwidth within ±5%


def effects(path: Path) -> tuple[dict[str, float], str]:
    """Return the collectives trial's effects (name -> GB/s) and its status from a report."""
    report = json.loads(path.read_text())
    trial = next((t for t in report["trials"] if t["id"] == "collectives"), None)
    if trial is None:
        return {}, "absent"
    return {e["name"]: e["value"] for e in trial["effects"]}, str(trial["status"])


def main() -> int:
    """Print the comparison; return the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("own", type=Path)
    parser.add_argument("job", type=Path)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    own, own_status = effects(args.own)
    job, job_status = effects(args.job)
    rows = []
    for key in sorted(own):
        if key.endswith("_busbw_gbps") and key != "busbw_gbps" and key in job:
            rows.append({"figure": key, "own_gbps": own[key], "torchrun_gbps": job[key],
                         "ratio": job[key] / own[key] if own[key] else None})
    print(f"own launcher: {own_status}; torchrun: {job_status}")
    print(f"{'figure':44} {'own GB/s':>10} {'torchrun':>10} {'ratio':>7}")
    for row in rows:
        ratio = f"{row['ratio']:.3f}" if row["ratio"] is not None else "—"
        print(f"{row['figure']:44} {row['own_gbps']:10.1f} {row['torchrun_gbps']:10.1f} "
              f"{ratio:>7}")
    largest = [r for r in rows if "_1gib_" in r["figure"] and r["ratio"] is not None]
    within = all(abs(r["ratio"] - 1) <= TARGET for r in largest)
    if not largest:
        print("nothing to compare at 1 GiB (needs >= 2 GPUs on this host)")
    else:
        print(f"1 GiB within ±{TARGET:.0%}: {'yes' if within else 'NO'}")
    if args.out:
        args.out.write_text(json.dumps({"rows": rows, "within_target": within if largest
                                        else None}, indent=1))
    return 0 if within or not largest else 1


if __name__ == "__main__":
    sys.exit(main())
