"""Steering: the commands an engineer (the app, ``l2tui run``'s stdin) sends a running loop.

Commands arrive on the loop's queue from any thread (``AgentLoop.send``) and are applied here,
in the loop's thread, between steps: pause, resume, step, stop, hint, edit, accept / reject /
pin / unpin, a policy, baseline, accumulator, timing-mode or element-type switch, reorder,
profile, and a server-mode timing of the best. Each is recorded as a ``command`` event by the loop.
"""

from __future__ import annotations

import queue
from functools import partial
from typing import TYPE_CHECKING, Callable, ClassVar, Protocol, cast

from .. import events as ev_schema
from .loop_host import LoopHost
from ..errors import SessionError
from ..steering import DTYPES, WAKE
from .step import evaluation_of, speedup

if TYPE_CHECKING:
    from .track import KnownCandidate, Track


def _live(t: "Track") -> bool:
    """A track still open to steering (not finished)."""
    return t.done_reason is None


class _HasDtype(Protocol):
    """An evaluator whose element type can be set (``harness.evaluate.Evaluator``)."""

    dtype: str


def _retype_evaluator(evaluator: object, value: str) -> None:
    """Set the element type ``evaluator`` builds, checks and times in (``harness.evaluate.Evaluator``
    has a ``dtype`` it reads per request); a recorder also notes it as its recording's type, and
    passes it to the evaluator it wraps."""
    inner = getattr(evaluator, "inner", None)
    if inner is not None:
        _retype_evaluator(inner, value)
        meta = getattr(evaluator, "meta", None)
        if isinstance(meta, dict):
            meta["dtype"] = value
        return
    cast(_HasDtype, evaluator).dtype = value


def _retypable(evaluator: object) -> bool:
    """Whether ``evaluator`` (or the one it wraps) has an element type to set."""
    inner = getattr(evaluator, "inner", None)
    return _retypable(inner) if inner is not None else hasattr(evaluator, "dtype")


class SteeringCommands(LoopHost):
    """The ``_cmd_*`` handlers of :class:`l2tui.agent.loop.AgentLoop` (a mixin of it)."""

    def _apply_commands(self) -> None:
        while True:
            try:
                cmd = self._commands.get_nowait()
            except queue.Empty:
                return
            name = cmd.name
            if name == WAKE:
                continue
            args = dict(cmd.args)
            log_args = {k: (v if k != "source" else f"<{len(str(v))} chars>") for k, v in args.items()}
            self._emit(ev_schema.Command(name=name, track=cmd.track, args=log_args))
            try:
                self._apply(name, cmd.track, args)
            except Exception as e:
                self._error(None, f"command {name} failed: {e}")

    def _targets(self, tid: str | None) -> list[Track]:
        if tid is None:
            return [self.tracks[i] for i in self.order]
        if tid not in self.tracks:
            raise ValueError(f"unknown track {tid}")
        return [self.tracks[tid]]

    def _apply(self, name: str, tid: str | None, a: dict) -> None:
        """Run one command through :attr:`COMMANDS` (a ValueError names a command there is none of)."""
        handler = self.COMMANDS.get(name) if isinstance(name, str) else None
        if handler is None:
            raise ValueError(f"unknown command {name!r}")
        handler(self, tid, a)

    def _cmd_pause(self, tid: str | None, a: dict) -> None:
        for t in self._targets(tid):
            if _live(t) and t.state in ("running", "queued"):
                self._set_state(t, "paused")

    def _cmd_resume(self, tid: str | None, a: dict) -> None:
        for t in self._targets(tid):
            t.step_once = False
            if _live(t) and t.state in ("paused", "stopped"):
                self._set_state(t, "queued")

    def _cmd_step(self, tid: str | None, a: dict) -> None:
        for t in self._targets(tid):
            if _live(t):
                t.step_once = True
                self._set_state(t, "running")

    def _cmd_stop(self, tid: str | None, a: dict) -> None:
        if tid is None:
            self.request_stop()
            return
        for t in self._targets(tid):
            self._finish(t, "stopped by user", state="stopped")

    def _cmd_hint(self, tid: str | None, a: dict) -> None:
        text = str(a.get("text") or "").strip() or None
        for t in self._targets(tid):
            t.hint = text
        self._emit(ev_schema.Hint(track=tid, text=text or ""))

    def _cmd_edit(self, tid: str | None, a: dict) -> None:
        src = str(a.get("source") or "")
        for t in self._targets(tid):
            t.pending_edits.append(src)
            if t.done_reason is not None and t.state == "done" and t.best_sha:
                # an edit reopens a finished track for that one human step
                t.done_reason, t.gen = None, None
                self._set_state(t, "queued")
            elif _live(t) and t.state == "paused":
                self._set_state(t, "queued")

    def _cmd_decide(self, tid: str | None, a: dict, *, action: str) -> None:
        sha = str(a.get("sha") or "")
        for t in self._targets(tid):
            self._decide(t, action, sha)

    def _cmd_policy(self, tid: str | None, a: dict) -> None:
        value = str(a.get("value"))
        if self.policy_factory is None:
            raise ValueError("this loop cannot switch policies")
        pol = self.policy_factory(value)
        for t in self._targets(tid):
            t.policy = pol
            if pol.name != "human" and t.state == "paused" and _live(t):
                self._set_state(t, "queued")
        if tid is None:
            self.policy = pol

    def _cmd_baseline(self, tid: str | None, a: dict) -> None:
        value = str(a.get("value"))
        for t in self._targets(tid):
            t.baseline = value
            if t.best_eval is not None:
                t.best_speedup = speedup(t.best_eval.times_ms, value)
                self._emit(ev_schema.Best(track=t.id, sha=t.best_sha, speedup=t.best_speedup, baseline=value,
                           times_ms=dict(t.best_eval.times_ms)))
        if tid is None:
            self.config.baseline = value

    def _cmd_acc(self, tid: str | None, a: dict) -> None:
        for t in self._targets(tid):
            self.add_track(t.shape, str(a.get("value")))

    def _cmd_mode(self, tid: str | None, a: dict) -> None:
        value = str(a.get("value"))
        if value not in ("offline", "server"):
            raise ValueError("mode must be offline or server")
        self.config.mode = value
        if self.evaluator.mode is not None:   # None: a recording, timed in its own mode
            self.evaluator.mode = value

    def _cmd_dtype(self, tid: str | None, a: dict) -> None:
        """Switch the session's element type, or refuse in one line (a ``dtype_switch`` event
        either way). A session holds one type (``[loop] dtype``, its kernels, the known store's
        entries, the export), so the switch is made only before its first kernel."""
        value = str(a.get("value"))
        refused = self._dtype_refusal(value)
        if refused is None and value != self.config.dtype:
            try:
                self.session.set_loop_dtype(value)
            except SessionError as e:
                refused = f"{e}; the session stays {self.config.dtype}"
            else:
                self._retype(value)
        self._emit(ev_schema.DtypeSwitch(dtype=self.config.dtype, requested=value[:20], refused=refused))

    def _dtype_refusal(self, value: str) -> str | None:
        """Why this loop cannot switch to ``value`` now (one line), or None."""
        now = self.config.dtype
        if value not in DTYPES:
            return f"{value[:20]!r} is not an element type: use one of {', '.join(DTYPES)}"
        if value == now:
            return None
        if getattr(self.evaluator, "replays_recording", False):
            return (f"a replay of recorded evaluations stays in the recording's type ({now}); "
                    f"start a new session with --dtype {value} on a GPU machine")
        if not _retypable(self.evaluator):
            return f"this evaluator has one element type ({now}); start a new session with --dtype {value}"
        made = sum(1 for r in self.session.records if isinstance(r, ev_schema.Candidate))
        if made or self.session.rewards():
            return (f"this session already holds {made} {now} kernel(s) and one session has one element type; "
                    f"start a new session with --dtype {value}")
        f16 = [t.id for t in self.tracks.values() if t.acc == "f16"]
        if value == "bf16" and (f16 or self.config.acc == "f16"):
            return (f"bf16 accumulates in f32 only and {f16[0] if f16 else 'the session default'} "
                    f"accumulates in f16; use f32 tracks for bf16")
        return None

    def _retype(self, value: str) -> None:
        """Make ``value`` the type of everything that comes next: the loop's config (every track
        context is built from it), the evaluator, the rendered seed; a step already begun (no
        kernel made yet, or the switch would have been refused) starts again in the new type."""
        self.config.dtype = value
        _retype_evaluator(self.evaluator, value)
        self._seed_cache.clear()
        for t in self.tracks.values():
            if t.gen is not None:
                t.gen.close()
                t.gen = None

    def _cmd_reorder(self, tid: str | None, a: dict) -> None:
        order = [i for i in a.get("order") or [] if i in self.tracks]
        self.order = order + [i for i in self.order if i not in order]

    def _cmd_profile(self, tid: str | None, a: dict) -> None:
        for t in self._targets(tid):
            if t.best_sha:
                self._maybe_enable_profiling(t, manual=True)
                t.profiled_sha = None
                for _ in self._profile(t):
                    pass

    def _cmd_bench_server(self, tid: str | None, a: dict) -> None:
        for t in self._targets(tid):
            self._bench_server(t)

    #: command name -> handler(self, track id or None, args); the names are ``l2tui.steering.COMMAND_NAMES``
    COMMANDS: ClassVar[dict[str, Callable[..., None]]] = {
        "pause": _cmd_pause, "resume": _cmd_resume, "step": _cmd_step, "stop": _cmd_stop,
        "hint": _cmd_hint, "edit": _cmd_edit,
        "accept": partial(_cmd_decide, action="accept"), "reject": partial(_cmd_decide, action="reject"),
        "pin": partial(_cmd_decide, action="pin"), "unpin": partial(_cmd_decide, action="unpin"),
        "policy": _cmd_policy, "baseline": _cmd_baseline, "acc": _cmd_acc, "mode": _cmd_mode, "dtype": _cmd_dtype,
        "reorder": _cmd_reorder, "profile": _cmd_profile, "bench_server": _cmd_bench_server,
    }

    def _decide(self, t: Track, action: str, sha: str) -> None:
        self._emit(ev_schema.Decision(track=t.id, sha=sha, action=action, by="user"))
        if action == "accept" and sha != t.best_sha:
            if not self.session.has_kernel(sha):
                raise ValueError(f"unknown kernel {sha[:12]}")
            self._set_best_quiet(t, sha, self.session.get_kernel(sha), t.known.get(sha))
        elif action == "reject" and sha == t.best_sha and t.best_stack:
            prev = t.best_stack.pop()
            t.best_sha = None  # do not push the rejected one back
            self._set_best_quiet(t, prev, self.session.get_kernel(prev), t.known.get(prev))

    def _set_best_quiet(self, t: Track, sha: str, src: str, known: KnownCandidate | None) -> None:
        """``sha`` is the track's best by the user's decision: its evaluation, speedup and flags
        as the track timed it (none known: no times, the track's flags)."""
        if t.best_sha and t.best_sha != sha:
            t.best_stack.append(t.best_sha)
        kept = known.evaluation if known is not None else None
        sp = known.speedup if known is not None else None
        flags = list(known.flags) if known is not None and known.flags else t.flags
        t.best_sha, t.best_source, t.best_eval, t.best_speedup, t.flags = sha, src, kept, sp, list(flags)
        self._emit(ev_schema.Best(track=t.id, sha=sha, speedup=sp, baseline=t.baseline,
                                  times_ms=dict(kept.times_ms) if kept is not None else {}))

    def _bench_server(self, t: Track) -> None:
        if not t.best_source or self.evaluator.mode is None:
            raise ValueError("server-mode timing needs a GPU evaluator with a mode setting")
        old = self.evaluator.mode
        try:
            self.evaluator.mode = "server"
            ev = evaluation_of(self.evaluator.evaluate(t.best_source, t.shape, t.acc, flags=t.flags,
                                                       label="candidate"))
        finally:
            self.evaluator.mode = old
        times = dict(ev.times_ms)
        self._emit(ev_schema.Timed(track=t.id, step=t.step, sha=t.best_sha, mode="server", times_ms=times,
                   roofline_ms=ev.roofline_ms, baseline=t.baseline, speedup=speedup(times, t.baseline)))

