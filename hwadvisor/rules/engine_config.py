"""The plan in the engine's own words: the values its templates are filled with, and the config.

engine_config() settles what each value means once for every engine (the longest request, a
slot's context, the sequences a paged engine holds) and hands them to the engine's renderer
(engines/render.py), which only says them in the engine's syntax.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from hwadvisor.engines import RenderedConfig
from hwadvisor.engines.schema import EngineConfig as EngineSpec
from hwadvisor.engines.schema import LaunchKind
from hwadvisor.engines.values import PlanValues
from hwadvisor.models import Device, ModelOptions, Plan, Workload
from hwadvisor.models.plan import EngineConfig, EngineLine
from hwadvisor.models.serving import ServingConfig
from hwadvisor.rules.context import RuleContext
from hwadvisor.rules.sizing import longest_request, model_window, window_note
from hwadvisor.serving.scheduler import slot_of
from hwadvisor.workload import engine_model_name

# The QNN SDK's default SoC when the device names none (executorch LlmConfig QNNConfig.soc_model).
_DEFAULT_SOC = "SM8650"


def _soc_model(device: Device) -> str:
    """Return the Qualcomm SoC part number (SM8750 ...) of the planned device, else QNN's default.

    The device carries it from its profile, set where it was made (profiles/devices.py).
    """
    return device.soc_part or _DEFAULT_SOC


def _checkpoint_form(options: ModelOptions) -> str:
    """Return the checkpointing level the model counted: selective, layers (every N-th), full."""
    if options.selective_checkpointing:
        return "selective"
    return "layers" if options.checkpoint_every > 1 else "full"


def _recompute_layers(ctx: RuleContext, plan: Plan) -> int:
    """Return one pipeline stage's checkpointed layers under every-N-th-layer checkpointing.

    Megatron's block method checkpoints the first K layers of each stage
    (megatron/core/transformer/transformer_block.py _checkpointed_forward, core 0.19): K is
    rounded up so no stage keeps more than the model counted.
    """
    every = ctx.options.checkpoint_every
    layers = ctx.workload.spec.num_layers if ctx.workload.spec else 0
    stages = max(plan.layout.pp if plan.layout else 1, 1)
    return -(-(layers // every) // stages)


def _step_tokens(ctx: RuleContext) -> int | None:
    """Return the engine's tokens per step on this GPU (its prefill chunk); None: not stated."""
    from hwadvisor.engines import engine_for

    return engine_for(ctx.workload).defaults.chunk_on(ctx.device.memory_total_bytes)


def _max_sequences(ctx: RuleContext, plan: Plan) -> int:
    """Return the sequences a paged engine may hold at once (vLLM --max-num-seqs).

    The KV pool's capacity, capped at the engine's tokens per step on this GPU (its prefill
    chunk): vLLM refuses to start when max_num_seqs exceeds max_num_batched_tokens
    (config/scheduler.py at 0.33.0, "must be greater than or equal to max_num_seqs"), which
    `vllm serve` sets to 8192 on an H100/H200 and 2048 on smaller GPUs. Never below the
    planned batch.
    """
    capacity = plan.max_batch or ctx.workload.batch
    chunk = _step_tokens(ctx)
    if chunk:
        capacity = min(capacity, chunk)
    return max(capacity, ctx.workload.batch)


def _draft(ctx: RuleContext) -> str | None:
    """Return the published checkpoint of the planned drafter, in the engine's form.

    speculative_plan plans a drafter that needs a checkpoint only where one is published; a
    drafter set any other way without one keeps a placeholder its step note names.
    """
    from hwadvisor.perfmodel.drafters import DRAFTERS
    from hwadvisor.rules.playbooks.planners import published_draft_for

    drafter = ctx.options.speculative_drafter
    if drafter is None or not DRAFTERS[drafter].needs:
        return None
    found = published_draft_for(ctx, drafter)
    return found.id if found is not None else "DRAFT_CHECKPOINT"


def plan_values(ctx: RuleContext, plan: Plan) -> PlanValues:
    """Return the values the engine's flag templates are filled with.

    What each means is settled here, once for every engine: `max_model_len` is the longest
    single request (the model's limit, or what the KV pool holds at batch 1), never the
    per-sequence share at the planned batch; `slot_context` is one request (prompt +
    generation) for engines that allocate each slot up front (llama-server's slots, phones'
    static caches), and `kv_pool_tokens` the slots times that.
    """
    wl, opts = ctx.workload, ctx.options
    layout = plan.layout
    spec = wl.spec
    from hwadvisor.engines import engine_for

    engine = engine_for(wl)
    cls = str(ctx.device.device_class)
    repo = engine_model_name(wl.model, "hf")
    # Engines that page the KV cache take a capacity (vLLM --max-num-seqs); slot-based ones
    # (llama-server --parallel, mlx) take the concurrency you serve.
    paged = engine.defaults.paged_kv
    mtp_layers = max(spec.mtp_layers, 1) if spec else 1  # the MTP form's draft depth
    request = wl.prompt_len + wl.gen_len
    longest = _longest(ctx)
    slot = slot_of(request, model_window(wl))  # padded, never more than the model reads
    slots = wl.batch
    training = wl.phase == "training"
    half = wl.activation_dtype == "fp16" or "bf16" not in ctx.device.formats
    max_batch = _max_sequences(ctx, plan) if paged else wl.batch
    if layout is not None and layout.attn_dp > 1:
        # vLLM's --max-num-seqs and SGLang's --max-running-requests count per DP rank
        max_batch = -(-max_batch // layout.attn_dp)
    values = PlanValues(
        model=engine_model_name(wl.model, engine.config_for(wl.phase, cls).model_source,
                                wl.weights_dtype),
        model_name=repo.rstrip("/").rsplit("/", 1)[-1], vendor=ctx.device.vendor,
        memory_bytes=plan.memory_per_gpu_bytes,
        gpus=wl.gpus, nodes=wl.nodes,
        gpus_per_node=wl.gpus_per_node or wl.gpus // max(wl.nodes, 1),
        batch=wl.batch, max_batch=max_batch,
        # the step's token budget, said only where the planned batch is above the engine's own
        step_tokens=wl.batch if paged and wl.batch > (_step_tokens(ctx) or wl.batch) else None,
        prompt_len=wl.prompt_len, gen_len=wl.gen_len,
        # the reservation the plan was fitted within, said where the user changed the engine's
        memory_fraction=engine.defaults.kv_memory_fraction
        if "kv_memory_fraction" in wl.engine_options else None,
        # the graphs the user switched off stay off unless a step turned them back on
        eager=True if not training and "cuda_graphs" in wl.engine_options and
        not opts.cuda_graphs else None,
        context=wl.prompt_len if training else longest,
        max_model_len=longest,
        slot_context=slot, kv_pool_tokens=slot * slots,
        precision_fp16=True if half and opts.mixed_precision and
        wl.activation_dtype not in ("fp32", "tf32") else None,
        precision_bf16=True if training and opts.mixed_precision and not half and
        wl.activation_dtype == "bf16" else None,
        # bitsandbytes' compute dtype: a T4 or V100 has no bf16 (QLoRA computes in fp16 there)
        torch_dtype="torch.float16" if half else "torch.bfloat16",
        fine_tune_type="lora" if opts.finetune in ("lora", "qlora") else "full",
        zero_stage=_zero_stage(plan, opts),
        # sequences per optimizer step over all data-parallel ranks (Megatron, torchtitan)
        global_batch=wl.batch * wl.grad_accum * (layout.dp if layout is not None else 1),
        # what one data-parallel rank runs per pipeline schedule: the micro-batch, or with
        # pipeline stages all of its micro-batches (torchtitan cuts its local batch into them)
        local_batch=wl.batch * wl.grad_accum if layout is not None and layout.pp > 1
        else wl.batch,
        chunk=opts.prefill_chunk_tokens or 8192, kv_dtype=wl.kv_dtype,
        weights_dtype=wl.weights_dtype, draft=_draft(ctx),
        spec_tokens=opts.speculative_draft_tokens or 3,
        spec_draft_tokens=(opts.speculative_draft_tokens or 3) + 1, grad_accum=wl.grad_accum,
        lora_rank=opts.lora_rank, threads=8, offload_fraction=opts.offload_fraction,
        gpu_layers=_gpu_layers(wl, opts),
        mtp_layers=mtp_layers, mtp_draft_tokens=mtp_layers + 1,
        soc_model=_soc_model(ctx.device),
        # the unit the plan models: the engine's default or --engine-option compute_unit
        compute_units=engine.defaults.compute_unit,
        checkpoint_every=opts.checkpoint_every, recompute_layers=_recompute_layers(ctx, plan),
    )
    if layout is None:
        return values
    # dp is the count of full replicas; FSDP's ranks are its shard degree, not replicas.
    replicas = layout.replicas()
    # vLLM's DP+EP counts tensor parallelism per attention rank (1); SGLang's DP attention
    # keeps the group's --tp-size (the engine's config says which).
    config = engine.config_for(wl.phase, cls)
    tp = layout.tp // layout.attn_dp if config.dp_attention_tp == "attention" else layout.tp
    return values.model_copy(update={
        "tp": tp, "pp": layout.pp, "dp": replicas, "cp": layout.cp, "attn_dp": layout.attn_dp,
        # serving: expert parallelism subdivides one replica's tensor-parallel group, never the
        # replicas (SGLang 0.5.23 arg_groups/moe_hook.py: ep_size must be 1 or tp_size);
        # training: the group of a node's GPUs the model priced (Layout.ep_degree)
        "ep": _expert_parallel(ctx) if training else layout.tp if layout.ep else 1,
        "dp_shard": layout.shard_degree(),
        "dp_replicate": replicas})


def _expert_parallel(ctx: RuleContext) -> int:
    """Return the training plan's expert-parallel degree (1: none), as the model priced it."""
    from hwadvisor.perfmodel.layout import resolve_layout

    return resolve_layout(ctx.workload, ctx.options).ep_degree


def _longest(ctx: RuleContext) -> int:
    """Return the longest single request the config allows (--max-model-len, --context-length).

    What the KV pool holds at batch 1 within the model's window (sizing.longest_request); when
    not even that is known, the request itself, capped at the window. Never the request when it
    is longer than either: the engines refuse to start above them.
    """
    found = longest_request(ctx)
    if found is not None:
        return found
    request = ctx.workload.prompt_len + ctx.workload.gen_len
    window = model_window(ctx.workload)
    return min(request, window) if window else request


# The head node's address in the commands: the user's to fill (no plan knows it).
HEAD_ADDRESS = "HEAD_IP"


def launch_kind(workload: Workload, plan: Plan) -> LaunchKind | None:
    """Return how the plan spans its nodes (the engine's [config.launch] kind); None: one node.

    Training is one job over every node. Serving: replicas when one engine instance (its
    tensor x pipeline group) fits one node, each node then runs its own server; otherwise
    one instance spans nodes, with its attention data-parallel (vLLM's DP + EP) or not.
    """
    if workload.nodes <= 1:
        return None
    if workload.phase == "training":
        return "job"
    layout = plan.layout
    if layout is None or layout.tp * layout.pp <= _per_node(workload):
        return "replicas"
    return "dp-attention" if layout.attn_dp > 1 else "group"


def _per_node(workload: Workload) -> int:
    return workload.gpus_per_node or max(1, workload.gpus // max(workload.nodes, 1))


def _launch_values(workload: Workload, plan: Plan, kind: LaunchKind | None) -> dict[str, object]:
    """Return the values a multi-node launch reads.

    The head's address, the nodes one instance spans and the data-parallel ranks per node; a
    replicas plan's per-node command says its own replicas (dp).
    """
    if kind is None:
        return {}
    per_node = _per_node(workload)
    layout = plan.layout
    if kind == "job" or layout is None:
        return {"head_address": HEAD_ADDRESS, "group_nodes": workload.nodes}
    if kind == "replicas":
        local = max(1, layout.replicas() // max(workload.nodes, 1))
        return {"head_address": HEAD_ADDRESS, "group_nodes": 1, "dp_local": local,
                "dp": local}
    group = -(-layout.tp * layout.pp // per_node)
    return {"head_address": HEAD_ADDRESS, "group_nodes": group,
            "dp_local": max(1, layout.attn_dp // group)}


def _zero_stage(plan: Plan, options: ModelOptions) -> int:
    """Return the plan's sharding as ZeRO counts it: 3 parameters, 2 gradients, 0 nothing."""
    steps = {s.id for s in plan.steps}
    if options.sharding in ("fsdp", "hsdp") or steps & {"fsdp2-zero3", "hsdp", "cpu-offload"}:
        return 3
    if options.optimizer_offload or "optimizer-offload" in steps:
        return 2  # ZeRO-Offload offloads the partitioned optimizer state (stage 1 or 2)
    return 0


def _gpu_layers(workload: Workload, options: ModelOptions) -> int:
    """llama.cpp --n-gpu-layers: all layers, or the share the offload step keeps on the GPU."""
    layers = workload.spec.num_layers if workload.spec else 999
    if not options.offload_fraction:
        return 999  # llama.cpp's "all of them"
    return max(0, int(layers * (1.0 - options.offload_fraction)))


def engine_config(ctx: RuleContext, plan: Plan,
                  serving: ServingConfig | None = None) -> EngineConfig | None:
    """Return the plan in the engine's own words (its data file), each line traced to its step.

    serving: the config the search under a load chose (serving/search.py); its knobs replace
    the plan's: formats, drafter, tensor parallelism, replicas, sequences and step budget.
    """
    if serving is not None:
        return _serving_config(ctx, plan, serving)
    from hwadvisor.engines import (
        STEP_IDS,
        engine_for,
        render_config,
        step_note,
    )

    engine = engine_for(ctx.workload)
    steps = [s.id for s in plan.steps if s.id in STEP_IDS]
    # A move to a serving engine that took the GGUF quant's twin format (serving_engine_plan)
    # needs that checkpoint: the format step's note says which.
    implied = f"{ctx.workload.weights_dtype}-weights"
    twin = ("paged-kv-continuous-batching" in steps and implied not in steps
            and ctx.workload.weights_dtype in ("int4", "int8"))
    # The drafter the plan modelled (speculative_plan), so its acceptance is the one assumed.
    drafter = ctx.options.speculative_drafter
    forms: dict[str, str] = {"speculative-decoding": drafter} if drafter is not None else {}
    if ctx.options.cross_entropy != "plain":
        forms["fused-cross-entropy"] = ctx.options.cross_entropy
    if ctx.workload.activation_checkpointing:
        # The checkpointing level the model counted, in the engine's words.
        forms["activation-checkpointing"] = _checkpoint_form(ctx.options)
    recipe = engine.quantization.get("int4")
    form = recipe.for_model(ctx.workload.model).config_form if recipe is not None else None
    if form is not None:
        # The 4-bit recipe the size was modelled with (a prequantised checkpoint's own export).
        forms["int4-weights"] = form
    elif ctx.workload.weights_dtype == "q4_0" and engine.own_formats.get("int4") != "q4_0":
        forms["int4-weights"] = "legacy"  # Q4_0 chosen over a K-quant mix that would fall back
    values = plan_values(ctx, plan)
    kind = launch_kind(ctx.workload, plan)
    values = values.model_copy(update=_launch_values(ctx.workload, plan, kind))
    if kind == "replicas" and values.dp == 1:
        # one replica a node: each node's command is a single server, the launch note says so
        steps = [s for s in steps if s != "data-parallel-replicas"]
    device_class = str(ctx.device.device_class)
    rendered = render_config(engine, steps, values, device_class, forms, ctx.workload.phase,
                             launch=kind)
    if twin:
        note = step_note(engine, implied, values, device_class=device_class)
        if note is not None:
            rendered = rendered.model_copy(update={"notes": [*rendered.notes, note]})
    capped = window_note(ctx.workload) if ctx.workload.phase == "inference" else None
    if capped is not None:
        rendered = rendered.model_copy(update={"notes": [capped, *rendered.notes]})
    # the plan for each of the engine's other tools (Genie's JSON, a coremltools conversion)
    others = [render_config(engine, steps, values, device_class, forms, "inference", tool)
              for tool in engine.other_configs] if ctx.workload.phase == "inference" else []
    return _said(engine.id, engine.version, rendered,
                 [_said(engine.id, engine.version, other) for other in others])


def _said(engine_id: str, version: str, rendered: Any,
          also: list[EngineConfig] | None = None) -> EngineConfig:
    """Return a rendered config as the report states it."""
    return EngineConfig(
        engine=engine_id, version=version, format=rendered.format, text=rendered.text,
        lines=[EngineLine(setting=line.setting, step=line.step) for line in rendered.lines],
        not_expressed=[f"{n.step}: {n.reason}" for n in rendered.not_expressed],
        notes=list(rendered.notes), tool=rendered.tool, also=also or [],
        launch=rendered.launch, files=dict(rendered.files))


def _pd_rendered(rendered: RenderedConfig, config: EngineSpec, values: PlanValues,
                 chosen: ServingConfig, per_node: int) -> RenderedConfig:
    """Return the rendered config as a P/D launch: each instance's command and the router.

    The groups a node holds run behind one router (the instances pool: one router over them is
    the same groups with a shared queue); beyond a node, each node runs its own such set.
    """
    from hwadvisor.engines import render_pd

    assert config.pd is not None
    per_group = chosen.prefill_instances + chosen.decode_instances
    groups_here = max(1, min(chosen.replicas, per_node // max(chosen.gpus_per_replica, 1)))
    prefill, decode = chosen.prefill_instances * groups_here, chosen.decode_instances * groups_here
    flags = [line.setting for line in rendered.lines]
    text = render_pd(config, flags, values.model_dump(), prefill, decode,
                     chosen.gpus_per_instance)
    notes = [f"disaggregated prefill/decode: {prefill} prefill and {decode} decode instances of "
             f"{chosen.gpus_per_instance} GPU{'s' if chosen.gpus_per_instance > 1 else ''} on a "
             f"node ({groups_here} group{'s' if groups_here > 1 else ''} of {per_group}); "
             f"{config.pd.note}"]
    nodes = -(-chosen.replicas // groups_here)
    if nodes > 1:
        notes.append(f"run the same on each of {nodes} nodes, behind a load balancer over "
                     "their routers")
    return rendered.model_copy(update={"text": text, "notes": [*rendered.notes, *notes]})


def _serving_config(ctx: RuleContext, plan: Plan, chosen: ServingConfig) -> EngineConfig | None:
    """Return the config the serving search chose, as one replica's (or one node's) command.

    Replicas that fit in one node are the engine's data parallelism (vLLM
    --data-parallel-size); beyond a node each replica is its own server behind a balancer,
    which the note says, never one command for GPUs of several nodes.
    """
    from hwadvisor.engines import engine_for, render_config
    from hwadvisor.perfmodel.drafters import DRAFTERS

    engine = engine_for(ctx.workload)
    # the formats the plan started from: the plan's own format steps changed ctx.workload's
    taken = {s.id for s in plan.steps}
    own_weights = None if any(i.endswith("-weights") for i in taken) \
        else ctx.workload.weights_dtype
    own_kv = None if "kv-cache-quantization" in taken else ctx.workload.kv_dtype
    steps = [f"{chosen.weights_dtype}-weights"] if chosen.weights_dtype != own_weights \
        and chosen.weights_dtype in ("fp8", "int8", "int4") else []
    if chosen.kv_dtype != own_kv and chosen.kv_dtype == "fp8":
        steps.append("kv-cache-quantization")
    options = ctx.options.model_copy(update={"speculative_drafter": chosen.speculative})
    forms: dict[str, str] = {}
    if chosen.speculative is not None:
        steps.append("speculative-decoding")
        forms["speculative-decoding"] = chosen.speculative
    per_node = ctx.workload.gpus_per_node or ctx.device.max_gpus_per_node or chosen.gpus
    one_node = chosen.gpus <= per_node
    drafted = DRAFTERS[chosen.speculative].draft_tokens if chosen.speculative else 3
    spec_ctx = dataclasses.replace(ctx, options=options)
    values = plan_values(ctx, plan).model_copy(update={
        "max_batch": chosen.max_sequences, "step_tokens": chosen.step_tokens,
        "tp": chosen.tensor_parallel, "pp": chosen.pipeline_parallel,
        "dp": chosen.replicas if one_node else 1,
        "weights_dtype": chosen.weights_dtype, "kv_dtype": chosen.kv_dtype,
        "gpus": chosen.gpus if one_node else chosen.gpus_per_replica,
        "draft": _draft(spec_ctx), "spec_tokens": drafted, "spec_draft_tokens": drafted + 1})
    if chosen.kv_unified:
        values = values.model_copy(update={"kv_unified": True})
    if chosen.slot_tokens is not None:  # slots sized for the load's long requests
        values = values.model_copy(update={
            "slot_context": chosen.slot_tokens,
            "kv_pool_tokens": chosen.slot_tokens * chosen.max_sequences})
    if chosen.disaggregated:
        values = values.model_copy(update={"dp": 1, "gpus": chosen.gpus_per_instance})
    rendered = render_config(engine, steps, values, str(ctx.device.device_class), forms,
                             "inference")
    if chosen.disaggregated:
        node = (ctx.workload.gpus_per_node or ctx.device.max_gpus_per_node
                or ctx.device.gpus_per_node or 8)  # as the search's (serving/plan.py)
        rendered = _pd_rendered(rendered, engine.config_for("inference"), values, chosen, node)
    if chosen.kv_unified:  # the per-slot split and the streams' cost are not this config's
        rendered = rendered.model_copy(update={"notes": [
            n for n in rendered.notes if not n.startswith(("context:", "max_batch:"))]})
    notes = [f"under the load: the config the serving search chose ({chosen.max_sequences} "
             f"sequences, {chosen.step_tokens} tokens a step, {chosen.split_words()}, "
             f"{chosen.replicas} {'group' if chosen.disaggregated else 'replica'}"
             f"{'s' if chosen.replicas != 1 else ''}), not the "
             "single-request plan's steps"]
    if not one_node and not chosen.disaggregated:
        notes.append(f"run {chosen.replicas} copies of this command, each on its own "
                     f"{chosen.gpus_per_replica} GPU{'s' if chosen.gpus_per_replica > 1 else ''}"
                     f", at most {per_node // chosen.gpus_per_replica} a node, behind a load "
                     "balancer")
    rendered = rendered.model_copy(update={"notes": [*rendered.notes, *notes]})
    return _said(engine.id, engine.version, rendered)
