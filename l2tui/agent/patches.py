"""Localized edits: search/replace blocks (or a whole-file rewrite) applied to a kernel.

Format (docs/INTERFACES.md, "Patches"), one or more blocks per reply::

    <<<<<<< SEARCH
    exact lines from the current kernel
    =======
    replacement lines
    >>>>>>> REPLACE

A whole-file rewrite is one fenced ```cuda block holding the full file; it is
accepted only where the caller allows it (first generation, planner-requested
rewrite).  Matching is strict first (the SEARCH text must occur exactly once),
then whitespace-tolerant (lines compared with runs of blanks collapsed and
ends stripped); a block that still does not match is reported with the nearest
lines of the kernel (difflib), so the model can correct itself next turn.

Why blocks and not unified diffs from the model: models miscount hunk headers;
search/replace text is robust to that and keeps edits local, as CuTeGen's
debug stage asks.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field

_BLOCK_RE = re.compile(
    r"^[ \t]*<{5,9}[ \t]*SEARCH[ \t]*\r?\n(?P<search>.*?)^[ \t]*={5,9}[ \t]*\r?\n(?P<replace>.*?)^[ \t]*>{5,9}[ \t]*REPLACE[ \t]*$",
    re.S | re.M,
)
_FENCE_RE = re.compile(r"```[ \t]*(?P<lang>[A-Za-z0-9_+\-]*)[ \t]*\r?\n(?P<body>.*?)^[ \t]*```", re.S | re.M)
_CODE_LANGS = {"", "cuda", "cu", "cpp", "c++", "c", "cxx", "hpp"}


@dataclass
class PatchResult:
    ok: bool
    source: str                   # the patched kernel (the input on failure)
    error: str | None = None      # feedback for the model (may span lines) when not ok
    diff: str = ""                # unified diff input -> output
    blocks: int = 0               # search/replace blocks applied
    rewrite: bool = False         # the reply was a whole-file rewrite
    fuzzy: list[int] = field(default_factory=list)  # 1-based block numbers matched whitespace-tolerantly

    @property
    def summary(self) -> str:
        """One line for event logs and progress output."""
        return (self.error or "ok").splitlines()[0]


@dataclass
class Block:
    search: str
    replace: str


def parse_blocks(reply: str) -> list[Block]:
    """All search/replace blocks of a reply, in order."""
    out = []
    for m in _BLOCK_RE.finditer(reply or ""):
        out.append(Block(_strip_one_nl(m.group("search")), _strip_one_nl(m.group("replace"))))
    return out


def _strip_one_nl(s: str) -> str:
    return s[:-1] if s.endswith("\n") else s


def has_patch_markers(reply: str) -> bool:
    return bool(re.search(r"<{5,9}\s*SEARCH|>{5,9}\s*REPLACE", reply or ""))


def extract_rewrite(reply: str) -> str | None:
    """The whole-file kernel of a reply: the largest fenced code block that defines ``l2_hgemm``."""
    best: str | None = None
    for m in _FENCE_RE.finditer(reply or ""):
        if m.group("lang").lower() not in _CODE_LANGS:
            continue
        body = m.group("body")
        if "l2_hgemm" in body and (best is None or len(body) > len(best)):
            best = body
    if best is not None and not best.endswith("\n"):
        best += "\n"
    return best


def unified_diff(old: str, new: str, name: str = "kernel.cu", context: int = 3) -> str:
    return "".join(
        difflib.unified_diff(
            old.splitlines(keepends=True), new.splitlines(keepends=True),
            fromfile=f"a/{name}", tofile=f"b/{name}", n=context,
        )
    )


def changed_lines(old: str, new: str) -> int:
    """Lines added plus lines removed between two sources."""
    n = 0
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, old.splitlines(), new.splitlines(), autojunk=False).get_opcodes():
        if tag != "equal":
            n += (i2 - i1) + (j2 - j1)
    return n


def _norm(line: str) -> str:
    return " ".join(line.split())


def _find_fuzzy(src_lines: list[str], pat_lines: list[str]) -> list[int]:
    """Start indices where the pattern matches with whitespace normalised (blank lines ignored at the ends)."""
    pat = [_norm(p) for p in pat_lines]
    while pat and not pat[0]:
        pat.pop(0)
    while pat and not pat[-1]:
        pat.pop()
    if not pat:
        return []
    src = [_norm(s) for s in src_lines]
    n = len(pat)
    return [i for i in range(len(src) - n + 1) if src[i:i + n] == pat]


def nearest_lines(source: str, search: str, show: int = 12) -> str:
    """The window of ``source`` most similar to ``search``, line-numbered, for feedback."""
    src_lines = source.splitlines()
    pat_lines = search.splitlines() or [""]
    n = max(1, len(pat_lines))
    pat = "\n".join(_norm(p) for p in pat_lines)
    best, best_i = -1.0, 0
    sm = difflib.SequenceMatcher(autojunk=False)
    sm.set_seq2(pat)
    for i in range(max(1, len(src_lines) - n + 1)):
        window = "\n".join(_norm(s) for s in src_lines[i:i + n])
        sm.set_seq1(window)
        if sm.real_quick_ratio() <= best or sm.quick_ratio() <= best:
            continue
        r = sm.ratio()
        if r > best:
            best, best_i = r, i
    lo, hi = best_i, min(len(src_lines), best_i + min(n, show))
    body = "\n".join(f"{k + 1:4d}| {src_lines[k]}" for k in range(lo, hi))
    return f"nearest lines {lo + 1}-{hi} (similarity {max(best, 0):.2f}):\n{body}"


def _reindent(replace_lines: list[str], search_first: str, matched_first: str) -> list[str]:
    """Shift the replacement by the indentation difference found while fuzzy matching."""
    s_ind = len(search_first) - len(search_first.lstrip())
    m_ind = len(matched_first) - len(matched_first.lstrip())
    delta = m_ind - s_ind
    if delta == 0:
        return replace_lines
    out = []
    for line in replace_lines:
        if not line.strip():
            out.append(line)
        elif delta > 0:
            out.append(matched_first[:delta] + line)
        else:
            cut = min(-delta, len(line) - len(line.lstrip()))
            out.append(line[cut:])
    return out


def apply_blocks(source: str, blocks: list[Block]) -> PatchResult:
    """Apply blocks in order; all or nothing."""
    cur = source
    fuzzy: list[int] = []
    for bi, b in enumerate(blocks, 1):
        if not b.search.strip():
            return PatchResult(False, source, f"SEARCH block {bi} is empty: copy the exact lines to replace from the kernel")
        count = cur.count(b.search)
        if count == 1:
            cur = cur.replace(b.search, b.replace, 1)
            continue
        if count > 1:
            return PatchResult(
                False, source,
                f"SEARCH block {bi} matches {count} places; add surrounding lines so it matches exactly one",
            )
        lines = cur.split("\n")
        pat_lines = b.search.split("\n")
        hits = _find_fuzzy(lines, pat_lines)
        if len(hits) == 1:
            i = hits[0]
            core = [p for p in pat_lines]
            while core and not core[0].strip():
                core.pop(0)
            while core and not core[-1].strip():
                core.pop()
            n = len(core)
            repl = _reindent(b.replace.split("\n"), core[0], lines[i]) if b.replace else []
            lines[i:i + n] = repl
            cur = "\n".join(lines)
            fuzzy.append(bi)
            continue
        if len(hits) > 1:
            return PatchResult(
                False, source,
                f"SEARCH block {bi} matches {len(hits)} places (ignoring whitespace); add surrounding lines so it matches exactly one",
            )
        return PatchResult(
            False, source,
            f"SEARCH block {bi} does not match the kernel; copy the lines exactly. {nearest_lines(cur, b.search)}",
        )
    if cur == source:
        return PatchResult(False, source, "the patch changes nothing; propose an actual edit", blocks=len(blocks))
    return PatchResult(True, cur, None, unified_diff(source, cur), blocks=len(blocks), fuzzy=fuzzy)


def apply_patch(source: str, reply: str, *, allow_rewrite: bool = True) -> PatchResult:
    """Apply a model reply to ``source``: search/replace blocks, else (if allowed) a whole-file rewrite."""
    blocks = parse_blocks(reply)
    if blocks:
        return apply_blocks(source, blocks)
    if has_patch_markers(reply):
        return PatchResult(
            False, source,
            "malformed SEARCH/REPLACE block: use the lines <<<<<<< SEARCH, =======, >>>>>>> REPLACE exactly",
        )
    new = extract_rewrite(reply)
    if new is not None:
        if not allow_rewrite:
            return PatchResult(
                False, source,
                "a whole-file rewrite is not allowed here: answer with SEARCH/REPLACE blocks that change only what is needed",
            )
        if new == source:
            return PatchResult(False, source, "the rewrite is identical to the current kernel; propose an actual edit")
        return PatchResult(True, new, None, unified_diff(source, new), rewrite=True)
    return PatchResult(
        False, source,
        "no SEARCH/REPLACE block (and no ```cuda block with l2_hgemm) found in the reply",
    )
