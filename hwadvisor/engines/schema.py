"""The schema of an engine's data file (hwadvisor/engines/data/<id>.toml).

One file per engine (vLLM, SGLang, llama.cpp, torchtitan, ...) records where it runs, what it
does by default (so the advisor never recommends it again), what it cannot do, what it costs
outside the GPU's kernels and which kernels it runs per weight format (the performance model
reads both), and how a plan step is said in its own configuration language (command-line flags,
a torchtitan TOML fragment, a DeepSpeed JSON object, or Python keyword arguments). Every
default carries the source it was read from and the version checked.

Unknown keys are refused, so a typo fails at load time; an engine without costs, kernels or a
config does not load.
"""

from __future__ import annotations

import json
import re
import shlex
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from hwadvisor.engines.values import PlanValues, sample_values
from hwadvisor.models.hardware import DeviceClass
from hwadvisor.models.workload import EngineId, Phase

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

DATA_FILE = "engines.toml"

# Plan step ids the advisor emits; every playbook rule id is one of them (tests check that).
STEP_IDS: tuple[str, ...] = (
    "flash-attention", "prefix-caching", "fp8-weights", "int8-weights", "fp4-weights",
    "int4-weights", "cuda-graphs", "speculative-decoding", "paged-kv-continuous-batching",
    "chunked-prefill", "pd-disaggregation", "kv-cache-quantization", "data-parallel-replicas",
    "expert-parallel", "dp-attention", "smaller-model", "torch-compile", "bf16-mixed-precision",
    "fp16-mixed-precision", "fp8-training", "fsdp2-zero3", "hsdp", "tensor-parallel-in-node",
    "pipeline-parallel", "context-parallel", "fused-adamw", "activation-checkpointing", "lora",
    "qlora", "optimizer-8bit", "pure-bf16-adamw-8bit", "trainer-pure-bf16-adamw-8bit",
    "optimizer-offload", "cpu-offload", "mmap-weights", "memory-reservation",
    "sliding-window-or-mla", "micro-batch", "fused-cross-entropy",
)
# Forms of a step that depend on the model, keyed "<step>-<form>": a config that has the form
# says the step that way when the plan asks for it (render_config's forms), else the plain one.
# Speculative decoding by drafter (hwadvisor/perfmodel/drafters.py): ngram (prompt lookup),
# draft-model (a small model of the same tokenizer), eagle3 / medusa (trained draft heads), mtp
# (the checkpoint's multi-token-prediction layers). An engine runs the drafters it has a form for.
# full / selective: activation checkpointing of every layer's whole forward, or of the
# attention core only (Korthikanti et al. 2022); engines name the two differently.
STEP_FORMS: dict[str, tuple[str, str]] = {
    "speculative-decoding-mtp": ("speculative-decoding", "mtp"),
    "speculative-decoding-ngram": ("speculative-decoding", "ngram"),
    "speculative-decoding-draft-model": ("speculative-decoding", "draft-model"),
    "speculative-decoding-eagle3": ("speculative-decoding", "eagle3"),
    "speculative-decoding-medusa": ("speculative-decoding", "medusa"),
    "activation-checkpointing-full": ("activation-checkpointing", "full"),
    "activation-checkpointing-selective": ("activation-checkpointing", "selective"),
    # layers: every N-th decoder layer checkpointed whole, the others keep their activations
    # ({checkpoint_every} = N; {recompute_layers}: the checkpointed layers of one pipeline stage)
    "activation-checkpointing-layers": ("activation-checkpointing", "layers"),
    # chunked: the loss from the hidden states chunk by chunk (Liger); fused: one CE kernel
    "fused-cross-entropy-chunked": ("fused-cross-entropy", "chunked"),
    "fused-cross-entropy-fused": ("fused-cross-entropy", "fused"),
    # prequantized: 4-bit weights from a checkpoint shipped already quantised (Meta's Llama 3.2
    # SpinQuant / QAT+LoRA), exported as they are rather than quantised post-training.
    "int4-weights-prequantized": ("int4-weights", "prequantized"),
    # legacy: a 32-value block format (GGUF Q4_0) where the model's rows are not a multiple of
    # the K-quants' 256-value super-block, whose 4-bit mix would fall back to 5 and 8 bits.
    "int4-weights-legacy": ("int4-weights", "legacy"),
}
# Layout keys a config may also map, emitted when the plan's layout uses them (render_config):
# a degree key when its value is above one, a value key when its value is given.
# precision_fp16 / precision_bf16: the dtype the workload computes in, said where the engine's
# own default differs (vLLM's auto dtype is bf16, which a T4 or V100 lacks; DeepSpeed and the
# HF Trainer default to fp32). recompute_full / recompute_selective: the checkpointing level
# the model counted, said in the engine's words.
LAYOUT_KEYS: tuple[str, ...] = (
    "base", "tp", "pp", "dp", "ep", "max_batch", "step_tokens", "memory_fraction", "eager",
    "kv_unified",
    "context",
    "gpu_layers", "precision_fp16", "precision_bf16",
)
_DEGREE_KEYS: frozenset[str] = frozenset({"tp", "pp", "dp", "ep"})
# The {placeholders} a template may use: the plan values' fields (values.PlanValues).
PLACEHOLDERS: frozenset[str] = frozenset(PlanValues.model_fields)
WEIGHT_FORMATS: tuple[str, ...] = (
    "bf16", "fp16", "fp32", "fp8", "int8", "int4", "fp4", "q4_0", "q4_k_m", "q5_k_m", "q6_k",
    "q8_0", "iq4_xs", "mlx-4bit", "mlx-8bit", "nf4",
)
# KV-cache storage types: float types, integer widths (group-quantised), and GGML block types.
KV_FORMATS: tuple[str, ...] = (
    "fp32", "fp16", "bf16", "fp8", "fp4", "int8", "int6", "int4", "int2",
    "q8_0", "q5_0", "q5_1", "q4_0", "q4_1", "iq4_nl",
)
ACCELERATORS: tuple[str, ...] = ("gpu", "cpu", "metal", "npu")
VENDORS: tuple[str, ...] = ("nvidia", "amd", "apple", "qualcomm", "intel", "cpu")
DEVICE_CLASSES: tuple[str, ...] = tuple(c.value for c in DeviceClass)
PHASES: tuple[str, ...] = get_args(Phase)
# The engines, one data file each (data/<id>.toml); the loader refuses other ids. Listed
# once, as the workload's EngineId (models/workload.py), so the workload's --engine check and
# the catalog read the same list; naming them (e.g. in --help) reads no data file.
ENGINE_IDS: tuple[str, ...] = get_args(EngineId)

Kind = Literal["serving", "on-device", "training"]
Format = Literal["cli", "toml", "json", "python"]
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
_DOTTED = re.compile(r"^([A-Za-z0-9_\-]+(?:\.[A-Za-z0-9_\-]+)*)\s*=\s*(.+)$")
_PY_SETTING = re.compile(r"^[A-Za-z_][\w.\[\]\"']*\s*=\s*\S")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


def placeholders(text: str) -> set[str]:
    """Return the {name} placeholders a flag or setting template uses."""
    return set(_PLACEHOLDER.findall(text))


def fill(template: str, values: Mapping[str, object], fmt: Format = "python") -> str:
    """Replace {name} placeholders with plan values (shell-quoted for cli); KeyError if missing."""
    def one(match: re.Match[str]) -> str:
        text = value_text(values[match.group(1)])
        return shlex.quote(text) if fmt == "cli" else text

    return _PLACEHOLDER.sub(one, template)


def value_text(value: object) -> str:
    """Write a plan value as flags take it: booleans lowercase, whole floats as integers."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def parse_value(fmt: Format, literal: str) -> Any:
    """Parse one TOML or JSON value literal; ValueError if it is not one."""
    try:
        if fmt == "json":
            return json.loads(literal)
        return tomllib.loads(f"v = {literal}")["v"]
    except (json.JSONDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"not a {fmt} value: {literal!r} ({exc})") from exc


def _strings(value: Any) -> list[str]:
    """Every string inside nested mappings and lists."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def _unknown(values: Iterable[str], known: Iterable[str], what: str) -> None:
    """Raise ValueError naming the values that are not in the known vocabulary."""
    bad = sorted(set(values) - set(known))
    if bad:
        raise ValueError(f"unknown {what} {bad}; known: {sorted(known)}")


class ChunkTier(_Strict):
    """The prefill chunk an engine picks on GPUs below a memory size."""

    below_gib: float | None = Field(
        None, gt=0, description="Applies to GPUs with less memory than this; None: any size")
    tokens: int = Field(ge=1, description="Prompt tokens per prefill chunk")
    max_sequences: int | None = Field(
        None, ge=1, description="Sequences the engine runs at once on these GPUs, where that "
        "follows the same tiers (vLLM's max_num_seqs); None: max_concurrent_sequences")
    names: list[str] = Field(
        default_factory=list, description="GPU names (lower-case substrings) that take this tier "
        "whatever their memory (vLLM treats every 'a100' as below 70 GiB)")


def tier_for(tiers: list[ChunkTier], memory_gib: float, name: str = "") -> ChunkTier | None:
    """Return the first tier this GPU is in: by name, else by memory (None: no tier)."""
    lowered = name.lower()
    for row in tiers:
        if any(n in lowered for n in row.names):
            return row
    for row in tiers:
        if not row.names and (row.below_gib is None or memory_gib < row.below_gib):
            return row
    return None


def chunk_for_memory(tiers: list[ChunkTier], memory_gib: float) -> int | None:
    """Return the prefill chunk of the first tier this GPU's memory is under (None: no tier)."""
    row = tier_for(tiers, memory_gib)
    return row.tokens if row is not None else None


class ReserveTier(_Strict):
    """What an engine holds back from its KV pool on GPUs below a memory size."""

    below_gib: float | None = Field(
        None, gt=0, description="Applies to GPUs with less memory than this; None: any size")
    reserved_gib: float = Field(gt=0, description="GiB kept for activations and CUDA graphs")


ReserveScope = Literal["all", "static", "free"]


@dataclass(frozen=True)
class Reservation:
    """The share of a GPU's memory an engine lets the plan use, and what it covers.

    scope "all": weights, activations, CUDA graphs and the KV pool together within `fraction`
    of the GPU (vLLM gpu_memory_utilization); "static": weights and the KV pool within it, the
    rest kept for activations and graphs (SGLang mem_fraction_static); "free": the KV pool
    takes `fraction` of what is free once the weights and activations are in (TensorRT-LLM
    free_gpu_memory_fraction).
    """

    scope: ReserveScope
    fraction: float
    flag: str  # how the engine's config names it, for the words the plan says


class Defaults(_Strict):
    """What the engine does when the user passes no flag (the state the advisor starts from)."""

    attention_kernel: Literal["math", "flash"]
    cuda_graphs: bool = Field(description="Decode steps replayed from CUDA/HIP graphs")
    compiled: bool = Field(description="torch.compile or an ahead-of-time compiled graph")
    graphs_off_disables: list[str] = Field(
        default_factory=list, description="Other defaults the engine's switch for eager "
        "decode turns off with the graphs (vLLM's --enforce-eager: torch.compile too), so "
        "--engine-option cuda_graphs=false plans what that switch runs")
    paged_kv: bool
    prefix_caching: bool
    continuous_batching: bool
    chunked_prefill: bool
    prefill_chunk_tokens: int | None = Field(
        None, ge=1, description="Prompt tokens per prefill chunk by default; None: no fixed value"
    )
    prefill_chunk_by_memory: list[ChunkTier] = Field(
        default_factory=list, description="prefill_chunk_tokens where the engine sizes it by "
        "the GPU's memory (the first row whose below_gib the GPU is under); empty: the one figure")
    fused_optimizer: bool = Field(False, description="Training: one fused AdamW kernel")
    server: bool = Field(
        False, description="Requests go through the engine's server, whose per-sequence host "
        "work (costs.slot_host_s) adds to each decode step; false: the engine's own batch "
        "benchmark (llama-bench, llama-batched-bench), or an engine without such work")
    checkpointing: Literal["none", "selective", "full"] = Field(
        "none", description="Training: the activation checkpointing level it applies unasked")
    sharding: Literal["none", "ddp", "fsdp", "tp", "layers"] = Field(
        "none", description="How it spreads one model over several GPUs by default: tp (tensor "
        "parallel), layers (each GPU holds a run of layers and a token passes them one after the "
        "other: llama.cpp's --split-mode layer), ddp / fsdp (training); none: the usual default "
        "(serving: tp, training: ddp)")
    max_concurrent_sequences: int | None = Field(None, ge=1)
    max_sequences_on: dict[str, int] = Field(
        default_factory=dict, description="The most sequences the engine's runtime decodes at "
        "once on a device class, where no flag raises it (ExecuTorch's llama runner: one; MLC "
        "LLM's phone app runs its engine in mode interactive: one); recommend plans a larger "
        "--batch at it and says so (workload/settle.py one_conversation)")
    scheduler_steps: int = Field(
        1, ge=1, le=64, description="Decode steps a batch runs back to back before the "
        "scheduler takes new prompts (vLLM V0's multi-step scheduling, --num-scheduler-steps; "
        "1: every step)")
    x86_half_matmul: Literal["fp32"] | None = Field(
        None, description="The dtype 16-bit matmuls run in on an x86 CPU when it is not "
        "their own (ggml converts F16 to fp32 and multiplies in fp32 there); None: their own")
    cpu_quant_matmul: Literal["int8"] | None = Field(
        None, description="What quantised weights multiply in on a CPU: int8 (the activations "
        "are quantised to 8 bits and dotted with the weights in integers, ggml's vec_dot_type "
        "Q8_0 / Q8_K), so their rate is a share of the CPU's int8 peak; None: the 16-bit one")
    cuda_gemm_accumulate: Literal["fp16"] | None = Field(
        None, description="What its cuBLAS GEMMs of F16 weights, and of quantised ones it "
        "dequantises to F16 for cuBLAS, accumulate in on NVIDIA GPUs: fp16 (ggml-cuda's "
        "CUBLAS_COMPUTE_16F), so they run at the FP16-accumulate tensor rate where the profile "
        "states one apart from fp16 (peak_tflops.fp16_acc16: GeForce cards); None: fp32")
    cuda_f32_output: list[str] = Field(
        default_factory=list, description="Compute capabilities on which those GEMMs keep "
        "FP32 output and accumulation instead (llama.cpp's prefer_f32_output: Volta, 7.0)")
    cuda_quant_gemm: Literal["mmq", "cublas"] | None = Field(
        None, description="How quantised weights' many-row matmuls run on NVIDIA GPUs: mmq "
        "(its own kernels on int8 tensor cores from Turing on, so their rate is a share of the "
        "int8 rate; older GPUs dequantise to F16 for cuBLAS), cublas (dequantised to F16 for "
        "cuBLAS on every GPU with FP16 tensor cores); None: not stated (the 16-bit rate)")
    stream_per_slot: bool = Field(
        False, description="A slot count the user sets gives each slot its own KV stream "
        "(llama-server: kv_unified stays off unless the slot count is auto), and a step "
        "decodes one forward pass per run of consecutive slot ids (llama_kv_cache splits "
        "the batch with split_equal(sequential=true)); hwadvisor/serving/simulate.py plays "
        "it with the server's least-recently-used slot choice")
    max_sequences_from_pool: bool = Field(
        False, description="The sequence limit follows the KV pool (SGLang's max_running_requests "
        "= None: min(clamp(pool / context_len x 512, 2048, 4096), pool / 2), "
        "mem_cache/kv_cache_configurator.py); hwadvisor/serving/scheduler.py applies it")
    scheduling: Literal["mixed", "prefill-first", "static"] | None = Field(
        None, description="How a server of it shares steps between prompts and decode: mixed "
        "(decode tokens and prompt chunks in one step, up to step_tokens), prefill-first (a "
        "waiting prompt gets a step of its own, decode waits), static (a batch runs to its end "
        "before the next starts); None: mixed with continuous batching, else static "
        "(hwadvisor/serving/scheduler.py)")
    step_tokens: int | None = Field(
        None, ge=1, description="Tokens one scheduler step batches, decode and prompt together "
        "(llama-server n_batch, TensorRT-LLM max_num_tokens); None: the prefill chunk "
        "(vLLM max_num_batched_tokens and SGLang chunked_prefill_size are that chunk)")
    kv_memory_fraction: float | None = Field(
        None, gt=0, le=1, description="Share of the GPU's memory the engine reserves by default "
        "(vLLM gpu_memory_utilization, TensorRT-LLM free_gpu_memory_fraction; what it covers: "
        "kv_memory_scope); the KV pool is what is left of it; None: all of it, or by memory "
        "(kv_memory_reserved_by_memory)")
    kv_memory_reserved_by_memory: list[ReserveTier] = Field(
        default_factory=list, description="Where the engine computes its fraction from the "
        "GPU's memory (SGLang: mem_fraction_static = 1 - reserved / memory): what it keeps for "
        "activations and CUDA graphs, the first row whose below_gib the GPU is under")
    kv_memory_scope: ReserveScope = Field(
        "all", description="What the reservation covers: all (weights, activations, graphs and "
        "KV within the fraction of the GPU), static (weights and KV within it), free (the KV "
        "pool takes the fraction of what is free after weights and activations)")
    kv_memory_flag: str | None = Field(
        None, description="The engine's name for the reservation, as its config says it "
        "(--gpu-memory-utilization)")
    host_overhead_s_per_step: float | None = Field(
        None, ge=0, description="Published CPU time per decode step; None: no published figure"
    )
    compute_unit: Literal["cpu", "gpu", "npu"] | None = Field(
        None, description="Where an on-device engine runs the matmuls by default (its delegate: "
        "XNNPACK on the CPU, a GPU delegate, the Hexagon NPU or the Neural Engine); the profile's "
        "[[compute]] figure for that unit and dtype sets prefill speed. None: the device's GPU "
        "peaks (or its class's fallback)")
    notes: list[str] = Field(default_factory=list, description="How each value was established")
    sources: list[str] = Field(min_length=1, description="Where the defaults were read")
    version: str = Field(min_length=1, description="The engine version the defaults were read at")

    def tier_on(self, memory_bytes: float | None, name: str = "") -> ChunkTier | None:
        """Return the memory tier this GPU is in (by its name first), None where none is."""
        if not memory_bytes:
            return None
        return tier_for(self.prefill_chunk_by_memory, memory_bytes / 2**30, name)

    def reservation(self, memory_bytes: float | None) -> Reservation | None:
        """Return the engine's memory reservation on a GPU of this memory (None: none)."""
        flag = self.kv_memory_flag or "its memory fraction"
        if self.kv_memory_fraction is not None:
            return Reservation(self.kv_memory_scope, self.kv_memory_fraction, flag)
        if not self.kv_memory_reserved_by_memory or not memory_bytes:
            return None
        gib = memory_bytes / 2**30
        for row in self.kv_memory_reserved_by_memory:
            if row.below_gib is None or gib < row.below_gib:
                fraction = round(max(0.0, (gib - row.reserved_gib) / gib), 3)
                return Reservation(self.kv_memory_scope, fraction, flag)
        return None

    def chunk_on(self, memory_bytes: float | None) -> int | None:
        """Return the prompt tokens a step takes on a GPU of this memory (None: not stated)."""
        if not memory_bytes:
            return self.prefill_chunk_tokens
        tier = chunk_for_memory(self.prefill_chunk_by_memory, memory_bytes / 2**30)
        return tier or self.prefill_chunk_tokens


# How a plan spans nodes (rules/engine_config.py launch_kind): replicas that each fit one node
# (independent servers behind a load balancer), one engine instance whose tensor / pipeline
# group spans nodes, data-parallel attention ranks over nodes (vLLM's DP + EP), one training
# job over all of them.
LaunchKind = Literal["replicas", "group", "dp-attention", "job"]


class NodeLaunch(_Strict):
    """How one kind of multi-node layout starts: the command and its flags on each node.

    `runs` says where the command runs: on every node with its own rank (each, the head first),
    the same command on every node (same: a rendezvous assigns the ranks), or once on the head,
    whose launcher starts the ranks everywhere (head: srun / mpirun, DeepSpeed's pdsh).
    """

    runs: Literal["each", "same", "head"]
    command: str | None = Field(
        None, description="The command that replaces the config's own (a launcher in front: "
        "torchrun ..., srun ... trtllm-llmapi-launch trtllm-serve); None: the config's own")
    every: list[str] = Field(default_factory=list, description="Flags on every node")
    head: list[str] = Field(default_factory=list, description="Flags on node 0 only")
    worker: list[str] = Field(default_factory=list, description="Flags on the other nodes")
    note: str = Field(min_length=1, description="What the user fills in and what runs where")
    source: str = Field(min_length=1, description="The engine's documentation or code read")

    def templates(self) -> list[str]:
        """Return every template of the launch (its command, flags and note)."""
        return [self.command or "", *self.every, *self.head, *self.worker, self.note]


class PdLaunch(_Strict):
    """How a disaggregated prefill/decode group starts on one node: each instance, the router.

    Each instance is the config's own command pinned to its GPUs (`env`, filled per instance:
    {gpu_ids}, {port}, {side_port}, {bootstrap_port}), with `every` instance's flags and its
    role's (`prefill` or `decode`); `router` fronts them, its {prefill_each} / {decode_each}
    the `router_prefill` / `router_decode` template once per instance and {prefill_hosts},
    {prefill_ports}, {decode_hosts}, {decode_ports} the instances' lists.
    """

    env: list[str] = Field(default_factory=list, description="KEY=value before each instance")
    every: list[str] = Field(default_factory=list, description="Flags on every instance")
    prefill: list[str] = Field(default_factory=list, description="Flags of a prefill instance")
    decode: list[str] = Field(default_factory=list, description="Flags of a decode instance")
    router: str = Field(min_length=1, description="The router's command, filled")
    router_prefill: str = ""
    router_decode: str = ""
    first_port: int = Field(8100, description="The first prefill instance's port; decode from +100")
    router_port: int = 8000
    note: str = Field(min_length=1, description="What must be installed and what runs where")
    source: str = Field(min_length=1, description="The engine's documentation or code read")

    def templates(self) -> list[str]:
        """Return every template of the launch."""
        return [*self.env, *self.every, *self.prefill, *self.decode, self.router,
                self.router_prefill, self.router_decode, self.note]


class EngineConfig(_Strict):
    """How a plan is said in the engine's own configuration language."""

    format: Format
    command: str | None = Field(None, description="Base command (cli); a header comment (python)")
    steps: dict[str, list[str]] = Field(default_factory=dict)
    step_notes: dict[str, str] = Field(
        default_factory=dict, description="What a step needs besides its flags (a checkpoint ...)"
    )
    not_expressed: dict[str, str] = Field(
        default_factory=dict, description="Steps with no setting in this engine, and why"
    )
    dp_attention_tp: Literal["group", "attention"] = Field(
        "group", description="What the engine's tensor-parallel flag counts under data-parallel "
        "attention: the whole group the experts spread over (SGLang --tp-size 8 --dp-size 8 "
        "--enable-dp-attention) or the attention's own degree (vLLM --data-parallel-size 8 "
        "--enable-expert-parallel, tensor-parallel size 1)"
    )
    merge_flags: dict[str, str] = Field(
        default_factory=dict, description="cli: flags whose values join into one, by separator"
    )
    draft_source: Literal["hf", "gguf", "mlx"] | None = Field(
        None, description="How the config names a published drafter checkpoint, filling "
        "{draft}: a Hugging Face repo id (hf), a GGUF repo with its quant tag (gguf, "
        "llama-server --spec-draft-hf), an MLX repo (mlx); None: it takes none as it is, so "
        "drafters that need one are not planned (perfmodel/drafters.toml)")
    model_source: Literal["hf", "gguf"] | None = Field(
        None, description="How the command names the model, filling {model}: the Hugging Face "
        "repo id (hf: a preset's source repo, the user's repo id or config folder), or the GGUF "
        "file of that checkpoint in the planned format (gguf); None: the name as given")
    unit_words: dict[str, str] = Field(
        default_factory=dict, description="How this config names each compute unit (cpu, gpu, "
        "npu): the engine's compute_unit default, or --engine-option compute_unit=..., fills "
        "{compute_units} with it (Core ML's cpu_and_ne, coremltools' CPU_AND_NE)")
    pd: PdLaunch | None = Field(
        None, description="How a disaggregated prefill/decode group starts (None: the config "
        "has no P/D launch, and the serving search plans none)")
    launch: dict[LaunchKind, NodeLaunch] = Field(
        default_factory=dict, description="How a plan over several nodes starts, by how it "
        "spans them (LaunchKind); a kind not listed takes `group`'s, and an engine with none "
        "says in a note that it runs on one node")
    files: dict[str, dict[str, dict[str, Any]]] = Field(
        default_factory=dict, description="Files the command line names (trtllm-serve "
        "--extra_llm_api_options FILE), by file name: each step's (or step form's) settings in "
        "it, merged in the order the steps render; a string that is one {placeholder} takes "
        "the value's own type, placeholders inside longer strings fill as text. A name ending "
        "in .json is written as JSON, any other as YAML")
    before: list[str] = Field(
        default_factory=list, description="cli: commands run before the command, in order, "
        "each a block of its own (MLC's mlc_llm convert_weight before gen_config); a line "
        "starting with # is a comment (a step done by hand: git clone)")
    after: list[str] = Field(
        default_factory=list, description="cli: commands run after the command, in order "
        "(MLC's mlc_llm package, which reads the config's files)")
    words: dict[str, dict[str, str]] = Field(
        default_factory=dict, description="How this config names a plan value, by placeholder: "
        "value -> its word (MLC's q4f16_1 for int4 weights, iphone for an Apple phone); a key "
        "'value@vendor' is the word on that vendor's devices only (q4f16_0 on Adreno); a value "
        "with no word stays as it is")
    by_model: dict[str, dict[str, str]] = Field(
        default_factory=dict, description="Plan values read from the checkpoint's name "
        "(model_name), by placeholder: each maps a checkpoint name to this config's word, '*' "
        "for any other. MLC's --conv-template ({chat_template}: Qwen2.5-0.5B-Instruct -> qwen2, "
        "a base model LM), ExecuTorch's base.model_class ({model_class}: Llama-3.2-1B -> "
        "llama3_2)")

    @model_validator(mode="after")
    def _check(self) -> EngineConfig:
        _unknown(self.steps, STEP_IDS + LAYOUT_KEYS + tuple(STEP_FORMS), "config step")
        for name, by_step in self.files.items():
            _unknown(by_step, STEP_IDS + LAYOUT_KEYS + tuple(STEP_FORMS),
                     f"config.files.{name} step")
            for text in _strings(by_step):
                _unknown(placeholders(text), PLACEHOLDERS, f"placeholder in {text!r}:")
        _unknown(self.step_notes, STEP_IDS + LAYOUT_KEYS + tuple(STEP_FORMS),
                 "config.step_notes step")
        _unknown(self.not_expressed, STEP_IDS, "config.not_expressed step")
        _unknown(self.unit_words, ("cpu", "gpu", "npu"), "config.unit_words unit")
        _unknown(self.words, PLACEHOLDERS, "config.words placeholder")
        if (self.before or self.after) and self.format != "cli":
            raise ValueError("commands before and after the command are for a cli config")
        both = sorted(set(self.steps) & set(self.not_expressed))
        if both:
            raise ValueError(f"steps both mapped and not_expressed: {both}")
        if self.format == "cli" and not self.command:
            raise ValueError("a cli config needs a command")
        launches = [t for launch in self.launch.values() for t in launch.templates()]
        for text in [self.command or "", *self.step_notes.values(), *self.all_settings(),
                     *launches, *self.before, *self.after]:
            _unknown(placeholders(text), PLACEHOLDERS, f"placeholder in {text!r}:")
        for setting in self.all_settings():
            _check_setting(self.format, setting)
        for launch in self.launch.values():
            for flag in [*launch.every, *launch.head, *launch.worker]:
                _check_setting("cli", flag)
            if self.format != "cli" and launch.command is None:
                raise ValueError(f"a {self.format} config's launch needs its command")
        return self

    def all_settings(self) -> list[str]:
        """Return every flag or setting template of every step, in file order."""
        return [s for settings in self.steps.values() for s in settings]


BENCH_PLACEHOLDERS = ("base_url", "model", "prompt_len", "gen_len", "range_ratio", "requests",
                      "rate", "concurrency")


class BenchServe(_Strict):
    """The engine's own serving benchmark (or the one its users run), as a template for a load.

    engines/bench.py fills it: {base_url}, {model}, {prompt_len}, {gen_len}, {range_ratio} (the
    lengths' spread in the tool's own form), {requests}, and {rate} or {concurrency}.
    """

    tool: str = Field(min_length=1, description="The benchmark, as users name it")
    command: str = Field(min_length=1, description="The command for any load")
    model: str | None = Field(None, description="Flags naming the served model (when known)")
    rate: str = Field(min_length=1, description="Flags of an open loop at {rate} requests/s")
    concurrency: str = Field(min_length=1, description="Flags of a closed loop of {concurrency}")
    range_form: Literal["symmetric", "fraction-of-max"] = Field(
        description="How the tool spreads lengths: symmetric, uniform in [len x (1 - ratio), "
        "len x (1 + ratio)] (vllm bench serve, TensorRT-LLM's benchmark_serving); "
        "fraction-of-max, uniform in [len x ratio, len] (SGLang's bench_serving)")
    port: int = Field(gt=0, description="The engine's server's default port (the plan's URL)")
    table: str | None = Field(
        None, description="The flag table's command that checks it "
        "(tests/fixtures/engine_flags/<id>.json)")
    version: str = Field(min_length=1, description="The tool's version the flags were read at")
    sources: list[str] = Field(min_length=1)
    notes: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _check(self) -> BenchServe:
        for text in (self.command, self.model or "", self.rate, self.concurrency):
            _unknown(placeholders(text), BENCH_PLACEHOLDERS, f"placeholder in {text!r}:")
        return self


def _check_setting(fmt: Format, setting: str) -> None:
    """Refuse a template that would not render to valid syntax for its format."""
    sample = fill(setting, sample_values(), fmt)
    if fmt == "cli":
        if not setting.startswith("-"):
            raise ValueError(f"a cli setting must be a flag: {setting!r}")
        shlex.split(sample)
    elif fmt in ("toml", "json"):
        match = _DOTTED.match(sample)
        if not match:
            raise ValueError(f"a {fmt} setting must be 'dotted.key = value': {setting!r}")
        parse_value(fmt, match.group(2))
    elif not _PY_SETTING.match(setting):
        raise ValueError(f"a python setting must be 'name=value': {setting!r}")


# The kernel families the performance model has figures for (perfmodel/constants.py
# GEMV_EFFICIENCY and friends); an engine's [kernels] and --engine-option kernel.* name one.
KERNELS: tuple[str, ...] = (
    "cublas", "cutlass-fp8", "torch-scaled-mm", "marlin", "torch-int4", "exllamav2",
    "mobile-int4", "coreml-int4", "llamacpp-f16", "mlx-f16",
)
# Kernel kinds: dense 16-bit matmuls, FP8 W8A8, int4 weight-only (AWQ/GPTQ). GGUF, MLX and NF4
# weights run their format's own kernels whatever the engine (perfmodel/efficiency.py).
KERNEL_KINDS: tuple[str, ...] = ("dense", "fp8", "int4")


class Recipe(_Strict):
    """A published quantisation recipe: what each part of the model is stored in, as shipped.

    ExecuTorch's quantised Llama recipe (SpinQuant, QAT+LoRA) keeps the embedding and the
    classifier in 8 bits and writes the classifier out even where the checkpoint ties it to the
    embedding; the size model must say so to match the published files.
    """

    name: str = Field(min_length=1, description="The recipe in the engine's words")
    layer_bits: float = Field(gt=0, le=32, description="Bits per decoder-layer matmul weight, "
                              "scales included")
    embedding_bits: float = Field(gt=0, le=32)
    output_bits: float = Field(gt=0, le=32)
    output_untied: bool = Field(
        False, description="The classifier is stored apart from a tied embedding")
    compute_dtype: Literal["int8", "fp16", "bf16"] = Field(
        description="What the matmuls compute in: int8 for dynamically quantised activations "
        "(8da4w), fp16 for 16-bit activations (w4a16)")
    variants: list[str] = Field(default_factory=list, description="Published variants of the "
                                "same layout (SpinQuant, QAT+LoRA), each with its size note")
    models: list[str] = Field(
        default_factory=list, description="Preset ids of the checkpoints this layout is for "
        "(those shipped prequantised in it); empty: every checkpoint")
    config_form: str | None = Field(
        None, description="The form of the weights step the engine's config says this recipe "
        "with (int4-weights-<form>); None: the plain step")
    by_model: list[Recipe] = Field(
        default_factory=list, description="Recipes for named checkpoints (each with its models) "
        "that replace this one for them")
    sources: list[str] = Field(min_length=1)

    @model_validator(mode="after")
    def _check(self) -> Recipe:
        for other in self.by_model:
            if not other.models:
                raise ValueError(f"recipe {other.name!r}: a by_model recipe names its models")
            if other.by_model:
                raise ValueError(f"recipe {other.name!r}: by_model recipes do not nest")
        return self

    def for_model(self, model: str) -> Recipe:
        """Return the recipe for this checkpoint: its own by_model entry, else this one."""
        for other in self.by_model:
            if model in other.models:
                return other
        return self


class GraphLimit(_Strict):
    """The largest decode batch captured in CUDA graphs by default on GPUs of this memory size."""

    below_gib: float | None = Field(
        None, gt=0, description="Applies to GPUs with less memory than this; None: any size")
    batch: int = Field(ge=1, description="Largest captured batch (sequences per decode step)")
    batch_tp4: int | None = Field(
        None, ge=1, description="The same at tensor-parallel degree 4 or more, where it differs")


def graph_batch_limit(limits: list[GraphLimit], memory_gib: float, tp: int) -> int | None:
    """Return the largest graph-captured decode batch on this GPU and TP degree (None: none)."""
    for row in limits:
        if row.below_gib is None or memory_gib < row.below_gib:
            return row.batch_tp4 if tp >= 4 and row.batch_tp4 else row.batch
    return None


class Costs(_Strict):
    """How the engine spends time outside the GPU's kernels, and how it fuses them.

    The performance model reads these (perfmodel/efficiency.py engine_time); each engine file
    says where its figures come from (a fit to a measured run, or an assumption).
    """

    host_s: float = Field(ge=0, description="Host work per forward outside the kernels (s)")
    host_s_graphed: float | None = Field(
        None, ge=0, description="Host work exposed per forward when CUDA graphs replay it (s); "
        "None: host_s either way")
    host_s_graphed_batched: float | None = Field(
        None, ge=0, description="Host work exposed per forward of several sequences when CUDA "
        "graphs replay it (s); None: host_s_graphed")
    host_op_factor: float = Field(
        ge=0, description="Host cost of one eager kernel launch, in units of EAGER_OP_S")
    slot_host_s: float | None = Field(
        None, ge=0, description="The server's host work per sequence per decode step, beyond "
        "what the engine's batch benchmark does (llama-server samples each slot's next token on "
        "the CPU, serially after the GPU's step); counted where defaults.server is on. None: "
        "none (the engine samples on the GPU)")
    request_overhead_s: float = Field(
        0.0, ge=0, description="Time each request spends outside the GPU's steps before its "
        "first token reaches the client, and not in the way of other requests: the API "
        "server's HTTP, tokenising, hand-off to the scheduler and detokenising (s); serving "
        "under load adds it to TTFT and latency (hwadvisor/serving)")
    slot_host_s_per_vocab: float | None = Field(
        None, ge=0, description="The same work's share that grows with the vocabulary (s per "
        "vocabulary entry, per sequence, per step): the sampler walks every logit")
    kernels: str = Field(description="KERNELS_PER_LAYER row when not compiled")
    fused_kernels: str = Field(description="KERNELS_PER_LAYER row when compiled or fused")
    kernels_per_layer: float | None = Field(
        None, gt=0, description="Kernels one decoder layer launches in this release where its "
        "backend fuses ops the KERNELS_PER_LAYER row counts apart (set per family in by_family); "
        "None: the row's count")
    elementwise: str = Field(description="ELEMENTWISE_BYTES row when not compiled")
    attention: str = Field(description="ATTENTION_PEAK_FRACTION column of its attention kernel")
    kv_passes: float = Field(0.0, ge=0, description="KV-cache passes per decode step beyond one")
    chunked_kv_full: bool = Field(
        False, description="Layers of chunked local attention (Llama 4's attention_chunk_size) "
        "get a KV cache of the whole context, as full attention does: the engine allocates no "
        "window for them (vLLM 0.33.0 turns its hybrid KV cache manager off for them); false: "
        "they keep the chunk")
    kv_pad: int | None = Field(
        None, gt=0, description="The engine's attention reads the KV cache in blocks of this "
        "many positions: a decode step reads the context rounded up to a multiple of it "
        "(llama.cpp's n_kv padding); None: the context itself")
    kv_pad_unfused: int | None = Field(
        None, gt=0, description="The same padding where attention is not fused (no flash "
        "attention), if it differs; None: kv_pad")
    kv_read: float | None = Field(
        None, gt=0, description="Share of the stream bandwidth the engine's decode attention "
        "reads the KV cache at, for heads of 128 values (set per family in by_family); None: "
        "the general KV_READ_EFFICIENCY of its attention kernel")
    kv_read_odd_heads: float | None = Field(
        None, gt=0, description="The share for head sizes the engine has no decode (vector) "
        "attention kernel for: llama.cpp's CUDA backend runs its vector kernel only for heads "
        "of a multiple of 64 values and takes its tensor-core kernel, built for many queries, "
        "for the others (heads of 96, 80); None: kv_read")
    kv_read_narrow: float | None = Field(
        None, gt=0, description="The same share for heads of 64 values (narrow heads keep fewer "
        "bytes in flight); between 64 and 128 interpolated, outside held; None: kv_read")
    kv_passes_eager: float = Field(0.0, ge=0, description="More passes when decode runs eagerly")
    odd_heads_decode_s: float | None = Field(
        None, ge=0, description="Fixed GPU time per attention layer of a decode step for head "
        "sizes the engine has no vector attention kernel for (kv_read_odd_heads' kernel, beyond "
        "its KV read), s; set per family in by_family; None: none")
    moe_kernels: float = Field(6.0, ge=0, description="Kernels an MoE layer adds (grouped)")
    deepseek_attention_kernels: float | None = Field(
        None, ge=0, description="Kernels the attention half of a DeepSeek-V2/V3 (MLA) layer "
        "launches in a decode step of this release: norms, the latent projections with their "
        "activation quantisation, the absorbed bmm's, rotary, the cache write, the attention "
        "kernels (read from the release's deepseek_v2.py); None: the fused layer's count plus "
        "MLA_EXTRA_KERNELS")
    deepseek_moe_kernels: float | None = Field(
        None, ge=0, description="Kernels a DeepSeek MoE block launches in a decode step of this "
        "release: router, top-k, activation quantisation, grouped expert GEMMs, shared experts, "
        "scaling and sum; None: moe_kernels plus DEEPSEEK_MOE_EXTRA_KERNELS")
    fp8_grouped_experts: bool = Field(
        True, description="FP8 training runs the routed experts' grouped GEMMs in FP8 as well "
        "(Megatron's Transformer Engine GroupedLinear); false where the engine's FP8 switch "
        "converts linear layers only and the experts stay 16-bit (perfmodel/compute.py _moe)")
    overlap_covers: Literal["all", "tensor-parallel"] = Field(
        "all", description="What the engine's communication-overlap switch hides: all "
        "(tensor-parallel and data-parallel collectives, as Megatron's tp_comm_overlap with "
        "overlap_grad_reduce / overlap_param_gather) or tensor-parallel only (torchtitan's async "
        "TP; its FSDP2 prefetch is the data-parallel overlap it always has)")
    tp_overlap_hidden: float = Field(
        1.0, ge=0, le=1, description="Largest share of the tensor-parallel collectives the "
        "overlap hides (1: all, up to the compute that can cover them)")
    autocast_fp32_weights: bool = Field(
        False, description="Training keeps the model's weights in fp32 and computes under "
        "torch.autocast (transformers' Trainer with bf16=True/fp16=True): fp32 residual stream "
        "and norms, 16-bit weight copies cached during the forward (perfmodel/memory.py)")
    selective_checkpointing: Literal["attention-core", "op-every-other-mm"] = Field(
        "attention-core", description="What the engine's selective checkpointing keeps: all but "
        "the attention core (Korthikanti et al. 2022; Megatron --recompute-granularity "
        "selective) or, per op, every other matmul's output and attention's (torchtitan's "
        "per-op SAC), recomputing the rest")
    fsdp_fp32_shards: bool = Field(
        False, description="FSDP keeps the sharded parameters in fp32 and gathers bf16 copies "
        "(FSDP2 MixedPrecisionPolicy param_dtype=bf16, reduce_dtype=fp32 over an fp32 model): "
        "the shard is the optimizer's master copy and the gradient shards are fp32, so no "
        "separate 16-bit shard is held (perfmodel/memory.py)")
    loss_parallel: bool = Field(
        False, description="Under tensor parallelism the loss runs on vocabulary-sharded logits "
        "(torch.distributed.tensor.parallel.loss_parallel): the output projection saves its "
        "gathered input and DTensor's log-softmax backward holds four fp32 copies of the local "
        "logits (perfmodel/memory.py)")
    offload: Literal["optimizer", "fsdp-cpu"] = Field(
        "optimizer", description="What the engine's training offload moves to the host: the "
        "optimizer state and step only (ZeRO-Offload: DeepSpeed offload_optimizer, Megatron "
        "--optimizer-cpu-offload) or parameters, gradients and optimizer state with the step on "
        "the CPU (FSDP2 CPUOffloadPolicy: torchtitan enable_cpu_offload; needs FSDP sharding)")
    graph_limits: list[GraphLimit] = Field(
        default_factory=list, description="The largest decode batch the engine captures CUDA "
        "graphs for by default, by GPU memory (first row whose below_gib the GPU is under); a "
        "decode step of more sequences runs eagerly. Empty: no limit modelled")
    by_family: dict[str, dict[str, float]] = Field(
        default_factory=dict, description="Figures measured on one device family (the keys of "
        "perfmodel/efficiency.device_family: nvidia-hopper ...) that replace the general ones")

    def for_family(self, family: str | None) -> Costs:
        """Return the costs on this device family (its measured figures where the file has them)."""
        found = self.by_family.get(family or "")
        if not found:
            return self
        return self.model_copy(update=found)


# Kernels a release's rates may name: the engines' choices above and the ones a weight format
# implies (perfmodel/efficiency.quant_kernel: GGUF's legacy and K-quant kernels, MLX, NF4).
RATE_KERNELS: tuple[str, ...] = (*KERNELS, "llamacpp", "llamacpp-k", "mlx", "bitsandbytes")


def _figure(description: str) -> Any:
    """Declare a release's optional, positive kernel figure (None: the general table's)."""
    return Field(None, gt=0, description=description)


class KernelRate(_Strict):
    """A kernel's rates as one release of the engine runs them.

    Only where they differ from the performance model's general table (perfmodel/constants.py);
    an empty entry means the general figure.
    """

    gemv: float | None = _figure("Share of the stream bandwidth at decode")
    compute: float | None = _figure("Share of the 16-bit dense peak")
    vector: float | None = _figure("Share of the fp32 vector peak its few-row matmuls compute "
                                   "at (the general GEMV_VECTOR_EFFICIENCY otherwise)")
    width_half: float | None = _figure("Half point of the weight's dims (N, K) for this "
                                       "kernel's GEMM rate: x / (x + width_half), normalised "
                                       "at 8192 (narrow models run slower)")
    vector_width_half: float | None = _figure(
        "Half point of the weight's dims (N, K) for its few-row (vector) matmuls, as width_half "
        "(short rows leave the vector units idle)")
    width_rows: float | None = _figure(
        "Rows (M) at which width_half holds; below them the half point shrinks with the square "
        "root of the rows (a few-row GEMM's library kernel splits K over more blocks, so "
        "narrower weights still fill the GPU); None: width_half at every M")
    rows_half: float | None = _figure("Half point over the GEMM's rows (M: tokens) for this "
                                      "kernel, instead of the family's GEMM_HALF_DIM")
    unfused_attention: float | None = _figure(
        "Share of the fp32 vector peak the attention's own matmuls (K x Q, scores x V) reach "
        "where attention is not fused (no flash attention): the engine's generic batched "
        "kernel for this dtype; None: the general unfused-attention rate")
    vector_rows: int | None = _figure("Up to this many rows the kernel is a matrix-vector "
                                      "kernel on the vector units (no tensor cores); None: "
                                      "the faster of the two at every M")
    gate_dim: int | None = _figure(
        "The smallest weight dim the kernel's fast GEMM takes: a weight (N, K) with N or K "
        "below it runs the engine's generic GEMM instead (llama.cpp's OpenCL backend, "
        "ggml-opencl.cpp use_adreno_kernels: ne[0] >= 512 && ne[1] >= 512 for Adreno "
        "compilers from E031.38.11, 128 before); None: every weight takes the fast GEMM. "
        "Stated for one kernel and family only: K-quants do not inherit it")
    below_gate: float | None = _figure(
        "Share of the path's rate that a many-row matmul (gate_rows rows or more) of a weight "
        "below gate_dim reaches on the generic GEMM; fewer rows (decode) keep the kernel's "
        "matrix-vector rate; None with gate_dim: not modelled")
    gate_rows: int | None = _figure(
        "From this many rows (M) a weight below gate_dim runs the generic GEMM (ggml-opencl.cpp's "
        "quantised tiled l4_lm GEMMs, Q4_0 and Q8_0, take ne11 >= 32); None: from 2 rows")


def _check_rate_keys(rates: Mapping[str, KernelRate], where: str) -> None:
    for key in rates:
        kernel, _, family = key.partition("@")
        if kernel not in RATE_KERNELS:
            raise ValueError(f"{where} {key!r}: no kernel {kernel!r} "
                             f"(kernels: {', '.join(RATE_KERNELS)})")
        if not family:
            raise ValueError(f"{where} {key!r}: expected 'kernel@family' "
                             "(e.g. cublas@nvidia-hopper)")


class Kernels(_Strict):
    """The matmul kernel the engine runs per kind of weights, by vendor where it differs.

    Each kind maps to one kernel, or to a table {vendor: kernel, default: kernel}. `rates` holds
    what the pinned release was measured to reach where its kernels changed ('kernel@family').
    """

    dense: str | dict[str, str]
    fp8: str | dict[str, str]
    int4: str | dict[str, str]
    int4_words: str | dict[str, str] = Field(
        description="The 4-bit kernel, in words for the plan; a table {vendor: words, default: "
        "words} where the kernel differs by vendor (Marlin on NVIDIA, Triton/ExLlama on ROCm)")
    rates: dict[str, KernelRate] = Field(
        default_factory=dict, description="The pinned release's measured kernel rates, keyed "
        "'kernel@family', over the performance model's general table")

    @model_validator(mode="after")
    def _check(self) -> Kernels:
        for kind in KERNEL_KINDS:
            value = getattr(self, kind)
            table = value if isinstance(value, dict) else {"default": value}
            if "default" not in table:
                raise ValueError(f"kernels.{kind}: a vendor table needs a 'default' entry")
            _unknown(table.values(), KERNELS, f"kernels.{kind} kernel")
            _unknown(set(table) - {"default"}, VENDORS, f"kernels.{kind} vendor")
        _check_rate_keys(self.rates, "kernels.rates")
        if isinstance(self.int4_words, dict):
            if "default" not in self.int4_words:
                raise ValueError("kernels.int4_words: a vendor table needs a 'default' entry")
            _unknown(set(self.int4_words) - {"default"}, VENDORS, "kernels.int4_words vendor")
        return self

    def words(self, vendor: str) -> str:
        """Return the 4-bit kernel in words on this vendor's devices."""
        if isinstance(self.int4_words, str):
            return self.int4_words
        return self.int4_words.get(vendor, self.int4_words["default"])

    def pick(self, kind: str, vendor: str) -> str:
        """Return the kernel for this kind of weights on this vendor's devices."""
        value = getattr(self, kind)
        if isinstance(value, str):
            return value
        return value.get(vendor, value["default"])


class History(_Strict):
    """Defaults that differed before a version: `--engine vllm==0.6.0` starts from these."""

    before: str = Field(description="The first version that no longer had these defaults")
    defaults: dict[str, bool | int | float | str | None] = Field(default_factory=dict)
    kernel_rates: dict[str, KernelRate] = Field(
        default_factory=dict, description="Kernel rates of releases before `before` (an empty "
        "entry: the general table's figure, not the pinned release's measured one)")
    costs_by_family: dict[str, dict[str, float | None]] = Field(
        default_factory=dict, description="Per-family cost figures of releases before `before` "
        "(None: the general figure, as when the pinned release's by_family did not state it)")
    costs: dict[str, float | int | None] = Field(
        default_factory=dict, description="Cost figures of releases before `before` on every "
        "family (kv_pad_unfused ...); \"general\" unsets an optional figure the pinned release "
        "states (its generic count applies)")
    config_steps: dict[str, list[str]] = Field(
        default_factory=dict, description="[config.steps] entries spelled otherwise before "
        "`before` (vLLM 0.6.0's --speculative-model for today's --spec-method)")
    lacks: list[str] = Field(
        default_factory=list, description="Steps, step forms (speculative-decoding-eagle3) and "
        "layout keys (dp) releases before `before` do not have: never planned, never said")
    flags_at: str | None = Field(
        None, description="The release whose own parser these config_steps were checked "
        "against (tests/fixtures/engine_flags/<id>@<release>.json)")
    source: str = Field(min_length=1)

    @field_validator("costs_by_family", mode="before")
    @classmethod
    def _general(cls, value: Any) -> Any:
        """Read "general" as None (TOML has no null).

        The figure the pinned release measured does not hold for the older builds.
        """
        if isinstance(value, dict):
            return {fam: {k: (None if v == "general" else v) for k, v in row.items()}
                    if isinstance(row, dict) else row for fam, row in value.items()}
        return value

    @field_validator("costs", mode="before")
    @classmethod
    def _general_costs(cls, value: Any) -> Any:
        """Read "general" as None: the release has no figure of its own for that cost."""
        if isinstance(value, dict):
            return {k: (None if v == "general" else v) for k, v in value.items()}
        return value

    @model_validator(mode="after")
    def _check(self) -> History:
        _check_rate_keys(self.kernel_rates, "history kernel_rates")
        for key, figure in self.costs.items():
            field = Costs.model_fields.get(key)
            if figure is None and field is not None and field.default is not None:
                raise ValueError(f"history costs {key}: \"general\" only unsets an optional "
                                 "figure")
        rows: list[tuple[str, Mapping[str, object]]] = [*self.costs_by_family.items(),
                                                        ("all", self.costs)]
        for family, figures in rows:
            unknown = sorted(set(figures) - set(Costs.model_fields))
            if unknown:
                raise ValueError(f"history costs_by_family {family}: no such cost {unknown}")
        return self


class Engine(_Strict):
    """One engine: where it runs, what it does by default, what it costs, how to configure it."""

    id: str
    name: str
    kind: Kind
    phases: list[Phase] = Field(min_length=1)
    device_classes: list[str] = Field(min_length=1)
    vendors: list[str] = Field(min_length=1)
    weight_formats: list[str] = Field(min_length=1)
    kv_cache_formats: list[str] = Field(default_factory=list)
    kv_cache_min_capability: dict[str, str] = Field(
        default_factory=dict, description="KV-cache formats no attention backend of the engine "
        "reads below this NVIDIA compute capability (vLLM's FP8 cache: FlashAttention and "
        "FlashInfer from 8.0, its Triton backend from 8.9)")
    accelerators: list[str] = Field(min_length=1)
    delegates: list[str] = Field(
        default_factory=list, description="Backend delegates (ExecuTorch QNN/Core ML, LiteRT NPU)"
    )
    weight_only: dict[str, str] = Field(
        default_factory=dict, description="Weight formats the engine also runs on NVIDIA GPUs "
        "without their tensor cores, dequantised to 16 bits in its kernel (W8A16), with the "
        "least compute capability it needs: vLLM's FP8 Marlin on Ampere")
    own_formats: dict[str, str] = Field(
        default_factory=dict,
        description="The engine's own file format for 4- and 8-bit weights (GGUF, MLX)")
    defaults: Defaults
    quantization: dict[str, Recipe] = Field(
        default_factory=dict, description="Published recipes by weight format (int4, int8): how "
        "the engine's own export stores them")
    history: list[History] = Field(default_factory=list)
    costs: Costs
    kernels: Kernels
    applies: list[str] = Field(default_factory=list, description="Steps done by default")
    unsupported: list[str] = Field(default_factory=list, description="Steps it cannot do")
    unsupported_on: dict[str, list[str]] = Field(
        default_factory=dict, description="Steps it cannot do on one device class only"
    )
    reasons: dict[str, str] = Field(
        default_factory=dict, description="Why a step is unsupported (everywhere or on a class)"
    )
    notes: list[str] = Field(default_factory=list)
    variant_notes: list[str] = Field(
        default_factory=list, description="Set by the catalog: the release or options applied")
    config: EngineConfig
    other_configs: dict[str, EngineConfig] = Field(
        default_factory=dict, description="The same plan said for the engine's other tools, by "
        "tool (Genie's genie_config.json, a coremltools conversion), rendered beside the config")
    class_configs: dict[str, EngineConfig] = Field(
        default_factory=dict, description="The config for serving on a device class where the "
        "engine runs another way, by class (MLC LLM on phones: the model compiled into its "
        "MLCChat app by mlc_llm package, not the mlc_llm serve server)")
    training_config: EngineConfig | None = Field(
        None, description="The config for training where the engine trains with another tool "
        "(mlx-lm: mlx_lm.lora)")
    bench_serve: BenchServe | None = Field(
        None, description="The serving benchmark to measure a planned load with, as a template")
    sources: list[str] = Field(min_length=1, description="The docs/source of the flags")
    version: str = Field(min_length=1, description="The version the entry was checked against")
    release: str = Field(
        min_length=1, description="The release number alone, as --engine ID==VERSION names it")

    @model_validator(mode="after")
    def _check(self) -> Engine:
        _unknown(self.device_classes, DEVICE_CLASSES, "device class")
        _unknown(self.vendors, VENDORS, "vendor")
        _unknown(self.weight_formats, WEIGHT_FORMATS, "weight format")
        _unknown(self.kv_cache_formats, KV_FORMATS, "KV-cache format")
        _unknown(self.accelerators, ACCELERATORS, "accelerator")
        _unknown(self.applies, STEP_IDS, "applies step")
        _unknown(self.unsupported, STEP_IDS, "unsupported step")
        _unknown(self.unsupported_on, self.device_classes, "unsupported_on device class")
        _unknown(self.class_configs, self.device_classes, "class_configs device class")
        _unknown(self.defaults.max_sequences_on, self.device_classes,
                 "defaults.max_sequences_on device class")
        _unknown(self.own_formats, ("int4", "int8"), "own_formats kind")
        _unknown(self.own_formats.values(), self.weight_formats, "own_formats format")
        _unknown(self.quantization, self.weight_formats, "quantization format")
        for fmt, recipe in self.quantization.items():
            for one in (recipe, *recipe.by_model):
                form = f"{fmt}-weights-{one.config_form}"
                if one.config_form and form not in self.config.steps:
                    raise ValueError(f"{self.id}: recipe {one.name!r} is said by {form}, "
                                     "which its config does not map")
        for steps in self.unsupported_on.values():
            _unknown(steps, STEP_IDS, "unsupported_on step")
        both = sorted(set(self.applies) & set(self.unsupported))
        if both:
            raise ValueError(f"{self.id}: steps both applied and unsupported: {both}")
        unsupported = set(self.unsupported).union(*self.unsupported_on.values())
        _unknown(self.reasons, unsupported, "reasons step (not unsupported)")
        for past in self.history:
            _unknown(past.defaults, Defaults.model_fields, "history default")
        if self.training_config is not None and "training" not in self.phases:
            raise ValueError(f"{self.id}: a training_config for an engine that does not train")
        return self

    def does_by_default(self, step: str, device_class: str | None = None) -> bool:
        """Whether the engine already applies this step with no flag (on this device class)."""
        return step in self.applies and not self.cannot(step, device_class)

    def kv_format_runs(self, fmt: str, vendor: str | None, capability: str | None) -> bool:
        """Whether the engine keeps its KV cache in `fmt` on this GPU (unknown GPUs: yes)."""
        if fmt not in self.kv_cache_formats:
            return False
        least = self.kv_cache_min_capability.get(fmt)
        if least is None or vendor != "nvidia" or not capability:
            return True
        return _capability_tuple(capability) >= _capability_tuple(least)

    def cannot(self, step: str, device_class: str | None = None) -> bool:
        """Whether the step cannot be done with this engine (on this device class, if given)."""
        return step in self.unsupported or step in self.unsupported_on.get(device_class or "", [])

    def says(self, step: str, form: str, phase: str = "training") -> bool:
        """Whether the engine's config has this form of a step (selective checkpointing ...)."""
        return f"{step}-{form}" in self.config_for(phase).steps

    def config_for(self, phase: str, device_class: str | None = None) -> EngineConfig:
        """Return the config a plan of this phase is said in.

        Training may use another tool (training_config); serving on a device class may run
        another way (class_configs: MLC LLM's phone apps).
        """
        if phase == "training" and self.training_config is not None:
            return self.training_config
        if phase == "inference" and device_class in self.class_configs:
            return self.class_configs[device_class or ""]
        return self.config


class Choice(_Strict):
    """default_engines.toml: the engine assumed per (device class, phase) when none is named."""

    by_class: dict[str, dict[str, str]]

    def check(self, engines: Mapping[str, Engine]) -> None:
        """Refuse a table that misses a class or phase, or names an engine that cannot run it."""
        _unknown(self.by_class, DEVICE_CLASSES, "default_engines.toml device class")
        for device_class in DEVICE_CLASSES:
            by_phase = self.by_class.get(device_class, {})
            _unknown(by_phase, PHASES, f"[{device_class}] phase")
            for phase in PHASES:
                where = f"default_engines.toml [{device_class}] {phase}"
                engine_id = by_phase.get(phase)
                engine = engines.get(engine_id or "")
                if engine is None:
                    raise ValueError(f"{where}: no such engine {engine_id!r}")
                if phase not in engine.phases or device_class not in engine.device_classes:
                    raise ValueError(f"{where}: {engine_id} does not run {phase} on "
                                     f"{device_class}")


def _capability_tuple(text: str) -> tuple[int, ...]:
    """Return '8.6' as (8, 6); (0,) when it is not a compute capability."""
    try:
        return tuple(int(part) for part in text.split("."))
    except ValueError:
        return (0,)
