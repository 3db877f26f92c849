"""The UI's view model: every event folded into plain Python state.

Widgets never read events themselves; they read this model.  Keeping the fold
free of Textual means live mode, replay and seeking all share one code path
(a seek backwards is "reset, then fold the first N events"), and the fold can be
benchmarked and tested without a terminal.  Readers ignore unknown event types
and keys, as docs/INTERFACES.md asks.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Iterable

from harness.stats import geomean, speedup

from .. import events as ev_schema
from ..gemm_roles import session_roles
from ..steering import DTYPES, dtype_switch_line

TRACK_STATES = ("queued", "running", "paused", "done", "failed", "stopped")
CANDIDATE_LABEL = "candidate"
LOG_LIMIT = 5000


@dataclass
class Candidate:
    """One kernel version of a track and everything measured about it.

    ``num`` is the candidate's number in its track (0 for the first, in the order the track met
    them): a step may propose several candidates, so the step cannot name one, and every panel
    and log line names a candidate by this number (``#num``).
    """

    sha: str
    step: int
    num: int = 0
    parent: str | None = None
    origin: str = ""
    policy: str = ""
    family: str | None = None
    diff: str = ""
    flags: list[str] = field(default_factory=list)
    compiled: dict | None = None
    checked: dict | None = None
    timed: dict | None = None
    profiled: dict | None = None
    reward: dict | None = None
    decision: str | None = None  # accept / reject / pin / unpin (latest)

    @property
    def status(self) -> str:
        """The furthest stage this candidate reached, or the way it failed."""
        if self.reward and self.reward.get("kind") not in (None, "ok"):
            return str(self.reward["kind"])
        if self.compiled is not None and not self.compiled.get("ok", False):
            return "compile_error"
        if self.checked is not None and not self.checked.get("ok", False):
            return str(self.checked.get("status") or "wrong")
        if self.timed is not None:
            return "timed"
        if self.checked is not None:
            return "checked"
        if self.compiled is not None:
            return "compiled"
        return "new"


@dataclass
class Track:
    """One (shape, accumulator) being optimised."""

    id: str
    shape: tuple[int, int, int]
    acc: str = "f32"
    baseline: str = ""
    state: str = "queued"
    step: int = 0
    stage: str = ""
    stage_status: str = ""
    candidates: dict[str, Candidate] = field(default_factory=dict)
    current_sha: str | None = None
    best_sha: str | None = None
    best_speedup: float | None = None
    best_times_ms: dict[str, float] = field(default_factory=dict)
    history: list[tuple[int, float | None]] = field(default_factory=list)
    best_history: list[tuple[int, float]] = field(default_factory=list)
    profiling_step: int | None = None
    profiling_reason: str = ""
    pinned: set[str] = field(default_factory=set)
    accepted: set[str] = field(default_factory=set)
    rejected: set[str] = field(default_factory=set)
    hint: str | None = None
    error: str | None = None
    done_reason: str | None = None

    @property
    def current(self) -> Candidate | None:
        return self.candidates.get(self.current_sha) if self.current_sha else None

    def speedup_vs(self, baseline: str | None) -> float | None:
        """Best speedup over ``baseline`` (the track's reward baseline when None).

        Computed from the best candidate's timings when they include that
        baseline, so the grid can be recoloured for any baseline without new
        measurements.
        """
        if baseline and self.best_times_ms:
            sp = speedup(self.best_times_ms.get(baseline), self.best_times_ms.get(CANDIDATE_LABEL))
            if sp is not None:
                return sp
        if baseline in (None, "", self.baseline):
            return self.best_speedup
        return None

    @property
    def label(self) -> str:
        m, n, k = self.shape
        return f"{m}x{n}x{k}"


@dataclass
class LogEntry:
    """One line of the agent log."""

    seq: int
    time: float
    track: str | None
    kind: str
    text: str


@dataclass
class Changes:
    """What one batch of events touched, so widgets redraw only what changed."""

    tracks: set[str] = field(default_factory=set)
    added_tracks: bool = False
    telemetry: bool = False
    session: bool = False
    best: bool = False
    log: list[LogEntry] = field(default_factory=list)
    reset: bool = False
    events: int = 0

    def merge(self, other: "Changes") -> None:
        self.tracks |= other.tracks
        self.added_tracks |= other.added_tracks
        self.telemetry |= other.telemetry
        self.session |= other.session
        self.best |= other.best
        self.log.extend(other.log)
        self.reset |= other.reset
        self.events += other.events


def fmt_ms(ms: float | None) -> str:
    if ms is None:
        return "—"
    if ms < 0.001:
        return f"{ms * 1e6:.3g} ns"
    if ms < 1:
        return f"{ms * 1000:.3g} µs"
    return f"{ms:.3f} ms"


def fmt_speedup(x: float | None) -> str:
    return "—" if x is None else f"{x:.2f}×"


class SessionModel:
    """Folds events (dicts from events.jsonl or the live loop) into UI state."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.tracks: dict[str, Track] = {}
        self.telemetry: dict[str, object] = {}
        self.log: deque[LogEntry] = deque(maxlen=LOG_LIMIT)
        self.best_over_time: list[tuple[float, float]] = []  # (seconds since start, geomean)
        self.t0: float | None = None
        self.t_last: float = 0.0
        self.last_seq: int = -1
        self.config: dict = {}
        self.roles: dict[str, str] = {}   # "MxNxK" -> a model's GEMM role (l2tui.gemm_roles)
        self.gpu: dict = {}
        self.versions: dict = {}
        self.ended: str | None = None
        self.policy: str = ""
        self.mode: str = "offline"
        self.dtype: str = "fp16"   # element type of the session's kernels ([loop] dtype; fp16 when unrecorded)
        self.dtype_switched = False   # a dtype_switch event made the type: the bar names it, fp16 too
        self.n_events = 0
        self._streams: dict[tuple, str] = {}

    # -- folding -----------------------------------------------------------------------------
    def apply_many(self, events: Iterable[dict]) -> Changes:
        changes = Changes()
        for ev in events:
            self._apply(ev, changes)
        return changes

    def apply(self, event: dict) -> Changes:
        changes = Changes()
        self._apply(event, changes)
        return changes

    def elapsed(self, t: float | None) -> float:
        if t is None or self.t0 is None:
            return 0.0
        return max(0.0, t - self.t0)

    def _log(self, changes: Changes, ev: dict, kind: str, text: str, track: str | None = None) -> None:
        entry = LogEntry(int(ev.get("seq", -1)), float(ev.get("time", 0.0)), track, kind, text)
        self.log.append(entry)
        changes.log.append(entry)

    def _track(self, ev: dict, changes: Changes) -> Track | None:
        tid = ev.get("track")
        if not isinstance(tid, str):
            return None
        tr = self.tracks.get(tid)
        if tr is None:  # events for a track we never saw added: make one from its id
            tr = Track(id=tid, shape=_shape_from_id(tid), acc=_acc_from_id(tid))
            self.tracks[tid] = tr
            changes.added_tracks = True
        changes.tracks.add(tid)
        return tr

    def _candidate(self, tr: Track, ev: dict) -> Candidate | None:
        sha = ev.get("sha")
        if not isinstance(sha, str):
            return None
        c = tr.candidates.get(sha)
        if c is None:
            c = Candidate(sha=sha, step=int(ev.get("step", tr.step) or 0), num=len(tr.candidates))
            tr.candidates[sha] = c
        return c

    def _track_candidate(self, ev: dict, changes: Changes) -> tuple[Track, Candidate] | None:
        """The track and candidate an event is about; None when it lacks a track id or a sha."""
        tr = self._track(ev, changes)
        if tr is None:
            return None
        c = self._candidate(tr, ev)
        return None if c is None else (tr, c)

    def _apply(self, ev: dict, changes: Changes) -> None:
        """Fold one event: the bookkeeping every event gets, then its type's handler (``_HANDLERS``)."""
        seq = ev.get("seq")
        if isinstance(seq, int) and seq <= self.last_seq:
            return  # already folded (a live backlog overlapping what the UI had)
        typ = ev.get("type")
        t = ev.get("time")
        if isinstance(t, (int, float)):
            if self.t0 is None:
                self.t0 = float(t)
            self.t_last = float(t)
        if isinstance(seq, int):
            self.last_seq = seq
        self.n_events += 1
        changes.events += 1
        handler = _HANDLERS.get(str(typ))
        if handler is not None:
            handler(self, ev, changes)

    def _on_session_started(self, ev: dict, changes: Changes) -> None:
        self.config = dict(ev.get("config") or {})
        self.roles = session_roles(self.config)
        self.gpu = dict(ev.get("gpu") or {})
        self.versions = dict(ev.get("versions") or {})
        self.policy = str(self.config.get("policy") or self.policy)
        self.mode = str(self.config.get("mode") or self.mode)
        loop = self.config.get("loop")
        dtype = loop.get("dtype") if isinstance(loop, dict) else None
        self.dtype = dtype if dtype in ("fp16", "bf16") else "fp16"   # (a session file is data)
        changes.session = True
        self._log(changes, ev, "session", f"session started on {self.gpu.get('name') or 'no GPU'}")

    def _on_session_resumed(self, ev: dict, changes: Changes) -> None:
        changes.session = True
        self._log(changes, ev, "session", f"session resumed from event {ev.get('from_seq')}")

    def _on_session_ended(self, ev: dict, changes: Changes) -> None:
        self.ended = str(ev.get("reason") or "ended")
        changes.session = True
        self._log(changes, ev, "session", f"session ended: {self.ended}")

    def _on_track_added(self, ev: dict, changes: Changes) -> None:
        tid = ev.get("track")
        if not isinstance(tid, str):
            return
        shape = ev.get("shape") or _shape_from_id(tid)
        tr = self.tracks.get(tid) or Track(id=tid, shape=(0, 0, 0))
        tr.shape = tuple(int(x) for x in shape)[:3]  # type: ignore[assignment]
        tr.acc = str(ev.get("acc") or _acc_from_id(tid))
        tr.baseline = str(ev.get("baseline") or tr.baseline)
        self.tracks[tid] = tr
        changes.added_tracks = True
        changes.tracks.add(tid)
        self._log(changes, ev, "track", f"added, baseline {tr.baseline or '—'}", tid)

    def _on_track_state(self, ev: dict, changes: Changes) -> None:
        tr = self._track(ev, changes)
        if tr is not None:
            tr.state = str(ev.get("state") or tr.state)
            self._log(changes, ev, "state", tr.state, tr.id)

    def _on_stage(self, ev: dict, changes: Changes) -> None:
        tr = self._track(ev, changes)
        if tr is not None:
            tr.step = int(ev.get("step", tr.step) or 0)
            tr.stage = str(ev.get("stage") or "")
            tr.stage_status = str(ev.get("status") or "")
            if tr.stage_status == "start":
                detail = f" — {ev['detail']}" if ev.get("detail") else ""
                self._log(changes, ev, "stage", f"step {tr.step} {tr.stage}{detail}", tr.id)

    def _on_candidate(self, ev: dict, changes: Changes) -> None:
        tc = self._track_candidate(ev, changes)
        if tc is None:
            return
        tr, c = tc
        c.step = int(ev.get("step", c.step) or 0)
        c.parent = ev.get("parent")
        c.origin = str(ev.get("origin") or "")
        c.policy = str(ev.get("policy") or "")
        c.family = ev.get("family")
        c.diff = str(ev.get("diff") or "")
        c.flags = list(ev.get("flags") or [])
        tr.current_sha = c.sha
        if c.policy:
            self.policy = c.policy
        nlines = sum(1 for ln in c.diff.splitlines() if ln[:1] in "+-" and ln[:3] not in ("+++", "---"))
        self._log(changes, ev, "candidate",
                  f"#{c.num} candidate {c.sha[:10]} (step {c.step}, {c.origin}, {c.policy or '?'}; "
                  f"{nlines} changed lines)", tr.id)

    def _on_measure(self, ev: dict, changes: Changes) -> None:
        typ = str(ev.get("type"))
        tc = self._track_candidate(ev, changes)
        if tc is None:
            return
        tr, c = tc
        setattr(c, typ, dict(ev))
        self._log(changes, ev, typ, _describe_measure(typ, ev, c.num), tr.id)
        if typ == ev_schema.TIMED:
            sp = ev.get("speedup")
            tr.history.append((int(ev.get("step", c.step) or 0), float(sp) if isinstance(sp, (int, float)) else None))
            if ev.get("mode"):
                self.mode = str(ev["mode"])

    def _on_profiling_enabled(self, ev: dict, changes: Changes) -> None:
        tr = self._track(ev, changes)
        if tr is not None:
            tr.profiling_step = int(ev.get("step", tr.step) or 0)
            tr.profiling_reason = str(ev.get("reason") or "")
            self._log(changes, ev, "profile", f"NCU metrics enter the model's context ({tr.profiling_reason})", tr.id)

    def _on_plan(self, ev: dict, changes: Changes) -> None:
        tr = self._track(ev, changes)
        text = str(ev.get("text") or "").strip()
        self._log(changes, ev, "plan", f"{ev.get('role', 'planner')}: {text}", tr.id if tr else None)

    def _on_llm_delta(self, ev: dict, changes: Changes) -> None:
        tr = self._track(ev, changes)
        key = (ev.get("track"), ev.get("role"))
        buf = self._streams.get(key, "") + str(ev.get("text") or "")
        *lines, rest = buf.split("\n")
        for ln in lines:
            self._log(changes, ev, "llm", f"{ev.get('role', 'llm')}› {ln}", tr.id if tr else None)
        self._streams[key] = rest

    def _on_llm_call(self, ev: dict, changes: Changes) -> None:
        tr = self._track(ev, changes)
        key = (ev.get("track"), ev.get("role"))
        rest = self._streams.pop(key, "")
        if rest.strip():
            self._log(changes, ev, "llm", f"{ev.get('role', 'llm')}› {rest}", tr.id if tr else None)
        usage = ev.get("usage") or {}
        ok = "ok" if ev.get("ok", True) else f"failed: {ev.get('error')}"
        self._log(changes, ev, "llm_call",
                  f"{ev.get('role')} {ev.get('model')}: {usage.get('prompt_tokens', '?')}+"
                  f"{usage.get('completion_tokens', '?')} tokens, {float(ev.get('seconds') or 0):.1f}s, {ok}",
                  tr.id if tr else None)

    def _on_patch(self, ev: dict, changes: Changes) -> None:
        tr = self._track(ev, changes)
        msg = "patch applied" if ev.get("ok") else f"patch failed: {ev.get('error')}"
        self._log(changes, ev, "patch", msg, tr.id if tr else None)

    def _on_reward(self, ev: dict, changes: Changes) -> None:
        tr = self._track(ev, changes)
        if tr is None:
            return
        c = self._candidate(tr, ev)
        if c is not None:
            c.reward = dict(ev)
        r = ev.get("reward")
        who = f"#{c.num}" if c is not None else f"step {ev.get('step')}"
        self._log(changes, ev, "reward",
                  f"{who} reward {r:+.3f} ({ev.get('kind')})" if isinstance(r, (int, float))
                  else f"{who} reward ({ev.get('kind')})", tr.id)

    def _on_best(self, ev: dict, changes: Changes) -> None:
        t = ev.get("time")
        tr = self._track(ev, changes)
        if tr is None:
            return
        tr.best_sha = ev.get("sha")
        sp = ev.get("speedup")
        tr.best_speedup = float(sp) if isinstance(sp, (int, float)) else None
        tr.best_times_ms = dict(ev.get("times_ms") or {})
        if ev.get("baseline"):
            tr.baseline = str(ev["baseline"])
        if tr.best_speedup is not None:
            tr.best_history.append((tr.step, tr.best_speedup))
        gm = geomean(x.best_speedup for x in self.tracks.values() if x.best_speedup)
        if gm is not None:
            self.best_over_time.append((self.elapsed(t if isinstance(t, (int, float)) else None), gm))
        changes.best = True
        self._log(changes, ev, "best", f"new best {self.cand_name(tr, tr.best_sha)}{fmt_speedup(tr.best_speedup)} "
                                       f"vs {tr.baseline} ({str(tr.best_sha)[:10]})", tr.id)

    def _on_decision(self, ev: dict, changes: Changes) -> None:
        tr = self._track(ev, changes)
        if tr is None:
            return
        sha, action = ev.get("sha"), ev.get("action")
        if isinstance(sha, str):
            c = self._candidate(tr, ev)
            if c is not None:
                c.decision = str(action)
            {"accept": tr.accepted, "reject": tr.rejected, "pin": tr.pinned}.get(str(action), set()).add(sha)
            if action == "unpin":
                tr.pinned.discard(sha)
        self._log(changes, ev, "decision", f"{action} {self.cand_name(tr, sha)}{str(sha)[:10]} by {ev.get('by')}", tr.id)

    def _on_command(self, ev: dict, changes: Changes) -> None:
        tid = ev.get("track")
        args = {k: v for k, v in ev.items() if k not in ("seq", "time", "type", "name", "track")}
        if isinstance(args.get("args"), dict):
            args = args["args"]
        if ev.get("name") == "policy" and args.get("value"):
            self.policy = str(args["value"])
        if ev.get("name") == "mode" and args.get("value"):
            self.mode = str(args["value"])
        brief = ", ".join(f"{k}={_short(v)}" for k, v in args.items())
        self._log(changes, ev, "command", f"command {ev.get('name')} {brief}".rstrip(), tid if isinstance(tid, str) else None)
        if isinstance(tid, str):
            changes.tracks.add(tid)
        changes.session = True

    def _on_hint(self, ev: dict, changes: Changes) -> None:
        tid = ev.get("track")
        if isinstance(tid, str) and tid in self.tracks:
            self.tracks[tid].hint = str(ev.get("text") or "")
            changes.tracks.add(tid)
        self._log(changes, ev, "hint", f"hint: {ev.get('text')}", tid if isinstance(tid, str) else None)

    def _on_dtype_switch(self, ev: dict, changes: Changes) -> None:
        """The loop's answer to a ``dtype`` command: the type in force after it (a type this
        model does not know is logged, never shown as the session's)."""
        dtype = ev.get("dtype")
        if not ev.get("refused") and dtype in DTYPES:
            self.dtype = str(dtype)
            self.dtype_switched = True
        changes.session = True
        self._log(changes, ev, "command", dtype_switch_line(dtype, ev.get("refused")))

    def _on_telemetry(self, ev: dict, changes: Changes) -> None:
        self.telemetry = {k: v for k, v in ev.items() if k not in ("seq", "type")}
        changes.telemetry = True

    def _on_error(self, ev: dict, changes: Changes) -> None:
        tid = ev.get("track")
        if isinstance(tid, str) and tid in self.tracks:
            self.tracks[tid].error = str(ev.get("message"))
            changes.tracks.add(tid)
        self._log(changes, ev, "error", f"error: {ev.get('message')}", tid if isinstance(tid, str) else None)

    def _on_track_done(self, ev: dict, changes: Changes) -> None:
        tr = self._track(ev, changes)
        if tr is None:
            return
        tr.done_reason = str(ev.get("reason") or "")
        if tr.state not in ("failed", "stopped"):
            tr.state = "done"
        if ev.get("best_sha"):
            tr.best_sha = ev.get("best_sha")
        sp = ev.get("best_speedup")
        if isinstance(sp, (int, float)):
            tr.best_speedup = float(sp)
        self._log(changes, ev, "done", f"done ({tr.done_reason}), best {fmt_speedup(tr.best_speedup)}", tr.id)

    # -- queries -----------------------------------------------------------------------------
    @staticmethod
    def cand_name(tr: Track, sha: object) -> str:
        """``"#n "`` for a candidate the track knows (empty otherwise), to put before its sha."""
        c = tr.candidates.get(sha) if isinstance(sha, str) else None
        return f"#{c.num} " if c is not None else ""

    def baselines(self) -> list[str]:
        """Every baseline label seen in any timing, reward baselines first."""
        seen: dict[str, None] = {}
        for tr in self.tracks.values():
            if tr.baseline:
                seen[tr.baseline] = None
        for tr in self.tracks.values():
            for c in tr.candidates.values():
                for label in (c.timed or {}).get("times_ms", {}) or {}:
                    if label != CANDIDATE_LABEL:
                        seen[label] = None
        return list(seen)

    def queue(self) -> list[Track]:
        """Tracks that have not finished, in queue order."""
        return [t for t in self.tracks.values() if t.state in ("queued", "running", "paused")]

    def geomean_series(self) -> list[tuple[float, float]]:
        """The geomean of the best speedups against session seconds, held from the last new best
        to the newest event, so the plot's time axis covers the session so far, not just the
        span in which bests were found."""
        series = list(self.best_over_time)
        end = self.elapsed(self.t_last)
        if series and end > series[-1][0]:
            series.append((end, series[-1][1]))
        return series

    def geomean_best(self, baseline: str | None = None) -> float | None:
        return geomean(t.speedup_vs(baseline) or 0 for t in self.tracks.values())


#: event type -> the SessionModel method that folds it (types it does not know are counted, not shown)
_HANDLERS: dict[str, Callable[[SessionModel, dict, Changes], None]] = {
    ev_schema.SESSION_STARTED: SessionModel._on_session_started,
    ev_schema.SESSION_RESUMED: SessionModel._on_session_resumed,
    ev_schema.SESSION_ENDED: SessionModel._on_session_ended,
    ev_schema.TRACK_ADDED: SessionModel._on_track_added,
    ev_schema.TRACK_STATE: SessionModel._on_track_state,
    ev_schema.STAGE: SessionModel._on_stage,
    ev_schema.CANDIDATE: SessionModel._on_candidate,
    ev_schema.COMPILED: SessionModel._on_measure,
    ev_schema.CHECKED: SessionModel._on_measure,
    ev_schema.TIMED: SessionModel._on_measure,
    ev_schema.PROFILED: SessionModel._on_measure,
    ev_schema.PROFILING_ENABLED: SessionModel._on_profiling_enabled,
    ev_schema.PLAN: SessionModel._on_plan,
    ev_schema.LLM_DELTA: SessionModel._on_llm_delta,
    ev_schema.LLM_CALL: SessionModel._on_llm_call,
    ev_schema.PATCH: SessionModel._on_patch,
    ev_schema.REWARD: SessionModel._on_reward,
    ev_schema.BEST: SessionModel._on_best,
    ev_schema.DECISION: SessionModel._on_decision,
    ev_schema.COMMAND: SessionModel._on_command,
    ev_schema.HINT: SessionModel._on_hint,
    ev_schema.TELEMETRY: SessionModel._on_telemetry,
    ev_schema.DTYPE_SWITCH: SessionModel._on_dtype_switch,
    ev_schema.ERROR: SessionModel._on_error,
    ev_schema.TRACK_DONE: SessionModel._on_track_done,
}


def _short(v: object) -> str:
    s = str(v).replace("\n", " ")
    return s if len(s) <= 40 else s[:37] + "…"


def _shape_from_id(tid: str) -> tuple[int, int, int]:
    try:
        dims = tid.split("-")[0].split("x")
        return (int(dims[0]), int(dims[1]), int(dims[2]))
    except (ValueError, IndexError):
        return (0, 0, 0)


def _acc_from_id(tid: str) -> str:
    return tid.rsplit("-", 1)[-1] if "-" in tid else "f32"


def _describe_measure(typ: str, ev: dict, num: int) -> str:
    """One log line for a compiled / checked / timed / profiled event of candidate ``#num``."""
    if typ == ev_schema.COMPILED:
        if not ev.get("ok"):
            errs = ev.get("errors") or []
            first = errs[0].get("message") if errs and isinstance(errs[0], dict) else (errs[0] if errs else "")
            return f"#{num} compile failed: {_short(first)}"
        p = ev.get("ptxas") or {}
        cached = " (cached)" if ev.get("cached") else ""
        return (f"#{num} compiled in {float(ev.get('seconds') or 0):.1f}s{cached}: {p.get('registers', '?')} regs, "
                f"{p.get('smem_bytes', 0) // 1024 if isinstance(p.get('smem_bytes'), int) else '?'} KiB smem, "
                f"spills {p.get('spill_store_bytes', 0)}/{p.get('spill_load_bytes', 0)} B")
    if typ == ev_schema.CHECKED:
        if ev.get("ok"):
            return f"#{num} check ok (rel err {ev.get('rel_err', 0):.2e} ≤ {ev.get('bound', 0):.2e})"
        return f"#{num} check failed: {ev.get('status')} {ev.get('failed') or ''} {_short(ev.get('detail') or '')}"
    if typ == ev_schema.TIMED:
        tm = ev.get("times_ms") or {}
        return (f"#{num} timed ({ev.get('mode', 'offline')}): {fmt_ms(tm.get(CANDIDATE_LABEL))}, "
                f"{fmt_speedup(ev.get('speedup'))} vs {ev.get('baseline')}")
    if typ == ev_schema.PROFILED:
        ctx = " → in context" if ev.get("in_context") else ""
        return f"#{num} profiled: {ev.get('verdict')}{ctx}"
    return typ
