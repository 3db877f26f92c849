"""Every path l2tui itself reads or writes, in one place (the harness has its own,
``harness.paths``, because it must not import l2tui).

* config: ``./l2tui.toml`` first, then ``<user config dir>/l2tui/l2tui.toml``;
* prompts: shipped inside the wheel as ``l2tui/prompts``; in a checkout they are
  read from the top-level ``prompts/`` folder;
* sessions: ``./sessions/<name>`` when run from a checkout, else the user data dir;
* bundled demo sessions: the checkout's ``sessions/`` folder.
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


def demo_session() -> Path | None:
    """The bundled demo session opened in replay when there is no GPU."""
    root = bundled_sessions_dir()
    if not root.is_dir():
        return None
    for cand in sorted(root.iterdir()):
        if (cand / "events.jsonl").is_file() and cand.name.startswith("demo"):
            return cand
    for cand in sorted(root.iterdir()):
        if (cand / "events.jsonl").is_file():
            return cand
    return None
