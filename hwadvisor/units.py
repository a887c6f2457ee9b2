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


def gb(value: float | int | None, missing: str = UNKNOWN) -> str:
    """Bytes as '16.1 GB' (decimal, one decimal place); below 0.1 GB as '85 MB'."""
    if not _finite(value):
        return missing
    assert value is not None
    if abs(value) < 0.1 * GB and value != 0:
        return f"{value / 1e6:.0f} MB"
    return f"{value / GB:.1f} GB"


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
    """Format a factor as '2.1×' (two significant digits under 10)."""
    if not _finite(value):
        return missing
    assert value is not None
    return f"{value:.2g}×" if abs(value) < 10 else f"{value:.0f}×"


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
    return rate(value, unit, missing)
