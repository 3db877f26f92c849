"""The README's test command is what CI runs: both call tools/test.sh, which installs what the
suite needs, says so, and runs it with its own build cache.

The full run's installs take minutes (llama.cpp builds from source), so they are read from the
script here and exercised by CI itself; the fast loop is run for real on a test of its own.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "tools" / "test.sh"


def _commands(path: Path) -> list[str]:
    """The script's command lines (comments and blank lines dropped)."""
    return [ln.strip() for ln in path.read_text().splitlines() if ln.strip() and not ln.strip().startswith("#")]


def test_ci_runs_the_script_the_readme_names() -> None:
    assert _commands(ROOT / ".ci" / "run")[-1] == "bash tools/test.sh"
    for doc in (ROOT / "README.md", ROOT / "docs" / "development.md"):
        section = doc.read_text().split("\n## Development\n", 1)[1] if doc.name == "README.md" else doc.read_text()
        first_block = re.search(r"```(?:bash|sh)\n(.*?)```", section, re.S)
        assert first_block and first_block.group(1).splitlines()[0].startswith("tools/test.sh "), doc


def test_the_full_run_installs_the_extras_and_requires_the_real_model() -> None:
    lines = _commands(SCRIPT)
    assert any(re.search(r"pip install .*-e '\.\[test\]'", ln) for ln in lines)
    assert any(re.search(r"pip install .*-e '\.\[llm-test\]'", ln) for ln in lines)
    assert "export L2TUI_REQUIRE_REAL_LLM=1" in lines
    assert any(ln.startswith("apt_install tmux tmux") for ln in lines)
    assert any(ln.startswith("apt_install bwrap bubblewrap") for ln in lines)
    assert not any("~/.cache" in ln or "$HOME/.cache" in ln for ln in lines)


def test_the_fast_loop_runs_pytest_with_its_own_cache_and_no_real_model_requirement(tmp_path: Path) -> None:
    probe = tmp_path / "test_probe.py"
    probe.write_text("import os\n\n\ndef test_environment():\n"
                     "    assert os.environ['L2TUI_CACHE_DIR'] == os.environ['PROBE_EXPECTED_CACHE']\n"
                     "    assert 'L2TUI_REQUIRE_REAL_LLM' not in os.environ\n")
    cache = tmp_path / "cache"
    env = {k: v for k, v in os.environ.items() if k not in ("L2TUI_REQUIRE_REAL_LLM", "PYTEST_ADDOPTS")}
    env.update(L2TUI_TEST_CACHE_DIR=str(cache), PROBE_EXPECTED_CACHE=str(cache), L2TUI_TEST_WORKERS="1",
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}")
    r = subprocess.run(["bash", str(SCRIPT), "--fast", str(probe), "-p", "no:cacheprovider"], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert f'pytest -m "not gpu and not compile and not slow" on 1 worker(s); build cache {cache}' in r.stdout
    assert "1 passed" in r.stdout and "installing" not in r.stdout   # the fast loop installs nothing
