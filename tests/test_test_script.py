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


def _tiny_project(root: Path, module: str) -> None:
    """A project of one package, tools/test.sh and lint settings like the repository's, so that
    the script's lint step runs for real on code the test chooses."""
    (root / "tools").mkdir(parents=True)
    (root / "tools" / "test.sh").write_text(SCRIPT.read_text())
    (root / "pyproject.toml").write_text(
        '[tool.ruff.lint]\nselect = ["F", "E9", "B"]\n\n'
        '[tool.mypy]\nfiles = ["pkg"]\n\n[[tool.mypy.overrides]]\nmodule = ["pkg.*"]\ndisallow_untyped_defs = true\n'
        '\n[tool.pytest.ini_options]\ntestpaths = ["tests"]\n')
    (root / "pkg").mkdir()
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "mod.py").write_text(module)
    (root / "tests").mkdir()
    (root / "tests" / "test_probe.py").write_text("def test_ran() -> None:\n    pass\n")


def _fast_run(root: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    env.update(L2TUI_TEST_WORKERS="1", L2TUI_TEST_CACHE_DIR=str(root / "cache"),
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}")
    return subprocess.run(["bash", str(root / "tools" / "test.sh"), "--fast", "-p", "no:cacheprovider"], cwd=root,
                          env=env, capture_output=True, text=True, timeout=600)


def test_a_lint_finding_stops_the_run_before_any_test(tmp_path: Path) -> None:
    _tiny_project(tmp_path, "import os\n\n\ndef f(x: int) -> int:\n    return x\n")
    r = _fast_run(tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "F401" in r.stdout and "`os` imported but unused" in r.stdout
    assert "ruff found the problems above" in r.stdout and "pytest -m" not in r.stdout


def test_a_type_error_stops_the_run_before_any_test(tmp_path: Path) -> None:
    _tiny_project(tmp_path, "def f(x: int) -> str:\n    return x\n\n\ndef g(y):\n    return y\n")
    r = _fast_run(tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "pkg/mod.py:2: error: Incompatible return value type" in r.stdout
    assert "pkg/mod.py:5: error: Function is missing a type annotation" in r.stdout
    assert "mypy found the type errors above" in r.stdout and "pytest -m" not in r.stdout


def test_clean_code_passes_the_lint_step_and_the_tests_run(tmp_path: Path) -> None:
    _tiny_project(tmp_path, "def f(x: int) -> int:\n    return x\n")
    r = _fast_run(tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.index("ruff check .") < r.stdout.index("mypy (harness/ strict") < r.stdout.index("pytest -m")
    assert "1 passed" in r.stdout
