"""The Ray executor: nvcc builds as CPU tasks over the cluster, one GPU actor per GPU.

Why Ray: a cold sweep is nvcc-bound (a CUTLASS configuration takes 30-60 s to build, its whole
evaluation well under a second), so spreading the builds over every core of every node is the
first win; and one host with several GPUs (or several hosts) evaluates several tracks at once.

How the work is placed:

* **Builds** are Ray tasks (``num_cpus=1`` each, so a node runs as many as it has cores). The
  driver looks in its own build cache first and sends only the misses. A task compiles in a
  private scratch cache on whatever node it lands on and returns the ``BuildResult`` and the
  library's bytes; the driver writes them into *its* build cache (same layout and key as a local
  build: ``harness.build``), so the driver's cache is the one record of what is built, a later
  ``--executor local`` run on the same machine finds it, and resume needs nothing else.
* **GPU actors**: one per GPU (``num_gpus=1``, one CPU reserved so builds do not starve its
  timing loop), each owning a ``harness.evaluate.Evaluator`` and therefore its own GPU worker
  process (and that worker's sandbox). Tasks and actors keep the driver's sandbox setting
  (``harness.sandbox``: ``--no-sandbox`` on the command line reaches them too). An actor uses the driver's cache folder when it runs on
  the driver's node; on another node the driver ships each library the actor needs before the
  evaluation that needs it (once per actor), so an actor never runs nvcc for what the driver
  built. Every node needs the same CUDA toolkit (the build key includes the nvcc version: a
  node with another nvcc misses the cache and builds for itself).
* The driver schedules (``l2tui.agent.sweep``): a free actor takes the next track and keeps it to
  its end, so a shape is checked and timed with all its subjects on one GPU; a dead actor's
  track starts again on another actor; the session is written by the driver alone.

``recorded=`` replaces the GPU actors by actors that replay recorded evaluations (no GPU; real
nvcc builds through the same tasks), with made-up UUIDs: the CI runs the scheduling on a real
local cluster this way.

Ray is imported here only, so ``l2tui`` without the ``ray`` extra never imports it.
"""

from __future__ import annotations

import collections
import json
import os
import shutil
import socket
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence, TypeAlias, cast, overload

from .base import ExecutorError, Progress, SlotLost

if TYPE_CHECKING:
    from harness.build import BuildResult
    from harness.evaluate import Evaluation
    from harness.evaluator_protocol import EvaluationLike, Evaluator
    from harness.gemm_shape import Shape

#: a Ray actor handle or object reference: Ray ships no types, so both are untyped to mypy
RayHandle: TypeAlias = Any

START_TIMEOUT_S = 600.0      # an actor's Evaluator starts a GPU worker (CUDA init, cuBLAS load)
#: the most JSON text one actor answer may be (evaluations of a batch, compile logs included)
MAX_ANSWER_BYTES = 64 << 20


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return (text.splitlines()[0] if text else type(e).__name__)[:300]


def _unreachable(address: str, timeout_s: float = 10.0) -> str | None:
    """Why nothing answers at ``HOST:PORT`` (None when something does, or the address is not one).

    Why a probe of our own: ``ray.init`` retries an address with nothing behind it for minutes."""
    import socket as _socket

    if address in ("auto", "local") or "://" in address or ":" not in address:
        return None
    host, _, port = address.rpartition(":")
    try:
        with _socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            return None
    except ValueError:
        return None
    except OSError as e:
        return e.strerror or type(e).__name__


# ------------------------------------------------------------------ builds (any node)


def _failed_build(msg: str, arch: str, flags: Sequence[str]) -> dict:
    return {"ok": False, "key": "", "so_path": None, "ptxas": None,
            "errors": [{"file": "kernel.cu", "line": None, "col": None, "severity": "error", "message": msg}],
            "log": msg, "seconds": 0.0, "cached": False, "arch": arch, "flags": list(flags), "nvcc_version": ""}


def _sandbox_mode() -> str | None:
    """The driver's sandbox setting (``harness.sandbox``), which its tasks and actors keep."""
    try:
        from harness.sandbox import mode

        return mode()
    except Exception:  # noqa: BLE001 - no sandbox module or a bad $L2TUI_SANDBOX: the node's own
        return None


def _use_sandbox_mode(value: str | None) -> str | None:
    try:
        from harness.sandbox import set_mode

        return set_mode(value) if value is not None else None
    except Exception:  # noqa: BLE001
        return None


def build_task(source: str, arch: str | None, flags: Sequence[str],
               sandbox: str | None = None) -> tuple[dict, bytes | None, bool]:
    """Compile one source in a private scratch cache, under the driver's sandbox setting;
    (BuildResult dict, library bytes or None, whether the result may be cached: a failure caused
    by the source, not by the node)."""
    from harness.build import _load_cached, build
    from harness.errors import HarnessError

    prev_mode = _use_sandbox_mode(sandbox)
    scratch = tempfile.mkdtemp(prefix="l2tui-build-")
    old = os.environ.get("L2TUI_CACHE_DIR")
    os.environ["L2TUI_CACHE_DIR"] = scratch
    try:
        try:
            r = build(source, arch=arch, flags=list(flags))
        except HarnessError as e:   # no l2_hgemm in the source, no nvcc on this node
            return _failed_build(_first_line(e), arch or "", flags), None, False
        data = r.so_path.read_bytes() if r.ok and r.so_path else None
        cacheable = bool(r.key) and _load_cached(r.key) is not None
        d = r.to_dict()
        d["host"] = socket.gethostname()
        return d, data, cacheable
    finally:
        if old is None:
            os.environ.pop("L2TUI_CACHE_DIR", None)
        else:
            os.environ["L2TUI_CACHE_DIR"] = old
        if sandbox is not None:
            _set_sandbox_override(prev_mode)   # (this worker process runs other tasks next)
        shutil.rmtree(scratch, ignore_errors=True)


def _set_sandbox_override(value: str | None) -> None:
    try:
        from harness.sandbox import set_mode

        set_mode(value)
    except Exception:  # noqa: BLE001
        pass


def lookup(source: str, arch: str | None, flags: Sequence[str]) -> BuildResult | None:
    """The cached BuildResult of ``source`` in this process's build cache, or None."""
    from harness.build import cached_build

    return cached_build(source, arch, flags)


def install(d: dict, data: bytes | None, cacheable: bool = True) -> BuildResult:
    """Write a build made elsewhere into this process's build cache; its BuildResult here."""
    from harness.build import LIB_NAME, BuildResult, _cache_entry, _load_cached
    from harness.channel import FrameError, validate
    from harness.evaluate import BUILD_SCHEMA

    try:
        validate(d, BUILD_SCHEMA, "build")    # its key names a cache folder: hex only
    except FrameError as e:
        return BuildResult.from_dict(_failed_build(f"a malformed build came back: {e}", str(d.get("arch", ""))[:32]
                                                   if isinstance(d, dict) else "", []))
    res = BuildResult.from_dict({k: v for k, v in d.items() if k != "host"})
    res.cached = False
    if not res.key or not cacheable:
        return res
    hit = _load_cached(res.key)
    if hit is not None:
        hit.cached, hit.seconds = False, res.seconds
        return hit
    entry = _cache_entry(res.key)
    entry.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{res.key[:12]}-", dir=entry.parent))
    if res.ok:
        if data is None:
            shutil.rmtree(tmp, ignore_errors=True)
            return res
        (tmp / LIB_NAME).write_bytes(data)
        res.so_path = entry / LIB_NAME
    (tmp / "build.json").write_text(json.dumps({**res.to_dict(), "cached": False}, indent=1))
    try:
        os.replace(tmp, entry)
    except OSError:            # another process installed it first: keep theirs
        shutil.rmtree(tmp, ignore_errors=True)
    return res


def _entry_of(br: BuildResult | None) -> tuple[dict, bytes | None] | None:
    """(build.json, library bytes) of a cached build, to ship to another node."""
    if br is None or not br.ok or br.so_path is None:
        return None
    try:
        return br.to_dict(), Path(br.so_path).read_bytes()
    except OSError:
        return None


# ------------------------------------------------------------------ GPU actor (one per GPU)


class GpuActor:
    """One GPU's evaluator (see the module docstring); its methods take and return plain data.

    ``ev`` is the actor-side :class:`harness.evaluator_protocol.Evaluator`: a GPU's
    ``harness.evaluate.Evaluator``, or recorded evaluations in a simulated GPU; batching
    (``evaluate_many``) follows its ``can_batch``."""

    def __init__(self, spec: dict) -> None:
        import ray

        if spec.get("cache_dir"):
            try:
                Path(spec["cache_dir"]).mkdir(parents=True, exist_ok=True)
                os.environ["L2TUI_CACHE_DIR"] = spec["cache_dir"]
            except OSError:
                pass                 # (not writable on this node: its default cache; the driver ships)
        from harness.paths import cache_dir

        _use_sandbox_mode(spec.get("sandbox"))    # the driver's setting: this actor's worker keeps it
        self.arch = spec.get("arch")
        from l2tui import compose

        if spec.get("recorded"):
            recorded = compose.recorded_evaluator(spec["recorded"], arch=self.arch, dtype=spec.get("dtype"))
            self.ev: Evaluator = recorded
            gpu = dict(recorded.meta.get("gpu") or {})
            gpu["uuid"] = spec.get("uuid") or gpu.get("uuid")
            gpu["replayed_from"] = str(spec["recorded"])
        else:
            on_gpu = compose.gpu_evaluator(arch=self.arch, baselines=tuple(spec.get("baselines") or ()),
                                           mode=spec.get("mode", "offline"), timeout_s=spec.get("timeout_s", 60),
                                           dtype=spec.get("dtype") or "fp16")
            # its ``mode`` is a str, the protocol's a settable ``str | None``: the same object
            self.ev = cast("Evaluator", on_gpu)
            gpu = dict(on_gpu.gpu_info())
        self.info = {**gpu, "node_id": ray.get_runtime_context().get_node_id(), "host": socket.gethostname(),
                     "pid": os.getpid(), "cache_dir": str(cache_dir()),
                     "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}

    def identity(self) -> dict:
        return self.info

    @staticmethod
    def _plain(ev: EvaluationLike) -> str:
        """An evaluation as JSON text: what crosses back to the driver is data, checked there."""
        from harness.channel import dumps

        return dumps(ev.to_dict()).decode("utf-8")

    def evaluate(self, source: str, shape: tuple[int, int, int], acc: str, flags: list[str],
                 time_baselines: bool) -> str:
        from harness.shapes import Shape

        return self._plain(self.ev.evaluate(source, Shape(*shape), acc, flags=tuple(flags),
                                            time_baselines=time_baselines))

    def evaluate_many(self, items: list, shape: tuple[int, int, int], acc: str, baselines: list[str]) -> str:
        from harness.channel import dumps
        from harness.shapes import Shape

        from .batch import evaluate_many

        res = evaluate_many(self.ev, [tuple(i) for i in items], Shape(*shape), acc, baselines=baselines)
        return dumps({k: v.to_dict() for k, v in res.items()}).decode("utf-8")

    def install(self, entries: list) -> int:
        """Libraries the driver built, written into this actor's build cache."""
        for d, data in entries:
            install(d, data)
        return len(entries)

    def close(self) -> None:
        self.ev.close()


def _from_dict(d: dict) -> Evaluation:
    """An evaluation from its checked dict form (``not_recorded`` included: a replaying actor's)."""
    from harness.evaluate import evaluation_from_data

    return evaluation_from_data(d)      # (checked again: cheap, and the only door to an Evaluation)


def _malformed(uuid: str, e: Exception) -> Evaluation:
    from harness.evaluate import Evaluation

    reason = " ".join(str(e).split())[:200]
    return Evaluation("crashed", None, message=f"the GPU actor {uuid} sent a malformed evaluation: {reason}")


@overload
def read_answer(text: object, uuid: str, labels: None = None) -> Evaluation: ...


@overload
def read_answer(text: object, uuid: str, labels: Sequence[str]) -> dict[str, Evaluation]: ...


def read_answer(text: object, uuid: str, labels: Sequence[str] | None = None) -> Evaluation | dict[str, Evaluation]:
    """An actor's answer (JSON text, at most MAX_ANSWER_BYTES) as evaluations: one, or with
    ``labels`` one per label. Every evaluation is checked against harness.evaluate's schema before
    one is built; an answer that fails charges the evaluations it carried as ``crashed`` in one line."""
    from harness.channel import FrameError, MapOf, loads, validate
    from harness.evaluate import EVALUATION_SCHEMA

    try:
        if not isinstance(text, str):
            raise FrameError(f"expected JSON text, got a {type(text).__name__}")
        data = loads(text.encode("utf-8"), MAX_ANSWER_BYTES)
        if labels is None:
            return _from_dict(validate(data, EVALUATION_SCHEMA))   # type: ignore[arg-type]
        validate(data, MapOf(EVALUATION_SCHEMA, max(1, len(labels)), 10_000))
        assert isinstance(data, dict)
        stray = sorted(set(data) - set(labels))
        if stray:
            raise FrameError(f"$: names {stray[0][:40]!r}, which was not asked for")
        return {k: _from_dict(v) for k, v in data.items()}   # type: ignore[arg-type]
    except FrameError as e:
        bad = _malformed(uuid, e)
        return bad if labels is None else {lb: bad for lb in labels}


class RaySlot:
    """A :class:`~l2tui.executors.base.Slot` over one GPU actor."""

    def __init__(self, actor: RayHandle, info: dict, *, ship: bool, arch: str | None) -> None:
        self.actor = actor
        self.info = info
        self.uuid = str(info.get("uuid") or "unknown")
        self.name = str(info.get("name") or "GPU")
        self.ship = ship
        self.arch = arch
        self._shipped: set[str] = set()

    def _ship(self, sources: Sequence[tuple[str, Sequence[str]]]) -> None:
        if not self.ship:
            return
        entries = []
        for src, flags in sources:
            br = lookup(src, self.arch, flags)
            e = _entry_of(br)
            if br is not None and e is not None and br.key not in self._shipped:
                entries.append(e)
                self._shipped.add(br.key)
        if entries:
            self._get(self.actor.install.remote(entries))

    def _get(self, ref: RayHandle) -> object:
        import ray
        from ray.exceptions import ActorUnavailableError, RayActorError

        try:
            return ray.get(ref)
        except (RayActorError, ActorUnavailableError) as e:
            raise SlotLost(f"GPU actor {self.uuid} is gone: {_first_line(e)}") from None

    def evaluate(self, source: str, shape: Shape, acc: str = "f32", *, flags: Sequence[str] = (),
                 time_baselines: bool = True) -> Evaluation:
        self._ship([(source, flags)])
        text = self._get(self.actor.evaluate.remote(source, (shape.m, shape.n, shape.k), acc, list(flags),
                                                    bool(time_baselines)))
        return read_answer(text, self.uuid)

    def evaluate_many(self, items: Sequence[tuple[str, str, Sequence[str]]], shape: Shape, acc: str = "f32", *,
                      baselines: Sequence[str] = ()) -> dict[str, Evaluation]:
        self._ship([(src, flags) for _, src, flags in items])
        text = self._get(self.actor.evaluate_many.remote([[lb, src, list(fl)] for lb, src, fl in items],
                                                         (shape.m, shape.n, shape.k), acc, list(baselines)))
        return read_answer(text, self.uuid, [lb for lb, _, _ in items])


class RayExecutor:
    """See the module docstring.

    ``address``: a running cluster (``ray start --head`` prints it; ``RAY_ADDRESS`` is read when
    this is None); without either, Ray starts a cluster of this machine for the sweep's lifetime.
    ``gpus``: GPU actors to start (default: every GPU of the cluster; 0: builds only). ``recorded``: replay
    recorded evaluations in ``simulate`` GPU-less actors instead. ``actor_cache_dir``: the
    actors' build cache folder (default: the driver's, which actors on the driver's node share).
    ``init``: extra ``ray.init`` arguments for a cluster this executor starts.
    """

    name = "ray"

    def __init__(self, *, address: str | None = None, arch: str | None = None, baselines: Sequence[str] = (),
                 mode: str = "offline", timeout_s: float = 60, gpus: int | None = None,
                 recorded: str | Path | None = None, simulate: int = 1, actor_cache_dir: str | None = None,
                 init: dict | None = None, start_timeout_s: float = START_TIMEOUT_S, dtype: str = "fp16") -> None:
        try:
            import ray
        except ImportError:
            raise ExecutorError("--executor ray needs Ray: pip install 'l2tui[ray]' (or pip install ray)") from None
        from harness.paths import cache_dir

        self.arch = arch
        self.recorded = str(recorded) if recorded else None   # the recording the actors replay
        self._owns_ray = False
        self._actors: list[RayHandle] = []
        self._slots: list[RaySlot] = []
        self._closed = False
        if not ray.is_initialized():
            address = address or os.environ.get("RAY_ADDRESS") or None
            kw = dict(init or {})
            kw.setdefault("log_to_driver", False)
            if address is None:
                kw.setdefault("include_dashboard", False)
            else:
                # resources belong to the running cluster; only connection options apply
                for k in ("num_cpus", "num_gpus", "object_store_memory", "include_dashboard", "resources"):
                    kw.pop(k, None)
            if address is not None:
                why = _unreachable(address)
                if why:
                    raise ExecutorError(f"cannot reach a Ray cluster at {address}: {why} (start one with "
                                        f"`ray start --head`, or pass the address it printed with --ray-address)")
            try:
                ray.init(address=address, **kw)
            except (ConnectionError, RuntimeError, ValueError) as e:
                where = f"at {address}" if address else "on this machine"
                hint = ("; a cluster started by `ray start` checks a token: export RAY_AUTH_MODE=token"
                        if address and not os.environ.get("RAY_AUTH_MODE") else "")
                raise ExecutorError(f"cannot reach a Ray cluster {where}: {_first_line(e)} "
                                    f"(start one with `ray start --head`, or pass --ray-address){hint}") from None
            self._owns_ray = True
        self._build = ray.remote(num_cpus=1, max_retries=1)(build_task)
        driver_node = ray.get_runtime_context().get_node_id()
        driver_cache = str(cache_dir())
        self.sandbox = _sandbox_mode()
        cache_for_actors = actor_cache_dir or driver_cache
        Actor = ray.remote(GpuActor)
        try:
            if recorded is not None:
                n = max(1, int(simulate))
                specs: list[dict[str, object]] = [{"recorded": str(recorded), "arch": arch, "uuid": f"GPU-recorded-{i}",
                          "cache_dir": cache_for_actors, "sandbox": self.sandbox, "dtype": dtype} for i in range(n)]
                opts = {"num_cpus": 0, "max_restarts": 0}
            else:
                n = int(gpus) if gpus is not None else int(ray.cluster_resources().get("GPU", 0))
                if n <= 0 and gpus is None:
                    raise ExecutorError("the Ray cluster has no GPU: start `ray start --head` on a GPU machine "
                                        "(or join one with `ray start --address HEAD:6379`), or use --executor local")
                specs = [{"arch": arch, "baselines": list(baselines), "mode": mode, "timeout_s": timeout_s,
                          "cache_dir": cache_for_actors, "sandbox": self.sandbox, "dtype": dtype} for _ in range(n)]
                opts = {"num_gpus": 1, "num_cpus": 1, "max_restarts": 0}
            self._actors = [Actor.options(**opts).remote(s) for s in specs]
            try:
                infos = ray.get([a.identity.remote() for a in self._actors], timeout=start_timeout_s)
            except ray.exceptions.GetTimeoutError:
                raise ExecutorError(f"{n} GPU actor(s) did not start within {start_timeout_s:.0f} s: the cluster "
                                    f"has fewer free GPUs than that (see `ray status`)") from None
            except ray.exceptions.RayError as e:
                raise ExecutorError(f"a GPU actor failed to start: {_first_line(e)}") from None
        except BaseException:
            self.close()
            raise
        for a, info in zip(self._actors, infos):
            ship = info.get("node_id") != driver_node or info.get("cache_dir") != driver_cache
            self._slots.append(RaySlot(a, info, ship=ship, arch=arch))

    # ---------------------------------------------------------------- Executor

    @property
    def build_width(self) -> int:
        """How many build tasks the cluster runs at once: its CPUs (one per task)."""
        import ray

        return max(1, int(ray.cluster_resources().get("CPU", 1)))

    def build_many(self, sources: Sequence[str], *, arch: str | None = None, flags: Sequence[str] = (),
                   progress: Progress | None = None, deadline: float | None = None) -> list[BuildResult | None]:
        """Cache hits at once, the misses as tasks; with ``deadline`` at most ``build_width``
        tasks are in flight and none is submitted after it (those sources come back None)."""
        import ray

        unique = list(dict.fromkeys(sources))
        results: dict[str, BuildResult | None] = {}
        done = 0
        misses = []
        for src in unique:
            hit = lookup(src, arch, flags)
            if hit is None:
                misses.append(src)
                continue
            results[src] = hit
            done += 1
            if progress is not None:
                progress(done, len(unique), hit)
        queue = collections.deque(misses)
        window = len(misses) if deadline is None else self.build_width
        refs: dict[RayHandle, str] = {}
        pending: list[RayHandle] = []

        def submit() -> None:
            while queue and len(pending) < window and (deadline is None or time.monotonic() < deadline):
                src = queue.popleft()
                ref = self._build.remote(src, arch, list(flags), self.sandbox)
                refs[ref] = src
                pending.append(ref)

        submit()
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            for ref in ready:
                src = refs.pop(ref)   # (the result leaves the object store once installed here)
                try:
                    d, data, cacheable = ray.get(ref)
                    res = install(d, data, cacheable)
                except ray.exceptions.RayError as e:
                    from harness.build import BuildResult

                    res = BuildResult.from_dict(_failed_build(f"build task failed: {_first_line(e)}", arch or "", flags))
                results[src] = res
                done += 1
                if progress is not None:
                    progress(done, len(unique), res)
            submit()
        return [results.get(s) for s in sources]

    def slots(self) -> list[RaySlot]:
        return list(self._slots)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            import ray
        except ImportError:  # pragma: no cover
            return
        if not ray.is_initialized():
            return
        for a in self._actors:
            try:
                ray.get(a.close.remote(), timeout=60)
            except Exception:  # noqa: BLE001 - a dead actor has nothing to close
                pass
            try:
                ray.kill(a)
            except Exception:  # noqa: BLE001
                pass
        if self._owns_ray:
            ray.shutdown()
