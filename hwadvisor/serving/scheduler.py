"""The engine's scheduler for a workload on a device: its policy, limits and KV pool.

Everything comes from the engine's data file ([defaults]: scheduling, max_concurrent_sequences,
step_tokens or the prefill chunk, kv_memory_fraction) and the memory model, unless the plan
sets a knob (max sequences, step tokens) itself.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hwadvisor.engines import engine_for
from hwadvisor.models import Device, ModelOptions, Workload
from hwadvisor.perfmodel import constants as C
from hwadvisor.perfmodel import estimate_memory
from hwadvisor.perfmodel.memory import kv_cache_bytes
from hwadvisor.perfmodel.steps import StepModel
from hwadvisor.serving.simulate import Policy, Scheduler

# A replica whose engine names no sequence limit runs at most this many (transformers
# generate() runs the batch it is given: the planned batch stands for it).
FALLBACK_MAX_SEQS = 256
FALLBACK_STEP_TOKENS = 2048  # an engine that states no step budget: llama-server's n_batch


@dataclass(frozen=True)
class Knobs:
    """Scheduler settings a plan may set; None keeps the engine's default."""

    max_seqs: int | None = None
    step_tokens: int | None = None
    kv_pool_tokens: int | None = None  # llama-server's --ctx-size: the cache it allocates
    # llama-server's --kv-unified: None keeps the server's rule (unified only for the auto slot
    # count, i.e. when max_seqs is not set); only an engine with stream_per_slot reads it
    kv_unified: bool | None = None


def policy_of(workload: Workload) -> Policy:
    """Return the engine's scheduling: its data file's, else mixed with continuous batching."""
    defaults = engine_for(workload).defaults
    if defaults.scheduling is not None:
        return defaults.scheduling
    return "mixed" if defaults.continuous_batching else "static"


def default_max_seqs(workload: Workload, device: Device, pool_tokens: int,
                     context_len: int | None) -> int:
    """Return the sequences a replica runs at once by default.

    The engine's tier for this GPU, else its fixed figure, else (SGLang) the rule that follows
    the KV pool, else the planned batch for an engine without continuous batching.
    """
    defaults = engine_for(workload).defaults
    tier = defaults.tier_on(device.memory_total_bytes, device.name)
    if tier is not None and tier.max_sequences is not None:
        return tier.max_sequences
    if defaults.max_concurrent_sequences is not None:
        return defaults.max_concurrent_sequences
    if defaults.max_sequences_from_pool:
        # SGLang mem_cache/kv_cache_configurator.py: max_running_requests = None resolves to
        # min(clamp(pool / context_len * 512, 2048, 4096), pool / 2)
        per_context = pool_tokens / max(context_len or 4096, 1) * 512
        return max(1, int(min(min(max(per_context, 2048), 4096), pool_tokens / 2)))
    if not defaults.continuous_batching:
        return max(workload.batch, 1)
    return FALLBACK_MAX_SEQS


def default_step_tokens(workload: Workload, device: Device) -> int:
    """Return the tokens one step batches by default: step_tokens, else the GPU's chunk."""
    defaults = engine_for(workload).defaults
    if defaults.step_tokens is not None:
        return defaults.step_tokens
    tier = defaults.tier_on(device.memory_total_bytes, device.name)
    if tier is not None:
        return tier.tokens
    return defaults.prefill_chunk_tokens or FALLBACK_STEP_TOKENS


def kv_pool_tokens(steps: StepModel, workload: Workload, device: Device,
                   options: ModelOptions, step_tokens: int, stages: int = 1) -> int:
    """Tokens of KV cache one replica holds after its weights and a full step's activations.

    The engine's reservation (kv_memory_fraction: vLLM's gpu_memory_utilization) caps what the
    weights, activations and cache may take together; the cache gets the rest, per GPU, and a
    token's cache is spread over the replica's tensor-parallel GPUs. `stages`: the layers (and
    with them the weights and each token's cache) split over that many GPUs of the memory
    `steps` counts for one (llama.cpp's layer split).
    """
    memory = device.memory_total_bytes
    spec, layout = steps.setup.spec, steps.setup.layout
    probe = workload.model_copy(update={"batch": 1, "prompt_len": max(step_tokens, 1),
                                        "gen_len": 1})
    est = estimate_memory(probe, device, options)
    if not memory:
        return 1 << 30  # no device memory figure: the cache is not what limits
    fraction = engine_for(workload).defaults.kv_memory_fraction or 1.0
    others = est.total_bytes - est.kv_cache_bytes
    per_token = kv_cache_bytes(spec, workload.kv_dtype, 1, 1, layout.attn_tp)
    if per_token <= 0:
        return 1 << 30  # no attention cache (a recurrent model): the slots limit, not memory
    free = memory * fraction * stages - others
    return max(int(free / per_token), 0)


# llama.cpp pads each slot's context to 256 tokens (llama-context.cpp GGML_PAD(n_ctx_seq, 256)).
SLOT_PAD = 256


def slot_of(tokens: float, window: int | None) -> int:
    """Return the tokens an up-front slot holds for requests of `tokens`: padded, in the window."""
    slot = -(-int(math.ceil(tokens)) // SLOT_PAD) * SLOT_PAD
    return min(slot, window) if window else slot


def kv_streams(workload: Workload, knobs: Knobs, max_seqs: int) -> tuple[bool, bool]:
    """(one stream per slot, one unified pool read whole) for the engine and the plan's knobs.

    llama-server (engines' stream_per_slot): tools/server/server.cpp turns kv_unified on only
    when the slot count is auto (n_parallel = -1 -> 4 slots); an explicit --parallel keeps one
    KV stream per slot unless --kv-unified is given.
    """
    if not engine_for(workload).defaults.stream_per_slot or max_seqs <= 1:
        return False, False
    unified = knobs.kv_unified if knobs.kv_unified is not None else knobs.max_seqs is None
    return not unified, unified


def speculation(options: ModelOptions) -> tuple[float, float, float]:
    """(tokens a decode step yields, rows it verifies, the draft's cost) a sequence, per step.

    As the estimate counts them (perfmodel/context.verify_tokens, core._draft_cost): the
    target verifies the k drafted tokens and one of its own, whatever is accepted; the drafter's
    forwards cost its share of a target step (perfmodel/drafters.py).
    """
    from hwadvisor.perfmodel.drafters import drafter

    accepted = options.speculative_tokens_per_step
    if accepted <= 1.0:
        return 1.0, 1.0, 0.0
    drafted = options.speculative_draft_tokens
    verify = max(float(drafted + 1), accepted) if drafted is not None else accepted
    cost = drafter(options.speculative_drafter).draft_cost \
        if options.speculative_drafter is not None else C.SPECULATIVE_DRAFT_COST_FRACTION
    return accepted, verify, cost


def scheduler_for(steps: StepModel, workload: Workload, device: Device, options: ModelOptions,
                  knobs: Knobs, prefix_share: float, tokens_per_step: float = 1.0) -> Scheduler:
    """Return the scheduler one replica of the workload runs, with the plan's knobs applied."""
    step = knobs.step_tokens or default_step_tokens(workload, device)
    pool = knobs.kv_pool_tokens or kv_pool_tokens(steps, workload, device, options, step)
    window = steps.setup.spec.max_position_embeddings
    accepted, verify, cost = speculation(options)
    if tokens_per_step != accepted:  # a caller's own figure: verified as accepted, no draft
        accepted, verify, cost = tokens_per_step, tokens_per_step, 0.0
    max_seqs = knobs.max_seqs or default_max_seqs(workload, device, pool, window)
    per_slot, unified = kv_streams(workload, knobs, max_seqs)
    return Scheduler(
        policy=policy_of(workload),
        max_seqs=max_seqs,
        step_tokens=step,
        kv_pool_tokens=pool,
        prefix_share=prefix_share,
        tokens_per_step=accepted,
        verify_tokens=verify,
        draft_cost=cost,
        stream_per_slot=per_slot,
        unified_pool=unified,
        decode_run=engine_for(workload).defaults.scheduler_steps,
    )
