"""Confidence intervals: Student's t over seeds, Wilson's score interval for proportions; standard library only.

The interval of a mean over ``n`` per-seed values is ``mean +- t * s / sqrt(n)``, ``s`` the sample
standard deviation (``n - 1`` in the denominator) and ``t`` the two-sided critical value of Student's t
with ``n - 1`` degrees of freedom (``t = 4.303`` for 3 seeds at 95 %). With one seed there is no
interval (``NaN``). The t distribution's two-sided probability ``P(|T| <= t)`` has a closed form for
integer degrees of freedom (Abramowitz & Stegun 26.7.3-4); the critical value is found by bisection.

A proportion (a success rate: ``k`` successes in ``n`` episodes) gets Wilson's score interval
(:func:`wilson`) instead: it stays within [0, 1], is not empty at 0 or ``n`` successes (where the t
interval of per-seed rates collapses to a point or, elsewhere, reaches below 0 or above 1), and exists
for one episode.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from statistics import NormalDist

from simbackend import checks
from simbackend.errors import InvalidArgumentError

__all__ = ["Estimate", "estimate", "t_critical", "t_two_sided_probability", "wilson"]


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
    """A mean over ``n`` values with its confidence interval.

    Attributes:
        mean: the mean. half_width: half the interval's width: ``t * std / sqrt(n)`` for Student's t
            (``NaN`` for ``n < 2``).
        low, high: the interval: ``mean -+ half_width``, or ``bounds`` where given (Wilson's interval
            is not centred on the mean). std: sample standard deviation (``NaN`` for ``n < 2``).
        n: number of values. confidence: the interval's level.
        bounds: ``(low, high)`` of an interval not centred on the mean; ``None``: ``mean -+ half_width``.
        method: ``"student-t"`` or ``"wilson"``.
    """

    mean: float
    half_width: float
    std: float
    n: int
    confidence: float = 0.95
    bounds: tuple[float, float] | None = None
    method: str = "student-t"

    @property
    def low(self) -> float:
        return self.mean - self.half_width if self.bounds is None else self.bounds[0]

    @property
    def high(self) -> float:
        return self.mean + self.half_width if self.bounds is None else self.bounds[1]

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
            "method": self.method,
        }

    def __str__(self) -> str:
        if math.isnan(self.half_width):
            return f"{self.mean:.4g}"
        if self.bounds is not None:
            return f"{self.mean:.4g} [{self.low:.3g}, {self.high:.3g}]"
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


def wilson(successes: int, trials: int, confidence: float = 0.95) -> Estimate:
    """The proportion ``successes / trials`` with Wilson's score interval (two-sided, ``confidence``).

    With ``z`` the normal quantile, ``p = k / n``: the interval is
    ``(p + z^2/2n -+ z sqrt(p (1 - p) / n + z^2 / 4n^2)) / (1 + z^2 / n)``, always within [0, 1]; at
    ``k = 0`` its low end is 0, at ``k = n`` its high end is 1, and one trial has one too. ``std`` is
    the sample standard deviation of the ``n`` zeros and ones (``NaN`` for one trial).
    """
    n = checks.integer(trials, "trials", minimum=1)
    k = checks.integer(successes, "successes", minimum=0)
    if k > n:
        raise InvalidArgumentError(f"successes: expected at most trials = {n}, got {k}")
    if not (0.0 < confidence < 1.0):
        raise InvalidArgumentError(f"confidence: expected a number in (0, 1), got {confidence!r}")
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    p = k / n
    scale = 1.0 + z * z / n
    centre = (p + z * z / (2 * n)) / scale
    half = z * math.sqrt(p * (1.0 - p) / n + z * z / (4 * n * n)) / scale
    low = 0.0 if k == 0 else max(0.0, centre - half)  # exact at the ends, where rounding could step past
    high = 1.0 if k == n else min(1.0, centre + half)
    std = math.sqrt(p * (1.0 - p) * n / (n - 1)) if n > 1 else math.nan
    return Estimate(p, (high - low) / 2, std, n, confidence, bounds=(low, high), method="wilson")
