"""What an `estimate` of a model the generic reader handles costs: cold, then from the cache.

Runs `hwadvisor estimate --model CONFIG --device h100-sxm --json` in fresh processes with an
empty cache folder (HWADVISOR_CACHE_DIR): the first run imports torch and transformers and
builds the model on the meta device; the later ones read the counted shapes back
(hwadvisor/validator/model_cache.py). A config of a family the hand-written parsers know
(llama, same sizes) is timed alongside for the floor. Wall time, CPU time (user + system) and
peak memory of each run; target: a cached run <= 1.5 s.

    python benchmarks/generic_reader.py [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# OLMo 7B's shapes (allenai/OLMo-7B-0424-hf config.json): model_type olmo has no hand parser.
OLMO = {"model_type": "olmo", "hidden_size": 4096, "intermediate_size": 11008,
        "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32,
        "vocab_size": 50304, "max_position_embeddings": 4096, "tie_word_embeddings": False,
        "torch_dtype": "float32"}


def run(config: Path, cache: Path) -> dict[str, float]:
    """One estimate in a fresh process: wall s, CPU s, peak RSS MB."""
    env = {**os.environ, "HWADVISOR_CACHE_DIR": str(cache)}
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "hwadvisor", "estimate", "--model",
                             str(config), "--device", "h100-sxm", "--json"], cwd=REPO, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _pid, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    if status != 0:
        raise SystemExit(f"estimate failed (status {status})")
    return {"wall_s": round(wall, 2), "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
            "peak_mb": round(usage.ru_maxrss / 1024, 0)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        olmo = folder / "olmo" / "config.json"
        llama = folder / "llama" / "config.json"
        for path, data in ((olmo, OLMO), (llama, {**OLMO, "model_type": "llama"})):
            path.parent.mkdir()
            path.write_text(json.dumps(data))
        cache = folder / "cache"
        rows = [("generic, cold (builds, fills the cache)", run(olmo, cache))]
        rows += [(f"generic, cached #{i + 1}", run(olmo, cache)) for i in range(args.runs)]
        rows += [(f"llama (hand parser) #{i + 1}", run(llama, cache)) for i in range(args.runs)]
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}, "
          f"{os.cpu_count()} cores")
    print("| run | wall s | CPU s | peak MB |\n|---|---|---|---|")
    for name, row in rows:
        print(f"| {name} | {row['wall_s']} | {row['cpu_s']} | {row['peak_mb']:.0f} |")


if __name__ == "__main__":
    main()
