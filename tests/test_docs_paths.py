"""Every repository path the README and docs/*.md mention exists.

Why: documentation that points at files which have moved or gone sends a newcomer hunting; this
keeps each mention honest. Paths are taken from inline code spans and fenced code blocks (split
on whitespace) and from Markdown link targets. A token is checked when its first component is one
of the repository's top-level entries (TOP), so commands, module names and paths inside an export
folder are not mistaken for repository paths. Skipped, explicitly: URLs, placeholders
(PLACEHOLDER), absolute and home paths, and sessions/ (the bundled sessions are data the
maintainers add). A path with a glob must match at least one file."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

#: top-level entries a repository path starts with
TOP = {"harness", "l2tui", "tests", "tools", "docs", "results", "prompts", "sessions", ".ci",
       "LICENSE", "README.md", "pyproject.toml", "l2tui.example.toml"}
#: first components whose paths are not checked: session folders are user data
NOT_CHECKED = {"sessions"}
#: a token with one of these is a placeholder, not a path
PLACEHOLDER = re.compile(r"<[^>]*>|\.\.\.|…|\bDIR\b|\bFILE\b|\bSESSION\b|M_N_K|MxNxK|\bPICK\b|\bNAME\b")
#: pages linked from here that are written alongside this one and may not exist yet
WRITTEN_ELSEWHERE = {"docs/tui.md", "docs/sessions.md", "docs/sweep.md", "docs/ray.md",
                     "docs/sandbox.md", "docs/export.md"}

_SPAN = re.compile(r"`([^`\n]+)`")
_FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)
_LINK = re.compile(r"\]\(([^)\s]+)\)")


def _candidates(token: str) -> str | None:
    tok = token.strip().strip("'\"").rstrip(",.;:)").lstrip("(")
    if ".py:" in tok:
        tok = tok.split(":", 1)[0]  # file.py:function names the file
    if not tok or "://" in tok or tok.startswith(("$", "~", "/", "-")) or PLACEHOLDER.search(tok):
        return None
    first = tok.split("/", 1)[0]
    if first not in TOP or first in NOT_CHECKED:
        return None
    if "/" not in tok and first not in {"LICENSE", "README.md", "pyproject.toml", "l2tui.example.toml"}:
        return None  # a bare word such as `harness` or `tools` is a name, not a path claim
    return tok


def mentioned_paths(text: str) -> set[str]:
    out: set[str] = set()
    for block in _FENCE.findall(text):
        out.update(filter(None, map(_candidates, block.split())))
    no_fences = _FENCE.sub("", text)
    for span in _SPAN.findall(no_fences):
        out.update(filter(None, map(_candidates, span.split())))
    return out


def linked_files(doc: Path, text: str) -> set[str]:
    out = set()
    for target in _LINK.findall(_FENCE.sub("", text)):
        if "://" in target or target.startswith(("#", "mailto:")):
            continue
        path = (doc.parent / target.split("#", 1)[0]).resolve()
        out.add(path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(path))
    return out


def _exists(rel: str) -> bool:
    if any(c in rel for c in "*?["):
        return any(ROOT.glob(rel))
    return (ROOT / rel).exists()


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_mentioned_repository_path_exists(doc):
    text = doc.read_text()
    missing = sorted(p for p in mentioned_paths(text) if not _exists(p))
    assert not missing, f"{doc.relative_to(ROOT)} mentions paths that do not exist: {missing}"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_link_target_exists(doc):
    text = doc.read_text()
    missing = sorted(p for p in linked_files(doc, text) if p not in WRITTEN_ELSEWHERE and not _exists(p))
    assert not missing, f"{doc.relative_to(ROOT)} links to files that do not exist: {missing}"


def test_the_scanner_sees_paths_and_skips_placeholders():
    text = ("Run `python tools/x.py results/h200/a.json --out DIR` and `harness.families`;\n"
            "```\nl2tui bench --kernels sessions/s/winners --out /tmp/k results/h200/<rev>.json\n"
            "cat harness/kernels/fam_*.cu\n```\nsee `docs/method.md`, `tools` and `kernels/M_N_K.cu`.\n")
    assert mentioned_paths(text) == {"tools/x.py", "results/h200/a.json", "harness/kernels/fam_*.cu", "docs/method.md"}
    assert _exists("harness/kernels/fam_*.cu") and not _exists("results/h200/runs")


def test_readme_has_one_results_block_for_the_generator():
    """The results summary is regenerated between these markers; two blocks or none would make
    the generator write the wrong place or nowhere."""
    text = (ROOT / "README.md").read_text()
    assert text.count("<!-- results:begin -->") == 1 and text.count("<!-- results:end -->") == 1
    assert text.index("<!-- results:begin -->") < text.index("<!-- results:end -->")
