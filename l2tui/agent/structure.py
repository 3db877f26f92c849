"""What a kernel's *optimization structure* is, in plain text terms.

Two uses:

* the **debugger guard** (:func:`guard_debug_patch`): CuTeGen's debug stage must
  fix a failure with a small, local patch and must not "fix" a kernel by
  removing its optimizations (smaller tiles, fewer pipeline stages, no more
  TMA / wgmma / cp.async / mma / ldmatrix, no unrolling).  Such patches are
  rejected and the reason is fed back to the debugger;
* **delayed profiling** (:func:`structure_key`): a normalised token skeleton of
  the kernel with comments and numbers removed.  When it has not changed for k
  refinement steps the structure is "stable" and NCU metrics may enter the
  context (tuning numbers then is what the metrics are good for).
"""

from __future__ import annotations

import hashlib
import re

from .patches import changed_lines

# feature name -> regex counted in the source (comments stripped)
FEATURES: dict[str, str] = {
    "TMA": r"cp\.async\.bulk\.tensor|SM90_TMA|cuTensorMap|CUtensorMap|make_tma_copy|tma_load|TmaDescriptor",
    "wgmma": r"wgmma|SM90_\d+x\d+x\d+_F\w*_SS|GMMA::|MMA_64x",
    "cp.async": r"cp\.async(?!\.bulk)|cp_async|__pipeline_memcpy_async|memcpy_async|SM80_CP_ASYNC",
    "mma": r"mma\.sync|mma_sync|wmma::mma|SM80_16x8x16|MMA_Atom|TiledMMA|make_tiled_mma",
    "ldmatrix": r"ldmatrix|SM75_U32x4_LDSM|LDSM",
    "shared-memory tiling": r"__shared__|extern\s+__shared__",
    "#pragma unroll": r"#\s*pragma\s+unroll",
    "register double buffering": r"\bfrag\w*\s*\[\s*2\s*\]|ping|pong",
}

# knob macros whose value must not shrink in a debug patch
_TILE_KNOB = re.compile(r"^(TILE|BLOCK|BLK|CTA|WARP|WG|MMA|THREAD|B)_?(M|N|K)\w*$|^(BM|BN|BK|WM|WN|WK|TM|TN|TK)$", re.I)
_STAGE_KNOB = re.compile(r"STAGE|PIPE|PREFETCH|BUFFER", re.I)
_DEFINE_RE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)[ \t]+\(?\s*(\d+)\s*\)?[ \t]*(?://.*)?$", re.M)
_CONSTEXPR_RE = re.compile(r"constexpr\s+(?:int|unsigned|size_t|uint32_t|int32_t|auto)\s+([A-Za-z_]\w*)\s*=\s*(\d+)\s*;")
_CUTE_SHAPE_RE = re.compile(r"Shape\s*<\s*(_\d+\s*(?:,\s*_\d+\s*)+)>")


def strip_comments(src: str) -> str:
    src = re.sub(r"/\*.*?\*/", " ", src, flags=re.S)
    return re.sub(r"//[^\n]*", "", src)


def feature_counts(src: str) -> dict[str, int]:
    code = strip_comments(src)
    return {name: len(re.findall(rx, code)) for name, rx in FEATURES.items()}


def knob_values(src: str) -> dict[str, int]:
    """Integer ``#define`` / ``constexpr`` constants (knob blocks and their like)."""
    code = strip_comments(src)
    out: dict[str, int] = {}
    for rx in (_DEFINE_RE, _CONSTEXPR_RE):
        for m in rx.finditer(code):
            out[m.group(1)] = int(m.group(2))
    return out


def cute_tile_sizes(src: str) -> list[int]:
    """Products of CuTe ``Shape<_128,_128,_64>`` tile shapes, in order."""
    out = []
    for m in _CUTE_SHAPE_RE.finditer(strip_comments(src)):
        prod = 1
        for t in re.findall(r"_(\d+)", m.group(1)):
            prod *= int(t)
        out.append(prod)
    return out


def guard_debug_patch(old: str, new: str, *, max_lines: int = 40) -> str | None:
    """Why a debugger patch must be rejected, or None when it is acceptable."""
    n = changed_lines(old, new)
    if n > max_lines:
        return (f"the debug patch changes {n} lines (limit {max_lines}); fix only the reported error "
                f"with a small local edit")
    before, after = feature_counts(old), feature_counts(new)
    for name in FEATURES:
        if before[name] > 0 and after[name] == 0:
            return f"the debug patch removes {name}; keep the optimization and fix the error itself"
        if name == "#pragma unroll" and after[name] < before[name]:
            return "the debug patch removes #pragma unroll; keep the loop unrolling and fix the error itself"
    kb, ka = knob_values(old), knob_values(new)
    for name, v in kb.items():
        if name not in ka:
            if _TILE_KNOB.match(name) or _STAGE_KNOB.search(name):
                return f"the debug patch deletes {name}; keep the tiling/pipelining knobs"
            continue
        if ka[name] < v:
            if _STAGE_KNOB.search(name):
                return f"the debug patch reduces pipeline stages ({name} {v} -> {ka[name]}); fix the error without de-pipelining"
            if _TILE_KNOB.match(name):
                return f"the debug patch shrinks a tile size ({name} {v} -> {ka[name]}); keep the tiling and fix the error itself"
    tb, ta = cute_tile_sizes(old), cute_tile_sizes(new)
    if tb and ta and len(tb) == len(ta) and any(a < b for a, b in zip(ta, tb)):
        return "the debug patch shrinks a CuTe tile shape; keep the tiling and fix the error itself"
    if tb and not ta:
        return "the debug patch removes the CuTe tile shapes; keep the tiling and fix the error itself"
    return None


def structure_key(src: str) -> str:
    """Hash of the normalised token skeleton: comments, numbers and blanks removed.

    Two kernels differing only in knob values (tile sizes, stages, unroll
    factors) have the same key; adding a prefetch loop or swapping WMMA for
    CuTe changes it.
    """
    code = strip_comments(src)
    code = re.sub(r"\b0[xX][0-9a-fA-F]+\b|\b\d+(\.\d*)?([eE][+-]?\d+)?[fFuUlL]*\b", "N", code)
    code = re.sub(r"_N\b", "_N", code)
    tokens = re.findall(r"[A-Za-z_]\w*|\S", code)
    return hashlib.sha256(" ".join(tokens).encode()).hexdigest()[:16]
