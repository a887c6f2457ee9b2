"""Pure bf16 training's planners, and the move of a plan to an engine that can make it.

Pure bf16 gives up the fp32 master copy (small updates round away), so it is planned only
where the engine's own levers that keep the master (whole-layer checkpointing, micro-batch 1,
8-bit AdamW, a chunked loss) cannot fit. planners.py holds the planners of one engine's knobs
(serving_engine_plan, the move to a serving engine, stays there beside its GGUF twins);
registry.py puts both tables together.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from hwadvisor.rules.playbooks.planners import Plan

if TYPE_CHECKING:
    from hwadvisor.rules.context import RuleContext

# The engine that fine-tunes a bf16-loaded model without an fp32 master copy and takes
# bitsandbytes' 8-bit AdamW (TrainingArguments optim="adamw_bnb_8bit"), and that step's id in
# its data file.
_TRAINER = "hf"
_PURE_STEP = "pure-bf16-adamw-8bit"


def _master_kept_fit(ctx: RuleContext) -> str | None:
    """Say how the engine fits the job with its fp32 master kept; None when it cannot.

    Its own fit-only levers at their deepest: whole-layer checkpointing, micro-batch 1 (the
    global batch kept by accumulation), 8-bit AdamW and a chunked or fused loss where it has
    them (engines/data/<id>.toml).
    """
    from hwadvisor.engines import engine_for

    engine = engine_for(ctx.workload)
    wl = ctx.workload
    workload: dict[str, object] = {"activation_checkpointing": True, "batch": 1,
                                   "grad_accum": wl.batch * wl.grad_accum}
    options: dict[str, object] = {"selective_checkpointing": False, "checkpoint_every": 1}
    levers = ["full checkpointing", "micro-batch 1"]
    if "optimizer-8bit" not in engine.unsupported:
        workload["optimizer"] = "adamw-8bit"
        levers.append("8-bit AdamW")
    for form in ("chunked", "fused"):
        if engine.says("fused-cross-entropy", form):
            options["cross_entropy"] = form
            levers.append(f"a {form} loss")
            break
    if not ctx.fits_with(workload, options):
        return None
    return ", ".join(levers)


def pure_bf16_plan(ctx: RuleContext) -> Plan:
    """Pure bf16 with 8-bit AdamW, only where the fp32 master cannot be kept (the rule's what-if).

    bf16 weights lose updates below half their step: a plan takes that only when the
    engine's levers that keep the master do not fit.
    """
    kept = _master_kept_fit(ctx)
    if kept is not None:
        return Plan(reject=f"{ctx.facts.engine_name} fits with the fp32 master kept ({kept}): "
                           "pure bf16 only where nothing that keeps it fits")
    return Plan()


def trainer_pure_bf16_plan(ctx: RuleContext) -> Plan:
    """Move a full fine-tune to transformers' Trainer, in pure bf16 with 8-bit AdamW.

    The Trainer starts from its own defaults (fused AdamW, no checkpointing: torchtitan's
    per-op selective checkpointing has no Trainer form, so the fit search adds whole-layer
    checkpointing if the plan still needs it); the model loads in bf16, so the optimizer's
    parameters are the bf16 weights (ModelOptions.master_weights off) and its moments 8-bit.
    """
    from hwadvisor.engines import baseline_options, get_engine

    trainer = get_engine(_TRAINER)
    if _PURE_STEP in trainer.unsupported or "training" not in trainer.phases:
        return Plan(reject=f"{trainer.name} cannot train in pure bf16 here")
    kept = _master_kept_fit(ctx)
    if kept is not None:
        return Plan(reject=f"{ctx.facts.engine_name} fits on its own ({kept}): the plan keeps "
                           "it and the fp32 master")
    switch: dict[str, object] = {
        "engine": _TRAINER, "engine_version": None, "engine_options": {},
        "engine_source": f"moved from {ctx.facts.engine_name}, which cannot fit this full "
                         "fine-tune here (the plan's trainer-pure-bf16-adamw-8bit step)",
        "optimizer": "adamw-8bit"}
    if ctx.options.selective_checkpointing or ctx.options.checkpoint_every > 1:
        switch["activation_checkpointing"] = False
    moved = ctx.workload.model_copy(update=switch)
    options = {**baseline_options(moved, ctx.device).model_dump(), "master_weights": False}
    return Plan(workload=switch, options=options, notes=[
        f"{ctx.facts.engine_name} keeps fp32 parameters and fp32 AdamW moments and has no 8-bit "
        f"optimizer; {trainer.name} loads the model in bf16 and steps it with bitsandbytes' "
        "8-bit AdamW: 2 + 2 + 2 bytes a parameter of weights, gradients and optimizer state"])


PLANNERS: dict[str, Callable[[RuleContext], Plan]] = {
    planner.__name__: planner for planner in (pure_bf16_plan, trainer_pure_bf16_plan)}
