"""The app's modules import in one direction: the app imports its screens, the screens the
palette and the shared context; nothing imports back (no import circle, local imports included)."""

from __future__ import annotations

import ast
from pathlib import Path

TUI = Path(__file__).resolve().parents[1] / "l2tui" / "tui"


def _module(path: Path) -> str:
    rel = path.relative_to(TUI.parent.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> set[str]:
    """The l2tui.tui modules ``path`` imports anywhere (functions too), outside ``if TYPE_CHECKING``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    pkg = _module(path).rsplit(".", 1)[0] if path.name != "__init__.py" else _module(path)
    out: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            if isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    up = pkg.split(".")[: len(pkg.split(".")) - (child.level - 1)]
                    base = ".".join(up + ([base] if base else []))
                for alias in child.names:
                    out.add(f"{base}.{alias.name}")
                out.add(base)
            elif isinstance(child, ast.Import):
                out.update(a.name for a in child.names)
            visit(child)

    visit(tree)
    return out


def test_no_import_circle_in_the_app():
    # packages are left out: importing a submodule imports its package, which is no circle
    files = {_module(p): p for p in TUI.rglob("*.py") if p.name != "__init__.py"}
    graph = {m: {i for i in _imports(p) if i in files and i != m} for m, p in files.items()}
    assert graph["l2tui.tui.palette"] <= {"l2tui.tui.keymap"}, graph["l2tui.tui.palette"]
    assert "l2tui.tui.app" not in graph["l2tui.tui.screens.main"]

    def cycle_from(start: str) -> list[str] | None:
        stack = [(start, [start])]
        while stack:
            node, path = stack.pop()
            for nxt in graph[node]:
                if nxt == start:
                    return path + [start]
                if nxt not in path:
                    stack.append((nxt, path + [nxt]))
        return None

    cycles = [c for m in graph if (c := cycle_from(m))]
    assert not cycles, " -> ".join(cycles[0])
