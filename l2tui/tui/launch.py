"""``l2tui`` with no sub-command: open the app live on a new (or resumed) session, or in replay.

Start-up imports only what the first frame needs: the agent loop, the policy
(openai) and the evaluator are built inside the loop's worker thread after the
app is on screen.  GPU detection is NVML / nvidia-smi (``harness.gpuinfo``), so
the UI process never creates a CUDA context.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from .. import paths
from ..errors import SessionError, UserError

if TYPE_CHECKING:
    from harness.evaluator_protocol import Evaluator
    from harness.gemm_shape import Shape

    from ..config import Config
    from ..session import Session
    from .app import L2App
    from .loophandle import SteeredLoop

#: replay speed of the demo a plain ``l2tui`` opens: the bundled demo's event clock runs about
#: 110 s (a two-minute session with its long idle gaps shortened), so at ×2 a newcomer watches it
#: unfold for about a minute; ``+`` / ``-`` change it
DEMO_SPEED = 2.0


def ui_settings(cfg: Config | None) -> tuple[dict[str, str], float, str | None]:
    """(validated [keys] keymap, flush rate in Hz, theme) from a Config (or None)."""
    from .keymap import validate_keymap

    if cfg is None:
        return {}, 15.0, None
    data = getattr(cfg, "data", {}) or {}
    keys = validate_keymap(dict(data.get("keys") or {}), str(getattr(cfg, "source", None) or "config"))
    ui = data.get("ui") or {}
    refresh_ms = float(ui.get("refresh_ms") or 66)
    hz = max(1.0, min(50.0, 1000.0 / refresh_ms))
    return keys, hz, ui.get("theme")


def endpoint_configured(cfg: Config | None) -> bool:
    """An LLM endpoint counts as configured when the config file sets ``[llm] base_url``
    or the API key variable it names is set in the environment."""
    if cfg is None:
        return False
    src = getattr(cfg, "source", None)
    if src is not None:
        from ..config import tomllib

        try:
            doc = tomllib.loads(Path(src).read_text(encoding="utf-8"))
            if (doc.get("llm") or {}).get("base_url"):
                return True
        except (OSError, ValueError):
            pass
    try:
        return bool(cfg.api_key())
    except Exception:  # noqa: BLE001 - a config without api_key(): not configured
        return False


def default_policy(cfg: Config | None, requested: str | None = None) -> str:
    """``--policy`` wins; else ``llm`` with a configured endpoint; else ``search``."""
    if requested:
        return requested
    return "llm" if endpoint_configured(cfg) else "search"


def gpu_present() -> bool:
    """NVML / nvidia-smi only (no CUDA context); see :func:`l2tui.demo.gpu_present`."""
    from ..demo import gpu_present as _present

    return _present()


def make_replay_app(session_path: str | Path, *, cfg: Config | None = None, speed: float = 1.0, autoplay: bool = True,
                    start: int | None = None, note: str = "", notice: str = "") -> L2App:
    """The app on a recorded session; never touches a GPU."""
    from .app import L2App, UIContext
    from .sessionio import open_session

    keys, hz, theme = ui_settings(cfg)
    sess = open_session(session_path)
    ctx = UIContext(session=sess, events=list(sess.events), replay=True, speed=speed, autoplay=autoplay,
                    start=start, keys=keys, note=note, notice=notice, title=f"l2tui replay {Path(session_path).name}",
                    baseline=None)  # the session's own reward baseline until the user picks another
    app = L2App(ctx)
    _apply_theme(app, theme)
    return app


def _apply_theme(app: L2App, theme: str | None) -> None:
    if not theme:
        return
    if theme not in app.available_themes:
        from ..errors import ConfigError

        raise ConfigError(f"[ui] theme = {theme!r} is not a Textual theme; use one of: "
                          f"{', '.join(sorted(app.available_themes))}")
    app.theme = theme


def _loop_factory(cfg: Config, session: Session, policy: str, shapes: list[Shape], acc: str, resume: bool,
                  recorded: str | None = None, wrap: Callable[[Evaluator], Evaluator] | None = None,
                  gpu: dict | None = None) -> Callable[[], SteeredLoop]:
    """Build the AgentLoop in the worker thread (agent, openai and harness imports stay off start-up).

    ``recorded``: replay the GPU evaluations in that file instead of using a GPU; ``wrap``: a
    function the evaluator goes through first (the demo recorder keeps every evaluation)."""

    def build() -> SteeredLoop:
        from .. import compose

        ev = compose.loop_evaluator(cfg, recorded)
        if wrap is not None:
            ev = wrap(ev)
        pol, factory = compose.policies(policy, cfg, gpu or {})
        return compose.agent_loop(session, cfg, policy=pol, policy_factory=factory, evaluator=ev,
                                  shapes=() if resume else shapes, acc=acc)

    return build


def _roles(spec: list[str] | None) -> dict[str, str]:
    """What each ``--shapes`` shape is for, where the spec says (a model, a shapes file's comments)."""
    from harness.shapes import shape_roles

    return {str(s): r for s, r in shape_roles(spec).items()} if spec else {}


def wants_live(args: argparse.Namespace) -> bool:
    """True when the command line asks for a live run (any of the run's own options);
    only a plain ``l2tui`` (``--config`` at most) may fall back to the demo replay."""
    return any(getattr(args, name, None)
               for name in ("session", "resume", "shapes", "policy", "app_recorded", "no_sandbox", "app_dtype"))


def make_live_app(args: argparse.Namespace, cfg: Config, *, wrap: Callable[[Evaluator], Evaluator] | None = None) -> L2App:
    """The app on a new (or resumed) session with the loop attached.

    Everything a user can get wrong is checked before anything is created, in the order
    ``l2tui run`` checks it (session options, shapes, then the GPU), with the same one-line
    errors; without a GPU only ``--recorded FILE`` goes on."""
    from harness.shapes import resolve_shapes

    from .. import __version__, compose
    from ..demo import no_gpu_message
    from .app import L2App, UIContext
    from .loophandle import LoopHandle

    keys, hz, theme = ui_settings(cfg)
    policy = default_policy(cfg, getattr(args, "policy", None))
    from harness.sandbox import cli_choice

    cli_choice(policy, bool(getattr(args, "no_sandbox", False)))   # llm / human: a working sandbox or --no-sandbox
    resume = bool(getattr(args, "resume", False))
    recorded = getattr(args, "app_recorded", None)
    if resume and not args.session:
        raise UserError("--resume needs --session DIR (the session to continue)")
    if args.session:
        path = Path(args.session)
        has_events = (path / "events.jsonl").is_file() and (path / "events.jsonl").stat().st_size > 0
        if has_events and not resume:
            raise SessionError(f"{path} already holds a session: add --resume to continue it, "
                               f"or watch it with `l2tui replay {path}`")
        if resume and not has_events:
            raise SessionError(f"{path} is not a session to resume (no events.jsonl): check the path, "
                               f"or leave out --resume to start a new session there")
    else:
        path = paths.sessions_root() / time.strftime(f"%Y%m%d-%H%M%S-{policy}")
    shapes = resolve_shapes(getattr(args, "shapes", None), default="sample100")
    gpu: dict = {}
    if recorded:
        # one line for an unreadable file, or a recording of another element type than the run's
        replay = compose.recorded_evaluator(recorded, build=False, dtype=str(cfg.loop["dtype"]))
        if not resume and getattr(args, "shapes", None):
            compose.require_recorded_shapes(replay.records, shapes, cfg.loop["acc"], recorded)
        meta = replay.meta
        gpu = compose.recorded_gpu(meta, recorded)
    elif not gpu_present():
        raise UserError(no_gpu_message())
    else:
        from harness.gpuinfo import list_gpus

        gpus = list_gpus()
        gpu = gpus[0].to_dict() if gpus else {}
    if resume:
        session = compose.open_session(path, writer="app")
        cfg = cfg.with_session_budgets(session.config)
    else:
        snap = {**cfg.snapshot(), "policy": policy}
        run: dict[str, object] = {"policy": policy, "shapes": [str(s) for s in shapes]}
        if recorded:
            run["recorded"] = str(recorded)
        roles = _roles(getattr(args, "shapes", None))
        if roles:   # the list view, the export and rl-data name a model's shapes by their role
            run["roles"] = roles
        if recorded or roles:
            snap["run"] = run
        session = compose.create_session(path, writer="app", config=snap, gpu=gpu, versions={"l2tui": __version__})
    ctx = UIContext(session=session, events=list(session.events), replay=False, handle=LoopHandle(),
                    loop_factory=_loop_factory(cfg, session, policy, shapes, cfg.loop["acc"], resume,
                                               recorded=recorded, wrap=wrap, gpu=gpu),
                    keys=keys, baseline=cfg.harness["baseline"], title=f"l2tui {path.name}", flush_hz=hz,
                    telemetry_hz=1.0 if cfg.ui.get("show_telemetry", True) and not recorded else 0.0,
                    note="recorded evaluations" if recorded else "")
    app = L2App(ctx)
    _apply_theme(app, theme)
    return app


def make_demo_app(cfg: Config | None) -> L2App:
    """A plain ``l2tui`` without a GPU: the bundled demo in replay, from its first event, playing,
    with a notice that says what it is."""
    from ..demo import demo_notice

    demo = paths.demo_session()
    if demo is None:
        raise UserError("no NVIDIA GPU found and no demo session bundled: run on a GPU machine, "
                        "or `l2tui replay SESSION` to watch a recorded session")
    notice = demo_notice(demo)
    print(f"l2tui: {notice}", file=sys.stderr)
    return make_replay_app(demo, cfg=cfg, speed=DEMO_SPEED, note="no GPU: demo replay", notice=notice)


def launch_app(args: argparse.Namespace) -> int:
    """Entry point used by ``l2tui`` and ``l2tui run`` (see :mod:`l2tui.cli`)."""
    from ..config import load_config

    cfg = load_config(getattr(args, "config", None))
    # `l2tui --dtype` or `l2tui run --dtype` (the app): bf16 with f16 accumulation is one line here
    cfg = cfg.with_overrides({"loop.dtype": getattr(args, "app_dtype", None) or getattr(args, "dtype", None),
                              "loop.acc": getattr(args, "acc", None)})
    ui_settings(cfg)  # validate [keys] before anything is drawn
    if not wants_live(args) and not gpu_present():
        app = make_demo_app(cfg)
    else:
        app = make_live_app(args, cfg)
    app.run()
    return int(app.return_code or 0)
