"""Every path l2tui itself reads or writes, in one place (the harness has its own,
``harness.paths``, because it must not import l2tui).

* config: ``./l2tui.toml`` first, then ``<user config dir>/l2tui/l2tui.toml``;
* prompts: shipped inside the wheel as ``l2tui/prompts``; in a checkout they are
  read from the top-level ``prompts/`` folder;
* sessions: ``./sessions/<name>`` when run from a checkout, else the user data dir;
* the bundled demo session: ``DEMO_SESSION`` (``sessions/demo-h200``), with a fallback
  (``FALLBACK_DEMO_SESSION``) while none is bundled.
"""

from __future__ import annotations

import os
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
REPO_ROOT = PACKAGE_DIR.parent
CONFIG_FILENAME = "l2tui.toml"


def is_checkout() -> bool:
    """True when running from a source checkout (pyproject.toml beside the package)."""
    return (REPO_ROOT / "pyproject.toml").is_file() and (REPO_ROOT / "harness").is_dir()


def prompts_dir() -> Path:
    shipped = PACKAGE_DIR / "prompts"
    if shipped.is_dir():
        return shipped
    return REPO_ROOT / "prompts"


def user_config_file() -> Path:
    env = os.environ.get("L2TUI_CONFIG_DIR")
    if env:
        return Path(env) / CONFIG_FILENAME
    from platformdirs import user_config_dir

    return Path(user_config_dir("l2tui", appauthor=False)) / CONFIG_FILENAME


def config_search_path() -> list[Path]:
    """Config files in the order they are looked for; the first that exists wins."""
    return [Path.cwd() / CONFIG_FILENAME, user_config_file()]


def sessions_root() -> Path:
    """Where new sessions go by default."""
    env = os.environ.get("L2TUI_SESSIONS_DIR")
    if env:
        return Path(env)
    if is_checkout():
        return REPO_ROOT / "sessions"
    from platformdirs import user_data_dir

    return Path(user_data_dir("l2tui", appauthor=False)) / "sessions"


def bundled_sessions_dir() -> Path:
    """Demo sessions recorded on a real H200 and shipped with the checkout."""
    return REPO_ROOT / "sessions"


#: The bundled demo: a real H200 session of the live app running the search policy
#: (written by ``tools/record_demo.py``), opened in replay by a plain ``l2tui`` without a GPU.
DEMO_SESSION = bundled_sessions_dir() / "demo-h200"
#: The GPU evaluations of that run, so ``--recorded`` can replay the same run without a GPU.
DEMO_RECORDING = DEMO_SESSION / "evaluations.json"
#: The shapes of that run, one per line (a shapes file ``--shapes`` reads).
DEMO_SHAPES = DEMO_SESSION / "shapes.txt"
#: The settings of that run (a config file ``--config`` reads), so a replay proposes the same kernels.
DEMO_SETTINGS = DEMO_SESSION / "l2tui.toml"
#: Opened instead, with a notice saying what it is, while no real demo session is bundled: the
#: scripted two-shape session of the tests (a toy kernel; its speedups are not the product's).
FALLBACK_DEMO_SESSION = REPO_ROOT / "tests" / "fixtures" / "sessions" / "demo-h200-scripted"


def _is_session(p: Path) -> bool:
    return (p / "events.jsonl").is_file()


def demo_session() -> Path | None:
    """The session a plain ``l2tui`` replays without a GPU: the real demo, else the fallback."""
    for cand in (DEMO_SESSION, FALLBACK_DEMO_SESSION):
        if _is_session(cand):
            return cand
    return None


def demo_is_real(path: Path | None) -> bool:
    """True for the bundled real session (False for the scripted fallback)."""
    return path is not None and Path(path).resolve() == DEMO_SESSION.resolve()


def demo_recording() -> Path | None:
    """The recorded evaluations of the bundled demo run, when they are bundled."""
    return DEMO_RECORDING if DEMO_RECORDING.is_file() else None
