"""The test kernels (``harness/kernels/test*.cu``) as the harness is to receive them.

Each test kernel has to reach the harness as one self-contained candidate source: that is what
the tests submit, and the source policy refuses a quoted ``#include`` in a candidate.  The naive
tiled GEMM most of them share is kept once, in ``kernels/test_gemm.cuh``, as named parts; a kernel
file stands a ``// l2: test gemm NAME`` line where a part goes, and :func:`source` returns the file
with every such line replaced by that part's text (a part may itself name other parts).  A kernel
file without such lines (``reference_naive.cu``, which the loop also reads by path) comes back as
it is.
"""

from __future__ import annotations

import re

from .paths import KERNELS_DIR

HEADER = KERNELS_DIR / "test_gemm.cuh"
MARKER = "// l2: test gemm"

_MARKER_RE = re.compile(r"^// l2: test gemm (\w+)[ \t]*\n", re.M)
_PART_RE = re.compile(r"^// l2: part (\w+)[ \t]*\n(.*?)^// l2: end part[ \t]*\n", re.M | re.S)


def parts() -> dict[str, str]:
    """Each part of the shared header by name, as written there (its own markers not yet replaced)."""
    return {m.group(1): m.group(2) for m in _PART_RE.finditer(HEADER.read_text(encoding="utf-8"))}


def compose(text: str, known: dict[str, str] | None = None) -> str:
    """``text`` with every marker line replaced by its part; an unknown or self-naming part is an error."""
    known = parts() if known is None else known

    def expand(t: str, within: tuple[str, ...]) -> str:
        def one(m: re.Match[str]) -> str:
            name = m.group(1)
            if name not in known:
                raise ValueError(f"{MARKER} {name}: {HEADER.name} has no part {name!r} (it has {sorted(known)})")
            if name in within:
                raise ValueError(f"{MARKER} {name}: the part names itself ({' -> '.join(within + (name,))})")
            return expand(known[name], within + (name,))

        return _MARKER_RE.sub(one, t)

    out = expand(text, ())
    if MARKER in out:   # a marker line the pattern did not take (indented, misspelt): never hand it on
        raise ValueError(f"a {MARKER!r} line is not on a line of its own as '{MARKER} NAME'")
    return out


def source(name: str) -> str:
    """The composed text of ``kernels/<name>.cu`` (``name`` with or without ``.cu``)."""
    file = name if name.endswith(".cu") else f"{name}.cu"
    return compose((KERNELS_DIR / file).read_text(encoding="utf-8"))
