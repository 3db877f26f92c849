"""Seed kernel families: their knobs, legal values, constraints and rendering.

A *family* is one readable ``.cu`` template in ``harness/kernels/fam_*.cu`` that speaks the
kernel ABI.  Its tunable choices are plain ``#define`` lines between ``// l2: knobs begin`` and
``// l2: knobs end``, so the LLM and the ``search`` policy edit the same text: a knob change is a
search/replace of one line.  This module knows, for every family, which values each knob may
take and which combinations are valid (shared-memory fit, warp layout, schedule rules), so a
search never proposes something that cannot compile, and the cost model can read tile sizes and
thread counts off a source.

Why the registry lives in ``harness``: rendering and validating sources needs no agent state,
and ``bench``/``sweep`` tools use it without the agent layer.
"""

from __future__ import annotations

import math
import re
import sys
from dataclasses import dataclass, field, replace
from functools import lru_cache, partial
from pathlib import Path
from typing import Callable, Mapping, Sequence

from .errors import HarnessError
from .paths import KERNELS_DIR, PACKAGE_DIR
from .shapes import Shape

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

SMEM_PER_SM = 227 * 1024          # bytes a CTA may use on sm_80/sm_90 (opt-in maximum)
REGS_PER_SM = 65536


class FamilyError(HarnessError):
    """Unknown family, unknown knob or an illegal knob value."""


@dataclass(frozen=True)
class Knob:
    """One ``#define`` in a family's knob block."""

    name: str
    values: tuple[str, ...]
    doc: str = ""


@dataclass(frozen=True)
class Family:
    """A seed kernel family (see the module docstring)."""

    name: str
    file: str
    min_cc: int                  # lowest compute capability it runs on (80 = sm_80)
    max_cc: int | None           # highest (sm_90a code runs on cc 9.0 only)
    build_arch: str              # arch it is built for in CI when no GPU is present
    knobs: tuple[Knob, ...]
    summary: str
    deterministic: bool = True
    presets: tuple[Mapping[str, str], ...] = field(default=(), compare=False)
    # a family that is the same kernel as another with other knob ranges keeps only its header
    # and knob block in ``file`` and borrows the kernel body of ``body_from`` (no copied code)
    body_from: str | None = None
    # False until a GPU run of the family's GPU test has passed every check: the search and sweep
    # then time it only where it is named (``--also``, the ``families`` setting), never by default
    verified_on_gpu: bool = True

    @property
    def path(self) -> Path:
        return KERNELS_DIR / self.file

    def template(self) -> str:
        own = _read_template(self.file)
        if self.body_from is None:
            return own
        head, sep, _ = own.partition(_BODY_MARKER)
        _, sep2, body = _read_template(self.body_from).partition(_BODY_MARKER)
        if not sep or not sep2:
            raise FamilyError(f"family {self.name}: {self.file} or {self.body_from} lacks the knob-block end marker")
        return head + _BODY_MARKER + body

    def knob(self, name: str) -> Knob:
        for k in self.knobs:
            if k.name == name:
                return k
        raise FamilyError(f"family {self.name} has no knob {name!r}: use one of {', '.join(self.knob_names)}")

    @property
    def knob_names(self) -> tuple[str, ...]:
        return tuple(k.name for k in self.knobs)

    def defaults(self) -> dict[str, str]:
        return dict(_knobs_of(self.template()))

    def runs_on(self, cc: int) -> bool:
        return cc >= self.min_cc and (self.max_cc is None or cc <= self.max_cc)


_BODY_MARKER = "// (the line above declares the accumulator to the harness: keep it equal to ACC)\n"


_PART_LINE = re.compile(r"^// l2: part (?P<file>part_[a-z0-9_]+\.cuh)\n", re.MULTILINE)
_PART_BEGINS = "// l2: part begins\n"


@lru_cache(maxsize=None)
def _read_template(file: str) -> str:
    """A template's text with its kernel parts pasted (:func:`paste_parts`)."""
    return paste_parts((KERNELS_DIR / file).read_text(), lambda name: (KERNELS_DIR / name).read_text())


def paste_parts(template: str, read: Callable[[str], str]) -> str:
    """``template`` with its ``// l2: part FILE`` lines replaced by that part's code (what follows
    the part's ``// l2: part begins`` line; ``read`` gives a kernel file's text by name): a piece
    two families share (the split-K reduce) is written once and every render is still one
    self-contained source, as the sandboxed compiler needs."""
    def code(m: re.Match[str]) -> str:
        _, sep, body = read(m["file"]).partition(_PART_BEGINS)
        if not sep:
            raise FamilyError(f"kernel part {m['file']} lacks its '{_PART_BEGINS.strip()}' line")
        return body

    return _PART_LINE.sub(code, template)


def _V(*xs: int | str) -> tuple[str, ...]:
    """A knob's legal values as the strings its #define takes."""
    return tuple(str(x) for x in xs)

# ---------------------------------------------------------------- element type

#: the element types of A, B and C a configuration may have, as the harness names them
DTYPES = ("fp16", "bf16")
#: the DTYPE knob's values, in DTYPES order
DTYPE_VALUES = ("DTYPE_F16", "DTYPE_BF16")

# Why a render-time rewrite and not an ``#if`` in every template: the fp16 render must stay the
# text that was measured (the committed winners are keyed by its sha256), so a template carries
# fp16 code only and a bf16 render rewrites its element type, token by token, outside comments.
# Every family's kernels use these CUDA/CUTLASS spellings of fp16 and nothing else; a test
# renders each family in bf16 and checks that no fp16 spelling is left in its code.
_BF16_TOKENS: tuple[tuple[str, str], ...] = (
    (r"\bcutlass::half_t\b", "cutlass::bfloat16_t"),
    (r"\b__floats2half2_rn\b", "__floats2bfloat162_rn"),
    (r"\b__float2half_rn\b", "__float2bfloat16_rn"),
    (r"\b__half_as_ushort\b", "__bfloat16_as_ushort"),
    (r"\b__half22float2\b", "__bfloat1622float2"),
    (r"\b(?:__)?half2\b", "__nv_bfloat162"),
    (r"\b(?:__)?half\b", "__nv_bfloat16"),
    (r"\.f32\.f16\.f16\.f32\b", ".f32.bf16.bf16.f32"),
    (r'(extern\s+"C"\s+int\s+)l2_hgemm(?=\s*\()', r"\1l2_hgemm_bf16"),
)
#: fp16 spellings that must not survive in the code of a bf16 render (the ACC_F16 mma, which
#: validate refuses with bf16, is dropped by the preprocessor and so not listed)
FP16_RESIDUE = re.compile(r"\bcutlass::half_t\b|\b__half2?\b|\bhalf2?\b|__float2half|__floats2half|__half_as|"
                          r"__half22float2|\.f32\.f16\.f16\.f32")
_BF16_DTYPE_LINES = "#define DTYPE_F16 1\n#define DTYPE_BF16 2\n"


def _split_comment(line: str) -> tuple[str, str]:
    """A source line as (code, comment): the rewrite leaves what comments say about fp16 alone."""
    at = line.find("//")
    return (line, "") if at < 0 else (line[:at], line[at:])


def _bf16_code(code: str) -> str:
    for pattern, repl in _BF16_TOKENS:
        code = re.sub(pattern, repl, code)
    return code


def to_bf16(source: str) -> str:
    """The bf16 kernel of an fp16 family render: the element type rewritten, cuda_bf16.h
    included, the entry point ``l2_hgemm_bf16`` and ``#define DTYPE DTYPE_BF16`` in the knob block."""
    if "#define DTYPE DTYPE_BF16" in source:
        return source
    m = _BLOCK_RE.search(source)
    if not m:
        raise FamilyError("source has no '// l2: knobs begin/end' block: render it from a family first")
    lines = []
    for line in source.splitlines(keepends=True):
        code, comment = _split_comment(line)
        lines.append(_bf16_code(code) + comment)
    out = "".join(lines).replace("#include <cuda_fp16.h>\n", "#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n", 1)
    m = _BLOCK_RE.search(out)
    assert m is not None  # the rewrite leaves the block's markers (comments) as they were
    begin = out.rfind("\n", 0, m.start()) + 1
    return out[:begin] + _BF16_DTYPE_LINES + out[begin:m.end(1)] + "#define DTYPE DTYPE_BF16\n" + out[m.end(1):]


def dtype_of_knobs(knobs: Mapping[str, str]) -> str:
    """``fp16`` or ``bf16``: a knob assignment without DTYPE is fp16 (every render before bf16)."""
    return "bf16" if knobs.get("DTYPE") == "DTYPE_BF16" else "fp16"


def dtype_knob(dtype: str) -> str:
    if dtype not in DTYPES:
        raise FamilyError(f"unknown dtype {dtype!r}: use one of {', '.join(DTYPES)}")
    return DTYPE_VALUES[DTYPES.index(dtype)]




SM90 = Family(
    name="sm90_cutlass",
    file="fam_sm90_cutlass.cu",
    min_cc=90,
    max_cc=90,
    build_arch="sm_90a",
    summary="CUTLASS 3.x TMA + WGMMA warp-specialized GEMM (Hopper): big and mid shapes",
    knobs=(
        Knob("TILE_M", _V(64, 128, 192, 256), "CTA tile rows (COOPERATIVE needs >= 128, a multiple of 128)"),
        Knob("TILE_N", _V(32, 48, 64, 96, 128, 160, 192, 256),
             "CTA tile columns (32 and 48: narrow tiles that give a long-K grid of few 128-row tiles "
             "enough CTAs to fill the SMs)"),
        Knob("TILE_K", _V(32, 64, 128), "K slice per pipeline stage"),
        Knob("CLUSTER_M", _V(1, 2, 4), "CTAs per cluster along M (at most 8 CTAs in all)"),
        Knob("CLUSTER_N", _V(1, 2, 4), "CTAs per cluster along N (at most 8 CTAs in all)"),
        Knob("SCHEDULE", ("COOPERATIVE", "PINGPONG", "BASIC"),
             "persistent: consumer warpgroups share a tile / alternate tiles; BASIC: a CTA per tile, "
             "one consumer warpgroup"),
        Knob("STAGES", _V(0, 2, 3, 4, 5, 6, 7, 8), "pipeline stages, 0 = fill shared memory"),
        Knob("SCHEDULER", ("PERSISTENT", "STREAMK", "SPLITK", "SPLITK_REDUCE"),
             "tile scheduler (SPLITK_REDUCE: batched K slices + a separate parallel reduce kernel)"),
        Knob("SPLITS", _V(0, 1, 2, 3, 4, 8), "K splits for SPLITK/SPLITK_REDUCE, 0 = fill one wave per call"),
        Knob("RASTER", ("RASTER_HEURISTIC", "RASTER_ALONG_M", "RASTER_ALONG_N"), "tile order"),
        Knob("SWIZZLE", _V(1, 2, 4, 8), "max swizzle size of the tile order"),
        Knob("EPILOGUE", ("EPI_TMA", "EPI_TMA_NOC", "EPI_NOSMEM"),
             "TMA store via shared memory (C declared / no C operand: delayed stores) / direct stores"),
        Knob("EPI_TILE_N", _V(0, 64, 128), "epilogue subtile columns, 0 = CUTLASS's choice (32)"),
        Knob("ACC", ("ACC_F32", "ACC_F16"), "accumulator type"),
        Knob("PDL", ("0", "1"), "programmatic dependent launch (PERSISTENT and SPLITK_REDUCE only)"),
    ),
)

SM90T = Family(
    name="sm90_cutlass_t",
    file="fam_sm90_cutlass_t.cu",
    min_cc=90,
    max_cc=90,
    build_arch="sm_90a",
    summary="CUTLASS 3.x on Hopper, the transposed product: tiles of 48-256 rows of C (mid shapes)",
    knobs=(
        Knob("TILE_M", _V(8, 16, 32, 48, 64, 80, 96, 112, 128, 160, 192, 256),
             "CTA tile rows of C (the WGMMA's N in this order: 8, or a multiple of 16 up to 256; 8, 16 and "
             "32 for decode GEMMs, 8 in pairs along M sharing each weight tile by multicast)"),
        Knob("TILE_N", _V(64, 128, 256), "CTA tile columns of C (the WGMMA's M: 64 per consumer warpgroup)"),
        Knob("TILE_K", _V(64, 128), "K slice per pipeline stage"),
        Knob("CLUSTER_M", _V(1, 2, 4), "CTAs per cluster along M (at most 8 CTAs in all)"),
        Knob("CLUSTER_N", _V(1, 2, 4), "CTAs per cluster along N (at most 8 CTAs in all)"),
        Knob("SCHEDULE", ("BASIC", "PINGPONG", "COOPERATIVE"),
             "BASIC: a CTA per tile, one consumer warpgroup; persistent: consumer warpgroups "
             "alternate tiles / share a tile"),
        Knob("STAGES", _V(0, 2, 3, 4, 5, 6, 7, 8), "pipeline stages, 0 = fill shared memory"),
        Knob("SCHEDULER", ("PERSISTENT", "STREAMK", "SPLITK", "SPLITK_REDUCE", "SPLITK_FUSED"),
             "CUTLASS's tile scheduler (STREAMK and SPLITK need COOPERATIVE): few tiles share a long K; "
             "SPLITK_REDUCE (any schedule): batched K slices + a separate parallel reduce kernel; "
             "SPLITK_FUSED (BASIC): the same slices added in the GEMM's own launch after a grid barrier"),
        Knob("SPLITS", _V(0, 1, 2, 3, 4, 8),
             "K splits for SPLITK/SPLITK_REDUCE/SPLITK_FUSED, 0 = fill one wave per call"),
        Knob("RASTER", ("RASTER_HEURISTIC", "RASTER_ALONG_M", "RASTER_ALONG_N"), "tile order"),
        Knob("SWIZZLE", _V(1, 2, 4, 8), "max swizzle size of the tile order"),
        Knob("ACC", ("ACC_F32", "ACC_F16"), "accumulator type"),
        Knob("PDL", ("0", "1"), "programmatic dependent launch"),
    ),
)

# knobs the three mma.sync families share (same names, values and meaning)
_WARPS_MN = (
    Knob("WARPS_M", _V(1, 2, 4), "warps along M"),
    Knob("WARPS_N", _V(1, 2, 4), "warps along N"),
)
_MMA_COMMON = (Knob("BK", _V(32, 64), "K slice per pipeline stage"), *_WARPS_MN)
_ACC_PDL = (
    Knob("ACC", ("ACC_F32", "ACC_F16"), "accumulator type"),
    Knob("PDL", ("0", "1"), "programmatic dependent launch on sm_90+"),
)
# the latency families' narrow tiles
_NARROW_TILE = (
    Knob("BM", _V(16, 32, 64), "CTA tile rows"),
    Knob("BN", _V(32, 64, 128), "CTA tile columns"),
)

SM80 = Family(
    name="sm80_mma",
    file="fam_sm80_mma.cu",
    min_cc=80,
    max_cc=None,
    build_arch="sm_80",
    summary="hand-written mma.sync m16n8k16 + cp.async multistage (Ampere, runs on Hopper)",
    knobs=(
        Knob("BM", _V(32, 64, 128, 256), "CTA tile rows"),
        Knob("BN", _V(32, 64, 128, 256), "CTA tile columns"),
        *_MMA_COMMON,
        Knob("STAGES", _V(2, 3, 4, 5), "cp.async pipeline depth"),
        Knob("SWIZZLE", _V(1, 2, 4, 8, 16), "tile rows per CTA group"),
        Knob("SPLIT_K", _V(0, 1, 2, 4, 8, 16), "K slices per tile, 0 = auto"),
        *_ACC_PDL,
    ),
)

SMALL = Family(
    name="small_splitk",
    file="fam_small_splitk.head.cu",
    body_from="fam_sm80_mma.cu",
    min_cc=80,
    max_cc=None,
    build_arch="sm_80",
    summary="latency family: narrow tiles + split-K with in-kernel ordered reduction, one launch",
    knobs=(
        *_NARROW_TILE,
        *_MMA_COMMON,
        Knob("STAGES", _V(2, 3, 4), "cp.async pipeline depth"),
        Knob("SWIZZLE", _V(1, 2, 4, 8), "tile rows per CTA group"),
        Knob("SPLIT_K", _V(0, 1, 2, 4, 8, 16, 32, 64, 128), "K slices per tile, 0 = auto"),
        *_ACC_PDL,
        Knob("CLUSTER_K", _V(1, 2, 4, 8),
             "K slices of a tile in one thread-block cluster, added through distributed shared memory (sm_90+)"),
    ),
)

TINY = Family(
    name="tiny_mma",
    file="fam_tiny_mma.cu",
    min_cc=80,
    max_cc=None,
    build_arch="sm_80",
    summary="latency family for the smallest shapes: one round trip per K chunk, stores from registers or "
            "through shared memory",
    knobs=(
        Knob("BM", _V(16, 32, 64, 128), "CTA tile rows (128: eight warps, many tiles with a short K)"),
        _NARROW_TILE[1],
        Knob("BK", _V(32, 64, 128), "K chunk fetched per round trip"),
        *_WARPS_MN,
        Knob("WARPS_K", _V(1, 2, 4), "warps along K (shorter MMA chains, partials added in shared memory)"),
        Knob("AHEAD", _V(1, 2), "K chunks whose loads are in flight while one is multiplied"),
        Knob("CLUSTER_K", _V(1, 2, 4, 8),
             "CTAs of one thread-block cluster sharing a tile's K, added through distributed shared memory (sm_90+)"),
        Knob("EPILOGUE", ("EPI_REGS", "EPI_SMEM"),
             "C from each thread's fragments, or through shared memory as 16-byte row segments (whole sectors)"),
        *_ACC_PDL,
    ),
)

KSPLIT = Family(
    name="sm90_ksplit",
    file="fam_sm90_ksplit.cu",
    min_cc=90,
    max_cc=90,
    build_arch="sm_90a",
    summary="TMA + WGMMA with K split over a thread-block cluster, partials added through distributed shared "
            "memory: mid shapes fed through L2",
    knobs=(
        Knob("TILE_M", _V(64, 128), "CTA tile rows (one consumer warpgroup per 64)"),
        Knob("TILE_N", _V(64, 128, 256), "CTA tile columns (the wgmma N)"),
        Knob("TILE_K", _V(64), "K per pipeline stage (one 128-byte swizzle row)"),
        Knob("STAGES", _V(2, 3, 4, 5, 6, 7, 8, 10, 12), "k-tiles in flight (TMA ring in shared memory)"),
        Knob("CLUSTER_K", _V(1, 2, 4, 8), "CTAs of one cluster sharing a tile's K (1: no cluster, direct stores)"),
        Knob("GROUPS", _V(0, 1, 2, 4, 8, 16, 32, 64),
             "clusters sharing a tile's K, their sums added through a global workspace (0: as many as stay resident)"),
        Knob("RASTER", ("RASTER_ALONG_M", "RASTER_ALONG_N"), "which tile index runs fastest"),
        Knob("ACC", ("ACC_F32",), "accumulator type (fp32 only)"),
        Knob("PDL", ("0", "1"), "programmatic dependent launch"),
        Knob("MMA_DEPTH", ("0", "1"), "wgmma batches kept in flight past the one just issued"),
        Knob("WG_K", _V(1, 2), "sets of consumer warpgroups sharing a tile's K inside the CTA (2: two wgmma chains)"),
        Knob("RELEASE", ("RELEASE_BY_THREAD", "RELEASE_BY_WARP"),
             "who frees a stage for the producer: every consumer thread, or lane 0 of each consumer warp"),
    ),
)

SKINNY = Family(
    name="skinny_splitk",
    file="fam_skinny.cu",
    min_cc=80,
    max_cc=None,
    build_arch="sm_80",
    summary="skinny decode GEMMs (M <= 128, N and K in the thousands): B streamed once over every SM by "
            "split-K, slices added in the same kernel",
    knobs=(
        Knob("BM", _V(16, 32, 64, 128), "CTA tile rows (M above BM reads B again per row tile: pick BM >= M)"),
        Knob("BN", _V(64, 128, 256), "CTA tile columns"),
        Knob("BK", _V(32, 64, 128), "K rows per pipeline stage"),
        *_WARPS_MN,
        Knob("WARPS_K", _V(1, 2, 4), "warps along K (partials added in shared memory in warp order)"),
        Knob("STAGES", _V(2, 3, 4, 5, 6, 8), "cp.async ring depth (STAGES - 1 stages of B in flight per CTA)"),
        Knob("KCHUNK", _V(0, 256, 512, 1024, 2048, 4096),
             "K rows per CTA (splits = ceil(K / KCHUNK)); 0 = enough slices for WAVES waves of resident CTAs"),
        Knob("WAVES", _V(1, 2, 4), "waves of resident CTAs that KCHUNK 0 aims at"),
        Knob("ACC", ("ACC_F32", "ACC_F16"), "accumulator type (slices are added in fp32 either way)"),
    ),
)

#: the rows skinny_splitk serves (its l2_hgemm returns 2 above)
SKINNY_MAX_M = 128

FAMILIES: dict[str, Family] = {f.name: f for f in (SM90, SM80, SMALL, TINY, KSPLIT, SM90T, SKINNY)}


def families() -> list[Family]:
    return list(FAMILIES.values())


def get_family(name: str) -> Family:
    try:
        return FAMILIES[name]
    except KeyError:
        raise FamilyError(f"unknown kernel family {name!r}: use one of {', '.join(FAMILIES)}") from None


# ---------------------------------------------------------------- knob block text

_BLOCK_RE = re.compile(r"^[ \t]*// l2: knobs begin[^\n]*\n(.*?)^[ \t]*// l2: knobs end", re.S | re.M)
_DEFINE_RE = re.compile(r"^[ \t]*#define[ \t]+([A-Za-z_][A-Za-z0-9_]*)[ \t]+([^\s/]+)[^\n]*$", re.M)
_FAMILY_RE = re.compile(r"^// l2tui seed family: *([A-Za-z0-9_]+)", re.M)
_ACC_RE = re.compile(r"^[ \t]*// l2: acc=(f16|f32)[ \t]*$", re.M)


@lru_cache(maxsize=32)
def _knobs_of(template: str) -> tuple[tuple[str, str], ...]:
    # a family's defaults are read for every configuration rendered: parse each template once
    return tuple(parse_knobs(template).items())


def parse_knobs(source: str) -> dict[str, str]:
    """The ``#define NAME VALUE`` pairs of the knob block, in order ({} when there is none)."""
    m = _BLOCK_RE.search(source)
    if not m:
        return {}
    return {name: value for name, value in _DEFINE_RE.findall(m.group(1))}


def family_of(source: str) -> Family | None:
    """The family a source was rendered from (its header line), if it is a known one."""
    m = _FAMILY_RE.search(source)
    return FAMILIES.get(m.group(1)) if m else None


def declared_acc(source: str) -> str:
    m = _ACC_RE.search(source)
    return m.group(1) if m else "f32"


def acc_knob(acc: str) -> str:
    return "ACC_F16" if acc == "f16" else "ACC_F32"


def set_knobs(source: str, changes: Mapping[str, str | int]) -> str:
    """Return ``source`` with knob lines changed (only inside the knob block).

    Keeps the ``// l2: acc=`` declaration in step with an ``ACC`` change.
    """
    m = _BLOCK_RE.search(source)
    if not m:
        raise FamilyError("source has no '// l2: knobs begin/end' block: render it from a family first")
    block = m.group(1)
    present = dict(_DEFINE_RE.findall(block))
    if "DTYPE" in changes and str(changes["DTYPE"]) != present.get("DTYPE", "DTYPE_F16"):
        raise FamilyError("DTYPE is not a knob line to edit: render the family with DTYPE set (the element "
                          "type is rewritten through the whole kernel)")
    changes = {k: v for k, v in changes.items() if not (k == "DTYPE" and "DTYPE" not in present)}
    for name, value in changes.items():
        if name not in present:
            raise FamilyError(f"knob {name!r} is not in the knob block: use one of {', '.join(present)}")
        block = re.sub(
            rf"^([ \t]*#define[ \t]+{re.escape(name)}[ \t]+)[^\s/]+",
            lambda mm, v=str(value): mm.group(1) + v,
            block,
            count=1,
            flags=re.M,
        )
    out = source[: m.start(1)] + block + source[m.end(1):]
    if "ACC" in changes:
        acc = "f16" if str(changes["ACC"]) == "ACC_F16" else "f32"
        out = _ACC_RE.sub(f"// l2: acc={acc}", out, count=1)
    return out


def render(family: Family | str, knobs: Mapping[str, str | int] | None = None, *,
           allow_unsafe: bool = False) -> str:
    """The family's template with ``knobs`` applied (others keep their defaults).

    Raises :class:`FamilyError` for unknown knobs, illegal values or invalid combinations
    (``allow_unsafe`` as in :func:`validate`).
    """
    fam = get_family(family) if isinstance(family, str) else family
    given = {k: str(v) for k, v in (knobs or {}).items()}
    full = {**fam.defaults(), **given}
    problems = validate(fam, full, allow_unsafe=allow_unsafe)
    if problems:
        raise FamilyError(f"{fam.name}: {problems[0]}")
    dtype = dtype_of_knobs(given)
    given.pop("DTYPE", None)
    fp16 = set_knobs(fam.template(), given) if given else fam.template()
    return to_bf16(fp16) if dtype == "bf16" else fp16


def _define_with_value(value: str, define: re.Match[str]) -> str:
    """A ``#define NAME`` prefix matched in a knob line, followed by its new value."""
    return define.group(1) + value


def knob_patch(source: str, changes: Mapping[str, str | int]) -> str:
    """Search/replace blocks (docs/INTERFACES.md patch format) that apply ``changes``.

    One block per changed line, so a patch stays localized and readable as a demonstration.
    """
    m = _BLOCK_RE.search(source)
    if not m:
        raise FamilyError("source has no knob block")
    lines: dict[str, str | None] = {name: None for name in changes}
    for line in m.group(1).splitlines():
        dm = _DEFINE_RE.match(line)
        if dm and dm.group(1) in lines:
            lines[dm.group(1)] = line
    blocks = []
    for name, value in changes.items():
        old = lines[name]
        if old is None:
            raise FamilyError(f"knob {name!r} is not in the knob block")
        new = re.sub(rf"^([ \t]*#define[ \t]+{re.escape(name)}[ \t]+)[^\s/]+", partial(_define_with_value, str(value)), old)
        blocks.append(f"<<<<<<< SEARCH\n{old}\n=======\n{new}\n>>>>>>> REPLACE")
    if "ACC" in changes:
        am = _ACC_RE.search(source)
        if am:
            acc = "f16" if str(changes["ACC"]) == "ACC_F16" else "f32"
            blocks.append(f"<<<<<<< SEARCH\n{am.group(0)}\n=======\n// l2: acc={acc}\n>>>>>>> REPLACE")
    return "\n".join(blocks) + "\n"


# ---------------------------------------------------------------- geometry and validity


@dataclass(frozen=True)
class Geometry:
    """What the cost model needs to know about one configuration."""

    family: str
    tile_m: int
    tile_n: int
    tile_k: int
    threads: int
    smem_bytes: int
    regs_per_thread: int          # estimate
    ctas_per_sm: int
    stages: int
    split_k: int                  # 0 = automatic (decided per shape at run time)
    persistent: bool
    streamk: bool
    cluster: int
    pingpong: bool
    acc: str
    pdl: bool = True
    separate_reduce: bool = False  # SPLITK_REDUCE / SPLITK_FUSED: equal K slices written in fp32, then added
    epilogue: str = "EPI_TMA"      # sm90: EPI_TMA / EPI_TMA_NOC / EPI_NOSMEM; mma.sync: SMEM; tiny: REGS
    # tile order of a persistent sm90 kernel: raster "M" / "N" / "H" (CUTLASS's heuristic) and its
    # max swizzle size; swizzle 0 = an order the cost model does not model (other families)
    raster: str = "H"
    swizzle: int = 0
    cluster_mn: tuple[int, int] = (1, 1)   # CTAs of a cluster along M and N
    groups: int = 1                        # sm90_ksplit: clusters per tile (0 = chosen per shape)
    k_chunk: int = 0                       # skinny_splitk: K rows per CTA (0 = chosen per shape)
    waves: int = 0                         # skinny_splitk: waves of resident CTAs KCHUNK 0 aims at
    fused_reduce: bool = False     # SPLITK_FUSED: the slices added in the GEMM's launch after a grid barrier

    def tile_grid(self, shape: Shape) -> tuple[int, int]:
        """Output tiles along M and N that the kernel computes: CUTLASS's sm90 tile schedulers
        round each side up to a multiple of the cluster times the swizzle (narrowed on small
        grids, as :meth:`swizzle_size` says), and the padding tiles are computed like the rest
        (their loads are out of bounds, zero-filled; their stores are masked)."""
        tm, tn = math.ceil(shape.m / self.tile_m), math.ceil(shape.n / self.tile_n)
        if self.swizzle == 0:
            return tm, tn
        sw = self.swizzle_size(tm, tn)
        um, un = sw * self.cluster_mn[0], sw * self.cluster_mn[1]
        return -(-tm // um) * um, -(-tn // un) * un

    def swizzle_size(self, tiles_m: int, tiles_n: int) -> int:
        """The swizzle CUTLASS uses: the knob's, narrowed to 4, 2 or 1 when the smaller side of
        the tile grid is under 6, 3 or 2 tiles."""
        least = min(tiles_m, tiles_n)
        return (8 if self.swizzle >= 8 and least >= 6 else 4 if self.swizzle >= 4 and least >= 3
                else 2 if self.swizzle >= 2 and least >= 2 else 1)

    def splits_for(self, shape: Shape, sm_count: int = 132) -> int:
        """The split-K factor the kernel will use on ``shape`` (mirrors the .cu host code)."""
        tiles = math.ceil(shape.m / self.tile_m) * math.ceil(shape.n / self.tile_n)
        ktiles = math.ceil(shape.k / self.tile_k)
        s = self.split_k
        if self.family == "skinny_splitk":
            return skinny_splits(self, shape, sm_count * max(1, self.ctas_per_sm))
        if self.family == "sm90_ksplit":  # CLUSTER_K slices per cluster, GROUPS clusters per tile
            return min(s * self.groups_for(shape, sm_count), ktiles)
        if self.family in ("sm90_cutlass", "sm90_cutlass_t"):
            if s == 0:  # SPLITS 0: one wave of (tile, split) units, >= 4 k-tiles per split
                s = max(1, min(sm_count * max(1, self.ctas_per_sm) // max(tiles, 1), ktiles // 4))
            if self.separate_reduce:  # equal slices: a multiple of TILE_K long, else of 8
                for unit in (self.tile_k, 8):
                    for cand in range(s, 1, -1):
                        if shape.k % cand == 0 and (shape.k // cand) % unit == 0:
                            return cand
                return 1
            return max(1, s)
        if s == 0:  # SPLIT_K 0: up to two CTAs per SM, >= 2 k-tiles per slice, <= 128 slices
            s = min(sm_count * min(self.ctas_per_sm, 2) // tiles, ktiles // 2, 128)
        s = max(1, min(s, ktiles))
        per = math.ceil(ktiles / s) * self.tile_k
        return math.ceil(shape.k / per)


    def groups_for(self, shape: Shape, sm_count: int = 132) -> int:
        """sm90_ksplit's GROUPS on ``shape`` (mirrors the .cu host code): 0 = the largest power of
        two up to 16 that keeps every cluster resident and at least two k-tiles per CTA."""
        if self.family != "sm90_ksplit" or self.groups == 1:
            return 1
        tiles = math.ceil(shape.m / self.tile_m) * math.ceil(shape.n / self.tile_n)
        if self.groups:
            return self.groups
        ktiles = math.ceil(shape.k / self.tile_k)
        resident = resident_clusters(self.split_k, self.ctas_per_sm, sm_count)
        g = 1
        while g * 2 <= 16 and tiles * g * 2 <= resident and self.split_k * g * 4 <= ktiles:
            g *= 2
        return g


SKINNY_MAX_SPLITS = 256


def skinny_splits(g: "Geometry", shape: Shape, resident: int) -> int:
    """skinny_splitk's K slices on ``shape`` (mirrors ``slice_rows`` in its .cu host code): KCHUNK
    rows each, or enough slices for WAVES waves of ``resident`` CTAs; never fewer than 4 rows of K
    per row of the tile (the fp32 partials would outweigh the slice's share of B), a whole number
    of k-tiles each, at most 256."""
    tiles = math.ceil(shape.m / g.tile_m) * math.ceil(shape.n / g.tile_n)
    ktiles = math.ceil(shape.k / g.tile_k)
    rows = min(shape.m, g.tile_m)
    splits = math.ceil(shape.k / g.k_chunk) if g.k_chunk else math.ceil(g.waves * resident / tiles)
    splits = min(splits, max(1, shape.k // (4 * rows)))
    splits = max(1, min(splits, ktiles, SKINNY_MAX_SPLITS))
    per = math.ceil(ktiles / splits) * g.tile_k
    return math.ceil(shape.k / per)


def resident_clusters(cluster: int, ctas_per_sm: int = 1, sm_count: int = 132) -> int:
    """Clusters of ``cluster`` CTAs the H200 holds at once (what cudaOccupancyMaxActiveClusters
    answers on it): a cluster lives in one GPC, so fewer than SMs / size fit. Measured at one CTA
    per SM (sm90_ksplit development calls): 66 clusters of 2, 30 of 4; 8 assumed 14."""
    per_sm = max(1, ctas_per_sm)
    if cluster <= 1:
        return sm_count * per_sm
    measured = {2: 66, 4: 30, 8: 14}.get(cluster, sm_count // cluster)
    return measured * sm_count // 132 * per_sm


def _i(knobs: Mapping[str, str], name: str) -> int:
    try:
        return int(knobs[name])
    except (KeyError, ValueError):
        raise FamilyError(f"knob {name} must be an integer, got {knobs.get(name)!r}") from None


def _sm90_cutlass_t_geometry(knobs: Mapping[str, str]) -> Geometry:
    """The transposed family is sm90_cutlass's machinery and shared memory (A and B staged alike, a
    delayed-store epilogue, the same schedulers), its tiles counted in C's orientation; its
    SPLITK_FUSED slices are SPLITK_REDUCE's, added in the GEMM's own launch."""
    scheduler = knobs.get("SCHEDULER", "PERSISTENT")
    fused = scheduler == "SPLITK_FUSED"
    return replace(geometry(SM90, {**knobs, "SCHEDULER": "SPLITK_REDUCE" if fused else scheduler,
                                   "SPLITS": knobs.get("SPLITS", "1"),
                                   "EPILOGUE": "EPI_TMA_NOC", "EPI_TILE_N": "0"}), family="sm90_cutlass_t",
                   fused_reduce=fused)


def geometry(family: Family | str, knobs: Mapping[str, str]) -> Geometry:
    fam = get_family(family) if isinstance(family, str) else family
    acc = "f16" if knobs.get("ACC") == "ACC_F16" else "f32"
    accb = 2 if acc == "f16" else 4
    if fam.name == "sm90_cutlass_t":
        return _sm90_cutlass_t_geometry(knobs)
    if fam.name == "sm90_cutlass":
        tm, tn, tk = _i(knobs, "TILE_M"), _i(knobs, "TILE_N"), _i(knobs, "TILE_K")
        pingpong = knobs["SCHEDULE"] == "PINGPONG"
        basic = knobs["SCHEDULE"] == "BASIC"   # one consumer warpgroup, a CTA per tile
        stage_b = (tm * tk + tk * tn) * 2 + 32
        epi_rows = min(tm, 64 if pingpong or basic else 128)
        epi_cols = _i(knobs, "EPI_TILE_N") or 32
        # two subtiles of D in flight (EPI_TMA keeps 3-4 for C and D; the cost model was fitted
        # with this estimate)
        epi_b = 0 if knobs["EPILOGUE"] == "EPI_NOSMEM" else 2 * epi_rows * epi_cols * 2 + 1024
        stages = _i(knobs, "STAGES")
        if stages == 0:
            stages = max(0, (SMEM_PER_SM - epi_b - 1024) // stage_b)
        smem = stages * stage_b + epi_b + 1024
        consumer_threads = 128 if pingpong or basic else 256
        acc_vals = tm * tn // consumer_threads
        regs = 40 + acc_vals * accb // 4
        split = _i(knobs, "SPLITS") if knobs["SCHEDULER"] in ("SPLITK", "SPLITK_REDUCE") else 1
        # a persistent grid holds one CTA per SM; BASIC CTAs share an SM as shared memory allows
        cps = max(1, min(SMEM_PER_SM // max(smem, 1), 2)) if basic else 1
        return Geometry(fam.name, tm, tn, tk, 256 if basic else 384, smem, regs, cps, stages, split,
                        not basic, knobs["SCHEDULER"] == "STREAMK",
                        _i(knobs, "CLUSTER_M") * _i(knobs, "CLUSTER_N"), pingpong, acc,
                        knobs.get("PDL", "1") == "1" and knobs["SCHEDULER"] in ("PERSISTENT", "SPLITK_REDUCE"),
                        knobs["SCHEDULER"] == "SPLITK_REDUCE", knobs["EPILOGUE"],
                        {"RASTER_ALONG_M": "M", "RASTER_ALONG_N": "N"}.get(knobs["RASTER"], "H"),
                        _i(knobs, "SWIZZLE"), (_i(knobs, "CLUSTER_M"), _i(knobs, "CLUSTER_N")))
    if fam.name == "sm90_ksplit":
        tm, tn, tk, st = _i(knobs, "TILE_M"), _i(knobs, "TILE_N"), _i(knobs, "TILE_K"), _i(knobs, "STAGES")
        ck = _i(knobs, "CLUSTER_K")
        smem = max(st * (tm + tn) * tk * 2, tm * (tn + 8) * 4) + 16 * st + 1024
        threads = tm // 64 * 128 * int(knobs.get("WG_K", "1")) + 32
        regs = 40 + tm * tn // (tm // 64 * 128)
        cps = max(1, min(SMEM_PER_SM // smem, REGS_PER_SM // (threads * max(regs, 32)), 2048 // threads))
        return Geometry(fam.name, tm, tn, tk, threads, smem, regs, cps, st, ck, False, False, ck, False, acc,
                        knobs.get("PDL", "1") == "1", epilogue="REGS" if ck == 1 else "SMEM",
                        raster={"RASTER_ALONG_M": "M", "RASTER_ALONG_N": "N"}[knobs["RASTER"]],
                        groups=int(knobs.get("GROUPS", "1")))
    bm, bn, bk = _i(knobs, "BM"), _i(knobs, "BN"), _i(knobs, "BK")
    if fam.name == "skinny_splitk":
        return _skinny_geometry(knobs, acc, bm, bn, bk)
    if fam.name == "tiny_mma":  # two register-staged chunks in static shared memory, no split
        wm, wn = _i(knobs, "WARPS_M"), _i(knobs, "WARPS_N")
        threads = wm * wn * int(knobs.get("WARPS_K", "1")) * 32
        smem = 2 * (bm * (bk + 8) + bk * (bn + 8)) * 2
        mi, ni = max(1, bm // wm // 16), max(1, bn // wn // 8)
        staged = (-(-bm * bk // 8 // threads) + -(-bk * bn // 8 // threads)) * int(knobs.get("AHEAD", "1"))
        regs = min(255, 40 + mi * ni * (2 if acc == "f16" else 4) + 4 * staged + 2 * (mi * 4 + ni * 2))
        cps = max(1, min(SMEM_PER_SM // smem, REGS_PER_SM // (threads * max(regs, 32)), 2048 // threads, 32))
        stages = 1 + int(knobs.get("AHEAD", "1"))  # the chunks in flight plus the one being multiplied
        ck = int(knobs.get("CLUSTER_K", "1"))  # K slices of a tile, one per CTA of a cluster
        return Geometry(fam.name, bm, bn, bk, threads, smem, regs, cps, stages, ck, False, False, ck, False, acc,
                        knobs.get("PDL", "1") == "1",
                        epilogue="SMEM" if knobs.get("EPILOGUE", "EPI_REGS") == "EPI_SMEM" else "REGS")
    wm, wn, st = _i(knobs, "WARPS_M"), _i(knobs, "WARPS_N"), _i(knobs, "STAGES")
    threads = wm * wn * 32
    smem = max(st * (bm * bk + bk * bn) * 2, bm * (bn + 8) * 2)
    mi, ni = max(1, bm // wm // 16), max(1, bn // wn // 8)
    acc_regs = mi * ni * (2 if acc == "f16" else 4)
    regs = min(255, 48 + acc_regs + 2 * (mi * 4 + ni * 2))
    by_smem = SMEM_PER_SM // max(smem, 1)
    by_regs = REGS_PER_SM // (threads * max(regs, 32))
    cps = max(1, min(by_smem, by_regs, 2048 // threads, 32))
    ck = int(knobs.get("CLUSTER_K", "1"))
    if ck > 1:  # this CTA's fp32 slice of the tile stays in shared memory for the cluster's peers
        smem = max(smem, bm * bn * 4)
        by_smem = SMEM_PER_SM // max(smem, 1)
        cps = max(1, min(by_smem, by_regs, 2048 // threads, 32))
    return Geometry(fam.name, bm, bn, bk, threads, smem, regs, cps, st, ck if ck > 1 else _i(knobs, "SPLIT_K"),
                    False, False, ck, False, acc, knobs.get("PDL", "1") == "1", epilogue="SMEM")


def _skinny_geometry(knobs: Mapping[str, str], acc: str, bm: int, bn: int, bk: int) -> Geometry:
    """skinny_splitk: the cp.async ring (A's and B's stage, rows padded by 8 halfs) shares dynamic
    shared memory with the CTA's fp32 tile (rows padded by 4 floats), as in its .cu file."""
    wm, wn, st = _i(knobs, "WARPS_M"), _i(knobs, "WARPS_N"), _i(knobs, "STAGES")
    threads = wm * wn * _i(knobs, "WARPS_K") * 32
    smem = max(st * (bm * (bk + 8) + bk * (bn + 8)) * 2, bm * (bn + 4) * 4)
    mi, ni = max(1, bm // wm // 16), max(1, bn // wn // 8)
    regs = min(255, 40 + mi * ni * (2 if acc == "f16" else 4) + 2 * (mi * 4 + ni * 2))
    cps = max(1, min(SMEM_PER_SM // max(smem, 1), REGS_PER_SM // (threads * max(regs, 32)), 2048 // threads, 32))
    return Geometry("skinny_splitk", bm, bn, bk, threads, smem, regs, cps, st, 0, False, False, 1, False, acc,
                    False, epilogue="SMEM", k_chunk=_i(knobs, "KCHUNK"), waves=_i(knobs, "WAVES"))


def _skinny_problems(knobs: Mapping[str, str], g: Geometry) -> list[str]:
    """What skinny_splitk's static_asserts refuse, said before nvcc runs."""
    wm, wn, wk = _i(knobs, "WARPS_M"), _i(knobs, "WARPS_N"), _i(knobs, "WARPS_K")
    if g.tile_m % (wm * 16) or g.tile_n % (wn * 16):
        return ["BM/WARPS_M and BN/WARPS_N must be multiples of 16"]
    problems = []
    if wm * wn * wk > 16:
        problems.append("at most 16 warps per CTA")
    if (g.tile_m // wm // 16) * (g.tile_n // wn // 8) * 4 > 64:
        problems.append("warp tile too large (over 64 accumulators per thread): add warps")
    if (g.tile_k // 16) % wk:
        problems.append(f"BK / 16 = {g.tile_k // 16} k-steps do not split over WARPS_K {wk} warps")
    if g.smem_bytes + 16 > SMEM_PER_SM:   # (16 B: the static ticket flag beside the dynamic buffer)
        problems.append(f"shared memory {g.smem_bytes} B > {SMEM_PER_SM - 16} B: lower STAGES, BK or the tile")
    return problems


def _cutlass_resource_problems(g: Geometry) -> list[str]:
    """The limits both CUTLASS families share: the ring and the epilogue in shared memory, the
    accumulators in registers, the portable cluster size, 128-deep k-tiles on small tiles only."""
    problems = []
    if g.stages < 2 or g.smem_bytes > SMEM_PER_SM:
        problems.append(f"shared memory does not fit: {g.stages} stages of {g.tile_m}x{g.tile_n}x{g.tile_k}")
    if g.regs_per_thread > 232:
        problems.append(f"accumulators need about {g.regs_per_thread} registers per thread: use a smaller tile")
    if g.cluster > 8:
        problems.append(f"a cluster of {g.cluster} CTAs: at most 8 (the portable cluster size)")
    if g.tile_k == 128 and g.tile_m * g.tile_n > 128 * 128:
        problems.append("TILE_K 128 only with tiles up to 128x128")
    return problems


UNSAFE_SCHEDULERS = frozenset({"SPLITK"})
#: the CUTLASS schedulers that cut K into equal slices written as fp32 partial tiles, then added
SLICED_SCHEDULERS = ("SPLITK_REDUCE", "SPLITK_FUSED")
#: the schedulers whose SPLITS knob means something (the others ignore it)
SPLITTING_SCHEDULERS = ("SPLITK", *SLICED_SCHEDULERS)


def validate(family: Family | str, knobs: Mapping[str, str], *, allow_unsafe: bool = False) -> list[str]:
    """Problems with a full knob assignment ([] when it is legal and should compile).

    ``allow_unsafe`` admits the CUTLASS split-K scheduler, which compiles but hung once on the
    H200 under repeated calls (the `unsafe` list of catalog.toml); policies never pass it.
    """
    fam = get_family(family) if isinstance(family, str) else family
    problems: list[str] = []
    for k in fam.knobs:
        v = knobs.get(k.name)
        if v is None:
            problems.append(f"knob {k.name} is missing")
        elif v not in k.values:
            problems.append(f"{k.name}={v} is not legal: use one of {', '.join(k.values)}")
    if knobs.get("DTYPE", "DTYPE_F16") not in DTYPE_VALUES:
        problems.append(f"DTYPE={knobs['DTYPE']} is not legal: use one of {', '.join(DTYPE_VALUES)}")
    elif dtype_of_knobs(knobs) == "bf16" and knobs.get("ACC") == "ACC_F16":
        problems.append("DTYPE_BF16 accumulates in f32 only: ACC_F16 is an fp16 option (set ACC ACC_F32)")
    if problems:
        return problems
    g = geometry(fam, knobs)
    if fam.name == "sm90_cutlass":
        return _sm90_cutlass_problems(knobs, g, allow_unsafe)
    if fam.name == "sm90_cutlass_t":
        return _sm90_cutlass_t_problems(knobs, g)
    if fam.name == "sm90_ksplit":
        return _sm90_ksplit_problems(knobs, g)
    if fam.name == "skinny_splitk":
        return _skinny_problems(knobs, g)
    if fam.name == "tiny_mma":
        return _tiny_mma_problems(knobs, g)
    return _mma_problems(knobs, g)


def _sm90_cutlass_problems(knobs: Mapping[str, str], g: Geometry, allow_unsafe: bool) -> list[str]:
    """Problems of the CUTLASS sm90 kernel: schedule, scheduler and epilogue combinations that CUTLASS
    refuses or that hang, then its resources."""
    problems: list[str] = []
    basic = knobs["SCHEDULE"] == "BASIC"
    if basic and g.tile_m not in (64, 128):
        problems.append(f"BASIC needs TILE_M 64 or 128 (one consumer warpgroup), not {g.tile_m}")
    if basic and knobs["SCHEDULER"] not in ("PERSISTENT", "SPLITK_REDUCE"):
        problems.append("BASIC runs a CTA per tile: use SCHEDULER PERSISTENT (no tile loop) or SPLITK_REDUCE")
    if knobs["SCHEDULE"] == "COOPERATIVE" and g.tile_m < 128:
        problems.append("COOPERATIVE needs TILE_M >= 128 (two consumer warpgroups split M)")
    if knobs["SCHEDULE"] == "COOPERATIVE" and g.tile_m % 128:
        problems.append(f"COOPERATIVE needs a TILE_M that is a multiple of 128 (two warpgroups of 64-row WGMMAs), "
                        f"not {g.tile_m}: use PINGPONG")
    if knobs["SCHEDULER"] in ("STREAMK", "SPLITK") and g.pingpong:
        problems.append("STREAMK/SPLITK need SCHEDULE COOPERATIVE")
    if knobs["SCHEDULER"] in ("SPLITK", "SPLITK_REDUCE") and knobs["SPLITS"] == "1":
        problems.append(f"{knobs['SCHEDULER']} needs SPLITS > 1 (or 0 = automatic)")
    if knobs["SCHEDULER"] in UNSAFE_SCHEDULERS and knobs["SPLITS"] != "0" and not allow_unsafe:
        problems.append(f"SCHEDULER {knobs['SCHEDULER']} with fixed SPLITS hung once on the H200 under repeated calls: "
                        "use SPLITS 0 (one wave, no CTA waits on one not yet resident), PERSISTENT or STREAMK (see the unsafe list of catalog.toml)")
    epi_n = _i(knobs, "EPI_TILE_N")
    if epi_n and knobs["EPILOGUE"] == "EPI_NOSMEM":
        problems.append("EPI_TILE_N applies to the TMA epilogues only: use 0 with EPI_NOSMEM")
    if epi_n and g.tile_n % epi_n:
        problems.append(f"TILE_N {g.tile_n} is not a multiple of EPI_TILE_N {epi_n}")
    problems += _cutlass_resource_problems(g)
    return problems


def _sm90_cutlass_t_problems(knobs: Mapping[str, str], g: Geometry) -> list[str]:
    """Problems of the transposed CUTLASS sm90 kernel: which schedules hold which tile widths, then its
    resources."""
    problems: list[str] = []
    sched = knobs["SCHEDULE"]
    if sched in ("BASIC", "PINGPONG") and g.tile_n not in (64, 128):
        problems.append(f"{sched} needs TILE_N 64 or 128 (one consumer warpgroup holds the tile's columns), "
                        f"not {g.tile_n}")
    if sched == "COOPERATIVE" and g.tile_n % 128:
        problems.append(f"COOPERATIVE needs TILE_N 128 or 256 (two warpgroups split the columns), not {g.tile_n}")
    scheduler = knobs.get("SCHEDULER", "PERSISTENT")
    if scheduler in ("STREAMK", "SPLITK") and sched != "COOPERATIVE":
        problems.append(f"{scheduler} needs SCHEDULE COOPERATIVE (CUTLASS's stream-K kernels)")
    if scheduler in SPLITTING_SCHEDULERS and knobs.get("SPLITS") == "1":
        problems.append(f"{scheduler} with SPLITS 1 is PERSISTENT: use 0 or 2 and more")
    if scheduler == "SPLITK_FUSED" and sched != "BASIC":
        problems.append("SPLITK_FUSED needs SCHEDULE BASIC (the persistent schedules hand registers between "
                        "warpgroups, and the fused reduce runs in every thread after the GEMM)")
    problems += _cutlass_resource_problems(g)
    return problems


def _sm90_ksplit_problems(knobs: Mapping[str, str], g: Geometry) -> list[str]:
    """Problems of the cluster split-K kernel: shared memory, the cluster's share of rows and the consumer
    sets' stages."""
    problems: list[str] = []
    if g.smem_bytes > SMEM_PER_SM:
        problems.append(f"shared memory {g.smem_bytes} B > {SMEM_PER_SM} B: lower STAGES or the tile")
    if g.tile_m % g.split_k:
        problems.append("each CTA of the cluster reduces TILE_M / CLUSTER_K rows: CLUSTER_K must divide TILE_M")
    wgk = int(knobs.get("WG_K", "1"))
    if g.stages <= wgk or g.stages % wgk:
        problems.append(f"WG_K {wgk} sets of consumers need STAGES > WG_K (each holds a stage while it waits for "
                        "its next) and a multiple of WG_K (each stage serves one set)")
    return problems


def _tiny_mma_problems(knobs: Mapping[str, str], g: Geometry) -> list[str]:
    """Problems of the small-tile mma.sync kernel: warp tiling, static shared memory, staged loads, the K
    warps and cluster shares."""
    problems: list[str] = []
    wm, wn = int(knobs["WARPS_M"]), int(knobs["WARPS_N"])
    if g.tile_m % (wm * 16) or g.tile_n % (wn * 16):
        problems.append("BM/WARPS_M and BN/WARPS_N must be multiples of 16")
        return problems
    if g.smem_bytes > 48 * 1024:
        problems.append(f"two {g.tile_m}x{g.tile_k} + {g.tile_k}x{g.tile_n} buffers need {g.smem_bytes} B "
                        "of static shared memory (> 48 KB): lower BK or the tile")
    per = -(-g.tile_m * g.tile_k // 8 // g.threads) + -(-g.tile_k * g.tile_n // 8 // g.threads)
    per *= int(knobs.get("AHEAD", "1"))
    if per > 16:
        problems.append(f"{per} staged 16-byte loads per thread (> 16): add warps, lower BK or AHEAD")
    if (g.tile_m // wm // 16) * (g.tile_n // wn // 8) * 4 > 64:
        problems.append("warp tile too large (over 64 accumulators per thread): add warps")
    wk = int(knobs["WARPS_K"])
    if (g.tile_k // 16) % wk:
        problems.append(f"BK / 16 = {g.tile_k // 16} k-steps do not split over WARPS_K {wk} warps")
    if wk > 1 and (wk - 1) * g.tile_m * (g.tile_n + 8) * 4 > g.smem_bytes:  # padded fp32 rows
        problems.append("the K warps' fp32 partial tiles do not fit in the two chunk buffers: lower WARPS_K")
    if knobs.get("EPILOGUE", "EPI_REGS") == "EPI_SMEM":
        if wk > 1 or int(knobs.get("CLUSTER_K", "1")) > 1:
            problems.append("EPI_SMEM stores a tile one CTA computed whole: WARPS_K 1 and CLUSTER_K 1 only")
        if g.tile_m * (g.tile_n + 8) * 2 > g.smem_bytes:  # padded fp16 rows
            problems.append("EPI_SMEM: the fp16 output tile does not fit in the two chunk buffers")
    ck = int(knobs.get("CLUSTER_K", "1"))
    if ck > 1 and wk * g.tile_m * (g.tile_n + 8) * 4 > g.smem_bytes:
        problems.append("with CLUSTER_K every K warp's fp32 partial tile stays in the chunk buffers: they do "
                        "not fit, lower WARPS_K")
    if (g.tile_m * g.tile_n // 4) % ck:
        problems.append("the tile must split into CLUSTER_K equal shares of 4 outputs")
    return problems


def _mma_problems(knobs: Mapping[str, str], g: Geometry) -> list[str]:
    """Problems of the pipelined mma.sync families: warp tiling, shared memory, accumulators per thread,
    split-K against cluster slices."""
    problems: list[str] = []
    wm, wn = int(knobs["WARPS_M"]), int(knobs["WARPS_N"])
    if g.tile_m % (wm * 16) or g.tile_n % (wn * 16):
        problems.append("BM/WARPS_M and BN/WARPS_N must be multiples of 16")
    if g.smem_bytes > SMEM_PER_SM:
        problems.append(f"shared memory {g.smem_bytes} B > {SMEM_PER_SM} B: lower STAGES or the tile")
    mi, ni = g.tile_m // wm // 16, g.tile_n // wn // 8
    if mi * ni * 4 > 128:
        problems.append("warp tile too large (over 128 accumulators per thread): add warps")
    if wm * wn > 16:
        problems.append("at most 16 warps per CTA")
    if knobs.get("CLUSTER_K", "1") != "1" and knobs["SPLIT_K"] != "1":
        problems.append("CLUSTER_K slices replace SPLIT_K: use SPLIT_K 1 with CLUSTER_K > 1")
    if (g.tile_m * g.tile_n // 4) % int(knobs.get("CLUSTER_K", "1")):
        problems.append("the tile must split into CLUSTER_K equal shares of 4 outputs")
    return problems


#: the most elements of any one operand a family is given: the kernels index rows and tiles with
#: 32-bit ints in places, so a larger operand is refused before it runs rather than risked
MAX_OPERAND_ELEMENTS = (1 << 31) - 1


def applicable(family: Family | str, shape: Shape, arch: str | int | None) -> bool:
    """Whether ``family`` can run ``shape`` on ``arch`` (``sm_90a``, ``90``, ``sm_80``...).

    Every family handles any M >= 1 and N, K that are multiples of 8 but not of its tile (rows and
    columns past the edge are predicated off, or zero-filled by TMA). Refused here: N or K not a
    multiple of 8 (16-byte rows for the vector loads and TMA; each family's ``l2_hgemm`` also
    returns status 2 for them) and operands over :data:`MAX_OPERAND_ELEMENTS`."""
    fam = get_family(family) if isinstance(family, str) else family
    if arch is not None and not fam.runs_on(cc_of(arch)):
        return False
    if max(shape.m * shape.k, shape.k * shape.n, shape.m * shape.n) > MAX_OPERAND_ELEMENTS:
        return False
    if fam.name == "skinny_splitk" and shape.m > SKINNY_MAX_M:
        return False  # decode rows only: its l2_hgemm refuses more
    return shape.k % 8 == 0 and shape.n % 8 == 0


def cc_of(arch: str | int) -> int:
    """Compute capability as an int from ``sm_90a`` / ``compute_90`` / ``90`` / ``9.0``."""
    if isinstance(arch, int):
        return arch
    m = re.search(r"(\d+)\.(\d)", str(arch))
    if m:
        return int(m.group(1)) * 10 + int(m.group(2))
    m = re.search(r"(\d+)", str(arch))
    if not m:
        raise FamilyError(f"cannot read an architecture from {arch!r}: use e.g. sm_90a or sm_80")
    return int(m.group(1))


def families_for(arch: str | int | None) -> list[Family]:
    if arch is None:
        return families()
    cc = cc_of(arch)
    return [f for f in families() if f.runs_on(cc)]


def build_arch_for(family: Family | str, arch: str | int | None) -> str:
    """The nvcc arch to build ``family`` for on a GPU of ``arch`` (sm_90a needs the 'a')."""
    fam = get_family(family) if isinstance(family, str) else family
    if arch is None:
        return fam.build_arch
    cc = cc_of(arch)
    if fam.name in ("sm90_cutlass", "sm90_ksplit", "sm90_cutlass_t"):
        return "sm_90a"
    return "sm_90a" if cc == 90 else f"sm_{cc}"


_SCHEDULE_TAGS = {"PINGPONG": "pp", "COOPERATIVE": "coop", "BASIC": "ws"}


def config_name(family: Family | str, knobs: Mapping[str, str]) -> str:
    """A short stable name for a configuration, e.g. ``sm80_mma-128x128x32-w2x2-s4``."""
    fam = get_family(family) if isinstance(family, str) else family
    k = {**fam.defaults(), **knobs}
    acc = (("-f16" if k.get("ACC") == "ACC_F16" else "") + ("-nopdl" if k.get("PDL") == "0" else "")
           + ("-bf16" if dtype_of_knobs(k) == "bf16" else ""))
    if fam.name == "sm90_cutlass":
        sched = {"PERSISTENT": "p", "STREAMK": "sk", "SPLITK": f"split{k['SPLITS']}",
                 "SPLITK_REDUCE": f"splitr{k['SPLITS']}"}[k["SCHEDULER"]]
        extra = ""
        if k["RASTER"] != "RASTER_HEURISTIC":
            extra += "-r" + k["RASTER"][-1].lower()
        if k["SWIZZLE"] != "1":
            extra += f"-sw{k['SWIZZLE']}"
        if k["EPILOGUE"] == "EPI_NOSMEM":
            extra += "-nosmem"
        elif k["EPILOGUE"] == "EPI_TMA_NOC":
            extra += "-noc"
        if k.get("EPI_TILE_N", "0") != "0":
            extra += f"-e{k['EPI_TILE_N']}"
        return (f"sm90-{k['TILE_M']}x{k['TILE_N']}x{k['TILE_K']}-c{k['CLUSTER_M']}x{k['CLUSTER_N']}-"
                f"{_SCHEDULE_TAGS[k['SCHEDULE']]}-{sched}-st{k['STAGES']}{extra}{acc}")
    if fam.name == "sm90_cutlass_t":
        extra = {"PERSISTENT": "", "STREAMK": "-sk", "SPLITK": f"-split{k.get('SPLITS', '1')}",
                 "SPLITK_REDUCE": f"-splitr{k.get('SPLITS', '1')}",
                 "SPLITK_FUSED": f"-splitf{k.get('SPLITS', '1')}"}[k.get("SCHEDULER", "PERSISTENT")]
        extra += ("-r" + k["RASTER"][-1].lower() if k["RASTER"] != "RASTER_HEURISTIC" else "")
        extra += f"-sw{k['SWIZZLE']}" if k["SWIZZLE"] != "1" else ""
        return (f"sm90t-{k['TILE_M']}x{k['TILE_N']}x{k['TILE_K']}-c{k['CLUSTER_M']}x{k['CLUSTER_N']}-"
                f"{_SCHEDULE_TAGS[k['SCHEDULE']]}-st{k['STAGES']}{extra}{acc}")
    if fam.name == "sm90_ksplit":
        extra = ("-rn" if k["RASTER"] == "RASTER_ALONG_N" else "") + ("-d0" if k["MMA_DEPTH"] == "0" else "")
        extra += f"-wk{k['WG_K']}" if k.get("WG_K", "1") != "1" else ""
        extra += "-rw" if k.get("RELEASE", "RELEASE_BY_THREAD") == "RELEASE_BY_WARP" else ""
        if k.get("GROUPS", "1") != "1":
            extra = ("-ga" if k["GROUPS"] == "0" else f"-g{k['GROUPS']}") + extra
        return f"ksp-{k['TILE_M']}x{k['TILE_N']}x{k['TILE_K']}-s{k['STAGES']}-ck{k['CLUSTER_K']}{extra}{acc}"
    if fam.name == "skinny_splitk":
        kc = f"kc{k['KCHUNK']}" if k["KCHUNK"] != "0" else f"wv{k['WAVES']}"
        return (f"skinny-{k['BM']}x{k['BN']}x{k['BK']}-w{k['WARPS_M']}x{k['WARPS_N']}x{k['WARPS_K']}"
                f"-st{k['STAGES']}-{kc}{acc}")
    if fam.name == "tiny_mma":
        wk = f"x{k['WARPS_K']}" if k.get("WARPS_K", "1") != "1" else ""
        ahead = f"-a{k['AHEAD']}" if k.get("AHEAD", "1") != "1" else ""
        ck = f"-ck{k['CLUSTER_K']}" if k.get("CLUSTER_K", "1") != "1" else ""
        ck += "-es" if k.get("EPILOGUE", "EPI_REGS") == "EPI_SMEM" else ""
        return f"tiny-{k['BM']}x{k['BN']}x{k['BK']}-w{k['WARPS_M']}x{k['WARPS_N']}{wk}{ahead}{ck}{acc}"
    prefix = "sm80" if fam.name == "sm80_mma" else "small"
    ck = f"-ck{k['CLUSTER_K']}" if k.get("CLUSTER_K", "1") != "1" else ""
    return (f"{prefix}-{k['BM']}x{k['BN']}x{k['BK']}-w{k['WARPS_M']}x{k['WARPS_N']}-st{k['STAGES']}"
            f"-sw{k['SWIZZLE']}-sk{k['SPLIT_K']}{ck}{acc}")


# ---------------------------------------------------------------- knob shorthands


# Positional shorthands for one configuration's knobs, for tests and probes that name a
# configuration in code; the catalog itself is data (catalog.toml) and uses none of them.

def _sm90(tm: int, tn: int, tk: int = 64, cm: int = 1, cn: int = 1, sched: str = "COOPERATIVE", stages: int = 0,
          scheduler: str = "PERSISTENT", splits: int = 1, raster: str = "RASTER_HEURISTIC", swizzle: int = 1,
          epi: str = "EPI_TMA", epi_n: int = 0, pdl: int = 1) -> dict[str, str]:
    return {"PDL": str(pdl), "TILE_M": str(tm), "TILE_N": str(tn), "TILE_K": str(tk), "CLUSTER_M": str(cm),
            "CLUSTER_N": str(cn), "SCHEDULE": sched, "STAGES": str(stages), "SCHEDULER": scheduler,
            "SPLITS": str(splits), "RASTER": raster, "SWIZZLE": str(swizzle), "EPILOGUE": epi,
            "EPI_TILE_N": str(epi_n)}


def _mma(bm: int, bn: int, bk: int, wm: int, wn: int, st: int, sw: int, sk: int, pdl: int = 1,
         ck: int = 1) -> dict[str, str]:
    k = {"PDL": str(pdl), "BM": str(bm), "BN": str(bn), "BK": str(bk), "WARPS_M": str(wm), "WARPS_N": str(wn),
         "STAGES": str(st), "SWIZZLE": str(sw), "SPLIT_K": str(sk)}
    if ck != 1:  # small_splitk only
        k["CLUSTER_K"] = str(ck)
    return k


def _ksp(tm: int, tn: int, st: int, ck: int, pdl: int = 1, depth: int = 1, raster: str = "RASTER_ALONG_M",
         groups: int = 1, wgk: int = 1, release: str = "RELEASE_BY_THREAD") -> dict[str, str]:
    k = {"TILE_M": str(tm), "TILE_N": str(tn), "TILE_K": "64", "STAGES": str(st), "CLUSTER_K": str(ck),
         "RASTER": raster, "PDL": str(pdl), "MMA_DEPTH": str(depth)}
    if groups != 1:
        k["GROUPS"] = str(groups)
    if wgk != 1:
        k["WG_K"] = str(wgk)
    if release != "RELEASE_BY_THREAD":
        k["RELEASE"] = release
    return k


def _tiny(bm: int, bn: int, bk: int, wm: int, wn: int, wk: int = 1, pdl: int = 1, ahead: int = 1,
          ck: int = 1) -> dict[str, str]:
    return {"PDL": str(pdl), "BM": str(bm), "BN": str(bn), "BK": str(bk), "WARPS_M": str(wm), "WARPS_N": str(wn),
            "WARPS_K": str(wk), "AHEAD": str(ahead), "CLUSTER_K": str(ck)}


# ---------------------------------------------------------------- twins and siblings


EPILOGUE_KNOBS = ("EPILOGUE", "EPI_TILE_N")

#: a family and some of its (knob, value) pairs: what two configurations are compared by
ConfigKey = tuple[str, tuple[tuple[str, str], ...]]


def epilogue_twin(knobs: Mapping[str, str]) -> dict[str, str] | None:
    """The EPI_TMA_NOC twin of an EPI_TMA sm90 configuration (None for other epilogues): 64-column
    subtiles for persistent fp16-output kernels, CUTLASS's choice when the output is the fp32
    slices of SPLITK_REDUCE (64 fp32 columns double the subtile's shared memory) or when a
    stream-K / split-K fixup shares the epilogue."""
    if knobs.get("EPILOGUE", "EPI_TMA") != "EPI_TMA" or knobs.get("SCHEDULER") == "SPLITK":
        return None   # CUTLASS's split-K never wins a shape: no twin of it is worth a build
    wide = knobs.get("SCHEDULER", "PERSISTENT") == "PERSISTENT" and int(knobs["TILE_N"]) % 64 == 0
    return {**knobs, "EPILOGUE": "EPI_TMA_NOC", "EPI_TILE_N": "64" if wide else "0"}


Entry = tuple[str, dict[str, str]]


def _with_twins(entries: Sequence[Entry], twin_of: Callable[[str, dict[str, str]], dict[str, str] | None]) -> list[Entry]:
    """``entries`` plus ``twin_of`` each of them (in their order), where it has one and the list
    does not hold it yet."""
    def key(fam: str, knobs: dict[str, str]) -> ConfigKey:
        return fam, tuple(sorted(knobs.items()))

    out = list(entries)
    have = {key(f, k) for f, k in out}
    for fam, knobs in entries:
        twin = twin_of(fam, knobs)
        if twin is not None and key(fam, twin) not in have:
            out.append((fam, twin))
            have.add(key(fam, twin))
    return out


def _epilogue_twin_of(fam: str, knobs: dict[str, str]) -> dict[str, str] | None:
    # the no-PDL builds are there to compare launches: they get no epilogue twins
    return epilogue_twin(knobs) if fam == "sm90_cutlass" and knobs.get("PDL") != "0" else None


def no_pdl_twin(fam: str, knobs: Mapping[str, str]) -> dict[str, str] | None:
    """The twin of a configuration launched with programmatic dependent launch that is launched
    without it (None when ``knobs`` has no PDL knob or it is off already).

    Why every f32 catalog entry has one: timed per call (each call after an unrelated kernel, the
    headline), the no-PDL launch of the same kernel was faster on 91 % of the 2,527 such pairs of
    the grid's recorded per-call timings (`tests/fixtures/h200_timings/percall_f32_grid.json`:
    small CUTLASS shapes 6.9 %, mid 3.0 %, big even); back to back, PDL lets a call start while the
    previous one drains, so both stay in the catalog and the timing mode decides
    (:func:`per_call_pool`)."""
    if "PDL" not in get_family(fam).knob_names or knobs.get("PDL", "1") == "0":
        return None
    if fam == "sm90_cutlass" and knobs.get("SCHEDULER") not in ("PERSISTENT", "SPLITK_REDUCE"):
        return None   # stream-K and CUTLASS's split-K launch without PDL whatever the knob says
    return {**knobs, "PDL": "0"}


def per_call_pool(configs: Sequence["Config"]) -> list["Config"]:
    """``configs`` less each one launched with PDL whose no-PDL twin is among them: what a search
    that times per call picks from (see :func:`no_pdl_twin`). Order is kept."""
    have = set(configs)
    out = []
    for c in configs:
        twin = no_pdl_twin(c.family, c.knob_dict)
        if twin is not None and Config.of(c.family, twin) in have:
            continue
        out.append(c)
    return out


def sans_epilogue(cfg: "Config") -> ConfigKey:
    """``cfg`` up to its epilogue knobs: configurations with equal keys are epilogue variants
    of one kernel, which the cost model barely tells apart (the pick times them together, the
    search counts them once per step)."""
    return (cfg.family, tuple((k, v) for k, v in cfg.knobs if k not in EPILOGUE_KNOBS))


def differing_only_in(cfg: "Config", pool: Sequence["Config"], knobs: Sequence[str]) -> list["Config"]:
    """The configurations of ``pool`` other than ``cfg`` that equal it outside ``knobs``."""
    skip = tuple(knobs)
    key = _stripped(cfg, skip)
    return [c for c in pool if c != cfg and _stripped(c, skip) == key]


@lru_cache(maxsize=65536)
def _stripped(cfg: "Config", knobs: tuple[str, ...]) -> ConfigKey:
    """``cfg`` without ``knobs`` (memoised: the pick compares every catalog entry with each chosen one)."""
    return (cfg.family, tuple((k, v) for k, v in cfg.knobs if k not in knobs))


def launch_twins(cfg: "Config", pool: Sequence["Config"]) -> list["Config"]:
    """The configurations of ``pool`` that differ from ``cfg`` only in PDL: the model prices PDL
    as hidden launch latency, but on long multi-wave shapes the early dependent launch costs
    more than it hides, so the pick times both."""
    return differing_only_in(cfg, pool, ("PDL",))


def epilogue_siblings(cfg: "Config", pool: Sequence["Config"]) -> list["Config"]:
    """The configurations of ``pool`` that differ from ``cfg`` only in the epilogue knobs: the
    NOC twin is much faster on store-bound shapes and can be slower elsewhere."""
    return differing_only_in(cfg, pool, EPILOGUE_KNOBS)


@dataclass(frozen=True)
class Config:
    """One concrete configuration: family + full knob assignment."""

    family: str
    knobs: tuple[tuple[str, str], ...]

    @property
    def knob_dict(self) -> dict[str, str]:
        return dict(self.knobs)

    @property
    def name(self) -> str:
        return config_name(self.family, self.knob_dict)

    @property
    def acc(self) -> str:
        return "f16" if self.knob_dict.get("ACC") == "ACC_F16" else "f32"

    @property
    def dtype(self) -> str:
        """``fp16`` or ``bf16``, the element type of A, B and C."""
        return dtype_of_knobs(self.knob_dict)

    def source(self) -> str:
        fam = get_family(self.family)
        changes = {k: v for k, v in self.knobs if fam.defaults().get(k) != v}
        return render(fam, changes)

    def geometry(self) -> Geometry:
        return geometry(self.family, self.knob_dict)

    @staticmethod
    def of(family: str, knobs: Mapping[str, str]) -> "Config":
        fam = get_family(family)
        full = {**fam.defaults(), **{k: str(v) for k, v in knobs.items()}}
        # DTYPE is listed only where it is bf16, so an fp16 configuration is the one it always was
        bf16 = (("DTYPE", "DTYPE_BF16"),) if dtype_of_knobs(full) == "bf16" else ()
        return Config(fam.name, tuple((k.name, full[k.name]) for k in fam.knobs) + bf16)

    @staticmethod
    def from_source(source: str) -> "Config | None":
        fam = family_of(source)
        if fam is None:
            return None
        knobs = parse_knobs(source)
        if set(fam.knob_names) - set(knobs):
            return None
        return Config.of(fam.name, knobs)


# ---------------------------------------------------------------- the prebuilt catalog


#: The configurations a sweep compiles once and times on every shape, as data (see its head).
CATALOG_FILE = PACKAGE_DIR / "catalog.toml"


def _entry(path: Path, group: str, i: int, raw: object, defaults: Mapping[str, Mapping[str, object]]) -> Entry:
    """One catalog entry as (family, knobs as strings): the family's entry defaults under the
    knobs the entry gives. Refuses what would not name one whole configuration."""
    where = f"{path.name}: {group} entry {i + 1}"
    if not isinstance(raw, dict) or not isinstance(raw.get("family"), str):
        raise FamilyError(f"{where} names no family")
    fam = get_family(raw["family"])
    knobs = {k: str(v) for k, v in {**defaults.get(fam.name, {}), **raw}.items() if k != "family"}
    unknown = sorted(set(knobs) - set(fam.knob_names) | ({"ACC"} & set(knobs)))
    if unknown:
        raise FamilyError(f"{where}: {fam.name} takes no knob {', '.join(unknown)} here (ACC comes from catalog())")
    missing = [k for k in fam.knob_names if k != "ACC" and k not in knobs]
    if missing:
        raise FamilyError(f"{where}: {fam.name} needs {', '.join(missing)}")
    return fam.name, knobs


def load_catalog_file(path: Path = CATALOG_FILE) -> dict[str, list[Entry]]:
    """The entry lists of a catalog file, twins added: ``{"f32": ..., "f16": ..., "bf16": ..., "unsafe": ...}``
    (``bf16``: the configurations built with bf16 elements, all accumulating in f32)."""
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise FamilyError(f"{path.name}: cannot read the catalog: {e}") from None
    defaults = doc.get("entry_defaults", {})
    groups = {g: [_entry(path, g, i, raw, defaults) for i, raw in enumerate(doc.get("catalog", {}).get(g, []))]
              for g in ("f32", "f16", "bf16", "unsafe")}
    if "twins" in doc:
        raise FamilyError(f"{path.name}: [twins] is no longer read: every f32 entry launched with PDL gets "
                          "its no-PDL twin (see the file's head)")
    for g in ("f32", "f16", "bf16"):
        groups[g] = _with_twins(groups[g], _epilogue_twin_of)
    for g in ("f32", "f16", "bf16"):
        groups[g] = _with_twins(groups[g], no_pdl_twin)
    return groups


@lru_cache(maxsize=1)
def _catalog_entries() -> dict[str, list[Entry]]:
    return load_catalog_file()


def _configs(entries: Sequence[Entry], acc: str, arch: str | int | None, dtype: str = "fp16") -> list[Config]:
    out = []
    element = {"DTYPE": "DTYPE_BF16"} if dtype == "bf16" else {}
    for fam, knobs in entries:
        if arch is not None and not get_family(fam).runs_on(cc_of(arch)):
            continue
        if arch is not None and knobs.get("CLUSTER_K", "1") != "1" and cc_of(arch) < 90:
            continue  # thread-block clusters: sm_90 and later
        out.append(Config.of(fam, {**knobs, "ACC": acc_knob(acc), **element}))
    return out


def catalog(acc: str = "f32", arch: str | int | None = None, dtype: str = "fp16") -> list[Config]:
    """The prebuilt configurations for ``acc`` and element type ``dtype`` that run on ``arch``
    (all when arch is None). bf16 accumulates in f32 only: ``acc`` f16 with bf16 is refused."""
    dtype_knob(dtype)
    if dtype == "bf16" and acc == "f16":
        raise FamilyError("bf16 accumulates in f32 only: f16 accumulation is an fp16 option")
    return list(_catalog("f16" if acc == "f16" else "f32", arch, dtype))


@lru_cache(maxsize=64)
def _catalog(acc: str, arch: str | int | None, dtype: str) -> tuple[Config, ...]:
    # memoised like the entries it reads: a sweep asks for the catalog twice per shape
    group = "bf16" if dtype == "bf16" else acc
    return tuple(_configs(_catalog_entries()[group], acc, arch, dtype))


def unsafe_catalog(acc: str = "f32") -> list[Config]:
    """The configurations kept out of every catalog because ``validate`` refuses them without
    ``allow_unsafe`` (see catalog.toml): for probes of the schedulers they use."""
    return _configs(_catalog_entries()["unsafe"], acc, None)
