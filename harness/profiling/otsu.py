"""Otsu's method on a 1-D sample: the cut that maximises between-class variance.

CUDAMaster chooses the thresholds of its hardware filter this way: over the
values a metric takes across a body of profiles, the best two-class split is
the point where ``w0 * w1 * (mu0 - mu1)**2`` is largest.  Implemented exactly
over the sorted sample (every cut between two distinct values is tried, with
prefix sums), not over a histogram, so small hand-checkable samples give the
textbook answer and the result does not depend on a bin count.
"""

from __future__ import annotations

import math
from typing import Iterable, Sequence


def otsu_split(values: Iterable[float], weights: Sequence[float] | None = None) -> tuple[float, float] | None:
    """Return ``(threshold, between_class_variance)`` or None for fewer than two distinct values.

    The threshold is the midpoint between the largest value of the lower class
    and the smallest value of the upper class; the lower class is ``x < threshold``.
    Ties in the objective go to the lowest cut.  Non-finite values are ignored.
    """
    vals = list(values)
    if weights is None:
        pairs = [(float(v), 1.0) for v in vals if v is not None and math.isfinite(float(v))]
    else:
        if len(weights) != len(vals):
            raise ValueError("weights and values differ in length")
        pairs = [(float(v), float(w)) for v, w in zip(vals, weights)
                 if v is not None and math.isfinite(float(v)) and w > 0]
    if not pairs:
        return None
    pairs.sort()
    # merge equal values so a cut never splits them
    xs: list[float] = []
    ws: list[float] = []
    for x, w in pairs:
        if xs and x == xs[-1]:
            ws[-1] += w
        else:
            xs.append(x)
            ws.append(w)
    if len(xs) < 2:
        return None
    total_w = sum(ws)
    total_s = sum(x * w for x, w in zip(xs, ws))
    best: tuple[float, float] | None = None
    w0 = s0 = 0.0
    for i in range(len(xs) - 1):
        w0 += ws[i]
        s0 += xs[i] * ws[i]
        w1 = total_w - w0
        mu0 = s0 / w0
        mu1 = (total_s - s0) / w1
        var_b = (w0 / total_w) * (w1 / total_w) * (mu0 - mu1) ** 2
        if best is None or var_b > best[1] + 1e-12 * max(1.0, abs(best[1])):
            best = ((xs[i] + xs[i + 1]) / 2.0, var_b)
    return best


def otsu_threshold(values: Iterable[float], weights: Sequence[float] | None = None,
                   default: float | None = None) -> float | None:
    """The Otsu threshold of ``values`` (``default`` when there are not two distinct values)."""
    r = otsu_split(values, weights)
    return default if r is None else r[0]
