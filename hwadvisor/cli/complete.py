"""Shell completion of option values: goal, device, model, engine and trial ids.

Each completer gets what was typed so far and returns the ids that start with it (case-
insensitive, as the options themselves read ids). They import their lists when called, so
completion costs nothing at start-up.
"""

from __future__ import annotations

from collections.abc import Iterable


def _matching(ids: Iterable[str], incomplete: str) -> list[str]:
    start = incomplete.lower()
    return [i for i in ids if i.lower().startswith(start)]


def goals(incomplete: str) -> list[str]:
    """Complete --goal."""
    from hwadvisor.rules.playbooks.goals import GOALS

    return _matching(GOALS, incomplete)


def devices(incomplete: str) -> list[str]:
    """Complete --device with the shipped profile ids."""
    from hwadvisor import profiles

    return _matching((p.id for p in profiles.by_class(None)), incomplete)


def models(incomplete: str) -> list[str]:
    """Complete --model with the preset ids (paths complete as files in the shell)."""
    from hwadvisor.workload import list_presets

    return _matching(list_presets(), incomplete)


def engines(incomplete: str) -> list[str]:
    """Complete --engine."""
    from hwadvisor.workload import ENGINES

    return _matching(ENGINES, incomplete)


def trials(incomplete: str) -> list[str]:
    """Complete --trial."""
    from hwadvisor.validator.measure import all_trial_ids

    return _matching(all_trial_ids(), incomplete)
