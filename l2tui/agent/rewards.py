"""Per-step rewards (the README, "The agent loop" has the formula for users).

For a candidate that passed the checks and was timed::

    speedup   = t_baseline / t_candidate               (offline medians, same method)
    err_pen   = error_weight  * max(0, log10(rel_err / ref_err))
    len_pen   = length_weight * max(0, (lines - seed_lines) / seed_lines)
    reward    = speedup - err_pen - len_pen

``ref_err`` is the baseline library's own relative error on the same inputs
when the evaluator reports it (``check["baseline_rel_err"]``), else half the
check's bound (``harness.checks`` sets the bound to twice the cuBLAS shim's own
error on the same inputs).  A kernel
as accurate as the library pays nothing; ten times less accurate pays
``error_weight``.  Code length is counted in non-blank lines.

Every failure gets a fixed reward by kind (config ``[rewards]``): no_patch,
patch_failed, compile_error, wrong, crashed, timeout, unsupported.  Speedup is
about 1 for a kernel as fast as the baseline, so every failure reward is
below any working kernel's reward that is not absurdly slow.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

DEFAULT_FAILURE_REWARDS = {
    "no_patch": -1.0, "patch_failed": -0.8, "compile_error": -0.6, "wrong": -0.7,
    "crashed": -0.9, "timeout": -0.9, "unsupported": -0.5,
}
TINY = 1e-12


@dataclass
class RewardConfig:
    error_weight: float = 0.5
    length_weight: float = 0.1
    failures: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_FAILURE_REWARDS))

    @classmethod
    def from_section(cls, sec: dict[str, Any] | None) -> "RewardConfig":
        sec = sec or {}
        fails = dict(DEFAULT_FAILURE_REWARDS)
        for k in fails:
            if k in sec:
                fails[k] = float(sec[k])
        return cls(float(sec.get("error_weight", 0.5)), float(sec.get("length_weight", 0.1)), fails)


def code_lines(source: str) -> int:
    return sum(1 for line in (source or "").splitlines() if line.strip())


def failure_reward(kind: str, cfg: RewardConfig) -> tuple[float, dict]:
    r = cfg.failures.get(kind, min(cfg.failures.values()))
    return r, {"failure": kind, "fixed": r}


def success_reward(*, speedup: float | None, rel_err: float | None, ref_err: float | None,
                   lines: int, seed_lines: int, cfg: RewardConfig) -> tuple[float, dict]:
    parts: dict[str, Any] = {}
    sp = float(speedup) if speedup is not None and math.isfinite(speedup) and speedup > 0 else 0.0
    parts["speedup"] = sp
    if speedup is None:
        parts["no_baseline_time"] = True
    err_pen = 0.0
    if rel_err is not None and ref_err is not None and rel_err > 0:
        ratio = float(rel_err) / max(float(ref_err), TINY)
        if ratio > 1.0:
            err_pen = cfg.error_weight * math.log10(ratio)
    parts["error_penalty"] = err_pen
    len_pen = 0.0
    if seed_lines > 0 and lines > seed_lines:
        len_pen = cfg.length_weight * (lines - seed_lines) / seed_lines
    parts["length_penalty"] = len_pen
    parts["lines"] = lines
    parts["seed_lines"] = seed_lines
    return sp - err_pen - len_pen, parts


def reference_error(check: dict | None) -> float | None:
    if not check:
        return None
    for key in ("baseline_rel_err", "ref_rel_err"):
        v = check.get(key)
        if isinstance(v, (int, float)) and v > 0:
            return float(v)
    v = check.get("bound")
    if isinstance(v, (int, float)) and v > 0:
        return float(v) / 2.0   # harness.checks: bound = 2 x the cuBLAS shim's own error
    return None
