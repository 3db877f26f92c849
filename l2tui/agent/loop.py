"""The agent loop: seed → compile → check → time → (profile) → plan → patch → compile …

An explicit state machine per *track* (one shape, one accumulator).  Each
track runs as a generator that yields at every stage boundary; a small
scheduler advances the runnable tracks round-robin and applies commands from
the UI between stages.  That is what makes pause / step / stop / hint / edit
take effect "between stages" without threads per track, and lets a paused
track sit mid-step while the others continue.

Everything observable is an event appended to the session first and then
handed to subscribers (docs/INTERFACES.md, "Events").  The loop keeps no state
that is not derivable from the events: :meth:`AgentLoop._restore` rebuilds
tracks, bests, step counters, token use, history and the delayed-profiling
state from them, which is how ``--resume`` survives a ``kill -9``.

Extra event keys/types written here (readers ignore unknown ones):
``checkpoint`` (end of every refinement step: steps_done, stable, structure,
tokens, wall_s), ``llm_retry`` (one per retried LLM request), and ``origin`` /
``plan`` / ``speedup`` / ``role`` keys on ``reward`` events.
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Generator, Mapping, cast

from harness.build import BuildResult
from harness.channel import FrameError
from harness.evaluate import Evaluation, build_from_data, failed_build

from .. import events as ev_schema
from ..session import Session, sha256_text
from ..steering import LoopCommand
from .llm_client import EndpointUnusable
from .patches import apply_patch, unified_diff
from .policies.base import Attempt, Failure, Policy, Proposal, TrackContext
from .rewards import RewardConfig, code_lines
from .loop_commands import SteeringCommands, _live
from .interrupt import StepInterrupted
from .interrupt import interrupted as _interrupted
from .loop_profiling import Profiling
from .loop_restore import Restore
from .track import Gen, KernelEval, KnownCandidate, Track, track_id
from .seed_timing import time_pick, time_together
from .step import StepInfo, evaluation_of, one_line, record_reward, score, speedup
from .structure import guard_debug_patch, structure_key

if TYPE_CHECKING:
    from harness.channel import Json
    from harness.evaluator_protocol import Evaluator, ReplayEvaluator
    from harness.known import GpuKey, KnownKernel, KnownStore
    from harness.profiling.telemetry import TelemetrySampler
    from harness.shapes import Shape

    from ..config import Config

TERMINAL = ("done", "failed", "stopped_final")
DEBUGGABLE = ("compile_error", "wrong", "crashed", "timeout", "unsupported")
NOT_RECORDED = "not_recorded"


@dataclass
class LoopConfig:
    """The loop's knobs (from ``[loop]``, ``[harness]``, ``[rewards]``, ``[search]``)."""

    max_steps: int = 20
    debug_rounds: int = 3
    profile_after: int = 6
    stable_steps: int = 3
    wall_time_s: float = 0.0
    token_budget: int = 0
    global_wall_time_s: float = 0.0
    global_token_budget: int = 0
    context_tokens: int = 24000
    debug_max_lines: int = 40
    seed: str = ""
    known: bool = False               # seed from the known kernels and record each track's best (harness.known)
    allowed_flags: list[str] = field(default_factory=list)
    acc: str = "f32"
    dtype: str = "fp16"   # element type of A, B and C ([loop] dtype)
    baseline: str = "cublas"
    mode: str = "offline"
    arch: str | None = None
    parallel_tracks: int = 4
    telemetry_s: float = 0.0
    rewards: RewardConfig = field(default_factory=RewardConfig)
    options: dict = field(default_factory=dict)

    @classmethod
    def from_config(cls, cfg: Config) -> "LoopConfig":
        lp, h = cfg.loop, cfg.harness
        return cls(
            max_steps=lp["max_steps"], debug_rounds=lp["debug_rounds"], profile_after=lp["profile_after"],
            stable_steps=lp["stable_steps"], wall_time_s=lp["wall_time_s"], token_budget=lp["token_budget"],
            global_wall_time_s=lp["global_wall_time_s"], global_token_budget=lp["global_token_budget"],
            context_tokens=lp["context_tokens"], debug_max_lines=lp["debug_max_lines"], seed=lp["seed"],
            known=bool(lp.get("known", True)),
            allowed_flags=list(lp["allowed_flags"]), acc=lp["acc"], dtype=lp.get("dtype", "fp16"), baseline=h["baseline"], mode=h["mode"],
            arch=h["arch"] or None, parallel_tracks=lp["parallel_tracks"], telemetry_s=lp["telemetry_s"],
            rewards=RewardConfig.from_section(cfg.rewards), options=dict(cfg.search),
        )


class _LoopSink:
    """The loop's session as a reward sink: rows go to the session, events through ``_emit`` (subscribers see them)."""

    def __init__(self, loop: "AgentLoop"):
        self.loop = loop

    def record(self, event: ev_schema.Event) -> dict:
        return self.loop._emit(event)

    def append_reward(self, row: dict) -> dict:
        return self.loop.session.append_reward(row)


class AgentLoop(SteeringCommands, Restore, Profiling):
    """Runs tracks over one evaluator; see the module docstring."""

    def __init__(self, session: Session, config: LoopConfig, *, policy: Policy, evaluator: "Evaluator",
                 policy_factory: Callable[[str], Policy] | None = None):
        self.session = session
        self.config = config
        self.policy = policy
        self.evaluator = evaluator
        self.policy_factory = policy_factory
        self.tracks: dict[str, Track] = {}
        self.order: list[str] = []
        self._subs: list[Callable[[dict], None]] = []
        self._commands: "queue.Queue[LoopCommand]" = queue.Queue()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._rr = 0
        self._started: float | None = None
        self._global_tokens = 0
        self._global_wall_prior = 0.0
        self._seed_cache: dict[str, str | None] = {}
        # the known-kernels store and this evaluator's GPU key; resolved at the first seed
        self.known_store: "KnownStore | None" = None
        self.known_gpu: "GpuKey | None" = None
        self._known_ready = False
        # a replay of recorded evaluations re-reads old measurements: not recorded as new ones
        self.record_replays = False
        self._resumed_from: int | None = None
        self._telemetry: TelemetrySampler | None = None
        self._telemetry_next = 0.0
        #: one line, once the LLM endpoint failed its first call (see _endpoint_unusable)
        self.endpoint_error: str | None = None
        self._restore()

    # ================================================================== public API
    def add_track(self, shape: Shape, acc: str | None = None) -> str:
        acc = acc or self.config.acc
        tid = track_id(shape, acc)
        if tid in self.tracks:
            return tid
        t = Track(tid, shape, acc, self.config.baseline)
        self.tracks[tid] = t
        self.order.append(tid)
        self._emit(ev_schema.TrackAdded(track=tid, shape=[shape.m, shape.n, shape.k], acc=acc, baseline=t.baseline))
        self._set_state(t, "queued")
        return tid

    def subscribe(self, fn: Callable[[dict], None]) -> None:
        self._subs.append(fn)

    def send(self, command: LoopCommand | Mapping[str, object]) -> None:
        """Queue a steering command (:mod:`l2tui.steering`); it runs at the next stage boundary."""
        self._commands.put(LoopCommand.of(command))
        self._wake.set()

    def request_stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def run(self) -> None:
        """Blocking: until every track is done/failed/stopped or a stop is requested."""
        self._started = time.monotonic()
        self._stop.clear()
        reason = "finished"
        for t in self.tracks.values():  # a second run() continues what a stop interrupted
            if t.state == "stopped" and t.done_reason is None:
                self._set_state(t, "queued")
        if self._resumed_from is not None:
            self._emit(ev_schema.SessionResumed(from_seq=self._resumed_from))
            self._resumed_from = None
        try:
            while not self._stop.is_set():
                self._apply_commands()
                if self._stop.is_set():
                    reason = "stopped"
                    break
                live = [self.tracks[i] for i in self.order if self.tracks[i].state not in ("done", "failed") and self.tracks[i].done_reason is None]
                if not live:
                    break
                g = self._global_budget()
                if g:
                    for t in live:
                        self._finish(t, g)
                    reason = g
                    break
                active = [t for t in live if t.state == "running"]
                for t in live:
                    if len(active) >= max(1, self.config.parallel_tracks):
                        break
                    if t.state == "queued":
                        self._set_state(t, "running")
                        active.append(t)
                runnable = [t for t in active if t.state == "running"]
                if not runnable:
                    self._wake.wait(0.2)
                    self._wake.clear()
                    continue
                t = runnable[self._rr % len(runnable)]
                self._rr += 1
                self._advance(t)
                self._maybe_telemetry()
            else:
                reason = "stopped"
        finally:
            if self._telemetry is not None:
                self._telemetry.stop()
                self._telemetry = None
            now = time.monotonic()
            for t in self.tracks.values():
                if t.run_started is not None:
                    t.wall_prior += now - t.run_started
                    t.run_started = None
                if t.state in ("running", "queued", "paused") and t.done_reason is None:
                    self._set_state(t, "stopped")
            self._emit(ev_schema.SessionEnded(reason=reason))

    # ================================================================== telemetry
    def _maybe_telemetry(self) -> None:
        """A ``telemetry`` event every ``telemetry_s`` seconds (NVML sampler thread, read here)."""
        if not self.config.telemetry_s or self.evaluator.replays_recording:
            return  # off, or replaying recorded results (this machine's GPU is not the one measured)
        now = time.monotonic()
        if now < self._telemetry_next:
            return
        self._telemetry_next = now + self.config.telemetry_s
        if self._telemetry is None:
            try:
                from harness.profiling.telemetry import TelemetrySampler

                self._telemetry = TelemetrySampler(hz=1.0)
            except Exception:
                self.config.telemetry_s = 0.0
                return
            if not self._telemetry.available:
                self.config.telemetry_s = 0.0
                return
            self._telemetry.start()
        s = self._telemetry.latest() if hasattr(self._telemetry, "latest") else None
        s = s or self._telemetry.sample()
        if s:
            self._emit(_telemetry_event(s))

    # ================================================================== events
    def _emit(self, event: ev_schema.Event) -> dict:
        """Write one event to the session, then hand what was written to the subscribers."""
        ev = self.session.record(event)
        for fn in list(self._subs):
            try:
                fn(ev)
            except Exception:  # a broken subscriber must not stop the loop
                pass
        return ev

    def _set_state(self, t: Track, state: str) -> None:
        if t.state == state and state != "queued":
            return
        t.state = state
        if state == "running" and t.run_started is None:
            t.run_started = time.monotonic()
        elif state != "running" and t.run_started is not None:
            t.wall_prior += time.monotonic() - t.run_started
            t.run_started = None
        self._emit(ev_schema.TrackState(track=t.id, state=state))

    def _error(self, t: Track | None, message: str) -> None:
        self._emit(ev_schema.Error(track=t.id if t else None, message=one_line(message)))

    def _stage(self, t: Track, step: int, stage: str, status: str, detail: str | None = None) -> None:
        self._emit(ev_schema.Stage(track=t.id, step=step, stage=stage, status=status, detail=detail or None))

    # ================================================================== scheduling
    def _advance(self, t: Track) -> None:
        if t.gen is None:
            t.gen = self._track_gen(t)
        try:
            next(t.gen)
        except StopIteration:
            t.gen = None
            if t.done_reason is None and t.state == "running":
                self._finish(t, "finished")
        except StepInterrupted as e:  # the run is stopping: the track stays resumable, nothing is charged
            t.gen = None
            self._error(t, f"track {t.id}: {e}; resume to run the step again")
            self.request_stop()
            return
        except EndpointUnusable as e:  # a setup mistake, not the model's: nothing is charged
            t.gen = None
            self._endpoint_unusable(str(e))
            return
        except Exception as e:  # a bug or an evaluator failure: the track fails, the loop goes on
            t.gen = None
            self._error(t, f"track {t.id} failed: {type(e).__name__}: {e}")
            self._finish(t, "error", state="failed")
            return
        if t.step_once and t.state == "running":
            t.step_once = False
            self._set_state(t, "paused")

    def _policy(self, t: Track) -> Policy:
        return t.policy or self.policy

    def _endpoint_unusable(self, reason: str) -> None:
        """The LLM endpoint failed its first call: one error, and every live track that needs the
        model paused (the others go on). Resuming a track tries the endpoint again, so a user
        who fixes the server or the key goes on where it stopped; ``endpoint_error`` tells a
        headless run to stop."""
        self.endpoint_error = f"the LLM endpoint cannot be used ({reason}): fix [llm] base_url, model or the API key"
        self._error(None, f"{self.endpoint_error}; the tracks of the llm policy are paused until you resume them")
        for t in self.tracks.values():
            if _live(t) and self._policy(t).name == "llm" and t.state in ("running", "queued"):
                self._set_state(t, "paused")

    def _budget(self, t: Track) -> str | None:
        c = self.config
        if t.steps_done >= c.max_steps:
            return f"max_steps ({c.max_steps})"
        if c.wall_time_s and t.wall_s() >= c.wall_time_s:
            return f"wall_time ({c.wall_time_s:g} s)"
        if c.token_budget and t.tokens >= c.token_budget:
            return f"token_budget ({c.token_budget})"
        return None

    def _global_budget(self) -> str | None:
        c = self.config
        if c.global_token_budget and sum(t.tokens for t in self.tracks.values()) >= c.global_token_budget:
            return f"global_token_budget ({c.global_token_budget})"
        if c.global_wall_time_s and self._started is not None:
            if self._global_wall_prior + time.monotonic() - self._started >= c.global_wall_time_s:
                return f"global_wall_time ({c.global_wall_time_s:g} s)"
        return None

    def _finish(self, t: Track, reason: str, state: str = "done") -> None:
        if t.done_reason is not None:
            return
        t.done_reason = reason
        self._set_state(t, state)
        self._emit(ev_schema.TrackDone(track=t.id, reason=reason, best_sha=t.best_sha, best_speedup=t.best_speedup))
        self._record_known(t)

    # ================================================================== the state machine
    def _track_gen(self, t: Track) -> Gen:
        if t.best_sha is None:
            yield from self._seed(t)
            if t.best_sha is None:
                self._finish(t, "seed failed", state="failed")
                return
        while True:
            while t.pending_edits:
                yield from self._human_step(t, t.pending_edits.pop(0))
            reason = self._budget(t)
            if reason:
                self._finish(t, reason)
                return
            self._maybe_enable_profiling(t)
            if t.profiling_enabled and t.profiled_sha != t.best_sha:
                yield from self._profile(t)
            if self._policy(t).name == "human":
                if not t.pending_edits:
                    self._set_state(t, "paused")
                    yield
                continue
            yield from self._refine(t)
            self._end_step(t)
            yield

    def _ctx(self, t: Track, step: int) -> TrackContext:
        kept = t.best_eval
        emitted: set[str] = set()

        def emit(event: ev_schema.StepEvent) -> None:
            emitted.add(event.type)
            if isinstance(event, ev_schema.LlmCall):
                u = event.usage or {}
                n = int(u.get("prompt_tokens", 0)) + int(u.get("completion_tokens", 0))
                t.tokens += n
            event.track, event.step = t.id, step
            self._emit(event)

        ctx = TrackContext(
            track=t.id, shape=t.shape, acc=t.acc, baseline=t.baseline, step=step,
            source=t.best_source, sha=t.best_sha, evaluation=t.best_eval,
            times_ms=dict(kept.times_ms) if kept else {}, speedup=t.best_speedup,
            roofline_ms=kept.roofline_ms if kept else None,
            ptxas=dict(kept.ptxas) if kept and kept.ptxas is not None else None, errors=[], history=list(t.history), hint=t.hint,
            profile=t.profile if t.profiling_enabled else None, profiling_enabled=t.profiling_enabled,
            seed_source=self._seed_source(t), family=t.family, flags=list(t.flags),
            allowed_flags=list(self.config.allowed_flags), feedback=t.feedback, mode=self.config.mode,
            arch=self.config.arch, options=dict(self.config.options), emit=emit, dtype=self.config.dtype,
        )
        ctx._emitted = emitted  # type: ignore[attr-defined]
        return ctx

    def _seed_source(self, t: Track) -> str | None:
        spec = self.config.seed
        if spec in self._seed_cache:
            return self._seed_cache[spec]
        src: str | None = None
        if spec:
            p = Path(spec).expanduser()
            if p.suffix == ".cu" or p.is_file():
                try:
                    src = p.read_text()
                except OSError as e:
                    from ..errors import UserError

                    raise UserError(f"[loop] seed: cannot read {p}: {e.strerror}; fix the path") from None
            else:
                from harness.families import render

                src = render(spec, {"DTYPE": "DTYPE_BF16"} if self.config.dtype == "bf16" else None)
        self._seed_cache[spec] = src
        return src

    @staticmethod
    def _fallback_seed() -> str | None:
        from harness.paths import KERNELS_DIR

        p = KERNELS_DIR / "reference_naive.cu"
        return p.read_text() if p.is_file() else None

    # ------------------------------------------------------------------ known kernels
    def _known(self) -> "tuple[KnownStore | None, GpuKey | None]":
        """The known-kernels store and the GPU key of this evaluator (None, None when off or when
        neither can be had: a track then seeds as before)."""
        if not self.config.known:
            return None, None
        if not self._known_ready:
            self._known_ready = True
            from harness.known import GpuKey, KnownStore

            from ..executors.local import gpu_identity

            try:
                if self.known_gpu is None:
                    self.known_gpu = GpuKey.from_info(gpu_identity(self.evaluator))
                if self.known_store is None:
                    self.known_store = KnownStore()
            except Exception as e:   # a GPU worker that cannot say which GPU it is: seed as before
                if _interrupted(e):
                    raise
                self._error(None, f"known kernels unavailable: {one_line(e, 200)}")
                self.known_store = None
            for line in getattr(self.known_store, "problems", ()):
                self._error(None, f"known kernels: {one_line(line, 300)}")
        return self.known_store, self.known_gpu

    def _known_seeds(self, t: Track) -> "list[KnownKernel]":
        """The known kernels this track times first (``KnownStore.seeds``); a recording is asked
        only for kernels it holds (anything else would only come back not recorded)."""
        store, gpu = self._known()
        if store is None or self.config.seed:
            return []
        from harness.known import family_usable

        arch = self.config.arch or getattr(self.evaluator, "arch", None) or "sm_90a"
        fam_ok = family_usable(t.shape, arch)
        holds = self._replay_holds()

        def usable(k: "KnownKernel") -> bool:
            return fam_ok(k) and (holds is None or holds(k.source, t.shape, t.acc))
        return store.seeds(t.shape, t.acc, gpu, usable=usable, dtype=self.config.dtype)

    def _replay_holds(self) -> "Callable[[str, Shape, str], bool] | None":
        """Replaying a recording: whether it holds a kernel's result on a shape (``holds(source,
        shape, acc)``); None for an evaluator that measures."""
        if not getattr(self.evaluator, "replays_recording", False):
            return None
        holds = getattr(self.evaluator, "holds", None)
        return holds if callable(holds) else None

    def _time_known(self, t: Track, ctx: TrackContext, prop: Proposal, known: "list[KnownKernel]") -> Proposal:
        """The track's seed: the fastest of the known kernels and the policy's own choice, checked
        and timed in one request with the baseline (none needed when there is only one)."""
        from harness.families import Config

        subjects: "list[tuple[str, str, KnownKernel | None]]" = [(f"known-{i}", k.source, k) for i, k in enumerate(known)]
        if prop.source and all(prop.source != k.source for k in known):
            subjects.append(("policy", prop.source, None))
        winner = subjects[0]
        rows: list[str] = []
        if len(subjects) > 1:
            ctx.send(ev_schema.Stage(stage="known", status="start", detail=f"{len(subjects)} kernels"))
            evs = time_together(self.evaluator, [(label, src, ()) for label, src, _ in subjects], t.shape, t.acc,
                                t.baseline)
            ctx.send(ev_schema.Stage(stage="known", status="end"))
            timed: "list[tuple[float, int, tuple[str, str, KnownKernel | None]]]" = []
            for label, src, k in subjects:
                ev = evs.get(label)
                ms = (getattr(ev, "times_ms", None) or {}).get("candidate") if getattr(ev, "status", None) == "ok" else None
                name = k.name if k is not None else "the policy's choice"
                rows.append(f"{name}: " + (f"{ms * 1e3:.1f} us" if ms else str(getattr(ev, "status", "?"))))
                if ms:
                    timed.append((ms, len(timed), (label, src, k)))
            if timed:
                winner = min(timed)[2]
            elif prop.source:
                winner = subjects[-1]
        _, src, k = winner
        if k is None:
            return prop
        cfg = Config.from_source(src)
        if k.shape != t.shape:
            where = f"the known kernel of the neighbouring shape {k.shape}"
        elif self.known_gpu is not None and not k.gpu.same_model(self.known_gpu):
            where = f"the known kernel of {k.gpu.name} for the shape (timed here)"
        else:
            where = "this GPU's known kernel for the shape"
        plan = f"Start from {k.name}: {where} ({k.layer})."
        if rows:
            plan += " Timed together: " + "; ".join(rows) + "."
        return Proposal(source=src, plan=plan, family=cfg.family if cfg else prop.family, origin="seed", role="seed",
                        messages=prop.messages, completion=prop.completion, usage=prop.usage, model=prop.model)

    def _record_known(self, t: Track) -> None:
        """A finished track's verified best goes into the local layer of the known kernels."""
        store, gpu = self._known() if self.config.known else (None, None)
        kept = t.best_eval
        ms = kept.times_ms.get("candidate") if kept is not None else None
        if store is None or gpu is None or not t.best_source or kept is None or kept.status != "ok" or not ms:
            return
        if getattr(self.evaluator, "replays_recording", False) and not self.record_replays:
            return
        from harness.families import Config
        from harness.build import source_dtype
        from harness.known import KnownError, KnownKernel, git_revision, made_now

        from ..executors.local import gpu_identity

        cfg = Config.from_source(t.best_source)
        try:
            info = gpu_identity(self.evaluator)
            made = made_now(timing=f"{self.config.mode}, {kept.timing or 'per call'}", gpu=info, git=git_revision())
            sp = t.best_speedup if isinstance(t.best_speedup, (int, float)) and t.best_speedup > 0 else None
            store.record(KnownKernel(t.shape, t.acc, gpu, t.best_source,
                                     cfg.name if cfg else f"kernel {(t.best_sha or '')[:12]}",
                                     "local", sp, t.baseline if sp else None, float(ms), made,
                                     dtype=source_dtype(t.best_source)))
        except KnownError as e:
            self._error(t, f"known kernels: {e}")
        except Exception as e:   # the GPU worker went away after the track: nothing to record
            if _interrupted(e):
                raise
            self._error(t, f"known kernels: not recorded ({one_line(e, 200)})")

    def _seed(self, t: Track) -> Gen:
        step = t.step = 0
        pol = self._policy(t)
        self._stage(t, step, "seed", "start", pol.name)
        ctx = self._ctx(t, step)
        ctx.can_batch = self.evaluator.can_batch
        holds = self._replay_holds()
        if holds is not None and hasattr(pol, "replay_only"):   # seed and propose only what is recorded
            pol.replay_only(holds)
        try:
            ctx.known = self._known_seeds(t)
            prop = pol.seed(ctx)
            if prop.pick is not None:   # kernels to time before the seed: timed here, chosen by the policy
                prop = time_pick(self.evaluator, ctx, prop.pick)
            if ctx.known and not prop.known_timed:
                prop = self._time_known(t, ctx, prop, ctx.known)
        except EndpointUnusable:
            raise
        except Exception as e:
            if _interrupted(e):
                raise StepInterrupted(f"step {step} seed interrupted") from None
            prop = Proposal(origin="seed", role="seed", error=f"{type(e).__name__}: {e}")
        self._stage(t, step, "seed", "end")
        self._note_plan(ctx, prop)
        if prop.source is None:
            self._reward_failure(t, step, prop, None, None, "no_patch", prop.error or "no seed kernel")
            fb = self._fallback_seed() if self.config.dtype == "fp16" else None   # (the reference is fp16)
            if fb is None:
                self._error(t, f"no seed kernel for {t.id}: {prop.error}")
                return
            self._error(t, f"seed generation failed ({prop.error}); starting from the reference kernel")
            prop = Proposal(source=fb, plan="reference kernel (fallback seed)", origin="seed", role="seed")
        t.family = prop.family or t.family
        t.seed_lines = code_lines(prop.source or "")
        yield
        yield from self._evaluate_with_debug(t, step, prop.source or "", None, None, prop, "seed")

    def _note_plan(self, ctx: TrackContext, prop: Proposal) -> None:
        if prop.plan and ev_schema.PLAN not in getattr(ctx, "_emitted", set()):
            ctx.send(ev_schema.Plan(role=prop.role if prop.role != "seed" else "planner", text=prop.plan))

    def _refine(self, t: Track) -> Gen:
        t.step += 1
        step = t.step
        pol = self._policy(t)
        self._stage(t, step, "generate", "start", pol.name)
        ctx = self._ctx(t, step)
        try:
            props = pol.propose(ctx)
        except EndpointUnusable:
            t.step = step - 1   # the step never ran: resuming runs it under the same number
            raise
        except Exception as e:
            if _interrupted(e):
                raise StepInterrupted(f"step {step} proposal interrupted") from None
            props = [Proposal(error=f"policy {pol.name} failed: {type(e).__name__}: {e}")]
        self._stage(t, step, "generate", "end", f"{len(props)} proposal(s)")
        if not props:
            props = [Proposal(error=f"policy {pol.name} proposed nothing")]
        # every proposal of a step is relative to the best at the start of the step
        base_src, base_sha = t.best_source or "", t.best_sha
        for prop in props:
            self._note_plan(ctx, prop)
            yield
            yield from self._try_proposal(t, step, prop, base_src, base_sha)

    def _try_proposal(self, t: Track, step: int, prop: Proposal, base: str | None = None,
                      base_sha: str | None = None) -> Gen:
        if base is None:
            base, base_sha = t.best_source or "", t.best_sha
        if prop.error or (prop.source is None and prop.patch is None):
            why = prop.error or "the policy returned no code"
            self._error(t, f"step {step}: {why}")
            self._reward_failure(t, step, prop, base_sha, None, "no_patch", why)
            t.feedback = why
            return
        if prop.source is not None:
            new, diff, err = prop.source, unified_diff(base, prop.source), None
            if new == base:
                err = "the proposed kernel is identical to the current best"
        else:
            pr = apply_patch(base, prop.patch or "", allow_rewrite=prop.origin in ("rewrite", "seed"))
            new, diff, err = pr.source, pr.diff, pr.error
            if not pr.ok and not _has_code(prop.patch or ""):
                # nothing that even looks like code: the reply is unusable, not a bad patch
                self._emit(ev_schema.Patch(track=t.id, step=step, role=prop.role, ok=False, error=err))
                self._reward_failure(t, step, prop, base_sha, None, "no_patch", err or "no patch")
                t.feedback = err
                return
        self._emit(ev_schema.Patch(track=t.id, step=step, role=prop.role, ok=err is None, error=err))
        if err is not None:
            self._reward_failure(t, step, prop, base_sha, None, "patch_failed", err)
            t.feedback = err
            return
        t.feedback = None
        origin = prop.origin if prop.origin in ("patch", "rewrite", "human", "debug", "seed") else "patch"
        yield from self._evaluate_with_debug(t, step, new, base, base_sha, prop, origin, diff=diff)

    def _human_step(self, t: Track, source: str) -> Gen:
        t.step += 1
        step = t.step
        self._stage(t, step, "generate", "start", "human")
        self._stage(t, step, "generate", "end", "edit")
        prop = Proposal(source=source, plan="human edit", origin="human", role="human")
        yield from self._try_proposal(t, step, prop)
        self._end_step(t)

    # ------------------------------------------------------------------ evaluate + debug
    def _evaluate_with_debug(self, t: Track, step: int, source: str, parent_src: str | None,
                             parent_sha: str | None, prop: Proposal, origin: str,
                             diff: str | None = None) -> Generator[None, None, str]:
        cand, cprop, corigin, cparent, cparent_sha = source, prop, origin, parent_src, parent_sha
        rounds = 0
        feedback: str | None = None
        while True:
            sha = self.session.put_kernel(cand)
            flags = list(cprop.flags) if cprop.flags else list(t.flags)
            d = diff if diff is not None else unified_diff(cparent or "", cand) if cparent is not None else ""
            self._emit(ev_schema.Candidate(track=t.id, step=step, sha=sha, parent=cparent_sha, origin=corigin,
                       policy=self._policy(t).name, family=cprop.family or t.family, diff=d, flags=flags))
            diff = None
            yield
            kind, ev = yield from self._compile_and_eval(t, step, cand, sha, flags)
            self._reward_outcome(t, step, cprop, cparent_sha, sha, kind, ev, cand, flags)
            if kind not in DEBUGGABLE or rounds >= self.config.debug_rounds:
                return kind
            # ---------------- debug rounds
            failing_src, failing_sha = cand, sha
            fixed = False
            while rounds < self.config.debug_rounds and not fixed:
                rounds += 1
                yield
                failure = self._failure(kind, ev, failing_src, failing_sha, parent_src, rounds, feedback)
                self._stage(t, step, "debug", "start", f"round {rounds}: {kind}")
                ctx = self._ctx(t, step)
                try:
                    dprop = self._policy(t).debug(ctx, failure)
                except EndpointUnusable:
                    raise
                except Exception as e:
                    if _interrupted(e):
                        raise StepInterrupted(f"step {step} debug interrupted") from None
                    dprop = Proposal(origin="debug", role="debugger", error=f"{type(e).__name__}: {e}")
                self._stage(t, step, "debug", "end")
                dprop.role = dprop.role or "debugger"
                if dprop.error or (dprop.patch is None and dprop.source is None):
                    why = dprop.error or "the debugger returned no patch"
                    self._error(t, f"step {step} debug round {rounds}: {why}")
                    self._reward_failure(t, step, dprop, failing_sha, None, "no_patch", why)
                    return kind
                if dprop.source is not None:
                    new, err = dprop.source, None
                else:
                    pr = apply_patch(failing_src, dprop.patch or "", allow_rewrite=False)
                    new, err = pr.source, pr.error
                if err is None:
                    err = guard_debug_patch(failing_src, new, max_lines=self.config.debug_max_lines)
                    if err is None and new == failing_src:
                        err = "the debug patch changes nothing"
                self._emit(ev_schema.Patch(track=t.id, step=step, role="debugger", ok=err is None, error=err))
                if err is not None:
                    kind_r = "patch_failed"
                    self._reward_failure(t, step, dprop, failing_sha, None, kind_r, err)
                    feedback = err
                    continue
                feedback = None
                cand, cprop, corigin, cparent, cparent_sha = new, dprop, "debug", failing_src, failing_sha
                fixed = True
            if not fixed:
                return kind

    def _failure(self, kind: str, ev: Evaluation, src: str, sha: str, parent: str | None, rnd: int,
                 feedback: str | None) -> Failure:
        b = ev.build
        compile_failed = kind == "compile_error" and b is not None
        errs = [e.to_dict() for e in b.errors if e.severity != "warning"] if compile_failed and b else []
        log = b.log[-4000:] if compile_failed and b else ""
        return Failure(kind=kind, message=one_line(ev.message or kind), source=src, sha=sha,
                       parent_source=parent, errors=errs, check=ev.check, log=log, round=rnd,
                       feedback=feedback)

    def _build(self, t: Track, src: str, flags: list[str]) -> BuildResult:
        """The compile stage's build: the recording's own where a replay holds it (read as data),
        else nvcc's; a build that cannot start (no ``l2_hgemm``, a kernel of another element type,
        nvcc missing, bad flags) is a failed build with that one line."""
        from harness.build import build

        evaluator = self.evaluator
        recorded = cast("ReplayEvaluator", evaluator).recorded_build(src, t.shape, t.acc, flags) \
            if evaluator.replays_recording else None
        if recorded is None:
            return build(src, arch=self.config.arch, flags=flags, dtype=self.config.dtype)
        try:
            return build_from_data(cast("Json", recorded), "recorded build")
        except FrameError as e:
            return failed_build(one_line(f"a malformed recorded build: {e}"), self.config.arch or "", flags)

    def _compile_and_eval(self, t: Track, step: int, src: str, sha: str,
                          flags: list[str]) -> Generator[None, None, tuple[str, Evaluation]]:
        self._stage(t, step, "compile", "start")
        try:
            b = self._build(t, src, flags)
        except Exception as e:  # KernelSourceError (no l2_hgemm), ToolMissing, bad flags
            if _interrupted(e):
                self._stage(t, step, "compile", "end", "interrupted")
                raise StepInterrupted(f"step {step} compile interrupted") from None
            b = failed_build(one_line(e), self.config.arch or "", flags)
        errors = [e.to_dict() for e in b.errors][:20]
        self._emit(ev_schema.Compiled(track=t.id, step=step, sha=sha, ok=b.ok,
                   ptxas=b.ptxas.to_dict() if b.ptxas is not None else None,
                   errors=errors, seconds=round(float(b.seconds or 0.0), 3), cached=b.cached))
        self._stage(t, step, "compile", "end", "ok" if b.ok else "failed")
        if not b.ok:
            first = next((e.message for e in b.errors if e.severity != "warning"), "compile failed")
            return "compile_error", Evaluation("compile_error", b, message=f"compile error: {first}")
        yield
        self._stage(t, step, "check", "start")
        try:
            ev = evaluation_of(self.evaluator.evaluate(src, t.shape, t.acc, flags=flags, label="candidate"))
        except Exception as e:  # the worker died, the GPU went away...
            if _interrupted(e):
                self._stage(t, step, "check", "end", "interrupted")
                raise StepInterrupted(f"step {step} evaluation interrupted") from None
            ev = Evaluation("crashed", b, message=one_line(f"evaluator failed: {e}"))
        if ev.build is None:
            ev = replace(ev, build=b)
        status = ev.status or "crashed"
        chk = ev.check or {}
        self._emit(ev_schema.Checked(track=t.id, step=step, sha=sha, ok=status == "ok", status=status,
                   failed=chk.get("failed"), detail=one_line(chk.get("detail") or ev.message or ""),
                   rel_err=chk.get("rel_err"), bound=chk.get("bound")))
        self._stage(t, step, "check", "end", status)
        if status != "ok":
            return status, ev
        yield
        self._stage(t, step, "time", "start")
        times = dict(ev.times_ms)
        timing = ev.extra.get("timing")
        self._emit(ev_schema.Timed(track=t.id, step=step, sha=sha, mode=ev.extra.get("mode") or self.config.mode,
                   times_ms=times, roofline_ms=ev.roofline_ms, baseline=t.baseline, speedup=speedup(times, t.baseline),
                   timing=timing if isinstance(timing, str) else None, **ev_schema.library_fields(ev.extra)))
        self._stage(t, step, "time", "end")
        return "ok", ev

    # ------------------------------------------------------------------ rewards / best
    def _row(self, t: Track, step: int, prop: Proposal, parent: str | None, child: str | None, kind: str,
             reward: float, parts: dict, speedup: float | None) -> None:
        pol = self._policy(t)
        info = StepInfo(track=t.id, shape=(t.shape.m, t.shape.n, t.shape.k), acc=t.acc, baseline=t.baseline,
                        policy=pol.name, model=getattr(pol, "model", None), dtype=self.config.dtype)
        record_reward(_LoopSink(self), info, step, prop, parent=parent, child=child, kind=kind, reward=reward,
                      parts=parts, speedup=speedup, seed_lines=t.seed_lines)

    def _reward_failure(self, t: Track, step: int, prop: Proposal, parent: str | None, child: str | None,
                        kind: str, why: str) -> None:
        r, parts = score(kind, speedup=None, check=None, source="", seed_lines=t.seed_lines,
                         cfg=self.config.rewards, message=why)
        self._row(t, step, prop, parent, child, kind, r, parts, None)
        t.history.append(Attempt(step, prop.plan, prop.origin, kind, child, None, r, one_line(why, 160)))

    def _reward_outcome(self, t: Track, step: int, prop: Proposal, parent: str | None, sha: str, kind: str,
                        ev: Evaluation, src: str, flags: list[str]) -> None:
        sp = speedup(ev.times_ms, t.baseline) if kind == "ok" else None
        r, parts = score(kind, speedup=sp, check=ev.check, source=src, seed_lines=t.seed_lines,
                         cfg=self.config.rewards, message=ev.message)
        self._row(t, step, prop, parent, sha, kind, r, parts, sp)
        kept = KernelEval.of(ev)
        if kind == "ok":
            t.known[sha] = KnownCandidate(kept, sp, tuple(flags))
            better = t.best_sha is None or (sp is not None and (t.best_speedup is None or sp > t.best_speedup))
            if better:
                self._set_best(t, sha, src, kept, sp, flags, by="policy")
            note = one_line(ev.message or "ok", 160)
            t.history.append(Attempt(step, prop.plan, prop.origin, kind, sha, sp, r, note, better))
            return
        if kind == NOT_RECORDED:
            if t.best_sha is None and prop.origin == "seed":
                # an unrecorded seed still anchors the track (no speedup known)
                self._set_best(t, sha, src, kept, None, flags, by="policy")
            t.history.append(Attempt(step, prop.plan, prop.origin, kind, sha, None, 0.0, "no recorded GPU result"))
            return
        t.history.append(Attempt(step, prop.plan, prop.origin, kind, sha, None, r, one_line(ev.message or kind, 160)))

    def _set_best(self, t: Track, sha: str, src: str, kept: KernelEval, sp: float | None, flags: list[str],
                  by: str) -> None:
        if t.best_sha and t.best_sha != sha:
            t.best_stack.append(t.best_sha)
        t.best_sha, t.best_source, t.best_eval, t.best_speedup = sha, src, kept, sp
        t.flags = list(flags)
        self._emit(ev_schema.Best(track=t.id, sha=sha, speedup=sp, baseline=t.baseline, times_ms=dict(kept.times_ms)))
        self._emit(ev_schema.Decision(track=t.id, sha=sha, action="accept", by=by))

    def _end_step(self, t: Track) -> None:
        t.steps_done += 1
        key = structure_key(t.best_source or "")
        if key == t.last_structure:
            t.stable += 1
        else:
            t.stable, t.last_structure = 0, key
        self._emit(ev_schema.Checkpoint(track=t.id, step=t.step, steps_done=t.steps_done, stable=t.stable,
                   structure=key, tokens=t.tokens, wall_s=round(t.wall_s(), 3), best_sha=t.best_sha,
                   best_speedup=t.best_speedup, profiling_enabled=t.profiling_enabled))



def _has_code(reply: str) -> bool:
    from .patches import has_patch_markers

    return has_patch_markers(reply) or "```" in reply or "l2_hgemm" in reply


def _reading(sample: Mapping[str, object], key: str) -> float | None:
    """One field of an NVML sample: a number, else no reading (None)."""
    v = sample.get(key)
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _telemetry_event(sample: Mapping[str, object]) -> ev_schema.Telemetry:
    """The ``telemetry`` event of one NVML sample."""
    return ev_schema.Telemetry(
        sm_clock_mhz=_reading(sample, "sm_clock_mhz"), mem_clock_mhz=_reading(sample, "mem_clock_mhz"),
        temp_c=_reading(sample, "temp_c"), power_w=_reading(sample, "power_w"),
        power_limit_w=_reading(sample, "power_limit_w"), util_pct=_reading(sample, "util_pct"),
        mem_used_mib=_reading(sample, "mem_used_mib"))


def make_loop(session: Session, cfg: Config, *, policy: Policy, evaluator: "Evaluator",
              policy_factory: Callable[[str], Policy] | None = None) -> AgentLoop:
    """Convenience: an AgentLoop from an ``l2tui.config.Config``."""
    return AgentLoop(session, LoopConfig.from_config(cfg), policy=policy, evaluator=evaluator,
                     policy_factory=policy_factory)


__all__ = ["AgentLoop", "LoopConfig", "Track", "track_id", "make_loop", "sha256_text"]
