"""One family of formatters for the quantities hwadvisor prints: bytes, bandwidth, FLOP/s, time.

Every command, report and rule text formats through these, so a quantity reads the same
everywhere ("16.1 GB", "4,150 GB/s", "3.42 ms"). Unknown values (None) read as `missing`.
Decimal units, as datasheets and model cards count them (1 GB = 10^9 bytes).
"""

from __future__ import annotations

import math

GB = 1e9
UNKNOWN = "unknown"


def _finite(value: float | int | None) -> bool:
    return value is not None and not isinstance(value, bool) and math.isfinite(value)


# SI prefixes from the largest down: a size is shown in the largest unit it reaches.
_SIZES = (("PB", 1e15), ("TB", 1e12), ("GB", GB), ("MB", 1e6), ("kB", 1e3))


def gb(value: float | int | None, missing: str = UNKNOWN) -> str:
    """Bytes in the unit their size calls for (decimal): '16.1 GB', '750 MB', '82.7 PB'.

    Gigabytes keep one decimal place (the unit people compare memory in); a size under 1 GB
    reads in MB, one over 1,000 GB in TB or PB, so no figure reads '82673423.8 GB'.
    """
    if not _finite(value):
        return missing
    assert value is not None
    if value == 0:
        return "0 GB"
    for unit, scale in _SIZES:
        if abs(value) >= scale * (0.9995 if unit != "GB" else 1.0):
            shown = value / scale
            if unit == "GB":
                return f"{shown:.1f} GB"
            return f"{shown:.3g} {unit}" if abs(shown) < 100 else f"{shown:,.0f} {unit}"
    return f"{value:.0f} B"


def seconds(value: float | None, missing: str = UNKNOWN) -> str:
    """Seconds as '1.20 s', '3.42 ms' or '85 µs'."""
    if not _finite(value):
        return missing
    assert value is not None
    if abs(value) >= 1.0:
        return f"{value:.2f} s"
    if abs(value) >= 1e-3:
        return f"{value * 1e3:.2f} ms"
    return f"{value * 1e6:.0f} µs"


def gbps(value: float | None, missing: str = UNKNOWN) -> str:
    """Bandwidth as '4,150 GB/s' (or '25.6 GB/s' below 100)."""
    return rate(value, "GB/s", missing)


def tflops(value: float | None, missing: str = UNKNOWN) -> str:
    """Compute rate as '782 TFLOP/s' (or '4.5 TFLOP/s' below 100)."""
    return rate(value, "TFLOP/s", missing)


def rate(value: float | None, unit: str = "tokens/s", missing: str = UNKNOWN) -> str:
    """Format a rate as '12,340 tokens/s' (three significant digits below 100)."""
    if not _finite(value):
        return missing
    assert value is not None
    return f"{value:,.0f} {unit}" if abs(value) >= 100 else f"{value:.3g} {unit}"


def ratio(value: float | None, missing: str = UNKNOWN) -> str:
    """Format a factor as '2.1×' (two significant digits under 10, '380×' above)."""
    if not _finite(value):
        return missing
    assert value is not None
    if abs(value) < 10:
        return f"{value:.2g}×"
    return f"{value:,.0f}×"


def same_ratio(value: float | None) -> bool:
    """Tell whether a factor prints as '1×' (too close to 1 to be worth saying)."""
    return _finite(value) and ratio(value) == "1×"


def percent(value: float | None, missing: str = UNKNOWN, signed: bool = False) -> str:
    """Format a fraction as '37%' (or '+37%' / '−12%' when signed)."""
    if not _finite(value):
        return missing
    assert value is not None
    if not signed:
        return f"{value:.0%}"
    pct = value * 100
    return f"{'+' if pct >= 0 else '−'}{abs(pct):.0f}%"


def number(value: float | int | None, digits: int = 3, missing: str = UNKNOWN) -> str:
    """Format a number: integers with thousands separators, floats to `digits` digits."""
    if value is None or isinstance(value, bool):
        return missing
    if isinstance(value, int):
        return f"{value:,}"
    if not math.isfinite(value):
        return missing
    if abs(value) >= 10 ** digits:
        return f"{value:,.0f}"
    return f"{value:.{digits}g}"


def quantity(value: float | None, unit: str, missing: str = UNKNOWN) -> str:
    """Format a value in its unit: 's', 'bytes', 'GB/s', 'TFLOP/s', 'x', else a rate."""
    formatters = {"s": seconds, "bytes": gb, "GB/s": gbps, "TFLOP/s": tflops, "x": ratio}
    if unit in formatters:
        return formatters[unit](value, missing)
    if not unit:
        return number(value, 3, missing)
    return rate(value, unit, missing)


def ms(value: float | None, missing: str = UNKNOWN) -> str:
    """Seconds said in milliseconds, as latency targets are: '1,000 ms', '86 ms', '9.7 ms'."""
    if not _finite(value):
        return missing
    assert value is not None
    shown = value * 1e3
    return f"{shown:,.0f} ms" if abs(shown) >= 10 else f"{shown:.2g} ms"
