"""The door to the generic model reader, for model types the hand-written parsers lack.

The reader builds the model's shapes with transformers on torch's meta device, so it lives with
the other torch code (hwadvisor/trials/meta_model.py); the workload package may not import it.
The pipeline hands it over with `use()` before it builds a workload, so `recommend` and
`estimate` on a known family never import transformers or torch (the fast path).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hwadvisor.models.workload import ModelSpec

Reader = Callable[[dict[str, Any], str], ModelSpec]

_READER: list[Reader] = []


def use(reader: Reader | None) -> None:
    """Install the generic reader (None removes it: only the hand-written parsers remain)."""
    _READER.clear()
    if reader is not None:
        _READER.append(reader)


def reader() -> Reader | None:
    """Return the installed generic reader, or None."""
    return _READER[0] if _READER else None
