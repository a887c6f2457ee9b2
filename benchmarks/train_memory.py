"""Training memory: the torch allocator's peak against hwadvisor's estimate, on a real GPU.

Each case builds a Llama-shaped model from a preset's config.json with random weights
(transformers, no download), trains it as the Hugging Face Trainer does with bf16=True (fp32
weights under bf16 autocast, fused AdamW, the loss on the logits as transformers computes it),
with and without gradient checkpointing, and reads torch.cuda.max_memory_allocated over a few
steps after the first, per phase (the forward up to leaving autocast, the backward, the
optimizer step) and overall, with the reserved peak beside it. The estimate is hwadvisor's for
the same workload (engine hf, one GPU), read without its runtime allowance (allocator
fragmentation and the CUDA context are not in max_memory_allocated), and its notes say which
phase it expects to peak.

Run on a GPU host: python benchmarks/train_memory.py --out train_memory.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PRESETS = ROOT / "hwadvisor" / "workload" / "presets"
# (preset, batch, sequence length, checkpointing): 1B-8B shapes at 2k-8k tokens.
CASES: tuple[tuple[str, int, int, bool], ...] = (
    ("llama-3.2-1b", 4, 2048, False), ("llama-3.2-1b", 4, 4096, False),
    ("llama-3.2-1b", 4, 4096, True), ("llama-3.2-1b", 2, 8192, True),
    ("llama-3.2-3b", 2, 2048, False), ("llama-3.2-3b", 2, 4096, True),
    ("llama-3.2-3b", 1, 8192, True), ("llama-3-8b", 1, 2048, True),
)
# Held out: the memory model's constants were settled on CASES; these shapes check them.
HELD_OUT: tuple[tuple[str, int, int, bool], ...] = (
    ("llama-3.2-1b", 1, 8192, False), ("llama-3.2-1b", 8, 2048, True),
    ("llama-3.2-3b", 1, 4096, False), ("llama-3.2-3b", 4, 2048, True),
    ("llama-3-8b", 1, 4096, True), ("llama-3-8b", 2, 2048, True),
)


def measure(preset: str, batch: int, seq: int, ckpt: bool, steps: int = 3) -> dict[str, Any]:
    """Return the allocator's peak over `steps` training steps after a first one."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = json.loads((PRESETS / f"{preset}.json").read_text())
    config.pop("quantization_config", None)
    cfg = LlamaConfig(**config)
    cfg._attn_implementation = "sdpa"
    device = torch.device("cuda")
    torch.manual_seed(0)
    with device:
        model = LlamaForCausalLM(cfg).float().train()
    if ckpt:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=True)
    ids = torch.randint(0, cfg.vocab_size, (batch, seq), device=device)
    losses = []
    phases = {"forward": 0, "backward": 0, "step": 0}

    def phase_peak(name: str, counted: bool) -> None:
        # the allocator's peak since the last reset, kept per phase (forward up to leaving
        # autocast, backward, optimizer step): which one is highest is what the model predicts
        torch.cuda.synchronize()
        if counted:
            phases[name] = max(phases[name], torch.cuda.max_memory_allocated(device))
        torch.cuda.reset_peak_memory_stats(device)

    for i in range(steps + 1):
        phase_peak("step", False)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(ids, labels=ids).loss
        phase_peak("forward", i > 0)
        loss.backward()
        phase_peak("backward", i > 0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        phase_peak("step", i > 0)
        losses.append(float(loss))
    peak = max(phases.values())
    reserved = torch.cuda.max_memory_reserved(device)
    # correctness first: random weights give a loss near ln(vocab), and finite
    assert all(abs(x) < 100 for x in losses), f"loss not finite: {losses}"
    del model, opt
    torch.cuda.empty_cache()
    return {"peak_allocated_bytes": peak, "peak_by_phase_bytes": phases,
            "peak_reserved_bytes": reserved, "losses": losses}


def predict(preset: str, batch: int, seq: int, ckpt: bool) -> dict[str, Any]:
    """Return hwadvisor's memory estimate by part for the same workload on one h200-sxm."""
    from hwadvisor.models import ModelOptions
    from hwadvisor.pipeline import estimate_report
    from hwadvisor.workload import WorkloadRequest

    request = WorkloadRequest(model=preset, phase="training", batch=batch, prompt_len=seq,
                              engine="hf", activation_checkpointing=ckpt)
    report = estimate_report(request, "h200-sxm", ModelOptions(fused_optimizer=True))
    assert report.estimate is not None
    mem = report.estimate.memory
    keys = ("weights_bytes", "activations_bytes", "gradients_bytes", "optimizer_bytes",
            "runtime_bytes", "total_bytes")
    parts: dict[str, Any] = {k: float(getattr(mem, k)) for k in keys}
    parts["tensors_bytes"] = parts["total_bytes"] - parts["runtime_bytes"]
    parts["peak_at"] = next((n for n in mem.notes if n.startswith("training peak")), "")
    return parts


def main() -> int:
    """Measure every case (or predict only, without a GPU) and print the comparison."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--predict-only", action="store_true")
    parser.add_argument("--cases", choices=("fit", "held-out", "all"), default="all",
                        help="the shapes the constants were settled on, the held-out ones, or both")
    args = parser.parse_args()
    cases = {"fit": CASES, "held-out": HELD_OUT, "all": CASES + HELD_OUT}[args.cases]
    rows = []
    for preset, batch, seq, ckpt in cases:
        row: dict[str, Any] = {"preset": preset, "batch": batch, "seq_len": seq,
                               "held_out": (preset, batch, seq, ckpt) in HELD_OUT,
                               "checkpointing": ckpt, "predicted": predict(preset, batch, seq,
                                                                           ckpt)}
        if not args.predict_only:
            try:
                row["measured"] = measure(preset, batch, seq, ckpt)
            except Exception as exc:  # out of memory on this GPU: say so, keep going
                row["measured"] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
        rows.append(row)
        pred = row["predicted"]["tensors_bytes"] / 1e9
        meas = row.get("measured", {}).get("peak_allocated_bytes")
        ratio = f"{pred / (meas / 1e9) - 1:+.1%}" if meas else "-"
        print(f"{preset:14s} b{batch} s{seq:<5d} ckpt={ckpt!s:5s} predicted {pred:6.1f} GB "
              f"measured {meas / 1e9 if meas else float('nan'):6.1f} GB  {ratio}", flush=True)
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
