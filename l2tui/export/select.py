"""Which kernel of a session goes into the export, one per shape.

Rules (the README, "Export" repeats them for users):

* per track, the last ``decision`` event with action ``accept`` names the
  kernel (the loop records one, ``by: policy``, each time a kernel becomes the
  track's best; the user's own accept is ``by: user``); a later ``reject`` of
  that kernel cancels it;
* otherwise (unless ``only_accepted``) the kernel that passed every check it
  was given (``checked`` events, all ``ok``) and has a ``timed`` event, with the
  highest speedup; a kernel the user rejected is never picked this way;
* a kernel that ever failed a check is never exported, even when accepted (it
  would give wrong answers in someone's model); a warning says so;
* a shape with tracks for both accumulators takes the f32 one unless ``acc``
  asks otherwise, because fp16 accumulation loses precision silently.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from harness.shapes import Shape
from l2tui import events as ev_schema
from l2tui.errors import SessionError
from l2tui.session import check_shape


@dataclass
class Timing:
    """The best-known timing of one kernel on one track (offline mode preferred)."""

    mode: str
    times_ms: dict[str, float]
    baseline: str | None
    speedup: float | None
    roofline_ms: float | None = None
    autotune: dict | None = None  # the harness's cuBLASLt autotune record of the same request
    cublas_variant: str | None = None  # the layout of the cublas time: "nn" or "tn"


@dataclass
class Choice:
    """One kernel chosen for one shape, with everything the manifest needs."""

    track: str
    shape: Shape
    acc: str
    sha: str
    selected_by: str  # "accepted" | "best_passed"
    accepted_by: str | None  # "user" | "policy" (the loop accepts each new best) | None
    step: int | None
    origin: str | None
    policy: str | None
    family: str | None
    flags: list[str]
    rel_err: float | None
    bound: float | None
    timing: Timing | None
    baseline: str | None  # the track's reward baseline


@dataclass
class Selection:
    choices: list[Choice] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


@dataclass
class _Track:
    track: str
    shape: Shape
    acc: str
    baseline: str | None
    accepted: str | None = None
    accepted_by: str | None = None
    rejected: set[str] = field(default_factory=set)
    candidates: dict[str, dict] = field(default_factory=dict)
    check_ok: dict[str, bool] = field(default_factory=dict)
    check_last: dict[str, dict] = field(default_factory=dict)
    timings: dict[str, dict[str, dict]] = field(default_factory=dict)  # sha -> mode -> last timed event


def _parse_track_id(track: str) -> tuple[Shape, str] | None:
    try:
        dims, acc = track.rsplit("-", 1)
        m, n, k = (int(x) for x in dims.split("x"))
        return Shape(m, n, k), acc
    except (ValueError, AttributeError):
        return None


def _damaged(ev: dict, what: str) -> SessionError:
    seq = ev.get("seq") if isinstance(ev.get("seq"), int) else "?"
    typ = ev.get("type") if isinstance(ev.get("type"), str) and str(ev.get("type")).isidentifier() else "?"
    return SessionError(f"events.jsonl: event seq {seq} ({typ}) has a malformed {what}; the session file is damaged")


def _check_fields(ev: dict) -> None:
    """The fields an export copies into a manifest or a build, checked for their types."""
    typ = ev.get("type")
    for key in ("baseline", "mode", "origin", "policy", "acc"):
        if ev.get(key) is not None and not isinstance(ev.get(key), str):
            raise _damaged(ev, key)
    if typ == ev_schema.CANDIDATE:
        flags = ev.get("flags")
        if flags is not None and not (isinstance(flags, list) and all(isinstance(f, str) for f in flags)):
            raise _damaged(ev, "flags")
    if typ == ev_schema.TIMED:
        times = ev.get("times_ms")
        if times is not None and not isinstance(times, dict):
            raise _damaged(ev, "times_ms")


def _tracks(events: Iterable[dict]) -> dict[str, _Track]:
    tracks: dict[str, _Track] = {}

    def get(tid: object) -> _Track | None:
        if not isinstance(tid, str):
            return None
        t = tracks.get(tid)
        if t is None:  # events of a track whose track_added we never saw: infer from the id
            parsed = _parse_track_id(tid)
            if parsed is None:
                return None
            t = tracks[tid] = _Track(tid, parsed[0], parsed[1], None)
        return t

    t: _Track | None
    for ev in events:
        typ = ev.get("type")
        if typ in (ev_schema.TRACK_ADDED, ev_schema.CANDIDATE, ev_schema.TIMED):
            _check_fields(ev)
        if typ == ev_schema.TRACK_ADDED:
            tid = ev.get("track")
            shp = ev.get("shape")
            if isinstance(tid, str):
                old = tracks.get(tid)
                shape = check_shape(shp, f"events.jsonl: event seq {ev.get('seq') if isinstance(ev.get('seq'), int) else '?'} "
                                         "(track_added)")
                t = _Track(tid, shape, str(ev.get("acc") or "f32"), ev.get("baseline"))
                if old is not None:  # keep what we learnt before a re-add (resume)
                    t.__dict__.update({k: v for k, v in old.__dict__.items() if k not in ("shape", "acc", "baseline")})
                tracks[tid] = t
            continue
        t = get(ev.get("track"))
        if t is None:
            continue
        sha = ev.get("sha")
        if typ == ev_schema.CANDIDATE and isinstance(sha, str):
            t.candidates.setdefault(sha, ev)
        elif typ == ev_schema.CHECKED and isinstance(sha, str):
            ok = bool(ev.get("ok"))
            t.check_ok[sha] = t.check_ok.get(sha, True) and ok
            if ok == t.check_ok[sha]:  # the last passing check, or the last failure
                t.check_last[sha] = ev
        elif typ == ev_schema.TIMED and isinstance(sha, str):
            t.timings.setdefault(sha, {})[str(ev.get("mode") or "offline")] = ev
        elif typ == ev_schema.DECISION and isinstance(sha, str):
            action = ev.get("action")
            if action == "accept":
                t.accepted = sha
                t.accepted_by = str(ev.get("by") or "user")
                t.rejected.discard(sha)
            elif action == "reject":
                t.rejected.add(sha)
                if t.accepted == sha:
                    t.accepted = None
    return tracks


def _timing(t: _Track, sha: str) -> Timing | None:
    modes = t.timings.get(sha)
    if not modes:
        return None
    ev = modes.get("offline") or next(iter(modes.values()))
    times = {str(k): float(v) for k, v in (ev.get("times_ms") or {}).items() if isinstance(v, (int, float)) and v > 0}
    sp = ev.get("speedup")
    rl = ev.get("roofline_ms")
    return Timing(
        str(ev.get("mode") or "offline"),
        times,
        ev.get("baseline"),
        float(sp) if isinstance(sp, (int, float)) else None,
        float(rl) if isinstance(rl, (int, float)) else None,
        ev_schema.autotune_record(ev.get("autotune")),
        ev.get("cublas_variant") if ev.get("cublas_variant") in ("nn", "tn") else None,
    )


def _choice(t: _Track, sha: str, how: str) -> Choice:
    cand = t.candidates.get(sha, {})
    chk = t.check_last.get(sha, {})

    def num(x: object) -> float | None:
        return float(x) if isinstance(x, (int, float)) else None

    return Choice(
        track=t.track,
        shape=t.shape,
        acc=t.acc,
        sha=sha,
        selected_by=how,
        accepted_by=t.accepted_by if how == "accepted" else None,
        step=cand.get("step") if isinstance(cand.get("step"), int) else None,
        origin=cand.get("origin"),
        policy=cand.get("policy"),
        family=cand.get("family"),
        flags=[str(f) for f in (cand.get("flags") or [])],
        rel_err=num(chk.get("rel_err")),
        bound=num(chk.get("bound")),
        timing=_timing(t, sha),
        baseline=t.baseline,
    )


def _pick(t: _Track, only_accepted: bool, warnings: list[str]) -> Choice | None:
    if t.accepted is not None:
        if t.check_ok.get(t.accepted) is False:
            warnings.append(
                f"{t.track}: accepted kernel {t.accepted[:12]} failed a check; not exported"
            )
        else:
            if t.accepted not in t.check_ok:
                warnings.append(f"{t.track}: accepted kernel {t.accepted[:12]} was never checked")
            if _timing(t, t.accepted) is None:
                warnings.append(f"{t.track}: accepted kernel {t.accepted[:12]} was never timed; "
                                "exported without the cuBLAS-fallback guard")
            return _choice(t, t.accepted, "accepted")
    if only_accepted:
        return None
    best: tuple[float, int, str] | None = None
    for sha, ok in t.check_ok.items():
        if not ok or sha in t.rejected:
            continue
        tm = _timing(t, sha)
        if tm is None or tm.speedup is None:
            continue
        step = t.candidates.get(sha, {}).get("step")
        key = (tm.speedup, -(step if isinstance(step, int) else 1 << 30), sha)
        if best is None or key > best:
            best = key
    return _choice(t, best[2], "best_passed") if best else None


def select_kernels(
    events: Iterable[dict],
    *,
    shapes: set[Shape] | None = None,
    only_accepted: bool = False,
    acc: str = "any",
) -> Selection:
    """Pick at most one kernel per shape from a session's events."""
    sel = Selection()
    by_shape: dict[Shape, list[Choice]] = {}
    for t in _tracks(events).values():
        if shapes is not None and t.shape not in shapes:
            continue
        if acc != "any" and t.acc != acc:
            continue
        c = _pick(t, only_accepted, sel.warnings)
        if c is not None:
            by_shape.setdefault(t.shape, []).append(c)
    for shape in sorted(by_shape):
        cs = by_shape[shape]
        # f32 accumulation first, then the user's acceptance, then speed
        cs.sort(key=lambda c: (c.acc != "f32", c.selected_by != "accepted",
                               -(c.timing.speedup if c.timing and c.timing.speedup else 0.0)))
        if len(cs) > 1:
            sel.warnings.append(f"{shape}: tracks for several accumulators; exported the {cs[0].acc} one")
        sel.choices.append(cs[0])
    return sel
