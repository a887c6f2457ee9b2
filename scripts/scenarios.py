"""The scenario gallery: the plan hwadvisor gives in ~30 situations practitioners meet.

Renders docs/scenarios.md (read its diff as a practitioner would after any change to the rules
or the performance model) and tests/fixtures/scenarios.json, the golden key fields that
tests/rules/test_scenarios.py holds every change against.

Run: python scripts/scenarios.py          # print what changed against the committed files
     python scripts/scenarios.py --write  # write docs/scenarios.md and the golden fixture
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "scenarios.md"
GOLDEN = ROOT / "tests" / "fixtures" / "scenarios.json"


@dataclass(frozen=True)
class Scenario:
    """One situation: who asks, for which goal, on which hardware, for which workload."""

    id: str
    question: str  # what the practitioner asked, in their words
    goal: str
    device: str
    workload: dict[str, Any] = field(default_factory=dict)
    load: dict[str, Any] = field(default_factory=dict)  # serving/request.LoadRequest's fields


SCENARIOS: tuple[Scenario, ...] = (
    # ---- training, datacenter
    Scenario("train-8b-8xh100-torchtitan", "Full fine-tune of Llama-3-8B on 8 H100s with "
             "torchtitan, 4k sequences: how fast can it go?", "a", "h100-sxm",
             dict(model="llama-3-8b", phase="training", batch=2, prompt_len=4096, gpus=8)),
    Scenario("train-8b-8xh100-plain-pytorch", "Same job in a plain PyTorch / HF Trainer script "
             "(DDP): does it even fit?", "a", "h100-sxm",
             dict(model="llama-3-8b", phase="training", batch=2, prompt_len=4096, gpus=8,
                  engine="hf")),
    Scenario("train-8b-1xh100", "Fine-tune Llama-3-8B on a single 80 GB H100.", "a", "h100-sxm",
             dict(model="llama-3-8b", phase="training", batch=4, prompt_len=2048, engine="hf")),
    Scenario("train-8b-1xh100-full", "Full fine-tune of Llama-3-8B on one 80 GB H100, every "
             "weight trained, no engine named: torchtitan's fp32 state needs 138 GB.", "a",
             "h100-sxm", dict(model="llama-3-8b", phase="training", batch=1, prompt_len=2048)),
    Scenario("train-3b-1xh100-12k-torchtitan", "Full fine-tune of Llama-3.2-3B on one H100 "
             "with torchtitan, on 12k-token documents.", "a", "h100-sxm",
             dict(model="llama-3.2-3b", phase="training", batch=1, prompt_len=12288)),
    Scenario("train-3b-1xh100-16k-megatron", "Same model with Megatron-LM on one H100 at 16k "
             "tokens.", "a", "h100-sxm",
             dict(model="llama-3.2-3b", phase="training", batch=1, prompt_len=16384,
                  engine="megatron")),
    Scenario("train-70b-8xh100", "Full fine-tune of Llama-3-70B on one 8xH100 node.", "a",
             "h100-sxm", dict(model="llama-3-70b", phase="training", batch=1, prompt_len=4096,
                              gpus=8)),
    Scenario("train-70b-8xh100-megatron", "Full fine-tune of Llama-3-70B on one 8xH100 node "
             "with Megatron-LM.", "a", "h100-sxm",
             dict(model="llama-3-70b", phase="training", batch=1, prompt_len=4096, gpus=8,
                  engine="megatron")),
    Scenario("train-405b-64-nodes", "Pre-train Llama-3.1-405B on 64 nodes of 8 H100s.", "a",
             "h100-sxm", dict(model="llama-3.1-405b", phase="training", batch=1,
                              prompt_len=8192, nodes=64, gpus_per_node=8, grad_accum=16)),
    Scenario("train-8b-4-nodes-h200", "Train Llama-3.1-8B on 4 nodes x 8 H200 over 400G IB.",
             "a", "h200-sxm", dict(model="llama-3.1-8b", phase="training", batch=2,
                                   prompt_len=8192, nodes=4, gpus_per_node=8)),
    Scenario("train-8b-64k-context", "Long-context training of Llama-3.1-8B at 64k tokens on "
             "8 H100s.", "a", "h100-sxm",
             dict(model="llama-3.1-8b", phase="training", batch=1, prompt_len=65536, gpus=8)),
    Scenario("train-moe-qwen3-30b", "Fine-tune Qwen3-30B-A3B (MoE) on 8 H100s.", "a",
             "h100-sxm", dict(model="qwen3-30b-a3b", phase="training", batch=2,
                              prompt_len=4096, gpus=8)),
    Scenario("train-moe-qwen3-30b-ep", "Fine-tune Qwen3-30B-A3B (MoE) on 8 H100s, one 2k "
             "sequence per GPU: FSDP all-gathers all 128 experts of every layer for it.", "a",
             "h100-sxm", dict(model="qwen3-30b-a3b", phase="training", batch=1,
                              prompt_len=2048, gpus=8)),
    # ---- training, consumer / Apple / old GPUs
    Scenario("train-8b-1x4090", "Fine-tune Llama-3-8B on my RTX 4090 (24 GB).", "a",
             "rtx-4090", dict(model="llama-3-8b", phase="training", batch=1, prompt_len=2048)),
    Scenario("train-8b-2x4090", "Fine-tune Llama-3-8B on the two RTX 4090s of a workstation "
             "(no NVLink, no P2P): shard it, or a copy per card?", "a", "rtx-4090",
             dict(model="llama-3-8b", phase="training", batch=1, prompt_len=2048, gpus=2)),
    Scenario("train-1b-t4-fp32", "Train Llama-3.2-1B on a Colab T4 (no bf16), fp32 now.", "a",
             "t4", dict(model="llama-3.2-1b", phase="training", batch=2, prompt_len=1024,
                        activation_dtype="fp32")),
    Scenario("train-1b-m3-max", "Fine-tune Llama-3.2-1B on a MacBook Pro M3 Max.", "a",
             "m3-max", dict(model="llama-3.2-1b", phase="training", batch=4,
                            prompt_len=2048)),
    # ---- serving, datacenter
    Scenario("serve-8b-h200-vllm-b1", "Lowest latency for one user of Llama-3-8B on an H200 "
             "with vLLM.", "b", "h200-sxm", dict(model="llama-3-8b", batch=1)),
    Scenario("serve-8b-h200-hf-b1", "I serve Llama-3-8B with transformers generate() on an "
             "H200: how do I cut latency?", "b", "h200-sxm",
             dict(model="llama-3-8b", batch=1, engine="hf")),
    Scenario("serve-8b-h100-b64", "64 concurrent chats (2k prompts) of Llama-3-8B on one "
             "H100 with vLLM.", "b", "h100-sxm",
             dict(model="llama-3-8b", batch=64, prompt_len=2048)),
    Scenario("serve-8b-hf-b32", "32 concurrent users on plain transformers, one A100.", "b",
             "a100-80gb", dict(model="llama-3-8b", batch=32, engine="hf")),
    Scenario("serve-70b-8xh100-b32", "Llama-3-70B for 32 concurrent users on 8 H100s.", "b",
             "h100-sxm", dict(model="llama-3-70b", batch=32, gpus=8)),
    Scenario("serve-deepseek-v3-8xh200", "DeepSeek-V3 (FP8 checkpoint) on 8 H200s.", "b",
             "h200-sxm", dict(model="deepseek-v3", gpus=8)),
    Scenario("serve-deepseek-v3-8xh200-b64", "DeepSeek-V3 on 8 H200s at batch 64: the MoE "
             "layout of the engines' DeepSeek recipes.", "b", "h200-sxm",
             dict(model="deepseek-v3", gpus=8, batch=64)),
    Scenario("serve-mixtral-2xa100", "Mixtral-8x7B on 2 A100-80GB for 8 users.", "b",
             "a100-80gb", dict(model="mixtral-8x7b", gpus=2, batch=8)),
    Scenario("serve-8b-128k-prompt", "Llama-3.1-8B with 128k-token prompts on one H100.", "b",
             "h100-sxm", dict(model="llama-3.1-8b", prompt_len=131072, gen_len=512)),
    Scenario("serve-70b-b200", "Llama-3-70B on one B200 for 16 users.", "b", "b200",
             dict(model="llama-3-70b", batch=16)),
    Scenario("serve-70b-mi300x", "Llama-3.1-70B on one MI300X (ROCm vLLM), 16 users.", "b",
             "mi300x", dict(model="llama-3.1-70b", batch=16)),
    Scenario("serve-405b-8xh100-fp8", "Llama-3.1-405B on 8 H100s for 32 users (FP8 within the "
             "default quality budget).", "b", "h100-sxm",
             dict(model="llama-3.1-405b", gpus=8, batch=32)),
    Scenario("serve-8b-h100-int4-budget", "Llama-3.1-8B at batch 1 on one H100, 4-bit allowed "
             "(--quality 4-bit).", "b", "h100-sxm",
             dict(model="llama-3.1-8b", batch=1, quality="4-bit")),
    Scenario("serve-8b-h100-batch9-spec", "Llama-3.1-8B on one H100 for 9 users: speculation "
             "still pays past batch 8.", "b", "h100-sxm", dict(model="llama-3.1-8b", batch=9)),
    Scenario("serve-70b-8xmi300x", "Llama-3-70B on 8 MI300X (xGMI) for 64 users.", "b",
             "mi300x", dict(model="llama-3-70b", gpus=8, batch=64)),
    # ---- serving, consumer
    Scenario("serve-8b-3090-vllm", "Llama-3-8B with vLLM on an RTX 3090 (Ampere, no FP8).",
             "b", "rtx-3090", dict(model="llama-3-8b", batch=4, engine="vllm")),
    Scenario("serve-70b-1x4090", "Can I run Llama-3-70B on my RTX 4090?", "b", "rtx-4090",
             dict(model="llama-3-70b")),
    Scenario("serve-70b-2x4090", "Llama-3-70B on two RTX 4090s.", "b", "rtx-4090",
             dict(model="llama-3-70b", gpus=2)),
    # ---- Apple Silicon
    Scenario("serve-8b-m3-max", "Llama-3-8B on a MacBook Pro M3 Max (MLX).", "b", "m3-max",
             dict(model="llama-3-8b")),
    Scenario("serve-70b-m2-ultra", "Llama-3-70B on a Mac Studio M2 Ultra (192 GB).", "b",
             "m2-ultra", dict(model="llama-3-70b")),
    Scenario("serve-8b-m4-gguf", "Llama-3-8B Q4_K_M GGUF on a base M4 MacBook Air.", "b", "m4",
             dict(model="llama-3-8b", weights_dtype="q4_k_m")),
    # ---- phones
    Scenario("serve-1b-snapdragon", "Llama-3.2-1B on a Snapdragon 8 Elite phone.", "b",
             "snapdragon-8-elite", dict(model="llama-3.2-1b", prompt_len=512, gen_len=256)),
    Scenario("serve-8b-snapdragon", "Llama-3-8B on a Snapdragon 8 Elite phone?", "b",
             "snapdragon-8-elite", dict(model="llama-3-8b", prompt_len=512)),
    Scenario("serve-3b-iphone", "Llama-3.2-3B on an iPhone 15 Pro (A17 Pro).", "b", "a17-pro",
             dict(model="llama-3.2-3b", prompt_len=512)),
    Scenario("serve-8b-iphone-16-pro", "Llama-3-8B on an iPhone 16 Pro (A18 Pro, 8 GB)?", "b",
             "a18-pro", dict(model="llama-3-8b", prompt_len=512)),
    Scenario("serve-3b-snapdragon-npu", "Llama-3.2-3B on the Hexagon NPU of a Snapdragon 8 Elite "
             "phone (QNN / Genie).", "b", "snapdragon-8-elite",
             dict(model="llama-3.2-3b", prompt_len=512, engine="qnn")),
    Scenario("serve-1b-snapdragon-b64", "Llama-3.2-1B on a Snapdragon 8 Gen 3 phone for 64 "
             "users at once?", "b", "snapdragon-8-gen-3", dict(model="llama-3.2-1b", batch=64)),
    Scenario("serve-1b-snapdragon-mlc", "Llama-3.2-1B with MLC LLM on a Snapdragon 8 Gen 3 "
             "phone: what do I build into the app?", "b", "snapdragon-8-gen-3",
             dict(model="llama-3.2-1b", engine="mlc-llm")),
    Scenario("serve-8b-m1-max-coreml", "Llama-3.1-8B with Core ML on a MacBook Pro M1 Max.",
             "b", "m1-max", dict(model="llama-3.1-8b", prompt_len=512, engine="coreml")),
    # ---- memory footprint
    Scenario("mem-8b-long-batch-4090", "Shrink memory for 8 users x 8k tokens of Llama-3-8B on "
             "an RTX 4090.", "c", "rtx-4090",
             dict(model="llama-3-8b", batch=8, prompt_len=8192)),
    Scenario("mem-70b-4xl40s", "Fit Llama-3-70B on 4 L40S (48 GB each).", "c", "l40s",
             dict(model="llama-3-70b", gpus=4, batch=8)),
    Scenario("mem-70b-1x4090", "Run Llama-3-70B on one RTX 4090 and 64 GB of host RAM, as little "
             "memory as it takes.", "c", "rtx-4090", dict(model="llama-3-70b")),
    Scenario("mem-train-8b-a100", "Cut the memory of a Llama-3-8B fine-tune on one A100-80GB.",
             "c", "a100-80gb", dict(model="llama-3-8b", phase="training", batch=4,
                                    prompt_len=4096, engine="hf")),
    # ---- engine configs as pasted: what each setting means to the engine
    Scenario("serve-8b-4090-llamacpp-b64", "64 chat slots of Llama-3-8B with llama-server on "
             "an RTX 4090: will 2k-token requests fit each slot?", "b", "rtx-4090",
             dict(model="llama-3-8b", batch=64, engine="llamacpp")),
    Scenario("serve-llama2-7b-h200-llamacpp-b64", "64 llama-server slots of Llama-2-7B (F16, "
             "no GQA: half a megabyte of KV per token) on an H200 for 2k-token chats.", "b",
             "h200-sxm", dict(model="llama-2-7b", batch=64, prompt_len=2048, gen_len=256,
                              weights_dtype="fp16", engine="llamacpp")),
    Scenario("serve-1b-h200-llamacpp-64-slots", "64 users on one llama-server with Llama-3.2-1B "
             "Q4_K_M on an H200: how many tokens/s does each user see?", "b", "h200-sxm",
             dict(model="llama-3.2-1b", batch=64, prompt_len=512, gen_len=128,
                  weights_dtype="q4_k_m", engine="llamacpp")),
    Scenario("serve-1b-s23-llamacpp-gpu", "Llama-3.2-1B Q4_0 with llama.cpp on a Galaxy S23's GPU "
             "(Snapdragon 8 Gen 2, OpenCL): how fast for a 512-token prompt?", "b",
             "snapdragon-8-gen-2", dict(model="llama-3.2-1b", weights_dtype="q4_0", prompt_len=512,
                                        gen_len=128, engine="llamacpp",
                                        engine_options=("compute_unit=gpu",))),
    Scenario("mem-qwen0.5b-phone-llamacpp-4bit", "Qwen2.5-0.5B with llama.cpp on a Snapdragon 8 "
             "Gen 3 phone in as little memory as possible; 4-bit weights are fine.", "c",
             "snapdragon-8-gen-3", dict(model="qwen2.5-0.5b", prompt_len=1024, gen_len=256,
                                        engine="llamacpp", quality="4-bit")),
    Scenario("serve-8b-4090-llamacpp-q8", "Llama-3-8B with llama.cpp on an RTX 4090 for one "
             "user, the default quality budget: no FP8 units, but Q8_0 is near-lossless.", "b",
             "rtx-4090", dict(model="llama-3-8b", batch=1, engine="llamacpp")),
    Scenario("mem-8b-4090-lossless-8k", "Llama-3-8B at 8k tokens x 8 users on an RTX 4090 with "
             "llama.cpp, nothing below 16 bits wanted (--quality lossless): if something must "
             "give, the smaller loss first.", "c", "rtx-4090",
             dict(model="llama-3-8b", batch=8, prompt_len=8192, engine="llamacpp",
                  quality="lossless")),
    Scenario("serve-1b-t4-vllm", "Llama-3.2-1B with vLLM on a Colab T4 (no bf16) for 8 users.",
             "b", "t4", dict(model="llama-3.2-1b", batch=8, engine="vllm")),
    Scenario("serve-8b-h100-b256", "256 concurrent chats of Llama-3-8B on one H100 with vLLM; "
             "now and then someone pastes a long document.", "b", "h100-sxm",
             dict(model="llama-3-8b", batch=256, prompt_len=2048)),
    Scenario("serve-8b-vllm-0.6", "We are still on vLLM 0.6.0: Llama-3-8B for 32 users on an "
             "H200.", "b", "h200-sxm", dict(model="llama-3-8b", batch=32, engine="vllm==0.6.0")),
    Scenario("serve-1b-h200-eager", "Llama-3.2-1B on vLLM started with --enforce-eager (no CUDA "
             "graphs) on an H200.", "b", "h200-sxm",
             dict(model="llama-3.2-1b", engine="vllm", engine_options=("cuda_graphs=false",))),
    Scenario("serve-70b-8xh100-pcie", "Llama-3-70B on 8 H100 PCIe cards (NVLink-bridged pairs) "
             "for 32 users.", "b", "h100-pcie", dict(model="llama-3-70b", batch=32, gpus=8)),
    # ---- what the engine checks at start-up: the window, the reservation, the drafter
    Scenario("serve-70b-fp8-1xh100", "Llama-3.3-70B in FP8 on one H100 (80 GB) for one user: "
             "will vLLM start, drafter and all?", "b", "h100-sxm",
             dict(model="llama-3.3-70b", weights_dtype="fp8")),
    Scenario("serve-8b-128k-x8-a100", "Eight 128k-token requests at once of Llama-3.1-8B on one "
             "A100-80GB with vLLM.", "b", "a100-80gb",
             dict(model="llama-3.1-8b", batch=8, prompt_len=131072)),
    Scenario("serve-70b-4xa100-40gb-bf16", "Llama-3-70B in bf16 (no quantisation) on 4 "
             "A100-40GB for 4 users.", "b", "a100-40gb",
             dict(model="llama-3-70b", gpus=4, batch=4, quality="lossless")),
    Scenario("serve-8b-h100-eager", "Llama-3.1-8B for one user on vLLM started with "
             "--enforce-eager on an H100.", "b", "h100-sxm",
             dict(model="llama-3.1-8b", engine="vllm", engine_options=("cuda_graphs=false",))),
    Scenario("train-8b-m3-max-mlx-lora", "Fine-tune Llama-3-8B on an M3 Max with mlx-lm, as "
             "small as it goes.", "c", "m3-max",
             dict(model="llama-3-8b", phase="training", batch=1, prompt_len=2048, engine="mlx")),
    Scenario("train-70b-64xh100-megatron", "Pre-train Llama-3-70B with Megatron-LM on 8 nodes "
             "of 8 H100s.", "a", "h100-sxm",
             dict(model="llama-3-70b", phase="training", batch=1, prompt_len=4096, nodes=8,
                  gpus_per_node=8, grad_accum=16, engine="megatron")),
    Scenario("train-8b-8xh100-deepspeed", "Fine-tune Llama-3-8B with DeepSpeed on 8 H100s.",
             "a", "h100-sxm", dict(model="llama-3-8b", phase="training", batch=2,
                                   prompt_len=4096, gpus=8, engine="deepspeed")),
    # ---- serving under a load, with latency targets (issue 40)
    Scenario("sla-chat-8b-h100-fewest", "Chat on Llama-3-8B: 20 requests/s of ~1k-token "
             "prompts, TTFT p90 under 1 s and TPOT p90 under 50 ms. Which config, and how many "
             "H100s at the fewest?", "b", "h100-sxm", dict(model="llama-3-8b"),
             dict(rate=20, dataset="chat", ttft_ms=1000, tpot_ms=50)),
    Scenario("sla-chat-8b-h100-rate-100", "The same chat service at 100 requests/s: how many "
             "H100s now?", "b", "h100-sxm", dict(model="llama-3-8b"),
             dict(rate=100, dataset="chat", ttft_ms=1000, tpot_ms=50)),
    Scenario("sla-rag-70b-8xh200", "RAG on Llama-3-70B: 8k-token prompts of retrieved passages "
             "(a fifth of each a shared system prompt) at 3 requests/s, TTFT p90 under 2 s, TPOT "
             "p90 under 60 ms, on one 8 x H200 node.", "b", "h200-sxm",
             dict(model="llama-3-70b", gpus=8),
             dict(rate=3, dataset="rag", prefix_share=0.2, ttft_ms=2000, tpot_ms=60)),
    Scenario("sla-rag-70b-h100-tight-tpot", "RAG on Llama-3-70B with a streaming UI: 8k-token "
             "prompts at 4 requests/s, TTFT p90 under 3 s and TPOT p90 under 25 ms. How many "
             "H100s at the fewest, and do I split prefill from decode?", "b", "h100-sxm",
             dict(model="llama-3-70b", prompt_len=8192, gen_len=512),
             dict(rate=4, ttft_ms=3000, tpot_ms=25)),
    Scenario("sla-code-completion-8b-h100", "Code completion on Llama-3-8B: 2k tokens of file "
             "context, ~64-token completions, 30 requests/s; the first token within 300 ms at "
             "p90 and the whole completion within 1 s.", "b", "h100-sxm",
             dict(model="llama-3-8b"),
             dict(rate=30, dataset="code-completion", ttft_ms=300, e2e_ms=1000)),
    Scenario("sla-batch-job-8b-h100", "A nightly batch job on Llama-3-8B: 2k-token documents, "
             "512-token summaries, 256 requests in flight on one H100; each must finish within "
             "two minutes.", "b", "h100-sxm", dict(model="llama-3-8b", gpus=1),
             dict(concurrency=256, dataset="batch", e2e_ms=120_000)),
    Scenario("sla-chat-1b-h100-llamacpp", "Llama-3.2-1B in Q4_K_M behind llama-server on one "
             "H100: 2 chat requests/s, TTFT p90 under 500 ms and TPOT p90 under 20 ms. How many "
             "slots?", "b", "h100-sxm",
             dict(model="llama-3.2-1b", weights_dtype="q4_k_m", engine="llamacpp", gpus=1),
             dict(rate=2, dataset="chat", ttft_ms=500, tpot_ms=20)),
    Scenario("serve-8b-h100-trtllm-b8", "Llama-3-8B with trtllm-serve on an H100 for 8 users: "
             "what do I start, and what goes in the YAML it reads?", "b", "h100-sxm",
             dict(model="llama-3-8b", batch=8, engine="trtllm")),
    Scenario("sla-70b-2xh100-too-few", "Llama-3-70B chat at 10 requests/s with TTFT p90 under "
             "1 s and TPOT p90 under 40 ms on the two H100s we have: enough?", "b", "h100-sxm",
             dict(model="llama-3-70b", gpus=2),
             dict(rate=10, dataset="chat", ttft_ms=1000, tpot_ms=40)),
    Scenario("sla-chat-70b-2x4090-llamacpp", "Llama-3-70B behind llama-server on the two RTX "
             "4090s of a workstation: a few chat users (0.2 requests/s), TTFT p90 under 5 s, "
             "TPOT p90 under 150 ms. Does it hold, and how is it split?", "b", "rtx-4090",
             dict(model="llama-3-70b", engine="llamacpp", gpus=2),
             dict(rate=0.2, dataset="chat", ttft_ms=5000, tpot_ms=150)),
    # ---- over several nodes: one command per node, replicas inside a node when it holds one
    Scenario("serve-405b-2-nodes-h100-b1", "Llama-3.1-405B on 2 nodes of 8 H100s, one user at "
             "a time: how do I start it?", "b", "h100-sxm",
             dict(model="llama-3.1-405b", batch=1, nodes=2, gpus_per_node=8)),
    Scenario("serve-deepseek-v3-2-nodes-h100", "DeepSeek-V3 (FP8) on 2 nodes of 8 H100s for 64 "
             "users; it does not fit one node.", "b", "h100-sxm",
             dict(model="deepseek-v3", batch=64, nodes=2, gpus_per_node=8)),
    Scenario("serve-405b-2-nodes-a100-sglang", "Llama-3.1-405B in bf16 on 2 nodes of 8 "
             "A100-80GB with SGLang, 8 users.", "b", "a100-80gb",
             dict(model="llama-3.1-405b", batch=8, nodes=2, gpus_per_node=8, engine="sglang")),
    Scenario("train-8b-2-nodes-deepspeed", "Fine-tune Llama-3-8B with DeepSpeed on 2 nodes of "
             "8 H100s.", "a", "h100-sxm",
             dict(model="llama-3-8b", phase="training", batch=2, prompt_len=4096, nodes=2,
                  gpus_per_node=8, engine="deepspeed")),
)


def run(scenario: Scenario) -> Any:
    """Return the recommend report of one scenario."""
    from hwadvisor.pipeline import recommend_report
    from hwadvisor.rules.playbooks.goals import parse_goal
    from hwadvisor.serving.request import LoadRequest
    from hwadvisor.workload import WorkloadRequest

    return recommend_report(parse_goal(scenario.goal), scenario.device,
                            WorkloadRequest(**scenario.workload),
                            load=LoadRequest(**scenario.load) if scenario.load else None)


def key_fields(report: Any) -> dict[str, Any]:
    """Return what the golden test pins: the shape of the plan, not its every number."""
    plan = report.plan
    fields: dict[str, Any] = {
        "engine": plan.engine,
        "weights_dtype": report.workload.weights_dtype,
        "fits": plan.fits,
        "steps": [s.id for s in plan.steps],
        "min_gpus": plan.min_gpus,
        "alternatives": [a.id for a in plan.alternatives],
        "layout": None if plan.layout is None else
        f"tp{plan.layout.tp} pp{plan.layout.pp} cp{plan.layout.cp} dp{plan.layout.dp} "
        f"{plan.layout.sharding}",
        # what a user pastes: every setting of the engine config, in order
        "config": None if plan.engine_config is None else
        [line.setting for line in plan.engine_config.lines],
        # over several nodes: where each command runs, and a config file's launcher
        "launch": None if plan.engine_config is None else
        [line for line in plan.engine_config.text.splitlines()
         if line.startswith(("# on ", "# node "))] + plan.engine_config.launch.splitlines()
        or None,
    }
    if plan.engine_config is not None and plan.engine_config.files:  # the files it names
        fields["files"] = dict(plan.engine_config.files)
    if report.serving is not None:  # under a load: the search's answer
        best = report.serving.best
        fields["serving"] = {
            "fewest_gpus": report.serving.fewest_gpus,
            "best": None if best is None else best.config.words(),
            "checks_met": [c.met for c in report.serving.checks]}
    return fields


# the load's fields whose option is not their name with dashes (targets are in ms)
_LOAD_FLAGS = {"ttft_ms": "--ttft", "tpot_ms": "--tpot", "e2e_ms": "--e2e"}


def _flags(workload: dict[str, Any]) -> str:
    """Return the workload as command-line flags (a repeated option once per value)."""
    words = []
    for key, value in workload.items():
        flag = "--engine-option" if key == "engine_options" else \
            _LOAD_FLAGS.get(key, f"--{key.replace('_', '-')}")
        for one in value if isinstance(value, tuple) else (value,):
            words.append(f"{flag} {one}")
    return " ".join(words)


def render(scenarios: tuple[Scenario, ...] = SCENARIOS) -> tuple[str, dict[str, Any]]:
    """Return the text of docs/scenarios.md and the golden fields, scenario by scenario."""
    from hwadvisor.report.plantext import config_lines, file_fence, plan_lines

    lines = ["# Scenario gallery", "",
             "What `hwadvisor recommend` answers in situations practitioners meet, generated by "
             "`python scripts/scenarios.py --write` from the datasheet profiles (no GPU needed). "
             "Regenerated with every change to the rules or the performance model; "
             "`tests/rules/test_scenarios.py` pins each plan's key fields.", ""]
    golden: dict[str, Any] = {}
    for scenario in scenarios:
        report = run(scenario)
        golden[scenario.id] = key_fields(report)
        flags = _flags({**scenario.workload, **scenario.load})
        lines += [f"## {scenario.id}", "", f"> {scenario.question}", "",
                  f"`hwadvisor recommend --goal {scenario.goal} --device {scenario.device} "
                  f"{flags}`", ""]
        text = plan_lines(report)
        lines.append(f"**{text[0]}**")
        lines.append("")
        # what became of the user's --batch (a phone app serves one conversation)
        lines += [f"note: {n}  " for n in report.notes if n.startswith("--batch")]
        lines += [""] if any(n.startswith("--batch") for n in report.notes) else []
        if report.serving is not None:
            from hwadvisor.report.servingtext import serving_lines

            for line in serving_lines(report.serving, front=False):
                lines.append(f"{line}  ")
            lines.append("")
        for line in text[1:]:
            lines.append(line if line[:1].isdigit() or line.startswith("   ") else f"{line}  ")
        config = config_lines(report.plan)
        if config and report.plan.engine_config is not None:
            lines += ["", config[0], "", "```", *report.plan.engine_config.text.splitlines(),
                      "```"]
            if report.plan.engine_config.launch:
                lines += ["", "to start it on the nodes:", "", "```",
                          *report.plan.engine_config.launch.splitlines(), "```"]
            for name, body in report.plan.engine_config.files.items():  # trtllm's YAML
                lines += ["", f"{name}, beside it:", "", f"```{file_fence(name)}",
                          *body.splitlines(), "```"]
            # what the config could not say and what its steps need besides (a checkpoint to
            # fetch, a quantised repo), as the CLI prints them under the config
            said = config[-len(report.plan.engine_config.not_expressed)
                          - len(report.plan.engine_config.notes):]
            if said and said != config:
                lines += [""] + [f"{line}  " for line in said]
            for other in report.plan.engine_config.also:  # Genie, coremltools
                lines += ["", f"the same plan for {other.tool} ({other.format}):", "", "```",
                          *other.text.splitlines(), "```"]
        lines.append("")
    return "\n".join(lines).rstrip() + "\n", golden


def main() -> int:
    """Write (or compare against) docs/scenarios.md and the golden fixture."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--write", action="store_true", help="write the files")
    args = parser.parse_args()
    text, golden = render()
    golden_text = json.dumps(golden, indent=1, sort_keys=True) + "\n"
    if args.write:
        DOC.write_text(text, encoding="utf-8")
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text(golden_text, encoding="utf-8")
        print(f"wrote {DOC.relative_to(ROOT)} and {GOLDEN.relative_to(ROOT)}")
        return 0
    old = json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {}
    changed = [k for k in golden if old.get(k) != golden[k]]
    for key in changed:
        print(f"{key}: {old.get(key)} -> {golden[key]}")
    print(f"{len(changed)} scenario(s) changed of {len(golden)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
