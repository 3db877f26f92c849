"""The C/C++ side of an export: one shared library that dispatches by shape.

Why it is built this way:

* Every exported kernel is its own translation unit defining ``l2_hgemm``.
  Each is compiled to an object with ``-Dl2_hgemm=l2_hgemm_M_N_K`` so the entry
  points get distinct names.
* Kernels written independently reuse names (every seed of a family has a
  ``__global__ void hgemm_...`` with different macro values).  Linked as-is that
  is either a duplicate-symbol error or, for templates and inline functions, a
  silent ODR merge where one shape would launch another shape's code.  So every
  other symbol an object *defines* is renamed with a per-kernel suffix
  (``objcopy --redefine-syms``) before linking; device code is per object
  (whole-program nvcc, no ``-rdc``), so nothing on the GPU side depends on
  those host names.
* One dispatcher TU (``src/l2hgemm_dispatch.cu``) holds a sorted table
  ``{M, N, K, fn}``; ``fn == NULL`` marks a shape where a library was faster
  than the kernel (manifest ``"fallback"``), and any shape not in the table,
  or a kernel returning non-zero, goes to the fallback ``l2hgemm_fallback``.
* The fallback is cuBLASLt (fp16 in/out, fp32 compute) with the fastest of up
  to 32 heuristic algorithms, timed on the caller's stream the first time a
  shape is seen.  A plain cuBLAS call would be the heuristic's pick, and the
  export bench compares against *autotuned* cuBLASLt: on the shapes where that
  wins, a heuristic fallback would make the library lose.  Timing needs events
  and a synchronisation, which a CUDA-graph capture forbids, so a captured
  call uses the cached winner or heuristic #1.  ``cublasGemmEx`` is the last
  resort; ``L2HGEMM_FALLBACK`` selects a simpler path for comparisons.  The
  same C++ (``templates/fallback.cu``) is built alone for :mod:`l2tui.export.runtime`.
* A linker version script exports only the API (``l2hgemm*`` and the
  ``l2_hgemm_M_N_K`` entries), so the static CUDA runtime and the renamed
  helpers stay private.

The C++, CMake and shell text is in ``templates/`` (package data), to be read and
edited as the languages it is; this module only fills in the values, every one
checked first (:mod:`l2tui.export.values`).
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence

from harness.errors import HarnessError, ToolMissing

from .manifest import ENTRY_POINTS, check_pin, kernel_name, manifest_dtype, safe_label, symbol_name
from .values import sh_word

LIB_FILE = "lib/libl2hgemm.so"
HEADER_FILE = "include/l2hgemm.h"
DISPATCH_FILE = "src/l2hgemm_dispatch.cu"
EXPORTS_FILE = "src/l2hgemm.map"
CMAKE_FILE = "l2hgemm.cmake"
CMAKE_EXAMPLE = "CMakeLists.txt"
BUILD_SCRIPT = "build.sh"
TABLE_BEGIN = "// l2hgemm-table begin"
TABLE_END = "// l2hgemm-table end"
FALLBACK_SYMBOL = "l2hgemm_fallback"
#: the fallback with the export's measured choice per shape (what l2hgemm runs on its fallback routes)
PINNED_FALLBACK_SYMBOL = "l2hgemm_fallback_pinned"
#: environment variable the generated C reads once per process (and l2tui.export.runtime mirrors)
FALLBACK_ENV = "L2HGEMM_FALLBACK"
#: its values, in the order of ``l2hgemm_fallback_mode()``'s return codes; the first is the default
FALLBACK_MODES = ("cublaslt-autotune", "cublaslt-heuristic", "cublas")
#: libraries the combined library and the fallback link
CUBLAS_LIBS = ("-lcublas", "-lcublasLt")

#: flags a session may carry into a build (anything else is refused: a session is data, not a script)
_FLAG_OK = re.compile(
    r"^(-D[A-Za-z_][A-Za-z0-9_]*(=[A-Za-z0-9_.+\-]*)?|-U[A-Za-z_][A-Za-z0-9_]*|-O[0-3]|-std=c\+\+(17|20)"
    r"|--?use_fast_math|--expt-relaxed-constexpr|--expt-extended-lambda|-lineinfo"
    r"|-Xptxas=-?-?[A-Za-z0-9_=,.\-]+|--?maxrregcount=\d+|--?ftz=(true|false)|--?prec-div=(true|false)"
    r"|--?prec-sqrt=(true|false)|--?fmad=(true|false)|-lcublas|-lcublasLt|--extra-device-vectorization)$"
)


#: architecture flags build.sh may carry (what :func:`l2tui.export.values.gencode` makes)
_GENCODE_OK = re.compile(r"^-gencode=arch=compute_[0-9]{2,3}[af]?,code=sm_[0-9]{2,3}[af]?$")

#: machine-specific search paths a session may have recorded; the export supplies its own
_FLAG_DROP = re.compile(r"^(-I|-L|-Xlinker=-rpath=|-Xlinker=-rpath,)")


def fallback_mode(environ: Mapping[str, str] | None = None) -> str:
    """The fallback ``L2HGEMM_FALLBACK`` selects, parsed like the generated C does.

    Unset or empty means the default (autotuned cuBLASLt); an unknown value warns
    once per call site and falls back to the default too, rather than failing a
    program over a tuning knob.
    """
    value = (os.environ if environ is None else environ).get(FALLBACK_ENV, "")
    if value == "":
        return FALLBACK_MODES[0]
    if value not in FALLBACK_MODES:
        warnings.warn(f"{FALLBACK_ENV}={value[:64]} is not one of {', '.join(FALLBACK_MODES)}; "
                      f"using {FALLBACK_MODES[0]}", RuntimeWarning, stacklevel=2)
        return FALLBACK_MODES[0]
    return value


def check_flags(flags: Sequence[str], where: str) -> list[str]:
    """The kernel's nvcc flags, refusing any that could escape the build (outputs, plugins, includes).

    Include/library search paths recorded on the machine that ran the session are
    dropped: the build adds the paths of the machine it runs on.
    """
    out = []
    for f in flags:
        if isinstance(f, str) and _FLAG_DROP.match(f):
            continue
        if not isinstance(f, str) or not _FLAG_OK.match(f):
            raise HarnessError(f"{where}: nvcc flag {f!r} is not allowed in an export; remove it from the kernel's flags")
        out.append(f)
    return out


#: the C fallback's pin kinds (``l2fb::kPinNone``, ``kPinLt``, ``kPinGemmEx``)
PIN_KINDS = {None: 0, "cublaslt": 1, "cublas": 2}


@dataclass
class TableEntry:
    m: int
    n: int
    k: int
    symbol: str | None  # None: the fallback runs this shape
    note: str
    pin: tuple[int, int, int, int, int] = (0, 0, 0, 0, 0)  # l2fb::Pin: kind, index, count, requested, version


def pin_values(pin: dict | None, where: str) -> tuple[int, int, int, int, int]:
    """A manifest's ``fallback_pin`` as the C initialiser's integers (checked again: they go into C)."""
    check_pin(pin, where)
    if pin is None:
        return (0, 0, 0, 0, 0)
    if pin["library"] == "cublas":
        return (PIN_KINDS["cublas"], 0, 0, 0, 0)
    return (PIN_KINDS["cublaslt"], pin["index"], pin["count"], pin["requested"], pin["cublaslt_version"])


#: the CUDA data type the C fallback's cuBLAS calls use for A, B and C, by the export's element type
FALLBACK_CUDA_TYPES = {"fp16": "CUDA_R_16F", "bf16": "CUDA_R_16BF"}


def fallback_source(dtype: str) -> str:
    """The C fallback's text for an export of ``dtype``: the template with its element type set
    (``L2FB_CUDA_TYPE``), so a bf16 library's fallback reads and writes bf16 as its kernels do."""
    return f"#define L2FB_CUDA_TYPE {FALLBACK_CUDA_TYPES[dtype]}\n" + _template("fallback.cu")


def entries_from_manifest(manifest: dict) -> list[TableEntry]:
    out = []
    for e in manifest["kernels"]:
        m, n, k = e["shape"]
        pin = pin_values(e.get("fallback_pin"), f"export entry {kernel_name(m, n, k)}")
        if e.get("fallback"):
            out.append(TableEntry(m, n, k, None, "fallback: a library was measured faster than the kernel", pin))
        else:
            out.append(TableEntry(m, n, k, e["symbol"], f"{e['file']} sha256={e['sha256'][:16]}", pin))
    out.sort(key=lambda t: (t.m, t.n, t.k))
    return out


# --------------------------------------------------------------------------- generated text

#: the export's C++, CMake and shell text (package data); ``@NAME@`` marks where a value goes
TEMPLATES_DIR = Path(__file__).resolve().parent / "templates"

_PLACEHOLDER = re.compile(r"^@([A-Z_]+)@\n|@([A-Z_]+)@", re.MULTILINE)


@functools.cache
def _template(name: str) -> str:
    """One template's text, read once per process."""
    return (TEMPLATES_DIR / name).read_text(encoding="utf-8")


def _fill(template: str, **values: str) -> str:
    """``template`` with every ``@NAME@`` replaced by ``values[NAME]``, in one pass.

    ``@NAME@`` rather than ``str.format``: the C++ and CMake are full of braces.  One pass, so a
    value is never searched for placeholders itself (the fallback's C++ or a kernel's note go in
    as they are).  A placeholder alone on its line stands for whole lines: an empty value leaves
    no line behind (build.sh with no kernels).  A placeholder without a value, or a value that
    the template never uses, is a bug in the renderer and fails loudly.
    """
    used: set[str] = set()

    def sub(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2)
        if name not in values:
            raise AssertionError(f"unfilled placeholder @{name}@ in generated source")
        used.add(name)
        value = values[name]
        return (value + "\n" if value else "") if m.group(1) else value

    out = _PLACEHOLDER.sub(sub, template)
    if used != set(values):
        raise AssertionError(f"template has no placeholder for {sorted(set(values) - used)}")
    return out


def render_header(manifest: dict) -> str:
    ents = entries_from_manifest(manifest)
    decls = "\n".join(
        f"int {e.symbol}(const void* A, const void* B, void* C, int M, int N, int K, void* stream);"
        for e in ents if e.symbol
    ) or "/* (none: every shape runs the fallback) */"
    dtype = manifest_dtype(manifest)
    return _fill(_template("l2hgemm.h.in"), ARCH=safe_label(manifest.get("arch")), COUNT=str(len(ents)), DECLS=decls,
                 DTYPE=dtype, IS_BFLOAT="1" if dtype == "bf16" else "0", ENTRY=ENTRY_POINTS[dtype])


def render_dispatch(manifest: dict) -> str:
    ents = entries_from_manifest(manifest)
    rows = [
        f"    {{{e.m}, {e.n}, {e.k}, {'&' + e.symbol if e.symbol else 'nullptr'}, "
        f"{{{', '.join(map(str, e.pin))}}}}},  // {e.note}"
        for e in ents
    ]
    if not rows:
        rows = ["    {0, 0, 0, nullptr, {0, 0, 0, 0, 0}},  // (empty export: never matches real shapes)"]
    return _fill(_template("l2hgemm_dispatch.cu.in"), FALLBACK=fallback_source(manifest_dtype(manifest)), BEGIN=TABLE_BEGIN,
                 END=TABLE_END, ROWS="\n".join(rows), COUNT=str(len(ents)))


def render_fallback_library(dtype: str = "fp16") -> str:
    """The fallback alone as an ABI kernel source (``l2_hgemm`` or ``l2_hgemm_bf16`` =
    ``l2hgemm_fallback``, by element type).

    :mod:`l2tui.export.runtime` builds it with the harness's cached nvcc driver when no combined
    library was built for the GPU at hand, so Python callers get the same fallback as C ones.
    The text depends only on the element type, so one build per type serves every export on a machine.
    """
    return _fill(_template("fallback_library.cu.in"), FALLBACK=fallback_source(dtype), ENTRY=ENTRY_POINTS[dtype])


def render_bench_forwarder(library: Path, dtype: str = "fp16") -> str:
    """An ABI kernel source that forwards ``l2_hgemm`` to ``library``'s ``l2hgemm`` (``l2tui export
    bench`` times the library through the harness like any candidate). The path goes in as a C
    string literal, escaped. The forwarder's entry point is the export's element type's (``dtype``)."""
    lit = str(library).replace("\\", "\\\\").replace('"', '\\"')
    if any(ord(ch) < 32 for ch in lit):
        raise ValueError(f"library path with a control character: {str(library)!r}")
    return _fill(_template("bench_forwarder.cu.in"), LIB=lit, ENTRY=ENTRY_POINTS[dtype])


def parse_table(dispatch_source: str) -> list[tuple[int, int, int, str | None]]:
    """Read the dispatch table back from generated source (what the tests check against the manifest)."""
    return [row[:4] for row in _table_rows(dispatch_source)]


def parse_pins(dispatch_source: str) -> dict[tuple[int, int, int], tuple[int, ...]]:
    """The fallback pins of generated source, by shape (kind, index, count, requested, version)."""
    return {row[:3]: row[4] for row in _table_rows(dispatch_source)}


def _table_rows(dispatch_source: str) -> list[tuple]:
    body = dispatch_source.split(TABLE_BEGIN, 1)[1].split(TABLE_END, 1)[0]
    rows = re.findall(r"\{(\d+), (\d+), (\d+), (&l2_hgemm_(?:bf16_)?\d+_\d+_\d+|nullptr), \{([\d, ]+)\}\}", body)
    return [(int(m), int(n), int(k), None if fn == "nullptr" else fn[1:], tuple(int(x) for x in pin.split(",")))
            for m, n, k, fn, pin in rows if (m, n, k) != ("0", "0", "0")]


def _checked_name(e: dict, dtype: str) -> tuple[str, str]:
    """A kernel entry's file stem and symbol, re-derived from its shape (digits and underscores only)."""
    shape = e.get("shape")
    if not isinstance(shape, list) or len(shape) != 3:
        raise HarnessError("an export entry's shape is not [M, N, K]; re-run l2tui export")
    name, sym = kernel_name(*shape), symbol_name(*shape, dtype=dtype)
    if e.get("name") != name or e.get("symbol") != sym:
        raise HarnessError(f"export entry {name}: name or symbol does not match its shape; re-run l2tui export")
    return name, sym


def render_build_script(manifest: dict, arch_flags: Sequence[str]) -> str:
    """A POSIX sh script that rebuilds lib/libl2hgemm.so with the same steps as ``--build``.

    Every value in it is either a constant, derived from a checked shape (digits), an nvcc flag
    from :func:`check_flags`' allow-list, or a checked architecture name, and each is quoted as one
    shell word anyway.
    """
    from .values import check_arch

    for f in arch_flags:
        if not _GENCODE_OK.match(f):
            raise HarnessError("the export's architecture flags are not nvcc -gencode flags; pass --arch sm_90a")
    check_arch(manifest.get("arch"), "the export's arch")
    libs = set(CUBLAS_LIBS)
    steps = []
    dtype = manifest_dtype(manifest)
    for e in manifest["kernels"]:
        if e.get("fallback"):
            continue
        name, sym = _checked_name(e, dtype)
        ok_flags = check_flags(e.get("flags", []), e["file"])
        libs.update(f for f in ok_flags if f.startswith("-l"))
        steps.append(_fill(_template("build_kernel.sh.in"), NAME=name, SYMBOL=sym,
                           ENTRY=ENTRY_POINTS[dtype], FLAGS=" ".join(sh_word(f) for f in ok_flags if not f.startswith("-l"))).rstrip("\n"))
    # the default is a single-quoted word: nothing recorded in a session is ever expanded by the shell
    return _fill(_template("build.sh.in"), ARCH_DEFAULT=sh_word(" ".join(arch_flags)), KERNELS="\n".join(steps),
                 LIB=LIB_FILE, LIBS=" ".join(sh_word(x) for x in sorted(libs)))


def write_sources(root: Path, manifest: dict, arch_flags: Sequence[str]) -> list[str]:
    """Write header, dispatcher, exports map, CMake files and build.sh into an export folder."""
    files = {
        HEADER_FILE: render_header(manifest),
        DISPATCH_FILE: render_dispatch(manifest),
        EXPORTS_FILE: _template("l2hgemm.map"),
        CMAKE_FILE: _fill(_template("l2hgemm.cmake.in"), ARCH=safe_label(manifest.get("arch")), LIB=LIB_FILE),
        CMAKE_EXAMPLE: _template("example_CMakeLists.txt"),
        "src/example.cpp": _template("example.cpp"),
        BUILD_SCRIPT: render_build_script(manifest, arch_flags),
    }
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    os.chmod(root / BUILD_SCRIPT, 0o755)
    return sorted(files)


# --------------------------------------------------------------------------- building


def cublas_flags() -> list[str]:
    """nvcc flags that find cuBLAS and cuBLASLt here (toolkit or the nvidia-cublas wheel), from the harness.

    The harness looks for cuBLAS; the fallback also needs cuBLASLt, which ships next
    to it in both layouts.  Checked here so a missing one is a one-line error, not a
    link failure deep in the build log.
    """
    try:
        from harness.baselines import cublas_build_flags
    except ImportError:  # older harness: rely on the toolkit next to nvcc
        return []
    flags = list(cublas_build_flags())
    libdirs = [Path(f[2:]) for f in flags if f.startswith("-L")]
    if libdirs and not any(any(d.glob("libcublasLt.so*")) for d in libdirs):
        raise ToolMissing(f"cuBLASLt not found next to cuBLAS in {libdirs[0]}: install nvidia-cublas or a full CUDA toolkit")
    return flags


def _tool(name: str) -> str:
    p = shutil.which(name)
    if not p:
        raise ToolMissing(f"{name} not found: install binutils (it comes with the compiler toolchain)")
    return p


def _run(cmd: list[str], what: str, cwd: Path, timeout_s: float) -> None:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise HarnessError(f"{what}: timed out after {timeout_s:.0f} s; retry with fewer shapes (--shapes)") from None
    if proc.returncode != 0:
        log = (proc.stderr or proc.stdout or "").strip().splitlines()
        errs = [ln for ln in log if "error" in ln.lower()] or log[-1:] or [f"exit status {proc.returncode}"]
        raise HarnessError(f"{what} failed: {errs[0].strip()[:300]}")


def _defined_globals(nm: str, obj: Path) -> list[str]:
    proc = subprocess.run([nm, "--defined-only", "-g", str(obj)], capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise HarnessError(f"nm {obj.name} failed: {proc.stderr.strip()[:200]}")
    out = []
    for line in proc.stdout.splitlines():
        parts = line.split()
        if len(parts) >= 3:
            out.append(parts[-1])
    return out


def compile_kernel_object(source: str, file: str, work: Path, args: list[str], timeout_s: float) -> Path:
    """Compile one exported kernel to an object file the way the build driver compiles a candidate
    (:mod:`harness.build`): the source policy first, then nvcc in the sandbox that sees only the
    kernel, CUDA and CUTLASS, and only the scrubbed log in an error (a kernel's ``#include`` of a
    file elsewhere never reaches the terminal)."""
    from harness import build as B
    from harness import sandbox
    from harness.source_policy import violations

    bad = violations(source)
    if bad:
        line, _, msg = bad[0]
        raise HarnessError(f"{file} is refused: line {line}: {msg}")
    nvcc = B.nvcc_path()
    work.mkdir(parents=True)
    (work / B.SOURCE_NAME).write_text(source, encoding="utf-8")
    obj = work / "kernel.o"
    cmd = [nvcc, *args, *(f"-I{d}" for d in B.cutlass_include_dirs()), B.SOURCE_NAME, "-o", str(obj)]
    if sandbox.use_sandbox(False):
        cmd = sandbox.build_argv(cmd, work, ro=B._toolchain_roots(nvcc))
    rc, log = B._run_compiler(cmd, work, timeout_s)
    if rc != 0 or not obj.is_file():
        errors = B.parse_diagnostics(B.scrub_log(log, str(work), nvcc), str(work))
        first = next((x for x in errors if x.severity in ("error", "fatal")), None)
        why = str(first) if first else f"nvcc exited with status {rc}"
        raise HarnessError(f"compiling {file} failed: {why[:300]}")
    return obj


@dataclass
class LibraryBuild:
    so_path: Path
    arch: str
    nvcc_version: str
    sha256: str
    seconds: float


def build_library(
    root: Path,
    manifest: dict,
    *,
    arch: str,
    jobs: int | None = None,
    timeout_s: float = 1800.0,
    progress: Callable[[str], None] | None = None,
) -> LibraryBuild:
    """Compile every non-fallback kernel of an export folder plus the dispatcher into one .so."""
    import time

    from harness.build import ARCH_GENCODE, cutlass_include_dirs, normalize_arch, nvcc_path, nvcc_version

    t0 = time.monotonic()
    arch_n = normalize_arch(arch)
    gencode = ARCH_GENCODE[arch_n]
    nvcc, nm, objcopy = nvcc_path(), _tool("nm"), _tool("objcopy")
    cub = cublas_flags()
    incs = [f"-I{d}" for d in cutlass_include_dirs()] + [f for f in cub if f.startswith("-I")]
    link_extra = [f for f in cub if not f.startswith("-I")]
    common = ["-c", "-O3", "-std=c++17", "-Xcompiler=-fPIC", "--expt-relaxed-constexpr", *gencode]
    write_sources(root, manifest, gencode)
    kernels = [e for e in manifest["kernels"] if not e.get("fallback")]
    entry = ENTRY_POINTS[manifest_dtype(manifest)]
    libs = set(CUBLAS_LIBS)
    for e in kernels:
        e["_flags"] = check_flags(e.get("flags", []), e["file"])
        libs.update(f for f in e["_flags"] if f.startswith("-l"))
    tmp = Path(tempfile.mkdtemp(prefix="l2hgemm-build-"))
    try:
        def one(e: dict) -> Path:
            name, sym = e["name"], e["symbol"]
            flags = [f for f in e["_flags"] if not f.startswith("-l")]
            obj = compile_kernel_object((root / e["file"]).read_text(encoding="utf-8"), e["file"], tmp / name,
                                        [*common, *flags, f"-D{entry}={sym}"], timeout_s)
            defined = _defined_globals(nm, obj)
            if sym not in defined:
                raise HarnessError(f"{e['file']} does not define {entry} as an extern \"C\" non-static function")
            syms = tmp / f"{name}.syms"
            syms.write_text("".join(f"{s} {s}__l2k_{name}\n" for s in defined if s != sym))
            _run([objcopy, f"--redefine-syms={syms}", str(obj)], f"renaming symbols of {e['file']}", root, 300)
            if progress:
                progress(f"compiled {e['file']}")
            return obj

        with ThreadPoolExecutor(max_workers=jobs or max(1, os.cpu_count() or 1)) as pool:
            objs = list(pool.map(one, kernels))
        disp = tmp / "dispatch.o"
        _run([nvcc, *common, *incs, f"-I{root / 'include'}", str(root / DISPATCH_FILE), "-o", str(disp)],
             "compiling the dispatcher", root, timeout_s)
        so = root / LIB_FILE
        so.parent.mkdir(parents=True, exist_ok=True)
        _run([nvcc, "-shared", *gencode, *map(str, objs), str(disp), "-o", str(so),
              "-Xlinker", f"--version-script={root / EXPORTS_FILE}", "-Xlinker", "-soname=libl2hgemm.so",
              *link_extra, *sorted(libs)],
             "linking libl2hgemm.so", root, timeout_s)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        for e in kernels:
            e.pop("_flags", None)
    digest = hashlib.sha256(so.read_bytes()).hexdigest()
    return LibraryBuild(so, arch_n, nvcc_version(), digest, time.monotonic() - t0)


def exported_symbols(so: Path) -> set[str]:
    """Dynamic symbols a shared library defines (``nm -D --defined-only``)."""
    proc = subprocess.run([_tool("nm"), "-D", "--defined-only", str(so)], capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        raise HarnessError(f"nm -D {so} failed: {proc.stderr.strip()[:200]}")
    return {ln.split()[-1] for ln in proc.stdout.splitlines() if ln.strip()}
