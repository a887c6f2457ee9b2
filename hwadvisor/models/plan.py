"""The plan: the stack of changes that fits and best serves the goal's one metric."""

from typing import Literal

from pydantic import Field

from hwadvisor.models.hardware import Strict

Change = str | int | float | bool


class PlanMetric(Strict):
    """The goal's one metric, before any change and after the whole plan."""

    name: str = Field(description="tokens_per_s (training-throughput), request_latency_s "
                      "(inference-latency) or memory_per_gpu_bytes (memory-footprint)")
    unit: str
    better: Literal["higher", "lower"]
    before: float | None = Field(None, description="On the engine's default setup")
    after: float | None = Field(None, description="With every step of the plan applied")


class PlanStep(Strict):
    """One change of the plan, judged on the plan so far (the steps before it applied)."""

    id: str = Field(description="The rule id")
    title: str
    changes: dict[str, Change] = Field(default_factory=dict)
    metric_after: float | None = Field(None, description="The goal's metric after this step")
    memory_per_gpu_bytes_after: int
    fits_after: bool
    why: str = Field("", description="Why this step, in numbers")
    side_effects: list[str] = Field(
        default_factory=list, description="What else the step changes (other metrics), in words")
    needed_to_fit: bool = Field(False, description="Chosen to make the workload fit")
    changes_method: str | None = Field(
        None, description="When the step changes what is trained or served (LoRA fine-tunes "
        "adapters, a smaller model), in words")


class PlanAlternative(Strict):
    """Another way out when the plan does not fit (or a road the plan did not take)."""

    id: str = Field(description="more-gpus, optimizer-offload, lora, qlora, smaller-model, ...")
    title: str
    changes: dict[str, Change] = Field(default_factory=dict)
    fits: bool
    metric: float | None = Field(None, description="The goal's metric with this alternative")
    memory_per_gpu_bytes: int | None = None
    host_memory_bytes: int | None = Field(
        None, description="Host RAM it needs per node (offload), when it needs some")
    host_memory_fits: bool | None = Field(
        None, description="Whether that host RAM fits the planned host (90% of its RAM); "
        "null when it needs none or the host's RAM is unknown. False makes fits false")
    text: str = Field(description="The alternative in words, with its numbers")


class EngineLine(Strict):
    """One flag or setting of the engine config and the plan step that asks for it."""

    setting: str
    step: str


class EngineConfig(Strict):
    """The plan in the engine's own words: what to type or paste."""

    engine: str
    version: str = Field(description="The engine version the flags were checked against")
    format: Literal["cli", "toml", "json", "python"]
    text: str
    lines: list[EngineLine] = Field(default_factory=list)
    not_expressed: list[str] = Field(
        default_factory=list, description="Steps this engine has no flag for, with the reason")
    notes: list[str] = Field(default_factory=list)
    tool: str = Field("", description="The engine's other tool this config is for (genie, "
                      "coremltools); empty for the engine's own config")
    also: list["EngineConfig"] = Field(
        default_factory=list, description="The same plan for the engine's other tools")
    launch: str = Field("", description="How the config file starts on several nodes: the "
                        "launcher's command for each node (a command line says it in text)")
    files: dict[str, str] = Field(
        default_factory=dict, description="Files the config names (TensorRT-LLM's "
        "extra_llm_api_options.yaml), by file name: their text; --emit writes them beside it")


class PlanLayout(Strict):
    """How the plan spreads the work over the GPUs."""

    gpus: int
    nodes: int
    tp: int = 1
    pp: int = 1
    cp: int = 1
    dp: int = 1
    ep: bool = False
    attn_dp: int = Field(1, ge=1, description="GPUs of the TP group attention runs "
                         "data-parallel over (DP attention); 1: tensor-parallel attention")
    sharding: str = "none"

    def shard_degree(self) -> int:
        """Return the ranks one copy of the model is sharded over (FSDP: all; HSDP: a node's)."""
        return {"fsdp": self.dp, "hsdp": max(1, self.dp // max(self.nodes, 1))}.get(
            self.sharding, 1)

    def replicas(self) -> int:
        """Return the full copies of the model (data-parallel replicas; HSDP: one per node)."""
        return {"fsdp": 1, "hsdp": self.nodes}.get(self.sharding, self.dp)


Knob = str | int | float | bool


class PlanTrialSpec(Strict):
    """What the stacked-step trial runs: the baseline's knobs and the plan's, and the shapes.

    Knobs (trials/plan_step.py): cuda_graphs, weights (bf16 | int4 | fp8 | another format),
    kv (bf16 | fp8 | ...), attention (flash | math), checkpointing (none | full | selective),
    fused_optimizer, lora_rank (0: no adapters), batch.
    """

    phase: Literal["inference", "training"]
    metric: Literal["time", "memory"] = Field(
        description="What decides: time per token (the speed goals) or peak memory")
    batch: int = Field(ge=1)
    context_len: int = Field(1, ge=1, description="Inference: the KV cache the step reads")
    seq_len: int = Field(1, ge=1, description="Training: tokens per sequence")
    baseline: dict[str, Knob]
    plan: dict[str, Knob]
    steps: dict[str, list[str]] = Field(
        default_factory=dict, description="Knob -> the plan steps that set it")


class EngineFigures(Strict):
    """Speed figures of one inference workload, measured by an engine's benchmark or predicted."""

    ttft_s: float | None = Field(
        None, description="Time to first token (the whole batch's prefill)")
    tpot_s: float | None = Field(None, description="Time per output token (one decode step)")
    prefill_tokens_per_s: float | None = Field(None, description="Prompt tokens/s over the batch")
    decode_tokens_per_s: float | None = Field(
        None, description="Generated tokens/s over all concurrent sequences")


class EngineValidation(Strict):
    """The plan's engine run by its own benchmark with the emitted config, against the model.

    status: confirmed when every figure both sides give is within the tolerance of the
    prediction, refuted when one is further off, inconclusive when none can be compared or the
    run's own spread exceeds the tolerance; unsupported (with the reason) when the engine is not
    installed where hwadvisor runs or the model is a preset name with no local file.
    """

    engine: str
    status: Literal["confirmed", "refuted", "inconclusive", "unsupported", "error"]
    reason: str | None = Field(None, description="Why unsupported / error / inconclusive")
    command: list[str] = Field(default_factory=list, description="The benchmark's argument list")
    version: str | None = Field(None, description="The engine's version or build, when readable")
    tolerance: float = Field(0.15, description="Largest |measured / predicted - 1| that confirms")
    measured: EngineFigures | None = None
    predicted: EngineFigures | None = None
    ratio: dict[str, float] = Field(
        default_factory=dict, description="measured / predicted for each figure both sides give")
    spread: float | None = Field(
        None, description="The run's relative spread (stddev / mean of its timed repetitions, "
        "a cold first one left out), if given")
    not_run: list[str] = Field(
        default_factory=list, description="Emitted settings the benchmark cannot take, with why")


class PlanValidation(Strict):
    """The plan as a whole, measured: its stacked step on a few real layers vs the baseline.

    The ratio is the baseline's time per token over the plan's (a speedup, > 1 helps) for the
    speed goals, and the plan's peak bytes over the baseline's (< 1 helps) for memory.
    """

    status: Literal["confirmed", "refuted", "inconclusive", "unsupported", "error"]
    metric: str | None = Field(None, description="What the ratio compares, in words")
    predicted_ratio: float | None = Field(
        None, description="The performance model's ratio for the same step: the measured "
        "steps on the trial's layers and shapes")
    measured_ratio: float | None = None
    ci: list[float] | None = Field(None, description="95% interval of the measured ratio")
    runs: int | None = Field(None, description="Paired rounds behind the interval")
    threshold: float | None = Field(
        None, description="Where the interval must lie beyond to confirm (1: the plan helps; "
        "for a plan predicted to cost speed, 0.8 x the predicted ratio)")
    prediction_error: float | None = Field(
        None, description="measured / predicted - 1 (the model's error on this step)")
    plan_ratio: float | None = Field(
        None, description="The whole plan's predicted ratio on the full model (every step)")
    measured_steps: list[str] = Field(
        default_factory=list, description="Plan steps the stacked step ran")
    unmeasured_steps: list[str] = Field(
        default_factory=list, description="Plan steps it could not run here, with the reason")
    kernel: str | None = Field(None, description="The kernels measured, when not the advice's")
    detail: str | None = None
    engine: EngineValidation | None = Field(
        None, description="The engine's own benchmark with the emitted config, when installed")


class Plan(Strict):
    """The stack of changes for the goal, with its cumulative effect and the final fit."""

    engine: str
    steps: list[PlanStep] = Field(default_factory=list)
    fits: bool
    memory_per_gpu_bytes: int
    device_memory_bytes: int | None = Field(None, description="The limit the plan must fit in")
    metric: PlanMetric
    ttft_s: float | None = Field(None, description="Inference: time to first token, planned")
    tpot_s: float | None = Field(None, description="Inference: time per output token, planned")
    tokens_per_s: float | None = Field(
        None, description="Throughput at that latency (inference: generated tokens/s over all "
        "concurrent requests; training: tokens/s of the whole job)")
    layout: PlanLayout | None = None
    min_gpus: int | None = Field(
        None, description="When it does not fit: the fewest of these GPUs (whole nodes past "
        "one node) for which the plan fits; null when it fits")
    max_batch: int | None = Field(None, description="The largest batch that fits with the plan")
    max_context: int | None = Field(
        None, description="Inference: the longest prompt + generation that fits at this batch")
    alternatives: list[PlanAlternative] = Field(
        default_factory=list, description="In the order alternatives_order states: those that "
        "fit first, best on the goal's metric first")
    alternatives_order: str = Field(
        "", description="Why the alternatives come in their order, in words ('those that fit "
        "first, ranked by throughput (highest first); ...'); empty without alternatives")
    engine_config: EngineConfig | None = None
    summary: str = Field(description="The bottom line in one sentence")
    validation: PlanValidation | None = Field(
        None, description="The plan's stacked step measured against the baseline (--validate)")
