"""Every planner and predictor a rule may name: planners.py's, fitting.py's and moves.py's."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from hwadvisor.rules.playbooks import fitting, moves, planners
from hwadvisor.rules.playbooks.planners import Plan, Predicted

if TYPE_CHECKING:
    from hwadvisor.rules.context import RuleContext

PLANNERS: dict[str, Callable[[RuleContext], Plan]] = {**planners.PLANNERS, **fitting.PLANNERS,
                                                      **moves.PLANNERS}
PREDICTORS: dict[str, Callable[[RuleContext], Predicted]] = dict(planners.PREDICTORS)
