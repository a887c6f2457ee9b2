"""The published-results benchmark: its figures load, rebuild, and meet the targets."""

from __future__ import annotations

import sys
from pathlib import Path
from types import ModuleType

import pytest
from script_loader import load_script

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"


def _module(name: str) -> ModuleType:
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    return load_script(f"benchmarks/{name}.py")


@pytest.fixture(scope="module")
def published() -> ModuleType:
    return _module("published")


@pytest.fixture(scope="module")
def rows(published: ModuleType) -> list:
    return published.evaluate(published.load_figures() + published.e2e_figures())


def test_the_data_file_has_its_214_figures_and_a_held_out_share(published: ModuleType) -> None:
    figures = published.load_figures()
    assert len(figures) == 214
    check = [f for f in figures if f.split == "check"]
    # 2026-12-07: 42 new held-out figures from sources never cited (issue 42: llama.cpp layer
    # split over 2-8 GPUs, MoE on Metal and MLX, Genie on the 8 Gen 3 / 8 Elite, Megatron-Bridge
    # 26.02 training), all check: 132 of 214 (62%), so the share's upper bound is 0.65 (was 0.6;
    # more held out, nothing fitted on them).
    # 2026-12-06: nine Android rows that chose the model moved to tune, 27 new check figures
    # (Qualcomm AI Hub per-model perf.yaml, llama.cpp PR #15802 / #15131 micro-batch sweeps)
    # 72 of 145 (the three Adreno 830 kernel-PR figures of 2026-12-03 are tune, and the S23's
    # DeepSeek-R1-Distill-Qwen-1.5B prefill, which set the Adreno 740's generic-GEMM rate):
    # the ten Apple figures of 2026-12-03 are all held out (nothing was fitted on
    # them), two of that day's three training rows (the 405B plain 1F1B, the 8B async TP), and
    # the eleven Android figures of that day (llama.cpp OpenCL on Adreno, MLC-LLM) and the four
    # Samsung S23 rows (PocketPal's baseline; only its SmolLM2 prefill set the profile's rate)
    assert 0.3 <= len(check) / len(figures) <= 0.65
    assert {f.split for f in figures} == {"tune", "check"}


def test_e2e_runs_are_figures_with_both_splits(published: ModuleType) -> None:
    figures = published.e2e_figures()
    assert {f.engine for f in figures} == {"hf"}
    assert {f.split for f in figures} == {"tune", "check"}
    assert any(f.phase == "training" for f in figures)


def test_only_figures_without_a_profile_are_skipped(rows: list) -> None:
    skipped = [r for r in rows if r.skipped]
    assert all("no profile" in r.skipped for r in skipped)
    assert len([r for r in rows if r.error is not None]) >= 110


# On-device engines: ExecuTorch on a Snapdragon 8 Gen 3 phone, Genie on the 8 Elite's NPU,
# Core ML on an M1 Max (issue: phones and NPUs). Median within 20%, none beyond 40%.
ON_DEVICE = ("executorch", "qnn", "coreml", "litert", "mlc-llm")


def test_phone_and_apple_runtime_figures_are_within_20_percent(rows: list) -> None:
    mine = [r for r in rows if r.fig.engine in ON_DEVICE and r.error is not None
            and r.fig.id not in KNOWN_MISSES]
    assert len(mine) >= 15
    errors = sorted(abs(r.error) for r in mine)
    assert errors[len(errors) // 2] <= 0.20
    assert errors[-1] <= 0.40, [(r.fig.id, round(r.error, 2)) for r in mine]


# Held-out figures the model misses beyond the split's worst target, with the mechanism it lacks
# (docs/benchmarks.md, 2026-12-03). They stay in the benchmark's own summary (it reports them
# MISSED); this test keeps them out of the split targets and checks they are still misses, so the
# list must shrink when the model learns the mechanism. Emptied 2026-12-03: the Qwen2.5 Q4_0
# prefills on an Adreno 740 (PocketPal's S23 +405%, the Redmi K70's Qwen2.5-0.5B +179%) missed
# because their attn_k/attn_v weights are below the 512 that llama.cpp's Adreno GEMM takes; with
# that gate modelled (engines/data/llamacpp.toml, "llamacpp@adreno-740") they are +25% and +1%.
# 2026-12-06: held-out figures of that day beyond the split's worst target (35%), each with the
# mechanism the model lacks (docs/benchmarks.md, "Figures of 2026-12-06"):
# - the Galaxy S24's Snapdragon 8 Gen 3 decode (+43%), not explained yet (its prefill, -85% while
#   the profile had no Hexagon rate, is +30% with the derived one and left this list);
# - Phi-3.5-mini on the 8 Elite's NPU decodes at about half the Llama 3.1 8B row's rate per
#   weight byte (14.7 against 13.1 tokens/s for 2.1x fewer weights): +39%, not explained yet;
# - llama.cpp on an RTX 3090 at pp512 with -ub 5..8 saturates near 510-570 tokens/s (likely
#   the MMVQ kernels' per-column compute, which the model does not have for GeForce cards; it
#   streams the weights once for all columns): +36% to +66%.
# 2026-12-07: new held-out figures beyond the worst target (docs/benchmarks.md, "2026-12-07 — 42
# new held-out figures"), each with the mechanism the model lacks:
# - llama.cpp pp512 on 4 x RTX 6000 Ada / 4 x L40S (layer split, May 2024 builds): +128% to +163%
#   until 2026-12-07, when llama.cpp's GEMMs were priced at the FP16-accumulate rate (issue 42:
#   the RTX 4090's 330 TFLOP/s against these cards' 362-364, where the 4090 had been at half and
#   the RTX 6000 Ada doubled by family): +36% to +71% since. The published pp512 (591-864
#   tokens/s at 300-350 W) still lies below the 4 x RTX 4090 run's (835): likely the clocks these
#   cards hold under tensor load at their power limits, which the profiles do not state;
# - Mixtral 8x7B pp512 on an M2 Max at build 1631 (+241% to +351%): the first Metal mul_mat_id
#   for the experts; the model prices expert matmuls at the dense rate (issue 42, MoE);
# - Llama-2-7B-Chat decode on the 8 Elite's NPU (-41%; the 8 Gen 3's is -25%): Hexagon decode per
#   model family, not explained yet;
# - Megatron-Bridge 26.02 Qwen3-30B-A3B training (EP 8; +509% on 16 H100, +244% on 8 B200, +60%
#   on 8 B300): the model lacks the MoE training costs (token dispatch, grouped expert GEMMs at
#   small per-expert shapes, permutation); the published 118-223 TFLOP/s/GPU is 12-22% MFU.
KNOWN_MISSES: set[str] = {
    "llamacpp-4x-rtx-6000-ada-llama3-70b-q4_k_m-pp512-layersplit",
    "llamacpp-4x-rtx-6000-ada-llama3-70b-f16-pp512-layersplit",
    "llamacpp-4x-l40s-llama3-70b-q4_k_m-pp512-layersplit",
    "llamacpp-m2-max-38c-mixtral-8x7b-q4_0-pp512-pr4406",
    "llamacpp-m2-max-38c-mixtral-8x7b-q4_k_m-pp512-pr4406",
    "llamacpp-m2-max-38c-mixtral-8x7b-q8_0-pp512-pr4406",
    "qnn-8elite-llama2-7b-chat-w4a16-decode",
    "megatron-bridge2602-h100-qwen3-30b-a3b-fp8",
    "megatron-bridge2602-b200-qwen3-30b-a3b-fp8",
    "megatron-bridge2602-b300-qwen3-30b-a3b-fp8",
    "genie-s24-8gen3-phi3.5-mini-w4a16-decode",
    "genie-8elite-phi3.5-mini-w4a16-decode",
    "llamacpp-rtx-3090-llama3-8b-q4_0-pp512-ub5-pr15802",
    "llamacpp-rtx-3090-llama3-8b-q4_0-pp512-ub6-pr15802",
    "llamacpp-rtx-3090-llama3-8b-q4_0-pp512-ub7-pr15802",
    "llamacpp-rtx-3090-llama3-8b-q4_0-pp512-ub8-pr15802",
}


def test_known_misses_are_still_misses(published: ModuleType, rows: list) -> None:
    errors = {r.fig.id: r.error for r in rows if r.fig.id in KNOWN_MISSES}
    assert set(errors) == KNOWN_MISSES
    assert all(e is not None and abs(e) > published.WORST_TARGET
               for e in errors.values()), errors


@pytest.mark.parametrize("split", ["tune", "check"])
def test_targets_are_met_on_each_split(published: ModuleType, rows: list, split: str) -> None:
    got = published.summary([r for r in rows if r.fig.split == split
                             and r.fig.id not in KNOWN_MISSES])
    assert got is not None
    median, worst, worst_id = got
    assert median <= published.MEDIAN_TARGET, f"{split} median {median:.1%}"
    assert worst <= published.WORST_TARGET, f"{split} worst {worst:.1%} ({worst_id})"


def test_parallel_layouts_are_read(published: ModuleType) -> None:
    assert published._degrees("TP 4 x PP 4 (VP 5) x CP 2 x DP 2") == {
        "TP": 4, "PP": 4, "VP": 5, "CP": 2, "DP": 2}
    assert published._degrees("Megatron-FSDP 8 (TP 1, PP 1, CP 1)")["FSDP"] == 8


def test_trial_shapes_are_within_25_percent() -> None:
    trials = _module("trials_vs_model")
    rows = trials.compare()
    assert {r.trial for r in rows} >= {"cuda-graphs", "torch-compile", "int4-weight-only",
                                       "fp8-gemm", "activation-checkpointing"}
    text, ok = trials.render(rows)
    assert ok, text


@pytest.mark.parametrize("split", ["tune", "check"])
def test_every_training_figure_is_within_20_percent(published: ModuleType, rows: list,
                                                     split: str) -> None:
    # the known misses (above: MoE training, 2026-12-07) are held to being misses instead
    mine = [r for r in rows if r.fig.phase == "training" and r.fig.split == split
            and r.error is not None and r.fig.id not in KNOWN_MISSES]
    assert len(mine) >= 10
    over = [(r.fig.id, round(r.error, 3)) for r in mine
            if abs(r.error) > published.TRAINING_TARGET]
    assert not over, over


def test_the_pipeline_schedule_is_read_from_the_layout(published: ModuleType) -> None:
    figures = {f.id: f for f in published.load_figures()}
    looped = published.build(figures["torchtitan-h100-llama3.1-405b-fsdp8-tp8-pp8-fp8"])[2]
    plain = published.build(figures["torchtitan-h100-llama3.1-405b-fsdp8-tp8-pp8-fp8-1f1b"])[2]
    assert (looped.virtual_pipeline_stages, plain.virtual_pipeline_stages) == (2, 1)
