"""GEMM problem shapes: the CUDA-L2 1,000-shape grid, named subsets and parsers.

A shape is (M, N, K) for C[M,N] = A[M,K] @ B[K,N].  Shape sets are named so
result files and sessions can say which set they cover:

* ``grid``      - all 1,000 shapes with M, N, K in :data:`GRID_DIMS`.
* ``small``     - the grid shapes with every dimension <= 512 (64 shapes).
* ``sample100`` - a fixed stratified sample of 100 grid shapes, see :func:`sample100`.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import Iterable, Sequence

from .errors import ShapeError
from .jsonfile import read_capped
from .gemm_shape import MAX_DIM as MAX_DIM
from .gemm_shape import Shape as Shape
from .models import model_spec

GRID_DIMS: tuple[int, ...] = (64, 128, 256, 512, 1024, 2048, 4096, 8192, 12288, 16384)
ACCUMULATORS: tuple[str, ...] = ("f32", "f16")

_SHAPE_RE = re.compile(r"^\s*(\d+)\s*[x×X,*]\s*(\d+)\s*[x×X,*]\s*(\d+)\s*$")


def parse_shape(text: str) -> Shape:
    """Parse ``4096x4096x4096`` (or ``M,N,K`` / ``M_N_K``) into a :class:`Shape`."""
    m = _SHAPE_RE.match(text.replace("_", "x"))
    if not m:
        raise ShapeError(f"bad shape {text!r}: write MxNxK, e.g. 4096x4096x4096")
    dims = tuple(int(g) for g in m.groups())
    for d in dims:
        if d <= 0 or d > MAX_DIM:
            raise ShapeError(f"bad shape {text!r}: every dimension must be between 1 and {MAX_DIM}")
    return Shape(*dims)


def grid() -> list[Shape]:
    """All 1,000 shapes, ordered by (M, N, K)."""
    return [Shape(m, n, k) for m, n, k in itertools.product(GRID_DIMS, repeat=3)]


def small() -> list[Shape]:
    """Grid shapes whose every dimension is <= 512."""
    return [s for s in grid() if max(s.m, s.n, s.k) <= 512]


def sample100() -> list[Shape]:
    """A fixed, stratified 100-shape sample of the grid.

    Stratified by the three size classes in proportion to their share of the
    grid, and within each class spread evenly over log2(M*N*K) and the aspect
    of the problem: the class's shapes are sorted by (flops, M, N, K) and every
    j-th is taken at evenly spaced positions.  No random numbers, so the sample
    is the same everywhere and forever.
    """
    shapes = grid()
    by_class: dict[str, list[Shape]] = {"small": [], "mid": [], "big": []}
    for s in shapes:
        by_class[s.size_class].append(s)
    total = len(shapes)
    quota = {c: round(100 * len(v) / total) for c, v in by_class.items()}
    # make the quotas sum to exactly 100 (rounding), adjusting the largest class
    diff = 100 - sum(quota.values())
    largest = max(quota, key=lambda c: len(by_class[c]))
    quota[largest] += diff
    out: list[Shape] = []
    for cls, members in by_class.items():
        members = sorted(members, key=lambda s: (s.flops, s.m, s.n, s.k))
        q = quota[cls]
        if q <= 0:
            continue
        step = len(members) / q
        out.extend(members[int(i * step + step / 2)] for i in range(q))
    return sorted(out)


SHAPE_SETS = {"grid": grid, "small": small, "sample100": sample100}


#: a shapes file larger than this is not a list of shapes (the grid is 15 kB)
MAX_SHAPES_FILE_BYTES = 4 << 20
#: a role (the comment on a shape's line) is kept to this many printable characters
MAX_ROLE_CHARS = 120


def read_shapes_file(path: str | Path) -> list[Shape]:
    """The shapes of a shapes file, in order (see :func:`read_shapes_file_roles`)."""
    return list(read_shapes_file_roles(path))


def read_shapes_file_roles(path: str | Path) -> dict[Shape, str]:
    """One ``M,N,K`` (or ``MxNxK``) per line; ``#`` starts a comment, which on a shape's line names
    its role (``16,6144,4096  # llama-3-8b qkv t16``); blank lines ignored.

    Errors name the file and the line number but never repeat the line: ``--shapes``
    accepts any path, and a mistyped one (``/etc/shadow``, a ``.env``) must not end up
    printed in a terminal or a log.
    """
    p = Path(path)
    data = read_capped(p, MAX_SHAPES_FILE_BYTES, ShapeError, "shapes file", verdict="not a list of shapes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ShapeError(f"shapes file {str(p)!r} is not text: write M,N,K per line") from None
    out: dict[Shape, str] = {}
    for lineno, raw in enumerate(text.splitlines(), 1):
        line, _, comment = raw.partition("#")
        line = line.strip()
        if not line:
            continue
        try:
            shape = parse_shape(line)
            role = "".join(c for c in comment.strip() if c.isprintable())[:MAX_ROLE_CHARS]
            out[shape] = f"{out[shape]}, {role}" if out.get(shape) and role else (role or out.get(shape, ""))
        except ShapeError:
            raise ShapeError(f"{p}:{lineno}: not a shape (write M,N,K per line, each between 1 and {MAX_DIM})") from None
    if not out:
        raise ShapeError(f"shapes file {str(p)!r} holds no shapes")
    return out


def _is_file(spec: str) -> bool:
    """``Path.is_file`` that says no, rather than raising, for names the OS rejects (too long)."""
    try:
        return Path(spec).is_file()
    except (OSError, ValueError):
        return False


def resolve_shapes(specs: Iterable[str] | str | None, default: str = "sample100", *,
                   tokens: Sequence[int] | None = None, tp: int | None = None) -> list[Shape]:
    """Turn user shape specs into a de-duplicated, ordered shape list.

    Each spec is a set name (``grid``, ``small``, ``sample100``), a shape string
    (``4096x4096x4096``), a space-, semicolon- or (for ``MxNxK`` shapes) comma-separated list
    of shape strings, a path to a shapes file, or a model (a preset name such as ``llama-3-8b`` or
    a Hugging Face ``config.json`` path, ``harness.models``) expanded at ``tokens`` rows and
    tensor-parallel degree ``tp``.
    """
    return list(_resolve(specs, default, tokens, tp))


def shape_roles(specs: Iterable[str] | str | None, *, tokens: Sequence[int] | None = None,
                tp: int | None = None) -> dict[Shape, str]:
    """What each shape of ``specs`` is for, where the spec says: a model's GEMM roles
    (``llama-3-8b qkv t16``), or the comment after a shapes file's line."""
    return {s: r for s, r in _resolve(specs, "sample100", tokens, tp).items() if r}


def _resolve(specs: Iterable[str] | str | None, default: str, tokens: Sequence[int] | None,
             tp: int | None) -> dict[Shape, str]:
    if specs is None:
        specs = [default]
    elif isinstance(specs, str):
        specs = [specs]
    seen: dict[Shape, str] = {}
    for spec in specs:
        spec = spec.strip()
        model = model_spec(spec, tokens, tp) if spec not in SHAPE_SETS else None
        if model is not None:
            for s, role in model.shapes():
                seen[s] = f"{seen[s]}, {role}" if seen.get(s) else role
            continue
        if spec in SHAPE_SETS:
            items = SHAPE_SETS[spec]()
        elif _SHAPE_RE.match(spec.replace("_", "x")):
            items = [parse_shape(spec)]
        elif re.fullmatch(r"[\dx×X_,;\s]+", spec) and (any(sep in spec for sep in (" ", ";"))
                                                     or ("," in spec and re.search(r"[x×X_]", spec))):
            # shapes written MxNxK may also be separated by commas (M,N,K shapes only by space or ';')
            seps = r"[\s;,]+" if re.search(r"[x×X_]", spec) else r"[\s;]+"
            items = [parse_shape(t) for t in re.split(seps, spec) if t]
        elif _is_file(spec):
            for s, role in read_shapes_file_roles(spec).items():
                seen[s] = f"{seen[s]}, {role}" if seen.get(s) and role else (role or seen.get(s, ""))
            continue
        else:
            raise ShapeError(
                f"unknown shapes {spec!r}: use grid, small, sample100, MxNxK, a shapes file or a model "
                "(a preset such as llama-3-8b, or a config.json path)"
            )
        for s in items:
            seen.setdefault(s, "")
    return seen


def parse_accumulator(text: str) -> str:
    if text not in ACCUMULATORS:
        raise ShapeError(f"bad accumulator {text!r}: use f32 or f16")
    return text
