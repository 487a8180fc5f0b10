"""The intervals learning figures rest on, on hand-made outcomes: Wilson, t over seeds, paired bootstrap."""

from __future__ import annotations

import math

import pytest

from envace_gym.agents.eval.stats import paired_bootstrap, t_interval, wilson_interval


def test_t_interval_over_three_seeds_uses_t2_not_the_normal_quantile():
    lo, hi = t_interval([0.30, 0.40, 0.50])
    sd = 0.1  # sample standard deviation of the three values
    assert (lo, hi) == pytest.approx((0.40 - 4.303 * sd / math.sqrt(3), 0.40 + 4.303 * sd / math.sqrt(3)))
    assert hi - lo > 2 * 1.96 * sd / math.sqrt(3) * 2  # more than twice as wide as a z interval
    assert t_interval([0.5]) == (0.5, 0.5) and t_interval([]) == (0.0, 0.0)
    many = [i % 2 for i in range(100)]  # past 30 degrees of freedom: the normal quantile
    lo, hi = t_interval(many)
    assert (hi - lo) / 2 == pytest.approx(1.96 * 0.5025 / 10, rel=1e-3)


def test_paired_bootstrap_on_hand_made_differences():
    # 100 tasks: 20 won, 5 lost, 75 unchanged -> +15 points
    diffs = [1.0] * 20 + [-1.0] * 5 + [0.0] * 75
    d = paired_bootstrap(diffs)
    assert d["mean"] == pytest.approx(0.15) and (d["won"], d["lost"], d["tasks"]) == (20, 5, 100)
    lo, hi = d["ci95"]
    assert 0.0 < lo < 0.15 < hi < 0.3  # the interval is above 0
    se = math.sqrt(sum((x - 0.15) ** 2 for x in diffs) / 100 / 100)
    assert (hi - lo) / 2 == pytest.approx(1.96 * se, rel=0.1)  # the percentile interval ~ the normal one here
    assert paired_bootstrap(diffs) == d  # deterministic
    # no change on balance: the interval straddles 0
    lo, hi = paired_bootstrap([1.0] * 10 + [-1.0] * 10 + [0.0] * 80)["ci95"]
    assert lo < 0 < hi
    assert paired_bootstrap([])["mean"] is None


def test_wilson_interval_stays_inside_zero_one():
    assert wilson_interval(0, 10)[0] == 0.0 and wilson_interval(10, 10)[1] == 1.0
    lo, hi = wilson_interval(50, 100)
    assert lo == pytest.approx(0.404, abs=1e-3) and hi == pytest.approx(0.596, abs=1e-3)
