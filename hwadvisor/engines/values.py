"""The vocabulary between a plan and an engine's config: one typed field per template value.

The advice (rules/engine_config.py) settles what each value means once for every engine and
fills a `PlanValues`; the renderer (render.py) says them in the engine's syntax. The
{placeholders} an engine's data file may use are this model's fields (schema.PLACEHOLDERS is
derived from them), so a new value is one field here and nowhere else.

A field not given is missing: a template that needs it is refused with its name (a test may
hand the renderer a few values). A field given as None is the plan's way of saying "none"
(no prefill chunk to raise, no precision to say): a layout key that is None is not emitted.
"""

from __future__ import annotations

from typing import get_args

from pydantic import BaseModel, ConfigDict


class PlanValues(BaseModel):
    """The plan's values an engine's flag and setting templates are filled with."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    # the model and the hardware
    model: str | None = None
    """The checkpoint the engine loads"""
    model_name: str | None = None
    """The checkpoint's own name (its repo's last part: Llama-3.2-1B), the folder it is cloned
    into and the name its converted weights take"""
    chat_template: str | None = None
    """The chat format the checkpoint was trained with, as the config names it (its
    by_model table, read by model_name; MLC's --conv-template)"""
    model_class: str | None = None
    """The architecture's name in the engine's model registry, read by model_name from the
    config's by_model table (ExecuTorch's base.model_class)"""
    prequantized: str | None = None
    """The publisher's prequantised checkpoint of the model, read by model_name from the
    config's by_model table (Meta's Llama-3.2-1B-Instruct-SpinQuant_INT4_EO8 for ExecuTorch)"""
    model_flavor: str | None = None
    """The model's size in the engine's model registry, read by model_name from the config's
    by_model table (torchtitan's model.flavor: 8B, 70B, 30B-A3B)"""
    vendor: str | None = None
    """The device's vendor (apple, qualcomm ...); a config's words say its platform (MLC's
    iphone / android)"""
    memory_bytes: int | None = None
    """The plan's memory per device (MLC's estimated_vram_bytes)"""
    gpus: int | None = None
    """GPUs over all nodes"""
    nodes: int | None = None
    gpus_per_node: int | None = None
    # over several nodes (the engine's [config.launch]): the head's address is the user's
    head_address: str | None = None
    """Node 0's address on the network the nodes share: a placeholder the user fills"""
    group_nodes: int | None = None
    """Nodes one engine instance spans (a replica over two nodes: 2; one per node: 1)"""
    node_rank: int | None = None
    """This node's index among group_nodes (0: the head); filled per node by the renderer"""
    dp_local: int | None = None
    """Data-parallel ranks (replicas, or DP-attention ranks) on one node"""
    dp_start_rank: int | None = None
    """The first data-parallel rank on this node (node_rank x dp_local); filled per node"""
    soc_model: str | None = None
    """The Qualcomm SoC part (SM8750 ...)"""
    compute_units: str | None = None
    """The unit the plan models (cpu, gpu, npu); each config says it in its own words (its
    unit_words)"""
    threads: int | None = None
    # the layout, given only where the plan has one: the degrees of tensor, pipeline, context
    # and expert parallelism (ep 1: none), data-parallel attention ranks, FSDP's shard degree
    # and HSDP's replicas
    tp: int | None = None
    """Tensor-parallel degree (per attention rank where the engine counts it so)"""
    pp: int | None = None
    dp: int | None = None
    """Full replicas (FSDP's shards are not replicas)"""
    cp: int | None = None
    ep: int | None = None
    attn_dp: int | None = None
    dp_shard: int | None = None
    dp_replicate: int | None = None
    # the requests
    batch: int | None = None
    """The planned batch (concurrent sequences)"""
    max_batch: int | None = None
    """Sequences the engine may hold at once (per DP rank where it counts so): a paged engine's
    capacity, a slot engine's concurrency"""
    step_tokens: int | None = None
    """The step's token budget, where the planned batch is above the engine's own (None: not
    said)"""
    kv_unified: bool | None = None
    """True: one KV cache the slots share (llama-server --kv-unified), where the serving search
    chose it over a stream a slot; None: not said"""
    eager: bool | None = None
    """True: the plan runs without CUDA graphs where the engine captures them by default (the
    user's --engine-option cuda_graphs=false, kept by the plan), said as the engine's switch"""
    memory_fraction: float | None = None
    """The memory reservation the plan runs with, where it is not the engine's own default
    (vLLM --gpu-memory-utilization, SGLang --mem-fraction-static); None: not said"""
    prompt_len: int | None = None
    gen_len: int | None = None
    context: int | None = None
    """Training: the sequence; serving: the longest request"""
    max_model_len: int | None = None
    """The longest single request"""
    slot_context: int | None = None
    """One request, padded, for engines that allocate each slot up front"""
    kv_pool_tokens: int | None = None
    """The slots times slot_context"""
    chunk: int | None = None  # the prefill chunk in tokens
    # formats and precision
    kv_dtype: str | None = None
    weights_dtype: str | None = None
    precision_fp16: bool | None = None
    """True: say fp16 compute"""
    precision_bf16: bool | None = None
    """True: say bf16 compute (training)"""
    torch_dtype: str | None = None
    """The 16-bit dtype the workload computes in, as torch names it (torch.bfloat16, or
    torch.float16 on a GPU without bf16)"""
    # speculative decoding
    draft: str | None = None
    """The drafter's published checkpoint"""
    spec_tokens: int | None = None
    spec_draft_tokens: int | None = None
    mtp_layers: int | None = None
    """The MTP form's draft depth"""
    mtp_draft_tokens: int | None = None
    # offload
    offload_fraction: float | None = None
    """Weights kept in host RAM"""
    gpu_layers: int | None = None
    """llama.cpp --n-gpu-layers"""
    # training
    fine_tune_type: str | None = None
    """lora or full"""
    lora_rank: int | None = None
    zero_stage: int | None = None
    """3 parameters, 2 gradients, 0 nothing"""
    grad_accum: int | None = None
    global_batch: int | None = None
    """Sequences per optimizer step over all data-parallel ranks"""
    local_batch: int | None = None
    """What one data-parallel rank runs per pipeline schedule"""
    checkpoint_every: int | None = None
    """Every N-th layer checkpointed"""
    recompute_layers: int | None = None
    """One stage's checkpointed layers"""

    def given(self) -> dict[str, object]:
        """Return the values given, by name, as the templates read them."""
        return {name: getattr(self, name) for name in self.model_fields_set}


def sample_values() -> dict[str, object]:
    """Return a stand-in for every field, of its type, to check that templates render."""
    return {name: "m" if str in get_args(field.annotation) else 2
            for name, field in PlanValues.model_fields.items()}
