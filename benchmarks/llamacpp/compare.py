"""hwadvisor's predictions against llama.cpp's own measurements on the H200 (run.sh's results).

For each measured case (llama-bench pp/tg at batch 1, llama-batched-bench at batch 1, 8, 64)
the prediction is `recommend --engine llamacpp --device h200-sxm`'s baseline (the workload with
the engine's defaults, CUDA graphs included), for the same model shape, weights, batch and
lengths. Prints a markdown table (measured, predicted, ratio) and writes the rows as JSON.

Usage: python benchmarks/llamacpp/compare.py RESULTS_DIR [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from functools import cache
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from plan_flags import flags_for  # noqa: E402

from hwadvisor.validator.engine_bench import BenchWorkload, parse_batched_bench  # noqa: E402

MODELS = {"llama-3.2-1b": "1B", "llama-3.2-3b": "3B", "llama-3-8b": "8B",
          "tinyllama-1.1b": "TinyLlama-1.1B", "llama-2-7b": "Llama-2-7B",
          "qwen2.5-1.5b": "Qwen2.5-1.5B", "qwen3-4b": "Qwen3-4B", "phi-3-mini": "Phi-3-mini",
          "qwen2.5-0.5b": "Qwen2.5-0.5B", "phi-2-as-llama": "Phi-2 widths",
          "smollm2-360m": "SmolLM2-360M"}
SHAPES = Path(__file__).resolve().parent / "shapes"


def model_arg(model: str) -> str:
    """The --model to predict with: make_gguf's shape file where one overrides the preset."""
    shape = SHAPES / f"{model}.json"
    return str(shape) if shape.exists() else model
WEIGHTS = {"q4_k_m": "q4_k_m", "f16": "fp16"}


@cache
def predict(model: str, weights: str, batch: int, prompt: int, gen: int) -> dict[str, float]:
    """recommend's baseline estimate for the case: ttft_s, tpot_s."""
    case = flags_for(model_arg(model), weights, batch, prompt, gen)  # the same recommend run
    base = case["baseline"]
    # llama-bench and llama-batched-bench run no server slots: their host work is left out
    return {"ttft_s": base["ttft_s"], "tpot_s": base["tpot_s"] - (base["server_host_s"] or 0.0)}


def split_name(stem: str) -> tuple[str, str]:
    """'llama-3-8b-q4_k_m' -> ('llama-3-8b', 'q4_k_m')."""
    for w in WEIGHTS:
        if stem.endswith("-" + w):
            return stem[: -len(w) - 1], w
    raise ValueError(stem)


def bench_rows(res: Path) -> list[dict]:
    """llama-bench: pp512 as prefill tokens/s, tg128 as decode tokens/s, batch 1."""
    path = res / "llama_bench.json"
    if not path.exists():
        return []
    rows = []
    for r in json.loads(path.read_text()):
        model, w = split_name(Path(r["model_filename"]).stem)
        pred = predict(model, WEIGHTS[w], 1, 512, 128)
        if r["n_gen"] == 0:
            kind, p = f"prefill pp{r['n_prompt']} (tokens/s)", r["n_prompt"] / pred["ttft_s"]
        else:
            kind, p = f"decode tg{r['n_gen']} (tokens/s)", 1.0 / pred["tpot_s"]
        rows.append(
            {
                "tool": "llama-bench",
                "model": model,
                "weights": w,
                "batch": 1,
                "figure": kind,
                "measured": r["avg_ts"],
                "stddev": r["stddev_ts"],
                "predicted": p,
                "ratio": r["avg_ts"] / p,
            }
        )
    return rows


def batched_rows(res: Path) -> list[dict]:
    """llama-batched-bench tables: prefill tokens/s (S_PP) and decode tokens/s (S_TG) per batch."""
    rows = []
    for path in sorted(res.glob("batched_*.txt")):
        stem = path.stem[len("batched_") :]
        name, _, plen = stem.rpartition("_p")
        model, w = split_name(name)
        gen = {512: 128, 2048: 256}[int(plen)]
        for b in (1, 8, 64):
            try:
                run = parse_batched_bench(
                    path.read_text(), BenchWorkload(str(path), b, int(plen), gen)
                )
            except ValueError:
                continue
            pred = predict(model, WEIGHTS[w], b, int(plen), gen)
            f = run.figures
            for kind, m, p in (
                ("prefill (tokens/s)", f.prefill_tokens_per_s, b * int(plen) / pred["ttft_s"]),
                ("decode (tokens/s)", f.decode_tokens_per_s, b / pred["tpot_s"]),
            ):
                rows.append(
                    {
                        "tool": f"batched-bench P{plen}/G{gen}",
                        "model": model,
                        "weights": w,
                        "batch": b,
                        "figure": kind,
                        "measured": m,
                        "predicted": p,
                        "ratio": (m or 0) / p,
                    }
                )
    return rows


def loop_rows(res: Path) -> list[dict]:
    """recommend --validate --engine-model (run.sh's loop stage): plan.validation.engine per run."""
    rows = []
    for path in sorted((res / "loop").glob("*.json")):
        rep = json.loads(path.read_text())
        plan = rep.get("plan") or {}
        eng = (plan.get("validation") or {}).get("engine") or {}
        wl = rep.get("workload") or {}
        rows.append(
            {
                "run": path.stem,
                "batch": wl.get("batch"),
                "prompt_len": wl.get("prompt_len"),
                "status": eng.get("status"),
                "reason": eng.get("reason"),
                "command": " ".join(eng.get("command") or []),
                "measured": eng.get("measured"),
                "predicted": eng.get("predicted"),
                "ratio": eng.get("ratio"),
                "spread": eng.get("spread"),
                "version": eng.get("version"),
                "engine_config": (plan.get("engine_config") or {}).get("text"),
            }
        )
    return rows


def print_loop(rows: list[dict]) -> None:
    """The engine-in-the-loop runs as a markdown table."""
    if not rows:
        return
    print()
    print("| run | verdict | prefill t/s measured / predicted | decode t/s measured / predicted |"
          " ratio prefill | ratio decode | spread |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        m, p, q = r["measured"] or {}, r["predicted"] or {}, r["ratio"] or {}

        def pair(key: str, m: dict = m, p: dict = p) -> str:
            a, b = m.get(key), p.get(key)
            return f"{a:,.0f} / {b:,.0f}" if a and b else "-"

        def num(x: float | None) -> str:
            return f"{x:.2f}" if x is not None else "-"

        print(
            f"| {r['run']} | {r['status']} | {pair('prefill_tokens_per_s')} | "
            f"{pair('decode_tokens_per_s')} | {num(q.get('prefill_tokens_per_s'))} | "
            f"{num(q.get('decode_tokens_per_s'))} | {num(r['spread'])} |"
        )


def main() -> None:
    """Print the table; write the JSON rows."""
    ap = argparse.ArgumentParser()
    ap.add_argument("res", type=Path)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    rows = bench_rows(args.res) + batched_rows(args.res)
    print(
        "| tool | model | weights | batch | figure | measured | predicted | measured / predicted |"
    )
    print("| --- | --- | --- | ---: | --- | ---: | ---: | ---: |")
    for r in rows:
        sd = f" ± {r['stddev']:.0f}" if "stddev" in r else ""
        print(
            f"| {r['tool']} | {MODELS[r['model']]} | {r['weights']} | {r['batch']} | "
            f"{r['figure']} | "
            f"{r['measured']:,.0f}{sd} | {r['predicted']:,.0f} | {r['ratio']:.2f} |"
        )
    loops = loop_rows(args.res)
    print_loop(loops)
    if args.json:
        args.json.write_text(json.dumps(rows + loops, indent=1))


if __name__ == "__main__":
    main()
