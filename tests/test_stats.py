"""harness.stats: the one geomean and speedup every layer uses."""

from __future__ import annotations

import math

from harness.stats import geomean, speedup


def test_geomean_of_ratios_is_symmetric():
    assert math.isclose(geomean([2.0, 0.5]), 1.0)
    assert math.isclose(geomean([1.25, 26 / 30, 1.44 / 1.5]), (1.25 * 26 / 30 * 1.44 / 1.5) ** (1 / 3))


def test_geomean_leaves_out_what_has_no_speedup():
    assert math.isclose(geomean([4.0, None, 0.0, -1.0, math.inf, math.nan, 1.0]), 2.0)
    assert geomean([]) is None and geomean([None, 0, math.nan]) is None
    assert math.isclose(geomean(x for x in (8.0, 2.0)), 4.0)   # any iterable


def test_geomean_is_the_same_float_as_the_log_mean():
    xs = [1.0371, 0.9123, 2.5, 1.0000001, 0.33]
    assert geomean(xs) == math.exp(sum(math.log(x) for x in xs) / len(xs))


def test_speedup_is_baseline_over_candidate():
    assert speedup(3.0, 1.5) == 2.0
    assert speedup(1.0, 2.0) == 0.5
    for base, cand in ((None, 1.0), (1.0, None), (0.0, 1.0), (1.0, 0.0), (-1.0, 1.0), (1.0, -2.0)):
        assert speedup(base, cand) is None
