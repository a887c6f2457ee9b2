"""Reading reports of other schema versions (rules in docs/schema-versioning.md).

- another MAJOR is refused with a message that names both versions;
- an older MINOR of the same major is read as is (keys added since then take their defaults);
- a newer MINOR may carry keys this version does not know; the models forbid extra keys (so a
  typo never passes silently), so those keys are dropped here, and each drop is reported.
Computed fields (a measurement's median, spread, noisy) are written to JSON for readers but are
derived, not input: they are always dropped before validation and recomputed from the samples.
"""

from __future__ import annotations

import re
import types
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from hwadvisor.errors import UserError
from hwadvisor.models import SCHEMA_VERSION, Report
from hwadvisor.report.text import one_line

# ASCII digits only: str.isdigit() also accepts '²' and other digits int() refuses.
_VERSION = re.compile(r"(\d{1,9})\.(\d{1,9})", re.ASCII)


def parse_version(version: object) -> tuple[int, int] | None:
    """Split 'MAJOR.MINOR' into two ints; None when it is not of that form."""
    if not isinstance(version, (str, int, float)) or isinstance(version, bool):
        return None
    match = _VERSION.fullmatch(str(version).strip())
    if match is None:
        return None
    return int(match.group(1)), int(match.group(2))


_RESOLVED: dict[tuple[int, str], tuple[Any, Any]] = {}  # (id(annotation), what) -> (it, answer)


def _cached(annotation: Any, what: str, compute: Any) -> Any:
    """Memoise an answer about an annotation (they live as long as their model classes)."""
    key = (id(annotation), what)
    hit = _RESOLVED.get(key)
    if hit is not None and hit[0] is annotation:
        return hit[1]
    answer = compute()
    _RESOLVED[key] = (annotation, answer)
    return answer


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """Return the one pydantic model an annotation refers to (through Optional/Union), if any."""
    return _cached(annotation, "model", lambda: _find_model(annotation))  # type: ignore[no-any-return]


def _find_model(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _model_in(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        found = [m for m in (_model_in(a) for a in typing.get_args(annotation)) if m is not None]
        return found[0] if len(found) == 1 else None
    return None


def _legacy_inputs(model: type[BaseModel]) -> frozenset[str]:
    """Return the computed fields a model still reads as input (older reports held only them)."""
    return frozenset(getattr(model, "LEGACY_INPUTS", frozenset()))


def _item_annotation(annotation: Any, container: type) -> Any:
    """Return the element annotation of list[X] / dict[str, X] (through Optional), if any."""
    return _cached(annotation, container.__name__,
                   lambda: _find_item(annotation, container))


def _find_item(annotation: Any, container: type) -> Any:
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            inner = _item_annotation(arg, container)
            if inner is not None:
                return inner
        return None
    if origin is container:
        args = typing.get_args(annotation)
        return args[-1] if args else None
    return None


def _where(path: str, key: object) -> str:
    """Where a key sits, for notes: 'devices[0].name', cut at 80 characters (a hostile file)."""
    if len(path) >= 80:
        return path
    where = f"{path}.{key}" if path else str(key)
    return where if len(where) <= 80 else where[:77] + "..."


def _clean(value: Any, annotation: Any, drop_unknown: bool, path: str, dropped: list[str]) -> Any:
    """Walk value along annotation: drop computed fields and (when asked) unknown keys."""
    if not isinstance(value, (dict, list)):
        return value  # a leaf: nothing to drop below it
    model = _model_in(annotation)
    if model is not None and isinstance(value, dict):
        out: dict[str, Any] = {}
        computed, legacy = model.model_computed_fields, _legacy_inputs(model)
        for key, item in value.items():
            if key in computed and key not in legacy:
                continue  # derived on load; never input
            field = model.model_fields.get(key)
            if field is None:
                if drop_unknown:
                    dropped.append(_where(path, key))
                    continue
                out[key] = item  # left for validation to refuse with its own message
                continue
            out[key] = _clean(item, field.annotation, drop_unknown, _where(path, key), dropped)
        return out
    if isinstance(value, list):
        inner = _item_annotation(annotation, list)
        if inner is not None:
            return [_clean(v, inner, drop_unknown, path if len(path) >= 80 else f"{path}[{i}]",
                           dropped) for i, v in enumerate(value)]
    if isinstance(value, dict):
        inner = _item_annotation(annotation, dict)
        if inner is not None:
            return {k: _clean(v, inner, drop_unknown, _where(path, k), dropped)
                    for k, v in value.items()}
    return value


def upgrade_with_notes(data: dict[str, Any], path: Path) -> tuple[dict[str, Any], list[str]]:
    """Return data this version's models can validate, plus notes on what was dropped.

    Raises a UserError for another major version or an unreadable schema_version.
    """
    theirs_text = one_line(data.get("schema_version"), 40)
    theirs = parse_version(data.get("schema_version"))
    ours = parse_version(SCHEMA_VERSION)
    assert ours is not None, "SCHEMA_VERSION must be MAJOR.MINOR"
    if theirs is None:
        raise UserError(
            f"{path} has schema_version {theirs_text!r}, not of the form MAJOR.MINOR",
            hint="pass a report written by hwadvisor --output",
        )
    if theirs[0] != ours[0]:
        direction = "newer" if theirs[0] > ours[0] else "older"
        raise UserError(
            f"{path} has schema version {theirs_text} ({direction} major); "
            f"this hwadvisor reads {ours[0]}.x reports (its own is {SCHEMA_VERSION})",
            hint=("regenerate the report with this hwadvisor version, or use an hwadvisor "
                  f"that writes {theirs[0]}.x (docs/schema-versioning.md)"),
        )
    newer_minor = theirs[1] > ours[1]
    if not newer_minor:
        # Nothing to drop: the computed fields (median, spread, noisy; effect) are dropped by
        # their models' own before-validators, which every read goes through anyway.
        return data, []
    dropped: list[str] = []
    cleaned = _clean(data, Report, newer_minor, "", dropped)
    notes: list[str] = []
    if dropped:
        notes.append(
            f"{path.name}: schema {theirs_text} is newer than this reader's {SCHEMA_VERSION}; "
            f"ignored {len(dropped)} key(s) it does not know: {', '.join(dropped[:8])}"
            + (" ..." if len(dropped) > 8 else "")
        )
    return cleaned, notes

