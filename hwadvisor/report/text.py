"""Text read from files or devices, made safe to print on one line."""

from __future__ import annotations

SHOWN = 120  # characters of foreign text (a key, a version, a name) a message quotes at most


def one_line(text: object, limit: int = SHOWN) -> str:
    """Return text with control characters escaped (no newline or terminal escape), cut."""
    value = str(text)
    safe = "".join(c if c.isprintable() else repr(c)[1:-1] for c in value[: limit + 1])
    return safe if len(safe) <= limit else safe[: max(limit - 3, 0)] + "..."
