"""Otsu's threshold against small distributions checked by hand (see the comments)."""

from __future__ import annotations

import math
import random

import pytest

from harness.profiling.otsu import otsu_split, otsu_threshold


def test_two_clusters():
    # cuts: after 2 -> (1/3)(2/3)(1.5-9)^2 = 12.5; after 3 -> (1/2)(1/2)(2-11)^2 = 20.25; after 10 -> 12.5
    t, var = otsu_split([1, 2, 3, 10, 11, 12])
    assert t == 6.5
    assert var == pytest.approx(20.25)


def test_three_values():
    # after 1: (1/3)(2/3)(1-5.5)^2 = 4.5; after 2: (2/3)(1/3)(1.5-9)^2 = 12.5  -> cut between 2 and 9
    assert otsu_threshold([9, 1, 2]) == 5.5


def test_repeated_values_are_never_split():
    assert otsu_threshold([0, 0, 0, 1]) == 0.5
    assert otsu_threshold([3, 3, 3, 3], default=-1) == -1


def test_tie_goes_to_the_lowest_cut():
    # [0,1,2]: both cuts give (1/3)(2/3)(1.5)^2 = 0.5
    assert otsu_threshold([0, 1, 2]) == 0.5


def test_weights_move_the_cut():
    # weights [1,1,4]: after 0 -> (1/6)(5/6)(1.8)^2 = 0.45; after 1 -> (1/3)(2/3)(1.5)^2 = 0.5
    assert otsu_threshold([0, 1, 2], weights=[1, 1, 4]) == 1.5
    # weights [4,1,1]: after 0 -> (2/3)(1/3)(1.5)^2 = 0.5; after 1 -> (5/6)(1/6)(1.8)^2 = 0.45
    assert otsu_threshold([0, 1, 2], weights=[4, 1, 1]) == 0.5
    with pytest.raises(ValueError):
        otsu_threshold([1, 2], weights=[1])


def test_degenerate_inputs():
    assert otsu_split([]) is None
    assert otsu_split([5.0]) is None
    assert otsu_threshold([float("nan"), 1.0, float("inf")], default=7.0) == 7.0
    assert otsu_threshold([float("nan"), 1.0, 3.0]) == 2.0


def _brute(values):
    xs = sorted(set(values))
    best = None
    n = len(values)
    for i in range(len(xs) - 1):
        lo = [v for v in values if v <= xs[i]]
        hi = [v for v in values if v > xs[i]]
        w0, w1 = len(lo) / n, len(hi) / n
        var = w0 * w1 * (sum(lo) / len(lo) - sum(hi) / len(hi)) ** 2
        if best is None or var > best[1] + 1e-12:
            best = ((xs[i] + xs[i + 1]) / 2, var)
    return best


def test_matches_brute_force_on_random_bimodal_samples():
    rng = random.Random(3)
    for _ in range(20):
        vals = [round(rng.gauss(20, 5), 2) for _ in range(40)] + [round(rng.gauss(70, 8), 2) for _ in range(25)]
        t, var = otsu_split(vals)
        bt, bvar = _brute(vals)
        assert t == pytest.approx(bt)
        assert var == pytest.approx(bvar)
        assert 20 < t < 70
        assert math.isfinite(t)
