"""Delayed profiling: a track's best kernel under Nsight Compute once its structure is stable.

Profiling is slow, so the loop turns it on for a track only after the search has settled on a
structure (``stable_steps``), or when the engineer asks (the ``profile`` command); the verdict
and the metrics then go into the policy's context.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, cast

from .. import events as ev_schema
from .loop_host import LoopHost
from .interrupt import StepInterrupted, interrupted

if TYPE_CHECKING:
    from harness.evaluator_protocol import ReplayEvaluator

    from .track import Gen
    from .track import Track


def profile_payload(p: object) -> dict | None:
    """``{"verdict": str, "metrics": {name: {value, unit}}}`` from a harness Profile or a dict."""
    if p is None:
        return None
    if hasattr(p, "event_payload"):
        payload: dict = p.event_payload()
        return payload
    d = dict(p) if isinstance(p, Mapping) else {}
    verdict = d.get("verdict")
    if isinstance(verdict, dict):
        verdict = verdict.get("cls") or verdict.get("class") or verdict.get("verdict")
    metrics = d.get("filtered") or d.get("metrics") or {}
    out = {}
    for k, v in metrics.items():
        if isinstance(v, dict):
            out[k] = {"value": v.get("value"), "unit": v.get("unit")}
        else:
            out[k] = {"value": v, "unit": None}
    return {"verdict": verdict, "metrics": out}


class Profiling(LoopHost):
    """The profiling steps of :class:`l2tui.agent.loop.AgentLoop` (a mixin of it)."""

    def _maybe_enable_profiling(self, t: "Track", manual: bool = False) -> None:
        if t.profiling_enabled:
            return
        c = self.config
        reason = None
        if manual:
            reason = "manual"
        elif t.steps_done >= c.profile_after:
            reason = f"after {t.steps_done} steps"
        elif c.stable_steps > 0 and t.stable >= c.stable_steps:
            reason = f"structure stable for {t.stable} steps"
        if reason:
            t.profiling_enabled = True
            self._emit(ev_schema.ProfilingEnabled(track=t.id, step=t.step, reason=reason))

    def _profile(self, t: "Track") -> Gen:
        step = t.step
        sha, src = t.best_sha, t.best_source
        if sha is None or src is None:
            return
        self._stage(t, step, "profile", "start")
        yield
        payload = None
        try:
            if self.evaluator.own_profiles:   # a recording's profile, or one a recorder keeps
                payload = profile_payload(cast("ReplayEvaluator", self.evaluator).profile(src, t.shape, t.acc))
            else:
                from harness.profiling.api import profile_kernel

                payload = profile_payload(profile_kernel(src, t.shape, t.acc, arch=self.config.arch, flags=t.flags))
        except Exception as e:
            if interrupted(e):
                raise StepInterrupted("profiling interrupted") from None
            if not t.profile_error_shown:
                self._error(t, f"profiling failed: {e}")
                t.profile_error_shown = True
        t.profiled_sha = sha
        if payload is not None:
            t.profile = payload
            self._emit(ev_schema.Profiled(track=t.id, step=step, sha=sha, verdict=payload.get("verdict"),
                       metrics=payload.get("metrics") or {}, in_context=True))
        elif not t.profile_error_shown:
            self._error(t, "no profile available for this kernel (no recording / no ncu); the context keeps timings only")
            t.profile_error_shown = True
        self._stage(t, step, "profile", "end", "ok" if payload else "unavailable")

