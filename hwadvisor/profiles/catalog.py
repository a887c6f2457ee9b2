"""The catalog: the datasheet files in the repo's profiles/ folder, read, checked and looked up.

The files ship inside the wheel as the package ``hwadvisor.profiles_data``; a plain checkout
reads them from profiles/ at the top of the repository.
"""

from __future__ import annotations

import difflib
import functools
import sys
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from hwadvisor.errors import UserError
from hwadvisor.models import DeviceClass
from hwadvisor.profiles.schema import Profile

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib


# No profile id is longer; a longer one is not looked up as a file (names over 255 bytes fail
# with ENAMETOOLONG on Linux file systems).
MAX_ID_CHARS = 100


def _profile_file(file_name: str) -> bytes | None:
    """Read one profile file (package data, else the repo's profiles/); None if absent."""
    try:
        entry: Any = resources.files("hwadvisor.profiles_data").joinpath(file_name)
        if entry.is_file():
            return bytes(entry.read_bytes())
    except (ModuleNotFoundError, FileNotFoundError, NotADirectoryError):
        pass
    path = Path(__file__).resolve().parents[2] / "profiles" / file_name
    return path.read_bytes() if path.is_file() else None


@functools.cache
def _load_one(profile_id: str) -> Profile | None:
    """Parse the profile in `<id>.toml` alone; None when there is no such file.

    `recommend --device h200-sxm` reads one file, not all of them (load_all, which also checks
    ids across files, reads the rest when asked).
    """
    if not profile_id.replace("-", "").replace("_", "").isalnum() \
            or len(profile_id) > MAX_ID_CHARS:
        return None  # not a file name: never a path (nor one the file system refuses)
    data = _profile_file(f"{profile_id}.toml")
    return None if data is None else parse_profile(f"{profile_id}.toml", data)


def _profile_files() -> list[tuple[str, bytes]]:
    """(file name, bytes) of every profile: package data first, else the repo's profiles/."""
    try:
        root: Any = resources.files("hwadvisor.profiles_data")
        files = [(entry.name, entry.read_bytes()) for entry in root.iterdir()
                 if entry.name.endswith(".toml")]
        if files:
            return sorted(files)
    except (ModuleNotFoundError, FileNotFoundError, NotADirectoryError):
        pass
    # A plain checkout run without installing: profiles/ sits next to the package.
    repo_dir = Path(__file__).resolve().parents[2] / "profiles"
    return sorted((path.name, path.read_bytes()) for path in repo_dir.glob("*.toml"))


def parse_profile(file_name: str, data: bytes) -> Profile:
    """Parse and validate one profile file; the file name must be `<id>.toml`."""
    try:
        profile = Profile.model_validate(tomllib.loads(data.decode("utf-8")))
    except (tomllib.TOMLDecodeError, ValidationError, UnicodeDecodeError) as exc:
        raise ValueError(f"profile {file_name} is invalid: {exc}") from exc
    if file_name != f"{profile.id}.toml":
        raise ValueError(
            f"profile {file_name} has id {profile.id!r}; name the file {profile.id}.toml"
        )
    if profile.variant_of is not None or profile.variant_name is not None:
        raise ValueError(f"profile {file_name}: variant_of/variant_name are set by hwadvisor only")
    return profile


@functools.lru_cache(maxsize=1)
def load_all() -> tuple[Profile, ...]:
    """Every shipped profile, sorted by id (read once, cached)."""
    profiles = [parse_profile(name, data) for name, data in _profile_files()]
    ids = [p.id for p in profiles] + [v.id for p in profiles for v in p.variants]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise ValueError(f"duplicate profile or variant ids: {duplicates}")
    return tuple(sorted(profiles, key=lambda p: p.id))


def ids() -> list[str]:
    """Return the ids of every profile file, sorted (variant ids: variant_ids())."""
    return [p.id for p in load_all()]


def variant_ids() -> list[str]:
    """Return the ids of every configuration listed under a profile's [[variants]], sorted."""
    return sorted(v.id for p in load_all() for v in p.variants)


def suggest(text: str, limit: int = 3) -> list[str]:
    """Known ids close to text: ids containing it first ('h200' -> h200-sxm), then difflib's."""
    wanted = text.strip().lower()
    known = ids() + variant_ids()
    containing = [i for i in known if wanted and wanted in i]
    similar = difflib.get_close_matches(wanted, known, n=limit, cutoff=0.4)
    return list(dict.fromkeys([*containing, *similar]))[:limit]


def get(profile_id: str) -> Profile:
    """Return the profile with this id, or a variant id resolved to that configuration.

    `m3-max` is the top configuration; `m3-max-30c` is the same profile with the 30-core GPU
    variant's figures. An unknown id is a UserError (exit 2) naming close ids.
    """
    wanted = profile_id.strip().lower()
    found = _load_one(wanted) if load_all.cache_info().currsize == 0 else None
    if found is not None:
        return found
    for profile in load_all():
        if profile.id == wanted:
            return profile
    for profile in load_all():
        variant = profile.variant(wanted)
        if variant is not None and variant.id == wanted:
            return profile.for_variant(variant)
    close = suggest(wanted)
    hint = f"did you mean {', '.join(close)}? " if close else ""
    raise UserError(
        f"no device profile {profile_id!r}",
        hint=hint + "run 'hwadvisor profiles list' for the known ids",
    )


def by_class(device_class: DeviceClass | str | None) -> list[Profile]:
    """Return the profiles of one device class (all when None)."""
    if device_class is None:
        return list(load_all())
    wanted = DeviceClass(device_class).value
    return [p for p in load_all() if p.device_class.value == wanted]
