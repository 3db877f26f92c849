"""The nvcc driver: one ABI kernel source in, one cached shared library out.

Why a cache keyed by content: a CUTLASS SM90 kernel takes about a minute to
compile, and the agent loop and the sweep ask for the same (source, flags,
arch) many times across shapes (M, N, K are runtime arguments).  The key is the
sha256 of the source, the flags, the nvcc version, the target architecture and
the CUTLASS headers' identity, so a result is reused only when nvcc would
produce the same library.  Failed builds are cached too: the same inputs give
the same errors, and the debugger wants them instantly.

Everything a build tells us comes back as data (:class:`BuildResult`): the
ptxas resource report parsed per kernel, and compile errors as structured
:class:`CompileError` records the debugger role can quote.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from . import sandbox as _sandbox
from .errors import HarnessError, KernelSourceError, ToolMissing
from .paths import build_cache_dir

#: bump when the build recipe changes in a way the key does not capture
RECIPE_VERSION = 1
SOURCE_NAME = "kernel.cu"
LIB_NAME = "kernel.so"
DEFAULT_TIMEOUT_S = 900.0

#: nvcc target flags per architecture name accepted by ``--arch``
ARCH_GENCODE: dict[str, list[str]] = {
    "sm_90a": ["-gencode=arch=compute_90a,code=sm_90a"],
    "sm_90": ["-gencode=arch=compute_90,code=sm_90"],
    "sm_80": ["-gencode=arch=compute_80,code=sm_80"],
    "sm_86": ["-gencode=arch=compute_86,code=sm_86"],
    "sm_89": ["-gencode=arch=compute_89,code=sm_89"],
    "sm_100a": ["-gencode=arch=compute_100a,code=sm_100a"],
}
_FALLBACK_NVCC: tuple[str, ...] = ("/usr/local/cuda/bin/nvcc",)
DEFAULT_ARCH = "sm_90a"  # the project's target GPU (H200) when no GPU is present

BASE_FLAGS = [
    "-O3",
    "-std=c++17",
    "-shared",
    "-Xcompiler=-fPIC",
    "--expt-relaxed-constexpr",
    "-Xptxas=-v",
    "-lineinfo",
]
# Flags a caller may not pass: the driver owns the output and the inputs.
_FORBIDDEN_FLAGS = ("-o", "--output-file", "-odir", "--output-directory", "-run", "--run")

_ABI_RE = re.compile(r'extern\s+"C"[^;{]*?\bl2_hgemm(_bf16)?\s*\(', re.S)
#: the ABI entry point of each element type: the name a kernel defines says what A, B and C hold
ENTRY_POINTS = {"fp16": "l2_hgemm", "bf16": "l2_hgemm_bf16"}
_ABI_BLOCK_RE = re.compile(r'extern\s+"C"\s*\{', re.S)


# --------------------------------------------------------------------------- data


@dataclass
class KernelResources:
    """ptxas's report for one compiled entry function."""

    name: str
    arch: str = ""
    registers: int = 0
    smem_bytes: int = 0
    stack_bytes: int = 0
    spill_store_bytes: int = 0
    spill_load_bytes: int = 0


@dataclass
class PtxasReport:
    """Resources of the library's kernels: maxima (spills summed) plus each kernel."""

    registers: int = 0
    smem_bytes: int = 0
    spill_store_bytes: int = 0
    spill_load_bytes: int = 0
    stack_bytes: int = 0
    kernels: list[KernelResources] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> "PtxasReport | None":
        if d is None:
            return None
        kernels = [KernelResources(**k) for k in d.get("kernels", [])]
        rest = {k: v for k, v in d.items() if k != "kernels"}
        return cls(kernels=kernels, **rest)

    def summary(self) -> str:
        return (
            f"{self.registers} regs, {self.smem_bytes} B smem, "
            f"{self.spill_store_bytes}/{self.spill_load_bytes} B spill st/ld, {self.stack_bytes} B stack"
        )


@dataclass
class CompileError:
    """One diagnostic from nvcc, the host compiler, ptxas or the linker."""

    file: str
    line: int | None
    col: int | None
    severity: str  # "error" | "warning" | "fatal"
    message: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def __str__(self) -> str:
        loc = self.file
        if self.line is not None:
            loc += f":{self.line}"
            if self.col is not None:
                loc += f":{self.col}"
        return f"{loc}: {self.severity}: {self.message}"


@dataclass
class BuildResult:
    ok: bool
    key: str
    so_path: Path | None
    ptxas: PtxasReport | None
    errors: list[CompileError]
    log: str
    seconds: float
    cached: bool
    arch: str
    flags: list[str]
    nvcc_version: str = ""

    @property
    def warnings(self) -> list[CompileError]:
        return [e for e in self.errors if e.severity == "warning"]

    def error_text(self, limit: int = 20) -> str:
        """The errors (not warnings) as lines for a prompt or a status line."""
        errs = [e for e in self.errors if e.severity != "warning"] or self.errors
        lines = [str(e) for e in errs[:limit]]
        if len(errs) > limit:
            lines.append(f"... {len(errs) - limit} more")
        return "\n".join(lines) if lines else self.log.strip()[-2000:]

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "key": self.key,
            "so_path": str(self.so_path) if self.so_path else None,
            "ptxas": self.ptxas.to_dict() if self.ptxas else None,
            "errors": [e.to_dict() for e in self.errors],
            "log": self.log,
            "seconds": self.seconds,
            "cached": self.cached,
            "arch": self.arch,
            "flags": list(self.flags),
            "nvcc_version": self.nvcc_version,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "BuildResult":
        return cls(
            ok=bool(d["ok"]),
            key=d["key"],
            so_path=Path(d["so_path"]) if d.get("so_path") else None,
            ptxas=PtxasReport.from_dict(d.get("ptxas")),
            errors=[CompileError(**e) for e in d.get("errors", [])],
            log=d.get("log", ""),
            seconds=float(d.get("seconds", 0.0)),
            cached=bool(d.get("cached", False)),
            arch=d.get("arch", ""),
            flags=list(d.get("flags", [])),
            nvcc_version=d.get("nvcc_version", ""),
        )


# --------------------------------------------------------------------------- tools


def nvcc_path() -> str:
    """Path of nvcc: ``$L2TUI_NVCC``, then PATH, then ``$CUDA_HOME/bin``."""
    env = os.environ.get("L2TUI_NVCC")
    if env:
        if Path(env).is_file():
            return env
        raise ToolMissing(f"L2TUI_NVCC={env} does not exist: point it at nvcc or unset it")
    found = shutil.which("nvcc")
    if found:
        return found
    for var in ("CUDA_HOME", "CUDA_PATH"):
        root = os.environ.get(var)
        if root and (Path(root) / "bin" / "nvcc").is_file():
            return str(Path(root) / "bin" / "nvcc")
    for cand in _FALLBACK_NVCC:
        if Path(cand).is_file():
            return cand
    raise ToolMissing(
        "nvcc not found: install the CUDA toolkit (12.x or 13.x) and put its bin/ on PATH, or set CUDA_HOME"
    )


@functools.lru_cache(maxsize=4)
def _nvcc_version_of(path: str) -> str:
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ToolMissing(f"nvcc at {path} does not run ({e}): reinstall the CUDA toolkit") from None
    m = re.search(r"release\s+([\d.]+),\s*V([\d.]+)", out)
    return m.group(2) if m else out.strip().splitlines()[-1] if out.strip() else "unknown"


def nvcc_version() -> str:
    """e.g. ``13.0.88``."""
    return _nvcc_version_of(nvcc_path())


@functools.lru_cache(maxsize=1)
def cutlass_include_dirs() -> tuple[Path, ...]:
    """CUTLASS/CuTe include folders from the installed ``nvidia-cutlass`` package.

    ``$CUTLASS_PATH`` (a CUTLASS checkout) takes precedence.  Empty when neither
    is there; kernels that include CUTLASS then fail to compile with a hint.
    """
    env = os.environ.get("CUTLASS_PATH")
    if env:
        root = Path(env)
        dirs = [root / "include", root / "tools" / "util" / "include"]
        return tuple(d for d in dirs if d.is_dir())
    import importlib.util

    try:
        spec = importlib.util.find_spec("cutlass_library")
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        return ()
    root = Path(list(spec.submodule_search_locations)[0]) / "source"
    dirs = [root / "include", root / "tools" / "util" / "include"]
    return tuple(d for d in dirs if d.is_dir())


def _cutlass_identity() -> str:
    dirs = cutlass_include_dirs()
    if not dirs:
        return "none"
    version_h = dirs[0] / "cutlass" / "version.h"
    try:
        text = version_h.read_text()
    except OSError:
        return str(dirs[0])
    nums = re.findall(r"#define CUTLASS_(MAJOR|MINOR|PATCH)\s+(\d+)", text)
    return ".".join(n for _, n in nums) or str(dirs[0])


def normalize_arch(arch: str | None) -> str:
    """``sm_90a`` / ``90a`` / ``compute_90a`` -> ``sm_90a``; None -> the GPU's arch or the default."""
    if arch is None or arch == "auto":
        from .gpuinfo import detect_arch

        return detect_arch() or DEFAULT_ARCH
    a = arch.strip().lower()
    a = a.replace("compute_", "sm_")
    if not a.startswith("sm_"):
        a = "sm_" + a
    if a not in ARCH_GENCODE:
        from .errors import HarnessError

        raise HarnessError(f"unknown arch {arch!r}: use one of {', '.join(sorted(ARCH_GENCODE))}")
    return a


# --------------------------------------------------------------------------- parsing


def source_dtype(source: str) -> str:
    """The element type a kernel source takes, by the entry point it defines: ``l2_hgemm_bf16``
    is bf16, ``l2_hgemm`` (or a source with an ``extern "C" {`` block) fp16."""
    m = _ABI_RE.search(source)
    return "bf16" if m and m.group(1) else "fp16"


def check_abi(source: str, dtype: str | None = None) -> str:
    """Refuse a source that does not define the ABI entry point ``extern "C" l2_hgemm`` (or
    ``l2_hgemm_bf16``), or, with ``dtype``, one that takes another element type: a bf16 kernel
    fed fp16 data computes garbage, so the mismatch is refused before anything runs.
    Returns the source's element type."""
    if "l2_hgemm" not in source:
        raise KernelSourceError('kernel does not define l2_hgemm: add extern "C" int l2_hgemm(...) (see the kernel ABI)')
    if not (_ABI_RE.search(source) or _ABI_BLOCK_RE.search(source)):
        raise KernelSourceError('l2_hgemm must be declared extern "C" so it can be loaded (see the kernel ABI)')
    has = source_dtype(source)
    if dtype is not None and dtype != has:
        raise KernelSourceError(f"the kernel takes {has} (it defines {ENTRY_POINTS[has]}) but this run is {dtype}: "
                                f"run it with --dtype {has}, or give a kernel that defines {ENTRY_POINTS[dtype]}")
    return has


_PTXAS_ENTRY = re.compile(r"ptxas info\s*:\s*Compiling entry function '([^']+)' for '([^']+)'")
_PTXAS_PROPS = re.compile(r"ptxas info\s*:\s*Function properties for (\S+)")
_PTXAS_STACK = re.compile(
    r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads"
)
_PTXAS_USED = re.compile(r"ptxas info\s*:\s*Used (\d+) registers(.*)")
_SMEM = re.compile(r"(\d+) bytes smem")


def parse_ptxas(log: str) -> PtxasReport | None:
    """Parse ``-Xptxas -v`` output into per-kernel resources (None if there is no report)."""
    kernels: dict[str, KernelResources] = {}
    current: KernelResources | None = None
    props_for: str | None = None
    for line in log.splitlines():
        m = _PTXAS_ENTRY.search(line)
        if m:
            name, arch = m.group(1), m.group(2)
            current = kernels.setdefault(name, KernelResources(name=name, arch=arch))
            continue
        m = _PTXAS_PROPS.search(line)
        if m:
            props_for = m.group(1)
            continue
        m = _PTXAS_STACK.search(line)
        if m and props_for is not None:
            k = kernels.setdefault(props_for, KernelResources(name=props_for))
            k.stack_bytes, k.spill_store_bytes, k.spill_load_bytes = (int(g) for g in m.groups())
            props_for = None
            continue
        m = _PTXAS_USED.search(line)
        if m and current is not None:
            current.registers = int(m.group(1))
            s = _SMEM.search(m.group(2))
            current.smem_bytes = int(s.group(1)) if s else 0
    if not kernels:
        return None
    ks = list(kernels.values())
    return PtxasReport(
        registers=max(k.registers for k in ks),
        smem_bytes=max(k.smem_bytes for k in ks),
        spill_store_bytes=sum(k.spill_store_bytes for k in ks),
        spill_load_bytes=sum(k.spill_load_bytes for k in ks),
        stack_bytes=max(k.stack_bytes for k in ks),
        kernels=ks,
    )


# kernel.cu(12): error: identifier "x" is undefined
_NVCC_DIAG = re.compile(r"^(?P<file>[^\s(][^(]*)\((?P<line>\d+)\): (?P<sev>error|warning|catastrophic error)(?: #[\w-]+)?: (?P<msg>.*)$")
# kernel.cu:12:5: error: ...   (host compiler)
_GCC_DIAG = re.compile(r"^(?P<file>[^\s:][^:]*):(?P<line>\d+):(?:(?P<col>\d+):)? (?P<sev>error|warning|fatal error): (?P<msg>.*)$")
# ptxas error   : Entry function ... / nvlink error : ... / ptxas fatal
_TOOL_DIAG = re.compile(r"^(?P<tool>ptxas|nvlink|nvcc|ld|/usr/bin/ld)\s*(?P<sev>error|fatal|warning)?\s*:\s*(?P<msg>.*)$")


def parse_diagnostics(log: str, workdir: str | None = None) -> list[CompileError]:
    """Structured diagnostics from a compiler log; temp paths are shown as ``kernel.cu``."""
    out: list[CompileError] = []
    lines = log.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if workdir:
            line = line.replace(workdir + os.sep, "")
        m = _NVCC_DIAG.match(line)
        if m:
            msg = m.group("msg").strip()
            # nvcc puts the offending source line and a caret on the next lines: keep the source line
            sev = "fatal" if m.group("sev") == "catastrophic error" else m.group("sev")
            out.append(CompileError(_short(m.group("file")), int(m.group("line")), None, sev, msg))
            i += 1
            continue
        m = _GCC_DIAG.match(line)
        if m:
            sev = "fatal" if m.group("sev") == "fatal error" else m.group("sev")
            col = int(m.group("col")) if m.group("col") else None
            out.append(CompileError(_short(m.group("file")), int(m.group("line")), col, sev, m.group("msg").strip()))
            i += 1
            continue
        m = _TOOL_DIAG.match(line.strip())
        if m and m.group("sev") in ("error", "fatal"):
            out.append(CompileError(m.group("tool").rsplit("/", 1)[-1], None, None, m.group("sev"), m.group("msg").strip()))
        elif "undefined reference to" in line or "cannot find -l" in line:
            out.append(CompileError("ld", None, None, "error", line.strip()))
        i += 1
    return out


def _short(path: str) -> str:
    p = path.strip()
    if p.endswith(SOURCE_NAME) and os.sep in p and "/tmp" in p:
        return SOURCE_NAME
    return p


# --------------------------------------------------------------------------- building


def _link_flags_for(source: str) -> list[str]:
    """Libraries a source needs that nvcc does not link by default."""
    flags = []
    if re.search(r"#\s*include\s*[<\"]cublasLt\.h[>\"]", source):
        flags.append("-lcublasLt")
    if re.search(r"#\s*include\s*[<\"]cublas(_v2)?\.h[>\"]", source):
        flags.append("-lcublas")
    return flags


def validate_flags(flags: Sequence[str]) -> list[str]:
    out = []
    for f in flags:
        if not isinstance(f, str) or not f.startswith("-"):
            from .errors import HarnessError

            raise HarnessError(f"bad nvcc flag {f!r}: flags must start with '-'")
        if f.split("=", 1)[0] in _FORBIDDEN_FLAGS:
            from .errors import HarnessError

            raise HarnessError(f"nvcc flag {f!r} is not allowed: the build driver chooses outputs")
        out.append(f)
    return out


def build_key(source: str, arch: str, flags: Sequence[str], nvcc_ver: str) -> str:
    payload = json.dumps(
        {
            "recipe": RECIPE_VERSION,
            "source": source,
            "flags": list(flags),
            "arch": arch,
            "nvcc": nvcc_ver,
            "cutlass": _cutlass_identity(),
        },
        sort_keys=True,
    )
    return hashlib.sha256(payload.encode()).hexdigest()


def nvcc_command(nvcc: str, arch: str, flags: Sequence[str], src: Path, out: Path, source: str) -> list[str]:
    cmd = [nvcc, *BASE_FLAGS, *ARCH_GENCODE[arch]]
    for d in cutlass_include_dirs():
        cmd.append(f"-I{d}")
    cmd += list(flags)
    cmd += ["-o", str(out), str(src)]
    cmd += _link_flags_for(source)
    return cmd


def translation_unit(source: str, arch: str | None = None, flags: Sequence[str] = ()) -> bytes:
    """What nvcc compiles of ``source`` after the preprocessor, without line markers: two sources
    with the same one build the same library (how a recording outlives a template's comments).

    The build's own command with ``-E`` instead of a library; a source the candidate policy
    refuses (:mod:`harness.source_policy`) is refused here too, before nvcc reads it."""
    from .source_policy import violations

    check_abi(source)
    bad = violations(source)
    if bad:
        line, _, msg = bad[0]
        raise KernelSourceError(f"line {line}: {msg}")
    arch_n = normalize_arch(arch)
    with tempfile.TemporaryDirectory(prefix="l2tui-tu-") as d:
        src, out = Path(d) / SOURCE_NAME, Path(d) / "kernel.i"
        src.write_text(source)
        cmd = [c for c in nvcc_command(nvcc_path(), arch_n, validate_flags(flags), src, out, source)
               if c not in ("-shared", "-Xptxas=-v")]
        cmd = [c for c in cmd[:cmd.index("-o")] if not c.startswith("-l")] + ["-E", "-Xcompiler", "-P",
                                                                              "-o", str(out), str(src)]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            raise HarnessError(f"nvcc -E failed: {(r.stderr or r.stdout).strip().splitlines()[-1:]}")
        return out.read_bytes()


def _cache_entry(key: str) -> Path:
    return build_cache_dir() / key[:2] / key


def _load_cached(key: str) -> BuildResult | None:
    entry = _cache_entry(key)
    meta = entry / "build.json"
    try:
        d = json.loads(meta.read_text())
    except (OSError, ValueError):
        return None
    res = BuildResult.from_dict(d)
    _rescrub(res)
    if res.ok:
        so = entry / LIB_NAME
        if not so.is_file():
            return None
        res.so_path = so
    res.cached = True
    return res


def cached_build(source: str, arch: str | None = None, flags: Sequence[str] = ()) -> BuildResult | None:
    """The cached build of ``source`` in this process's build cache, or None; never runs nvcc."""
    try:
        check_abi(source)
        key = build_key(source, normalize_arch(arch), validate_flags(flags), nvcc_version())
    except HarnessError:
        return None
    return _load_cached(key)


def _exported_symbols(so: Path) -> set[str] | None:
    nm = shutil.which("nm")
    if not nm:
        return None
    try:
        out = subprocess.run([nm, "-D", "--defined-only", str(so)], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    return {ln.split()[-1] for ln in out.stdout.splitlines() if ln.strip()}


def build(
    source: str,
    *,
    arch: str | None = None,
    flags: Sequence[str] = (),
    name: str = "kernel",
    use_cache: bool = True,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    trusted: bool = False,
    dtype: str | None = None,
) -> BuildResult:
    """Compile one ABI kernel source to a shared library (or return the cached one).

    Raises :class:`KernelSourceError` for a source without ``l2_hgemm`` (or ``l2_hgemm_bf16``),
    or one whose element type is not ``dtype`` when given, and
    :class:`ToolMissing` without nvcc; compile failures are *results*
    (``ok=False`` with structured ``errors``), not exceptions. A source that calls what a
    candidate may not (:mod:`harness.source_policy`) fails the same way, before nvcc runs, unless
    ``trusted`` (the project's own cuBLAS shim and exported-library code).
    """
    entry = ENTRY_POINTS[check_abi(source, dtype)]
    nvcc = nvcc_path()
    arch_n = normalize_arch(arch)
    flags_v = validate_flags(flags)
    ver = _nvcc_version_of(nvcc)
    if not trusted:
        refused = _policy_refusal(source, arch_n, flags_v, ver)
        if refused is not None:
            return refused
    key = build_key(source, arch_n, flags_v, ver)
    if use_cache:
        hit = _load_cached(key)
        if hit is not None:
            return hit

    root = build_cache_dir()
    root.mkdir(parents=True, exist_ok=True)
    _sweep_stale_work(root)
    work = Path(tempfile.mkdtemp(prefix=f"{_WORK_PREFIX}{name}-{os.getpid()}-", dir=root))
    src = work / SOURCE_NAME
    src.write_text(source)
    so = work / LIB_NAME
    cmd = nvcc_command(nvcc, arch_n, flags_v, src, so, source)
    t0 = time.monotonic()
    try:
        if _sandbox.use_sandbox(trusted):
            ro = _toolchain_roots(nvcc) + (_flag_dirs(flags_v) if trusted else [])
            cmd = _sandbox.build_argv(cmd, work, ro=ro)
        rc, log = _run_compiler(cmd, work, timeout_s)
    except BaseException:
        # Ctrl-C, SIGTERM, a kill of the whole run: the compiler is gone (its process group was
        # killed), and so is its work folder; nothing is cached and no compile_error comes back
        shutil.rmtree(work, ignore_errors=True)
        raise
    shutil.rmtree(work / "tmp", ignore_errors=True)
    seconds = time.monotonic() - t0
    log = scrub_log(log, str(work), nvcc)
    ok, errors = _judge(rc, log, so, str(work), entry)
    result = BuildResult(ok=ok, key=key, so_path=so if ok else None, ptxas=parse_ptxas(log), errors=errors,
                         log=log, seconds=seconds, cached=False, arch=arch_n, flags=flags_v, nvcc_version=ver)
    return _store(result, work)


def _policy_refusal(source: str, arch: str, flags: list[str], ver: str) -> BuildResult | None:
    """The failed build of a source that calls what a candidate may not (harness.source_policy),
    made before nvcc runs; None for a source the policy lets through."""
    from .source_policy import violations

    bad = violations(source)
    if not bad:
        return None
    errs = [CompileError(SOURCE_NAME, line, col, "error", msg) for line, col, msg in bad]
    return BuildResult(ok=False, key="", so_path=None, ptxas=None, errors=errs,
                       log="\n".join(str(e) for e in errs), seconds=0.0, cached=False, arch=arch,
                       flags=flags, nvcc_version=ver)


def _judge(rc: int, log: str, so: Path, work: str, entry: str) -> tuple[bool, list[CompileError]]:
    """Did the compile give a usable library, and its diagnostics: nvcc's own, plus one line for
    a library without its ``entry`` point (``l2_hgemm`` or ``l2_hgemm_bf16``) or a failure nvcc gave
    no error line for."""
    errors = parse_diagnostics(log, work)
    ok = rc == 0 and so.is_file()
    if ok:
        syms = _exported_symbols(so)
        if syms is not None and entry not in syms:
            ok = False
            errors.append(CompileError(SOURCE_NAME, None, None, "error",
                                       f'the library does not export {entry}: declare it extern "C" and not static'))
    elif not any(e.severity in ("error", "fatal") for e in errors):
        tail = log.strip().splitlines()[-1] if log.strip() else f"nvcc exited with status {rc}"
        errors.append(CompileError("nvcc", None, None, "error", tail))
    return ok, errors


def _store(result: BuildResult, work: Path) -> BuildResult:
    """Move a finished build's work folder into the cache under its key and return the result as
    cached. A failure the source did not cause (a timeout, a broken toolchain) is not cached:
    retrying later may work. Where another process stored the same build first, theirs is kept."""
    if not result.ok and not _source_caused(result.errors):
        shutil.rmtree(work, ignore_errors=True)
        return result
    (work / "build.json").write_text(json.dumps(result.to_dict(), indent=1))
    entry = _cache_entry(result.key)
    entry.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.replace(work, entry)
    except OSError:
        shutil.rmtree(work, ignore_errors=True)
        hit = _load_cached(result.key)
        if hit is not None:
            hit.cached = False
            return hit
        return result
    if result.ok:
        result.so_path = entry / LIB_NAME
        (entry / "build.json").write_text(json.dumps(result.to_dict(), indent=1))
    return result


class BuildInterrupted(HarnessError):
    """The build was stopped from outside (Ctrl-C, SIGTERM, the run ending): not the kernel's fault,
    so it is never a ``compile_error`` and never cached."""


_WORK_PREFIX = ".work-"
_WORK_RE = re.compile(r"^\.work-.*-(\d+)-[^-]+$")
_LIVE: dict[int, subprocess.Popen[bytes]] = {}
_KILLED: set[int] = set()
_LIVE_LOCK = threading.Lock()


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the compiler's whole process group (nvcc, cicc, ptxas, the host compiler; or bwrap,
    whose sandbox dies with it)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.kill()
    except (ProcessLookupError, OSError):
        pass


def kill_all_builds() -> int:
    """Kill every compiler this process is running (the command line's Ctrl-C / SIGTERM path);
    their :func:`build` calls raise :class:`BuildInterrupted`. Returns how many were running."""
    with _LIVE_LOCK:
        procs = list(_LIVE.values())
        _KILLED.update(p.pid for p in procs)
    for p in procs:
        _kill_group(p)
    return len(procs)


#: the most of a compiler's output kept for the log: a source can make nvcc print without end
#: (template instantiation storms, ``#warning`` in a macro), and the log is read, stored and shown
MAX_COMPILER_OUTPUT = 4 << 20


class _BoundedDrain(threading.Thread):
    """Read a pipe to its end on a thread, keeping the first ``cap`` bytes and counting the rest.

    The pipe is always drained (a compiler blocked on a full pipe would never exit), but memory
    stays bounded whatever the source makes the compiler print."""

    def __init__(self, pipe: Any, cap: int = MAX_COMPILER_OUTPUT) -> None:
        super().__init__(daemon=True, name="compiler-output")
        self._pipe, self._cap = pipe, cap
        self._kept = bytearray()
        self.dropped = 0

    def run(self) -> None:
        while True:
            chunk = self._pipe.read(1 << 16)
            if not chunk:
                return
            room = self._cap - len(self._kept)
            self._kept += chunk[:max(room, 0)]
            self.dropped += max(len(chunk) - max(room, 0), 0)

    def text(self) -> str:
        out = bytes(self._kept).decode(errors="replace")
        if self.dropped:
            out += f"\n[{self.dropped} more bytes of compiler output dropped]\n"
        return out


def _run_compiler(cmd: Sequence[str], work: Path, timeout_s: float) -> tuple[int, str]:
    """Run one compiler command in its own process group; (status, stdout+stderr).

    The output is kept up to :data:`MAX_COMPILER_OUTPUT` (the rest is read and dropped, and the log
    says how much).  A timeout kills the group and is reported in the log (status -1); any
    exception while waiting (KeyboardInterrupt, SystemExit from a signal handler) kills the group
    and propagates, and a group killed by :func:`kill_all_builds` raises :class:`BuildInterrupted`.
    """
    env = dict(os.environ)
    env["TMPDIR"] = str(work / "tmp")   # nvcc's intermediates stay inside the work folder
    (work / "tmp").mkdir(exist_ok=True)
    proc = subprocess.Popen(list(cmd), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            cwd=work, env=env, start_new_session=True)
    drain = _BoundedDrain(proc.stdout)
    drain.start()
    with _LIVE_LOCK:
        _LIVE[proc.pid] = proc
    prefix = ""
    try:
        try:
            proc.wait(timeout=timeout_s)
            rc = proc.returncode
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            proc.wait()
            rc = -1
            prefix = f"nvcc timed out after {timeout_s:.0f} s\n"
        except BaseException:
            _kill_group(proc)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            raise
    finally:
        with _LIVE_LOCK:
            _LIVE.pop(proc.pid, None)
            killed = proc.pid in _KILLED
            _KILLED.discard(proc.pid)
    drain.join(timeout=30)
    if killed:
        raise BuildInterrupted("the build was interrupted (the run is stopping); nothing was cached")
    return rc, prefix + drain.text()


def _sweep_stale_work(root: Path) -> None:
    """Remove work folders left by a build whose process no longer exists (kill -9 of a run)."""
    try:
        entries = list(root.iterdir())
    except OSError:
        return
    for e in entries:
        m = _WORK_RE.match(e.name)
        if not m or not e.is_dir():
            continue
        pid = int(m.group(1))
        if pid == os.getpid():
            continue
        try:
            os.kill(pid, 0)
            continue          # its builder is still running
        except ProcessLookupError:
            shutil.rmtree(e, ignore_errors=True)
        except PermissionError:
            continue


def _flag_dirs(flags: Sequence[str]) -> list[Path]:
    """Folders a trusted build's flags name (``-I``, ``-L``, ``-isystem``, an rpath), with the targets
    of the symlinks in them: the cuBLAS shim links through a folder of links in the cache. An
    untrusted build gets none of them: its compiler sees only CUDA and CUTLASS."""
    out: list[Path] = []
    for f in flags:
        m = re.match(r"^(?:-I|-L|-isystem|--include-path=|--library-path=|-Xlinker=-rpath=)(/.+)$", f)
        if not m:
            continue
        d = Path(m.group(1))
        if d.is_dir():
            out.append(d)
            try:
                out += [c.resolve().parent for c in d.iterdir() if c.is_symlink()]
            except OSError:
                pass
    return out


def _toolchain_roots(nvcc: str) -> list[Path]:
    """Folders the sandboxed compiler reads: the CUDA toolkit and the CUTLASS include folders."""
    roots: list[Path] = []
    try:
        cuda = Path(nvcc).resolve().parent.parent
        roots.append(cuda)
        if Path(nvcc).parent.parent != cuda:
            roots.append(Path(nvcc).parent.parent)
    except OSError:
        pass
    roots += [d.resolve() for d in cutlass_include_dirs()]
    return roots


# --------------------------------------------------------------------------- compile logs

_HIDDEN = "(a diagnostic in a file outside kernel.cu, CUDA and CUTLASS was hidden)"
_ABS_PATH = re.compile(r"(?<![\w.<>-])/(?:[\w.+@~-]+/)*[\w.+@~-]+")
_DIAG_FILE = re.compile(
    r"^(?:In file included from |\s*from )?(?P<file>/[^\s(:]+|[\w.+-]+\.(?:cu|cuh|h|hpp|hxx|inl|c|cc|cpp|cxx|ptx))"
    r"(?:\(\d+\)|:\d+|:)")


def _path_roots(nvcc: str | None) -> list[tuple[str, str]]:
    """(absolute prefix, label) of the folders a diagnostic may name, longest first."""
    roots: list[tuple[str, str]] = []
    for d in cutlass_include_dirs():
        for p in {str(d), str(d.resolve())}:
            roots.append((p, "<cutlass>"))
    if nvcc:
        roots.append((str(Path(nvcc).resolve().parent.parent), "<cuda>"))
    for sysdir in ("/usr/include", "/usr/lib/gcc", "/usr/local/include"):
        roots.append((sysdir, "<system>"))
    roots.sort(key=lambda r: -len(r[0]))
    return roots


def _rewrite_paths(line: str, roots: list[tuple[str, str]]) -> str:
    def sub(m: re.Match[str]) -> str:
        p = os.path.normpath(m.group(0))
        for root, label in roots:
            if p == root or p.startswith(root + "/"):
                return label + p[len(root):]
        base = p.rsplit("/", 1)[-1]
        return base if _TOOL_LINE.match(p + ":") else "<path>"

    return _ABS_PATH.sub(sub, line)


_TOOL_LINE = re.compile(r"^/\S*/(?:ld(?:\.\w+)?|collect2|nvlink|ptxas|fatbinary|cicc|cudafe\+\+|g\+\+|gcc|cc1plus)(?::|\s)")


def _allowed_file(name: str, roots: list[tuple[str, str]]) -> bool:
    """kernel.cu, or a header under the CUDA / CUTLASS / system include folders."""
    if not name.startswith("/"):
        return name == SOURCE_NAME
    name = os.path.normpath(name)
    return any(name == r or name.startswith(r + "/") for r, _ in roots)


def scrub_log(log: str, workdir: str, nvcc: str | None = None) -> str:
    """The compiler log as callers may see it: diagnostics about ``kernel.cu``, CUDA and CUTLASS
    headers and the tools themselves, with absolute paths shortened (``<cutlass>/cute/...``,
    ``<cuda>/...``) or replaced by ``<path>``.

    Why: the log goes to the debugger's prompt (an LLM endpoint), the session's events and the RL
    data. A diagnostic located in any other file quotes that file's text (``#include
    "/home/me/.env"`` once gave ``identifier "sk-..." is undefined``), so such a diagnostic and
    its continuation lines are dropped, leaving one line that says so. Values of secret-looking
    environment variables are masked as a last resort.
    """
    roots = _path_roots(nvcc)
    out: list[str] = []
    keep = True
    for raw in log.splitlines():
        line = raw.replace(workdir + os.sep, "") if workdir else raw
        m = None if _TOOL_LINE.match(line) else _DIAG_FILE.match(line)
        if m:
            keep = _allowed_file(m.group("file"), roots)
            if not keep:
                if not out or out[-1] != _HIDDEN:
                    out.append(_HIDDEN)
                continue
        elif line[:1] in (" ", "\t") or not line.strip():
            if not keep:
                continue
        else:
            keep = True
        out.append(_rewrite_paths(line, roots))
    text = "\n".join(out) + ("\n" if log.endswith("\n") else "")
    return mask_secrets(text)


def _rescrub(res: BuildResult) -> None:
    """Apply today's log rules to a cached result (an entry written before them may quote a file
    outside the kernel): the log scrubbed, diagnostics located in other files dropped."""
    try:
        nvcc: str | None = nvcc_path()
    except ToolMissing:
        nvcc = None
    roots = _path_roots(nvcc)
    res.log = scrub_log(res.log, "", nvcc)
    kept = []
    for e in res.errors:
        if e.file.startswith("/") and not _allowed_file(e.file, roots):
            continue
        kept.append(CompileError(_rewrite_paths(e.file, roots), e.line, e.col, e.severity,
                                 mask_secrets(_rewrite_paths(e.message, roots))))
    if res.errors and not kept:
        kept.append(CompileError("nvcc", None, None, "error", _HIDDEN))
    res.errors = kept


def mask_secrets(text: str) -> str:
    """``text`` with the values of secret-looking environment variables (…KEY, …TOKEN, …SECRET,
    …PASSWORD) replaced by ``<secret>``."""
    for k, v in os.environ.items():
        if v and len(v) >= 8 and re.search(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL", k, re.I) and v in text:
            text = text.replace(v, "<secret>")
    return text


_MISSING_HEADER = re.compile(r"^(?P<header>[^\s:]+): No such file or directory")


def _provided_header_missing(e: CompileError) -> bool:
    """A fatal "No such file or directory" for a CUTLASS/CuTe header (one the harness provides):
    the include folders changed under the build (the package being reinstalled while nvcc ran),
    which says nothing about the source, so such a failure must not be cached."""
    m = _MISSING_HEADER.match(e.message.strip())
    if not m:
        return False
    header = m["header"]
    return header.split("/", 1)[0] in ("cute", "cutlass") or any((d / header).is_file() for d in cutlass_include_dirs())


def _source_caused(errors: Sequence[CompileError]) -> bool:
    """Whether a failed build is the source's fault (a diagnostic on one of its lines, or no
    ``l2_hgemm`` export), so caching the failure is safe. A provided header that was missing
    (:func:`_provided_header_missing`) is the environment's fault, whatever line included it."""
    return any(e.severity in ("error", "fatal") and e.file == SOURCE_NAME
               and (e.line is not None or "l2_hgemm" in e.message) and not _provided_header_missing(e)
               for e in errors)


def build_file(path: str | Path, **kw: Any) -> BuildResult:
    """Build a kernel file; unreadable files are a one-line :class:`KernelSourceError`."""
    p = Path(path)
    try:
        source = p.read_text()
    except (OSError, UnicodeDecodeError) as e:
        reason = getattr(e, "strerror", None) or str(e)
        raise KernelSourceError(f"cannot read kernel file {str(p)!r}: {reason}") from None
    return build(source, name=p.stem, **kw)


def default_jobs() -> int:
    return max(1, os.cpu_count() or 1)


def build_many(
    sources: Sequence[str],
    *,
    arch: str | None = None,
    flags: Sequence[str] = (),
    jobs: int | None = None,
    use_cache: bool = True,
    progress: Callable[[int, int, BuildResult], None] | None = None,
    deadline: float | None = None,
) -> list[BuildResult | None]:
    """Build several sources in parallel (default: one nvcc per core).

    Identical sources are built once.  ``progress(done, total, result)`` is
    called as builds finish.  A source that fails the ABI check yields a failed
    result instead of raising, so one bad file does not stop a sweep.  With
    ``deadline`` (a ``time.monotonic()`` value) no nvcc starts after it: the
    running ones finish, cache hits are still answered, and each source not
    built is None (a time-limited sweep stops between builds, not inside nvcc).
    """
    arch_n = normalize_arch(arch)
    unique = list(dict.fromkeys(sources))
    results: dict[str, BuildResult | None] = {}
    done = 0

    def one(src: str) -> BuildResult | None:
        if deadline is not None and time.monotonic() >= deadline:
            return cached_build(src, arch_n, flags) if use_cache else None
        try:
            return build(src, arch=arch_n, flags=flags, use_cache=use_cache)
        except KernelSourceError as e:
            return BuildResult(False, "", None, None, [CompileError(SOURCE_NAME, None, None, "error", str(e))], str(e), 0.0, False, arch_n, list(flags))

    from concurrent.futures import as_completed

    pool = ThreadPoolExecutor(max_workers=jobs or default_jobs())
    try:
        futs = {pool.submit(one, s): s for s in unique}
        for fut in as_completed(futs):
            res = fut.result()
            results[futs[fut]] = res
            if res is None:
                continue
            done += 1
            if progress is not None:
                progress(done, len(unique), res)
    except BaseException:
        # Ctrl-C / SIGTERM / a failed build: queued builds never start, running compilers die now
        # (not when they would have finished), and each of their work folders is removed
        pool.shutdown(wait=False, cancel_futures=True)
        kill_all_builds()
        pool.shutdown(wait=True)
        raise
    pool.shutdown(wait=True)
    return [results[s] for s in sources]
