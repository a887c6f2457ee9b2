"""A load test: a running endpoint measured under a load, held against the model's figures.

`validate --endpoint URL` and `recommend --validate --endpoint URL` play a load against an
OpenAI-compatible server (the validator's load generator) and put what it measured beside
what the model predicts for the same load: the same `ServingFigures` keys, in seconds.
"""

from typing import Literal

from pydantic import Field

from hwadvisor.models.hardware import Finite, Strict
from hwadvisor.models.serving import Load, ServingFigures

LoadVerdict = Literal["confirmed", "refuted", "inconclusive"]
Figure = Literal["ttft", "tpot", "itl", "request_latency"]


class FigureCheck(Strict):
    """One predicted figure against the measured one, with the measured figure's interval."""

    figure: Figure
    percentile: int
    predicted_s: Finite
    measured_s: Finite
    ci_s: list[Finite] | None = Field(
        None, min_length=2, max_length=2,
        description="95% interval [low, high] of the measured figure (seconds)")
    ratio: Finite | None = Field(None, description="measured / predicted")
    tolerance: Finite = Field(description="The band around the prediction the measured figure "
                              "must lie in: confirmed when its whole interval lies within "
                              "predicted x (1 +- tolerance), refuted when wholly outside")
    status: LoadVerdict
    judged: bool = Field(True, description="Whether it counts toward the load test's verdict")


class LoadTest(Strict):
    """A load played against a running endpoint, measured, and held against the prediction."""

    endpoint: str = Field(description="The completions URL the requests went to")
    served_model: str | None = Field(None, description="The model name sent in each request")
    load: Load
    prompt: Literal["ids", "words"] = Field(
        "ids", description="ids: each prompt is its length in token ids (exact); words: as "
        "many random words (the server's count is then the real length)")
    requests_sent: int
    requests_completed: int
    requests_failed: int
    errors: list[str] = Field(default_factory=list, description="What failed, with counts")
    stopped_by: Literal["done", "time limit", "interrupted"] = "done"
    duration_s: Finite
    time_limit_s: Finite
    request_timeout_s: Finite
    prompt_tokens_mean: Finite | None = Field(
        None, description="Prompt tokens a request, as the server counted them (usage)")
    output_tokens_mean: Finite | None = Field(
        None, description="Output tokens a request, as the server counted them (usage)")
    measured: ServingFigures | None = Field(
        None, description="What the load generator measured, over the completed requests")
    engine_prefill_p50_s: Finite | None = Field(
        None, description="The engine's own prompt-processing time a request, median "
        "(llama-server timings.prompt_ms): TTFT less queueing and the network")
    engine_tpot_p50_s: Finite | None = Field(
        None, description="The engine's own time per output token, median "
        "(llama-server timings.predicted_per_token_ms)")
    engine_tpot_p90_s: Finite | None = None
    predicted: ServingFigures | None = Field(
        None, description="The model's figures for the same load on the planned config")
    prediction: str = Field("", description="How the prediction was made, in words")
    checks: list[FigureCheck] = Field(default_factory=list)
    interval_method: str = Field("", description="How the measured figures' intervals were made")
    status: Literal["confirmed", "refuted", "inconclusive", "error"] = "inconclusive"
    detail: str = ""
    bench_command: str | None = Field(
        None, description="The engine's own serving benchmark for this load, to measure "
        "with the tool users trust")
    notes: list[str] = Field(default_factory=list)
