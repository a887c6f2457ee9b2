"""The llama-server flags hwadvisor emits for each benchmarked workload, as JSON.

Runs `hwadvisor recommend --goal inference-latency --device h200-sxm --engine llamacpp --json`
for each (batch, prompt, gen) case and keeps the plan's engine and its config text with the
command and model placeholder taken off (the caller passes -m with the GGUF file).

Usage: python plan_flags.py OUT.json MODEL WEIGHTS B:P:G [B:P:G ...]
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path


def flags_for(model: str, weights: str, batch: int, prompt: int, gen: int) -> dict:
    """Run recommend for one case; return the engine, the full text and the flags after -m."""
    cmd = [
        sys.executable,
        "-m",
        "hwadvisor",
        "recommend",
        "--goal",
        "inference-latency",
        "--device",
        "h200-sxm",
        "--engine",
        "llamacpp",
        "--model",
        model,
        "--weights-dtype",
        weights,
        "--batch",
        str(batch),
        "--prompt-len",
        str(prompt),
        "--gen-len",
        str(gen),
        "--json",
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=True).stdout
    rep = json.loads(out)
    cfg = rep["plan"]["engine_config"]
    words = shlex.split(cfg["text"].replace("\\\n", " "))
    # "llama-server -m <model> ..." -> the flags after the model placeholder
    flags = words[3:] if words[:2] == ["llama-server", "-m"] else words
    t = rep["estimate"]["times"]
    return {
        "batch": batch,
        "prompt_len": prompt,
        "gen_len": gen,
        "weights": weights,
        "engine": cfg["engine"],
        "text": cfg["text"],
        "flags": shlex.join(flags),
        "command": cmd,
        "baseline": {
            "ttft_s": t["ttft_s"],
            "tpot_s": t["tpot_s"],
            "server_host_s": t.get("server_host_s"),
            "tokens_per_s": rep["estimate"]["tokens_per_s"],
        },
        "plan": {
            "ttft_s": rep["plan"]["ttft_s"],
            "tpot_s": rep["plan"]["tpot_s"],
            "tokens_per_s": rep["plan"]["tokens_per_s"],
            "steps": [s["id"] for s in rep["plan"]["steps"]],
        },
    }


def main() -> None:
    """Run every case given on the command line and write the list."""
    out, model, weights, *cases = sys.argv[1:]
    rows = []
    for c in cases:
        b, p, g = (int(x) for x in c.split(":"))
        rows.append(flags_for(model, weights, b, p, g))
    Path(out).write_text(json.dumps(rows, indent=1))
    for r in rows:
        print(r["batch"], r["prompt_len"], r["gen_len"], r["engine"], r["flags"])


if __name__ == "__main__":
    main()
