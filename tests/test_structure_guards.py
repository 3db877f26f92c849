"""Structural guardrails on harness/ and l2tui/, read from the source with ``ast`` (nothing is
imported): no import cycle between modules, counting every import that can run wherever it sits (a
function-level import makes the modules just as dependent on each other, and only hides the
circle from Python at load time; an ``if TYPE_CHECKING:`` import never runs and is left out, so a
part of the loop or the sweep may name its host class in annotations), and no function longer
than 80 lines."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("harness", "l2tui")
MAX_FUNCTION_LINES = 80

#: import cycles that are allowed to remain, as frozensets of module names, each with its reason
ALLOWED_CYCLES: dict[frozenset[str], str] = {}

def module_name(path: Path) -> str:
    """``harness/profiling/api.py`` -> ``harness.profiling.api``; a package's ``__init__`` is the package."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def source_files() -> dict[str, Path]:
    """Every module of the packages, by dotted name."""
    return {module_name(p): p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))}


def _base_of(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    """The absolute module a ``from X import ...`` names (relative levels resolved against ``module``)."""
    if node.level == 0:
        return node.module or ""
    package = module.split(".") if is_package else module.split(".")[:-1]
    anchor = package[: len(package) - (node.level - 1)]
    return ".".join(anchor + ([node.module] if node.module else []))


def _is_type_checking(node: ast.If) -> bool:
    """``if TYPE_CHECKING:`` (or ``typing.TYPE_CHECKING``): a block only the type checker reads."""
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def _runtime_imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import that can run: top level, in functions and classes, in any branch but an
    ``if TYPE_CHECKING:`` block (a module naming its host class only in annotations, as the loop's
    and the sweep's parts do, imports nothing when it runs)."""
    todo: list[ast.AST] = [tree]
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, ast.If) and _is_type_checking(node):
            todo.extend(node.orelse)
        else:
            todo.extend(ast.iter_child_nodes(node))


def imported_modules(path: Path, module: str, known: set[str]) -> set[str]:
    """The modules among ``known`` that ``path`` imports where the import can run (top level, in a
    function; not under TYPE_CHECKING). ``from pkg import name`` counts ``pkg.name`` when that is
    a module, else ``pkg``."""
    is_package = path.name == "__init__.py"
    out: set[str] = set()
    for node in _runtime_imports(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        else:
            base = _base_of(node, module, is_package)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                out.add(sub if sub in known else base)
    return {m for m in out if m in known and m != module}


def import_graph() -> dict[str, set[str]]:
    files = source_files()
    known = set(files)
    return {mod: imported_modules(path, mod, known) for mod, path in files.items()}


def strongly_connected(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """Tarjan's strongly connected components of ``graph`` (iterative: no recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            nxt = next(edges, None)
            if nxt is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    comp: set[str] = set()
                    while True:
                        top = stack.pop()
                        on_stack.discard(top)
                        comp.add(top)
                        if top == node:
                            break
                    found.append(frozenset(comp))
            elif nxt not in index:
                index[nxt] = low[nxt] = counter
                counter += 1
                stack.append(nxt)
                on_stack.add(nxt)
                work.append((nxt, iter(sorted(graph[nxt]))))
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
    return found


def cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    return [c for c in strongly_connected(graph) if len(c) > 1]


# --------------------------------------------------------------------------- the checker itself


def test_the_cycle_finder_sees_a_function_level_import_and_a_relative_one(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from . import b\n")
    (pkg / "b.py").write_text("def f():\n    from .c import thing\n    return thing\n")
    (pkg / "c.py").write_text("class C:\n    def f(self):\n        import pkg.a\nthing = 1\n")
    (pkg / "d.py").write_text("from typing import TYPE_CHECKING\nimport pkg.a\nif TYPE_CHECKING:\n    import pkg.b\n")
    known = {"pkg", "pkg.a", "pkg.b", "pkg.c", "pkg.d"}
    graph = {m: set() for m in known}
    for name in ("a", "b", "c", "d"):
        path = pkg / f"{name}.py"
        mod = f"pkg.{name}"
        graph[mod] = imported_modules(path, mod, known)
    assert graph["pkg.a"] == {"pkg.b"} and graph["pkg.b"] == {"pkg.c"} and graph["pkg.c"] == {"pkg.a"}
    assert graph["pkg.d"] == {"pkg.a"}          # the TYPE_CHECKING import of pkg.b never runs
    assert cycles(graph) == [frozenset({"pkg.a", "pkg.b", "pkg.c"})]


def test_the_cycle_finder_passes_a_chain() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


# --------------------------------------------------------------------------- the repository


def test_no_import_cycle_in_harness_or_l2tui() -> None:
    found = [c for c in cycles(import_graph()) if c not in ALLOWED_CYCLES]
    assert not found, "import cycles (every import counted, function-level too):\n" + "\n".join(
        "  " + " <-> ".join(sorted(c)) for c in found)


def test_the_allowed_cycles_still_exist() -> None:
    present = set(cycles(import_graph()))
    gone = [sorted(c) for c in ALLOWED_CYCLES if c not in present]
    assert not gone, f"no longer cycles, remove from ALLOWED_CYCLES: {gone}"


def test_the_batched_evaluation_is_the_harness_one_and_imports_no_l2tui() -> None:
    from harness import batch
    from l2tui.executors import batch as executors_batch

    assert executors_batch.evaluate_many is batch.evaluate_many
    graph = import_graph()
    assert not {m for m in graph["harness.batch"] if m.startswith("l2tui")}
    assert graph["l2tui.executors.batch"] == {"harness.batch"}


@dataclass(frozen=True)
class Function:
    where: str     # path:name
    lineno: int
    lines: int


def functions(pkg: str, root: Path = ROOT) -> list[Function]:
    """Every function and method under ``root/pkg``, with its length from ``def`` to its last line."""
    out = []
    for path in sorted((root / pkg).rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno is not None:
                out.append(Function(f"{rel}:{node.name}", node.lineno, node.end_lineno - node.lineno + 1))
    return out


def too_long(found: list[Function]) -> list[Function]:
    return [f for f in found if f.lines > MAX_FUNCTION_LINES]


def test_the_length_check_counts_from_def_to_the_last_line(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES - 1))
    nested = "".join(f"        y{i} = {i}\n" for i in range(MAX_FUNCTION_LINES))
    (pkg / "m.py").write_text(f"def fits():\n{body}\n\ndef over():\n{body}    x = 0\n\n"
                              f"class C:\n    async def method(self):\n{nested}")
    found = {f.where: f.lines for f in functions("pkg", tmp_path)}
    assert found == {"pkg/m.py:fits": MAX_FUNCTION_LINES, "pkg/m.py:over": MAX_FUNCTION_LINES + 1,
                     "pkg/m.py:method": MAX_FUNCTION_LINES + 1}
    assert sorted(f.where for f in too_long(functions("pkg", tmp_path))) == ["pkg/m.py:method", "pkg/m.py:over"]


@pytest.mark.parametrize("pkg", PACKAGES)
def test_no_function_over_80_lines(pkg: str) -> None:
    long = too_long(functions(pkg))
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines (split them):\n" + "\n".join(
        f"  {f.where} (line {f.lineno}): {f.lines} lines" for f in long)
