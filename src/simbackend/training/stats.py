"""Confidence intervals over seeds: Student's t, with no dependency beyond the standard library.

The interval of a mean over ``n`` per-seed values is ``mean +- t * s / sqrt(n)``, ``s`` the sample
standard deviation (``n - 1`` in the denominator) and ``t`` the two-sided critical value of Student's t
with ``n - 1`` degrees of freedom (``t = 4.303`` for 3 seeds at 95 %). With one seed there is no
interval (``NaN``). The t distribution's two-sided probability ``P(|T| <= t)`` has a closed form for
integer degrees of freedom (Abramowitz & Stegun 26.7.3-4); the critical value is found by bisection.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from simbackend import checks
from simbackend.errors import InvalidArgumentError

__all__ = ["Estimate", "estimate", "t_critical", "t_two_sided_probability"]


def t_two_sided_probability(t: float, df: int) -> float:
    """``P(|T| <= t)`` for Student's t with integer ``df >= 1`` degrees of freedom."""
    df = checks.integer(df, "df", minimum=1)
    if t <= 0:
        return 0.0
    theta = math.atan(t / math.sqrt(df))
    c2 = math.cos(theta) ** 2
    if df % 2 == 1:  # 2/pi * (theta + sin cos (1 + 2/3 cos^2 + 2*4/(3*5) cos^4 + ...)), df - 2 terms in the sum
        total, term = 0.0, 1.0
        for k in range(1, (df - 1) // 2 + 1):
            total += term
            term *= (2 * k) / (2 * k + 1) * c2
        series = math.sin(theta) * math.cos(theta) * total if df > 1 else 0.0
        return 2.0 / math.pi * (theta + series)
    total, term = 0.0, 1.0  # sin (1 + 1/2 cos^2 + 1*3/(2*4) cos^4 + ...)
    for k in range(1, df // 2 + 1):
        total += term
        term *= (2 * k - 1) / (2 * k) * c2
    return math.sin(theta) * total


def t_critical(df: int, confidence: float = 0.95) -> float:
    """The two-sided critical value ``t`` with ``P(|T| <= t) = confidence``, ``df`` degrees of freedom."""
    if not (0.0 < confidence < 1.0):
        raise InvalidArgumentError(f"confidence: expected a number in (0, 1), got {confidence!r}")
    lo, hi = 0.0, 1.0
    while t_two_sided_probability(hi, df) < confidence:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if t_two_sided_probability(mid, df) < confidence:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-12 * hi:
            break
    return 0.5 * (lo + hi)


@dataclass(frozen=True)
class Estimate:
    """A mean over ``n`` values with its t-distribution confidence interval.

    Attributes:
        mean: the mean. half_width: ``t * std / sqrt(n)`` (``NaN`` for ``n < 2``).
        low, high: ``mean -+ half_width``. std: sample standard deviation (``NaN`` for ``n < 2``).
        n: number of values. confidence: the interval's level.
    """

    mean: float
    half_width: float
    std: float
    n: int
    confidence: float = 0.95

    @property
    def low(self) -> float:
        return self.mean - self.half_width

    @property
    def high(self) -> float:
        return self.mean + self.half_width

    def to_dict(self) -> dict:
        """JSON-ready (``NaN`` becomes ``None``)."""

        def clean(v: float) -> float | None:
            return None if math.isnan(v) else float(v)

        return {
            "mean": clean(self.mean),
            "ci_low": clean(self.low),
            "ci_high": clean(self.high),
            "half_width": clean(self.half_width),
            "std": clean(self.std),
            "n": self.n,
            "confidence": self.confidence,
        }

    def __str__(self) -> str:
        if math.isnan(self.half_width):
            return f"{self.mean:.4g}"
        return f"{self.mean:.4g} +- {self.half_width:.3g}"


def estimate(values: Iterable[float], confidence: float = 0.95) -> Estimate:
    """The mean of ``values`` with its two-sided ``confidence`` interval (Student's t, ``n - 1`` dof)."""
    xs = [float(v) for v in values]
    n = len(xs)
    if n == 0:
        raise InvalidArgumentError("values: expected at least one value")
    mean = math.fsum(xs) / n
    if n < 2:
        return Estimate(mean, math.nan, math.nan, n, confidence)
    std = math.sqrt(math.fsum((x - mean) ** 2 for x in xs) / (n - 1))
    return Estimate(mean, t_critical(n - 1, confidence) * std / math.sqrt(n), std, n, confidence)
