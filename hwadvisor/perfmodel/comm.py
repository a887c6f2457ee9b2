"""Communication between GPUs: DDP, FSDP2/ZeRO-3 and tensor parallel, within and across nodes.

Collective times follow NCCL's bus-bandwidth convention (nccl-tests PERFORMANCE.md):
all-reduce moves 2(n-1)/n x bytes per GPU, all-gather and reduce-scatter (n-1)/n x the full
buffer, each at the bus bandwidth, plus a fixed latency per collective. The bus bandwidth a
collective reaches grows with its message size (efficiency.collective_protocol_s): a 25 MB
bucket reaches two thirds of what a 1 GB buffer does, a decode step's 16 KB pays the latency.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from hwadvisor.models import Device
from hwadvisor.perfmodel import constants as C
from hwadvisor.perfmodel import efficiency as E
from hwadvisor.perfmodel.context import Setup
from hwadvisor.perfmodel.memory import (
    checkpointed_share,
    expert_weight_bytes,
    grad_bytes_per_param,
    lora_params,
    model_weight_bytes,
    working_weight_dtype,
)


@dataclass
class Link:
    """The bandwidth collectives run at, and what it is."""

    gbps: float
    kind: str  # nvlink, pcie, inter-node, measured
    note: str


@dataclass
class PhaseComm:
    """Communication of one phase per GPU: seconds in all, and the part compute cannot hide."""

    total_s: float = 0.0
    exposed_s: float = 0.0


@dataclass
class CommResult:
    """Per-phase communication, the volumes behind it, and notes."""

    prefill: PhaseComm = field(default_factory=PhaseComm)
    decode: PhaseComm = field(default_factory=PhaseComm)
    train: PhaseComm = field(default_factory=PhaseComm)
    details: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def pcie_gbps(device: Device) -> tuple[float, str]:
    """Effective PCIe bandwidth of the device's link (gen4 x16 ~ 25 GB/s) and how it was known."""
    pcie = device.interconnect.pcie if device.interconnect else None
    gen = (pcie.generation_max or pcie.generation_current) if pcie else None
    width = (pcie.width_max or pcie.width_current) if pcie else None
    known = gen is not None
    gen = gen or C.PCIE_DEFAULT_GENERATION
    per_x16 = C.PCIE_X16_EFFECTIVE_GBPS.get(gen, C.PCIE_X16_EFFECTIVE_GBPS[4])
    gbps = per_x16 * (width or 16) / 16.0
    how = f"PCIe gen{gen} x{width or 16} ~ {gbps:g} GB/s effective"
    return gbps, how if known else how + " (assumed: link not reported)"


def intra_node_link(device: Device, group: int | None = None) -> Link:
    """NVLink when the device has it (x 0.8 NCCL efficiency), else its PCIe link.

    A bridge joins only its domain (H100 PCIe and A100 PCIe NVLink bridges: pairs): a
    collective over more GPUs of the node than that runs at the PCIe link's speed.
    """
    link = device.interconnect
    domain = link.gpu_link_domain if link is not None else None
    bridged = link is not None and link.gpu_link_kind not in (None, "pcie")
    if link is not None and bridged and group is not None and domain is not None \
            and group > domain:
        gbps, how = pcie_gbps(device)
        return Link(gbps, "pcie", f"{group} GPUs exceed the {domain}-GPU {link.gpu_link_kind} "
                    f"domain: {how} bus bandwidth")
    nvlink = link.nvlink if link is not None else None
    if nvlink and nvlink.bandwidth_gbps and (nvlink.links_active is None or nvlink.links_active):
        gbps = nvlink.bandwidth_gbps * C.NVLINK_BUS_EFFICIENCY
        return Link(gbps, "nvlink",
                    f"NVLink {nvlink.bandwidth_gbps:g} GB/s per direction x "
                    f"{C.NVLINK_BUS_EFFICIENCY} NCCL efficiency = {gbps:g} GB/s bus")
    if link is not None and link.gpu_link_kind in ("xgmi", "nvlink-bridge") and \
            link.gpu_link_gbps:
        gbps = link.gpu_link_gbps * C.GPU_LINK_BUS_EFFICIENCY
        return Link(gbps, "nvlink", f"{link.gpu_link_kind} {link.gpu_link_gbps:g} GB/s per "
                    f"direction x {C.GPU_LINK_BUS_EFFICIENCY} collective efficiency = "
                    f"{gbps:g} GB/s bus")
    gbps, how = pcie_gbps(device)
    if not peer_access(device):
        staged = gbps * C.HOST_STAGED_BUS_SHARE
        return Link(staged, "host-staged",
                    f"no peer access between these GPUs (GeForce): NCCL stages every transfer "
                    f"through host memory, {how} x {C.HOST_STAGED_BUS_SHARE} = {staged:g} GB/s "
                    "bus bandwidth")
    return Link(gbps, "pcie", f"no NVLink: {how} bus bandwidth")


def peer_access(device: Device) -> bool:
    """Whether the GPUs reach each other's memory directly (False: NCCL goes through the host).

    The profile says so for GeForce cards (gpu_peer_access = false); a probed device's peers
    carry NVML's reading (nvmlDeviceGetP2PStatus), and all of them refused means the same.
    """
    link = device.interconnect
    if link is None:
        return True
    if link.gpu_peer_access is not None:
        return link.gpu_peer_access
    read = [peer.p2p for peer in link.peers if peer.p2p is not None]
    return not read or any(read)


def inter_node_gbps(setup: Setup) -> tuple[float, str]:
    """Network per GPU between nodes: --inter-node-gbps, else the profile's system, else assumed."""
    given = setup.workload.inter_node_bandwidth_gbps
    if given:
        return given, "workload"
    interconnect = setup.device.interconnect
    if interconnect is not None and interconnect.network_gbps:
        return interconnect.network_gbps, "the profile's reference system"
    return C.INTER_NODE_DEFAULT_GBPS, "assumed 400 Gb/s InfiniBand per GPU"


def bus_link(setup: Setup, measured_busbw_gbps: float | None = None) -> Link:
    """Pick the collectives' bandwidth: measured > NVLink > PCIe, capped by the network."""
    if measured_busbw_gbps:
        link = Link(measured_busbw_gbps, "measured",
                    f"measured bus bandwidth {measured_busbw_gbps:g} GB/s (collectives trial)")
    else:
        link = intra_node_link(setup.device, setup.layout.gpus_per_node)
    if setup.layout.multi_node:
        inter, source = inter_node_gbps(setup)
        if inter < link.gbps:
            link = Link(inter, "inter-node", f"{setup.layout.nodes} nodes: inter-node "
                        f"{inter:g} GB/s per GPU ({source}) caps the bus bandwidth")
    return link


def _latency(link: Link) -> float:
    kind = "nvlink" if link.kind == "measured" else link.kind
    return C.COLLECTIVE_LATENCY_S.get(kind, C.COLLECTIVE_LATENCY_S["pcie"])


def _fixed_s(nbytes: float, link: Link) -> float:
    """Latency plus the mid-size protocol overhead of one collective."""
    kind = "nvlink" if link.kind == "measured" else link.kind
    return _latency(link) + E.collective_protocol_s(nbytes, kind)


def allreduce_s(nbytes: float, n: int, link: Link) -> float:
    """One all-reduce of nbytes over n GPUs: 2(n-1)/n x bytes / bus bandwidth + fixed costs."""
    return 2.0 * (n - 1) / n * nbytes / (link.gbps * C.GB) + _fixed_s(nbytes, link)


def gather_s(nbytes: float, n: int, link: Link) -> float:
    """One all-gather or reduce-scatter of a full buffer of nbytes: (n-1)/n x bytes / busbw."""
    busbw = link.gbps * C.GB * E.collective_op_efficiency("all_gather")
    return (n - 1) / n * nbytes / busbw + _fixed_s(nbytes, link)


def _exposed(total: float, hideable: float, overlap: bool) -> float:
    return max(0.0, total - hideable) if overlap else total


def communication(setup: Setup, busy_s: dict[str, float],
                  measured_busbw_gbps: float | None = None) -> CommResult:
    """Communication per phase.

    busy_s gives each phase's GPU time (the roofline) overlapped communication can hide behind.
    """
    result = CommResult()
    layout = setup.layout
    n = layout.gpus
    if n <= 1:
        return result
    link = bus_link(setup, measured_busbw_gbps)
    result.details["bus_bandwidth_gbps"] = link.gbps
    result.notes.append(f"communication: {link.note}")
    if layout.strategy == "tp":
        # TP inside a node runs on the node's link; only a group crossing nodes sees the network.
        tp_link = link if layout.tp_crosses_nodes else _local_link(setup, measured_busbw_gbps)
        result.details["tp_bus_bandwidth_gbps"] = tp_link.gbps
        _tensor_parallel(setup, tp_link, busy_s, result)
        if setup.training and layout.dp > 1:
            _data_parallel_grads(setup, link, layout.dp, busy_s, result, prefix="tp_dp")
    elif setup.training and layout.strategy == "ddp":
        _data_parallel_grads(setup, link, n, busy_s, result, prefix="ddp")
    elif layout.strategy == "fsdp":
        _fully_sharded(setup, link, busy_s, result, measured_busbw_gbps)
    return result


def _fully_sharded(setup: Setup, link: Link, busy_s: dict[str, float], result: CommResult,
                   measured_busbw_gbps: float | None) -> None:
    """FSDP: per layer, all-gather the weights (forward and backward) and reduce-scatter grads.

    Units are one decoder layer (FSDP2 wraps each block), so each collective is one layer's
    shard group traffic. With a tp_size (2-D), FSDP runs over the dp x cp ranks on the TP shard,
    and TP adds its own all-reduces on the node's link. FSDP2 prefetches the next unit while
    computing: FSDP_IMPLICIT_OVERLAP of the traffic hides without comm_overlap, all of it (up
    to the compute time) with it.
    """
    layout, spec = setup.layout, setup.spec
    n = max(1, layout.shard_degree)
    layers = spec.num_layers / (layout.pp if setup.training else 1)
    weights = model_weight_bytes(setup) / (layout.tp * layout.pp)
    unit = weights / layers
    if layout.tp > 1:
        tp_link = _local_link(setup, measured_busbw_gbps) if not layout.tp_crosses_nodes \
            else link
        result.details["tp_bus_bandwidth_gbps"] = tp_link.gbps
        _tensor_parallel(setup, tp_link, busy_s, result)
    if n <= 1:
        return
    overlap = setup.options.comm_overlap and _overlap_covers(setup) == "all"
    if setup.training:
        gathers_per_unit, rounds = _fsdp_rounds(setup, result)
        total = gathered = scattered = 0.0
        for group_weights, grads, ranks in _sharded_groups(setup, weights):
            if ranks <= 1:
                continue
            gathers = gathers_per_unit * layers * gather_s(group_weights / layers, ranks, link)
            scatter = layers * gather_s(grads / layers, ranks, link)
            total += (gathers + scatter) * rounds
            gathered += gathers_per_unit * (ranks - 1) / ranks * group_weights * rounds
            scattered += (ranks - 1) / ranks * grads * rounds
        busy = busy_s.get("train", 0.0)
        result.train = PhaseComm(result.train.total_s + total,
                                 result.train.exposed_s + _fsdp_exposed(total, busy, overlap))
        result.details.update(fsdp_allgather_bytes=gathered,
                              fsdp_reduce_scatter_bytes=scattered, fsdp_s=total)
        _expert_all_to_all(setup, measured_busbw_gbps, result)
        return
    gather = layers * gather_s(unit, n, link)
    result.prefill = PhaseComm(result.prefill.total_s + gather, result.prefill.exposed_s
                               + _fsdp_exposed(gather, busy_s.get("prefill", 0.0), overlap))
    result.decode = PhaseComm(result.decode.total_s + gather, result.decode.exposed_s
                              + _fsdp_exposed(gather, busy_s.get("decode", 0.0), overlap))
    result.details.update(fsdp_allgather_bytes=(n - 1) / n * weights, fsdp_s=gather)
    result.notes.append("fsdp inference: every forward all-gathers the weights")


def _sharded_groups(setup: Setup, weights: float) -> list[tuple[float, float, int]]:
    """(weight bytes, gradient bytes, ranks) of each group FSDP gathers and scatters over.

    One group, the GPU's TP and PP slice over the shard ranks, unless training spreads the
    routed experts (ep_degree > 1): then each GPU's experts, whole (torchtitan's
    expert_tensor_parallel_degree 1), are sharded only over the ranks that hold the same
    experts (its efsdp mesh, dp_shard x cp x tp / ep; none when EP spans them all), and the
    rest of the model over the shard ranks as before (GShard: experts sharded, the rest
    replicated; Lepikhin et al. arXiv:2006.16668 sec. 2.2).
    """
    layout = setup.layout
    grads = grad_traffic_bytes(setup) / (layout.tp * layout.pp)
    ranks = max(1, layout.shard_degree)
    if layout.ep_degree <= 1 or not setup.parts.moe_layers:
        return [(weights, grads, ranks)]
    expert_whole = expert_weight_bytes(setup.parts, setup.spec, working_weight_dtype(setup))
    experts = expert_whole / (layout.ep_degree * layout.pp)
    expert_grads = 0.0
    if setup.options.finetune == "full":  # adapters are not on the routed experts
        expert_grads = setup.parts.routed_experts * grad_bytes_per_param(setup) / (
            layout.ep_degree * layout.pp)
    rest = max(0.0, weights - expert_whole / (layout.tp * layout.pp))
    rest_grads = max(0.0, grads - setup.parts.routed_experts * grad_bytes_per_param(setup)
                     / (layout.tp * layout.pp)) if expert_grads else grads
    return [(rest, rest_grads, ranks), (experts, expert_grads, layout.expert_shard_degree)]


def _expert_all_to_all(setup: Setup, measured_busbw_gbps: float | None,
                       result: CommResult) -> None:
    """Training EP: each MoE layer's routed tokens go to their experts' GPUs and back.

    Per MoE layer and micro-batch, four all-to-alls of the GPU's own tokens x k x hidden:
    dispatch and combine in the forward, their gradients in the backward (GShard, Lepikhin et
    al. arXiv:2006.16668 sec. 2.2, "AllToAll" before and after the experts; DeepSeek-V3 report
    arXiv:2412.19437 sec. 3.2.2, dispatch and combine per layer), two more where full
    checkpointing recomputes the forward (torchtitan's op SAC saves all_to_all_single's
    output). Inside the node, on its link; counted exposed: torchtitan 0.2.2's standard
    backend waits for the token counts (expert_parallel.py _token_dispatch: "this would incur
    a device-to-host sync") and the experts wait for their tokens.
    """
    layout, spec, wl = setup.layout, setup.spec, setup.workload
    ep = layout.ep_degree
    moe_layers = min(float(setup.parts.moe_layers), float(spec.num_layers))
    if ep <= 1 or moe_layers <= 0:
        return
    link = _local_link(setup, measured_busbw_gbps)
    k = max(1, min(spec.experts_per_token, spec.num_experts))
    local = setup.batch * wl.prompt_len / (layout.cp * layout.tp)  # tokens this GPU routes
    nbytes = local * k * spec.hidden_size * setup.act_bytes
    per_layer = (4.0 + 2.0 * checkpointed_share(setup)) / layout.pp
    total = moe_layers * per_layer * all_to_all_s(nbytes, ep, link) * wl.grad_accum
    result.train = PhaseComm(result.train.total_s + total, result.train.exposed_s + total)
    result.details.update(
        ep_all_to_all_bytes=moe_layers * per_layer * (ep - 1) / ep * nbytes * wl.grad_accum,
        ep_train_s=total)
    result.notes.append(f"expert parallel {ep}: {per_layer * moe_layers:g} all-to-alls of the "
                        f"routed tokens per micro-batch on {link.note}")


def _fsdp_rounds(setup: Setup, result: CommResult) -> tuple[float, float]:
    """All-gathers per unit and per round, and rounds per step, of FSDP's training traffic.

    Without pipeline stages every micro-batch gathers each unit twice (forward, and again in
    the backward after resharding) and reduce-scatters its gradients. With pipeline stages
    torchtitan keeps the stage's parameters unsharded across micro-batches
    (parallelize_llama.apply_fsdp: "For PP, do not reshard after forward to avoid
    per-microbatch all-gathers", torchtitan 2024-12 and since) and torch.distributed.pipelining
    syncs gradients on the last backward only (stage.py backward_maybe_with_nosync): one
    all-gather and one reduce-scatter per step.
    """
    if setup.layout.pp > 1:
        result.notes.append("fsdp with pipeline stages: parameters stay gathered across the "
                            "micro-batches; one all-gather and one reduce-scatter per step")
        return 1.0, 1.0
    return 2.0, float(setup.workload.grad_accum)


def _overlap_covers(setup: Setup) -> str:
    """Return what the engine's overlap switch hides: "all" or "tensor-parallel" (its data)."""
    return E.engine_time(setup.workload, setup.res.family).overlap_covers


def _tp_exposed(setup: Setup, total: float, busy: float, overlap: bool) -> float:
    """TP collectives left exposed: the engine's overlap hides at most its share of them.

    Without overlap all of them; with it, what compute (TP_OVERLAPPABLE_COMPUTE_FRACTION of
    it) cannot cover, and never less than the share the engine's overlap leaves
    (engines/data/<id>.toml [costs] tp_overlap_hidden: torchtitan's async TP hides about half).
    """
    if not overlap:
        return total
    hidden = E.engine_time(setup.workload, setup.res.family).tp_overlap_hidden
    return max(total * (1.0 - hidden), total - C.TP_OVERLAPPABLE_COMPUTE_FRACTION * busy)


def _fsdp_exposed(total: float, busy: float, overlap: bool) -> float:
    """FSDP's exposed share: prefetching hides part without comm_overlap, up to busy with it."""
    if overlap:
        return max(0.0, total - busy)
    hidden = min(busy, total * C.FSDP_IMPLICIT_OVERLAP)
    return total - hidden


def _local_link(setup: Setup, measured_busbw_gbps: float | None) -> Link:
    if measured_busbw_gbps:
        return Link(measured_busbw_gbps, "measured", "measured bus bandwidth")
    return intra_node_link(setup.device, setup.layout.gpus_per_node)


def grad_traffic_bytes(setup: Setup) -> float:
    """Gradient bytes a step reduces: every parameter's, or with LoRA / QLoRA the adapters' only.

    PEFT leaves the frozen base without gradients (requires_grad=False), so DDP's buckets and
    FSDP's reduce-scatters carry the fp32 adapters' gradients alone.
    """
    if setup.options.finetune in ("lora", "qlora"):
        return lora_params(setup) * C.GRAD_BYTES_FP32
    return setup.parts.total * grad_bytes_per_param(setup)


def _data_parallel_grads(setup: Setup, link: Link, n: int, busy_s: dict[str, float],
                         result: CommResult, prefix: str) -> None:
    """All-reduce of the (TP- and PP-sharded) gradients over n replicas, once per step."""
    grads = grad_traffic_bytes(setup) / (setup.layout.tp * setup.layout.pp)
    buckets = max(1, math.ceil(grads / C.DDP_BUCKET_BYTES))
    total = allreduce_s(grads, n, link) + (buckets - 1) * _latency(link)
    # The backward of the last micro-batch (2/3 of its compute) can hide the bucketed all-reduce.
    hideable = busy_s.get("train", 0.0) / setup.workload.grad_accum * 2.0 / 3.0
    exposed = _exposed(total, hideable, setup.options.comm_overlap)
    result.train = PhaseComm(result.train.total_s + total, result.train.exposed_s + exposed)
    result.details[f"{prefix}_allreduce_bytes"] = 2.0 * (n - 1) / n * grads
    result.details[f"{prefix}_allreduce_s"] = total


def _tensor_parallel(setup: Setup, link: Link, busy_s: dict[str, float],
                     result: CommResult) -> None:
    """TP: two all-reduces of the tokens' activations per layer forward; four with backward.

    With sequence parallelism (training) each all-reduce becomes an all-gather plus a
    reduce-scatter of the same total volume, so the all-reduce figure stands.
    """
    wl, spec, n = setup.workload, setup.spec, setup.layout.tp
    h_bytes = spec.hidden_size * setup.act_bytes
    overlap = setup.options.comm_overlap and not setup.layout.tp_crosses_nodes

    def phase(tokens: float, per_layer: float, busy: float) -> PhaseComm:
        total = spec.num_layers * per_layer * allreduce_s(tokens * h_bytes, n, link)
        return PhaseComm(total, _tp_exposed(setup, total, busy, overlap))

    if setup.training:
        recompute = 2.0 * checkpointed_share(setup)  # the recomputed layers' forward again
        tokens = setup.batch * wl.prompt_len / setup.layout.cp
        per_layer = (4.0 + recompute) / setup.layout.pp  # a stage's share of the layers
        micro = phase(tokens, per_layer, busy_s.get("train", 0.0) / wl.grad_accum)
        result.train = PhaseComm(result.train.total_s + micro.total_s * wl.grad_accum,
                                 result.train.exposed_s + micro.exposed_s * wl.grad_accum)
        result.details.update(tp_allreduce_bytes=spec.num_layers * per_layer * 2.0
                              * (n - 1) / n * tokens * h_bytes * wl.grad_accum,
                              tp_train_s=result.train.total_s)
        return
    start, end = setup.workload.prompt_len * setup.options.prefix_cache_hit, wl.prompt_len
    prefill_tokens = setup.batch * max(1.0, end - start)
    decode_tokens = setup.batch * setup.verify_tokens
    if setup.layout.attn_dp > 1:
        _dp_attention(setup, link, prefill_tokens, decode_tokens, busy_s, result)
        return
    result.prefill = phase(prefill_tokens, 2.0, busy_s.get("prefill", 0.0))
    result.decode = phase(decode_tokens, 2.0, busy_s.get("decode", 0.0))
    result.details.update(
        tp_prefill_bytes=spec.num_layers * 2.0 * 2.0 * (n - 1) / n * prefill_tokens * h_bytes,
        tp_prefill_s=result.prefill.total_s,
        tp_decode_bytes=spec.num_layers * 2.0 * 2.0 * (n - 1) / n * decode_tokens * h_bytes,
        tp_decode_s=result.decode.total_s,
    )


def all_to_all_s(nbytes: float, n: int, link: Link) -> float:
    """One all-to-all where each GPU holds nbytes for all n GPUs: it sends (n-1)/n of them."""
    busbw = link.gbps * C.GB * E.collective_op_efficiency("all_to_all")
    return (n - 1) / n * nbytes / busbw + _fixed_s(nbytes, link)


def _dp_attention(setup: Setup, link: Link, prefill_tokens: float, decode_tokens: float,
                  busy_s: dict[str, float], result: CommResult) -> None:
    """Data-parallel attention with expert parallelism: all-to-alls around every MoE layer.

    No all-reduce after attention (each GPU owns its sequences). Each MoE layer dispatches the
    GPU's own tokens to the experts' GPUs (k copies of the hidden state) and combines them back:
    two all-to-alls of local tokens x k x hidden. Dense layers (DeepSeek's first three) run
    their MLP tensor-parallel over the gathered tokens: one all-reduce-sized exchange each. Over
    NVLink/xGMI inside a node at the node's bus bandwidth; across nodes at the network's.
    """
    spec, n = setup.spec, setup.layout.tp
    h_bytes = spec.hidden_size * setup.act_bytes
    k = max(1, min(spec.experts_per_token, spec.num_experts))
    moe_layers = min(float(setup.parts.moe_layers), float(spec.num_layers))
    dense_layers = spec.num_layers - moe_layers
    overlap = setup.options.comm_overlap
    frac = C.TP_OVERLAPPABLE_COMPUTE_FRACTION

    def phase(tokens: float, busy: float) -> PhaseComm:
        local = tokens / n * k * h_bytes
        total = moe_layers * 2.0 * all_to_all_s(local, n, link) + \
            dense_layers * allreduce_s(tokens * h_bytes, n, link)
        return PhaseComm(total, _exposed(total, frac * busy, overlap))

    result.prefill = phase(prefill_tokens, busy_s.get("prefill", 0.0))
    result.decode = phase(decode_tokens, busy_s.get("decode", 0.0))
    result.details.update(
        ep_all_to_all_decode_bytes=moe_layers * 2.0 * (n - 1) / n * decode_tokens / n * k
        * h_bytes, ep_decode_s=result.decode.total_s, ep_prefill_s=result.prefill.total_s)
    result.notes.append(f"data-parallel attention + expert parallelism over {n} GPUs: two "
                        "all-to-alls (dispatch, combine) per MoE layer")
