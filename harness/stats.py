"""The two numbers every table, screen and report is made of: a speedup and a geometric mean.

One definition of each, so that the TUI, the sweep, the report, the bench summary and the export
agree to the last digit on the same timings. Speedups are ratios, so they average geometrically:
twice as fast on one shape and half as fast on another is a geomean of 1.0.
"""

from __future__ import annotations

import math
from typing import Iterable


def geomean(xs: Iterable[float | None]) -> float | None:
    """The geometric mean of the positive, finite values of ``xs``; None when there are none.

    Missing (None), zero, negative and non-finite values are left out rather than failing: a
    shape that was not timed has no speedup, and it must not sink or void the mean of the others.
    """
    v = [x for x in xs if x is not None and x > 0 and math.isfinite(x)]
    return math.exp(sum(math.log(x) for x in v) / len(v)) if v else None


def speedup(baseline_ms: float | None, candidate_ms: float | None) -> float | None:
    """How many times faster the candidate is than the baseline (baseline time / candidate time):
    above 1 when the candidate is faster. None when either time is missing or not positive."""
    if not baseline_ms or not candidate_ms or baseline_ms <= 0 or candidate_ms <= 0:
        return None
    return baseline_ms / candidate_ms
