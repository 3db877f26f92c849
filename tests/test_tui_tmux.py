"""Smoke test: the real ``l2tui replay`` console script in tmux, driven by keys, read with capture-pane."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tui_support import GRID

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")


def _l2tui() -> str:
    exe = Path(sys.executable).parent / "l2tui"
    return str(exe) if exe.exists() else (shutil.which("l2tui") or "l2tui")


class Tmux:
    def __init__(self, name: str, command: str, env: dict[str, str]) -> None:
        self.name = name
        env_args = [a for k, v in env.items() for a in ("-e", f"{k}={v}")]
        subprocess.run(["tmux", "new-session", "-d", "-s", name, "-x", "160", "-y", "48", *env_args, command], check=True)

    def screen(self) -> str:
        return subprocess.run(["tmux", "capture-pane", "-p", "-t", self.name], capture_output=True, text=True).stdout

    def keys(self, *keys: str) -> None:
        for k in keys:
            subprocess.run(["tmux", "send-keys", "-t", self.name, k], check=True)
            time.sleep(0.2)

    def wait_for(self, text: str, timeout: float = 30.0) -> str:
        end = time.monotonic() + timeout
        while True:
            scr = self.screen()
            if text in scr:
                return scr
            if time.monotonic() > end:
                raise AssertionError(f"{text!r} never appeared; screen was:\n{scr}")
            time.sleep(0.2)

    def wait_gone(self, text: str, timeout: float = 30.0) -> str:
        end = time.monotonic() + timeout
        while True:
            scr = self.screen()
            if text not in scr:
                return scr
            if time.monotonic() > end:
                raise AssertionError(f"{text!r} never went away; screen was:\n{scr}")
            time.sleep(0.2)

    def kill(self) -> None:
        subprocess.run(["tmux", "kill-session", "-t", self.name], capture_output=True)


@pytest.fixture
def tmux_env(tmp_path):
    return {"TERM": "xterm-256color", "HOME": str(tmp_path), "L2TUI_CONFIG_DIR": str(tmp_path),
            "PATH": os.environ.get("PATH", "")}


def test_replay_binary_in_tmux(tmp_path, tmux_env):
    done = tmp_path / "exit-status"
    cmd = f"cd {tmp_path} && {_l2tui()} replay {GRID} --paused --at 0; echo $? > {done}; sleep 30"
    t = Tmux(f"l2tui-smoke-{os.getpid()}", cmd, tmux_env)
    try:
        scr = t.wait_for("PAUSED")
        assert "event 0/2598" in scr
        t.keys("End")
        scr = t.wait_for("event 2598/2598")
        assert "4096x4096x4096-f32" in scr and "H200" in scr
        t.keys("Home", ">", ">", ">")
        t.wait_for("event 3/2598")
        t.keys("v")
        t.wait_for("K=16k")                        # compact all-K view
        t.keys("?")
        t.wait_for("remap any of them")            # help screen from the live bindings
        t.keys("Escape")                           # alone: ESC + key would read as alt+key
        t.wait_gone("remap any of them")
        t.keys("Space")
        t.wait_for("PLAY")
        t.keys("Space", "q")
        end = time.monotonic() + 20
        while not done.exists() and time.monotonic() < end:
            time.sleep(0.2)
        assert done.read_text().strip() == "0"
    finally:
        t.kill()


def test_bad_session_is_one_line(tmp_path):
    r = subprocess.run([_l2tui(), "replay", str(tmp_path / "nope")], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and "is not a session" in r.stderr


def test_no_gpu_opens_the_demo_or_says_why(tmp_path, tmux_env):
    """Without a GPU, ``l2tui`` prints one line and replays the bundled demo (or says there is none)."""
    from l2tui import paths

    env = {**tmux_env, "L2TUI_FAKE_NO_GPU": "1"}
    t = Tmux(f"l2tui-nogpu-{os.getpid()}", f"cd {tmp_path} && {_l2tui()}; echo EXITED; sleep 30", env)
    try:
        if paths.demo_session() is None:
            scr = t.wait_for("EXITED")
            assert "no NVIDIA GPU found and no demo session bundled" in scr
        else:
            t.wait_for("no GPU: demo replay")     # the app, replaying the demo session
            t.keys("q")
            scr = t.wait_for("EXITED")            # back on the normal screen: the one line is there
            assert scr.count("no NVIDIA GPU found") == 1
    finally:
        t.kill()


def test_external_editor_suspends_the_app_in_a_real_terminal(tmp_path, tmux_env):
    """``e`` suspends the app, runs $EDITOR on the kernel in the terminal, and sends the saved text."""
    editor = tmp_path / "editor.sh"
    editor.write_text("#!/bin/sh\necho EDITOR-RAN-IN-TERMINAL\nsleep 1\necho '// edited in tmux' >> \"$1\"\n")
    editor.chmod(0o755)
    out = tmp_path / "commands.json"
    script = tmp_path / "run_app.py"
    script.write_text(
        "import json, sys, pathlib\n"
        f"sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "from tui_support import live_app\n"
        f"app, loop = live_app(pathlib.Path({str(tmp_path)!r}))\n"
        "app.run()\n"
        f"pathlib.Path({str(out)!r}).write_text(json.dumps(loop.commands))\n"
    )
    env = {**tmux_env, "EDITOR": str(editor), "VISUAL": ""}
    t = Tmux(f"l2tui-editor-{os.getpid()}", f"cd {tmp_path} && {sys.executable} {script}; sleep 30", env)
    try:
        t.wait_for("4096x4096x4096-f32")
        t.keys("e")
        t.wait_for("EDITOR-RAN-IN-TERMINAL")          # the app gave the terminal to the editor
        t.wait_for("4096x4096x4096-f32")              # and took it back
        t.keys("q")
        end = time.monotonic() + 20
        while not out.exists() and time.monotonic() < end:
            time.sleep(0.2)
        import json

        cmds = json.loads(out.read_text())
        assert [c["name"] for c in cmds] == ["edit"]
        assert cmds[0]["source"].endswith("// edited in tmux\n")
    finally:
        t.kill()
