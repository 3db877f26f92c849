"""One sweep track's driver: the pick, then refinement steps, on one GPU slot.

The sweep (``sweep.py``) owns what tracks share: the pool of GPU slots, the builds, the results
file, the planner's picks. This module owns one track from its ``track_added`` event to its
``track_done``: what is evaluated, in which order, and which candidate is the track's best. Every
candidate is scored and recorded through ``step.py``, as in the agent loop.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Mapping

from harness.families import Config
from harness.shapes import Shape

from .. import events as ev_schema
from ..session import sha256_text
from .policies.base import Attempt, Failure, Proposal, TrackContext
from .rewards import code_lines
from .step import StepInfo, evaluation_of, record_reward, score, speedup
from .track import KernelEval

if TYPE_CHECKING:
    from harness.evaluate import Evaluation

    from ..executors.base import Slot
    from .sweep import Sweep, TrackResult


class TrackDriver:
    """One track of a sweep on one slot (``run`` returns its :class:`TrackResult`)."""

    def __init__(self, sweep: "Sweep", shape: Shape, acc: str, slot: "Slot", track: str, result: "TrackResult"):
        self.sweep, self.shape, self.acc, self.slot, self.track, self.res = sweep, shape, acc, slot, track, result
        self.cfg, self.s, self.pol = sweep.cfg, sweep.session, sweep.policy
        self.ctx = TrackContext(track=track, shape=shape, acc=acc, baseline=self.cfg.baseline, step=0,
                                arch=self.cfg.arch, dtype=self.cfg.dtype)
        self.info = StepInfo(track=track, shape=(shape.m, shape.n, shape.k), acc=acc, baseline=self.cfg.baseline,
                             policy="search", dtype=self.cfg.dtype)
        self.base_ms: dict[str, float] = {}
        self.base_tune: ev_schema.LibraryFields = {}   # how base_ms's libraries ran (autotune record, cuBLAS layout)
        self.best_src: str | None = None
        self.best_ms = math.inf
        self.seed_lines = 0   # the pick's candidates are seeds; refinements measure against the pick's winner

    def run(self) -> "TrackResult":
        """The pick, the refinement steps, the winner; the track's result."""
        t0 = time.monotonic()
        s, cfg, track = self.s, self.cfg, self.track
        s.record(ev_schema.TrackAdded(track=track, shape=[self.shape.m, self.shape.n, self.shape.k], acc=self.acc,
                 baseline=cfg.baseline, gpu=self.slot.uuid))
        s.record(ev_schema.TrackState(track=track, state="running"))
        self._pick()
        self.seed_lines = code_lines(self.best_src or "")
        self._refine()
        res = self.res
        res.seconds = round(time.monotonic() - t0, 2)
        res.build_s, res.gpu_s = round(res.build_s, 2), round(res.gpu_s, 2)
        if self.best_src is not None:
            self.sweep._keep_winner(res, self.shape, self.acc, self.best_src, self.best_ms, self.base_ms)
        s.record(ev_schema.TrackDone(track=track, reason="budget" if self.best_src else "failed",
                 best_sha=res.best_sha, best_speedup=res.speedup, gpu=self.slot.uuid))
        s.record(ev_schema.TrackState(track=track, state="done" if self.best_src else "failed"))
        return res

    def _pick(self) -> None:
        """The policy's seed and the catalog configurations chosen beside it, built, then checked and
        timed together (with the baselines) in one request on this track's GPU."""
        s, cfg, track, sweep = self.s, self.cfg, self.track, self.sweep
        s.record(ev_schema.Stage(track=track, step=0, stage="seed", status="start"))
        with sweep._plans_lock:
            seeds = sweep._plans.pop(track, None)
        if seeds is None:
            seeds = sweep._pick_proposals(self.ctx)
        self.res.picked = len(seeds)
        if seeds:
            names = [(c.name if c else "seed") for c in (Config.from_source(p.source or "") for p in seeds)]
            s.record(ev_schema.Plan(track=track, step=0, role="planner",
                     text=f"pick: timing {len(seeds)} catalog configurations together on {self.slot.uuid}: "
                          + ", ".join(names)))
            t_build = time.monotonic()
            if sweep.builds is not None:
                sweep.builds.wait(track)
            if cfg.build_batches:
                sweep._build([p.source or "" for p in seeds])
            self.res.build_s += time.monotonic() - t_build
            s.record(ev_schema.Stage(track=track, step=0, stage="compile", status="start"))
            items = [(f"pick{i}", p.source or "", tuple(p.flags)) for i, p in enumerate(seeds)]
            evs = self.slot.evaluate_many(items, self.shape, self.acc, baselines=(cfg.baseline, *cfg.libraries))
            for (label, src, _), p in zip(items, seeds):
                self.consider(p, src, None, 0, raw=evs[label])
        s.record(ev_schema.Stage(track=track, step=0, stage="seed", status="end"))

    def _refine(self) -> None:
        """Refinement steps from the best so far, until the step budget, the policy or patience ends them."""
        stale = 0
        for step in range(1, self.cfg.steps + 1):
            if self.best_src is None:
                return
            self.ctx.step = step
            props = self.pol.propose(self.ctx)
            if not props:
                return
            sources = self.sweep._sources_of(props, self.best_src, self.track, step)
            t_build = time.monotonic()
            self.sweep._build_batch([src for _, src in sources])
            self.res.build_s += time.monotonic() - t_build
            before, parent = self.best_ms, self.best_src
            for p, src in sources:
                self.consider(p, src, parent, step)
            stale = stale + 1 if self.best_ms >= before else 0
            if stale >= self.cfg.patience:
                return

    def consider(self, prop: Proposal, source: str, parent: str | None, step: int,
                 raw: "Evaluation | Mapping[str, object] | None" = None) -> None:
        """Evaluate one candidate (unless ``raw`` is its evaluation already), record it, score it."""
        sha = self.sweep._announce(self.ctx, prop, source, parent, step)
        if raw is None:
            self.s.record(ev_schema.Stage(track=self.track, step=step, stage="compile", status="start"))
            raw = self.slot.evaluate(source, self.shape, self.acc, flags=tuple(prop.flags),
                                     time_baselines=not self.base_ms)
        ev = evaluation_of(raw)
        self.sweep._record(self.ctx, step, sha, ev, self.slot)
        self._count(ev)
        times = {**self.base_ms, **ev.times_ms}
        sp = speedup(times, self.cfg.baseline) if ev.status == "ok" else None
        if ev.status == "ok":
            self.s.record(ev_schema.Timed(track=self.track, step=step, sha=sha, mode="offline", times_ms=times,
                          roofline_ms=ev.roofline_ms, baseline=self.cfg.baseline, speedup=sp, gpu=self.slot.uuid,
                          timing=ev.extra.get("timing"), **self.base_tune))
        reward, parts = score(ev.status, speedup=sp, check=ev.check, source=source, seed_lines=self.seed_lines,
                              cfg=self.cfg.rewards, message=ev.message)
        record_reward(self.s, self.info, step, prop, parent=sha256_text(parent) if parent else None, child=sha,
                      kind=ev.status, reward=reward, parts=parts, speedup=sp, seed_lines=self.seed_lines)
        t = ev.times_ms.get("candidate")
        improved = ev.status == "ok" and t is not None and t < self.best_ms
        self.ctx.history.append(Attempt(step=step, plan=prop.plan, origin=prop.origin, kind=ev.status, sha=sha,
                                        speedup=sp, reward=reward, note=ev.message, accepted=improved))
        if ev.status not in ("ok", "unsupported"):
            self.pol.debug(self.ctx, Failure(kind=ev.status, message=ev.message, source=source, sha=sha,
                                             parent_source=parent))
        if improved and t is not None:
            self._new_best(source, sha, t, times, sp, ev)

    def _count(self, ev: "Evaluation") -> None:
        """The evaluation's share of the track's nvcc and GPU time; the first one's baselines."""
        res = self.res
        res.evaluated += 1
        if ev.build is not None and not ev.build.cached:
            res.build_s += float(ev.build.seconds or 0.0)
        res.gpu_s += float(ev.extra.get("seconds") or 0.0)
        if not self.base_ms:
            self.base_ms = {k: v for k, v in ev.times_ms.items() if k != "candidate" and v}
            self.base_tune = ev_schema.library_fields(ev.extra)

    def _new_best(self, source: str, sha: str, t: float, times: dict[str, float], sp: float | None,
                  ev: "Evaluation") -> None:
        """``source`` is the track's best now (the policy refines from it)."""
        self.best_src, self.best_ms = source, t
        ctx = self.ctx
        ctx.source, ctx.sha, ctx.times_ms, ctx.speedup = source, sha, times, sp
        ctx.evaluation = KernelEval.of(ev)
        self.s.record(ev_schema.Best(track=self.track, sha=sha, speedup=sp, baseline=self.cfg.baseline,
                      times_ms=times))
