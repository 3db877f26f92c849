"""``l2tui run --headless``: the agent loop without the app, with progress lines and a summary.

    l2tui run --headless --shapes 4096x4096x4096 --policy llm --session sessions/mine
    l2tui run --headless --session sessions/mine --resume        # after any stop, incl. kill -9

Without a GPU it refuses with one line, unless ``--recorded FILE`` replays
evaluations recorded on a GPU (demos, CI; builds still run through nvcc).
Ctrl-C (or SIGTERM) stops at the next stage boundary and the session stays
resumable.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Callable, TextIO

from harness.termtext import visible

from .. import events as ev_schema
from ..steering import dtype_switch_line

if TYPE_CHECKING:
    from harness.evaluate import Evaluator as GpuEvaluator
    from harness.shapes import Shape

    from ..agent.policies.base import Policy
    from ..config import Config

    from ..agent.loop import AgentLoop
    from ..agent.recorded import RecordedEvaluator
    from ..session import Session

NAME = "run"
HELP = "run the agent loop (headless: progress lines and a summary)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--headless", action="store_true", help="no app: print progress lines and a summary")
    p.add_argument("--shapes", dest="run_shapes", action="append", metavar="SPEC",
                   help="grid, small, sample100, MxNxK, a list or a shapes file (repeatable)")
    p.add_argument("--tokens", dest="run_tokens", metavar="LIST",
                   help="token counts (M) when --shapes names a model, e.g. 16,128,2048 (default 16,128,2048)")
    p.add_argument("--tp", dest="run_tp", type=int, metavar="N",
                   help="tensor-parallel degree when --shapes names a model (the GEMMs of one rank)")
    p.add_argument("--acc", choices=("f32", "f16"), help="accumulator of the tracks (default: [loop] acc)")
    p.add_argument("--dtype", choices=("fp16", "bf16"),
                   help="element type of A, B and C (default: [loop] dtype, fp16); bf16 accumulates in f32 only")
    p.add_argument("--policy", dest="run_policy", choices=("llm", "search", "human"), default=None,
                   help="who plays the roles (default: llm)")
    p.add_argument("--session", dest="run_session", metavar="DIR", help="session folder (default: a new one under sessions/)")
    p.add_argument("--resume", dest="run_resume", action="store_true", help="continue the session in --session")
    p.add_argument("--config", dest="run_config", metavar="FILE", help="config file (default: ./l2tui.toml, then the user config dir)")
    p.add_argument("--recorded", metavar="FILE", help="replay GPU evaluations recorded in FILE instead of using a GPU")
    p.add_argument("--max-steps", type=int, metavar="N", help="refinement steps per track ([loop] max_steps)")
    p.add_argument("--seed", dest="seed_kernel", metavar="SPEC", help="seed kernel: a .cu file or a family name ([loop] seed)")
    p.add_argument("--baseline", help="reward baseline ([harness] baseline)")
    p.add_argument("--mode", choices=("offline", "server"), help="timing mode ([harness] mode)")
    p.add_argument("--base-url", help="LLM endpoint ([llm] base_url)")
    p.add_argument("--model", help="LLM model ([llm] model)")
    p.add_argument("--quiet", action="store_true", help="only the summary")
    p.add_argument("--no-sandbox", dest="run_no_sandbox", action="store_true",
                   help="compile and load model-written kernels without the OS sandbox (bubblewrap); prints a warning")


def _versions() -> dict[str, str | None]:
    import platform

    import harness
    import l2tui

    v: dict[str, str | None] = {"l2tui": l2tui.__version__, "harness": harness.__version__, "python": platform.python_version()}
    try:
        import openai

        v["openai"] = openai.__version__
    except Exception:
        pass
    try:
        from harness.build import nvcc_version

        v["nvcc"] = nvcc_version()
    except Exception:
        v["nvcc"] = None
    return v


def _explicit_budgets(args: argparse.Namespace) -> set[str]:
    """The budget keys this command line sets (they win over a resumed session's own)."""
    return {"loop.max_steps"} if getattr(args, "max_steps", None) is not None else set()


def _fmt(x: object, spec: str = ".3f") -> str:
    return format(x, spec) if isinstance(x, (int, float)) else "-"


class Progress:
    """One line per interesting event (stdout, flushed)."""

    SHOW = {ev_schema.TRACK_ADDED, ev_schema.CANDIDATE, ev_schema.COMPILED, ev_schema.CHECKED, ev_schema.TIMED,
            ev_schema.PATCH, ev_schema.REWARD, ev_schema.BEST, ev_schema.PROFILING_ENABLED, ev_schema.PROFILED,
            ev_schema.ERROR, ev_schema.TRACK_DONE, ev_schema.LLM_RETRY, ev_schema.LLM_CALL,
            ev_schema.SESSION_RESUMED, ev_schema.HINT, ev_schema.DTYPE_SWITCH}

    def __init__(self, quiet: bool = False, out: TextIO | None = None):
        self.quiet = quiet
        self.out = out or sys.stdout

    def __call__(self, e: dict) -> None:
        if self.quiet or e.get("type") not in self.SHOW:
            return
        line = self.format(e)
        if line:
            print(visible(line), file=self.out, flush=True)

    @staticmethod
    def format(e: dict) -> str | None:
        typ = e["type"]
        ts = time.strftime("%H:%M:%S", time.localtime(e.get("time", time.time())))
        head = f"[{ts}] {e.get('track') or '-':<20} "
        step = f"step {e['step']:>2} " if isinstance(e.get("step"), int) else ""
        sha = (e.get("sha") or "")[:10]
        if typ == ev_schema.TRACK_ADDED:
            return head + f"added (baseline {e.get('baseline')})"
        if typ == ev_schema.CANDIDATE:
            return head + step + f"candidate {sha} ({e.get('origin')}, {e.get('policy')})"
        if typ == ev_schema.COMPILED:
            if e.get("ok"):
                p = e.get("ptxas") or {}
                return head + step + f"compiled in {_fmt(e.get('seconds'), '.1f')} s{' (cached)' if e.get('cached') else ''}: {p.get('registers', '?')} regs, {p.get('smem_bytes', '?')} B smem"
            errs = [x for x in e.get("errors") or [] if x.get("severity") != "warning"]
            first = errs[0].get("message", "") if errs else ""
            return head + step + f"compile error: {first[:120]}"
        if typ == ev_schema.CHECKED:
            return head + step + ("check ok" if e.get("ok") else f"check {e.get('status')}: {(e.get('detail') or '')[:120]}") + (
                f" (rel_err {_fmt(e.get('rel_err'), '.2e')})" if e.get("rel_err") is not None else "")
        if typ == ev_schema.TIMED:
            t = e.get("times_ms") or {}
            return head + step + f"{_fmt(t.get('candidate'), '.4f')} ms, {_fmt(e.get('speedup'))}x vs {e.get('baseline')} ({e.get('mode')})"
        if typ == ev_schema.PATCH:
            return head + step + f"{e.get('role')} patch " + ("applied" if e.get("ok") else f"failed: {(e.get('error') or '').splitlines()[0][:140]}")
        if typ == ev_schema.REWARD:
            return head + step + f"reward {_fmt(e.get('reward'))} ({e.get('kind')}, {e.get('role')})"
        if typ == ev_schema.BEST:
            sp = f"{_fmt(e.get('speedup'))}x vs {e.get('baseline')}" if e.get("speedup") is not None else "speedup unknown"
            return head + f"new best {sha}: {sp}"
        if typ == ev_schema.PROFILING_ENABLED:
            return head + step + f"profiling enters the context ({e.get('reason')})"
        if typ == ev_schema.PROFILED:
            return head + step + f"profiled {sha}: {e.get('verdict')}"
        if typ == ev_schema.ERROR:
            return head + f"error: {e.get('message')}"
        if typ == ev_schema.TRACK_DONE:
            return head + f"done ({e.get('reason')}), best {_fmt(e.get('best_speedup'))}x"
        if typ == ev_schema.LLM_RETRY:
            return head + step + f"{e.get('role')}: {e.get('error')}; retry {e.get('attempt')} in {_fmt(e.get('delay_s'), '.1f')} s"
        if typ == ev_schema.LLM_CALL:
            u = e.get("usage") or {}
            status = "ok" if e.get("ok") else f"failed: {e.get('error')}"
            return head + step + f"{e.get('role')} call {status} ({u.get('prompt_tokens', 0)}+{u.get('completion_tokens', 0)} tokens, {_fmt(e.get('seconds'), '.1f')} s)"
        if typ == ev_schema.SESSION_RESUMED:
            return f"[{ts}] resumed the session after event {e.get('from_seq')}"
        if typ == ev_schema.HINT:
            return head + f"hint: {e.get('text')}"
        if typ == ev_schema.DTYPE_SWITCH:
            return head + dtype_switch_line(e.get("dtype"), e.get("refused"))
        return None


def summary(session: Session) -> str:
    """A table of the tracks of a session (from its events only)."""
    tracks: dict[str, dict] = {}
    for e in session.events:
        tid = e.get("track")
        if not tid:
            continue
        d = tracks.setdefault(tid, {"state": "", "best": None, "sha": None, "steps": 0, "tokens": 0, "reason": "", "baseline": ""})
        typ = e["type"]
        if typ == ev_schema.TRACK_ADDED:
            d["baseline"] = e.get("baseline")
        elif typ == ev_schema.TRACK_STATE:
            d["state"] = e.get("state")
        elif typ == ev_schema.BEST:
            d["best"], d["sha"], d["baseline"] = e.get("speedup"), e.get("sha"), e.get("baseline")
        elif typ == ev_schema.CHECKPOINT:
            d["steps"] = e.get("steps_done", d["steps"])
        elif typ == ev_schema.LLM_CALL:
            u = e.get("usage") or {}
            d["tokens"] += int(u.get("prompt_tokens", 0)) + int(u.get("completion_tokens", 0))
        elif typ == ev_schema.TRACK_DONE:
            d["reason"] = e.get("reason")
    rewards = session.rewards()
    lines = [f"session {session.path}", f"{'track':<22} {'state':<8} {'steps':>5} {'best':>8}  {'baseline':<18} {'tokens':>8}  kernel        reason"]
    for tid, d in tracks.items():
        lines.append(f"{tid:<22} {d['state']:<8} {d['steps']:>5} {_fmt(d['best']) + 'x' if d['best'] is not None else '-':>8}  "
                     f"{d['baseline'] or '-':<18} {d['tokens']:>8}  {(d['sha'] or '-')[:12]:<12}  {d['reason'] or ''}")
    ok = sum(1 for r in rewards if r.get("kind") == "ok")
    lines.append(f"{len(rewards)} rewarded steps ({ok} ok), {sum(d['tokens'] for d in tracks.values())} LLM tokens; "
                 f"events: {len(session.events)}")
    return "\n".join(lines)


def _stop_on_endpoint_error(loop: AgentLoop, event: dict) -> None:
    """Headless, nobody can fix the endpoint and resume the paused tracks: the run stops at the
    loop's endpoint error (the app keeps the tracks paused instead)."""
    if event.get("type") == ev_schema.ERROR and loop.endpoint_error:
        loop.request_stop()


def run(args: argparse.Namespace) -> int:
    """The llm policy runs model-written kernels only inside the sandbox (harness.sandbox), unless
    --no-sandbox; the app path checks it itself."""
    from harness.sandbox import cli_choice

    no_sandbox = bool(getattr(args, "run_no_sandbox", False) or getattr(args, "no_sandbox", False))
    if not args.headless:
        args.no_sandbox = no_sandbox
        return _run(args)
    policy = getattr(args, "run_policy", None) or getattr(args, "policy", None) or "llm"
    with cli_choice(policy, no_sandbox):
        return _run(args)


@dataclass(frozen=True)
class _RunChoice:
    """What the user asked for, whichever spelling the parser gave it (``run``'s own options are
    prefixed ``run_``, the top-level ones are not)."""
    session_dir: str | None
    resume: bool
    shapes_spec: list[str] | None
    policy_name: str
    config_path: str | None


def _run_choice(args: argparse.Namespace) -> _RunChoice:
    """The session, resume, shapes, policy and config options, ``run``'s spelling first."""
    return _RunChoice(
        session_dir=getattr(args, "run_session", None) or getattr(args, "session", None),
        resume=bool(getattr(args, "run_resume", False) or getattr(args, "resume", False)),
        shapes_spec=getattr(args, "run_shapes", None) or getattr(args, "shapes", None),
        policy_name=getattr(args, "run_policy", None) or getattr(args, "policy", None) or "llm",
        config_path=getattr(args, "run_config", None) or getattr(args, "config", None),
    )


def _run(args: argparse.Namespace) -> int:
    """The app, or headless: every check that can fail before anything is created, then the
    evaluator, the session and the loop, run to its end or a stop."""
    choice = _run_choice(args)
    if not args.headless:
        return _launch_app(args, choice)
    cfg = _headless_config(args, choice)
    plan = _shape_plan(args, choice.shapes_spec)
    evaluator, replay, gpu = _evaluator(args, cfg)
    session = None
    try:
        policy, factory = _policy(choice.policy_name, cfg, gpu)
        if replay is not None:
            from .. import compose

            compose.require_recorded_shapes(replay.records, plan.shapes, cfg.loop["acc"], args.recorded)
        session, cfg = _session(args, choice, cfg, plan, gpu)
        loop = _agent_loop(args, session, cfg, policy, factory, evaluator, plan.shapes)
        if not args.quiet:
            print(f"session {session.path} ({len(loop.tracks)} track(s), policy {choice.policy_name})", flush=True)
        return _drive(loop, session)
    finally:
        evaluator.close()
        if session is not None:
            session.close()  # the writer lock


def _launch_app(args: argparse.Namespace, choice: _RunChoice) -> int:
    """``l2tui run`` without ``--headless``: the app runs the same loop, reading the top-level names."""
    from ..errors import UserError

    args.session, args.resume, args.shapes = choice.session_dir, choice.resume, choice.shapes_spec
    args.policy, args.config = choice.policy_name, choice.config_path
    args.app_recorded = args.recorded or getattr(args, "app_recorded", None)
    try:
        from ..tui.launch import launch_app
    except ImportError:
        raise UserError("the app is not available in this build; add --headless") from None
    return int(launch_app(args) or 0)


def _headless_config(args: argparse.Namespace, choice: _RunChoice) -> Config:
    """The configuration with the command line's overrides, refused in one line when it cannot run
    (a bad seed, an untimed baseline, resume without a session, no shapes, the human policy)."""
    from ..config import check_seed, load_config
    from ..errors import UserError

    cfg = load_config(choice.config_path)
    if args.seed_kernel:
        check_seed(args.seed_kernel, "", key="--seed")   # before any session, build or LLM call
    cfg = cfg.with_overrides({
        "loop.max_steps": args.max_steps, "loop.seed": args.seed_kernel, "loop.acc": args.acc,
        "loop.dtype": args.dtype,
        "harness.baseline": args.baseline, "harness.mode": args.mode,
        "llm.base_url": args.base_url, "llm.model": args.model,
    })
    if cfg.harness["baseline"] not in cfg.harness["baselines"]:
        raise UserError(f"baseline {cfg.harness['baseline']!r} is not timed: add it to [harness] baselines")
    if choice.resume and not choice.session_dir:
        raise UserError("--resume needs --session DIR (the session to continue)")
    if choice.policy_name == "human":
        raise UserError("the human policy needs the app (edits come from the editor); use --policy llm or search")
    if not choice.resume and not choice.shapes_spec:
        raise UserError("no shapes: add --shapes, e.g. --shapes 4096x4096x4096 or --shapes small")
    return cfg


@dataclass(frozen=True)
class _ShapePlan:
    """The shapes to run and what the spec says about them (token counts, tensor parallelism, each
    shape's role in a model), recorded in a new session's config."""
    shapes: list[Shape]
    tokens: tuple[int, ...] | None
    tp: int | None
    roles: dict[str, str]


def _shape_plan(args: argparse.Namespace, shapes_spec: list[str] | None) -> _ShapePlan:
    """The shapes of ``--shapes`` (a model's, at ``--tokens`` and ``--tp``); none on a resume without it."""
    from harness.models import parse_tokens
    from harness.shapes import resolve_shapes, shape_roles

    tokens = parse_tokens(args.run_tokens) if getattr(args, "run_tokens", None) else None
    tp = getattr(args, "run_tp", None)
    if not shapes_spec:
        return _ShapePlan(shapes=[], tokens=tokens, tp=tp, roles={})
    return _ShapePlan(shapes=resolve_shapes(shapes_spec, tokens=tokens, tp=tp), tokens=tokens, tp=tp,
                      roles={str(s): r for s, r in shape_roles(shapes_spec, tokens=tokens, tp=tp).items()})


def _evaluator(args: argparse.Namespace,
               cfg: Config) -> tuple[RecordedEvaluator | GpuEvaluator, RecordedEvaluator | None, dict]:
    """The evaluator, the replay when it is one, and the session's ``gpu`` entry: made before
    anything is created, so a missing GPU or an unreadable recording fails with nothing written."""
    from .. import compose

    if args.recorded:
        replay = compose.recorded_evaluator(args.recorded, arch=cfg.harness["arch"] or None, build="unrecorded",
                                            dtype=str(cfg.loop["dtype"]))
        return replay, replay, compose.recorded_gpu(replay.meta, args.recorded, provisional=replay.provisional)
    info = compose.require_local_gpu()
    return compose.config_gpu_evaluator(cfg), None, info.to_dict()


def _policy(policy_name: str, cfg: Config, gpu: dict) -> tuple[Policy, Callable[[str], Policy]]:
    """The policy and its factory; the llm policy against OpenAI's endpoint needs its key first."""
    from .. import compose
    from ..errors import UserError

    if policy_name == "llm" and cfg.llm["base_url"].startswith("https://api.openai.com") and cfg.api_key() is None:
        raise UserError(f"no API key: export ${cfg.llm['api_key_env']}, or point [llm] base_url at your endpoint "
                        f"(or use --policy search)")
    return compose.policies(policy_name, cfg, gpu)


def _session(args: argparse.Namespace, choice: _RunChoice, cfg: Config, plan: _ShapePlan,
             gpu: dict) -> tuple[Session, Config]:
    """The session resumed (its budgets apply unless given on this command line, its problems
    printed as warnings) or created with this run's config, and the config the loop runs with."""
    from .. import compose
    from ..paths import sessions_root

    if choice.resume and choice.session_dir:  # --resume without --session stopped before
        session = compose.open_session(choice.session_dir, writer="run")
        cfg = cfg.with_session_budgets(session.config, explicit=_explicit_budgets(args))
        for p in session.problems:
            print(f"l2tui: warning: {visible(p)}", file=sys.stderr)
        return session, cfg
    path = Path(choice.session_dir) if choice.session_dir else sessions_root() / time.strftime("run-%Y%m%d-%H%M%S")
    snap = cfg.snapshot()
    snap["run"] = {"policy": choice.policy_name, "shapes": list(choice.shapes_spec or []), "recorded": args.recorded,
                   **({"tokens": list(plan.tokens)} if plan.tokens else {}), **({"tp": plan.tp} if plan.tp else {}),
                   **({"roles": plan.roles} if plan.roles else {})}
    return compose.create_session(path, writer="run", config=snap, gpu=gpu, versions=_versions()), cfg


def _agent_loop(args: argparse.Namespace, session: Session, cfg: Config, policy: Policy,
                factory: Callable[[str], Policy], evaluator: RecordedEvaluator | GpuEvaluator,
                shapes: list[Shape]) -> AgentLoop:
    """The loop over the session's tracks, printing progress and stopping at an endpoint error;
    a session with no tracks is one line."""
    from .. import compose
    from ..errors import UserError

    loop = compose.agent_loop(session, cfg, policy=policy, policy_factory=factory, evaluator=evaluator,
                              shapes=shapes, acc=cfg.loop["acc"])
    loop.subscribe(Progress(args.quiet))
    loop.subscribe(partial(_stop_on_endpoint_error, loop))
    if not loop.tracks:
        raise UserError(f"session {session.path} has no tracks: add --shapes")
    return loop


def _drive(loop: AgentLoop, session: Session) -> int:
    """Runs the loop with Ctrl-C and SIGTERM asking it to stop at the next stage boundary (a second
    one aborts), then prints the summary and how to resume."""
    from ..errors import UserError

    stopping = {"n": 0}

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stopping["n"] += 1
        if stopping["n"] > 1:
            raise KeyboardInterrupt
        print("l2tui: stopping at the next stage boundary (Ctrl-C again to abort)", file=sys.stderr, flush=True)
        loop.request_stop()

    old_int = signal.signal(signal.SIGINT, on_signal)
    old_term = signal.signal(signal.SIGTERM, on_signal)
    try:
        loop.run()
    finally:
        signal.signal(signal.SIGINT, old_int)
        signal.signal(signal.SIGTERM, old_term)
    if loop.endpoint_error:
        raise UserError(f"{loop.endpoint_error}; then continue with: "
                        f"l2tui run --headless --session {session.path} --resume")
    print(visible(summary(session), single_line=False), flush=True)
    if stopping["n"]:
        print(f"resume with: l2tui run --headless --session {session.path} --resume", flush=True)
    return 0
