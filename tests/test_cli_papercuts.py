"""Command-line papercuts a newcomer hit: each pinned by a test of the real command or file."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPTED = ROOT / "tests" / "fixtures" / "sessions" / "demo-h200-scripted"


def test_a_comma_list_of_shapes_is_a_list():
    from harness.shapes import Shape, resolve_shapes

    assert resolve_shapes("128x128x128,256x256x256") == [Shape(128, 128, 128), Shape(256, 256, 256)]
    assert resolve_shapes(["128x128x128, 64x64x64", "256x256x256"]) == \
        [Shape(128, 128, 128), Shape(64, 64, 64), Shape(256, 256, 256)]
    assert resolve_shapes("128,256,512") == [Shape(128, 256, 512)]   # M,N,K is still one shape
    from harness.errors import ShapeError

    with pytest.raises(ShapeError, match="bad shape '256'"):
        resolve_shapes("128x128x128,256,256,256")


def test_the_headless_run_takes_a_comma_list(tmp_path):
    """The list reaches the command (it stops at the GPU check, after the shapes were read)."""
    env = {"PATH": "/usr/bin:/bin", "L2TUI_FAKE_NO_GPU": "1", "HOME": str(tmp_path),
           "L2TUI_CONFIG_DIR": str(tmp_path / "cfg")}
    bad = subprocess.run([sys.executable, "-m", "l2tui.cli", "run", "--headless", "--policy", "search",
                          "--shapes", "128x128x128,12x"], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=120)
    assert bad.returncode == 2 and "bad shape '12x'" in bad.stderr
    ok = subprocess.run([sys.executable, "-m", "l2tui.cli", "run", "--headless", "--policy", "search",
                         "--shapes", "128x128x128,256x256x256"], cwd=tmp_path, env=env, capture_output=True,
                        text=True, timeout=120)
    assert ok.returncode == 2 and "no NVIDIA GPU found" in ok.stderr
    assert "bad shape" not in ok.stderr and "unknown shapes" not in ok.stderr


def test_the_gpu_extras_install_cublas_for_export_build():
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert any(re.match(r"nvidia-cublas>=13", d) for d in extras["gpu"]), extras["gpu"]
    assert any(re.match(r"nvidia-cublas-cu12>=12", d) for d in extras["cuda12"]), extras["cuda12"]
    # the harness finds the wheel of either layout (nvidia/cu13 or nvidia/cublas)
    src = (ROOT / "harness" / "baselines.py").read_text()
    assert '("cu13", "cublas")' in src


def test_openai_sft_of_an_llm_policy_session_writes_its_repairs(tmp_path):
    """The scripted LLM session's children never beat its seed, but its debugger repaired a
    compile error twice: those repairs are the rows."""
    from l2tui.rldata import rl_data, validate_row

    out = tmp_path / "sft.jsonl"
    st = rl_data([SCRIPTED], "openai-sft", out)
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert st.rows == len(rows) == 2
    for r in rows:
        validate_row("openai-sft", r)
        assert "ROLE: debugger" in r["messages"][1]["content"] or "debug" in r["messages"][1]["content"].lower()
        assert "const float alpha = 1.0f;" in r["messages"][-1]["content"]


DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _replay_paths() -> list[tuple[str, str]]:
    out = []
    for doc in DOCS:
        for m in re.finditer(r"l2tui replay ((?:\./)?[\w./-]+)", doc.read_text(encoding="utf-8")):
            p = m.group(1).rstrip(".")
            if p.isupper() or p in ("SESSION", "DIR") or p.startswith("-"):
                continue    # a placeholder
            if "/" not in p:
                continue
            out.append((doc.name, p))
    return out


@pytest.mark.parametrize("doc,path", _replay_paths())
def test_every_replay_path_in_the_docs_is_a_session(doc, path):
    if path.startswith(("sessions/mine", "sessions/run-")):
        pytest.skip("a user's own session in an example")
    from l2tui import paths

    if (ROOT / path).resolve() == paths.DEMO_SESSION.resolve() and not (paths.DEMO_SESSION / "events.jsonl").is_file():
        pytest.xfail("the bundled demo is recorded on a GPU machine by tools/record_demo.py and not committed yet")
    assert (ROOT / path / "events.jsonl").is_file(), f"{doc}: `l2tui replay {path}` is not a bundled session"
