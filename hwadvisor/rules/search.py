"""The plan search: stack the goal's rules into one plan that fits and best serves its metric.

Start from what the engine does by default. Then, greedily:
1. while the workload does not fit, take the change that makes it fit with the best metric, or
   else the one that cuts the most memory, trying drop-in changes first, then changes taken only
   to fit (offload, recomputation), then changes of method (LoRA, QLoRA);
2. once it fits, take the drop-in change with the largest gain on the goal's metric that still
   fits, as long as one gains at least its rule's min_gain.
Every rule is judged on the plan so far, so effects compose: FP8 weights after CUDA graphs are
worth what they are worth with graphs on. A rule the engine already applies is never proposed.
When nothing fits, min_gpus and alternatives say what would.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from hwadvisor import units
from hwadvisor.models import (
    Device,
    Estimate,
    HostInfo,
    PlanLayout,
    PlanMetric,
    PlanStep,
    Recommendation,
    Rejected,
    Workload,
)
from hwadvisor.models.recommend import Goal
from hwadvisor.rules.context import Estimator, RuleContext
from hwadvisor.rules.judge import (
    Candidate,
    Rejection,
    caveats_of,
    judge,
    new_context,
    title_of,
    why_text,
)
from hwadvisor.rules.playbooks.goals import goal_spec
from hwadvisor.rules.playbooks.metrics import gain, prediction, read_metric
from hwadvisor.rules.playbooks.schema import Rule
from hwadvisor.workload.quality import BUDGET_RANK, PRECISION_RANK, budget, class_of

if TYPE_CHECKING:
    from hwadvisor.engines import Engine

MAX_STEPS = 12
# While the workload does not fit, a change is taken for its memory only when it cuts at least
# this share: a 3% side effect of a speed change does not bring a 6x gap closer.
MIN_MEMORY_CUT = 0.10
# A fit step whose removal costs the goal's metric less than this goes (a 0.2% optimizer-step
# difference is no reason to keep a change).
PRUNE_TOLERANCE = 0.995
# A gain below this share is noise of the model, whatever a rule's own min_gain says.
MIN_PLAN_GAIN = 0.01

def tier(rule: Rule) -> int:
    """1 drop-in change, 2 taken only to fit, 3 a change of method (last resort)."""
    if rule.changes_method:
        return 3
    return 2 if rule.only_to_fit else 1


def goal_value(goal: Goal, estimate: Estimate) -> float | None:
    """Return the goal's one metric read from an estimate."""
    return read_metric(estimate, goal_spec(goal).metric)


def goal_gain(goal: Goal, before: Estimate, after: Estimate) -> float:
    """How many times better the goal's metric is after (>1 better)."""
    b, a = goal_value(goal, before), goal_value(goal, after)
    if b is None or a is None:
        return 1.0
    return gain(goal_spec(goal).metric_spec, b, a)


@dataclass
class Taken:
    """A step of the plan: the candidate and the state it was judged on."""

    candidate: Candidate
    ctx: RuleContext
    needed_to_fit: bool


@dataclass
class SearchResult:
    """What the search found: the steps, the final state, and every rule's last word."""

    base: RuleContext
    final: RuleContext
    steps: list[Taken]
    rejected: dict[str, Rejected] = field(default_factory=dict)
    unchosen: dict[str, Candidate] = field(default_factory=dict)
    already: dict[str, str] = field(default_factory=dict)
    searcher: Any = None  # the _Searcher, to replay other step lists from the base

    def replay(self, rule_ids: list[str]) -> RuleContext:
        """Return the state these rules reach from the base, each judged on the state before it."""
        _, ctx = self.searcher.replay(self.base, rule_ids)
        return ctx  # type: ignore[no-any-return]


def _engine_skips(rules: list[Rule], workload: Workload, device: Device) -> dict[str, str]:
    """Rules the engine already applies, or cannot apply here, with the reason in words."""
    from hwadvisor.engines import engine_for

    engine = engine_for(workload)
    out: dict[str, str] = {}
    cls = str(device.device_class)
    for rule in rules:
        if rule.id in engine.applies and not _can_go_further(engine, rule.id):
            out[rule.id] = (f"{engine.name} does this by default ({engine.reasons.get(rule.id, '')}"
                            .rstrip(" (") + (")" if engine.reasons.get(rule.id) else ""))
        elif rule.id in engine.unsupported or rule.id in engine.unsupported_on.get(cls, []):
            reason = engine.reasons.get(rule.id, "no such option")
            out[rule.id] = f"{engine.name} cannot do this here: {reason}"
    return out


def _can_go_further(engine: Engine, rule_id: str) -> bool:
    """Whether a step the engine does by default has a stronger level it can be told to use.

    torchtitan checkpoints selectively by default and takes mode = "full" when that is needed.
    """
    return rule_id == "activation-checkpointing" and \
        engine.defaults.checkpointing != "full" and engine.says(rule_id, "full")


def _judge_all(rules: list[Rule], ctx: RuleContext, skip: set[str],
               fit_cut: float | None = None) -> tuple[list[Candidate], dict[str, Rejected]]:
    candidates: list[Candidate] = []
    rejected: dict[str, Rejected] = {}
    for rule in rules:
        if rule.id in skip:
            continue
        try:
            candidates.append(judge(rule, ctx, fit_cut))
        except Rejection as no:
            rejected[rule.id] = Rejected(id=rule.id, why_not=f"{rule.id}: {no.reason}",
                                         conditions_failed=no.conditions)
    return candidates, rejected


# How much a weight or KV dtype gives up, against the --quality budget (workload/quality.py).
_PRECISION_RANK = PRECISION_RANK
_BUDGET_RANK = BUDGET_RANK


def beyond_budget(c: Candidate, ctx: RuleContext) -> str | None:
    """Say which precision a change takes below the workload's quality budget, if any.

    Only a drop: the checkpoint's own format (an int4 release served as int4) is the user's.
    """
    if c.workload is None:
        return None
    allowed = _BUDGET_RANK[budget(ctx.workload.quality)]
    for part in ("weights_dtype", "kv_dtype"):
        before = _PRECISION_RANK.get(getattr(ctx.workload, part), 0)
        after_dtype = getattr(c.workload, part)
        after = _PRECISION_RANK.get(after_dtype, 0)
        if after > before and after > allowed:
            what = "weights" if part == "weights_dtype" else "KV cache"
            return f"{after_dtype} {what}"
    return None


def _loss_beyond(c: Candidate, ctx: RuleContext) -> int:
    """Return the loss class a change goes below the budget to (0: within it).

    Of the changes below the budget, taken only to fit, the smaller loss goes first: 8-bit
    weights or KV cache before 4-bit weights (workload/quality.py).
    """
    if c.workload is None or _within(c, ctx):
        return 0
    return max(_PRECISION_RANK.get(c.workload.weights_dtype, 0),
               _PRECISION_RANK.get(c.workload.kv_dtype, 0))


def _within(c: Candidate, ctx: RuleContext) -> bool:
    return beyond_budget(c, ctx) is None


def _memory(c: Candidate) -> float:
    assert c.after is not None
    return float(c.after.memory.total_bytes)


def _pick_to_fit(goal: Goal, ctx: RuleContext, candidates: list[Candidate],
                 level: int) -> Candidate | None:
    """Pick the next change towards a fit, escalating tiers only when lower ones run out.

    In each tier up to `level`: a change that makes it fit (the best metric among them), else
    the largest memory cut; a higher tier is looked at only when the lower ones have neither.
    """
    current = float(ctx.estimate.memory.total_bytes)
    for rank in range(1, level + 1):
        pool = [c for c in candidates if c.plan_eligible and tier(c.rule) == rank]
        fitting = [c for c in pool if c.fits_after]
        if fitting:
            # within the quality budget first: 4-bit only when nothing within it fits; of
            # those below it, the smaller loss first (q8_0 KV before Q4_K_M weights)
            return max(fitting, key=lambda c: (_within(c, ctx), -_loss_beyond(c, ctx),
                                               -c.rule.complexity,
                                               goal_gain(goal, ctx.estimate, c.after),  # type: ignore[arg-type]
                                               c.rule.id))
        cutting = [c for c in pool if _memory(c) < current * (1 - MIN_MEMORY_CUT)]
        if cutting:
            return min(cutting, key=lambda c: (_memory(c), c.rule.id))
    return None


def _pick_by_metric(goal: Goal, ctx: RuleContext, candidates: list[Candidate],
                    level: int) -> Candidate | None:
    """Pick, among changes of tier <= level that fit or cut enough, the best for the metric."""
    current = float(ctx.estimate.memory.total_bytes)
    pool = [c for c in candidates if c.plan_eligible and tier(c.rule) <= level and (
        c.fits_after or _memory(c) < current * (1 - MIN_MEMORY_CUT))]
    if not pool:
        return None
    return max(pool, key=lambda c: (bool(c.fits_after) and tier(c.rule) == 1, _within(c, ctx),
                                    -_loss_beyond(c, ctx), -tier(c.rule),
                                    goal_gain(goal, ctx.estimate, c.after),  # type: ignore[arg-type]
                                    c.rule.id))


def _pick_for_metric(goal: Goal, ctx: RuleContext, candidates: list[Candidate]
                     ) -> Candidate | None:
    """Return the drop-in change with the largest gain on the goal's metric that still fits."""
    best: tuple[float, Candidate] | None = None
    for c in candidates:
        if not c.plan_eligible or tier(c.rule) != 1 or not c.fits_after:
            continue
        if not _within(c, ctx):
            continue  # below the quality budget: for speed, never (it is listed beside)
        assert c.after is not None
        g = goal_gain(goal, ctx.estimate, c.after)
        threshold = 1 + (c.min_gain if c.min_gain is not None
                         else max(c.rule.min_gain or 0.0, MIN_PLAN_GAIN))
        if g >= threshold and (best is None or g > best[0]):
            best = (g, c)
    return best[1] if best is not None else None


class _Searcher:
    """One plan search: the rules, the fixed inputs, and a cache of estimates across states."""

    def __init__(self, goal: Goal, rules: list[Rule], device: Device, host: HostInfo | None,
                 estimator: Estimator, skip: set[str], fit_only: bool = False) -> None:
        self.goal, self.rules, self.device, self.host = goal, rules, device, host
        self.estimator, self.skip = estimator, skip
        self.engine: str | None = None  # the engine the plan starts on (search() sets it)
        # Asked only whether some plan fits: changes that cannot serve a fit are dropped from
        # their memory alone (fit_run would not take them).
        self.fit_cut = MIN_MEMORY_CUT if fit_only else None
        self.cache: dict[Any, Estimate] = {}
        self.rejected: dict[str, Rejected] = {}
        self._judged: dict[Any, tuple[list[Candidate], dict[str, Rejected]]] = {}

    def context(self, workload: Workload, options: Any) -> RuleContext:
        """Return the state of a workload and its knobs."""
        return new_context(workload, self.device, self.host, options, self.estimator,
                           self.cache)

    def candidates(self, ctx: RuleContext, used: set[str]) -> list[Candidate]:
        """Every rule not used yet judged on this state (rejections remembered)."""
        key = (RuleContext.key_of(ctx.workload, ctx.options), frozenset(used))
        if key not in self._judged:  # the fit runs of a level start from the same states
            skip = self.skip
            if self.engine is not None and ctx.workload.engine != self.engine:
                # a step moved the plan to another engine: what that one does already or
                # cannot do is skipped from here on
                skip = skip | set(_engine_skips(self.rules, ctx.workload, self.device))
            self._judged[key] = _judge_all(self.rules, ctx, used | skip, self.fit_cut)
        found, rejected = self._judged[key]
        self.rejected.update(rejected)
        return found

    def take(self, ctx: RuleContext, pick: Candidate, fitting: bool) -> tuple[Taken,
                                                                              RuleContext]:
        """Apply a candidate: the step taken and the state after it."""
        assert pick.workload is not None and pick.options is not None
        return Taken(pick, ctx, needed_to_fit=fitting), self.context(pick.workload,
                                                                    pick.options)

    def fit_run(self, start: RuleContext, level: int,
                by_metric: bool = False) -> tuple[list[Taken], RuleContext]:
        """Greedy changes of tier <= level until the workload fits (or none helps).

        by_metric: at each step take the change that serves the goal's metric best among those
        that fit or cut memory enough, instead of the first that fits (8-bit Adam plus
        recomputation can beat moving the optimizer to the CPU).
        """
        def pick(ctx: RuleContext, candidates: list[Candidate]) -> Candidate | None:
            if by_metric:
                return _pick_by_metric(self.goal, ctx, candidates, level)
            return _pick_to_fit(self.goal, ctx, candidates, level)

        return self._greedy(start, set(), pick, fitting=True)

    def replay(self, start: RuleContext, rule_ids: list[str]) -> tuple[list[Taken],
                                                                       RuleContext]:
        """Apply these rules in order, each judged on the state before it."""
        ctx, steps = start, []
        by_id = {r.id: r for r in self.rules}
        for rule_id in rule_ids:
            try:
                pick = judge(by_id[rule_id], ctx)
            except Rejection:
                continue
            if not pick.plan_eligible:
                continue
            taken, ctx = self.take(ctx, pick, fitting=True)
            steps.append(taken)
        return steps, ctx

    def prune(self, start: RuleContext, steps: list[Taken]) -> tuple[list[Taken],
                                                                     RuleContext]:
        """Drop fit steps the others make unnecessary (the fewest changes that fit).

        A step goes only when the plan still fits without it and the goal's metric is no
        worse: offload sized on a bf16 model is not kept next to 4-bit weights that halve it.
        """
        ids = [s.candidate.rule.id for s in steps]
        _, current = self.replay(start, ids)
        for rule_id in reversed(list(ids)):
            trial = [i for i in ids if i != rule_id]
            _, ctx = self.replay(start, trial)
            if ctx.facts.fits and goal_gain(self.goal, current.estimate,
                                               ctx.estimate) >= PRUNE_TOLERANCE:
                ids, current = trial, ctx
        return self.replay(start, ids)

    def finalize(self, start: RuleContext, steps: list[Taken]) -> tuple[list[Taken],
                                                                        RuleContext]:
        """Apply the drop-in steps first and fit-only or method changes last, then re-plan.

        A planner sizes its change on the state it sees (how much to offload, which
        checkpointing): put after the drop-ins, it sizes for the plan as it ends up. Kept when
        it fits at least as well and serves the metric no worse.
        """
        ordered = [s for s in steps if tier(s.candidate.rule) == 1] + \
            [s for s in steps if tier(s.candidate.rule) > 1]
        if [s.candidate.rule.id for s in ordered] == [s.candidate.rule.id for s in steps]:
            return steps, self.context(*_state_of(steps[-1]))
        _, before = self.replay(start, [s.candidate.rule.id for s in steps])
        replayed, ctx = self.replay(start, [s.candidate.rule.id for s in ordered])
        if (ctx.facts.fits or not before.facts.fits) and (
                goal_gain(self.goal, before.estimate, ctx.estimate) >= 1.0
                or self._resized_faster(before, ctx)):
            return replayed, ctx
        return steps, before

    def _resized_faster(self, before: RuleContext, after: RuleContext) -> bool:
        """Whether a memory plan re-sized after its later steps fits and generates faster.

        Offload sized on the bf16 model and kept beside 4-bit weights leaves the card nearly
        empty while layers stream over the host link: re-sized on the 4-bit state, fewer
        layers leave the GPU. The memory goal's metric rises to the card's limit (with the
        planner's headroom), the speed by several times; the memory goal keeps the speed.
        """
        if not goal_spec(self.goal).memory_first or not after.facts.fits:
            return False
        b, a = before.estimate.times.tpot_s, after.estimate.times.tpot_s
        return b is not None and a is not None and a < b

    def levels(self) -> list[int]:
        """Tiers to escalate through: a tier no rule has would only repeat the one below."""
        present = {tier(r) for r in self.rules}
        return [level for level in (1, 2, 3) if level == 1 or level in present]

    def fit(self, start: RuleContext) -> tuple[list[Taken], RuleContext]:
        """Return the fewest changes of the lowest tier that make the workload fit.

        Drop-in changes first; only if they cannot make it fit, changes taken only to fit
        (offload, recomputation); only then changes of method (LoRA, QLoRA). When nothing
        fits, the deepest memory cut found.
        """
        best: tuple[list[Taken], RuleContext] | None = None
        for level in self.levels():
            runs = [self.fit_run(start, level, by_metric) for by_metric in (False, True)]
            if level == 3:
                runs += self.method_first_runs(start)
            fitting = [self.prune(start, steps) for steps, ctx in runs if ctx.facts.fits]
            if fitting:
                return max(fitting, key=lambda run: goal_gain(self.goal, start.estimate,
                                                              run[1].estimate))
            for steps, ctx in runs:
                if best is None or ctx.estimate.memory.total_bytes < \
                        best[1].estimate.memory.total_bytes:
                    best = (steps, ctx)
        assert best is not None
        return best

    def method_first_runs(self, start: RuleContext) -> list[tuple[list[Taken], RuleContext]]:
        """Each change of method taken first, then what else fitting needs.

        The tiered runs reach LoRA only after a drop-in sharding has cut what it could, so
        they keep FSDP even where the adapters let every GPU hold the model: two RTX 4090s
        (no peer access) all-gather a sharded 8B base over the host every micro-batch, where
        QLoRA on each card, data parallel, sends only the adapters' gradients. These runs let
        the plan compare the two; the fit search keeps whichever serves the metric better.
        """
        runs = []
        for c in self.candidates(start, set()):
            if not c.plan_eligible or tier(c.rule) != 3:
                continue
            first, ctx = self.take(start, c, fitting=True)
            more, ctx = self._greedy(ctx, {c.rule.id},
                                     lambda ctx, cands: _pick_to_fit(self.goal, ctx, cands, 3),
                                     fitting=True)
            runs.append(([first, *more], ctx))
        return runs

    def improve(self, ctx: RuleContext, used: set[str]) -> tuple[list[Taken], RuleContext]:
        """Drop-in changes by largest gain on the goal's metric, while one gains enough."""
        return self._greedy(ctx, used,
                            lambda ctx, candidates: _pick_for_metric(self.goal, ctx, candidates),
                            fitting=False)

    def _greedy(self, ctx: RuleContext, used: set[str],
                pick: Callable[[RuleContext, list[Candidate]], Candidate | None],
                fitting: bool) -> tuple[list[Taken], RuleContext]:
        """Take the change `pick` chooses among the unused candidates, until it chooses none.

        fitting: the changes are taken to fit, and the run ends once the workload fits.
        """
        steps: list[Taken] = []
        while len(steps) < MAX_STEPS and not (fitting and ctx.facts.fits):
            chosen = pick(ctx, self.candidates(ctx, used))
            if chosen is None:
                break
            taken, ctx = self.take(ctx, chosen, fitting=fitting)
            steps.append(taken)
            used.add(chosen.rule.id)
        return steps, ctx


def search(goal: Goal, rules: list[Rule], workload: Workload, device: Device,
           host: HostInfo | None, options: Any, estimator: Estimator,
           fit_only: bool = False) -> SearchResult:
    """Plan search from the engine's default setup (see the module docstring).

    fit_only stops once the workload fits (min_gpus asks only whether some plan fits).
    """
    already = _engine_skips(rules, workload, device)
    searcher = _Searcher(goal, rules, device, host, estimator, set(already), fit_only)
    searcher.engine = workload.engine
    base = searcher.context(workload, options)
    steps: list[Taken] = []
    ctx = base
    if not base.facts.fits:
        steps, ctx = searcher.fit(base)
    if fit_only:
        return SearchResult(base=base, final=ctx, steps=steps, already=already,
                            searcher=searcher)
    used = {s.candidate.rule.id for s in steps}
    more, ctx = searcher.improve(ctx, used)
    steps += more
    if steps:
        steps, ctx = searcher.finalize(base, steps)
    return _finish(searcher, base, steps, ctx, already)


def search_steps(goal: Goal, rules: list[Rule], workload: Workload, device: Device,
                 host: HostInfo | None, options: Any, estimator: Estimator,
                 rule_ids: list[str]) -> SearchResult:
    """Return the plan of these rules, in order, from the engine's default setup.

    A plan found under other inputs (a looser --quality) replayed on this workload: each step
    is judged on the state before it, and a planner sizes its change there.
    """
    already = _engine_skips(rules, workload, device)
    searcher = _Searcher(goal, rules, device, host, estimator, set(already))
    searcher.engine = workload.engine
    base = searcher.context(workload, options)
    steps, ctx = searcher.replay(base, rule_ids)
    return _finish(searcher, base, steps, ctx, already)


def _finish(searcher: _Searcher, base: RuleContext, steps: list[Taken], ctx: RuleContext,
            already: dict[str, str]) -> SearchResult:
    """Return the search result: every rule not in the plan judged on the final state."""
    used = {s.candidate.rule.id for s in steps}
    searcher.rejected = {}
    final_candidates = searcher.candidates(ctx, used)
    unchosen = {c.rule.id: c for c in final_candidates}
    rejected = {k: v for k, v in searcher.rejected.items() if k not in unchosen}
    return SearchResult(base=base, final=ctx, steps=steps, rejected=rejected,
                        unchosen=unchosen, already=already, searcher=searcher)


def _state_of(taken: Taken) -> tuple[Workload, Any]:
    """Return the workload and knobs after a taken step."""
    assert taken.candidate.workload is not None
    return taken.candidate.workload, taken.candidate.options


def plan_metric(goal: Goal, base: Estimate, final: Estimate) -> PlanMetric:
    """Return the goal's metric before (engine defaults) and after the whole plan."""
    spec = goal_spec(goal)
    return PlanMetric(name=spec.report_name, unit=spec.metric_spec.unit,
                      better=spec.metric_spec.better,
                      before=goal_value(goal, base), after=goal_value(goal, final))


def side_effects(goal: Goal, before: Estimate, after: Estimate) -> list[str]:
    """Other metrics a step moves by more than 2%, in words (never ranked on)."""
    paths = ["estimate.memory.total_bytes", "estimate.tokens_per_s",
             "estimate.times.ttft_s", "estimate.times.tpot_s", "estimate.times.train_step_s"]
    out = []
    for path in paths:
        if path == goal_spec(goal).metric:
            continue
        b, a = read_metric(before, path), read_metric(after, path)
        if b is None or a is None or b == 0 or abs(a / b - 1) < 0.02:
            continue
        out.append(prediction(path, b, a).text or "")
    return [t for t in out if t]


# A step taken while searching for a fit is called "to fit" only when it moves memory: by this
# share at least, or across the limit. torch.compile trims activations by ~1%; it is taken for
# speed, whatever search found it.
MIN_FIT_CUT = 0.02


def _to_fit(taken: Taken) -> bool:
    c, ctx = taken.candidate, taken.ctx
    if not taken.needed_to_fit or c.after is None:
        return False
    before = ctx.estimate.memory.total_bytes
    crossed = bool(c.fits_after) and not ctx.facts.fits
    return crossed or (before > 0 and 1 - c.after.memory.total_bytes / before >= MIN_FIT_CUT)


def step_of(goal: Goal, taken: Taken, index: int) -> PlanStep:
    """Return the plan step of a taken candidate (judged on the plan so far)."""
    c, ctx = taken.candidate, taken.ctx
    assert c.after is not None
    return PlanStep(
        id=c.rule.id,
        title=title_of(c.rule, ctx.facts),
        changes={k: v for k, v in c.changes.items() if isinstance(v, (str, int, float, bool))
                 and k in _REPORTED_CHANGES},
        metric_after=goal_value(goal, c.after),
        memory_per_gpu_bytes_after=c.after.memory.total_bytes,
        fits_after=bool(c.fits_after),
        why=why_text(c, ctx),
        side_effects=side_effects(goal, ctx.estimate, c.after),
        needed_to_fit=_to_fit(taken),
        changes_method=c.rule.changes_method,
    )


# The changes worth showing users (knobs a reader can act on; not every option copied along).
_REPORTED_CHANGES = {
    "weights_dtype", "kv_dtype", "activation_dtype", "optimizer", "grad_accum", "batch",
    "activation_checkpointing", "engine", "cuda_graphs", "compiled", "attention_kernel",
    "fused_optimizer", "sharding", "tp_size", "pipeline_stages", "context_parallel",
    "expert_parallel", "dp_attention", "comm_overlap", "offload_fraction", "prefix_cache_hit",
    "speculative_tokens_per_step", "speculative_drafter", "speculative_draft_tokens",
    "prefill_chunk_tokens", "finetune", "lora_rank",
    "optimizer_offload", "selective_checkpointing", "checkpoint_every", "cross_entropy",
}


def recommendation(goal: Goal, c: Candidate, ctx: RuleContext, rank: int,
                   step: int | None) -> Recommendation:
    """Return a recommendation of one candidate on its state (a plan step, or one left out)."""
    return Recommendation(
        id=c.rule.id, goal=goal, title=title_of(c.rule, ctx.facts), rank=rank,
        why=why_text(c, ctx), predicted=c.prediction, trial=c.rule.trial,
        caveats=[*_budget_caveat(c, ctx), *c.caveats, *caveats_of(c.rule, ctx.facts)],
        references=list(c.rule.references),
        changes={k: v for k, v in c.changes.items() if isinstance(v, (str, int, float, bool))
                 and k in _REPORTED_CHANGES | {k for k in c.changes if k.startswith("spec.")}},
        fits_after=c.fits_after, in_plan=step is not None, step=step,
        needs_retraining=c.rule.needs_retraining,
        side_effects=side_effects(goal, ctx.estimate, c.after) if c.after is not None else [],
    )


def _budget_caveat(c: Candidate, ctx: RuleContext) -> list[str]:
    """Say plainly when a change goes below the quality budget (taken only to fit, or listed)."""
    below = beyond_budget(c, ctx)
    if below is None:
        return []
    needed = class_of(below.split()[0])
    return [f"below the --quality {ctx.workload.quality} budget ({below}): taken only when "
            f"nothing within the budget fits; pass --quality {needed} to allow it for speed"]


def layout_of(ctx: RuleContext) -> PlanLayout:
    """How the final state spreads the work (tp x pp x cp x dp)."""
    from hwadvisor.perfmodel.layout import resolve_layout

    layout = resolve_layout(ctx.workload, ctx.options)
    return PlanLayout(gpus=layout.gpus, nodes=layout.nodes, tp=layout.tp, pp=layout.pp,
                      cp=layout.cp, dp=layout.dp, ep=layout.ep, attn_dp=layout.attn_dp,
                      sharding=layout.strategy)


def fmt_metric(goal: Goal, value: float | None) -> str:
    """Return the goal's metric in words ('412 ms', '12,300 tokens/s', '38.2 GB')."""
    return units.quantity(value, goal_spec(goal).metric_spec.unit)
