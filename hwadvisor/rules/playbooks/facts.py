"""The facts rules are judged on: one typed `Facts` built from the workload, estimate and device.

Conditions test these facts and why/why-not templates quote them by field name; the rule
schema refuses a template naming anything else, and conditions.py a condition that reads a
field `Facts` lacks.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from hwadvisor import units
from hwadvisor.models import Device, Estimate, HostInfo, ModelOptions, Workload
from hwadvisor.perfmodel.memory import ordinal

if TYPE_CHECKING:
    from hwadvisor.engines import Engine

GB = units.GB  # decimal gigabytes, as datasheets and model cards count them

# Headroom below this share of the memory limit counts as "tight" (allocator fragmentation and
# a few spikes eat it; PyTorch's caching allocator commonly needs several percent slack).
TIGHT_HEADROOM_FRACTION = 0.10


@dataclass(frozen=True)
class Facts:
    """Every fact a rule's conditions test and its why / why-not texts quote, for one state.

    Adding a fact: one field here (its type and a one-line doc) and its value in
    `build_facts`; conditions and templates then name it by this field name.
    """

    model: str
    """Model name."""
    engine: str
    """Engine id (vllm, llamacpp, hf ...)."""
    engine_name: str
    """Engine name in words."""
    host_memory_gb: str
    """Host RAM of the planned system."""
    host_memory_bytes: int | None
    """Host RAM of the planned system in bytes (None when unknown)."""
    seq_len: int
    """Prompt plus generated tokens."""
    mtp_layers: int
    """Multi-token-prediction heads the checkpoint ships (DeepSeek-V3: 1)."""
    knobs_on: list[str]
    """The engine knobs already on (cuda_graphs, compiled, fused_optimizer ...)."""
    chunked_prefill: bool
    """The plan prefills in chunks."""
    fp8_usable: bool
    """FP8 tensor cores here and an engine that runs FP8 weights."""
    fp4_usable: bool
    """FP4 tensor cores here and an engine that runs FP4 weights."""
    finetune: str
    """Full, lora or qlora."""
    master_weights: bool
    """Training keeps an fp32 master copy of the weights (off: pure 16-bit)."""
    engine_named: bool
    """The user named the engine (--engine), so the plan keeps it."""
    four_bit_kernel: str
    """The 4-bit matmul kernel the engine runs, in words."""
    four_bit_recipe: str
    """The engine's published 4-bit recipe for this checkpoint, in its words ('' if none)."""
    params_b: float | None
    """Total parameters, billions."""
    phase: str
    """Inference or training."""
    batch: int
    """Batch size."""
    prompt_len: int
    """Prompt (or training sequence) length."""
    gen_len: int
    """Generated tokens."""
    gpus: int
    """GPUs in the plan."""
    nodes: int
    """Nodes in the plan."""
    gpus_per_node: int
    """GPUs per node."""
    weights_dtype: str
    """Weights dtype."""
    kv_dtype: str
    """KV cache dtype."""
    activation_dtype: str
    """Compute dtype."""
    optimizer: str
    """Optimizer."""
    activation_checkpointing: bool
    """Full activation checkpointing on (nothing more to recompute)."""
    activation_checkpointing_text: str
    """'full', 'selective' or 'off'."""
    features: list[str]
    """Model features (moe, mla, mtp, sliding_window, gqa, mha)."""
    features_text: str
    """Model features in words."""
    device: str
    """Device name."""
    device_class: str
    """Device class."""
    vendor: str
    """Device vendor."""
    arch_text: str
    """Architecture and compute capability in words."""
    cc: str
    """Compute capability (or gfx target), 'unknown' when not known."""
    formats: list[str]
    """Native low-precision formats."""
    formats_text: str
    """Native formats in words."""
    unified_memory: bool
    """Memory shared with the CPU."""
    memory_kind: str
    """'unified memory' or 'discrete memory'."""
    fast_interconnect: bool
    """NVLink/xGMI between GPUs."""
    link_text: str
    """The GPU-to-GPU link in words."""
    bottleneck: str
    """The estimate's bottleneck."""
    bottleneck_why: str
    """The numbers behind the bottleneck."""
    fits: bool
    """The workload fits the memory limit."""
    memory_tight: bool
    """Does not fit, or headroom under 10%."""
    fit_text: str
    """Memory total against the limit, in words."""
    total_gb: str
    """Memory total per GPU."""
    weights_gb: str
    """Weights per GPU."""
    kv_gb: str
    """KV cache per GPU."""
    activations_gb: str
    """Activations per GPU."""
    gradients_gb: str
    """Gradients per GPU."""
    optimizer_gb: str
    """Optimizer state per GPU."""
    limit_gb: str
    """Memory limit (device memory, or the mobile app limit)."""
    headroom_gb: str
    """Limit minus total."""
    limit_bytes: int | None
    """Memory limit in bytes (None when unknown)."""
    headroom_bytes: int | None
    """Limit minus total in bytes (None when unknown)."""
    limit_source: str
    """Where the limit comes from."""
    kv_fraction: float
    """KV cache share of the persistent state (weights, KV, gradients, optimizer)."""
    state_gb: str
    """The persistent state per GPU: weights, KV, gradients, optimizer."""
    activation_fraction: float
    """Activations share of the total."""
    headroom_fraction: float | None
    """Headroom share of the limit."""
    decode_text: str
    """Decode step time in words."""
    prefill_text: str
    """Prefill time in words."""
    train_step_text: str
    """Train step time in words."""
    launch_text: str
    """Launch overhead per step in words."""
    comm_text: str
    """Communication time (exposed) in words."""

    def as_dict(self) -> dict[str, Any]:
        """Return the facts by name, as the why / why-not templates read them."""
        return self.__dict__


FACT_FIELDS: frozenset[str] = frozenset(f.name for f in fields(Facts))


def seconds(value: float | None) -> str:
    """Seconds as '3.42 ms', '1.20 s', '85 µs', or 'unknown'."""
    return units.seconds(value)


def gb(value: float | None) -> str:
    """Bytes as '16.1 GB' (decimal), or 'unknown'."""
    return units.gb(value)


def _features(workload: Workload) -> list[str]:
    spec = workload.spec
    if spec is None:
        return []
    found = []
    if spec.num_experts > 0:
        found.append("moe")
    if spec.attention == "mla" or spec.kv_lora_rank:
        found.append("mla")
    if spec.mtp_layers > 0:  # multi-token-prediction layers shipped with the checkpoint
        found.append("mtp")
    if spec.sliding_window:
        found.append("sliding_window")
    if spec.attention in ("gqa", "mqa") and spec.num_kv_heads < spec.num_heads:
        found.append("gqa")
    if spec.attention == "mha" or (spec.attention != "mla" and spec.num_kv_heads == spec.num_heads):
        found.append("mha")
    return found


def _fast_interconnect(device: Device) -> tuple[bool, str]:
    link = device.interconnect
    if link is not None and link.nvlink is not None:
        nv = link.nvlink
        if (nv.links_active or 0) > 0 or (nv.bandwidth_gbps or 0) > 0:
            bw = f" {nv.bandwidth_gbps:.0f} GB/s" if nv.bandwidth_gbps else ""
            name = "xGMI/Infinity Fabric" if device.vendor == "amd" else "NVLink"
            return True, f"{name}{bw}"
    if link is not None and any((p.link or "").startswith("NV") for p in link.peers):
        return True, "NVLink"
    # AMD's Infinity Fabric (xGMI) joins the 8 GPUs of an MI300X board as NVLink does an HGX:
    # the same test perfmodel/comm.py makes for its link rate.
    if link is not None and link.gpu_link_kind == "xgmi" and link.gpu_link_gbps:
        return True, f"xGMI/Infinity Fabric {link.gpu_link_gbps:.0f} GB/s"
    if link is not None and link.gpu_link_kind == "nvlink" and link.gpu_link_gbps:
        return True, f"NVLink {link.gpu_link_gbps:.0f} GB/s"
    return False, "no NVLink or xGMI (GPUs talk over PCIe)"


def _four_bit_words(workload: Workload, device: Device) -> str:
    """Return the engine's 4-bit kernel in words on this vendor (its data file's int4_words)."""
    return _engine(workload).kernels.words(str(device.vendor))


def _four_bit_recipe(workload: Workload) -> str:
    """Return the engine's 4-bit recipe for this checkpoint in words (ExecuTorch's by model)."""
    recipe = _engine(workload).quantization.get("int4")
    return recipe.for_model(workload.model).name if recipe is not None else ""


MOBILE_APP_LIMIT = "the mobile app memory limit"


def memory_limit(
    estimate: Estimate, device: Device, host: HostInfo | None
) -> tuple[int | None, str]:
    """Return the memory the workload must fit in, and where that number comes from.

    Phones cap what one app may allocate well below the SoC's RAM (3-6 GB), so the app limit
    is the one that matters there.
    """
    if str(device.device_class) == "mobile-soc" and host is not None:
        if host.mobile_app_memory_limit_bytes:
            return host.mobile_app_memory_limit_bytes, MOBILE_APP_LIMIT
    return estimate.memory.device_memory_bytes, f"{device.name} memory"


def fit_text(total: int, limit: int | None, limit_source: str) -> str:
    """'38.2 GB needed, 24.0 GB available: does not fit' and the like."""
    if limit is None:
        return f"{gb(total)} needed; the memory limit is unknown"
    verdict = "fits" if total <= limit else "does not fit"
    return f"{gb(total)} needed of {gb(limit)} ({limit_source}): {verdict}"


_KNOBS = ("cuda_graphs", "compiled", "fused_optimizer", "comm_overlap", "expert_parallel",
          "dp_attention",
          "optimizer_offload", "selective_checkpointing")


def _engine_runs(workload: Workload, fmt: str, device: Device) -> bool:
    from hwadvisor.engines import engine_for

    engine = engine_for(workload)
    if fmt not in engine.weight_formats:
        return False
    if fmt in device.formats:
        return True
    least = engine.weight_only.get(fmt)  # weight-only kernels (vLLM's FP8 Marlin on Ampere)
    return least is not None and device.vendor == "nvidia" and \
        _capability(device.compute_capability) >= _capability(least)


def _capability(text: str | None) -> tuple[int, ...]:
    """Return '8.6' as (8, 6); (0,) when unknown."""
    try:
        return tuple(int(part) for part in (text or "0").split("."))
    except ValueError:
        return (0,)


def build_facts(
    workload: Workload, estimate: Estimate, device: Device, host: HostInfo | None = None,
    options: ModelOptions | None = None,
) -> Facts:
    """Every fact the conditions and templates use, from the inputs."""
    mem = estimate.memory
    limit, limit_source = memory_limit(estimate, device, host)
    total = mem.total_bytes
    fits = estimate.fits if limit == mem.device_memory_bytes else total <= (limit or 0)
    headroom = None if limit is None else limit - total
    headroom_fraction = None if not limit else headroom / limit  # type: ignore[operator]
    tight = (not fits) or (
        headroom_fraction is not None and headroom_fraction < TIGHT_HEADROOM_FRACTION)
    state = mem.weights_bytes + mem.kv_cache_bytes + mem.gradients_bytes + mem.optimizer_bytes
    features = _features(workload)
    fast, link_text = _fast_interconnect(device)
    gpus_per_node = workload.gpus_per_node or max(1, workload.gpus // max(1, workload.nodes))
    cc = device.compute_capability or "unknown"
    arch = device.architecture or (device.nvidia.architecture if device.nvidia else None)
    if device.compute_capability and device.vendor == "nvidia":
        arch_text = f"{arch + ', ' if arch else ''}compute capability {cc}"
    else:
        arch_text = ", ".join(x for x in (arch, device.compute_capability) if x) or "unknown arch"
    params = workload.params_total
    host_bytes = host.memory_total_bytes if host is not None else None
    opts = options or ModelOptions()
    return Facts(
        knobs_on=[k for k in _KNOBS if getattr(opts, k)],
        chunked_prefill=opts.prefill_chunk_tokens is not None,
        fp8_usable=_engine_runs(workload, "fp8", device),
        fp4_usable=_engine_runs(workload, "fp4", device),
        finetune=opts.finetune,
        master_weights=opts.master_weights,
        # a workload built without the CLI (engine_source None) keeps its engine too
        engine_named=workload.engine_source in (None, "--engine")
        or workload.engine_version is not None,
        four_bit_kernel=_four_bit_words(workload, device),
        four_bit_recipe=_four_bit_recipe(workload),
        model=workload.spec.name if workload.spec else workload.model,
        engine=workload.engine,
        engine_name=_engine(workload).name,
        host_memory_gb=gb(host_bytes),
        host_memory_bytes=host_bytes,
        seq_len=workload.prompt_len + workload.gen_len,
        mtp_layers=workload.spec.mtp_layers if workload.spec else 0,
        params_b=None if params is None else params / 1e9,
        phase=workload.phase,
        batch=workload.batch,
        prompt_len=workload.prompt_len,
        gen_len=workload.gen_len,
        gpus=workload.gpus,
        nodes=workload.nodes,
        gpus_per_node=gpus_per_node,
        weights_dtype=workload.weights_dtype,
        kv_dtype=workload.kv_dtype,
        activation_dtype=workload.activation_dtype,
        optimizer=workload.optimizer,
        # Selective checkpointing (attention only) can still go full: only full is the end.
        activation_checkpointing=workload.activation_checkpointing and
        not opts.selective_checkpointing and opts.checkpoint_every <= 1,
        activation_checkpointing_text=_checkpointing_level(workload, opts),
        features=features,
        features_text=", ".join(features) or "none of moe, mla, sliding_window",
        device=device.name,
        device_class=str(device.device_class),
        vendor=device.vendor,
        arch_text=arch_text,
        cc=cc,
        formats=list(device.formats),
        formats_text=", ".join(device.formats) or "unknown",
        unified_memory=device.unified_memory,
        memory_kind="unified memory" if device.unified_memory else "discrete memory",
        fast_interconnect=fast,
        link_text=link_text,
        bottleneck=estimate.bottleneck,
        bottleneck_why=estimate.bottleneck_why,
        fits=fits,
        memory_tight=tight,
        fit_text=fit_text(total, limit, limit_source),
        total_gb=gb(total),
        weights_gb=gb(mem.weights_bytes),
        kv_gb=gb(mem.kv_cache_bytes),
        activations_gb=gb(mem.activations_bytes),
        gradients_gb=gb(mem.gradients_bytes),
        optimizer_gb=gb(mem.optimizer_bytes),
        limit_gb=gb(limit),
        limit_bytes=limit,
        headroom_gb=gb(headroom),
        headroom_bytes=headroom,
        limit_source=limit_source,
        # Against the persistent state, not the total: transient prefill activations (which
        # chunked prefill bounds) would otherwise hide a KV cache that dominates what stays.
        kv_fraction=mem.kv_cache_bytes / state if state else 0.0,
        state_gb=gb(state),
        activation_fraction=mem.activations_bytes / total if total else 0.0,
        headroom_fraction=headroom_fraction,
        decode_text=seconds(estimate.times.decode_step_s),
        prefill_text=seconds(estimate.times.prefill_s),
        train_step_text=seconds(estimate.times.train_step_s),
        launch_text=seconds(estimate.times.launch_overhead_s),
        comm_text=_comm_text(estimate),
    )


def _checkpointing_level(workload: Workload, options: ModelOptions) -> str:
    if not workload.activation_checkpointing:
        return "off"
    if options.selective_checkpointing:
        return "selective"
    if options.checkpoint_every > 1:
        return f"every {ordinal(options.checkpoint_every)} layer"
    return "full"


def _engine(workload: Workload) -> Engine:
    from hwadvisor.engines import engine_for

    return engine_for(workload)


def _comm_text(estimate: Estimate) -> str:
    total, exposed = estimate.times.communication_s, estimate.times.communication_exposed_s
    if total is None:
        return "no communication"
    if exposed is None:
        return seconds(total)
    return f"{seconds(total)} ({seconds(exposed)} exposed)"
