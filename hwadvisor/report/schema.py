"""The report's JSON Schema, generated from the models (committed as docs/report.schema.json)."""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

from hwadvisor.models import SCHEMA_VERSION, Report

# A URN, not a URL: the schema is not served anywhere; the committed file is the reference.
SCHEMA_ID_BASE = "urn:hwadvisor:schema:report"
SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


def report_schema() -> dict[str, Any]:
    """Build the JSON Schema of a report as written (serialization mode: computed fields in)."""
    body = Report.model_json_schema(mode="serialization")
    # Header keys first, so a reader of the committed file sees what it is and which version.
    schema: dict[str, Any] = {
        "$schema": SCHEMA_DIALECT,
        "$id": f"{SCHEMA_ID_BASE}:{SCHEMA_VERSION}",
        "title": "hwadvisor report",
        "x-schema-version": SCHEMA_VERSION,
    }
    body.pop("title", None)
    schema.update(body)
    schema["description"] = (
        f"{body.get('description', '').strip()} Schema version {SCHEMA_VERSION}: "
        "MAJOR.MINOR, see docs/schema-versioning.md."
    ).strip()
    return schema


@lru_cache(maxsize=1)
def schema_json() -> str:
    """Render the schema as indented JSON text (key order is pydantic's, which is stable).

    Built once per process: the models do not change while it runs (~70 ms to generate).
    """
    return json.dumps(report_schema(), indent=2, ensure_ascii=False) + "\n"
