"""Speculative-decoding drafters: what each proposes per step, what it costs, what it accepts.

A step of speculative decoding drafts k tokens per sequence, then the target model verifies
them in one forward of k + 1 tokens per sequence and keeps the accepted prefix plus one token
of its own: `accepted` tokens per target forward on average (the "acceptance length" tau of the
papers, bonus token included). The verification forward is modelled at its real width
(batch x (k + 1) tokens), so the gain is a continuous function of the batch: at batch 1 the
step is memory bound and k + 1 tokens cost about as much as one; as the batch grows the wider
forward turns compute bound and the gain fades (then reverses) without a cliff.

Acceptance depends on the task and the sampling temperature; the figures below are each
drafter's published figure for chat at temperature 0 (the assumption a plan states), with the
code and repetitive-output (summarisation, RAG, code edits) figures the caveats quote.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib


@dataclass(frozen=True)
class Drafter:
    """One drafter: its draft length, acceptance per task, cost and what it needs."""

    id: str
    name: str
    draft_tokens: int  # k: tokens drafted per sequence per step (verified as k + 1)
    accepted_chat: float  # accepted tokens per target forward on chat (the plan's assumption)
    accepted_code: float
    accepted_repetitive: float
    # The draft's own time per step as a share of one target forward at the same batch.
    draft_cost: float
    needs: str  # "" when nothing beyond the engine; else the checkpoint it needs
    source: str

    def caveat(self) -> str:
        """Return the acceptance assumption in words, per task, with its source."""
        return (f"{self.name}: {self.draft_tokens} drafted tokens per step, assumed "
                f"{self.accepted_chat:g} accepted per target forward on chat; about "
                f"{self.accepted_code:g} on code and {self.accepted_repetitive:g} on repetitive "
                f"output (summaries, RAG, code edits); draft cost {self.draft_cost:.0%} of a "
                f"forward ({self.source})")


DRAFTERS: dict[str, Drafter] = {
    # Prompt lookup / n-gram: drafts by matching the last n-gram against the context; costs
    # a host-side search. Saxena 2023 (github.com/apoorvumang/prompt-lookup-decoding): 2.4x on
    # summarisation and context QA, little on free chat; vLLM's spec-decode post (blog.vllm.ai
    # 2024-10-17): up to 2.8x with n-gram on CNN/DailyMail summarisation, ~1.2-1.5x on chat.
    "ngram": Drafter(
        "ngram", "n-gram (prompt lookup)", 3, 1.3, 1.6, 2.5, 0.02, "",
        "Saxena 2023 prompt-lookup-decoding; vLLM blog 2024-10-17 (1.2-1.5x chat, up to 2.8x "
        "summarisation)"),
    # A small model of the same tokenizer drafts k tokens autoregressively (Leviathan et al.
    # arXiv:2211.17192; Chen et al. arXiv:2302.01318 report ~2-2.5 accepted at k = 4 for a
    # 1B-class draft of a 70B target). k sequential small forwards each pay their own launch
    # and weight reads: ~30% of a target forward (assumption; vLLM's post measured up to 1.5x
    # on ShareGPT with a draft model).
    "draft-model": Drafter(
        "draft-model", "a small draft model", 4, 2.3, 2.6, 2.8, 0.3,
        "a smaller model of the same tokenizer (e.g. a 0.5B-1B model of the family)",
        "Leviathan et al. arXiv:2211.17192; Chen et al. arXiv:2302.01318; vLLM blog 2024-10-17"),
    # EAGLE-3 (Li et al. arXiv:2503.01840): one decoder layer on the target's hidden states
    # drafts; with its dynamic tree it reports tau 6.1-6.7 on MT-bench for Llama-3.1-8B.
    # The engines' default chains (SGLang steps 3 / draft tokens 4, vLLM 3-4 tokens) accept
    # fewer: per-position acceptance ~0.75 gives (1 - 0.75^5) / 0.25 = 3.0 at k = 4. The draft
    # layer runs once per drafted token: ~k / num_layers of a forward plus the LM head.
    "eagle3": Drafter(
        "eagle3", "EAGLE-3 draft heads", 4, 3.0, 3.4, 3.2, 0.12,
        "an EAGLE-3 draft checkpoint trained for this model (published for Llama-3.1/3.3, "
        "Qwen3 and others; else train one with SpecForge)",
        "Li et al. arXiv:2503.01840 (tau 6.1-6.7 with a tree; 1.38x throughput at batch 64 in "
        "SGLang); chain of 4 at ~0.75 per position = 3.0"),
    # Medusa (Cai et al. arXiv:2401.10774): extra decoding heads on the last hidden state;
    # Medusa-1 ~2.2x on Vicuna-7B, acceptance ~2.5 tokens per step on MT-bench chat.
    "medusa": Drafter(
        "medusa", "Medusa heads", 4, 2.5, 2.8, 2.7, 0.05,
        "Medusa heads trained for this model",
        "Cai et al. arXiv:2401.10774 (Medusa-1 2.2x, ~2.5 accepted on MT-bench)"),
    # The checkpoint's multi-token-prediction layers (DeepSeek-V3 tech report arXiv:2412.19437
    # section 5.4.3: the second token is accepted 85-90% of the time, 1.8x tokens/s). One MTP
    # layer drafts one token: 1 + 0.85 accepted per forward; its cost is one (MoE) layer and
    # the shared head.
    "mtp": Drafter(
        "mtp", "the checkpoint's MTP layers", 1, 1.85, 1.9, 1.9, 0.05, "",
        "DeepSeek-V3 report arXiv:2412.19437 sec. 5.4.3 (85-90% second-token acceptance, 1.8x)"),
}


def drafter(drafter_id: str) -> Drafter:
    """Return a drafter by id (KeyError for an unknown one: ModelOptions checks the id)."""
    return DRAFTERS[drafter_id]


@dataclass(frozen=True)
class Published:
    """A drafter checkpoint a user can name as it is (drafters.toml)."""

    drafter: str
    form: str  # "hf", "gguf" or "mlx": the engine's draft_source
    id: str
    targets: tuple[str, ...]
    source: str
    params: int | None = None  # a draft model's parameters (None: a head sized from its target)
    kv_bytes_per_token: float | None = None  # its own KV cache, 16-bit, all layers
    weights_dtype: str | None = None  # the format the checkpoint is stored in


@lru_cache(maxsize=1)
def published_drafts() -> tuple[Published, ...]:
    """Return drafters.toml's rows, each checked against the drafters this module knows."""
    text = resources.files("hwadvisor.perfmodel").joinpath("drafters.toml").read_text("utf-8")
    rows = tomllib.loads(text).get("checkpoint", [])
    out = []
    for row in rows:
        if row["drafter"] not in DRAFTERS or row["form"] not in ("hf", "gguf", "mlx"):
            raise RuntimeError(f"drafters.toml: unknown drafter or form in {row!r}")
        out.append(Published(row["drafter"], row["form"], row["id"],
                             tuple(t.lower() for t in row["targets"]), row["source"],
                             row.get("params"), row.get("kv_bytes_per_token"),
                             row.get("weights_dtype")))
    return tuple(out)


def published_draft(drafter_id: str, names: set[str], form: str | None) -> Published | None:
    """Return the published checkpoint of this drafter for a model known by `names`, if any.

    names: the model as the user gave it and its preset id, lower-cased; form: the engine's
    draft_source (None: the engine takes no published checkpoint as it is).
    """
    if form is None:
        return None
    for row in published_drafts():
        if row.drafter == drafter_id and row.form == form and names & set(row.targets):
            return row
    return None


def published_for_model(drafter_id: str, model: str, form: str | None) -> Published | None:
    """Return the published checkpoint of this drafter for `model`, if drafters.toml names one.

    model: a preset id, a Hugging Face repo id or a path; form: the engine's draft_source.
    """
    from hwadvisor.workload.build import preset_of

    names = {model.strip().lower()}
    preset = preset_of(model)
    if preset is not None:
        names.add(preset)
    return published_draft(drafter_id, names, form)


# An EAGLE-3 head's own output vocabulary: the published heads map 32,000 draft tokens to the
# target's (draft_vocab_size in yuhuili/EAGLE3-LLaMA3.1-Instruct-8B's and
# nebius/EAGLE3-Llama-3.3-70B-Instruct's config.json); the embedding is the target's, shared
# when the head ships none (vllm/v1/spec_decode/llm_base_proposer.py _maybe_share_embeddings).
EAGLE3_DRAFT_VOCAB = 32000
# A draft model whose checkpoint the catalog does not name: about 1B parameters in 16 bits with
# a Llama-3.2-1B-like cache (the family's usual draft; drafters.toml's Llama rows), scaled down
# to an eighth of a smaller target (assumption).
FALLBACK_DRAFT_PARAMS = 1.24e9
FALLBACK_DRAFT_KV_BYTES = 32768.0


@dataclass(frozen=True)
class DraftMemory:
    """What a drafter adds to a replica's memory: its weights, and its KV cache per token."""

    weight_bytes: float
    kv_bytes_per_token: float  # one sequence, one token, all its layers, 16-bit
    words: str


def head_params(hidden: int, q_dim: int, kv_dim: int, mlp: float, vocab: int) -> float:
    """Return one EAGLE-3 head's parameters as vLLM 0.33.0 builds it (llama_eagle3.py).

    The fusion layer (3 x hidden -> hidden), one decoder layer whose QKV takes the embedding
    and the fused state (2 x hidden), its MLP, and an LM head over the draft vocabulary.
    """
    fusion = 3 * hidden * hidden
    attention = 2 * hidden * (q_dim + 2 * kv_dim) + q_dim * hidden
    return fusion + attention + mlp + vocab * hidden
