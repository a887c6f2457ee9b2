"""The generic model reader's counted shapes, kept per config.

Reading a model_type the hand-written parsers lack builds the model on the meta device with
transformers: importing torch and transformers costs ~4 s of CPU and ~370 MB on a 2-core host,
the build itself ~0.2 s. The ModelSpec it yields depends only on the config, the transformers
version and the reader, so it is kept, keyed by those, in memory for the process and as one
small JSON file a config in the cache folder (`$HWADVISOR_CACHE_DIR`, else
`$XDG_CACHE_HOME/hwadvisor`, else `~/.cache/hwadvisor`; an empty HWADVISOR_CACHE_DIR keeps
nothing on disk). A later estimate of the same config reads it back without importing either
library. A file that cannot be read or parsed is ignored and rebuilt, never trusted.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hwadvisor import __version__
from hwadvisor.models.workload import ModelSpec

Reader = Callable[[dict[str, Any], str], ModelSpec]

CACHE_ENV = "HWADVISOR_CACHE_DIR"
# Bump when trials/meta_model.py counts differently: older entries then miss, never mislead.
READER_VERSION = "1"
_MEMORY: dict[str, ModelSpec] = {}


def cache_dir() -> Path | None:
    """Return the folder the counted shapes are kept in (None: kept in memory only)."""
    chosen = os.environ.get(CACHE_ENV)
    if chosen is not None:
        return Path(chosen) / "generic" if chosen.strip() else None
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "hwadvisor" / "generic"


def _transformers_version() -> str | None:
    """Return the installed transformers' version without importing it (None: not there)."""
    from importlib import metadata

    try:
        return metadata.version("transformers")
    except metadata.PackageNotFoundError:
        return None


def cache_key(data: dict[str, Any], transformers_version: str) -> str:
    """Return the key of a config's shapes: the config, transformers and the reader."""
    text = json.dumps([READER_VERSION, __version__, transformers_version, data],
                      sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


def _load(path: Path) -> ModelSpec | None:
    try:
        return ModelSpec.model_validate_json(path.read_bytes())
    except (OSError, ValueError):  # gone, unreadable, or not a spec (pydantic's error is one)
        return None


def _store(path: Path, spec: ModelSpec) -> None:
    from hwadvisor.errors import UserError
    from hwadvisor.report.io import write_text

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text(path, spec.model_dump_json())
    except (OSError, UserError):
        pass  # a read-only home or a full disk: the next estimate builds the shapes again


def cached(reader: Reader) -> Reader:
    """Wrap the generic reader so each config's shapes are built once and then read back."""

    def read(data: dict[str, Any], source: str) -> ModelSpec:
        version = _transformers_version()
        if version is None:
            return reader(data, source)  # it says how to install transformers
        key = cache_key(data, version)
        folder = cache_dir()
        path = folder / f"{key}.json" if folder is not None else None
        spec = _MEMORY.get(key) or (_load(path) if path is not None else None)
        if spec is None:
            spec = reader(data, source)
            if path is not None:
                _store(path, spec)
        _MEMORY[key] = spec
        # what the reader would have said of this source (the shapes are the config's)
        return spec.model_copy(update={
            "name": str(data.get("_name_or_path") or source),
            "source": f"{source} (read from the module tree transformers builds)"})

    return read
