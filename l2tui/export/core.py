"""``export_session``: a session's chosen kernels as a folder a program can use.

The folder is written to a temporary sibling and renamed into place at the
end, so an error (a missing kernel file, a failed ``--build``) never leaves a
half-written export behind, and ``--force`` replaces an old export only once
the new one is complete.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

from harness.shapes import Shape
from l2tui.gemm_roles import session_roles
from l2tui.errors import UserError

from . import cdispatch
from .manifest import (DEFAULT_FALLBACK_MARGIN, DTYPES, MANIFEST_NAME, SCHEMA, abi_of, check_margin, fallback_for,
                       fallback_pin, kernel_name, speedups, symbol_name, validate)
from .select import Choice, select_kernels
from .sessionio import SessionView, open_session
from .values import check_arch, check_out_path, gencode, inside


class ExportError(UserError):
    """An export that cannot be written (target folder, empty selection, ...)."""


def routes_line(manifest: dict) -> str:
    """How many shapes run an exported kernel and how many the library fallback, in one phrase:
    a count of "exported kernels" that included the shapes routed to cuBLAS would overstate it."""
    ks = manifest["kernels"]
    fb = sum(1 for e in ks if e.get("fallback"))
    pct = 100.0 * manifest.get("fallback_margin", 0.0)
    return (f"{len(ks)} shape{'s' if len(ks) != 1 else ''}: {len(ks) - fb} run an exported kernel, {fb} the "
            f"cuBLAS fallback (the kernel was slower than it, or within {pct:g} %)")


def check_policy(source: str, what: str) -> None:
    """Refuse a kernel the candidate source policy refuses (:mod:`harness.source_policy`): an export
    ships the session's kernels to whoever links the library, so it holds them to the same rules
    the session's builds did, whatever a hand-edited session folder holds now."""
    from harness.source_policy import violations

    bad = violations(source)
    if bad:
        line, _, msg = bad[0]
        raise ExportError(f"{what} is refused: line {line}: {msg}")


@dataclass
class ExportResult:
    out: Path
    manifest: dict
    warnings: list[str] = field(default_factory=list)
    library: Path | None = None

    @property
    def shapes(self) -> list[tuple[int, int, int]]:
        return [tuple(e["shape"]) for e in self.manifest["kernels"]]


def git_revision(path: Path) -> str | None:
    """``git rev-parse HEAD`` of the checkout holding ``path`` (None outside one).

    ``$L2TUI_GIT_REV`` wins, as in the harness: a tree copied to another machine may carry a
    stale ``.git`` whose HEAD is not the revision that was sent.
    """
    if os.environ.get("L2TUI_GIT_REV"):
        return os.environ["L2TUI_GIT_REV"]
    git = shutil.which("git")
    if not git:
        return None
    try:
        proc = subprocess.run([git, "-C", str(path), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    rev = proc.stdout.strip()
    return rev if proc.returncode == 0 and rev else None


def _session_revision(view: SessionView) -> str | None:
    for key in ("git_revision", "git", "l2tui_git", "revision"):
        v = view.versions.get(key)
        if isinstance(v, str) and v:
            return v
    return None


def check_target(out: Path, force: bool, session_path: Path | None = None) -> None:
    """Refuse targets that would lose someone's files.

    An output inside the session (or holding it) is refused even with
    ``--force``: replacing it would replace the session's own records.
    """
    check_out_path(out)
    if out.exists() and not out.is_dir():
        raise ExportError(f"{out} exists and is not a folder; pick another --out")
    if session_path is not None:
        if inside(out, session_path) or inside(session_path, out):
            raise ExportError(f"--out {out} overlaps the session folder {session_path}; export somewhere else "
                              "(--force never replaces a session)")
    if out.is_dir() and any(out.iterdir()):
        if not force:
            raise ExportError(f"{out} is not empty; pass --force to replace it or pick another --out")
        if not (out / MANIFEST_NAME).is_file():
            raise ExportError(f"{out} is not empty and holds no l2tui export; --force only replaces an earlier export")


def session_dtype(view: SessionView) -> str:
    """The element type the session ran in (its ``[loop] dtype``); a session without one is fp16."""
    loop = view.config.get("loop")
    dtype = loop.get("dtype", "fp16") if isinstance(loop, dict) else "fp16"
    if dtype not in DTYPES:
        raise ExportError(f"{view.path}/session.toml: [loop] dtype is {str(dtype)[:20]!r}, not fp16 or bf16")
    return str(dtype)


def export_dtype(choices: Iterable[Choice], sources: dict[str, str], wanted: str | None, session: str) -> str:
    """The one element type of an export: what its kernels take (the entry point each defines).

    An export is one library with one calling convention, so kernels of both types are refused
    (export them separately with ``--shapes``), and so are kernels of another type than
    ``--dtype`` (``wanted``) or, without it, than the session's."""
    from harness.build import source_dtype

    if wanted is not None and wanted not in DTYPES:
        raise ExportError(f"--dtype must be fp16 or bf16, not {str(wanted)[:20]!r}")
    by_type: dict[str, list[str]] = {}
    for c in choices:
        by_type.setdefault(source_dtype(sources[c.sha]), []).append(c.track)
    if len(by_type) > 1:
        some = {t: ", ".join(tracks[:3]) for t, tracks in sorted(by_type.items())}
        raise ExportError("the export would mix fp16 kernels (" + some["fp16"] + ") and bf16 kernels (" + some["bf16"]
                          + "); an export holds one element type: pick its shapes with --shapes")
    have = next(iter(by_type), wanted or session)
    want = wanted or session
    if have != want:
        how = "--dtype" if wanted else "the session's dtype"
        raise ExportError(f"the kernels take {have} but {how} is {want}: export with --dtype {have}")
    return have


def _entry(view: SessionView, c: Choice, source: str, margin: float, dtype: str) -> dict:
    name = kernel_name(c.shape.m, c.shape.n, c.shape.k)
    tm = c.timing
    times = dict(tm.times_ms) if tm else {}
    kernel_ms, sp = speedups(times, tm.baseline if tm else None, tm.speedup if tm else None)
    fastest = min(sp, key=lambda lab: times[lab]) if sp else None
    # never slower than the libraries: unless the kernel beat every one of them on this very shape
    # by the margin, dispatch to the fallback
    fallback, slower_than = fallback_for(times, kernel_ms, margin)
    return {
        "shape": [c.shape.m, c.shape.n, c.shape.k],
        "name": name,
        # only a kernel the dispatcher calls is shipped; a fallback shape keeps its kernel's digest
        "file": None if fallback else f"kernels/{name}.cu",
        "sha256": c.sha,
        "symbol": symbol_name(c.shape.m, c.shape.n, c.shape.k, dtype=dtype),
        "acc": c.acc,
        "family": c.family if isinstance(c.family, str) else None,
        "flags": list(c.flags),
        "track": c.track,
        "step": c.step,
        "origin": c.origin,
        "policy": c.policy,
        "selected_by": c.selected_by,
        "accepted_by": c.accepted_by,
        "rel_err": c.rel_err,
        "bound": c.bound,
        "nondeterministic": "l2: nondeterministic" in source,
        "timing_mode": tm.mode if tm else None,
        "times_ms": times,
        "kernel_ms": kernel_ms,
        "roofline_ms": tm.roofline_ms if tm else None,
        "baseline": c.baseline or (tm.baseline if tm else None),
        "speedup": sp,
        "fastest_baseline": fastest,
        "slower_than": slower_than,
        "fallback": fallback,
        "fallback_pin": fallback_pin(times, tm.autotune if tm else None, c.acc,
                                     tm.cublas_variant if tm else None),
    }


def _with_role(entry: dict, roles: dict[str, str]) -> dict:
    """Name the entry's shape by its GEMM role where the session knows it (a model's shapes), so a
    reader of the manifest sees which layer's GEMM each kernel serves."""
    role = roles.get("x".join(str(d) for d in entry["shape"]))
    return {**entry, "role": role} if role else entry


def build_manifest(view: SessionView, choices: Iterable[Choice], sources: dict[str, str], *,
                   only_accepted: bool, arch: str | None, margin: float = DEFAULT_FALLBACK_MARGIN,
                   dtype: str = "fp16") -> dict:
    from l2tui import __version__
    from l2tui.paths import REPO_ROOT

    gpu = {k: view.gpu.get(k) for k in ("name", "driver", "arch", "uuid")}
    roles = session_roles(view.config)
    return {
        "schema": SCHEMA,
        "created": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "exporter": {"l2tui": __version__, "git_revision": git_revision(REPO_ROOT)},
        "session": {
            "path": str(view.path),
            "git_revision": _session_revision(view),
            "versions": view.versions,
        },
        "gpu": gpu,
        "arch": arch or str(view.gpu.get("arch") or "sm_90a"),
        "driver": str(view.gpu["driver"]) if view.gpu.get("driver") else None,
        "abi": abi_of(dtype),
        "dtype": dtype,
        "only_accepted": only_accepted,
        "fallback_margin": margin,
        "kernels": [_with_role(_entry(view, c, sources[c.sha], margin, dtype), roles) for c in choices],
        "library": None,
    }


def _install(tmp: Path, out: Path) -> None:
    """Move the finished export into place, replacing an old one only now.

    A new folder is one atomic rename.  An existing folder (empty, or an old
    export under ``--force``) keeps its identity, so a shell sitting in it or a
    path someone holds stays valid: its old entries go to a sibling backup,
    the new ones are renamed in (cheap renames, after all the real work), and
    the backup is removed; if a rename fails the old entries are put back.
    """
    if not out.exists():
        os.replace(tmp, out)
        return
    backup = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
    moved_old: list[str] = []
    moved_new: list[str] = []
    try:
        for p in list(out.iterdir()):
            os.replace(p, backup / p.name)
            moved_old.append(p.name)
        for p in list(tmp.iterdir()):
            os.replace(p, out / p.name)
            moved_new.append(p.name)
    except OSError:
        for name in moved_new:
            os.replace(out / name, tmp / name)
        for name in moved_old:
            os.replace(backup / name, out / name)
        shutil.rmtree(backup, ignore_errors=True)
        raise
    tmp.rmdir()
    shutil.rmtree(backup, ignore_errors=True)


def export_session(
    session: str | Path,
    out: str | Path,
    *,
    shapes: Iterable[Shape] | None = None,
    only_accepted: bool = False,
    acc: str = "any",
    force: bool = False,
    build: bool = False,
    arch: str | None = None,
    jobs: int | None = None,
    margin: float = DEFAULT_FALLBACK_MARGIN,
    progress: Callable[[str], None] | None = None,
    dtype: str | None = None,
) -> ExportResult:
    """Write ``out/kernels/M_N_K.cu`` for each shape that runs its kernel + ``out/manifest.json`` (+ C
    dispatcher sources, + the .so with ``build``).

    ``margin``: a kernel is dispatched only where the session measured it faster than every
    cuBLAS-family library by at least this fraction; elsewhere the fallback runs the shape.
    ``dtype``: the element type the export must hold (None: the session's)."""
    margin = check_margin(margin)
    out_p = Path(out).expanduser().resolve()
    view = open_session(session)
    check_target(out_p, force, view.path)
    want = set(shapes) if shapes is not None else None
    sel = select_kernels(view.events, shapes=want, only_accepted=only_accepted, acc=acc)
    if not sel.choices:
        what = "accepted kernels" if only_accepted else "kernels that passed every check and were timed"
        raise ExportError(f"{view.path} has no {what}{' for those shapes' if want else ''}; nothing to export")
    sources = {c.sha: view.get_kernel(c.sha) for c in sel.choices}
    elem = export_dtype(sel.choices, sources, dtype, session_dtype(view))
    from harness.build import DEFAULT_ARCH

    if arch is not None:
        arch = check_arch(arch, "--arch")
    else:
        arch = check_arch(view.gpu.get("arch") or DEFAULT_ARCH, f"{view.path}/session.toml: [gpu] arch")
    arch_flags = gencode(arch)
    manifest = build_manifest(view, sel.choices, sources, only_accepted=only_accepted, arch=arch, margin=margin,
                              dtype=elem)
    for e in manifest["kernels"]:
        cdispatch.check_flags(e["flags"], f"{e['track']} kernel {e['sha256'][:12]}")
        if e["file"]:   # a kernel the library runs; a fallback shape's kernel is neither shipped nor built
            check_policy(sources[e["sha256"]], f"{e['track']} kernel {e['sha256'][:12]}")
    validate(manifest, None)  # names, symbols and shapes are checked before any of them reaches a build file
    try:
        out_p.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out_p.name}.tmp-", dir=out_p.parent))
    except OSError as err:
        raise ExportError(f"cannot write the export to {out_p}: {err.strerror or err}; pick another --out") from None
    library: Path | None = None
    try:
        (tmp / "kernels").mkdir()
        for e in manifest["kernels"]:
            if e["file"]:
                (tmp / e["file"]).write_text(sources[e["sha256"]], encoding="utf-8")
        cdispatch.write_sources(tmp, manifest, arch_flags)
        if build:
            lb = cdispatch.build_library(tmp, manifest, arch=manifest["arch"], jobs=jobs, progress=progress)
            manifest["library"] = {
                "file": cdispatch.LIB_FILE,
                "header": cdispatch.HEADER_FILE,
                "arch": lb.arch,
                "nvcc": lb.nvcc_version,
                "sha256": lb.sha256,
            }
        validate(manifest, None)
        (tmp / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2) + "\n")
        validate(json.loads((tmp / MANIFEST_NAME).read_text()), tmp)
        os.chmod(tmp, 0o755)
        _install(tmp, out_p)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if build:
        library = out_p / cdispatch.LIB_FILE
    skipped = list(view.session.problems) if view.session is not None else []
    return ExportResult(out_p, manifest, [*skipped, *sel.warnings], library)
