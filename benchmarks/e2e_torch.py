"""Whole models in plain PyTorch + transformers, as their users run them: the figures that
calibrate `--engine hf` (docs/benchmarks.md, "end-to-end runs").

Random weights (the speed of a forward does not depend on their values), bf16, SDPA attention.
Each figure is the median of warmed-up, synchronised runs (CUDA events on a GPU); every timed
variant is checked first (finite logits; the graphed decode step must match the eager one).

Measured:
- per-op host cost of eager PyTorch (a tiny add in a loop) and per-node cost of graph replay;
- Llama-3-8B: prefill of 2048 tokens at batch 1 and of 8 x 2048;
- eager decode step (DynamicCache) at batch 1 and 16, context 2048;
- the same step captured in a CUDA graph over a StaticCache;
- `generate()` tokens/s at batch 1 (greedy, 128 new tokens, eager);
- Llama-3.2-1B training step (batch 4 x 2048, bf16 autocast over fp32 weights, AdamW): eager,
  fused AdamW, and with activation checkpointing.

Run: python benchmarks/e2e_torch.py --out e2e.json   (--tiny: a 2-layer model, for CPU tests)
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

LLAMA3_8B = dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                 num_attention_heads=32, num_key_value_heads=8, vocab_size=128256,
                 max_position_embeddings=8192, rope_theta=500000.0, rms_norm_eps=1e-5)
LLAMA32_1B = dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                  num_attention_heads=32, num_key_value_heads=8, vocab_size=128256,
                  max_position_embeddings=8192, rope_theta=500000.0, rms_norm_eps=1e-5,
                  tie_word_embeddings=True)
TINY = dict(hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, vocab_size=1024, max_position_embeddings=1024)


def _sync(device: Any) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn: Callable[[], Any], device: Any, repeats: int, warmup: int = 2) -> list[float]:
    """Seconds per call, each call timed on its own (CUDA events on a GPU)."""
    import torch

    for _ in range(warmup):
        fn()
    _sync(device)
    out = []
    for _ in range(repeats):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            out.append(start.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            fn()
            out.append(time.perf_counter() - t0)
    return out


def summary(samples: list[float]) -> dict[str, float]:
    """Median and interquartile range of samples (seconds)."""
    q = statistics.quantiles(samples, n=4, method="inclusive") if len(samples) > 1 else [
        samples[0]] * 3
    return {"median_s": statistics.median(samples), "q1_s": q[0], "q3_s": q[2],
            "n": len(samples)}


def op_costs(device: Any, repeats: int) -> dict[str, Any]:
    """Host cost of one eager op, and of one node of a replayed CUDA graph."""
    import torch

    x = torch.randn(16, device=device)
    n = 2000

    def eager() -> None:
        for _ in range(n):
            x.add_(1e-3)

    result = {"eager_op_s": summary([t / n for t in timed(eager, device, repeats)])}
    if device.type == "cuda":
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            eager()
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(n):
                x.add_(1e-3)
        result["graph_node_s"] = summary([t / n for t in timed(graph.replay, device, repeats)])
    return result


def build(config: dict[str, Any], device: Any, dtype: Any) -> Any:
    """A LlamaForCausalLM with random weights, on the device, in eval mode."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(**config, attn_implementation="sdpa")
    torch.manual_seed(0)
    with torch.device(device):
        model = LlamaForCausalLM(cfg).to(dtype)
    return model.eval()


def inference(config: dict[str, Any], device: Any, repeats: int, prompt: int,
              batches: tuple[int, ...]) -> dict[str, Any]:
    """Prefill, eager and graphed decode steps, and generate() on one model."""
    import torch
    from transformers import DynamicCache, StaticCache

    model = build(config, device, torch.bfloat16)
    vocab = config["vocab_size"]
    out: dict[str, Any] = {"prompt_len": prompt}
    with torch.inference_mode():
        for batch in (1, max(batches)):
            ids = torch.randint(0, vocab, (batch, prompt), device=device)
            logits = model(ids, use_cache=False).logits
            assert torch.isfinite(logits).all(), "prefill logits not finite"
            def prefill(ids: Any = ids, m: Any = model) -> Any:
                return m(ids, use_cache=False)

            out[f"prefill_b{batch}"] = summary(timed(prefill, device, max(3, repeats // 3)))
        for batch in batches:
            ids = torch.randint(0, vocab, (batch, prompt), device=device)
            cache = DynamicCache()
            model(ids, past_key_values=cache, use_cache=True)
            step_ids = torch.randint(0, vocab, (batch, 1), device=device)

            def eager_step(cache: Any = cache, step_ids: Any = step_ids, m: Any = model) -> Any:
                # Same position each time: crop the cache back so the context stays `prompt`.
                result = m(step_ids, past_key_values=cache, use_cache=True)
                _drop_last(cache, prompt)
                return result

            out[f"decode_eager_b{batch}"] = summary(timed(eager_step, device, repeats))
            out[f"decode_graph_b{batch}"] = graphed_decode(model, batch, prompt, vocab, device,
                                                           repeats, StaticCache)
        ids = torch.randint(0, vocab, (1, prompt), device=device)
        new = 128 if device.type == "cuda" else 8
        model.generation_config.pad_token_id = 0

        def generate(m: Any = model) -> Any:
            return m.generate(ids, max_new_tokens=new, min_new_tokens=new, do_sample=False)

        samples = timed(generate, device, max(3, repeats // 5), warmup=1)
        out["generate_b1"] = {**summary(samples), "new_tokens": new,
                              "tokens_per_s": new / statistics.median(samples)}
    del model
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return out


def _drop_last(cache: Any, prompt: int) -> None:
    """Remove the token a decode step appended (crop's sign convention differs by version)."""
    try:
        cache.crop(-1)
    except (ValueError, TypeError):
        cache.crop(prompt)
    assert cache.get_seq_length() == prompt


def _rewind(cache: Any, prompt: int) -> None:
    """Set a StaticCache back to `prompt` tokens (layers that count on the device, in place)."""
    import torch

    for layer in getattr(cache, "layers", []):
        length = getattr(layer, "cumulative_length", None)
        if isinstance(length, torch.Tensor):
            length.fill_(prompt)


def graphed_decode(model: Any, batch: int, prompt: int, vocab: int, device: Any, repeats: int,
                   static_cache_cls: Any) -> dict[str, Any]:
    """One decode step over a StaticCache captured in a CUDA graph; checked against eager.

    Each step (eager or replayed) first rewinds the cache to the prompt, inside the graph too,
    so every timed step decodes at the same context.
    """
    import torch

    if device.type != "cuda":
        return {"skipped": "CUDA graphs need a CUDA device"}
    try:
        cache = static_cache_cls(config=model.config, max_cache_len=prompt + 16)
        ids = torch.randint(0, vocab, (batch, prompt), device=device)
        model(ids, past_key_values=cache, use_cache=True,
              cache_position=torch.arange(prompt, device=device))
        step_ids = torch.randint(0, vocab, (batch, 1), device=device)
        position = torch.tensor([prompt], device=device)

        def step() -> Any:
            _rewind(cache, prompt)
            return model(step_ids, past_key_values=cache, use_cache=True,
                         cache_position=position).logits

        eager = step().clone()
        again = step()
        repeat_error = float((again.float() - eager.float()).norm() / eager.float().norm())
        assert repeat_error < 1e-2, f"the eager step does not repeat: error {repeat_error:.3g}"
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(2):
                step()
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_out = step()
        graph.replay()
        torch.cuda.synchronize()
        error = float((static_out.float() - eager.float()).norm() / eager.float().norm())
        assert error < 2e-2, f"graphed decode differs from eager: relative error {error:.3g}"
        eager_static = summary(timed(step, device, repeats))
        return {**summary(timed(graph.replay, device, repeats)), "error": error,
                "eager_static_cache": eager_static}
    except Exception as exc:  # capture can fail on a transformers version: say so, go on
        return {"skipped": f"{type(exc).__name__}: {str(exc)[:300]}"}


def training(config: dict[str, Any], device: Any, repeats: int, batch: int,
             seq: int) -> dict[str, Any]:
    """One optimizer step of plain mixed-precision training, three ways."""
    import torch

    out: dict[str, Any] = {"batch": batch, "seq_len": seq}
    vocab = config["vocab_size"]
    for name, fused, ckpt in (("eager", False, False), ("fused_adamw", True, False),
                              ("checkpointing", True, True)):
        model = build(config, device, torch.float32).train()
        if ckpt:
            model.gradient_checkpointing_enable(
                gradient_checkpointing_kwargs={"use_reentrant": False})
        opt = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=fused if device.type ==
                                "cuda" else None)
        ids = torch.randint(0, vocab, (batch, seq), device=device)
        amp = torch.autocast(device.type, dtype=torch.bfloat16)

        def step(model: Any = model, opt: Any = opt, ids: Any = ids, amp: Any = amp) -> Any:
            with amp:
                loss = model(ids, labels=ids).loss
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            return loss

        loss = step()
        assert torch.isfinite(loss), "training loss not finite"
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        samples = timed(step, device, max(3, repeats // 3))
        peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None
        out[name] = {**summary(samples), "peak_allocated_bytes": peak,
                     "tokens_per_s": batch * seq / statistics.median(samples)}
        del model, opt
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return out


def main() -> int:
    """Run every figure, print a short table, write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default="e2e.json")
    parser.add_argument("--tiny", action="store_true", help="2-layer model (CPU test)")
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    import torch

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    infer_cfg = TINY if args.tiny else LLAMA3_8B
    train_cfg = TINY if args.tiny else LLAMA32_1B
    prompt = 64 if args.tiny else 2048
    started = time.perf_counter()
    result: dict[str, Any] = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "transformers": __import__("transformers").__version__,
        "ops": op_costs(device, 10),
        "llama_3_8b" if not args.tiny else "tiny_inference": inference(
            infer_cfg, device, args.repeats, prompt, (1, 16) if not args.tiny else (1, 2)),
        "llama_3_2_1b_training" if not args.tiny else "tiny_training": training(
            train_cfg, device, args.repeats, 4 if not args.tiny else 2, prompt),
    }
    result["wall_s"] = time.perf_counter() - started
    with open(args.out, "w") as fh:
        json.dump(result, fh, indent=1)
    for section, values in result.items():
        if isinstance(values, dict):
            for key, value in values.items():
                if isinstance(value, dict):
                    med = value.get("median_s")
                    extra = value.get("tokens_per_s") or value.get("skipped") or ""
                    print(f"{section:24s} {key:22s} "
                          f"{med * 1e3 if med else float('nan'):10.3f} ms  {extra}")
    print(f"wall {result['wall_s']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
