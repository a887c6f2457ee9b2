"""Serving under load: the load a server sees, latency targets, and what it does under them.

The same figures (`ServingFigures`) come from the model (hwadvisor/serving/, a simulation of the
engine's scheduler over the load) and from a measurement (the load generator against a running
endpoint), so a prediction and a measurement are compared key by key.
"""

from typing import Literal

from pydantic import Field, model_validator

from hwadvisor import units
from hwadvisor.models.hardware import Finite, Strict

TpotDefinition = Literal["request", "itl"]
FIGURE_WORDS = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "request_latency": "latency"}
Arrivals = Literal["poisson", "constant", "trace", "closed-loop"]


class Lengths(Strict):
    """Token lengths of a load's requests: a mean and a spread, or the trace's own values."""

    mean: Finite = Field(gt=0, description="Mean tokens per request")
    spread: Finite = Field(
        0.0, ge=0, le=3, description="Coefficient of variation (standard deviation / mean) of a "
        "lognormal around the mean; 0: every request has the mean")
    values: list[int] | None = Field(
        None, description="The lengths themselves, request by request (from --trace); the mean "
        "and spread then describe them")


class Load(Strict):
    """The traffic a server is planned for: arrivals at a rate or a fixed concurrency, lengths."""

    rate_rps: Finite | None = Field(
        None, gt=0, description="Open loop: requests per second arriving (Poisson unless the "
        "trace says when), whatever the server's pace")
    concurrency: int | None = Field(
        None, gt=0, description="Closed loop: users each sending their next request when the "
        "last one ends (no think time)")
    prompt: Lengths = Field(description="Prompt tokens per request")
    output: Lengths = Field(description="Output tokens per request")
    prefix_share: Finite = Field(
        0.0, ge=0, lt=1, description="Share of each prompt's tokens the prefix cache serves "
        "(a shared system prompt, a conversation's earlier turns)")
    arrivals: Arrivals = "poisson"
    arrival_times_s: list[Finite] | None = Field(
        None, description="When each request arrives, from the trace (seconds from the first)")
    requests: int = Field(
        400, gt=0, le=100_000, description="Requests the simulation (and the load generator) play")
    dataset: str | None = Field(
        None, description="The named length shape the lengths came from (--dataset), if any")
    source: str = Field(description="Where the load came from, in words (the options or trace)")

    @model_validator(mode="after")
    def _one_driver(self) -> "Load":
        if (self.rate_rps is None) == (self.concurrency is None):
            raise ValueError("a load has either a rate or a concurrency")
        return self

    def words(self) -> str:
        """Describe the load in one line: '20 req/s, prompts ~2048 tokens, outputs ~256'."""
        driver = (f"{self.rate_rps:g} requests/s" if self.rate_rps is not None
                  else f"{self.concurrency} concurrent users")
        prefix = f", {self.prefix_share:.0%} of each prompt from the prefix cache" \
            if self.prefix_share else ""
        return (f"{driver}, prompts ~{self.prompt.mean:.0f} tokens, outputs "
                f"~{self.output.mean:.0f}{prefix}")


class Targets(Strict):
    """Latency targets at a percentile (--ttft, --tpot, --e2e in milliseconds on the CLI)."""

    ttft_s: Finite | None = Field(None, gt=0, description="Time to first token, seconds")
    tpot_s: Finite | None = Field(None, gt=0, description="Time per output token, seconds")
    request_latency_s: Finite | None = Field(
        None, gt=0, description="A request end to end, seconds")
    percentile: Literal[50, 90, 95, 99] = 90
    tpot_definition: TpotDefinition = Field(
        "request", description="request: (latency - TTFT) / (output tokens - 1) per request, as "
        "vllm bench serve, GuideLLM and aiperf report TPOT; itl: the gaps between tokens")

    def words(self) -> str:
        """Say the targets: 'TTFT p90 ≤ 1,000 ms, TPOT p90 ≤ 50 ms'."""
        q = self.percentile
        name = "ITL" if self.tpot_definition == "itl" else "TPOT"
        parts = [f"{what} p{q} ≤ {units.ms(value)}" for what, value in (
            ("TTFT", self.ttft_s), (name, self.tpot_s), ("latency", self.request_latency_s))
            if value is not None]
        return ", ".join(parts)

    def any(self) -> bool:
        """Tell whether any target was set."""
        return any(v is not None for v in (self.ttft_s, self.tpot_s, self.request_latency_s))


class ServingFigures(Strict):
    """Latency percentiles and throughput of a server under a load (seconds, requests/s)."""

    ttft_p50_s: Finite
    ttft_p90_s: Finite
    ttft_p99_s: Finite
    ttft_mean_s: Finite
    tpot_p50_s: Finite = Field(description="TPOT per request: (latency - TTFT) / (output - 1)")
    tpot_p90_s: Finite
    tpot_p99_s: Finite
    tpot_mean_s: Finite
    itl_p50_s: Finite = Field(description="Inter-token latency: the gaps between tokens")
    itl_p90_s: Finite
    itl_p99_s: Finite
    itl_mean_s: Finite
    request_latency_p50_s: Finite
    request_latency_p90_s: Finite
    request_latency_p99_s: Finite
    request_latency_mean_s: Finite
    request_throughput_rps: Finite = Field(description="Requests completed per second")
    output_tokens_per_s: Finite = Field(description="Output tokens per second, all requests")
    requests: int = Field(description="Requests the figures are over")
    saturated: bool = Field(
        False, description="Arrivals outpace the server: the queue grows for as long as the load "
        "lasts, so the latencies depend on how long it runs")

    def at(self, figure: str, percentile: int) -> float:
        """Return one figure ('ttft', 'tpot', 'itl', 'request_latency') at a percentile."""
        if percentile == 95:  # the figures keep p90 and p99: interpolate between them by rank
            low, high = self.at(figure, 90), self.at(figure, 99)
            return low + (high - low) * 5.0 / 9.0
        key = f"{figure}_p{percentile}_s"
        return float(getattr(self, key))


class TargetCheck(Strict):
    """One latency target against the predicted (or measured) figure."""

    figure: Literal["ttft", "tpot", "itl", "request_latency"]
    percentile: int
    target_s: Finite
    value_s: Finite
    met: bool
    margin: Finite = Field(description="(target - value) / target: above 0 met with that room")

    def words(self) -> str:
        """Say the target against its figure: 'TTFT p90 86 ms ≤ 1,000 ms: met, 91% spare'."""
        over = self.value_s / self.target_s
        within = self.value_s <= self.target_s
        verdict = (f"met, {units.percent(self.margin)} spare" if self.met
                   # within the target yet missed: the server is saturated, its queue grows
                   else "missed: the server is saturated (its queue grows)" if within
                   else f"missed: {units.ratio(over)} the target" if over >= 2
                   else f"missed by {units.percent(-self.margin)}")
        return (f"{FIGURE_WORDS[self.figure]} p{self.percentile} {units.ms(self.value_s)} "
                f"{'≤' if within else '>'} {units.ms(self.target_s)}: {verdict}")


class ServingConfig(Strict):
    """The serving knobs of one candidate: layout, scheduler, formats."""

    engine: str
    gpus_per_replica: int = Field(gt=0)
    replicas: int = Field(gt=0)
    tensor_parallel: int = Field(1, gt=0)
    pipeline_parallel: int = Field(1, gt=0)
    max_sequences: int = Field(gt=0, description="Sequences a replica runs at once "
                               "(vLLM --max-num-seqs, SGLang --max-running-requests, "
                               "llama-server --parallel)")
    step_tokens: int = Field(gt=0, description="Tokens a scheduler step batches (vLLM "
                             "--max-num-batched-tokens, SGLang --chunked-prefill-size, "
                             "llama-server --batch-size)")
    weights_dtype: str
    kv_dtype: str
    kv_pool_tokens: int = Field(description="Tokens of KV cache the replica holds")
    kv_unified: bool = Field(
        False, description="The slots share one KV cache (llama-server --kv-unified): one "
        "forward pass a step, every sequence's attention reading the used cache; false: the "
        "engine's own (a stream a slot where the slot count is set)")
    slot_tokens: int | None = Field(
        None, description="Tokens each sequence slot holds where the engine allocates its cache "
        "slot by slot (llama-server: --ctx-size is --parallel times this): the load's p99 "
        "prompt plus p99 output; None: a pool shared by page")
    speculative: str | None = None
    prefix_caching: bool = True
    prefill_instances: int = Field(
        0, ge=0, description="Disaggregated prefill/decode: the prefill instances of each group "
        "(a replica is then a group of prefill and decode instances behind a router); 0: each "
        "replica prefills and decodes")
    decode_instances: int = Field(
        0, ge=0, description="Disaggregated prefill/decode: the decode instances of each group; "
        "max_sequences is then a decode instance's and step_tokens a prefill instance's")

    @property
    def disaggregated(self) -> bool:
        """Whether prompts prefill on instances of their own (xPyD)."""
        return self.prefill_instances > 0 and self.decode_instances > 0

    @property
    def gpus_per_instance(self) -> int:
        """GPUs one engine instance takes (a replica's, or a P/D group's instance's)."""
        if self.disaggregated:
            return self.gpus_per_replica // (self.prefill_instances + self.decode_instances)
        return self.gpus_per_replica

    @property
    def gpus(self) -> int:
        """GPUs in all."""
        return self.gpus_per_replica * self.replicas

    def split_words(self) -> str:
        """Say how a replica spreads over its GPUs: 'TP 2', or 'layers split over 2'."""
        if self.pipeline_parallel > 1:
            return f"layers split over {self.pipeline_parallel}"
        return f"TP {self.tensor_parallel}"

    def words(self) -> str:
        """Say the config: '2 replicas x 1 GPU (TP 1), fp8 weights, fp8 KV cache, ...'."""
        replicas = f"{self.replicas} replica{'s' if self.replicas != 1 else ''}"
        gpus = f"{self.gpus_per_replica} GPU{'s' if self.gpus_per_replica != 1 else ''}"
        if self.disaggregated:
            each = self.gpus_per_instance
            replicas = (f"{self.replicas} group{'s' if self.replicas != 1 else ''} of "
                        f"{self.prefill_instances} prefill + {self.decode_instances} decode "
                        "instances")
            gpus = f"{each} GPU{'s' if each != 1 else ''}"
        parts = [f"{replicas} x {gpus} ({self.split_words()})",
                 f"{self.weights_dtype} weights", f"{self.kv_dtype} KV cache",
                 f"at most {self.max_sequences} sequences", f"{self.step_tokens:,} tokens a step"]
        if self.speculative:
            parts.append(f"{self.speculative} drafts")
        if not self.prefix_caching:
            parts.append("no prefix caching")
        if self.kv_unified:
            parts.append("one unified KV cache")
        return ", ".join(parts)


class ServingPoint(Strict):
    """A candidate config with its figures under the load, per GPU and per user."""

    config: ServingConfig
    figures: ServingFigures
    tokens_per_s_per_gpu: Finite
    tokens_per_s_per_user: Finite = Field(description="1 / TPOT at p50: one user's speed")
    meets_targets: bool
    checks: list[TargetCheck] = Field(default_factory=list)
    source: Literal["simulation", "screen"] = Field(
        "simulation", description="simulation: the figures are the discrete-event simulation's; "
        "screen: the analytic steady state's (a ranking, not yet simulated)")
    capacity_rps: Finite | None = Field(
        None, description="The most requests/s the config's replicas serve within the "
        "targets (open loop), by the screen")
    capacity_users: int | None = Field(
        None, description="The most concurrent users the config's replicas serve within the "
        "targets (closed loop), by the screen")
    goodput_tokens_per_s_per_gpu: Finite | None = Field(
        None, description="Output tokens/s per GPU at that capacity: what the search ranks by")


class ServingPlan(Strict):
    """recommend and estimate under a load: the figures, the targets, the configs searched."""

    load: Load
    targets: Targets
    method: str = Field(description="How the figures were made, in words (the simulation, its "
                        "requests and seed, the engine's scheduler)")
    config: ServingConfig | None = Field(
        None, description="The config the figures are for: the best the search found, or "
        "(estimate) the engine's defaults on the planned GPUs")
    figures: ServingFigures | None = Field(
        None, description="The planned config's figures under the load")
    checks: list[TargetCheck] = Field(default_factory=list)
    best: ServingPoint | None = Field(
        None, description="The config that meets the targets at the most tokens/s per GPU")
    fewest_gpus: int | None = Field(
        None, description="The fewest GPUs whose best config meets the targets at this load")
    pareto: list[ServingPoint] = Field(
        default_factory=list, description="Configs no other beats on both tokens/s per GPU and "
        "tokens/s per user, by tokens/s per user")
    top: list[ServingPoint] = Field(
        default_factory=list, description="The best configs that meet the targets, best first")
    searched: int = Field(0, description="Candidate configs the search judged")
    gpus: int | None = Field(
        None, description="The GPUs planned for (--gpus); null: the search chose the fewest")
    search_s: Finite | None = Field(None, description="Seconds the search took")
    bench_command: str | None = Field(
        None, description="The engine's own serving benchmark for this load (vllm bench serve, "
        "SGLang's bench_serving, llama.cpp's, ...), to measure with the tool users trust")
    verdict: str = Field("", description="The answer in one sentence")
    notes: list[str] = Field(default_factory=list)

    def figures_words(self) -> str:
        """Say how the planned config's figures were made: simulated, or by the screen."""
        point = self.best or (self.top[0] if self.top else None)
        return "by the screen" if point is not None and point.source == "screen" else "simulated"
