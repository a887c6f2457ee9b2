"""The plan as one step to measure: its knobs against the baseline's, and the model's ratio.

`trial_spec` replays the plan's steps on the engine's baseline (engines/baseline.py) and reads
off the knobs a stacked step on a few layers of one device can set (trials/plan_step.py);
the steps it cannot set are listed with the reason. `predicted_ratio` asks the performance
model for the very step the trial ran: the same layers, widths, batch and context, plain
PyTorch (no engine scheduler, torch's own kernels), the knobs the trial applied. That is the
prediction a measurement can be held against; the whole plan's ratio on the full model is
reported beside it.
"""

from __future__ import annotations

from typing import Any

from hwadvisor.models import (
    Device,
    Goal,
    ModelOptions,
    Plan,
    PlanTrialSpec,
    Workload,
)

# Plan-step change -> the trial's knob.
KNOB_OF_CHANGE = {
    "cuda_graphs": "cuda_graphs", "weights_dtype": "weights", "kv_dtype": "kv",
    "attention_kernel": "attention", "activation_checkpointing": "checkpointing",
    "selective_checkpointing": "checkpointing", "fused_optimizer": "fused_optimizer",
    "finetune": "lora_rank", "lora_rank": "lora_rank", "batch": "batch",
}
INFERENCE_KNOBS = ("cuda_graphs", "weights", "kv", "attention")
TRAINING_KNOBS = ("checkpointing", "fused_optimizer", "lora_rank", "batch", "attention")

# Why a change has no knob in the stacked step, by change.
_MULTI_GPU = "spreads the model over GPUs: a few layers on one device cannot show it"
UNMEASURED_WHY = {
    "sharding": _MULTI_GPU, "tp_size": _MULTI_GPU, "pipeline_stages": _MULTI_GPU,
    "context_parallel": _MULTI_GPU, "expert_parallel": _MULTI_GPU,
    "dp_attention": _MULTI_GPU, "comm_overlap": _MULTI_GPU,
    "offload_fraction": "keeps weights in host RAM, beyond a few-layer step",
    "optimizer_offload": "steps the optimizer in host RAM, beyond a few-layer step",
    "prefix_cache_hit": "changes what is computed per request, not the step (its own trial, "
                        "prefix-reuse, measures it)",
    "speculative_tokens_per_step": "depends on a draft model's acceptance (its own trial, "
                                   "speculative-verify, measures the verify cost)",
    "prefill_chunk_tokens": "schedules prefill between decode steps, not the decode step",
    "compiled": "torch.compile takes longer to compile than the trial's budget (its own trial, "
                "torch-compile, measures it)",
    "engine": "a different engine: its own scheduler and kernels",
    "grad_accum": "accumulation leaves the time per token of a step as it is",
    "optimizer": "8-bit AdamW needs bitsandbytes' kernels",
    "activation_dtype": "the stacked step computes in bf16",
    "checkpoint_every": "the stacked step checkpoints all its layers or none, not a share of "
                        "them",
}
METRIC_WORDS = {
    ("inference", "time"): "decode step time per token, baseline / plan",
    ("training", "time"): "train step time per token, baseline / plan",
    ("inference", "memory"): "peak memory of the decode step, plan / baseline",
    ("training", "memory"): "peak memory of the train step, plan / baseline",
}


def replay(workload: Workload, device: Device,
           plan: Plan) -> tuple[Workload, ModelOptions, Workload, ModelOptions]:
    """(baseline workload, options, planned workload, options): the plan's changes in order."""
    from hwadvisor.engines import baseline

    base_wl, base_opts = baseline(workload, device)
    wl_fields, opt_fields = set(Workload.model_fields), set(ModelOptions.model_fields)
    wl_changes: dict[str, Any] = {}
    opt_changes: dict[str, Any] = {}
    for step in plan.steps:
        for key, value in step.changes.items():
            if key in wl_fields:
                wl_changes[key] = value
            elif key in opt_fields:
                opt_changes[key] = value
    return (base_wl, base_opts, base_wl.model_copy(update=wl_changes),
            base_opts.model_copy(update=opt_changes))


def _weights_knob(dtype: str) -> str:
    return "bf16" if dtype in ("bf16", "fp16", "fp32", "tf32") else dtype


def knobs(workload: Workload, options: ModelOptions) -> dict[str, Any]:
    """Return the stacked step's knobs of one (workload, options) state."""
    ckpt = "none"
    if workload.activation_checkpointing:
        ckpt = "selective" if options.selective_checkpointing else "full"
    training = workload.phase == "training"
    return {
        "cuda_graphs": bool(options.cuda_graphs and not training),
        "weights": _weights_knob(str(workload.weights_dtype)),
        "kv": _weights_knob(str(workload.kv_dtype)),
        "attention": options.attention_kernel,
        "checkpointing": ckpt,
        "fused_optimizer": bool(options.fused_optimizer),
        "lora_rank": options.lora_rank if options.finetune == "lora" else 0,
        "batch": workload.batch,
    }


def _unmeasured_reason(changes: dict[str, Any], phase: str) -> str:
    if changes.get("finetune") == "qlora":
        return "QLoRA's NF4 base weights need bitsandbytes' kernels"
    if phase == "training" and changes.get("weights_dtype") == "fp8":
        # Measured with a plain-torch FP8 linear (torch._scaled_mm for all three matmuls,
        # eager casts): x0.55 on a 4-layer Llama-3.2-1B step on an H200 (docs/benchmarks.md).
        return ("FP8 training pays once torch.compile fuses its casts (torchao float8); an eager "
                "stacked step measures the casts, not the FP8 matmuls (its own trial, fp8-gemm, "
                "measures them)")
    if phase == "training" and "weights_dtype" in changes:
        return "quantised base weights in training need their own kernels"
    for key in changes:
        if key in UNMEASURED_WHY:
            return UNMEASURED_WHY[key]
    return "no knob of the stacked step sets it"


def trial_spec(workload: Workload, device: Device, goal: Goal,
               plan: Plan) -> tuple[PlanTrialSpec | None, dict[str, str]]:
    """Return (the trial's spec, unmeasured steps -> reason); no spec when no step has a knob."""
    from hwadvisor.rules.playbooks.goals import goal_spec

    base_wl, base_opts, new_wl, new_opts = replay(workload, device, plan)
    phase = "training" if workload.phase == "training" else "inference"
    relevant = INFERENCE_KNOBS if phase == "inference" else TRAINING_KNOBS
    base, new = knobs(base_wl, base_opts), knobs(new_wl, new_opts)
    steps: dict[str, list[str]] = {}
    unmeasured: dict[str, str] = {}
    for step in plan.steps:
        set_knobs = {KNOB_OF_CHANGE[k] for k in step.changes if k in KNOB_OF_CHANGE} & \
            {k for k in relevant if base[k] != new[k]}
        if step.changes.get("finetune") == "qlora":
            set_knobs.discard("lora_rank")
        if int(step.changes.get("checkpoint_every") or 1) > 1:
            set_knobs.discard("checkpointing")  # a share of the layers: no knob measures it
        if not set_knobs:
            unmeasured[step.id] = _unmeasured_reason(step.changes, phase)
            continue
        for knob in sorted(set_knobs):
            steps.setdefault(knob, []).append(step.id)
    if not steps:
        return None, unmeasured
    spec = PlanTrialSpec(
        phase=phase, metric=goal_spec(goal).trial_metric,
        batch=base_wl.batch, context_len=base_wl.prompt_len + base_wl.gen_len,
        seq_len=base_wl.prompt_len, baseline=base, plan=new, steps=steps)
    return spec, unmeasured


def metric_words(spec: PlanTrialSpec) -> str:
    """Return what the stacked step's ratio compares, in words."""
    return METRIC_WORDS[(spec.phase, spec.metric)]


# ---------------------------------------------------------------------------------------
# the model's ratio for the step the trial ran


def _trial_spec_of(workload: Workload, shape: dict[str, Any]) -> Any:
    """Cut the workload's architecture to the trial's block: dense, no embeddings to speak of."""
    spec = workload.spec
    if spec is None:
        return None
    return spec.model_copy(update={
        "hidden_size": int(shape["hidden_size"]), "num_heads": int(shape["num_heads"]),
        "num_kv_heads": int(shape["num_kv_heads"]), "head_dim": int(shape["head_dim"]),
        "intermediate_size": int(shape["intermediate_size"]), "num_layers": int(shape["layers"]),
        # The trial's stack has no embedding or LM head: one vocabulary entry leaves them out.
        "vocab_size": 1, "tied_embeddings": True, "attention": "gqa", "qkv_bias": False,
        "o_bias": False, "mlp_bias": False, "gated_mlp": True, "norm": "rmsnorm",
        "norms_per_layer": 2, "qk_norm": False, "q_lora_rank": None, "kv_lora_rank": None,
        "qk_rope_head_dim": None, "qk_nope_head_dim": None, "v_head_dim": None,
        "sliding_window": None, "sliding_window_layers": None, "num_experts": 0,
        "experts_per_token": 0, "num_shared_experts": 0, "moe_intermediate_size": None,
        "shared_expert_intermediate_size": None, "shared_expert_gate": False,
        "router_score_bias": False, "dense_layers": 0, "moe_layers": None, "mtp_layers": 0,
    })


def _side(workload: Workload, spec: Any, knob: dict[str, Any], phase: str, batch: int,
          applied: dict[str, Any]) -> tuple[Workload, ModelOptions]:
    """Return the trial's side as a workload and options for the performance model."""
    from hwadvisor.workload.params import count_params

    total, active = count_params(spec)
    weights = {"bf16": "bf16", "int4": "int4", "fp8": "fp8"}.get(str(knob["weights"]), "bf16")
    kv = "fp8" if knob["kv"] == "fp8" else "bf16"
    ckpt = str(knob["checkpointing"])
    length = int(applied.get("context_len" if phase == "inference" else "seq_len", 1))
    wl = workload.model_copy(update={
        "spec": spec, "params_total": total, "params_active": active, "batch": batch,
        "prompt_len": length, "gen_len": 1 if phase == "inference" else 0,
        "weights_dtype": weights, "kv_dtype": kv, "activation_dtype": "bf16",
        "engine": "hf", "gpus": 1, "nodes": 1, "gpus_per_node": None, "grad_accum": 1,
        "activation_checkpointing": ckpt != "none", "is_default": False,
    })
    rank = int(knob["lora_rank"])
    opts = ModelOptions(
        attention_kernel="math" if knob["attention"] == "math" else "flash",
        cuda_graphs=bool(knob["cuda_graphs"]), fused_optimizer=bool(knob["fused_optimizer"]),
        selective_checkpointing=ckpt == "selective",
        finetune="lora" if rank > 0 else "full", lora_rank=max(1, rank),
        quant_kernel="torch-int4" if weights == "int4" else None,
        host_overhead_s=0.0,  # a plain loop of steps: no engine scheduler between them
    )
    return wl, opts


def _per_token(est: Any, phase: str, tokens: float, metric: str) -> float | None:
    if metric == "memory":
        m = est.memory
        if phase == "inference":
            # The stacked step decodes against a filled cache: its tensors are the weights and
            # the KV cache (a decode step's own activations are a few rows); the model's
            # activation figure is the prefill's peak, which the step never runs.
            return float(m.weights_bytes + m.kv_cache_bytes)
        # The allocator's bytes: tensors only, not the CUDA context and slack allowance.
        return float(m.total_bytes - m.runtime_bytes)
    step = est.times.decode_step_s if phase == "inference" else est.times.train_step_s
    return None if step is None or tokens <= 0 else float(step) / tokens


def predicted_ratio(workload: Workload, device: Device, phase: str, metric: str,
                    applied: dict[str, Any]) -> float | None:
    """Return the model's ratio for the step the trial ran (PlanValidation says its direction).

    applied: "baseline" and "plan" knobs, "shape" (the trial's block widths and layers),
    "baseline_batch", "plan_batch", and "context_len" or "seq_len".
    """
    from hwadvisor.perfmodel import estimate

    ran = str(applied.get("device", ""))
    if ran.startswith("cpu") and str(device.device_class) != "cpu":
        return None  # measured on the host CPU, planned for a GPU: no prediction to compare
    spec = _trial_spec_of(workload, applied["shape"])
    if spec is None:
        return None
    values = []
    for side in ("baseline", "plan"):
        batch = int(applied[f"{side}_batch"])
        wl, opts = _side(workload, spec, applied[side], phase, batch, applied)
        est = estimate(wl, device, opts)
        tokens = float(batch) * (1 if phase == "inference" else wl.prompt_len)
        values.append(_per_token(est, phase, tokens, metric))
    base, new = values
    if base is None or new is None or base <= 0 or new <= 0:
        return None
    return new / base if metric == "memory" else base / new
