"""The records of ``events.jsonl``: one dataclass per event type, one parse, one dump.

Every writer (the agent loop, the sweep, the session itself) and every reader
(resume, replay, export, rl-data) meets here, so an event's fields and their
types are written down once.  What this module promises:

* :func:`parse` turns one JSON object into a typed :class:`Event` and checks
  the type of every field it knows.  A wrong type stops the reader with one
  :class:`~l2tui.errors.SessionError` line naming the event's seq, its type and
  the field (never the value: sessions are files a user may be handed).
* Fields it does not know are kept in :attr:`Event.extra`, and an event type it
  does not know loads as a :class:`GenericEvent`, so a session written by a
  newer l2tui (or by the sweep, which adds its GPU's id to some events) still
  opens, and :func:`to_dict` gives back the same object, keys in the same
  order, so a parse/dump round trip is byte-identical on disk.
* Every payload field may be absent or ``null``: sessions written before a
  field existed must keep loading.  Only ``type`` itself is required.

``SCHEMA_VERSION`` is written into the first event (``session_started``'s
``schema``) of a new session; a session without it is version 1.  The number
goes up only for a change an older reader would misread (a field that changes
its meaning or type); new fields and new event types are additive and keep it.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Iterable, Sequence, TypedDict, Union

from .errors import SessionError

if TYPE_CHECKING:
    from harness.gemm_shape import Shape

SCHEMA_VERSION = 1

# ------------------------------------------------------------------ event types
SESSION_STARTED = "session_started"
SESSION_RESUMED = "session_resumed"
SESSION_ENDED = "session_ended"
TRACK_ADDED = "track_added"
TRACK_STATE = "track_state"
TRACK_DONE = "track_done"
STAGE = "stage"
PLAN = "plan"
LLM_CALL = "llm_call"
LLM_DELTA = "llm_delta"
LLM_RETRY = "llm_retry"
PATCH = "patch"
CANDIDATE = "candidate"
COMPILED = "compiled"
CHECKED = "checked"
TIMED = "timed"
REWARD = "reward"
BEST = "best"
DECISION = "decision"
PROFILING_ENABLED = "profiling_enabled"
PROFILED = "profiled"
CHECKPOINT = "checkpoint"
COMMAND = "command"
HINT = "hint"
ERROR = "error"
TELEMETRY = "telemetry"
DTYPE_SWITCH = "dtype_switch"

#: the keys every event has; the payload is everything else
BASE_KEYS = ("seq", "time", "type")


# ------------------------------------------------------------------ records
@dataclass(kw_only=True)
class Event:
    """Fields every event has.  ``extra`` holds the fields this l2tui does not know."""

    TYPE: ClassVar[str] = ""

    seq: int | None = None
    time: float | None = None
    type: str = ""
    extra: dict[str, object] = field(default_factory=dict, repr=False, compare=False)
    #: the keys of the object it was parsed from, in order (None when built in code)
    keys: tuple[str, ...] | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.TYPE:
            self.type = self.TYPE


@dataclass(kw_only=True)
class GenericEvent(Event):
    """An event type this l2tui does not know: loaded as is, its payload all in ``extra``."""


@dataclass(kw_only=True)
class TrackEvent(Event):
    """An event about one track (``track`` is None for a session-wide hint, error or command)."""

    track: str | None = None


@dataclass(kw_only=True)
class StepEvent(TrackEvent):
    """An event of one step of a track (step 0 is the seed)."""

    step: int | None = None


@dataclass(kw_only=True)
class SessionStarted(Event):
    TYPE: ClassVar[str] = SESSION_STARTED
    config: dict | None = None
    gpu: dict | None = None
    versions: dict | None = None
    schema: int | None = None


@dataclass(kw_only=True)
class SessionResumed(Event):
    TYPE: ClassVar[str] = SESSION_RESUMED
    from_seq: int | None = None


@dataclass(kw_only=True)
class SessionEnded(Event):
    TYPE: ClassVar[str] = SESSION_ENDED
    reason: str | None = None


@dataclass(kw_only=True)
class TrackAdded(TrackEvent):
    TYPE: ClassVar[str] = TRACK_ADDED
    shape: list[int] | None = field(default=None, metadata={"check": "shape"})
    acc: str | None = None
    baseline: str | None = None
    gpu: object = None  # the sweep's GPU uuid


@dataclass(kw_only=True)
class TrackState(TrackEvent):
    TYPE: ClassVar[str] = TRACK_STATE
    state: str | None = None
    requeued: bool | None = None  # the sweep: the track's GPU was lost, it waits for another
    gpu: object = None
    reason: str | None = None


@dataclass(kw_only=True)
class TrackDone(TrackEvent):
    TYPE: ClassVar[str] = TRACK_DONE
    reason: str | None = None
    best_sha: str | None = None
    best_speedup: float | None = None
    gpu: object = None


@dataclass(kw_only=True)
class Stage(StepEvent):
    TYPE: ClassVar[str] = STAGE
    stage: str | None = None
    status: str | None = None  # "start" | "end"
    detail: str | None = None


@dataclass(kw_only=True)
class Plan(StepEvent):
    TYPE: ClassVar[str] = PLAN
    role: str | None = None
    text: str | None = None


@dataclass(kw_only=True)
class LlmCall(StepEvent):
    TYPE: ClassVar[str] = LLM_CALL
    role: str | None = None
    model: str | None = None
    usage: dict | None = None
    seconds: float | None = None
    ok: bool | None = None
    error: str | None = None
    attempts: int | None = None


@dataclass(kw_only=True)
class LlmDelta(StepEvent):
    TYPE: ClassVar[str] = LLM_DELTA
    role: str | None = None
    text: str | None = None


@dataclass(kw_only=True)
class LlmRetry(StepEvent):
    TYPE: ClassVar[str] = LLM_RETRY
    role: str | None = None
    attempt: int | None = None
    error: str | None = None
    delay_s: float | None = None


@dataclass(kw_only=True)
class Patch(StepEvent):
    TYPE: ClassVar[str] = PATCH
    role: str | None = None
    ok: bool | None = None
    error: str | None = None


@dataclass(kw_only=True)
class Candidate(StepEvent):
    TYPE: ClassVar[str] = CANDIDATE
    sha: str | None = None
    parent: str | None = None
    origin: str | None = None
    policy: str | None = None
    family: str | None = None
    diff: str | None = None
    flags: list[str] | None = None
    # a kernel imported from a bench run (tools/session_from_bench.py): where it came from
    file: str | None = None
    link: str | None = None
    bench_file: str | None = None
    bench_label: str | None = None


@dataclass(kw_only=True)
class Compiled(StepEvent):
    TYPE: ClassVar[str] = COMPILED
    sha: str | None = None
    ok: bool | None = None
    ptxas: dict | None = None
    errors: list | None = None
    seconds: float | None = None
    cached: bool | None = None


@dataclass(kw_only=True)
class Checked(StepEvent):
    TYPE: ClassVar[str] = CHECKED
    sha: str | None = None
    ok: bool | None = None
    status: str | None = None
    failed: str | None = None
    detail: str | None = None
    rel_err: float | None = None
    bound: float | None = None
    # the sweep's worker bookkeeping, shown as recorded
    worker_s: object = None
    phases: object = None
    gpu: object = None
    batch: object = None
    # an imported bench result: each check's verdict, and that it was imported (``source``)
    checks: dict | None = None
    source: str | None = None


@dataclass(kw_only=True)
class Timed(StepEvent):
    TYPE: ClassVar[str] = TIMED
    sha: str | None = None
    mode: str | None = None  # "offline" | "server"
    times_ms: dict | None = None
    roofline_ms: float | None = None
    baseline: str | None = None
    speedup: float | None = None
    gpu: object = None
    timing: object = None
    # the harness's cuBLASLt autotune of this request (best_index, available, requested,
    # cublaslt_version): an export pins that algorithm in its fallback
    autotune: dict | None = None
    # the layout of the ``cublas`` time ("nn", or "tn" on a transposed copy of B): an export pins
    # cublasGemmEx only for "nn", the call its fallback makes
    cublas_variant: str | None = None
    # an imported bench result (``source``) keeps the bench's own statistics of its times
    source: str | None = None
    p90_ms: object = None
    spread: object = None
    device_ms: object = None
    reps: object = None
    clocks: object = None
    detail_times_ms: object = None


@dataclass(kw_only=True)
class Reward(StepEvent):
    TYPE: ClassVar[str] = REWARD
    sha: str | None = None
    reward: float | None = None
    parts: dict | None = None
    kind: str | None = None
    role: str | None = None
    origin: str | None = None
    plan: str | None = None
    speedup: float | None = None


@dataclass(kw_only=True)
class Best(TrackEvent):
    TYPE: ClassVar[str] = BEST
    sha: str | None = None
    speedup: float | None = None
    baseline: str | None = None
    times_ms: dict | None = None


@dataclass(kw_only=True)
class Decision(TrackEvent):
    TYPE: ClassVar[str] = DECISION
    sha: str | None = None
    action: str | None = None  # "accept" | "reject" | "pin" | "unpin"
    by: str | None = None  # "user" | "policy"


@dataclass(kw_only=True)
class ProfilingEnabled(StepEvent):
    TYPE: ClassVar[str] = PROFILING_ENABLED
    reason: str | None = None


@dataclass(kw_only=True)
class Profiled(StepEvent):
    TYPE: ClassVar[str] = PROFILED
    sha: str | None = None
    verdict: str | None = None
    metrics: dict | None = None
    in_context: bool | None = None


@dataclass(kw_only=True)
class Checkpoint(StepEvent):
    TYPE: ClassVar[str] = CHECKPOINT
    steps_done: int | None = None
    stable: int | None = None
    structure: str | None = None
    tokens: int | None = None
    wall_s: float | None = None
    best_sha: str | None = None
    best_speedup: float | None = None
    profiling_enabled: bool | None = None


@dataclass(kw_only=True)
class Command(TrackEvent):
    TYPE: ClassVar[str] = COMMAND
    name: str | None = None
    args: dict | None = None


@dataclass(kw_only=True)
class Hint(TrackEvent):
    TYPE: ClassVar[str] = HINT
    text: str | None = None


@dataclass(kw_only=True)
class Error(TrackEvent):
    TYPE: ClassVar[str] = ERROR
    message: str | None = None


@dataclass(kw_only=True)
class Telemetry(Event):
    TYPE: ClassVar[str] = TELEMETRY
    sm_clock_mhz: float | None = None
    mem_clock_mhz: float | None = None
    temp_c: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    util_pct: float | None = None
    mem_used_mib: float | None = None


@dataclass(kw_only=True)
class DtypeSwitch(Event):
    """The answer to a ``dtype`` steering command: the element type in force after it
    (``dtype``), the one asked for (``requested``) and, when the loop refused, why (``refused``,
    one line; None when the switch was made). A reader folds it to know a session's type after
    a switch, which ``session_started``'s config no longer says."""

    TYPE: ClassVar[str] = DTYPE_SWITCH
    dtype: str | None = None
    requested: str | None = None
    refused: str | None = None


#: event type -> its record class (a type not here loads as :class:`GenericEvent`)
EVENT_TYPES: dict[str, type[Event]] = {cls.TYPE: cls for cls in (
    SessionStarted, SessionResumed, SessionEnded, TrackAdded, TrackState, TrackDone, Stage, Plan,
    LlmCall, LlmDelta, LlmRetry, Patch, Candidate, Compiled, Checked, Timed, Reward, Best, Decision,
    ProfilingEnabled, Profiled, Checkpoint, Command, Hint, Error, Telemetry, DtypeSwitch)}


# ------------------------------------------------------------------ validation
_NOT_PAYLOAD = frozenset(("seq", "time", "type", "extra", "keys"))


@dataclass(frozen=True)
class _Spec:
    name: str
    hint: object
    check: str | None


_SPECS: dict[type[Event], tuple[_Spec, ...]] = {}


def _specs(cls: type[Event]) -> tuple[_Spec, ...]:
    """The payload fields of ``cls`` with their resolved type hints (computed once per class)."""
    got = _SPECS.get(cls)
    if got is None:
        hints = typing.get_type_hints(cls)
        got = tuple(_Spec(f.name, hints[f.name], f.metadata.get("check"))
                    for f in dataclasses.fields(cls) if f.name not in _NOT_PAYLOAD)
        _SPECS[cls] = got
    return got


def _fits(value: object, hint: object) -> bool:
    """Whether a JSON value fits a field's annotation (an int is a float; a bool is neither)."""
    if hint is object:
        return True
    origin = typing.get_origin(hint)
    if origin is Union or origin is types.UnionType:
        return any(_fits(value, h) for h in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    if hint is dict or origin is dict:
        return isinstance(value, dict)
    if hint is list or origin is list:
        args = typing.get_args(hint)
        return isinstance(value, list) and (not args or all(_fits(v, args[0]) for v in value))
    raise TypeError(f"events: no check for annotation {hint!r}")  # a programming error in this module


def shown_seq(obj: object) -> str:
    """The seq of a raw event for a message ("?" when it has none fit to print)."""
    seq = obj.get("seq") if isinstance(obj, dict) else None
    return str(seq) if isinstance(seq, int) and not isinstance(seq, bool) else "?"


def shown_type(obj: object) -> str:
    """The type of a raw event for a message: an identifier of at most 40 characters, else "?"."""
    typ = obj.get("type") if isinstance(obj, dict) else None
    return typ if isinstance(typ, str) and typ.isidentifier() and len(typ) <= 40 else "?"


def damaged(obj: object, what: str, where: str = "events.jsonl", *, writing: bool = False) -> SessionError:
    """The one line for a field of an event that has the wrong type (read back, or about to be written)."""
    if writing:
        return SessionError(f"{where}: event seq {shown_seq(obj)} ({shown_type(obj)}) would have a malformed "
                            f"{what}; it was not written (the code that sent it has a bug)")
    return SessionError(f"{where}: event seq {shown_seq(obj)} ({shown_type(obj)}) has a malformed {what}; "
                        "the session file is damaged")


def check_shape(value: object, where: str) -> Shape:
    """A recorded ``[M, N, K]`` as a :class:`harness.shapes.Shape`, or one :class:`SessionError` line.

    A shape of two elements, a string, a float or a dimension past the harness's
    limit must stop a reader with the place it is in, not with a traceback (and
    the bad value is not repeated).
    """
    from harness.shapes import MAX_DIM, Shape

    if isinstance(value, list) and len(value) == 3 and all(
            isinstance(d, int) and not isinstance(d, bool) and 1 <= d <= MAX_DIM for d in value):
        return Shape(*value)
    raise SessionError(f"{where}: shape must be [M, N, K], three integers between 1 and {MAX_DIM}; "
                       "the session file is damaged")


#: the integer fields of the harness's autotune record a ``timed`` event keeps
AUTOTUNE_FIELDS = ("best_index", "available", "requested", "cublaslt_version")


class LibraryFields(TypedDict, total=False):
    """The library fields of a ``timed`` event, as :func:`library_fields` gives them (a keyword
    argument set for :class:`Timed`)."""

    autotune: dict[str, int]
    cublas_variant: str


def library_fields(extra: object) -> LibraryFields:
    """The fields of an evaluation's ``extra`` a ``timed`` event keeps about the libraries timed
    beside the kernel (what an export needs to pin one): ``autotune`` and ``cublas_variant``,
    each only when present."""
    extra = extra if isinstance(extra, dict) else {}
    out: LibraryFields = {}
    rec = autotune_record(extra.get("autotune"))
    if rec:
        out["autotune"] = rec
    variant = extra.get("cublas_variant")
    if variant == "nn" or variant == "tn":
        out["cublas_variant"] = variant
    return out


def autotune_record(raw: object) -> dict[str, int] | None:
    """What a ``timed`` event keeps of an evaluation's cuBLASLt autotune (its ``extra["autotune"]``):
    the integer fields an export needs to pin the same algorithm, or None when there is none."""
    if not isinstance(raw, dict) or not isinstance(raw.get("best_index"), int):
        return None
    return {k: raw[k] for k in AUTOTUNE_FIELDS
            if isinstance(raw.get(k), int) and not isinstance(raw.get(k), bool)}


def parse(obj: object, *, where: str = "events.jsonl", writing: bool = False) -> Event:
    """One event as its typed record; one :class:`SessionError` line when a field is malformed.

    ``where`` names the file in the message (a path, or just ``events.jsonl``);
    ``writing`` says the event is about to be written, so a bad field is the
    writer's bug rather than a damaged file.
    """
    if not isinstance(obj, dict):
        raise SessionError(f"{where}: an event is not a JSON object; the session file is damaged")
    typ = obj.get("type")
    if not isinstance(typ, str):
        raise damaged(obj, "type", where, writing=writing)
    seq, when = obj.get("seq"), obj.get("time")
    if seq is not None and not _fits(seq, int):
        raise damaged(obj, "seq", where, writing=writing)
    if when is not None and not _fits(when, float):
        raise damaged(obj, "time", where, writing=writing)
    cls = EVENT_TYPES.get(typ, GenericEvent)
    values: dict[str, Any] = {}   # each value checked against its field's hint (_fits) before the call
    for spec in _specs(cls):
        if spec.name not in obj:
            continue
        v = obj[spec.name]
        if spec.check == "shape" and v is not None:
            if writing:
                try:
                    check_shape(v, where)
                except SessionError:
                    raise damaged(obj, spec.name, where, writing=True) from None
            else:
                check_shape(v, f"{where}: event seq {shown_seq(obj)} ({shown_type(obj)})")
        elif not _fits(v, spec.hint):
            raise damaged(obj, spec.name, where, writing=writing)
        values[spec.name] = v
    extra = {k: v for k, v in obj.items() if k not in BASE_KEYS and k not in values}
    if writing and extra and cls is not GenericEvent:
        raise SessionError(f"{where}: event seq {shown_seq(obj)} ({shown_type(obj)}) would have unknown "
                           f"field(s) {', '.join(sorted(extra))[:200]}; it was not written (the code that sent it "
                           "has a bug)")
    ev = cls(seq=seq, time=when, extra=extra, keys=tuple(obj), **values)
    ev.type = typ
    return ev


def parse_all(objs: Iterable[object], *, where: str = "events.jsonl") -> list[Event]:
    """Every event of a session, parsed in order (the first malformed one stops it)."""
    return [parse(o, where=where) for o in objs]


def to_dict(ev: Event) -> dict[str, object]:
    """The JSON object of an event: for a parsed one the object it came from (same keys, same
    order); for one built in code ``seq``, ``time``, ``type`` (when set), then its fields in the
    order the class declares them, then ``extra``."""
    known = {s.name for s in _specs(type(ev))}

    def value(k: str) -> object:
        return getattr(ev, k) if k in known or k in BASE_KEYS else ev.extra[k]

    out: dict[str, object] = {}
    if ev.keys is not None:
        for k in ev.keys:
            if k in BASE_KEYS or k in known or k in ev.extra:
                out[k] = value(k)
        for s in _specs(type(ev)):  # a field set after parsing
            if s.name not in out and getattr(ev, s.name) is not None:
                out[s.name] = getattr(ev, s.name)
    else:
        for k in BASE_KEYS:
            if k == "type" or getattr(ev, k) is not None:
                out[k] = getattr(ev, k)
        for s in _specs(type(ev)):
            out[s.name] = getattr(ev, s.name)
    for k, v in ev.extra.items():
        out.setdefault(k, v)
    return out


def payload(ev: Event) -> dict[str, object]:
    """An event's fields without ``seq``, ``time`` and ``type`` (what ``Session.append`` takes)."""
    return {k: v for k, v in to_dict(ev).items() if k not in BASE_KEYS}


def written_payload(ev: Event) -> dict[str, object]:
    """The payload a writer sends for a record built in code: its fields that are set (not
    ``None``), in the order the class declares them, then ``extra``."""
    out: dict[str, object] = {}
    for s in _specs(type(ev)):
        v = getattr(ev, s.name)
        if v is not None:
            out[s.name] = v
    for k, v in ev.extra.items():
        out.setdefault(k, v)
    return out


def schema_of(events: Sequence[object]) -> int:
    """The events schema a session was written with: the first event's ``schema``, else 1."""
    first = events[0] if events else None
    if isinstance(first, Event):
        first = to_dict(first)
    if isinstance(first, dict) and first.get("type") == SESSION_STARTED:
        v = first.get("schema")
        if isinstance(v, int) and not isinstance(v, bool) and v >= 1:
            return v
    return 1


__all__ = [name for name in dir() if (name.isupper() and not name.startswith("_")) or name in (
    "Event", "GenericEvent", "TrackEvent", "StepEvent", "parse", "parse_all", "to_dict", "payload",
    "schema_of", "written_payload", "check_shape", "damaged", "shown_seq", "shown_type")] + [c.__name__ for c in EVENT_TYPES.values()]
