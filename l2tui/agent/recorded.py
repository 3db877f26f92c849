"""Evaluations recorded on a GPU, replayed where there is none (CI, demos).

``RecordingEvaluator`` wraps a real ``harness.evaluate.Evaluator`` and saves
every ``Evaluation.to_dict()`` (and profile) it returns, keyed by
``sha256(source) : MxNxK : acc``.  ``RecordedEvaluator`` replays them:

* by default the **build is always real** (``harness.build.build`` with real nvcc), so
  compile errors, ptxas reports and the debugger's inputs are genuine; a kernel that
  compiles and was recorded gets the recorded check/time result (with the live build
  substituted);
* with ``build="unrecorded"`` (``--recorded`` on the command line) a recorded kernel keeps
  the build the recording holds (its ptxas report, made by nvcc on the GPU machine) and is
  built neither here nor in the loop's compile stage (:meth:`recorded_build`): a CUTLASS
  configuration takes 20-60 s of nvcc, and replaying a recorded run should not cost that
  per candidate.  Kernels the recording lacks are still built for real;
* a kernel that compiles but was **not recorded** gets status
  ``"not_recorded"`` and a message saying so.  Nothing is invented: the loop
  treats it as "no result" (reward kind ``not_recorded``, reward 0, never a
  new best) and tests assert on that status explicitly.

Recording file (JSON)::

    {"meta": {"provisional": bool, "gpu": ..., "created": ..., "note": ..., "dtype": "fp16" | "bf16"},
     "records": {"<sha>:<MxNxK>:<acc>": <Evaluation dict>, ...},
     "profiles": {"<sha>:<MxNxK>:<acc>": <profile dict>, ...},
     "aliases": {"<sha now>": "<sha recorded>", ...}}

``aliases`` (optional) lets a recording outlive a change of a family template's text that does
not change its code: today's render of a recorded configuration has another sha256 but the same
translation unit, and ``tools/alias_recording.py`` maps the one to the other after checking that
(``nvcc -E`` of both). A lookup tries the source's own key first, then its alias.

``meta.dtype`` is the element type every recorded evaluation ran in (a recording without it is
fp16): a run of another type cannot replay it, since its kernels and baselines differ.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Sequence, cast

from ..session import sha256_text

if TYPE_CHECKING:
    from harness.channel import Record
    from harness.evaluate import Evaluation
    from harness.gemm_shape import Shape
    from harness.evaluator_protocol import Evaluator, ReplayEvaluator

NOT_RECORDED = "not_recorded"
#: the largest recording read; the bundled demo's is well under a megabyte
MAX_RECORDING_BYTES = 64 << 20


def _recording_schema() -> Record:
    """What a recording file may hold (harness.channel schemas): every record an evaluation's dict
    form, profiles bounded data, aliases sha256 to sha256; other top-level keys bounded data."""
    from harness.channel import Bool, Data, MapOf, Record, Str
    from harness.evaluate import EVALUATION_SCHEMA

    sha = Str(64, pattern=r"[0-9a-f]{64}")
    meta = Record({}, optional={"arch": Str(16, pattern=r"sm_\d+[a-z]?", null=True), "provisional": Bool(null=True),
                                "dtype": Str(8, pattern=r"fp16|bf16", null=True)},
                  extra=Data())
    return Record({}, optional={"meta": meta,
                                "records": MapOf(EVALUATION_SCHEMA, 1_000_000, 300),
                                "profiles": MapOf(Data(), 1_000_000, 300),
                                "aliases": MapOf(sha, 1_000_000, 64)}, extra=Data())


def load_recording(path: str | Path) -> dict:
    """A recording file read as data: at most MAX_RECORDING_BYTES, JSON, checked against its
    schema before anything reads a field. Raises UserError in one line naming the file."""
    from harness.channel import FrameError, loads, validate

    from ..errors import UserError

    p = Path(path)
    try:
        with open(p, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size > MAX_RECORDING_BYTES:
                raise FrameError(f"{size} bytes, more than the limit of {MAX_RECORDING_BYTES}")
            data = f.read(MAX_RECORDING_BYTES + 1)
        doc = validate(loads(data, MAX_RECORDING_BYTES), _recording_schema())
    except (OSError, FrameError) as e:
        reason = " ".join(str(e).split())[:300]
        raise UserError(f"cannot read recorded evaluations {p}: {reason}; record them with tools/record_evaluations.py") from None
    assert isinstance(doc, dict)
    return doc


def recording_dtype(meta: Mapping[str, object]) -> str:
    """The element type a recording's evaluations ran in: ``meta.dtype``, fp16 where it has none."""
    return str(meta.get("dtype") or "fp16")


def record_key(source: str, shape: Shape, acc: str) -> str:
    return f"{sha256_text(source)}:{shape.m}x{shape.n}x{shape.k}:{acc}"


def _to_dict(obj: object) -> dict:
    if obj is None:
        return {}
    if isinstance(obj, dict):
        return obj
    to_dict = getattr(obj, "to_dict", None)
    if callable(to_dict):
        return dict(to_dict())
    raise TypeError(f"cannot record {type(obj).__name__}")


def _wrap(d: dict) -> "Evaluation":
    """A recorded (or replay-made) evaluation as an :class:`harness.evaluate.Evaluation`, read as
    data; one that does not fit the schema is ``crashed`` with the field named."""
    from harness.channel import FrameError
    from harness.evaluate import Evaluation, evaluation_from_data

    try:
        return evaluation_from_data(d, "recorded evaluation")
    except FrameError as e:
        return Evaluation("crashed", None, message=" ".join(f"a malformed recorded evaluation: {e}".split())[:300])


class RecordedEvaluator:
    """A :class:`harness.evaluator_protocol.ReplayEvaluator`: replays recordings, builds with real nvcc.

    It does not batch (each kernel's figures were recorded alone), and its timing mode is the
    recording's (``mode`` None: a caller cannot switch it to server timing)."""

    can_batch = False
    replays_recording = True
    own_profiles = True
    mode: str | None = None

    def __init__(self, path: str | Path, *, arch: str | None = None, build: bool | str = True,
                 dtype: str | None = None):
        self.path = Path(path)
        doc = load_recording(self.path)
        self.meta: dict = doc.get("meta", {})
        self.dtype = recording_dtype(self.meta)
        if dtype is not None and dtype != self.dtype:
            from ..errors import UserError

            raise UserError(f"the recording {self.path} holds {self.dtype} evaluations but this run is {dtype}: "
                            f"replay it with --dtype {self.dtype}, or record {dtype} ones on a GPU "
                            f"(tools/record_evaluations.py)")
        self.records: dict[str, dict] = doc.get("records", {})
        self.profiles: dict[str, dict] = doc.get("profiles", {})
        aliases = doc.get("aliases", {})
        self.aliases: dict[str, str] = aliases if isinstance(aliases, dict) else {}
        self.arch = arch or self.meta.get("arch") or None
        self.do_build = build
        self.misses: list[str] = []

    @property
    def provisional(self) -> bool:
        return bool(self.meta.get("provisional"))

    def _key(self, source: str, shape: Shape, acc: str, table: dict | None = None) -> str:
        """The key ``source`` is recorded under in ``table`` (records by default): its own, else
        its alias's (module docstring); its own when neither is there."""
        table = self.records if table is None else table
        key = record_key(source, shape, acc)
        if key in table:
            return key
        sha, rest = key.split(":", 1)
        alias = self.aliases.get(sha)
        if isinstance(alias, str) and f"{alias}:{rest}" in table:
            return f"{alias}:{rest}"
        return key

    def holds(self, source: str, shape: Shape, acc: str = "f32") -> bool:
        """Whether the recording has a result for ``source`` on ``shape`` (its own or its alias's):
        what a search replaying it can propose (anything else could only come back not_recorded)."""
        return self._key(source, shape, acc) in self.records

    def _build(self, source: str, flags: Sequence[str] | None) -> dict | None:
        if not self.do_build:
            return None
        from harness.build import build

        return build(source, arch=self.arch, flags=list(flags or ()), dtype=self.dtype).to_dict()

    def _recorded_build(self, key: str, flags: Sequence[str] | None = None) -> dict | None:
        """The recording's own successful build of ``key`` (``build="unrecorded"`` only; with
        ``flags``, only a build made with those flags)."""
        if self.do_build != "unrecorded":
            return None
        b = (self.records.get(key) or {}).get("build")
        if not (isinstance(b, dict) and b.get("ok")):
            return None
        if flags is not None and list(b.get("flags") or []) != list(flags):
            return None
        return b

    def recorded_build(self, source: str, shape: Shape, acc: str = "f32", flags: Sequence[str] = ()) -> dict | None:
        """What the loop's compile stage uses instead of running nvcc, when the recording holds
        this kernel's build (``build="unrecorded"``); None: build it."""
        b = self._recorded_build(self._key(source, shape, acc), flags)
        return None if b is None else {**json.loads(json.dumps(b)), "replayed": True}

    def evaluate(self, source: str, shape: Shape, acc: str = "f32", *, flags: Sequence[str] = (),
                 label: str = "candidate", time_baselines: bool = True) -> Evaluation:
        key = self._key(source, shape, acc)
        if self._recorded_build(key, flags) is not None:
            d = json.loads(json.dumps(self.records[key]))
            d["build"] = {**d["build"], "replayed": True}
            return _wrap(d)
        try:
            b = self._build(source, flags)
        except Exception as e:  # KernelSourceError (no l2_hgemm), ToolMissing
            msg = " ".join(str(e).split())
            b = {"ok": False, "key": "", "so_path": None, "ptxas": None,
                 "errors": [{"file": "kernel.cu", "line": None, "col": None, "severity": "error", "message": msg}],
                 "log": msg, "seconds": 0.0, "cached": False, "arch": self.arch or "", "flags": list(flags or ())}
        if b is not None and not b.get("ok"):
            first = next((e.get("message", "") for e in b.get("errors", []) if e.get("severity") != "warning"), "compile failed")
            return _wrap({"status": "compile_error", "build": b, "check": None, "times_ms": {}, "spread": {},
                          "roofline_ms": None, "message": f"compile error: {first}"})
        rec = self.records.get(key)
        if rec is None:
            self.misses.append(key)
            return _wrap({"status": NOT_RECORDED, "build": b, "check": None, "times_ms": {}, "spread": {},
                                   "roofline_ms": None,
                                   "message": "no GPU result recorded for this kernel and shape (run tools/record_evaluations.py on a GPU)"})
        d = json.loads(json.dumps(rec))
        if b is not None:
            d["build"] = b
        return _wrap(d)

    def profile(self, source: str, shape: Shape, acc: str = "f32") -> dict | None:
        return self.profiles.get(self._key(source, shape, acc, self.profiles))

    def close(self) -> None:
        pass

    def __enter__(self) -> "RecordedEvaluator":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class RecordingEvaluator:
    """Wraps a real evaluator; every result is kept and :meth:`save` writes the recording file.

    An evaluator (:class:`harness.evaluator_protocol.Evaluator`) that keeps its own profiles, one
    kernel at a time, in the timing mode it was made with (``mode`` None: not switched)."""

    can_batch = False
    own_profiles = True
    mode: str | None = None

    def __init__(self, inner: "Evaluator", *, meta: dict | None = None, existing: str | Path | None = None):
        self.inner = inner
        self.arch: str | None = inner.arch
        self.replays_recording: bool = inner.replays_recording
        # the element type of everything recorded: the wrapped evaluator's (a replayer's dtype too)
        self.meta = {**dict(meta or {}), "dtype": str(getattr(inner, "dtype", None) or "fp16")}
        self.records: dict[str, dict] = {}
        self.profiles: dict[str, dict] = {}
        self.aliases: dict[str, str] = {}
        self._lock = threading.Lock()
        if existing and Path(existing).is_file():
            doc = load_recording(existing)
            old = doc.get("meta", {})
            if not old.get("provisional") and recording_dtype(old) == self.meta["dtype"]:
                self.records.update(doc.get("records", {}))
                self.profiles.update(doc.get("profiles", {}))
                self.aliases.update(doc.get("aliases", {}))

    def evaluate(self, source: str, shape: Shape, acc: str = "f32", *, flags: Sequence[str] = (),
                 label: str = "candidate", time_baselines: bool = True) -> Evaluation:
        ev = self.inner.evaluate(source, shape, acc, flags=flags, label=label, time_baselines=time_baselines)
        d = json.loads(json.dumps(_to_dict(ev), default=str))
        with self._lock:
            self.records[record_key(source, shape, acc)] = d
        return ev

    def recorded_build(self, source: str, shape: Shape, acc: str = "f32", flags: Sequence[str] = ()) -> dict | None:
        """None: a recorder builds every kernel for real."""
        return None

    def profile(self, source: str, shape: Shape, acc: str = "f32") -> object:
        if not self.inner.own_profiles:
            return None
        # ``own_profiles`` is the protocol's promise that ``profile`` is there
        p = cast("ReplayEvaluator", self.inner).profile(source, shape, acc)
        if p is not None:
            d = json.loads(json.dumps(_to_dict(p), default=str))
            with self._lock:
                self.profiles[record_key(source, shape, acc)] = d
        return p

    def close(self) -> None:
        self.inner.close()

    def save(self, path: str | Path) -> Path:
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        doc = {"meta": {**self.meta, "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())},
               "records": self.records, "profiles": self.profiles}
        if self.aliases:
            doc["aliases"] = self.aliases
        tmp = p.with_suffix(p.suffix + ".tmp")
        tmp.write_text(json.dumps(doc, indent=1, sort_keys=True))
        os.replace(tmp, p)
        return p
