"""Reading reports of other schema versions: same major is read, another major is refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hwadvisor.exitcodes import UserError
from hwadvisor.models import SCHEMA_VERSION


def _major(version: str) -> int:
    try:
        return int(str(version).split(".")[0])
    except ValueError:
        return -1


def upgrade(data: dict[str, Any], path: Path) -> dict[str, Any]:
    """Return data readable by this version's models, or raise a UserError saying why not."""
    theirs = str(data.get("schema_version"))
    if _major(theirs) != _major(SCHEMA_VERSION):
        raise UserError(
            f"{path} has schema version {theirs}; this hwadvisor reads {SCHEMA_VERSION.split('.')[0]}.x",
            hint="regenerate the report with this hwadvisor version (docs/schema-versioning.md)",
        )
    return data
