"""Run the model-level trials at full size and save each result as JSON (for the GPU machine).

    python benchmarks/model_trials.py [--out DIR] [--model llama-3-8b] [--budget 5] [--quick]
        [--only activation-checkpointing,cuda-graphs,...]

Each trial's TrialResult goes to DIR/<id>.json; a one-line table is printed last. A trial that
fails is recorded (status error, reason) and the next one still runs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

IDS = ["kv-cache-quantization", "attention-backends", "activation-checkpointing", "cuda-graphs",
       "torch-compile", "collectives"]


def _workload(model: str | None):
    if not model:
        return None
    try:
        from hwadvisor.models import Workload
        from hwadvisor.workload import load_spec

        return Workload(model=model, spec=load_spec(model))
    except Exception as exc:  # noqa: BLE001 - fall back to the documented default widths
        print(f"note: workload {model!r} not loaded ({exc}); default widths", file=sys.stderr)
        return None


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "model_trials_out"))
    ap.add_argument("--model", default=None)
    ap.add_argument("--budget", type=float, default=5.0)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", default=",".join(IDS))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)

    from hwadvisor.report.io import write_text_atomic
    from hwadvisor.trials.base import TrialContext
    from hwadvisor.trials.registry import get_trial

    ctx = TrialContext(workload=_workload(args.model), budget_s=args.budget, quick=args.quick)
    rows = []
    for trial_id in args.only.split(","):
        t0 = time.perf_counter()
        try:
            result = get_trial(trial_id).run(ctx)
            data = result.model_dump(mode="json")
        except Exception as exc:  # noqa: BLE001 - record and go on
            data = {"id": trial_id, "status": "error", "reason": f"{type(exc).__name__}: {exc}"}
        data["_script_wall_s"] = time.perf_counter() - t0
        # Atomic, like the CLI's reports: a run killed mid-write leaves no half file.
        write_text_atomic(Path(args.out) / f"{trial_id}.json", json.dumps(data, indent=1))
        rows.append((trial_id, data.get("status"), data.get("effect"), data.get("reason"),
                     data.get("summary")))
        print(f"[{trial_id}] {data.get('status')} {data['_script_wall_s']:.1f}s "
              f"{data.get('summary') or data.get('reason')}", flush=True)
    print("\n== model trials ==")
    for trial_id, status, effect, reason, _summary in rows:
        short = {k: round(v, 4) for k, v in (effect or {}).items()
                 if k in ("speedup", "memory_factor", "time_factor", "compile_s", "busbw_gbps",
                          "output_rel_error")}
        why = "" if status == "ok" else (reason or "")[:300]
        print(f"{trial_id:26s} {status:12s} {short} {why}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
