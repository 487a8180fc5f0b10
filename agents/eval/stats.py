"""Intervals for reported rates: a figure without its interval is not a finding."""

from __future__ import annotations

import math

__all__ = ["wilson_interval", "t_interval", "paired_bootstrap"]

# Two-sided 95% quantiles of Student's t by degrees of freedom (t(2) = 4.30: three seeds are not three hundred
# episodes); above 30 the normal 1.96 is within 4%.
_T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
        12: 2.179, 15: 2.131, 20: 2.086, 25: 2.060, 30: 2.042}  # fmt: skip


def wilson_interval(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval of a binomial rate (95% for ``z=1.96``); (0, 1) when ``n == 0``."""
    if n <= 0:
        return 0.0, 1.0
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def t_interval(values: list[float]) -> tuple[float, float]:
    """The 95% Student-t interval of a mean over few values (e.g. one success rate per seed: t(2) = 4.30 for
    three seeds); the point itself for one value."""
    n = len(values)
    if n == 0:
        return 0.0, 0.0
    mean = sum(values) / n
    if n == 1:
        return mean, mean
    df = n - 1
    t = _T95[max(k for k in _T95 if k <= df)] if df <= 30 else 1.96
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / df)
    return mean - t * sd / math.sqrt(n), mean + t * sd / math.sqrt(n)


def paired_bootstrap(diffs: list[float], resamples: int = 10_000, seed: int = 0) -> dict[str, object]:
    """The mean of per-task paired differences (arm - start on the same task) with a 95% percentile bootstrap
    interval over tasks, and the tasks won (> 0) and lost (< 0): the primary figure of an arm against its
    start. Deterministic for a given ``seed``."""
    import numpy as np

    if not diffs:
        return {"mean": None, "ci95": [None, None], "won": 0, "lost": 0, "tasks": 0}
    values = np.asarray(diffs, dtype=float)
    boot = np.random.default_rng(seed).choice(values, size=(resamples, len(values))).mean(axis=1)
    return {
        "mean": float(values.mean()),
        "ci95": [float(np.quantile(boot, 0.025)), float(np.quantile(boot, 0.975))],
        "won": int((values > 0).sum()),
        "lost": int((values < 0).sum()),
        "tasks": len(values),
    }
