"""Write each profile's performance family into its file, once, from the name-based guess.

The efficiency tables (perfmodel/efficiency.py) are keyed by a family ("nvidia-hopper",
"apple-max" ...); models/hardware.py guess_family guesses one from a device's name. Profiles
now state theirs (`family = ...` after `device_class`); this script wrote the first values
from the guess the model used before, so plans stayed the same.
Run it again only for a profile file that lacks the key: one that has it is left alone.

    python scripts/profile_families.py          # add the key where it is missing
    python scripts/profile_families.py --check  # exit 1 when a file lacks it
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import tomllib

from hwadvisor.models.hardware import guess_family

PROFILES = Path(__file__).resolve().parents[1] / "profiles"


def family_of(data: dict[str, object]) -> str:
    """Return the guessed family of a profile file's top-level figures."""
    return guess_family(str(data["vendor"]), str(data["device_class"]),
                        str(data.get("architecture") or ""), str(data["name"]),
                        str(data.get("memory_type") or ""))


def main(argv: list[str]) -> int:
    """Add `family` to every profile file without one (or, with --check, list them)."""
    missing = []
    for path in sorted(PROFILES.glob("*.toml")):
        text = path.read_text(encoding="utf-8")
        data = tomllib.loads(text)
        if "family" in data:
            continue
        missing.append(path.name)
        if "--check" in argv:
            continue
        line = f'family = "{family_of(data)}"\n'
        text = re.sub(r"^(device_class = .*\n)", r"\g<1>" + line, text, count=1, flags=re.M)
        path.write_text(text, encoding="utf-8")
    if "--check" in argv and missing:
        print("no family in: " + ", ".join(missing))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
