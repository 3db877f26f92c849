"""A session folder: the append-only record of one agent run.

Layout (docs/INTERFACES.md, "Session API")::

    session.toml      config snapshot (no secrets), GPU, versions
    events.jsonl      one JSON object per line: seq, time, type, payload
                      (the records and their fields: :mod:`l2tui.events`)
    kernels/<sha>.cu  content-addressed kernel sources (sha256 of the text)
    rewards.jsonl     one row per agent step (messages, completion, reward, parts)

Every line is written and flushed at once, so a ``kill -9`` loses at most the
line being written; :meth:`Session.open` ignores such a torn last line and
truncates it away before appending again, so the file stays valid JSON lines.
Each line is also fsynced (safe against a machine that goes down), except
inside :meth:`Session.batched`, which fsyncs once at its end: a sweep's track
writes a few hundred lines, and a thousand tracks of per-line fsyncs are
minutes of an idle GPU.
Resume (``l2tui.agent.loop``) rebuilds the loop state from ``events``.

Every event is checked against :mod:`l2tui.events` twice: before it is written
(a writer cannot leave a line that a reader would refuse) and when a session is
loaded (a hand-edited or damaged field stops the reader with one line naming
its seq and field).  Fields and event types that module does not know pass
through untouched, so sessions of other l2tui versions still open.

One writer at a time: ``run``, ``sweep``, ``--resume`` and the app open a
session with ``writer=<command>``, which takes an exclusive ``flock`` on
``session.lock`` in the folder for as long as the session is open (the kernel
drops it when the process dies, even by ``kill -9``, so a stale lock file never
blocks anyone).  A second writer gets one line naming the holder.  Readers
(replay, export, rl-data) take no lock and never repair a file a writer holds.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import errno
import fcntl
import hashlib
import json
import os
import re
import socket
import stat
import threading
import time
from pathlib import Path
from typing import BinaryIO, Iterable, Iterator, Mapping

from . import events as ev_schema
from .errors import SessionError

EVENTS_FILE = "events.jsonl"
REWARDS_FILE = "rewards.jsonl"
TOML_FILE = "session.toml"
KERNELS_DIR = "kernels"
LOCK_FILE = "session.lock"

#: the longest line a session's JSON-lines file may hold (a streamed reply, a compile log and a
#: kernel's text fit many times over); a longer one is skipped with one line in ``problems``
MAX_LINE_BYTES = 8 << 20
#: how much of a longer line is read at a time while skipping it (memory stays bounded)
_SKIP_CHUNK = 1 << 20
_LINK_HINT = "l2tui never follows links in a session folder; replace it with the file itself"

_SHA_RE = re.compile(r"^[0-9a-f]{64}$")
# keys whose values are never written, whatever a caller passes (defence in depth:
# the config snapshot is built without them already)
_SECRET_KEY_RE = re.compile(r"(api[_-]?key|secret|token|password|authorization)$", re.I)
_ALLOWED_SECRETISH = {"api_key_env", "token_budget", "max_tokens", "context_tokens"}


#: a recorded ``[M, N, K]`` as a Shape, or one SessionError line (kept here for its importers)
check_shape = ev_schema.check_shape


def _next_seq(events: list[dict]) -> int:
    """One past the highest well-formed ``seq`` (a hand-edited line without one is not fatal)."""
    seqs = [e["seq"] for e in events if isinstance(e.get("seq"), int) and not isinstance(e.get("seq"), bool)]
    return max(seqs) + 1 if seqs else len(events)


def sha256_text(source: str) -> str:
    return hashlib.sha256(source.encode("utf-8")).hexdigest()


def scrub(config: Mapping[str, object]) -> dict[str, object]:
    """Drop secret-looking keys from nested dicts (``api_key_env`` names a variable, so it stays)."""
    return {k: _scrub_value(v) for k, v in config.items() if not _secretish(k)}


def _secretish(key: object) -> bool:
    return isinstance(key, str) and bool(_SECRET_KEY_RE.search(key)) and key not in _ALLOWED_SECRETISH


def _scrub_value(obj: object) -> object:
    """:func:`scrub` for any value of a config: dicts lose their secret-looking keys at every depth."""
    if isinstance(obj, dict):
        return {k: _scrub_value(v) for k, v in obj.items() if not _secretish(k)}
    if isinstance(obj, (list, tuple)):
        return [_scrub_value(v) for v in obj]
    return obj


def _toml_doc(doc: Mapping[str, object]) -> dict[str, object]:
    """TOML has no null: drop None values (recursively) so tomli_w can write the snapshot."""
    return {str(k): _toml_clean(v) for k, v in doc.items() if v is not None}


def _toml_clean(obj: object) -> object:
    """:func:`_toml_doc` for one value: None dropped from dicts and lists, paths as text."""
    if isinstance(obj, dict):
        return {str(k): _toml_clean(v) for k, v in obj.items() if v is not None}
    if isinstance(obj, (list, tuple)):
        return [_toml_clean(v) for v in obj if v is not None]
    if isinstance(obj, Path):
        return str(obj)
    return obj


def _write_toml(folder: Path, doc: dict) -> None:
    """Write ``folder/session.toml`` whole: a temporary file (never through a link), fsynced,
    then renamed over the old one, so a crash leaves either the old file or the new one."""
    import tomli_w

    tmp = folder / (TOML_FILE + ".tmp")
    with os.fdopen(open_nofollow(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), "wb") as f:
        tomli_w.dump(_toml_doc(doc), f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, folder / TOML_FILE)


def open_nofollow(path: Path, flags: int, mode: int = 0o644) -> int:
    """``os.open`` that refuses a symbolic link at ``path`` (``O_NOFOLLOW``) in one line naming it.

    Why: a session folder may be handed over by someone else, and a link planted in it
    (``session.lock`` -> ``~/.bashrc``) would have a writer truncate or append to its target."""
    try:
        return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise SessionError(f"{path} is a symbolic link; {_LINK_HINT}") from None
        raise


def check_real_dir(path: Path) -> None:
    """Refuse a session folder (or its ``kernels/``) that is a symbolic link or not a folder."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as e:
        raise SessionError(f"cannot read {path}: {e.strerror}") from None
    if stat.S_ISLNK(st.st_mode):
        raise SessionError(f"{path} is a symbolic link; {_LINK_HINT}")
    if not stat.S_ISDIR(st.st_mode):
        raise SessionError(f"{path} is not a folder; a session folder and its {KERNELS_DIR}/ are folders")


def is_plain_file(path: Path) -> bool:
    """Whether ``path`` is a regular file itself (a link to one is not)."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def read_text_nofollow(path: Path, limit: int = MAX_LINE_BYTES) -> str:
    """A small session file's text (``session.toml``, a kernel), never through a link, at most
    ``limit`` bytes (a longer file is refused in one line)."""
    fd = open_nofollow(path, os.O_RDONLY)
    with os.fdopen(fd, "rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise SessionError(f"{path} is larger than {limit >> 20} MiB; a session file this size is not l2tui's")
    return data.decode("utf-8")


def _skip_rest_of_line(f: BinaryIO) -> bool:
    """Read past the rest of an over-long line in bounded chunks; True when it ended in a newline."""
    while True:
        chunk = f.readline(_SKIP_CHUNK)
        if not chunk:
            return False
        if chunk.endswith(b"\n"):
            return True


def read_jsonl(path: Path, *, max_line: int = MAX_LINE_BYTES) -> tuple[list[dict], int, bool, list[str]]:
    """Parse a JSON-lines file without following a link and with a bounded ``readline``.

    Returns (rows, byte length of the valid prefix, torn?, problems).  Only the *last*
    line may be torn (that is what a crash produces); a bad line in the middle is a
    corrupted file and raises.  A line longer than ``max_line`` is skipped, never held in
    memory whole, and named in ``problems`` (one line each): the rest of the file is kept.
    """
    try:
        fd = open_nofollow(path, os.O_RDONLY)
    except FileNotFoundError:
        return [], 0, False, []
    rows: list[dict] = []
    problems: list[str] = []
    pos = 0
    torn = False
    lineno = 0
    with os.fdopen(fd, "rb") as f:
        while True:
            line = f.readline(max_line + 1)
            if not line:
                break
            lineno += 1
            if len(line) > max_line and not line.endswith(b"\n"):
                complete = _skip_rest_of_line(f)
                problems.append(f"{path.name}: line {lineno} is longer than {max_line >> 20} MiB; it was skipped")
                if not complete:
                    torn = True
                    break
                pos = f.tell()
                continue
            text = line.strip()
            if text:
                try:
                    row = json.loads(text)
                    if not isinstance(row, dict):
                        raise ValueError("not an object")
                except ValueError:
                    if not line.endswith(b"\n") or not f.peek(1):   # the last line: a torn write
                        torn = True
                        break
                    raise SessionError(
                        f"{path}: line {lineno} is not valid JSON; the session file is corrupted"
                    ) from None
                if not line.endswith(b"\n"):             # complete JSON but no newline: treat as torn
                    torn = True
                    break
                rows.append(row)
            pos += len(line)
    return rows, pos, torn, problems


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


_HOLDER_SAFE = re.compile(r"[^A-Za-z0-9_.:+@/ -]")


def _holder_text(value: object, limit: int = 80) -> str:
    """A holder field fit for a one-line message (the lock file is read back, so it is cleaned)."""
    return _HOLDER_SAFE.sub("?", str(value))[:limit] or "?"


class WriterLock:
    """An exclusive ``flock`` on ``<session>/session.lock``, held while a writer has the session open.

    The file holds who took it (pid, command, host, start time) so that a second
    writer can say whom it is waiting for.  ``flock`` is tied to the open file,
    so the lock goes away with the process however it ends.
    """

    def __init__(self, folder: Path, fd: int, holder: dict):
        self.folder = folder
        self.fd: int | None = fd
        self.holder = holder

    @classmethod
    def acquire(cls, folder: str | Path, command: str) -> "WriterLock":
        folder = Path(folder)
        check_real_dir(folder)
        try:
            fd = open_nofollow(folder / LOCK_FILE, os.O_RDWR | os.O_CREAT)
        except OSError as e:
            raise SessionError(f"cannot lock session folder {folder}: {e.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            held = read_holder(fd)
            os.close(fd)
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise SessionError(f"{folder} is being written by {describe_holder(held)}; "
                                   "wait for it to finish (or stop it), then retry") from None
            raise SessionError(f"cannot lock session folder {folder}: {e.strerror}") from None
        holder = {"pid": os.getpid(), "command": command, "host": socket.gethostname(),
                  "started": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, (json.dumps(holder) + "\n").encode(), 0)
        except OSError:
            pass  # the lock is what counts; the note is a courtesy
        return cls(folder, fd, holder)

    def release(self) -> None:
        """Clear the holder note and drop the lock (the file stays: removing it would let two
        writers lock two different files of the same name)."""
        if self.fd is not None:
            try:
                try:
                    os.ftruncate(self.fd, 0)
                except OSError:
                    pass
                fcntl.flock(self.fd, fcntl.LOCK_UN)
            finally:
                os.close(self.fd)
                self.fd = None

    def __del__(self) -> None:  # pragma: no cover - belt and braces; the fd closes with the process anyway
        try:
            self.release()
        except Exception:
            pass


def read_holder(fd_or_path: int | str | Path) -> dict:
    """The holder note of a lock file ({} when absent or unreadable)."""
    try:
        if isinstance(fd_or_path, int):
            data = os.pread(fd_or_path, 4096, 0)
        else:
            with os.fdopen(open_nofollow(Path(fd_or_path) / LOCK_FILE, os.O_RDONLY), "rb") as f:
                data = f.read(4096)
        doc = json.loads(data.decode("utf-8", "replace") or "{}")
        return doc if isinstance(doc, dict) else {}
    except (OSError, ValueError, SessionError):
        return {}


def describe_holder(h: dict) -> str:
    if not h:
        return "another l2tui process (it has not written its name yet)"
    return (f"pid {_holder_text(h.get('pid'))} (l2tui {_holder_text(h.get('command'))}) on host "
            f"{_holder_text(h.get('host'))} since {_holder_text(h.get('started'))}")


def is_locked(folder: str | Path) -> bool:
    """Whether a writer holds ``folder`` now (a probe: takes the lock and drops it at once)."""
    try:
        fd = open_nofollow(Path(folder) / LOCK_FILE, os.O_RDONLY)
    except (OSError, SessionError):
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)  # closing drops the probe's lock
    return False


class Session:
    """An open session folder.  Thread-safe appends (one lock per session)."""

    def __init__(self, path: Path, config: dict, gpu: dict, versions: dict,
                 events: list[dict], rewards: list[dict], problems: list[str],
                 records: list[ev_schema.Event] | None = None):
        self.path = Path(path)
        self.config = config
        self.gpu = gpu
        self.versions = versions
        self._events = events
        self._records = records if records is not None else ev_schema.parse_all(events, where=str(self.path / EVENTS_FILE))
        self._rewards = rewards
        self.problems = problems
        self._lock = threading.RLock()
        self._batch_depth = 0
        self._unsynced: set[str] = set()
        self._next_seq = _next_seq(events)
        self.writer_lock: WriterLock | None = None

    def close(self) -> None:
        """Give up the writer lock (if this session holds one); appends after this are still possible
        but no longer exclusive, so a writer closes only when it is done."""
        if self.writer_lock is not None:
            self.writer_lock.release()
            self.writer_lock = None

    def set_loop_dtype(self, dtype: str) -> None:
        """Rewrite ``[loop] dtype`` in ``session.toml`` (and in :attr:`config`): the element type
        a resume, the export and rl-data read for this session. The file is read and replaced
        without following links; a ``session.toml`` that is a link, too large or not TOML is
        refused in one :class:`SessionError` line and left as it is."""
        if dtype not in ("fp16", "bf16"):
            raise SessionError(f"dtype {str(dtype)[:20]!r} is not fp16 or bf16")
        with self._lock:
            doc = self._read_toml_for_update()
            config = doc.setdefault("config", {})
            loop = config.setdefault("loop", {}) if isinstance(config, dict) else None
            if not isinstance(loop, dict):
                raise SessionError(f"{self.path / TOML_FILE}: [config.loop] is not a table; the session file is damaged")
            loop["dtype"] = dtype
            _write_toml(self.path, doc)
            _fsync_dir(self.path)
            self.config = config

    def _read_toml_for_update(self) -> dict:
        """``session.toml`` as a table to rewrite: the file read through no link, or this
        session's own tables where there is none (a session recorded without one)."""
        tf = self.path / TOML_FILE
        if not (tf.exists() or tf.is_symlink()):
            return {"config": dict(self.config), "gpu": dict(self.gpu), "versions": dict(self.versions)}
        try:
            import tomllib  # type: ignore[import-not-found]
        except ModuleNotFoundError:  # Python 3.10
            import tomli as tomllib  # type: ignore[no-redef]
        try:
            doc: dict[str, object] = tomllib.loads(read_text_nofollow(tf))
            return doc
        except OSError as e:
            raise SessionError(f"cannot read {tf}: {e.strerror}") from None
        except ValueError:   # not UTF-8, or not TOML
            raise SessionError(f"{tf} is not valid TOML; the session file is damaged") from None

    # ------------------------------------------------------------------ create / open
    @classmethod
    def create(cls, path: str | Path, *, config: dict, gpu: dict, versions: dict,
               writer: str | None = None) -> "Session":
        """Make a new session folder (refuses one that already holds events).

        ``writer`` (the command, e.g. ``"run"``) takes the folder's writer lock first.
        """
        p = Path(path)
        ev = p / EVENTS_FILE
        check_real_dir(p)
        check_real_dir(p / KERNELS_DIR)
        if ev.exists() and ev.stat().st_size > 0:
            raise SessionError(f"{p} already holds a session; use --resume to continue it or pick a new folder")
        try:
            (p / KERNELS_DIR).mkdir(parents=True, exist_ok=True)
        except (OSError, ValueError) as e:
            why = getattr(e, "strerror", None) or "not a usable folder name"
            raise SessionError(f"cannot create session folder {p}: {why}") from None
        check_real_dir(p)
        check_real_dir(p / KERNELS_DIR)
        lock = WriterLock.acquire(p, writer) if writer else None
        if lock is not None and ev.exists() and ev.stat().st_size > 0:  # another writer got here first
            lock.release()
            raise SessionError(f"{p} already holds a session; use --resume to continue it or pick a new folder")
        config = scrub(config)
        _write_toml(p, {"config": config, "gpu": gpu or {}, "versions": versions or {}})
        for name in (EVENTS_FILE, REWARDS_FILE):
            os.close(open_nofollow(p / name, os.O_WRONLY | os.O_CREAT))
        _fsync_dir(p)
        s = cls(p, config, gpu or {}, versions or {}, [], [], [])
        s.writer_lock = lock
        s.record(ev_schema.SessionStarted(config=config, gpu=gpu or {}, versions=versions or {},
                                          schema=ev_schema.SCHEMA_VERSION))
        return s

    @classmethod
    def open(cls, path: str | Path, *, writer: str | None = None) -> "Session":
        """Load a session: a torn last line is ignored (and trimmed), missing kernels reported.

        ``writer`` (the command, e.g. ``"run --resume"``) takes the writer lock before
        anything is read or repaired.  Without it the session is opened for reading:
        a torn line is trimmed only when no writer holds the folder.
        """
        p = Path(path)
        check_real_dir(p)
        check_real_dir(p / KERNELS_DIR)
        if not (p / EVENTS_FILE).is_file():
            raise SessionError(f"{p} is not a session folder (no {EVENTS_FILE}); check the path")
        lock = WriterLock.acquire(p, writer) if writer else None
        try:
            s = cls._load(p, repair=lock is not None or not is_locked(p))
        except BaseException:
            if lock is not None:
                lock.release()
            raise
        s.writer_lock = lock
        return s

    @classmethod
    def _load(cls, p: Path, *, repair: bool) -> "Session":
        problems: list[str] = []
        config: dict = {}
        gpu: dict = {}
        versions: dict = {}
        tf = p / TOML_FILE
        if tf.is_file() or tf.is_symlink():
            try:
                import tomllib  # type: ignore[import-not-found]
            except ModuleNotFoundError:  # Python 3.10
                import tomli as tomllib  # type: ignore[no-redef]
            try:
                doc = tomllib.loads(read_text_nofollow(tf))
                config, gpu, versions = doc.get("config", {}), doc.get("gpu", {}), doc.get("versions", {})
            except (ValueError, OSError) as e:
                problems.append(f"{TOML_FILE} unreadable: {type(e).__name__}")
                doc = {}
            for name, table in (("config", config), ("gpu", gpu), ("versions", versions)):
                if not isinstance(table, dict):
                    raise SessionError(f"{p / TOML_FILE}: [{name}] is not a table; the session file is damaged")
        else:
            problems.append(f"{TOML_FILE} missing")
        events, good_len, torn, long_lines = read_jsonl(p / EVENTS_FILE)
        problems += long_lines
        if torn:
            problems.append(f"{EVENTS_FILE}: torn last line ignored")
            if repair:
                cls._truncate(p / EVENTS_FILE, good_len)
        rewards, rgood, rtorn, long_rewards = read_jsonl(p / REWARDS_FILE)
        problems += long_rewards
        if rtorn:
            problems.append(f"{REWARDS_FILE}: torn last line ignored")
            if repair:
                cls._truncate(p / REWARDS_FILE, rgood)
        records = ev_schema.parse_all(events, where=str(p / EVENTS_FILE))
        for i, r in enumerate(records):
            if r.seq != i:
                problems.append(f"{EVENTS_FILE}: seq {ev_schema.shown_seq(events[i])} at line {i + 1} (expected {i})")
                break
        schema = ev_schema.schema_of(events)
        if schema > ev_schema.SCHEMA_VERSION:
            problems.append(f"{EVENTS_FILE}: written with events schema {schema}, this l2tui reads "
                            f"{ev_schema.SCHEMA_VERSION}; fields it does not know are kept as they are")
        first = records[0] if records else None
        if not config and isinstance(first, ev_schema.SessionStarted):
            config = first.config or {}
            gpu = gpu or first.gpu or {}
            versions = versions or first.versions or {}
        seen: set[str] = set()
        for r in records:
            if isinstance(r, ev_schema.Candidate) and r.sha is not None and r.sha not in seen:
                seen.add(r.sha)
                if not is_plain_file(p / KERNELS_DIR / f"{r.sha}.cu"):
                    problems.append(f"kernel {r.sha[:12]} (step {r.step} of {r.track}) missing from {KERNELS_DIR}/")
        s = cls(p, config, gpu, versions, events, rewards, problems, records)
        return s

    @staticmethod
    def _truncate(path: Path, length: int) -> None:
        try:
            fd = open_nofollow(path, os.O_RDWR)
        except (OSError, SessionError):
            return
        try:
            os.ftruncate(fd, length)
            os.fsync(fd)
        except OSError:
            pass
        finally:
            os.close(fd)

    # ------------------------------------------------------------------ writing
    @staticmethod
    def _line(row: dict) -> str:
        return json.dumps(row, separators=(",", ":"), ensure_ascii=False, default=_json_default) + "\n"

    def _write_line(self, name: str, row: dict, line: str | None = None) -> None:
        line = line if line is not None else self._line(row)
        fd = open_nofollow(self.path / name, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        with os.fdopen(fd, "a", encoding="utf-8") as f:
            f.write(line)
            f.flush()
            if self._batch_depth:
                self._unsynced.add(name)
            else:
                os.fsync(f.fileno())

    @contextlib.contextmanager
    def batched(self) -> Iterator[None]:
        """Lines appended inside are written and flushed at once (a crash of this process loses
        nothing) and fsynced together when the outermost ``batched`` ends, not one by one."""
        with self._lock:
            self._batch_depth += 1
        try:
            yield
        finally:
            with self._lock:
                self._batch_depth -= 1
                names = sorted(self._unsynced) if not self._batch_depth else []
                if names:
                    self._unsynced.clear()
            for name in names:
                try:
                    fd = open_nofollow(self.path / name, os.O_RDONLY)
                except (OSError, SessionError):
                    continue
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)

    def append(self, type: str, **payload: object) -> dict:
        """Append one event (seq/time assigned here), flushed and fsynced; returns it.

        The line is checked against :mod:`l2tui.events` as it will be read back, and a
        malformed field raises :class:`SessionError` before anything is written.
        """
        with self._lock:
            ev = {"seq": self._next_seq, "time": time.time(), "type": type}
            for k, v in payload.items():
                if k not in ev_schema.BASE_KEYS:
                    ev[k] = v
            line = self._line(ev)
            record = ev_schema.parse(json.loads(line), where=str(self.path / EVENTS_FILE), writing=True)
            self._write_line(EVENTS_FILE, ev, line)
            self._next_seq += 1
            self._events.append(ev)
            self._records.append(record)
            return ev

    def record(self, event: ev_schema.Event) -> dict:
        """Append a typed record (its seq and time are assigned here); returns the dict written.

        The writers of l2tui build the record of :mod:`l2tui.events`, so a field a type does
        not have is a ``TypeError`` where it is built, and a field of the wrong type is refused
        here; fields left at ``None`` are not written (a reader treats absent and null alike).
        """
        return self.append(event.type, **ev_schema.written_payload(event))

    append_event = record

    def put_kernel(self, source: str) -> str:
        """Store a kernel source once, by the sha256 of its text; returns the sha."""
        sha = sha256_text(source)
        f = self.path / KERNELS_DIR / f"{sha}.cu"
        check_real_dir(f.parent)
        if f.is_symlink():
            raise SessionError(f"{f} is a symbolic link; {_LINK_HINT}")
        if not f.exists():
            f.parent.mkdir(parents=True, exist_ok=True)
            check_real_dir(f.parent)
            tmp = f.with_suffix(".cu.tmp")
            with os.fdopen(open_nofollow(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), "w", encoding="utf-8") as fh:
                fh.write(source)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, f)
        return sha

    def get_kernel(self, sha: str) -> str:
        if not _SHA_RE.match(sha or ""):
            raise SessionError(f"bad kernel id {sha!r}: expected a sha256 hex string")
        f = self.path / KERNELS_DIR / f"{sha}.cu"
        check_real_dir(f.parent)
        try:
            return read_text_nofollow(f)
        except UnicodeDecodeError:
            raise SessionError(f"kernel {sha[:12]} in {f.parent} is not UTF-8 text; the session store is damaged") from None
        except FileNotFoundError:
            raise SessionError(f"kernel {sha[:12]} is missing from {f.parent}") from None

    def has_kernel(self, sha: str) -> bool:
        return bool(sha) and is_plain_file(self.path / KERNELS_DIR / f"{sha}.cu")

    def append_reward(self, row: dict) -> dict:
        """Append one rewards.jsonl row (seq/time added if absent), flushed and fsynced."""
        with self._lock:
            r = dict(row)
            r.setdefault("seq", len(self._rewards))
            r.setdefault("time", time.time())
            self._write_line(REWARDS_FILE, r)
            self._rewards.append(r)
            return r

    # ------------------------------------------------------------------ reading
    @property
    def events(self) -> list[dict]:
        with self._lock:
            return list(self._events)

    @property
    def records(self) -> list[ev_schema.Event]:
        """The events as typed records (:mod:`l2tui.events`), in order."""
        with self._lock:
            return list(self._records)

    @property
    def schema(self) -> int:
        """The events schema the session was written with (1 for sessions that predate the field)."""
        return ev_schema.schema_of(self._events)

    def iter_events(self, types: set[str] | Iterable[str] | None = None) -> Iterator[dict]:
        want = set(types) if types is not None else None
        for e in self.events:
            if want is None or e.get("type") in want:
                yield e

    def rewards(self) -> list[dict]:
        with self._lock:
            return list(self._rewards)

    def replay(self, *, speed: float | None = None, types: set[str] | None = None) -> Iterator[dict]:
        """Yield the events in order; with ``speed`` (e.g. 10.0 = ten times faster) sleep
        between them in proportion to their recorded time gaps (capped at 2 s a gap)."""
        prev: float | None = None
        for e in self.iter_events(types):
            if speed and prev is not None:
                gap = max(0.0, float(e.get("time", prev)) - prev) / speed
                if gap > 0:
                    time.sleep(min(gap, 2.0))
            prev = float(e.get("time", prev or 0.0))
            yield e

    def __repr__(self) -> str:  # pragma: no cover
        return f"Session({str(self.path)!r}, events={len(self._events)})"


def _json_default(o: object) -> object:
    """What ``json.dumps`` writes for a payload value it has no form for: its ``to_dict()``, a
    path as text, a set or tuple as a list, a dataclass instance as a dict, else its text."""
    if hasattr(o, "to_dict"):
        return o.to_dict()
    if isinstance(o, Path):
        return str(o)
    if isinstance(o, (set, tuple)):
        return list(o)
    from dataclasses import asdict, is_dataclass

    if is_dataclass(o) and not isinstance(o, type):
        return asdict(o)
    return str(o)


def replay(path: str | Path, *, speed: float | None = None, types: set[str] | None = None) -> Iterator[dict]:
    """Replay iterator over a session folder's events."""
    return Session.open(path).replay(speed=speed, types=types)
