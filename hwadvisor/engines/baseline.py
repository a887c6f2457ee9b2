"""The starting point of every plan: the workload and knobs as its engine runs them by default."""

from __future__ import annotations

from hwadvisor.models import Device, ModelOptions, Workload


def baseline_options(workload: Workload, device: Device | None = None) -> ModelOptions:
    """Return the knobs as the workload's engine runs it by default (engines.toml).

    vLLM and SGLang start with fused attention, CUDA graphs, chunked prefill and tensor
    parallelism over several GPUs; plain transformers runs eagerly with SDPA attention;
    torchtitan shards with FSDP2; llama.cpp splits the layers over the GPUs (--split-mode
    layer: a token runs the GPUs' stages one after the other). Training on several GPUs with an
    engine that names no strategy starts from data parallelism (DDP), what people reach for
    first; fp32 compute means no mixed precision.
    """
    from hwadvisor.engines.catalog import engine_for

    defaults = engine_for(workload).defaults
    training = workload.phase == "training"
    sharding = defaults.sharding if workload.gpus > 1 else "none"
    layout: dict[str, int | None] = {}
    if sharding == "layers":
        # as pipeline stages that a token runs one after the other (perfmodel/compute.py
        # _layer_share: inference sums the stages); tensor parallelism of one GPU each
        sharding = "none" if training else "tp"
        if not training:
            layout = {"tp_size": 1, "pipeline_stages": workload.gpus}
    if sharding == "none" and workload.gpus > 1:
        sharding = "ddp" if training else "tp"
    if sharding == "tp" and training:
        sharding = "ddp"  # a serving engine's TP default says nothing about training
    on_gpu = device is None or str(device.device_class) in ("datacenter-gpu", "consumer-gpu")
    graphs = defaults.cuda_graphs and on_gpu and (device is None or device.vendor in (
        "nvidia", "amd"))
    chunk = None
    if defaults.chunked_prefill and not training and defaults.prefill_chunk_tokens:
        chunk = defaults.chunk_on(device.memory_total_bytes if device is not None else None)
    return ModelOptions.model_validate({
        "sharding": sharding,
        "mixed_precision": workload.activation_dtype not in ("fp32", "tf32"),
        "attention_kernel": workload.attention_kernel or defaults.attention_kernel,
        "cuda_graphs": bool(graphs and not training),
        "compiled": defaults.compiled,
        "fused_optimizer": defaults.fused_optimizer and training,
        "prefill_chunk_tokens": chunk,
        **layout,
    })


def baseline(workload: Workload, device: Device | None = None) -> tuple[Workload, ModelOptions]:
    """Return the workload and knobs as its engine runs them by default (see baseline_options).

    Engines that checkpoint activations by default (torchtitan: selective) start with it on, at
    the level their defaults say (`--engine-option checkpointing=none|selective|full`).
    """
    from hwadvisor.engines.catalog import engine_for

    options = baseline_options(workload, device)
    level = engine_for(workload).defaults.checkpointing
    if workload.phase == "training" and level != "none" and not workload.activation_checkpointing:
        workload = workload.model_copy(update={"activation_checkpointing": True})
        options = options.model_copy(update={"selective_checkpointing": level == "selective"})
    return workload, options
