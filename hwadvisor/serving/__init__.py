"""Serving under load: a load of requests through the engine's scheduler, and the figures it gives.

The room between the performance model and the rules (docs/architecture.md): `load.py` draws the
requests (lengths, arrivals, a trace), `scheduler.py` reads the engine's scheduler (policy, limits,
KV pool), `simulate.py` plays the requests step by step with perfmodel/steps.py's step times,
`figures.py` turns per-request times into percentiles, `search.py` looks for the config that meets
latency targets at the most tokens/s per GPU (`screen.py` its analytic steady state, `plan.py`
the plan a report carries). `predict()` (prediction.py) is the entry point for one config.

The names below load on first use (PEP 562), so importing the room (the CLI's load options, a
report's words) does not load the performance model: estimate and recommend without a load
start as fast as before.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hwadvisor.serving.prediction import Prediction, predict, replica_load
    from hwadvisor.serving.scheduler import Knobs

__all__ = ["Knobs", "Prediction", "predict", "replica_load"]


def __getattr__(name: str) -> Any:
    """Load predict() and its companions on first use."""
    if name == "Knobs":
        from hwadvisor.serving.scheduler import Knobs

        return Knobs
    if name in ("Prediction", "predict", "replica_load"):
        from hwadvisor.serving import prediction

        return getattr(prediction, name)
    raise AttributeError(f"module 'hwadvisor.serving' has no attribute {name!r}")
