"""Parent side of the GPU worker: one subprocess per GPU, requests over a pipe.

Why a subprocess: a kernel under test can segfault, hang, or poison the CUDA
context (illegal address, trap).  None of that may take down the caller, which
must never create a CUDA context itself.  So every GPU action is a request to
``python -m harness.worker_main``; the parent enforces a per-request timeout,
kills a hung or dead worker, reports ``crashed`` / ``timeout``, and starts a new
worker lazily on the next request.

Protocol: frames of ``harness.channel`` (a magic, a 4-byte length, a JSON body of at most
``channel.MAX_FRAME_BYTES``) in both directions; never a pickle, because the worker loads
candidate libraries whose host code can write frames of its own to any descriptor it finds. The
worker writes frames on a private copy of its stdout; its fd 1 is redirected to stderr so stray
prints cannot corrupt the stream. A request is ``{"id", "op", "args"}`` with a fresh random id;
an answer ``{"id", "ok": true, "result", "retire"}`` or ``{"id", "ok": false, "kind": "error" |
"crashed", "error", "type", "traceback", "label"}``. Every answer is checked field by field
(:data:`ANSWERS` per op) before anything reads it; a frame that fails, or that carries another
request's id, ends the worker and is charged to what the request was evaluating.
"""

from __future__ import annotations

import os
import secrets
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Mapping

from . import channel
from .channel import Bool, Data, FrameError, Int, Json, Null, Num, Record, Schema, Str
from .errors import HarnessError
from .shape_result import check_shape_result

DEFAULT_TIMEOUT_S = 120.0
START_TIMEOUT_S = 60.0


class WorkerError(HarnessError):
    """A request that did not produce a result.  ``kind`` is the Evaluation status it maps to."""

    kind = "crashed"

    def __init__(self, message: str, *, label: str | None = None, remote_type: str | None = None,
                 remote_traceback: str | None = None) -> None:
        super().__init__(message)
        self.label = label
        self.remote_type = remote_type
        self.remote_traceback = remote_traceback


class WorkerCrashed(WorkerError):
    """The worker died (signal, exit) or reported a poisoned CUDA context and exited."""

    kind = "crashed"


class WorkerTimeout(WorkerError):
    """The request ran past its timeout; the worker was killed."""

    kind = "timeout"


class WorkerRemoteError(WorkerError):
    """The request raised inside a healthy worker (it stays up)."""

    kind = "error"


# --------------------------------------------------------------------------- what may come back

_VERSION = Str(64)
#: the schema of each op's result; an op not listed here has no result the parent accepts
ANSWERS: dict[str, Schema] = {
    "ping": Record({"pid": Int(0, 1 << 31), "python": Str(32)}),
    "gpu_info": Record({"name": Str(256), "uuid": Str(128), "cc": Str(16, pattern=r"\d+\.\d+"), "sms": Int(0, 1 << 16),
                        "cuda_runtime": _VERSION, "cuda_driver": _VERSION, "driver": Str(64, null=True),
                        "cupy": _VERSION}),
    "roofline": Record({"peak_tflops": Num(0.0, 1e6), "bw_gbs": Num(0.0, 1e7), "floor_ms": Num(0.0, 1e4)},
                       optional={"version": Int(0, 1 << 20), "bw_copy_gbs": Num(0.0, 1e7), "bw_read_gbs": Num(0.0, 1e7),
                                 "measured_s": Num(0.0, 1e6), "method": Str(1000), "gpu": Str(256), "uuid": Str(128),
                                 "l2_bytes": Int(0, 1 << 40, null=True)}),
    "evaluate_shape": Data(),         # its own check, with the request: harness.shape_result
    "_debug_segfault": Null(),
    "_debug_hang": Null(),
    "_debug_sleep": Num(0.0, 1e6),
    "_debug_raise": Null(),
    "_debug_exit": Null(),
    "_debug_retire": Str(16),
    "_debug_sticky": Null(),
    "_debug_load": Str(4096),
    "_debug_print": Int(0, 1 << 40),
    "_debug_oom_score": Str(8),
}
HELLO = Record({"hello": Bool(), "pid": Int(0, 1 << 31)})
_ID = Str(64, pattern=r"[0-9a-f]+")
ANSWER_OK = Record({"id": _ID, "ok": Bool(), "result": Data(max_depth=12), "retire": Bool()})
ANSWER_FAILED = Record({"id": _ID, "ok": Bool(), "kind": Str(16, choices=("error", "crashed")), "error": Str(1000),
                        "type": Str(200)},
                       optional={"traceback": Str(8000, null=True), "label": Str(200, null=True)})


def visible(text: str) -> str:
    """``text`` with every control or unprintable character shown as an escape: the worker's log
    holds whatever a candidate printed, and a line quoting it may reach a terminal."""
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text)


def _subject_of(op: str, args: Mapping[str, object]) -> str:
    """What a request evaluates, for the line that charges it: its candidates' labels, else the
    library it loads, else the op."""
    cands = args.get("candidates")
    labels = [str(c.get("label")) for c in cands if isinstance(c, dict)] if isinstance(cands, (list, tuple)) else []
    if labels:
        shown = ", ".join(labels[:3]) + (f" and {len(labels) - 3} more" if len(labels) > 3 else "")
        return shown[:200]
    for key in ("label", "path"):
        if isinstance(args.get(key), str):
            return str(args[key])[:200]
    return op


def _text(value: Json) -> str | None:
    """A string field of an answer, or None (the schema allows null where the worker had none)."""
    return value if isinstance(value, str) else None


def check_answer(op: str, resp: Json, rid: str, args: Mapping[str, object]) -> dict[str, Json]:
    """``resp`` as a checked answer to request ``rid`` (op ``op`` with ``args``). Raises FrameError
    for a malformed answer, and :class:`OutOfTurn` for a well-formed one that carries another id."""
    if not isinstance(resp, dict):
        raise FrameError(f"$: expected an object, got {repr(resp)[:60]}")
    if resp.get("id") != rid:
        raise OutOfTurn(f"it carries the id {str(resp.get('id'))[:40]!r}, not the request's")
    if resp.get("ok") is True:
        channel.validate(resp, ANSWER_OK)
        schema = ANSWERS.get(op)
        if schema is None:
            raise FrameError(f"$.result: the op {op!r} has no result")
        channel.validate(resp["result"], schema, "$.result")
        if op == "evaluate_shape":
            check_shape_result(resp["result"], args, "$.result")
    else:
        channel.validate(resp, ANSWER_FAILED)
        if resp["ok"] is not False:
            raise FrameError("$.ok: expected false for a failed request")
    return resp


class OutOfTurn(FrameError):
    """A well-formed answer to a request that is not the one waiting."""


def _read_child_pid(fd: int, timeout_s: float) -> int | None:
    """bwrap's ``--info-fd`` JSON: the sandboxed child's pid in our pid namespace."""
    import json

    buf = b""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        r, _, _ = select.select([fd], [], [], 0.5)
        if not r:
            continue
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        buf += chunk
        try:
            return int(json.loads(buf.decode())["child-pid"])
        except (ValueError, KeyError):
            continue
    return None


def _wait_gone(pid: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        except PermissionError:
            return
        time.sleep(0.02)


def _signame(rc: int) -> str:
    if rc < 0:
        try:
            return f"signal {signal.Signals(-rc).name}"
        except ValueError:
            return f"signal {-rc}"
    return f"exit status {rc}"


class GpuWorker:
    """A lazily (re)started worker subprocess.

    ``call(op, timeout_s=..., **args)`` returns the op's result or raises a
    :class:`WorkerError` subclass.  Thread-safe (one request at a time).
    """

    def __init__(self, *, device: int | None = None, env: dict[str, str] | None = None,
                 python: str | None = None, default_timeout_s: float = DEFAULT_TIMEOUT_S,
                 start_timeout_s: float = START_TIMEOUT_S, sandbox: bool | None = None,
                 trusted: bool = False) -> None:
        """``sandbox``: True / False force it on / off; None follows :func:`harness.sandbox.mode`
        (``trusted`` workers -- only the project's own libraries -- may then run without it)."""
        self.device = device
        self.sandbox = sandbox
        self.trusted = trusted
        self.sandboxed = False
        self._child_pid: int | None = None
        self._scratch: Path | None = None
        self.extra_env = dict(env or {})
        self.python = python or sys.executable
        self.default_timeout_s = default_timeout_s
        self.start_timeout_s = start_timeout_s
        self.starts = 0
        self._proc: subprocess.Popen[bytes] | None = None
        self._wfd: int | None = None
        self._rfd: int | None = None
        self._stderr_path: Path | None = None
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ lifecycle
    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        """The worker's pid as this process sees it (inside the sandbox it has its own numbering)."""
        if self._proc is None:
            return None
        return getattr(self, "_child_pid", None) or self._proc.pid

    def _start(self) -> None:
        self.sandboxed = self._want_sandbox()     # may refuse (SandboxUnavailable) before anything exists
        self._child_pid = None
        fd, name = tempfile.mkstemp(prefix="l2tui-worker-", suffix=".log")
        self._stderr_path = Path(name)
        try:
            if self.sandboxed:
                self._proc = self._spawn_sandboxed(fd)
            else:
                self._proc = subprocess.Popen(
                    [self.python, "-m", "harness.worker_main"],
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=fd, env=self._env(), close_fds=True,
                )
        finally:
            os.close(fd)
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._wfd = self._proc.stdin.fileno()
        self._rfd = self._proc.stdout.fileno()
        self.starts += 1
        hello = self._read_frame(time.monotonic() + self.start_timeout_s, "starting the worker")
        try:
            channel.validate(hello, HELLO)
        except FrameError as e:
            self._kill()
            raise WorkerCrashed(f"GPU worker sent a bad greeting: {' '.join(str(e).split())[:120]}") from None

    def _exit_status(self, proc: subprocess.Popen[bytes] | None) -> int | None:
        """The worker's exit status; bwrap reports a child killed by signal N as 128 + N."""
        if proc is None:
            return None
        try:
            rc = proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            return None
        if self.sandboxed and rc is not None and 128 < rc < 128 + 65:
            return -(rc - 128)
        return rc

    def _want_sandbox(self) -> bool:
        from . import sandbox

        if self.sandbox is not None:
            if self.sandbox and not sandbox.probe().works:
                raise sandbox.SandboxUnavailable(f"the GPU worker's sandbox does not work: {sandbox.probe().detail}; "
                                                 f"{sandbox.INSTALL_HINT}")
            return bool(self.sandbox)
        return sandbox.use_sandbox(self.trusted)

    def _env(self) -> dict[str, str]:
        """The unsandboxed worker's environment: the parent's without secret-looking variables."""
        from .sandbox import _SECRETISH

        env = {k: v for k, v in os.environ.items() if not _SECRETISH.search(k)}
        env.update(self.extra_env)
        if self.device is not None:
            env["CUDA_VISIBLE_DEVICES"] = str(self.device)
        env["PYTHONUNBUFFERED"] = "1"
        # the harness package must be importable in the child even when run from a checkout
        pkg_root = str(Path(__file__).resolve().parent.parent)
        env["PYTHONPATH"] = pkg_root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        return env

    def _spawn_sandboxed(self, stderr_fd: int) -> subprocess.Popen[bytes]:
        """bwrap around ``python -m harness.worker_main``: the build cache read-only (the worker loads
        libraries from it), a private scratch folder as HOME and the only writable place, the
        allow-listed environment, the NVIDIA device nodes."""
        from . import sandbox
        from .paths import build_cache_dir, cache_dir

        self._scratch = Path(tempfile.mkdtemp(prefix="l2tui-worker-scratch-"))
        builds = build_cache_dir()
        builds.mkdir(parents=True, exist_ok=True)
        ro = [builds]
        roof = cache_dir() / "roofline"
        if roof.is_dir():
            ro.append(roof)     # read-only: a worker that measures anew cannot replace the cached one
        ro += self._cuda_roots()
        env = {"L2TUI_CACHE_DIR": str(cache_dir())}
        env.update(self.extra_env)
        if self.device is not None:
            env["CUDA_VISIBLE_DEVICES"] = str(self.device)
        r_info, w_info = os.pipe()
        try:
            try:
                argv = sandbox.worker_argv([self.python, "-m", "harness.worker_main"], self._scratch, ro=ro,
                                           env=env, info_fd=w_info)
                proc = sandbox.spawn(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr_fd,
                                     env=sandbox._clean_env(self._scratch), close_fds=True, pass_fds=(w_info,))
            finally:
                os.close(w_info)
            self._child_pid = _read_child_pid(r_info, self.start_timeout_s)
        except BaseException:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None
            raise
        finally:
            os.close(r_info)
        return proc

    @staticmethod
    def _cuda_roots() -> list[Path]:
        """The CUDA toolkit (CuPy compiles its own kernels with NVRTC and reads its headers)."""
        roots: list[Path] = []
        for var in ("CUDA_HOME", "CUDA_PATH"):
            v = os.environ.get(var)
            if v and Path(v).is_dir():
                roots.append(Path(v))
        try:
            from .build import nvcc_path

            roots.append(Path(nvcc_path()).resolve().parent.parent)
        except Exception:  # noqa: BLE001 - no toolkit: CuPy uses the wheels' headers
            pass
        return roots

    def _kill(self) -> None:
        proc, self._proc = self._proc, None
        child, self._child_pid = getattr(self, "_child_pid", None), None
        scratch, self._scratch = getattr(self, "_scratch", None), None
        if proc is None:
            return
        if proc.poll() is None:
            try:
                proc.kill()
            except ProcessLookupError:
                pass
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        if child is not None:
            _wait_gone(child, 5.0)   # the sandbox dies with bwrap; wait until it has
        for f in (proc.stdin, proc.stdout):
            try:
                if f:
                    f.close()
            except OSError:
                pass
        self._wfd = self._rfd = None
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)

    def close(self) -> None:
        """Ask the worker to exit, then make sure it has."""
        with self._lock:
            if self.alive:
                try:
                    self._write_frame({"id": "0", "op": "_exit", "args": {}})
                    self._proc.wait(timeout=5)  # type: ignore[union-attr]
                except (OSError, subprocess.TimeoutExpired, BrokenPipeError):
                    pass
            self._kill()
            if self._stderr_path is not None:
                try:
                    self._stderr_path.unlink()
                except OSError:
                    pass
                self._stderr_path = None

    def __enter__(self) -> "GpuWorker":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:  # pragma: no cover - best effort
        try:
            self._kill()
        except Exception:
            pass

    # ------------------------------------------------------------------ framing
    def _write_frame(self, obj: Json) -> None:
        buf = channel.encode_frame(obj)
        assert self._wfd is not None
        view = memoryview(buf)
        while view:
            n = os.write(self._wfd, view)
            view = view[n:]

    def _read_exact(self, n: int, deadline: float, what: str, timeout: float | None = None) -> bytes:
        chunks: list[bytes] = []
        assert self._rfd is not None
        while n > 0:
            left = deadline - time.monotonic()
            if left <= 0:
                within = f"{timeout:.0f} s" if timeout is not None else "the timeout"
                raise WorkerTimeout(f"{what}: no answer within {within}; the GPU worker was killed")
            r, _, _ = select.select([self._rfd], [], [], min(left, 1.0))
            if not r:
                continue
            chunk = os.read(self._rfd, min(n, 1 << 20))
            if not chunk:
                raise EOFError
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def _read_frame(self, deadline: float, what: str, timeout: float | None = None,
                    subject: str | None = None) -> Json:
        """One frame's JSON data (not yet checked against a schema). A frame that is not one of
        ours (wrong magic, oversize, not JSON) ends the worker: :class:`WorkerCrashed`, charged
        to ``subject``."""
        try:
            n = channel.frame_length(self._read_exact(channel.HEADER.size, deadline, what, timeout))
            return channel.loads(self._read_exact(n, deadline, what, timeout))
        except WorkerTimeout:
            self._kill()
            raise
        except FrameError as e:
            raise self._malformed(what, subject or what, e) from None
        except (EOFError, OSError):
            proc = self._proc
            rc = self._exit_status(proc)
            tail = self.stderr_tail()
            self._kill()
            msg = f"{what}: the GPU worker died ({_signame(rc) if rc is not None else 'unknown'})"
            if subject and subject != what:
                msg += f" while evaluating {subject}"
            if tail:
                msg += f"; last output: {tail}"
            raise WorkerCrashed(msg) from None

    def _malformed(self, op: str, subject: str, e: FrameError) -> WorkerCrashed:
        """Kill the worker after a frame that broke the protocol; the error that charges ``subject``."""
        self._kill()
        reason = visible(" ".join(str(e).split())[:200])
        if isinstance(e, OutOfTurn):
            return WorkerCrashed(f"{op}: the GPU worker answered out of turn while evaluating {subject} ({reason}); "
                                 f"it was restarted", label=subject)
        return WorkerCrashed(f"{op}: the GPU worker sent a malformed answer while evaluating {subject}: {reason}; "
                             f"it was restarted", label=subject)

    def _drop_unsolicited(self) -> None:
        """A worker that has bytes waiting before a request was asked anything wrote them on its
        own (code left running by an earlier library): it is not trusted for this request, so it
        is replaced before the request is sent."""
        if self._rfd is None or not self.alive:
            return
        r, _, _ = select.select([self._rfd], [], [], 0)
        if r:
            self._kill()

    def stderr_tail(self, chars: int = 300) -> str:
        """The last line(s) the worker printed to stderr, squashed to one line."""
        if self._stderr_path is None:
            return ""
        try:
            with open(self._stderr_path, "rb") as f:
                f.seek(0, os.SEEK_END)
                size = f.tell()
                f.seek(max(0, size - 4096))
                text = f.read().decode(errors="replace")
        except OSError:
            return ""
        lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
        return visible(" | ".join(lines[-3:])[-chars:])

    # ------------------------------------------------------------------ requests
    def call(self, op: str, timeout_s: float | None = None, **args: Any) -> Any:
        """Run one request; raise :class:`WorkerCrashed`, :class:`WorkerTimeout` or :class:`WorkerRemoteError`."""
        with self._lock:
            self._drop_unsolicited()
            if not self.alive:
                self._kill()
                self._start()
            timeout = self.default_timeout_s if timeout_s is None else timeout_s
            rid = secrets.token_hex(16)    # unguessable: a frame forged by loaded code cannot claim it
            subject = _subject_of(op, args)
            try:
                self._write_frame({"id": rid, "op": op, "args": args})
            except (BrokenPipeError, OSError):
                rc = self._exit_status(self._proc)
                self._kill()
                raise WorkerCrashed(f"{op}: the GPU worker died ({_signame(rc) if rc is not None else 'unknown'})") from None
            raw = self._read_frame(time.monotonic() + timeout, op, timeout, subject)
            try:
                resp = check_answer(op, raw, rid, args)
            except FrameError as e:
                raise self._malformed(op, subject, e) from None
            if resp.get("ok"):
                result = resp.get("result")
                if op == "ping" and isinstance(result, dict) and self.pid is not None:
                    result = {**result, "pid": self.pid}   # the pid as seen from here, not the sandbox's
                if resp.get("retire"):
                    # the worker exits after this answer (too many libraries loaded): not a crash
                    try:
                        if self._proc is not None:
                            self._proc.wait(timeout=10)
                    except subprocess.TimeoutExpired:
                        pass
                    self._kill()
                return result
            kind = resp["kind"]
            err = visible(str(resp["error"]))
            label, rtype, rtb = _text(resp.get("label")), _text(resp["type"]), _text(resp.get("traceback"))
            if kind == "crashed":
                # the worker exits by itself after a sticky CUDA error; make sure of it
                if self._proc is not None:
                    try:
                        self._proc.wait(timeout=10)
                    except subprocess.TimeoutExpired:
                        pass
                self._kill()
                raise WorkerCrashed(f"{op}: CUDA context poisoned ({err}); the GPU worker was restarted",
                                    label=label, remote_type=rtype, remote_traceback=rtb)
            raise WorkerRemoteError(f"{op}: {err}", label=label, remote_type=rtype, remote_traceback=rtb)
