"""Intervals for reported rates: a figure without its interval is not a finding."""

from __future__ import annotations

import math

__all__ = ["wilson_interval", "mean_interval"]


def wilson_interval(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval of a binomial rate (95% for ``z=1.96``); (0, 1) when ``n == 0``."""
    if n <= 0:
        return 0.0, 1.0
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def mean_interval(values: list[float], z: float = 1.96) -> tuple[float, float]:
    """A normal-approximation interval of a mean (e.g. over seeds); the point itself for one value."""
    n = len(values)
    if n == 0:
        return 0.0, 0.0
    mean = sum(values) / n
    if n == 1:
        return mean, mean
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    return mean - z * sd / math.sqrt(n), mean + z * sd / math.sqrt(n)
