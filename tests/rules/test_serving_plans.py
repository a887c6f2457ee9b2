"""Serving plans that hold: speculation by drafter and batch, the quality budget, AMD, MoE.

Each test holds a case a practitioner would check (issue "Serving plans that hold").
"""

from __future__ import annotations

from functools import cache

import pytest

from hwadvisor import profiles
from hwadvisor.engines import baseline_options
from hwadvisor.models import ModelOptions, Report
from hwadvisor.perfmodel import estimate
from hwadvisor.perfmodel.drafters import DRAFTERS
from hwadvisor.pipeline import recommend_report
from hwadvisor.workload import Sizing, WorkloadRequest, build_workload

B, C = "inference-latency", "memory-footprint"


@cache
def _plan(device: str, goal: str, items: tuple[tuple[str, object], ...]) -> Report:
    return recommend_report(goal, device, WorkloadRequest(**dict(items)))  # type: ignore[arg-type]


def plan(device: str, goal: str, **workload: object) -> Report:
    return _plan(device, goal, tuple(sorted(workload.items())))


def step_ids(report: Report) -> list[str]:
    assert report.plan is not None
    return [s.id for s in report.plan.steps]


def rec(report: Report, rule_id: str):  # noqa: ANN201 - a Recommendation
    return next(r for r in report.recommendations if r.id == rule_id)


def _speedup(batch: int, drafter: str, model: str = "llama-3.1-8b",
             device: str = "h100-sxm") -> float:
    """Request latency without speculation over with it, at this batch."""
    dev = profiles.device_from_profile(device)
    wl = build_workload(WorkloadRequest(model=model, phase="inference", batch=batch,
                                        prompt_len=1024, gen_len=256, engine="vllm"),
                        Sizing(dev.memory_total_bytes, dev.device_class))
    base = baseline_options(wl, dev)
    d = DRAFTERS[drafter]
    spec = base.model_copy(update={"speculative_drafter": drafter,
                                   "speculative_draft_tokens": d.draft_tokens,
                                   "speculative_tokens_per_step": d.accepted_chat})
    before = estimate(wl, dev, base).times.request_latency_s
    after = estimate(wl, dev, spec).times.request_latency_s
    assert before and after
    return before / after


# --- 1. speculative decoding by drafter and batch ---------------------------------------------


def test_the_gain_is_continuous_in_the_batch_no_cliff_at_8_to_9():
    # the rule used to credit 2.3x at batch 8 and nothing at batch 9
    at8, at9 = _speedup(8, "eagle3"), _speedup(9, "eagle3")
    assert at8 > 1.5 and abs(at8 - at9) / at8 < 0.05
    assert "speculative-decoding" in step_ids(plan("h100-sxm", B, model="llama-3.1-8b", batch=9))


def test_the_gain_fades_as_the_verification_turns_compute_bound():
    gains = [_speedup(b, "eagle3") for b in (1, 16, 64, 256)]
    assert gains == sorted(gains, reverse=True)
    assert gains[0] > 2.0
    # EAGLE-3 reports 1.38x at batch 64 in SGLang (arXiv:2503.01840): the model is near it
    assert 1.1 < gains[2] < 2.0
    # a verification forward of 256 x 5 tokens is compute bound in its GEMMs; what is left is
    # the KV reads, which one forward shares among the drafts
    assert gains[3] < 1.3
    assert _speedup(128, "ngram") < 1.0  # n-gram's few accepted tokens no longer pay


def test_n_gram_on_chat_gains_far_less_than_eagle_3():
    ngram, eagle = _speedup(1, "ngram"), _speedup(1, "eagle3")
    assert 1.1 < ngram < 1.5 < eagle


def test_the_config_runs_the_drafter_the_plan_modelled_and_says_what_it_needs():
    report = plan("h100-sxm", B, model="llama-3.1-8b", batch=1)
    r = rec(report, "speculative-decoding")
    assert r.changes["speculative_drafter"] == "eagle3"
    assert report.plan is not None and report.plan.engine_config is not None
    text = report.plan.engine_config.text
    assert "--spec-method eagle3" in text and "ngram" not in text
    # the published head it runs, named as vllm serve takes it, and the n-gram figure beside it
    assert "--spec-model yuhuili/EAGLE3-LLaMA3.1-Instruct-8B" in text
    assert "draft checkpoint: yuhuili/eagle3-llama3.1-instruct-8b" in r.why.lower()
    assert "without it, n-gram drafting" in r.why
    # the acceptance assumption is a caveat, per task, with its source
    assert any("accepted per target forward on chat" in c and "arXiv:2503.01840" in c
               for c in r.caveats)


def test_a_checkpoint_with_mtp_layers_drafts_with_them():
    report = plan("h200-sxm", B, model="deepseek-v3", batch=1, gpus=8)
    r = rec(report, "speculative-decoding")
    assert r.changes["speculative_drafter"] == "mtp"
    assert report.plan is not None and report.plan.engine_config is not None
    assert "--spec-method mtp" in report.plan.engine_config.text


@pytest.mark.parametrize("engine,flag", [
    ("sglang", "--speculative-algorithm EAGLE3 --speculative-draft-model-path "
               "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"),
    # no EAGLE-3 head is published as GGUF: llama-server takes the Llama-3.2-1B draft by its repo
    ("llamacpp", "--spec-type draft-simple --spec-draft-hf "
                 "bartowski/Llama-3.2-1B-Instruct-GGUF:Q4_K_M"),
])
def test_each_engine_says_the_drafter_in_its_own_words(engine: str, flag: str):
    device = "rtx-4090" if engine == "llamacpp" else "h100-sxm"
    report = plan(device, B, model="llama-3.1-8b", batch=1, engine=engine)
    assert report.plan is not None and report.plan.engine_config is not None
    assert flag in " ".join(report.plan.engine_config.text.replace("\\\n", " ").split())


def test_no_drafter_that_needs_an_unpublished_checkpoint_is_planned():
    # nobody publishes an EAGLE-3 head or a smaller draft for Llama-3.2-1B: the line pasted
    # must start, so the plan drafts from n-grams and says what it left out
    report = plan("h200-sxm", B, model="llama-3.2-1b", batch=1, engine="llamacpp")
    r = rec(report, "speculative-decoding")
    assert r.changes["speculative_drafter"] == "ngram"
    assert report.plan is not None and report.plan.engine_config is not None
    text = report.plan.engine_config.text
    assert "--spec-type ngram-mod" in text
    assert "DRAFT" not in text and "--spec-draft" not in text
    assert "not planned: " in r.why.lower() and "EAGLE-3 draft heads" in r.why


def test_a_model_brought_as_a_config_file_gets_no_published_draft(tmp_path):
    from hwadvisor.perfmodel.drafters import published_for_model

    assert published_for_model("eagle3", "llama-3.1-8b", "hf") is not None
    assert published_for_model("eagle3", "meta-llama/Llama-3.1-8B-Instruct", "hf") is not None
    assert published_for_model("eagle3", "llama-3.1-8b", "gguf") is None
    assert published_for_model("eagle3", "llama-3.1-8b", None) is None
    assert published_for_model("draft-model", str(tmp_path / "config.json"), "hf") is None


def test_every_published_draft_names_its_source_and_a_known_drafter():
    from hwadvisor.perfmodel.drafters import DRAFTERS, published_drafts
    from hwadvisor.workload.build import list_presets

    presets = set(list_presets())
    for row in published_drafts():
        assert row.drafter in DRAFTERS and DRAFTERS[row.drafter].needs
        assert row.source and row.id
        # every target is a preset id or a Hugging Face id
        assert all(t in presets or "/" in t for t in row.targets)


def test_an_engine_without_a_drafter_for_the_model_does_not_credit_one():
    # LiteRT speculates only with a model exported with its MTP drafter
    report = plan("snapdragon-8-gen-3", B, model="qwen3-4b", batch=1, engine="litert")
    assert "speculative-decoding" not in step_ids(report)


def test_options_without_a_drafter_keep_their_meaning():
    # --speculative-tokens alone: an unnamed drafter, forward as wide as the accepted tokens
    opts = ModelOptions(speculative_tokens_per_step=2.0)
    assert opts.speculative_drafter is None and opts.speculative_draft_tokens is None


# --- 3. the quality budget --------------------------------------------------------------------


def test_405b_on_8_h100_is_served_in_fp8_not_int4():
    report = plan("h100-sxm", B, model="llama-3.1-405b", gpus=8, batch=32)
    assert report.workload.quality == "8-bit"
    assert "fp8-weights" in step_ids(report)
    assert "int4-weights" not in step_ids(report)


def test_int4_for_speed_only_when_asked_and_shown_beside_fp8():
    fp8 = plan("h100-sxm", B, model="llama-3.1-8b", batch=1)
    assert "int4-weights" not in step_ids(fp8) and "fp8-weights" in step_ids(fp8)
    beside = rec(fp8, "int4-weights")
    assert not beside.in_plan and "below the --quality 8-bit budget" in beside.caveats[0]
    int4 = plan("h100-sxm", B, model="llama-3.1-8b", batch=1, quality="int4")
    assert "int4-weights" in step_ids(int4)


def test_lossless_keeps_the_checkpoints_precision():
    report = plan("h100-sxm", B, model="llama-3.1-8b", batch=64, quality="lossless")
    assert not {"fp8-weights", "int4-weights", "kv-cache-quantization"} & set(step_ids(report))


def test_4_bit_to_fit_is_said_plainly():
    report = plan("rtx-4090", C, model="llama-3-70b", quality="lossless")
    assert report.plan is not None
    for r in report.recommendations:
        if r.in_plan and r.id == "int4-weights":
            assert "below the --quality lossless budget" in r.caveats[0]


def test_a_bad_quality_is_a_usage_error():
    from hwadvisor.errors import UserError

    with pytest.raises(UserError, match="--quality"):
        build_workload(WorkloadRequest(model="llama-3.1-8b", quality="int3"))


# --- 4. AMD as it is --------------------------------------------------------------------------


def test_mi300x_gpus_talk_over_xgmi_in_the_rule_facts():
    from hwadvisor.rules.playbooks.facts import _fast_interconnect

    fast, text = _fast_interconnect(profiles.device_from_profile("mi300x"))
    assert fast and "xGMI" in text
    report = plan("mi300x", B, model="llama-3-70b", gpus=8, batch=64)
    for r in report.rejected:
        assert "PCIe" not in r.why_not, r.why_not


def test_no_marlin_on_rocm():
    report = plan("mi300x", B, model="llama-3-70b", batch=1, quality="int4")
    for r in report.recommendations:
        assert "Marlin kernels" not in r.title and "assumes Marlin" not in r.why, r.why


# --- 2. MoE serving layouts -------------------------------------------------------------------


def _moe_estimate(batch: int, model: str = "deepseek-v3", **extra: object):  # noqa: ANN202
    dev = profiles.device_from_profile("h200-sxm")
    wl = build_workload(WorkloadRequest(model=model, phase="inference", batch=batch, gpus=8,
                                        engine="vllm"),
                        Sizing(dev.memory_total_bytes, dev.device_class))
    opts = baseline_options(wl, dev).model_copy(update={"sharding": "tp", **extra})
    return estimate(wl, dev, opts)


def test_deepseek_v3_on_8_h200_is_served_as_its_recipes_serve_it():
    # it used to convert the FP8 checkpoint to int4 or split it into TP4 x 2 replicas, with EP
    # and DP attention judged "+0%"
    for engine, flags in (("vllm", ("--data-parallel-size 8", "--enable-expert-parallel")),
                          ("sglang", ("--tp-size 8", "--attn-dp-size 8",
                                      "--ep-size 8"))):
        report = plan("h200-sxm", B, model="deepseek-v3", batch=64, gpus=8, engine=engine)
        assert report.plan is not None and report.plan.engine_config is not None
        ids = step_ids(report)
        assert "int4-weights" not in ids and "data-parallel-replicas" not in ids
        assert report.plan.layout.tp == 8 and report.plan.layout.ep
        assert {"dp-attention", "expert-parallel"} & set(ids)
        text = report.plan.engine_config.text
        assert all(f in text for f in flags), text
        assert "--quantization" not in text  # the checkpoint's FP8, as it ships
    vllm = plan("h200-sxm", B, model="deepseek-v3", batch=64, gpus=8, engine="vllm")
    assert vllm.plan is not None and vllm.plan.engine_config is not None
    assert "--tensor-parallel-size" not in vllm.plan.engine_config.text  # DP8+EP: TP 1 per rank


def test_mla_kv_is_replicated_under_tp_and_split_under_dp_attention():
    tp = _moe_estimate(64)
    dpa = _moe_estimate(64, dp_attention=True, expert_parallel=True)
    assert tp.memory.kv_cache_bytes == pytest.approx(8 * dpa.memory.kv_cache_bytes, rel=0.01)
    # the attention weights are copied on every GPU instead
    assert dpa.memory.weights_bytes > tp.memory.weights_bytes
    # heavy load: data-parallel attention reads 1/8 of the caches and wins clearly
    heavy_tp = _moe_estimate(256)
    heavy_dpa = _moe_estimate(256, dp_attention=True, expert_parallel=True)
    assert heavy_dpa.times.tpot_s < 0.85 * heavy_tp.times.tpot_s
    assert "ep_decode_s" in heavy_dpa.communication


def test_expert_parallelism_waits_for_the_busiest_gpu():
    from hwadvisor.workload.params import busiest_rank_experts

    spec = build_workload(WorkloadRequest(model="deepseek-v3")).spec
    assert spec is not None
    # one token: 8 experts over 8 GPUs land 2.5 on the busiest; TP reads one expert's worth
    assert busiest_rank_experts(spec, 1, 8) == pytest.approx(2.54, abs=0.05)
    assert busiest_rank_experts(spec, 1024, 8) == pytest.approx(32, abs=0.01)
    # so EP is slower at batch 1 and pays off once every GPU's experts are busy
    assert _moe_estimate(1, expert_parallel=True).times.tpot_s > \
        _moe_estimate(1).times.tpot_s
    assert _moe_estimate(64, expert_parallel=True).times.tpot_s < \
        _moe_estimate(64).times.tpot_s


def test_all_to_all_crosses_the_network_between_nodes():
    dev = profiles.device_from_profile("h200-sxm")
    times = []
    for nodes in (1, 2):
        wl = build_workload(WorkloadRequest(model="deepseek-v3", phase="inference", batch=256,
                                            gpus=8 * nodes, nodes=nodes, gpus_per_node=8,
                                            engine="vllm"),
                            Sizing(dev.memory_total_bytes, dev.device_class))
        opts = baseline_options(wl, dev).model_copy(update={
            "sharding": "tp", "dp_attention": True, "expert_parallel": True})
        times.append(estimate(wl, dev, opts).communication["ep_decode_s"])
    assert times[1] > 2 * times[0]


# --- many llama-server slots (docs/benchmarks.md "llama-server's slots") ----------------------

def test_64_llama_server_slots_move_to_vllm_with_the_gguf_quants_4_bit_twin() -> None:
    """64 users of a Q4_K_M file: llama-server samples every slot on the CPU (~33 ms a step).

    vLLM samples on the GPU but does not run the GGUF file; the plan moves with an AWQ/GPTQ
    4-bit copy of the model and says so (it stayed on llama.cpp: "vLLM cannot run q4_k_m").
    """
    from hwadvisor.report.plain import bottom_line

    report = plan("h200-sxm", B, model="llama-3.2-1b", batch=64, prompt_len=512, gen_len=128,
                  weights_dtype="q4_k_m", engine="llamacpp")
    assert report.plan is not None and report.estimate is not None
    assert report.estimate.bottleneck == "launch-overhead"
    assert "per-sequence work" in report.estimate.bottleneck_why
    assert step_ids(report)[0] == "paged-kv-continuous-batching"
    why = report.plan.steps[0].why
    assert "samples each sequence's next token on the CPU" in why and "AWQ/GPTQ 4-bit" in why
    config = report.plan.engine_config
    assert config is not None and config.engine == "vllm"
    assert any(n.startswith("int4-weights: serve an AWQ or GPTQ checkpoint") for n in config.notes)
    assert bottom_line(report).startswith("Serve llama-3.2-1b with vLLM instead of llama.cpp")


def test_a_gguf_quant_without_a_twin_format_still_stays_on_its_engine() -> None:
    from hwadvisor.rules.playbooks.planners import _gguf_twin

    assert _gguf_twin("q4_k_m", ["fp16", "int4"]) == "int4"
    assert _gguf_twin("q8_0", ["fp16", "int8"]) == "int8"
    assert _gguf_twin("q4_k_m", ["fp16", "fp8"]) is None  # no 4-bit format on the target
    assert _gguf_twin("fp8", ["fp16"]) is None  # not a GGUF quant


def test_no_gain_over_defaults_that_do_not_fit_is_claimed():
    # a 70B Q4_K_M file does not fit a 4090: a speed step comes first and the offload that
    # makes it fit second; the bottom line must not compare with the defaults that never ran
    report = plan("rtx-4090", B, model="llama-3-70b", batch=1, engine="llamacpp",
                  weights_dtype="q4_k_m")
    assert report.plan is not None
    assert any(s.needed_to_fit for s in report.plan.steps)
    assert "than the engine's default" not in report.plan.summary


# --- over several nodes: tensor parallelism stays inside a node -------------------------------


def test_replicas_stay_inside_a_node_when_one_node_holds_the_model():
    # 405B in FP8 fits 8 H100s: TP 8 on each node behind a load balancer, not TP 16 over the
    # network, even for one user (TP 16 reads 4.53 s against TP 8's 4.49 s in the model)
    report = plan("h100-sxm", B, model="llama-3.1-405b", batch=1, nodes=2, gpus_per_node=8)
    layout = report.plan.layout
    assert layout is not None and (layout.tp, layout.dp) == (8, 2)
    step = next(s for s in report.plan.steps if s.id == "data-parallel-replicas")
    assert "spans nodes" in step.why


def test_tensor_parallelism_spans_nodes_only_when_no_node_holds_the_model():
    # 405B in bf16 is 810 GB: more than 8 A100-80GB hold, so the group spans both nodes
    report = plan("a100-80gb", B, model="llama-3.1-405b", batch=8, nodes=2, gpus_per_node=8,
                  quality="lossless")  # no FP8 (Ampere runs it weight-only)
    layout = report.plan.layout
    assert layout is not None and layout.tp * layout.pp == 16
