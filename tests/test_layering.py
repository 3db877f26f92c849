"""The layering of DESIGN.md, enforced: harness imports neither the UI nor the agent (nor l2tui at
all), the agent and the data exporters never import the UI, and nothing heavy is imported by the
harness at module level where a caller without a GPU would pay for it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def imports_of(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
    return out


def py_files(*parts: str) -> list[Path]:
    base = ROOT.joinpath(*parts)
    return [base] if base.is_file() else sorted(base.rglob("*.py"))


@pytest.mark.parametrize("path", py_files("harness"), ids=lambda p: str(p.relative_to(ROOT)))
def test_harness_never_imports_l2tui_textual_or_openai(path):
    bad = {m for m in imports_of(path) if m.split(".")[0] in {"l2tui", "textual", "openai"}}
    assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}"


@pytest.mark.parametrize(
    "path",
    py_files("l2tui", "agent") + py_files("l2tui", "session.py") + py_files("l2tui", "export") + py_files("l2tui", "rldata.py"),
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_agent_session_and_exporters_never_import_the_ui(path):
    bad = {m for m in imports_of(path) if m.startswith("l2tui.tui") or m.split(".")[0] == "textual"}
    assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}"


def test_harness_top_level_imports_no_gpu_package():
    """Importing the harness API must not pull cupy/torch/nvmath into the caller (the worker does)."""
    import subprocess
    import sys

    code = ("import sys, harness.build, harness.evaluate, harness.shapes, harness.results, harness.doctor; "
            "print(sorted(m for m in ('cupy', 'torch', 'nvmath') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
