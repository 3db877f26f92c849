"""Headless search over many shapes: ``l2tui sweep``.

Why a driver of its own (and not one AgentLoop track per shape): a sweep over the 1,000-shape
grid has to share work across shapes.  It

1. builds what its tracks' picks need, each configuration once (M, N, K are runtime arguments,
   so one library serves every shape), in parallel through its executor (this machine's cores,
   or CPU tasks on a Ray cluster), in the order the tracks need them and while the tracks run
   (``needed_builds``: a track starts once its own builds are done), with a progress bar; then
   builds each step's proposals as a batch, so a configuration proposed for many shapes
   compiles once (content-addressed cache);
2. runs, per track (shape, accumulator; ``sweep_track.TrackDriver``), the ``search`` policy: first the pick
   (``policies/pick.py``: the catalog configurations the cost model and its known blind spots
   choose, checked and timed together with the baselines in one request of the harness), the
   fastest that passes every check kept; then up to ``steps`` refinement steps of ``width``
   proposals each (candidates alone, the same checker and timer);
3. schedules tracks over the executor's GPU slots (one per GPU): a free slot takes the next
   track and keeps it to its end, so a shape is never split across GPUs; a slot that is lost
   (its Ray actor died) gives its track, from the start, to another slot;
4. logs everything (from the driver alone) as session events (``track_added``, ``candidate``, ``compiled``, ``checked``,
   ``timed``, ``best``, ``track_done``) and one ``rewards.jsonl`` row per evaluated proposal,
   with the policy's textual rationale as messages and its patch as completion, scored and
   written by ``step.py`` with the session's ``[rewards]`` as the agent loop's are, so a sweep is
   RL data like an LLM session, row for row;
5. keeps a resumable results file (``sweep.json`` in the session folder, keyed by track; each
   row names the GPU model and UUID that timed it); ``--resume`` skips finished tracks;
6. writes the winners as ``kernels/M_N_K.cu`` (``winners/`` in the session folder) for
   ``l2tui bench --kernels DIR``.
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import json
import math
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator, Sequence

from harness.evaluate import Evaluation
from harness.families import Config, applicable, build_arch_for, catalog
from harness.shapes import Shape
from harness.stats import speedup

from .. import events as ev_schema
from .needed_builds import BuildStats, NeededBuilds, no_builds
from .policies.base import Proposal, TrackContext
from .policies.pick import PickSettings, Subject, subjects
from .policies.search import SearchPolicy
from .rewards import RewardConfig
from .sweep_pool import SlotPool
from .track import track_id
from .sweep_track import TrackDriver

if TYPE_CHECKING:
    from harness.build import BuildResult
    from harness.evaluator_protocol import Evaluator
    from harness.known import GpuKey, KnownKernel, KnownStore

    from ..executors.base import Executor, Progress, Slot
    from .policies.costmodel import Params
    from ..session import Session

RESULTS_FILE = "sweep.json"
WINNERS_DIR = "winners"


def _recording_holds(executor: object) -> Callable[[str, Shape, str], bool] | None:
    """``holds(source, shape, acc)`` of the recording the executor replays (its local evaluator, or
    the file its Ray actors replay), None when it times on GPUs: a sweep replaying a recording picks
    and proposes only what the recording holds (``SearchPolicy.replay_only``)."""
    path = getattr(executor, "recorded", None)
    if path:
        from .recorded import RecordedEvaluator

        return RecordedEvaluator(path, build=False).holds
    slots = getattr(executor, "slots", None)
    for slot in (slots() if callable(slots) else []):
        ev = getattr(slot, "evaluator", None)
        holds = getattr(ev, "holds", None) if getattr(ev, "replays_recording", False) else None
        if callable(holds):
            fn: Callable[[str, Shape, str], bool] = holds
            return fn
    return None


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass
class SweepConfig:
    shapes: Sequence[Shape]
    accs: Sequence[str] = ("f32",)
    dtype: str = "fp16"   # element type of A, B and C (--dtype)
    baseline: str = "cublaslt_autotune"
    libraries: Sequence[str] = ()   # timed beside the baseline on every track (recorded for export's routes)
    steps: int = 3                  # refinement steps per track after the pick
    width: int = 3                  # proposals per step
    seeds: int = 5                  # the pick: the cost model's top distinct catalog configurations timed
    seed: int = 0
    arch: str | None = None
    jobs: int | None = None
    patience: int = 2               # steps without improvement before a track stops
    build_batches: bool = True      # build each step's proposals in parallel before evaluating
    new_builds: int | None = None   # proposals a step outside the prebuilt catalog (None: any number)
    pick_kinds: bool = True         # the pick also times the best of each kind the model is least sure of
    families: Sequence[str] | None = None   # restrict the catalog and the search to these families
    # (shape, acc) -> the configuration that holds the shape now (a winners file): timed in the pick
    # beside the chosen ones, so a re-pick keeps it unless something beats it in the same request
    incumbents: dict[tuple[Shape, str], Config] | None = None
    # acc -> catalog configurations timed on every track beside the pick where they run on its shape
    # (--also: a new entry tried on chosen shapes); prebuild() then builds only these
    also: dict[str, tuple[Config, ...]] | None = None
    max_seconds: float | None = None   # from the sweep's start: no build or track started after it (--resume continues)
    cost_params: Params | None = None  # the cost model's constants; None: the committed ones
    # the known kernels (harness.known.KnownStore) and the GPU key they are looked up and recorded
    # under: each track's pick times its shape's known kernel (else the nearest shapes' winners)
    # beside its own choices, and its verified winner goes into the local layer
    known: KnownStore | None = None
    known_gpu: GpuKey | None = None
    known_info: dict | None = None     # the GPU as its worker describes it (driver, name): provenance
    rewards: RewardConfig = field(default_factory=RewardConfig)   # the session's [rewards]


@dataclass
class TrackResult:
    track: str
    shape: list[int]
    acc: str
    best_sha: str | None = None
    best_name: str | None = None
    best_ms: float | None = None
    baseline_ms: dict[str, float] = field(default_factory=dict)
    speedup: float | None = None
    evaluated: int = 0
    picked: int = 0                 # catalog configurations timed by the pick
    seconds: float = 0.0
    build_s: float = 0.0            # nvcc time of this track's uncached builds (batch builds included)
    gpu_s: float = 0.0              # the GPU worker's time: checks and timing of every evaluation
    gpu: str | None = None          # the GPU model that timed the track
    gpu_uuid: str | None = None     # and which one of them (a track is never split across GPUs)

    def to_dict(self) -> dict:
        return dict(self.__dict__)


class ResultsCache:
    """``sweep.json``: finished tracks, rewritten atomically after each one (any thread)."""

    def __init__(self, path: Path):
        self.path = path
        self.data: dict[str, object] = _read_results(path)
        self._lock = threading.Lock()

    @property
    def tracks(self) -> dict[str, object]:
        """Finished tracks by id, each row as written (:meth:`TrackResult.to_dict`) or read back."""
        tracks = self.data.get("tracks")
        if not isinstance(tracks, dict):   # a file of another shape: its tracks start afresh
            tracks = self.data["tracks"] = {}
        return tracks

    def speedups(self) -> list[float]:
        """Every finished track's speedup over the sweep's baseline (rows without one left out)."""
        rows = (r for r in self.tracks.values() if isinstance(r, dict))
        return [float(r["speedup"]) for r in rows if isinstance(r.get("speedup"), (int, float)) and r["speedup"]]

    def done(self, track: str, gpu: str | None) -> bool:
        row = self.tracks.get(track)
        return isinstance(row, dict) and bool(row) and (gpu is None or row.get("gpu") in (None, gpu))

    def put(self, res: TrackResult) -> None:
        with self._lock:
            self.tracks[res.track] = res.to_dict()
            self._write()

    def add_run(self, run: dict[str, object]) -> list[dict[str, object]]:
        """One invocation's times (``runs``: a sweep resumed over several calls keeps each, so a
        cold sweep's wall, GPU and nvcc time add up from the file); every run so far."""
        with self._lock:
            runs = self.data.get("runs")
            if not isinstance(runs, list):
                runs = self.data["runs"] = []
            runs.append(run)
            self._write()
            return [r for r in runs if isinstance(r, dict)]

    def _write(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=1, sort_keys=True))
        os.replace(tmp, self.path)


def _read_results(path: Path) -> dict[str, object]:
    """``sweep.json`` as read back; a file that does not parse as a JSON object starts afresh."""
    fresh: dict[str, object] = {"version": 1, "tracks": {}}
    if not path.exists():
        return fresh
    try:
        data = json.loads(path.read_text())
    except ValueError:
        return fresh
    if not isinstance(data, dict):
        return fresh
    data.setdefault("tracks", {})
    return data


class NullSession:
    """Stand-in when no session folder is wanted (library use, tests of the driver)."""

    def record(self, event: ev_schema.Event) -> dict:
        return {"type": event.type, **ev_schema.written_payload(event)}

    def put_kernel(self, source: str) -> str:
        return sha256(source)

    def append_reward(self, row: dict) -> dict:
        return row

    @contextlib.contextmanager
    def batched(self) -> Iterator[None]:
        yield


class Sweep:
    """Run the search policy over many tracks (see the module docstring).

    ``executor`` (``l2tui.executors``) says where builds and evaluations run; without one, a
    local executor over ``evaluator`` (None: builds only, e.g. ``prebuild``).
    """

    def __init__(self, cfg: SweepConfig, evaluator: Evaluator | None = None, *, session: Session | NullSession | None = None,
                 out_dir: Path | None = None,
                 policy: SearchPolicy | None = None, progress: Callable[[str], None] = print,
                 gpu_name: str | None = None, executor: Executor | None = None,
                 build_progress: Callable[[str], Progress] | None = None) -> None:
        self.cfg = cfg
        self.executor: Executor = executor if executor is not None else self._local(evaluator, gpu_name)
        self.session = session or NullSession()
        self.out_dir = Path(out_dir) if out_dir else None
        if policy is None:
            from .policies.costmodel import CostModel

            policy = SearchPolicy(seed=cfg.seed, width=cfg.width, budget=cfg.steps, arch=cfg.arch,
                                  new_builds=cfg.new_builds, families=cfg.families,
                                  cost_model=CostModel(cfg.cost_params) if cfg.cost_params is not None else None)
        self.policy = policy
        holds = _recording_holds(self.executor)
        if holds is not None and hasattr(policy, "replay_only"):
            policy.replay_only(holds)
        self.progress = progress
        self.build_progress = build_progress
        self.gpu = gpu_name
        self.cache = ResultsCache(self.out_dir / RESULTS_FILE) if self.out_dir else None
        self.requeued: list[tuple[str, str]] = []      # (track, uuid of the slot it was lost on)
        self.left_at_limit = 0                          # tracks not started when max_seconds ran out
        self.unbuilt_at_limit = 0                       # catalog builds not started when it ran out
        self.catalog_stats: BuildStats = no_builds()   # this run's builds: wall, compiled, cached, nvcc
        self.builds: NeededBuilds[str, BuildResult] | None = None         # what the picks need, built while tracks run
        self._plans: dict[str, list[Proposal]] = {}     # track -> its pick, computed by the planner
        self._track_of: dict[str, tuple[Shape, str]] = {}   # track id -> (shape, acc) of this run's tracks
        self._plans_lock = threading.Lock()
        self._kernel_lock = threading.Lock()
        # --max-seconds counts from here: the catalog build and the tracks share one budget
        self._t0 = time.monotonic()

    def _deadline(self) -> float | None:
        return self._t0 + self.cfg.max_seconds if self.cfg.max_seconds is not None else None

    # ------------------------------------------------------------ builds

    def _local(self, evaluator: Evaluator | None, gpu_name: str | None) -> Executor:
        """The executor of a sweep given none: this machine, over ``evaluator`` (None: builds only)."""
        from l2tui.executors.local import LocalExecutor

        gpu = {"name": gpu_name} if gpu_name else None
        return LocalExecutor(evaluator, jobs=self.cfg.jobs, gpu=gpu) if evaluator is not None else \
            LocalExecutor(None, jobs=self.cfg.jobs)

    def _build(self, sources: Sequence[str], flags: Sequence[str] = (), progress: Progress | None = None,
               deadline: float | None = None) -> list[BuildResult | None]:
        """Build through the executor, each source for its family's arch (sm_90a for the CUTLASS
        ones); with ``deadline``, None for each source whose build had not started by then."""
        arch = self.cfg.arch or "sm_90a"
        by_arch: dict[str, list[int]] = {}
        for i, src in enumerate(sources):
            c = Config.from_source(src)
            by_arch.setdefault(build_arch_for(c.family, arch) if c else arch, []).append(i)
        out: list[BuildResult | None] = [None] * len(sources)
        for a, idx in by_arch.items():
            for i, r in zip(idx, self.executor.build_many([sources[i] for i in idx], arch=a, flags=flags,
                                                           progress=progress, deadline=deadline)):
                out[i] = r
        return out

    def planned_sources(self) -> list[str]:
        """Every source the picks of this sweep's tracks time, each once, in track order.

        A pick depends on the shape, the catalog, the cost model and the known kernels bound in
        the config, never on a timing, so a machine without a GPU can build it ahead of the sweep
        (``--prebuild-only``). Tracks that finish during the sweep add winners to the local layer,
        which can move a later track's neighbour lookup: what that changes, the sweep builds."""
        cfg = self.cfg
        out: dict[str, None] = {}
        for shape in cfg.shapes:
            for acc in cfg.accs:
                ctx = TrackContext(track=track_id(shape, acc), shape=shape, acc=acc, baseline=cfg.baseline, step=0,
                                   arch=cfg.arch, dtype=cfg.dtype)
                out.update((p.source, None) for p in self._pick_proposals(ctx) if p.source is not None)
        return list(out)

    def _prebuild_targets(self) -> list[tuple[str, str]]:
        """(name, source) of what ``prebuild`` compiles: ``--also``'s configurations; else what
        the tracks' picks time; else (no shapes) the whole catalog."""
        arch = self.cfg.arch or "sm_90a"
        if self.cfg.also:
            return [(c.name, c.source()) for acc in self.cfg.accs for c in self.cfg.also.get(acc, ())]
        if self.cfg.shapes:
            named = [(Config.from_source(src), src) for src in self.planned_sources()]
            return [(c.name if c else f"kernel-{sha256(src)[:12]}", src) for c, src in named]
        fams = set(self.cfg.families) if self.cfg.families else None
        return [(c.name, c.source()) for acc in self.cfg.accs for c in catalog(acc, arch, dtype=self.cfg.dtype)
                if fams is None or c.family in fams]

    def prebuild(self) -> dict[str, BuildResult]:
        """Compile ahead, in parallel (one progress bar), what the sweep would build
        (``_prebuild_targets``), so the GPU box finds it in the build cache."""
        targets = self._prebuild_targets()
        prog = self.build_progress("catalog") if self.build_progress else None
        if prog is None:
            t0 = time.monotonic()

            def prog(done: int, total: int, res: BuildResult) -> None:
                self.progress(f"build {done}/{total} {'cached' if res.cached else f'{res.seconds:.0f}s'}"
                              f"{'' if res.ok else ' FAILED'}  ({time.monotonic() - t0:.0f}s)")

        t_build = time.monotonic()
        built = self._build([src for _, src in targets], progress=prog, deadline=self._deadline())
        results = {name: r for (name, _), r in zip(targets, built) if r is not None}
        self.unbuilt_at_limit = len(targets) - len(results)
        compiled = [r for r in results.values() if not r.cached]
        self.catalog_stats = {"configs": len(targets), "wall_s": round(time.monotonic() - t_build, 3),
                              "compiled": len(compiled), "cached": len(results) - len(compiled),
                              "nvcc_s": round(sum(r.seconds or 0.0 for r in compiled), 3),
                              "not_started": self.unbuilt_at_limit}
        bad = [n for n, r in results.items() if not r.ok]
        if bad:
            self.progress(f"{len(bad)} kernels failed to build: {', '.join(bad)}")
        if self.unbuilt_at_limit:
            self.progress(f"time limit: {self.unbuilt_at_limit} of {len(targets)} builds not started "
                          f"({len(results)} built or cached); continue with --resume")
        return results

    def _build_batch(self, sources: list[str]) -> None:
        if not self.cfg.build_batches or not sources:
            return
        try:
            self._build(sources)
        except Exception as e:  # noqa: BLE001 - the per-candidate evaluate reports real errors
            self.progress(f"batch build failed: {e}")

    # ------------------------------------------------------------ one track

    def _announce(self, ctx: TrackContext, prop: Proposal, source: str, parent: str | None, step: int) -> str:
        s = self.session
        with self._kernel_lock:   # tracks on several GPUs store the same catalog sources
            sha = s.put_kernel(source)
        diff = ""
        if parent is not None:
            try:
                from l2tui.agent.patches import unified_diff

                diff = unified_diff(parent, source)
            except ImportError:  # pragma: no cover
                diff = ""
        s.record(ev_schema.Candidate(track=ctx.track, step=step, sha=sha, parent=sha256(parent) if parent else None,
                 origin=prop.origin, policy="search", family=prop.family, diff=diff, flags=list(prop.flags)))
        return sha

    def _record(self, ctx: TrackContext, step: int, sha: str, ev: Evaluation, slot: Slot) -> None:
        s = self.session
        b = ev.build
        s.record(ev_schema.Compiled(track=ctx.track, step=step, sha=sha, ok=bool(b and b.ok),
                 ptxas=b.ptxas.to_dict() if b is not None and b.ptxas is not None else None,
                 errors=[e.to_dict() for e in b.errors] if b is not None else [],
                 seconds=b.seconds if b is not None else 0.0, cached=bool(b and b.cached)))
        chk = ev.check or {}
        if ev.status != "compile_error":
            s.record(ev_schema.Checked(track=ctx.track, step=step, sha=sha, ok=ev.status == "ok", status=ev.status,
                     failed=chk.get("failed"), detail=chk.get("detail", ""), rel_err=chk.get("rel_err"),
                     bound=chk.get("bound"), worker_s=ev.extra.get("seconds"), phases=ev.extra.get("phases"),
                     gpu=getattr(slot, "uuid", None), batch=ev.extra.get("batch")))

    def run_track(self, shape: Shape, acc: str, slot: Slot | None = None) -> TrackResult:
        """One track on one GPU slot, from the pick to its last refinement step; its session
        lines are fsynced once, when it ends (``Session.batched``).

        Raises ``l2tui.executors.SlotLost`` when the slot goes away mid-track (the caller gives
        the track to another slot)."""
        batched = getattr(self.session, "batched", None)
        with (batched() if batched else contextlib.nullcontext()):
            return self._run_track(shape, acc, slot)

    def _run_track(self, shape: Shape, acc: str, slot: Slot | None) -> TrackResult:
        if slot is None:
            slots = self.executor.slots()
            if not slots:
                from l2tui.errors import UserError

                raise UserError("no GPU to evaluate on: pass --recorded FILE or run on a GPU box")
            slot = slots[0]
        track = track_id(shape, acc)
        res = TrackResult(track, [shape.m, shape.n, shape.k], acc, gpu=self.gpu or getattr(slot, "name", None),
                          gpu_uuid=slot.uuid)
        return TrackDriver(self, shape, acc, slot, track, res).run()

    def _plan(self, tid: str) -> list[str]:
        """The planner's call (``NeededBuilds``): the track's pick, computed once and kept for the
        track, as the sources to build."""
        shape, acc = self._track_of[tid]
        ctx = TrackContext(track=tid, shape=shape, acc=acc, baseline=self.cfg.baseline, step=0, arch=self.cfg.arch,
                           dtype=self.cfg.dtype)
        seeds = self._pick_proposals(ctx)
        with self._plans_lock:
            self._plans[tid] = seeds
        return [p.source for p in seeds if p.source is not None]

    def _start_builds(self, todo: Sequence[tuple[Shape, str]], deadline: float | None) -> None:
        """Build what the tracks' picks need, in the order they need it, on the executor's
        ``build_width`` builders, while the tracks run (``needed_builds``)."""
        self._track_of = {track_id(s, a): (s, a) for s, a in todo}
        if deadline is not None and time.monotonic() >= deadline:
            return
        prog = self.build_progress("catalog") if self.build_progress else None
        width = getattr(self.executor, "build_width", None) or self.cfg.jobs or os.cpu_count() or 1
        self.builds = NeededBuilds(self._plan, lambda src: self._build([src], deadline=deadline)[0], width=width,
                                   deadline=deadline, progress=prog)
        self.builds.start(list(self._track_of))

    def _next_track(self, queue: collections.deque) -> int | None:
        """The index of the queued track to run next: the first whose builds are all done (the
        first one when builds are not tracked here, or the planner failed); None: none is ready."""
        if self.builds is None or self.builds.first_error() is not None:
            return 0
        return self.builds.first_ready([track_id(s, a) for s, a in queue])

    def _pick_proposals(self, ctx: TrackContext) -> list[Proposal]:
        """What the pick times on the track's shape: the policy's seed, then the known kernels and
        the catalog configurations of the pick's pipeline (``policies/pick.py``: ``subjects``, with
        the incumbent, its no-PDL twin and ``--also``), each once."""
        cfg, pol, shape, acc = self.cfg, self.policy, ctx.shape, ctx.acc
        arch = cfg.arch or "sm_90a"
        seed = pol.seed(ctx)
        ranked = [c for _, c in pol.rank(pol.candidates(shape, acc, arch, dtype=ctx.dtype), shape)]
        picked = subjects(ranked, shape, PickSettings(top=max(0, cfg.seeds), kinds=cfg.pick_kinds,
                                                      siblings=cfg.pick_kinds),
                          incumbent=(cfg.incumbents or {}).get((shape, acc)),
                          per_call=getattr(pol, "launch", "per_call") == "per_call",
                          also=[c for c in (cfg.also or {}).get(acc, ()) if applicable(c.family, shape, arch)],
                          known=self._known_kernels(shape, acc))
        out: list[Proposal] = [seed] if seed.source else []
        for sub in [s for s in picked if s.known is not None] + [s for s in picked if s.known is None]:
            if any(p.source == sub.source for p in out):
                continue
            out.append(Proposal(source=sub.source, plan=self._pick_plan(sub, shape),
                                family=sub.config.family if sub.config else None, origin="seed", role="seed",
                                messages=seed.messages, completion=f"```cuda\n{sub.source}```\n"))
        return out

    def _pick_plan(self, sub: Subject, shape: Shape) -> str:
        """The plan line of one of the pick's proposals: what it is and why it is timed."""
        if sub.known is not None:
            k = sub.known
            where = "this shape" if k.shape == shape else f"the neighbouring shape {k.shape}"
            return f"pick: time the known kernel {k.name} ({k.layer}, best on {where})"
        c = sub.config
        if c is None:
            return "pick: time a kernel beside the others"
        why = {"incumbent": "the incumbent (it holds this shape now)",
               "twin": "the incumbent's launch without PDL", "also": "named by --also"}.get(sub.reason)
        return f"pick: time {c.name} beside the others: {why or self.policy.cost.estimate(c, shape).rationale()}"

    def _known_kernels(self, shape: Shape, acc: str) -> list[KnownKernel]:
        """The known kernels for ``shape`` (``KnownStore.seeds``) the pick times beside its own
        choices; a replayed recording is asked only for kernels it holds."""
        cfg = self.cfg
        if cfg.known is None:
            return []
        from harness.known import family_usable

        fam_ok = family_usable(shape, cfg.arch or "sm_90a")
        holds = getattr(self.policy, "_holds", None)
        return list(cfg.known.seeds(shape, acc, cfg.known_gpu, dtype=cfg.dtype,
                                    usable=lambda k: fam_ok(k) and (holds is None or holds(k.source, shape, acc))))

    def _record_known(self, shape: Shape, acc: str, best_src: str, best_ms: float, sp: float | None) -> None:
        """A track's verified winner into the local layer of the known kernels (not from a replay:
        a recording's timings are not new measurements)."""
        cfg = self.cfg
        if cfg.known is None or cfg.known_gpu is None or not math.isfinite(best_ms) \
                or getattr(self.policy, "_holds", None) is not None:
            return
        from harness.build import source_dtype
        from harness.known import KnownError, KnownKernel, git_revision, made_now

        c = Config.from_source(best_src)
        made = made_now(timing=f"offline, {getattr(self.policy, 'launch', 'per_call').replace('_', ' ')}",
                        gpu=cfg.known_info or {"name": cfg.known_gpu.name}, git=git_revision())
        try:
            cfg.known.record(KnownKernel(shape, acc, cfg.known_gpu, best_src, c.name if c else f"kernel {sha256(best_src)[:12]}",
                                         "local", sp, cfg.baseline if sp else None, best_ms, made,
                                         dtype=source_dtype(best_src)))
        except KnownError as e:
            self.progress(f"known kernels: {e}")

    def _sources_of(self, props: Sequence[Proposal], best_src: str, track: str, step: int) -> list[tuple[Proposal, str]]:
        """Each proposal's source: its own, or its patch applied to the best (a failed patch is
        logged and dropped)."""
        from l2tui.agent.patches import apply_patch

        sources = []
        for p in props:
            if p.source is not None:
                sources.append((p, p.source))
            else:
                r = apply_patch(best_src, p.patch or "", allow_rewrite=False)
                self.session.record(ev_schema.Patch(track=track, step=step, role="coder", ok=r.ok, error=r.error))
                if r.ok:
                    sources.append((p, r.source))
        return sources

    def _keep_winner(self, res: TrackResult, shape: Shape, acc: str, best_src: str, best_ms: float,
                     base_ms: dict[str, float]) -> None:
        """The track's result row, and its winner under ``winners/`` (``M_N_K.cu``, ``_f16`` suffix)."""
        c = Config.from_source(best_src)
        res.best_sha, res.best_name, res.best_ms = sha256(best_src), (c.name if c else None), best_ms
        res.baseline_ms = base_ms
        res.speedup = speedup(base_ms.get(self.cfg.baseline), best_ms)
        self._record_known(shape, acc, best_src, best_ms, res.speedup)
        if self.out_dir:
            wdir = self.out_dir / WINNERS_DIR
            wdir.mkdir(parents=True, exist_ok=True)
            (wdir / f"{shape.file_stem}{'' if acc == 'f32' else '_f16'}.cu").write_text(best_src)

    # ------------------------------------------------------------ all tracks

    def record_run(self, started: float, results: Sequence[TrackResult], ended: str) -> list[dict[str, object]]:
        """Append this invocation's times to ``sweep.json`` (``started``: its ``time.monotonic()``
        at the command's start); every run so far, this one last ([] without a results file)."""
        run = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "ended": ended,
               "wall_s": round(time.monotonic() - started, 3), "catalog": self.catalog_stats,
               "tracks": len(results), "gpu_s": round(sum(r.gpu_s for r in results), 3),
               "track_nvcc_s": round(sum(r.build_s for r in results), 3)}
        return self.cache.add_run(run) if self.cache else []

    def run(self) -> list[TrackResult]:
        """Every unfinished track, scheduled over the executor's GPU slots (module docstring)."""
        from l2tui.executors.base import ExecutorError

        tracks = [(s, a) for a in self.cfg.accs for s in self.cfg.shapes]
        todo = [(s, a) for s, a in tracks if not (self.cache and self.cache.done(track_id(s, a), self.gpu))]
        if len(tracks) > len(todo):
            self.progress(f"resuming: {len(tracks) - len(todo)} of {len(tracks)} tracks already done")
        slots = self.executor.slots()
        if todo and not slots:
            raise ExecutorError("no GPU to evaluate on: pass --recorded FILE or run on a GPU box")
        deadline = self._deadline()
        pool = SlotPool(self, todo, slots, len(tracks), deadline)
        if todo and slots and self.cfg.build_batches:
            self._start_builds(todo, deadline)
        try:
            pool.serve_all()
        except BaseException:
            self._kill_builds()   # Ctrl-C, SIGTERM: the queued builds never start, the running compilers die now
            raise
        self._close_builds(wait=not (pool.errors or pool.queue))
        if pool.errors:
            raise pool.errors[0]
        if pool.queue and pool.live and deadline is not None and time.monotonic() >= deadline:
            self.left_at_limit = len(pool.queue)
            self.progress(f"time limit: {len(pool.queue)} of {len(tracks)} tracks not started; continue with --resume")
            return pool.out
        if pool.queue:
            raise ExecutorError(f"every GPU was lost with {len(pool.queue)} track(s) left: "
                                f"continue with --resume once the GPUs are back")
        return pool.out

    def _kill_builds(self) -> None:
        """Stop the build queue and kill the running compilers (the sweep is being interrupted)."""
        if self.builds is None:
            return
        from harness.build import kill_all_builds

        self.builds.stop()
        kill_all_builds()
        self.builds.close(wait=False)

    def _close_builds(self, *, wait: bool) -> None:
        """Every track ran (its builds are done) or the sweep stopped early (``wait`` False: what
        is queued is skipped); the catalog's build figures for ``sweep.json``."""
        if self.builds is None:
            return
        self.catalog_stats = self.builds.close(wait=wait)
        self.unbuilt_at_limit = self.catalog_stats["not_started"]
        if self.catalog_stats.get("failed"):
            self.progress(f"{self.catalog_stats['failed']} of {self.catalog_stats['configs']} builds failed "
                          f"(their candidates are reported as compile errors)")


