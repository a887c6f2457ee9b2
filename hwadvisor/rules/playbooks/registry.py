"""Every planner and predictor a rule may name: planners.py's and the engine moves' (moves.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from hwadvisor.rules.playbooks import moves, planners
from hwadvisor.rules.playbooks.planners import Plan, Predicted

if TYPE_CHECKING:
    from hwadvisor.rules.context import RuleContext

PLANNERS: dict[str, Callable[[RuleContext], Plan]] = {**planners.PLANNERS, **moves.PLANNERS}
PREDICTORS: dict[str, Callable[[RuleContext], Predicted]] = dict(planners.PREDICTORS)
