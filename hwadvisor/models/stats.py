"""Confidence intervals for measured ratios and rates: plain Python, no numpy or scipy.

Paired A/B timings give one ratio per pair (time A / time B). Timing noise is multiplicative, so
the interval is taken on the log-ratios: a Student-t interval of their mean, exponentiated. The
centre is then the geometric mean of the ratios, and an interval of [0.95 r, 1.05 r] reads as
"±5%". Independent estimates (one per shape) combine into the interval of their geometric mean
with Welch-Satterthwaite degrees of freedom; two independent estimates divide into the interval
of their quotient the same way.

A single variant's rate (GB/s, TFLOP/s) comes from its median time; its interval is the
distribution-free one of the median (order statistics of the binomial), which needs no
normality and always contains the median.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

CONFIDENCE = 0.95
Z_975 = 1.959963984540054  # the standard normal's 97.5% quantile

# Student t, 97.5% quantiles for 1..30 degrees of freedom (any statistics table, e.g. NIST
# e-Handbook 1.3.6.7.2); beyond 30 the Cornish-Fisher expansion below is within 1e-4.
_T_975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)


def t_975(df: float) -> float:
    """Return the 97.5% quantile of Student's t with df degrees of freedom (two-sided 95%)."""
    if df < 1:
        return math.inf
    if df <= len(_T_975):
        low = int(math.floor(df))
        if low == df or low >= len(_T_975):
            return _T_975[low - 1]
        # linear in 1/df between table rows (Welch's df is fractional)
        a, b = _T_975[low - 1], _T_975[low]
        w = (1 / low - 1 / df) / (1 / low - 1 / (low + 1))
        return a + w * (b - a)
    z = Z_975
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


@dataclass(frozen=True)
class LogEstimate:
    """An estimate held in log space: mean of logs, its standard error, degrees of freedom, n."""

    mean: float
    se: float
    df: float
    n: int

    @property
    def value(self) -> float:
        """The estimate itself (exp of the mean of logs: a geometric mean)."""
        return math.exp(self.mean)

    @property
    def halfwidth(self) -> float:
        """Half the 95% interval's width, in log space (inf without degrees of freedom)."""
        return t_975(self.df) * self.se if self.df >= 1 else math.inf

    @property
    def ci(self) -> tuple[float, float] | None:
        """The 95% interval [low, high] of the estimate; None without degrees of freedom."""
        h = self.halfwidth
        if not math.isfinite(h):
            return None
        return math.exp(self.mean - h), math.exp(self.mean + h)

    @property
    def relative_halfwidth(self) -> float:
        """exp(halfwidth) - 1: 0.05 means the interval is about ±5% of the estimate."""
        h = self.halfwidth
        return math.expm1(h) if math.isfinite(h) else math.inf

    def inverse(self) -> LogEstimate:
        """Return the estimate of 1 / x (time factor from a speedup): the interval flips."""
        return LogEstimate(-self.mean, self.se, self.df, self.n)


def log_estimate(values: list[float]) -> LogEstimate | None:
    """Return the t-based estimate of the geometric mean of positive values (None if none)."""
    logs = [math.log(v) for v in values if v > 0 and math.isfinite(v)]
    if not logs:
        return None
    n = len(logs)
    mean = statistics.fmean(logs)
    if n < 2:
        return LogEstimate(mean, math.inf, 0, n)
    sd = statistics.stdev(logs)
    return LogEstimate(mean, sd / math.sqrt(n), n - 1, n)


def ratio_estimate(a: list[float], b: list[float]) -> LogEstimate | None:
    """Return the estimate of a / b from paired samples (a[i] with b[i]): time A over time B."""
    return log_estimate([x / y for x, y in zip(a, b, strict=False) if y > 0])


def _welch_df(parts: list[tuple[float, float]]) -> float:
    """Welch-Satterthwaite degrees of freedom of a sum of variances (variance, df) pairs."""
    total = sum(v for v, _ in parts)
    denom = sum(v * v / df for v, df in parts if df >= 1)
    if total == 0.0:
        return float(min((df for _, df in parts), default=0))
    return total * total / denom if denom > 0 else 0.0


def geomean_estimate(estimates: list[LogEstimate]) -> LogEstimate | None:
    """Return the estimate of the geometric mean of independent estimates (e.g. one per shape)."""
    parts = [p for p in estimates if p is not None]
    if not parts:
        return None
    k = len(parts)
    mean = sum(p.mean for p in parts) / k
    if any(not math.isfinite(p.se) for p in parts):
        return LogEstimate(mean, math.inf, 0, sum(p.n for p in parts))
    variances = [(p.se**2 / k**2, p.df) for p in parts]
    se = math.sqrt(sum(v for v, _ in variances))
    return LogEstimate(mean, se, _welch_df(variances), sum(p.n for p in parts))


def quotient_estimate(top: LogEstimate, bottom: LogEstimate) -> LogEstimate:
    """Return the estimate of top / bottom for two independent estimates (bf16 / tf32)."""
    if not (math.isfinite(top.se) and math.isfinite(bottom.se)):
        return LogEstimate(top.mean - bottom.mean, math.inf, 0, min(top.n, bottom.n))
    variances = [(top.se**2, top.df), (bottom.se**2, bottom.df)]
    se = math.sqrt(top.se**2 + bottom.se**2)
    return LogEstimate(top.mean - bottom.mean, se, _welch_df(variances), min(top.n, bottom.n))


def from_interval(value: float, ci: tuple[float, float] | list[float] | None,
                  n: int | None) -> LogEstimate:
    """Rebuild a log-space estimate from a value and its 95% interval (as stored in a report).

    The interval's half-width in log space is read as t * se with normal quantiles, so the
    rebuilt estimate is slightly conservative for small n when it is combined again.
    """
    count = n or 1
    if ci is None or value <= 0 or ci[0] <= 0 or ci[1] <= 0:
        return LogEstimate(math.log(value) if value > 0 else 0.0, math.inf, 0, count)
    half = (math.log(ci[1]) - math.log(ci[0])) / 2
    df = max(1, count - 1)
    return LogEstimate(math.log(value), half / t_975(df), df, count)


def median_interval(samples: list[float]) -> tuple[float, float] | None:
    """Return the distribution-free 95% interval of the median; None under 6 samples.

    [x_(j), x_(n-j+1)] with the largest j whose binomial(n, 1/2) coverage is still >= 95%
    (for n = 6 that is the range, 96.9%).
    """
    n = len(samples)
    if n < 6:
        return None
    xs = sorted(samples)
    best = None
    for j in range(1, n // 2 + 1):
        # P(j <= X <= n - j) for X ~ Binomial(n, 1/2): the interval's coverage
        tail = sum(math.comb(n, i) for i in range(j)) / 2**n
        if 1 - 2 * tail >= CONFIDENCE:
            best = j
        else:
            break
    if best is None:
        return None
    return xs[best - 1], xs[n - best]
