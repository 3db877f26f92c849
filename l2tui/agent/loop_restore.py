"""Resume: a loop's tracks rebuilt from the session's events (after any stop, kill -9 included).

The events are read as data: every field resume relies on is type-checked before use, and a
malformed one is one :class:`SessionError` line naming the event, never a traceback.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .. import events as ev_schema
from .loop_host import LoopHost
from ..errors import SessionError
from ..session import check_shape
from .policies.base import Attempt
from .rewards import code_lines
from .step import speedup
from .track import KernelEval, KnownCandidate, Track


@dataclass
class _Seen:
    """What one track's events said of one kernel so far: its last ``compiled`` and ``checked``
    events, the ``timed`` event resume keeps (one in the loop's timing mode over another), and,
    once timed, the speedup that event gave and the candidate's flags."""

    compiled: dict | None = None
    checked: dict | None = None
    timed: dict | None = None
    timed_speedup: float | None = None
    flags: list[str] = field(default_factory=list)

    def kept(self) -> KernelEval | None:
        return KernelEval.from_events(self.compiled, self.checked, self.timed)

    def known(self) -> KnownCandidate | None:
        """The kernel as the track timed it (None: never timed on this track)."""
        kept = self.kept() if self.timed is not None else None
        return None if kept is None else KnownCandidate(kept, self.timed_speedup, tuple(self.flags))


#: (track id, sha) -> what that track's events said of that kernel; a kernel shared by two tracks
#: (a common seed) has been timed on each track's own shape
_SeenKernels = dict[tuple[str, str], _Seen]


#: track_done reasons that a larger per-track budget on --resume lifts (see AgentLoop._budget)
BUDGET_REASONS = ("max_steps (", "wall_time (", "token_budget (")


class Restore(LoopHost):
    """The resume of :class:`l2tui.agent.loop.AgentLoop` (a mixin of it)."""

    def _restore(self) -> None:
        """Rebuild tracks and loop state from the session's events (after any stop, incl. kill -9)."""
        events = self.session.events
        if not any(e.get("type") == ev_schema.TRACK_ADDED for e in events):
            return

        seen: _SeenKernels = {}
        current: dict = {}
        try:
            for e in events:
                current = e
                self._fold(e, seen)
        except (TypeError, ValueError, KeyError, AttributeError):
            raise SessionError(f"{self.session.path}/events.jsonl: event seq {_shown_seq(current)} "
                               f"({_shown_type(current)}) has a malformed field; the session file is damaged") from None
        self._settle(events, seen)

    def _fold(self, e: dict, seen: _SeenKernels) -> None:
        """One event into the tracks' state (``seen``: what each track's events said of each of its
        kernels); TypeError / ValueError / KeyError for a malformed field."""
        typ, tid = e.get("type"), e.get("track")
        t = self.tracks.get(tid) if tid else None
        if typ == ev_schema.TRACK_ADDED:
            if not isinstance(tid, str):
                raise TypeError("track id")
            shp = check_shape(e.get("shape"), f"{self.session.path}/events.jsonl: event seq {_shown_seq(e)} (track_added)")
            if e.get("acc", "f32") not in ("f32", "f16"):
                raise ValueError("acc")
            t = Track(tid, shp, e.get("acc", "f32"), e.get("baseline") or self.config.baseline)
            self.tracks[tid] = t
            self.order.append(tid)
            return
        if t is None:
            return
        if typ in (ev_schema.CANDIDATE, ev_schema.COMPILED, ev_schema.CHECKED, ev_schema.TIMED, ev_schema.BEST) and not _is_sha(e.get("sha")):
            raise ValueError("sha")
        _check_types(e)
        if "step" in e and isinstance(e.get("step"), int) and typ in (ev_schema.STAGE, ev_schema.CANDIDATE, ev_schema.REWARD, ev_schema.CHECKPOINT):
            t.step = max(t.step, e["step"])
        if typ == ev_schema.TRACK_STATE:
            t.state = e.get("state", t.state)
        elif typ == ev_schema.CANDIDATE:
            seen.setdefault((t.id, e["sha"]), _Seen()).flags = [str(f) for f in e.get("flags") or []]
            if e.get("origin") == "seed" and not t.seed_lines and self.session.has_kernel(e["sha"]):
                t.seed_lines = code_lines(self.session.get_kernel(e["sha"]))
            if e.get("family"):
                t.family = e["family"]
        elif typ == ev_schema.COMPILED:
            seen.setdefault((t.id, e["sha"]), _Seen()).compiled = e
        elif typ == ev_schema.CHECKED:
            seen.setdefault((t.id, e["sha"]), _Seen()).checked = e
        elif typ == ev_schema.TIMED:
            k = seen.setdefault((t.id, e["sha"]), _Seen())
            if e.get("mode", "offline") == self.config.mode or k.timed is None:
                k.timed = e
            k.timed_speedup = e.get("speedup")
        elif typ == ev_schema.BEST:
            if t.best_sha and t.best_sha != e["sha"]:
                t.best_stack.append(t.best_sha)
            t.best_sha, t.best_speedup = e["sha"], e.get("speedup")
            t.baseline = e.get("baseline") or t.baseline
        elif typ == ev_schema.REWARD:
            t.history.append(Attempt(e.get("step", 0), e.get("plan") or "", e.get("origin") or "patch",
                                     e.get("kind", ""), e.get("sha"), e.get("speedup"), e.get("reward"),
                                     (e.get("parts") or {}).get("reason", "")[:160]))
        elif typ == ev_schema.LLM_CALL:
            u = e.get("usage") or {}
            t.tokens += int(u.get("prompt_tokens", 0)) + int(u.get("completion_tokens", 0))
        elif typ == ev_schema.PROFILING_ENABLED:
            t.profiling_enabled = True
        elif typ == ev_schema.PROFILED and e.get("in_context"):
            t.profile = {"verdict": e.get("verdict"), "metrics": e.get("metrics") or {}}
            t.profiled_sha = e.get("sha")
        elif typ == ev_schema.HINT:
            t.hint = e.get("text") or None
        elif typ == ev_schema.CHECKPOINT:
            t.steps_done = int(e.get("steps_done", t.steps_done))
            t.stable = int(e.get("stable", 0))
            t.last_structure = e.get("structure")
            t.wall_prior = float(e.get("wall_s", t.wall_prior))
        elif typ == ev_schema.TRACK_DONE:
            t.done_reason = e.get("reason") or "done"

    def _settle(self, events: list[dict], seen: _SeenKernels) -> None:
        """After the fold: global hints, each track's best kernel and evaluation, and whether it goes on."""
        for e in events:  # global hints apply to every track
            if e.get("type") == ev_schema.HINT and e.get("track") is None:
                for t in self.tracks.values():
                    t.hint = e.get("text") or None
        for (tid, sha), k in seen.items():
            known = k.known()
            if known is not None:
                self.tracks[tid].known[sha] = known
        for t in self.tracks.values():
            if t.best_sha:
                if self.session.has_kernel(t.best_sha):
                    best = seen.get((t.id, t.best_sha), _Seen())
                    t.best_source = self.session.get_kernel(t.best_sha)
                    t.best_eval = best.kept()
                    t.flags = list(best.flags)
                    if t.best_eval is not None and t.best_eval.times_ms:
                        t.best_speedup = speedup(t.best_eval.times_ms, t.baseline)
                else:
                    t.best_sha = None
            for a in t.history:
                a.accepted = a.sha is not None and (a.sha == t.best_sha or a.sha in t.best_stack)
            if t.done_reason is not None and t.state != "failed" and t.done_reason.startswith(BUDGET_REASONS) \
                    and self._budget(t) is None:
                t.done_reason = None  # finished on a budget that this run raises (--max-steps 30 after 20): go on
            if t.done_reason is None:
                t.state = "queued"  # running/paused/stopped before the stop: continue
            else:
                t.state = "stopped" if "stopped" in (t.done_reason or "") else ("failed" if t.state == "failed" else "done")
        # announced when run() starts, so subscribers (the UI, progress lines) see it
        self._resumed_from = events[-1]["seq"] if events else 0




#: (event type, key) -> the types the loop's resume accepts there (None always allowed)
_RESTORE_TYPES: dict[tuple[str, str], tuple[type, ...]] = {
    (ev_schema.TRACK_STATE, "state"): (str,), (ev_schema.TRACK_DONE, "reason"): (str,),
    (ev_schema.HINT, "text"): (str,), (ev_schema.BEST, "speedup"): (int, float),
    (ev_schema.TIMED, "speedup"): (int, float), (ev_schema.TIMED, "times_ms"): (dict,),
    (ev_schema.TIMED, "mode"): (str,), (ev_schema.REWARD, "reward"): (int, float), (ev_schema.REWARD, "plan"): (str,),
    (ev_schema.REWARD, "parts"): (dict,), (ev_schema.REWARD, "kind"): (str,), (ev_schema.REWARD, "origin"): (str,),
    (ev_schema.PROFILED, "metrics"): (dict,), (ev_schema.PROFILED, "verdict"): (str,),
    (ev_schema.CANDIDATE, "flags"): (list,), (ev_schema.CANDIDATE, "family"): (str,),
    (ev_schema.CANDIDATE, "origin"): (str,), (ev_schema.LLM_CALL, "usage"): (dict,),
    (ev_schema.CHECKPOINT, "structure"): (str,), (ev_schema.BEST, "baseline"): (str,),
    (ev_schema.TRACK_ADDED, "baseline"): (str,),
}


def _check_types(e: dict) -> None:
    """Raise TypeError (one line from the caller) when a field resume relies on has the wrong type."""
    typ = e.get("type")
    for (t, key), types in _RESTORE_TYPES.items():
        if t == typ:
            v = e.get(key)
            if v is not None and (not isinstance(v, types) or (isinstance(v, bool) and bool not in types)):
                raise TypeError(key)


def _is_sha(x: object) -> bool:
    return isinstance(x, str) and len(x) == 64 and all(c in "0123456789abcdef" for c in x)


def _shown_seq(e: dict) -> str:
    seq = e.get("seq")
    return str(seq) if isinstance(seq, int) else "?"


def _shown_type(e: dict) -> str:
    typ = e.get("type")
    return typ if isinstance(typ, str) and typ.isidentifier() and len(typ) <= 40 else "?"


