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
from typing import Any, Callable

from .. import paths
from ..errors import SessionError, UserError


def ui_settings(cfg: Any) -> tuple[dict[str, str], float, str | None]:
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


def endpoint_configured(cfg: Any) -> bool:
    """An LLM endpoint counts as configured when the config file sets ``[llm] base_url``
    or the API key variable it names is set in the environment."""
    if cfg is None:
        return False
    src = getattr(cfg, "source", None)
    if src is not None:
        try:
            import tomllib
        except ModuleNotFoundError:  # Python 3.10
            import tomli as tomllib  # type: ignore[no-redef]
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


def default_policy(cfg: Any, requested: str | None = None) -> str:
    """``--policy`` wins; else ``llm`` with a configured endpoint; else ``search``."""
    if requested:
        return requested
    return "llm" if endpoint_configured(cfg) else "search"


def gpu_present() -> bool:
    """NVML / nvidia-smi only (no CUDA context).  ``L2TUI_FAKE_NO_GPU=1`` forces False (tests)."""
    import os

    if os.environ.get("L2TUI_FAKE_NO_GPU") == "1":
        return False
    try:
        from harness.gpuinfo import gpu_present as _present
    except ImportError:  # pragma: no cover - harness always ships with l2tui
        import shutil
        import subprocess

        smi = shutil.which("nvidia-smi")
        if not smi:
            return False
        r = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=20)
        return r.returncode == 0 and "GPU" in r.stdout
    return _present()


def make_replay_app(session_path: str | Path, *, cfg: Any = None, speed: float = 1.0, autoplay: bool = True,
                    start: int | None = None, note: str = ""):
    """The app on a recorded session; never touches a GPU."""
    from .app import L2App, UIContext
    from .sessionio import open_session

    keys, hz, theme = ui_settings(cfg)
    sess = open_session(session_path)
    ctx = UIContext(session=sess, events=list(sess.events), replay=True, speed=speed, autoplay=autoplay,
                    start=start, keys=keys, note=note, title=f"l2tui replay {Path(session_path).name}",
                    baseline=None)  # the session's own reward baseline until the user picks another
    app = L2App(ctx)
    _apply_theme(app, theme)
    return app


def _apply_theme(app: Any, theme: str | None) -> None:
    if not theme:
        return
    if theme not in app.available_themes:
        from ..errors import ConfigError

        raise ConfigError(f"[ui] theme = {theme!r} is not a Textual theme; use one of: "
                          f"{', '.join(sorted(app.available_themes))}")
    app.theme = theme


def _cfg_get(cfg: Any, dotted: str) -> Any:
    try:
        return cfg.get(dotted) if cfg is not None else None
    except (KeyError, AttributeError, ValueError):
        return None


def _loop_factory(cfg: Any, session: Any, policy: str, shapes: list, acc: str, resume: bool) -> Callable[[], Any]:
    """Build the AgentLoop in the worker thread (agent, openai and harness imports stay off start-up)."""

    def build() -> Any:
        from harness.evaluate import Evaluator

        from ..agent.loop import make_loop
        from ..agent.policies import make_policy

        h = cfg.harness
        ev = Evaluator(arch=h.get("arch") or None, baselines=tuple(h["baselines"]), mode=h["mode"],
                       timeout_s=h["timeout_s"])
        lp = make_loop(session, cfg, policy=make_policy(policy, cfg), evaluator=ev,
                       policy_factory=lambda name: make_policy(name, cfg))
        if not resume:
            for s in shapes:
                lp.add_track(s, acc)
        return lp

    return build


def make_live_app(args: argparse.Namespace, cfg: Any):
    from harness.gpuinfo import list_gpus
    from harness.shapes import resolve_shapes

    from .. import __version__
    from ..session import Session
    from .app import L2App, UIContext
    from .widgets.feeds import LoopHandle

    keys, hz, theme = ui_settings(cfg)
    policy = default_policy(cfg, getattr(args, "policy", None))
    shapes = resolve_shapes(getattr(args, "shapes", None), default="sample100")
    acc = cfg.loop["acc"]
    resume = bool(getattr(args, "resume", False))
    if args.session:
        path = Path(args.session)
        has_events = (path / "events.jsonl").is_file() and (path / "events.jsonl").stat().st_size > 0
        if has_events and not resume:
            raise SessionError(f"{path} already holds a session: add --resume to continue it, "
                               f"or watch it with `l2tui replay {path}`")
    else:
        if resume:
            raise UserError("--resume needs --session DIR (the session to continue)")
        path = paths.sessions_root() / time.strftime(f"%Y%m%d-%H%M%S-{policy}")
    gpus = list_gpus()
    gpu = gpus[0].to_dict() if gpus else {}
    if resume:
        session = Session.open(path)
    else:
        session = Session.create(path, config={**cfg.snapshot(), "policy": policy}, gpu=gpu,
                                 versions={"l2tui": __version__})
    ctx = UIContext(session=session, events=list(session.events), replay=False, handle=LoopHandle(),
                    loop_factory=_loop_factory(cfg, session, policy, shapes, acc, resume),
                    keys=keys, baseline=cfg.harness["baseline"], title=f"l2tui {path.name}", flush_hz=hz,
                    telemetry_hz=1.0 if cfg.ui.get("show_telemetry", True) else 0.0)
    app = L2App(ctx)
    _apply_theme(app, theme)
    return app


def launch_app(args: argparse.Namespace) -> int:
    """Entry point used by ``l2tui`` (see :mod:`l2tui.cli`)."""
    from ..config import load_config

    cfg = load_config(getattr(args, "config", None))
    ui_settings(cfg)  # validate [keys] before anything is drawn
    if not gpu_present():
        demo = paths.demo_session()
        if demo is None:
            raise UserError("no NVIDIA GPU found and no demo session bundled: run on a GPU machine, "
                            "or `l2tui replay SESSION` to watch a recorded session")
        print(f"l2tui: no NVIDIA GPU found (NVML / nvidia-smi); opening the bundled demo session {demo.name} in replay",
              file=sys.stderr)
        app = make_replay_app(demo, cfg=cfg, note="no GPU: demo replay")
    else:
        app = make_live_app(args, cfg)
    app.run()
    return int(app.return_code or 0)
