"""Turn a measured bench result into an l2tui session that ``l2tui export`` accepts.

    python tools/session_from_bench.py results/h200/kernels-offline.json \
        --kernels DIR --shapes sample100 --out sessions/h200-grid-winners
    l2tui export sessions/h200-grid-winners --out lib --build

Inputs: a result file written by ``l2tui bench`` / ``python -m harness bench`` (schema in
harness/results.py) and the ``--kernels`` folder of ``M_N_K.cu`` files that bench timed.
Output: a session folder written through :class:`l2tui.session.Session`, one track per
shape (``MxNxK-acc``), whose single step (step 0) is the folder's kernel for that shape,
with exactly the numbers of the bench row:

* ``candidate``: origin ``bench-import``, policy ``import``, the kernel file it came from;
* ``checked``: the candidate label's checks (ok, status, failed check, rel. error, bound,
  the per-check details);
* ``timed``: the candidate label's time as ``candidate`` plus every baseline the row timed,
  the roofline, the bench's timing mode (offline / server) and its spread / p90 / clocks;
* ``best`` + ``decision`` (accept, ``by: import``) only when the candidate passed every
  check and was timed; any other shape is recorded as a failed track (never accepted).

No ``compiled``/``reward`` events and no ``rewards.jsonl`` rows: the bench recorded no
compile report and no agent step happened (rl-data must not learn from an import).
``session.toml`` says where the numbers came from (``[config.import]``: bench file, its
sha256, meta.git_rev/date/gpu, the kernels folder, the label), ``versions.git_revision``
is the bench's git_rev and every track carries a ``plan`` line with the same provenance,
so nobody mistakes the folder for an agent run.  No GPU is needed.
"""

from __future__ import annotations

import argparse
import hashlib
import math
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from harness.errors import HarnessError  # noqa: E402
from harness.results import BASELINE_LABELS, ResultFile, load as load_results  # noqa: E402
from harness.shapes import Shape, resolve_shapes  # noqa: E402

ORIGIN = "bench-import"
POLICY = "import"
CANDIDATE = "candidate"  # the label a session's timed events give the kernel
# per-label row entries copied into the timed event (relabelled: the bench label becomes "candidate")
_PER_LABEL = ("p90_ms", "spread", "device_ms", "reps")
_PER_ROW = ("cublas_variant", "autotune", "clocks", "detail_times_ms")


class BenchImportError(HarnessError):
    """A bench file / kernels folder / target that cannot be imported (one-line message)."""


def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) else None


def _relabel(d: Any, label: str) -> dict | None:
    """A per-label dict of the row with the bench label renamed ``candidate`` and other candidates dropped."""
    if not isinstance(d, dict):
        return None
    out = {CANDIDATE if k == label else k: v for k, v in d.items() if k == label or k in BASELINE_LABELS}
    return out or None


def passed_every_check(row: dict, label: str) -> tuple[bool, str, str | None, str]:
    """(ok, status, failed check or None, detail) of ``label`` in a bench row."""
    chk = (row.get("checks") or {}).get(label)
    status = str((row.get("status") or {}).get(label) or ("ok" if isinstance(chk, dict) and chk.get("ok") else "absent"))
    if not isinstance(chk, dict):
        return False, status if status != "ok" else "absent", None, f"no checks recorded for {label}"
    failed = chk.get("failed")
    detail = str(chk.get("detail") or "")
    sub_bad = [name for name, c in (chk.get("checks") or {}).items() if isinstance(c, dict) and c.get("ok") is False]
    ok = chk.get("ok") is True and status == "ok" and not sub_bad and not failed
    if not ok and status == "ok":
        status = "wrong"
    if not ok and failed is None and sub_bad:
        failed = sub_bad[0]
    return ok, status, failed, detail


def _kernel_files(folder: Path) -> dict[Shape, Path]:
    from harness.bench import load_kernels

    return load_kernels(str(folder))


def _rel(p: Path) -> str:
    """A path relative to the repository when it lies inside it (portable provenance), else absolute."""
    a = p.absolute()
    try:
        return str(a.relative_to(ROOT))
    except ValueError:
        return str(a)


def _git_head() -> str | None:
    from l2tui.export.core import git_revision

    return git_revision(ROOT)


def build_session(bench: str | Path, kernels: str | Path, out: str | Path, *, shapes: list[str] | None = None,
                  label: str = "l2", baseline: str = "cublas", force: bool = False,
                  log=None) -> dict[str, Any]:
    """Write the session folder ``out``; returns a summary dict (tracks, accepted, failed, skipped)."""
    from l2tui import __version__
    from l2tui.session import Session

    say = log or (lambda msg: print(msg, file=sys.stderr))
    bench_p, kern_p, out_p = Path(bench), Path(kernels), Path(out)
    rf: ResultFile = load_results(bench_p)
    meta = rf.meta
    labels = rf.labels()
    if label not in labels:
        cands = [lb for lb in labels if lb not in BASELINE_LABELS]
        raise BenchImportError(f"{bench_p}: no candidate label {label!r} in its rows"
                           f" (candidate labels: {', '.join(cands) or 'none'}); pass --label")
    if baseline not in BASELINE_LABELS:
        raise BenchImportError(f"--baseline {baseline!r} is not a baseline: use one of {', '.join(BASELINE_LABELS)}")
    acc = str(meta.get("acc") or "f32")
    mode = str(meta.get("mode") or "offline")
    files = _kernel_files(kern_p)
    rows = {Shape(r["m"], r["n"], r["k"]): r for r in rf.rows}
    if shapes:
        want = resolve_shapes(shapes)
        missing = [s for s in want if s not in rows]
        if missing:
            say(f"session_from_bench: {len(missing)} of {len(want)} requested shapes are not in {bench_p} "
                f"(e.g. {missing[0]}); skipped")
        order = [s for s in want if s in rows]
    else:
        order = list(rows)
    if not order:
        raise BenchImportError(f"{bench_p} has no rows for those shapes; nothing to import")
    # a kernel the bench timed must be in the folder: otherwise --kernels is not the folder bench timed
    lacking = [s for s in order if s not in files and (rows[s].get("times_ms") or {}).get(label) is not None]
    if lacking:
        raise BenchImportError(f"{kern_p} has no {lacking[0].m}_{lacking[0].n}_{lacking[0].k}.cu although {bench_p} "
                           f"timed {label} on that shape ({len(lacking)} such shape(s)); pass the folder the bench timed")
    sources: dict[Shape, str] = {}
    for shape in order:
        if shape in files:
            sources[shape] = _read_kernel(files[shape], acc)
    _check_target(out_p, force)

    bench_sha = hashlib.sha256(bench_p.read_bytes()).hexdigest()
    provenance = {
        "tool": "tools/session_from_bench.py",
        "origin": ORIGIN,
        "bench_file": _rel(bench_p),
        "bench_sha256": bench_sha,
        "bench_git_rev": meta.get("git_rev"),
        "bench_date": meta.get("date"),
        "bench_mode": mode,
        "bench_method": meta.get("method"),
        "bench_checks": meta.get("checks"),
        "bench_complete": meta.get("complete"),
        "bench_candidates": meta.get("candidates") or {},
        "bench_shapes": meta.get("shapes"),
        "kernels_dir": _rel(kern_p),
        "label": label,
        "shapes": list(shapes or []),
        "note": "imported from a measured bench result; not an agent run (no LLM, no search)",
    }
    config = {
        "import": provenance,
        "harness": {"baselines": [b for b in meta.get("baselines") or BASELINE_LABELS if b in BASELINE_LABELS],
                    "baseline": baseline, "mode": mode, "arch": meta.get("arch")},
        "loop": {"acc": acc, "max_steps": 0},
    }
    gpu = {"name": meta.get("gpu"), "driver": meta.get("driver"), "arch": meta.get("arch"),
           "uuid": meta.get("gpu_uuid"), "cuda_driver": meta.get("cuda_driver")}
    versions = {"l2tui": __version__, "git_revision": meta.get("git_rev"), "bench_date": meta.get("date"),
                "cuda": meta.get("cuda"), "nvcc": meta.get("nvcc"), "cupy": meta.get("cupy"),
                "importer_git_revision": _git_head()}
    if meta.get("complete") is False:
        say(f"session_from_bench: note: {bench_p} is an incomplete bench run (meta.complete = false)")

    out_p.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_p.name}.tmp-", dir=out_p.parent))
    summary: dict[str, Any] = {"out": str(out_p), "tracks": 0, "accepted": [], "failed": [], "no_kernel": []}
    try:
        s = Session.create(tmp, config=config, gpu=gpu, versions=versions)
        tracks: list[tuple[str, Shape]] = []
        for shape in order:
            tid = f"{shape.m}x{shape.n}x{shape.k}-{acc}"
            s.append("track_added", track=tid, shape=[shape.m, shape.n, shape.k], acc=acc, baseline=baseline)
            s.append("track_state", track=tid, state="queued")
            tracks.append((tid, shape))
        for tid, shape in tracks:
            outcome = _import_track(s, tid, shape, rows[shape], files.get(shape), sources.get(shape), label,
                                    baseline, mode, acc, provenance)
            summary[outcome].append(tid)
            summary["tracks"] += 1
        s.append("session_ended", reason=f"imported from bench result {provenance['bench_file']}")
        _install(tmp, out_p)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return summary


def _read_kernel(kfile: Path, acc: str) -> str:
    """A kernel's source; one that declares another accumulator than the bench ran is not the one it timed."""
    from harness.families import declared_acc

    try:
        source = kfile.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise BenchImportError(f"cannot read kernel file {kfile}: {e}") from None
    if "// l2: acc=" in source and declared_acc(source) != acc:
        raise BenchImportError(f"{kfile} declares acc={declared_acc(source)} but the bench ran acc={acc}: "
                               "pass the folder the bench timed")
    return source


def _import_track(s, tid: str, shape: Shape, row: dict, kfile: Path | None, source: str | None, label: str,
                  baseline: str, mode: str, acc: str, prov: dict) -> str:
    """Events of one track; returns "accepted", "failed" or "no_kernel"."""
    from harness.families import family_of

    s.append("track_state", track=tid, state="running")
    where = f"bench {prov['bench_file']} (rev {prov['bench_git_rev']}, {prov['bench_date']}, {mode}, label {label})"
    if kfile is None or source is None:
        st = str((row.get("status") or {}).get(label) or "absent")
        msg = f"{label} has no kernel for {shape} in {prov['kernels_dir']} (bench status {st}); nothing imported"
        s.append("error", track=tid, message=msg)
        s.append("track_state", track=tid, state="failed")
        s.append("track_done", track=tid, reason=f"bench-import: {st}", best_sha=None, best_speedup=None)
        return "no_kernel"
    sha = s.put_kernel(source)
    fam = family_of(source)
    target = os.readlink(kfile) if kfile.is_symlink() else None
    s.append("plan", track=tid, step=0, role="import",
             text=f"imported, not generated: {_rel(kfile)}{' -> ' + target if target else ''} as measured by {where}")
    s.append("candidate", track=tid, step=0, sha=sha, parent=None, origin=ORIGIN, policy=POLICY,
             family=fam.name if fam else None, diff="", flags=[], file=_rel(kfile), link=target,
             bench_file=prov["bench_file"], bench_label=label)
    ok, status, failed, detail = passed_every_check(row, label)
    chk = (row.get("checks") or {}).get(label) or {}
    rel_err = _num(chk.get("rel_err"))
    bound = _num(chk.get("bound"))
    if bound is None:
        bound = _num(row.get("bound"))
    s.append("checked", track=tid, step=0, sha=sha, ok=ok, status=status, failed=failed,
             detail=detail or ("all checks passed" if ok else status), rel_err=rel_err, bound=bound,
             checks=chk.get("checks") or {}, source=ORIGIN)
    times = row.get("times_ms") or {}
    cand_ms = _num(times.get(label))
    speedup = None
    timed = False
    if cand_ms and cand_ms > 0:
        tm: dict[str, float] = {CANDIDATE: cand_ms}
        for lb, v in times.items():
            if lb in BASELINE_LABELS and _num(v) and v > 0:
                tm[lb] = float(v)
        if tm.get(baseline):
            speedup = tm[baseline] / cand_ms
        extra = {k: _relabel(row.get(k), label) for k in _PER_LABEL if _relabel(row.get(k), label)}
        extra.update({k: row[k] for k in _PER_ROW if row.get(k) not in (None, {}, [])})
        s.append("timed", track=tid, step=0, sha=sha, mode=mode, times_ms=tm, roofline_ms=_num(row.get("roofline_ms")),
                 baseline=baseline, speedup=speedup, source=ORIGIN, **extra)
        timed = True
        best_times = tm
    if ok and timed:
        s.append("best", track=tid, sha=sha, speedup=speedup, baseline=baseline, times_ms=best_times)
        s.append("decision", track=tid, sha=sha, action="accept", by=POLICY)
        s.append("track_state", track=tid, state="done")
        s.append("track_done", track=tid, reason="bench-import", best_sha=sha, best_speedup=speedup)
        return "accepted"
    why = status if not ok else "not timed"
    s.append("error", track=tid, message=f"bench-import: {label} on {shape} {why}"
             f"{': ' + str(failed) if failed else ''}; recorded, not accepted")
    s.append("track_state", track=tid, state="failed")
    s.append("track_done", track=tid, reason=f"bench-import: {why}", best_sha=None, best_speedup=None)
    return "failed"


def _is_import(p: Path) -> bool:
    """Whether ``p`` holds a session this tool wrote (only such a folder may be replaced)."""
    try:
        from l2tui.export.sessionio import open_session

        return open_session(p).config.get("import", {}).get("origin") == ORIGIN
    except HarnessError:
        return False


def _check_target(out: Path, force: bool) -> None:
    if out.exists() and not out.is_dir():
        raise BenchImportError(f"{out} exists and is not a folder; pick another --out")
    if out.is_dir() and any(out.iterdir()):
        if not force:
            raise BenchImportError(f"{out} is not empty; pass --force to replace an earlier import or pick another --out")
        if not _is_import(out):
            raise BenchImportError(f"{out} is not empty and is not a session imported by this tool; --force only replaces those")


def _install(tmp: Path, out: Path) -> None:
    """Rename the finished session into place (an old import under --force goes only now)."""
    if out.is_dir() and not any(out.iterdir()):
        out.rmdir()
    if not out.exists():
        os.replace(tmp, out)
        return
    backup = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
    os.replace(out, backup / out.name)
    try:
        os.replace(tmp, out)
    except OSError:
        os.replace(backup / out.name, out)
        raise
    finally:
        shutil.rmtree(backup, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(__doc__.splitlines()[1:6]))
    ap.add_argument("bench", metavar="BENCH.json", help="result file written by l2tui bench / python -m harness bench")
    ap.add_argument("--kernels", required=True, metavar="DIR", help="the folder of M_N_K.cu kernels that bench timed")
    ap.add_argument("--out", required=True, metavar="SESSION", help="session folder to write (new or empty)")
    ap.add_argument("--shapes", action="append", metavar="SPEC",
                    help="only these shapes (grid, small, sample100, MxNxK, a shapes file); repeatable; "
                         "default: every row of the bench file")
    ap.add_argument("--label", default="l2", help="candidate label of the kernels in the bench file (default l2)")
    ap.add_argument("--baseline", default="cublas", help="the tracks' reward baseline (default cublas)")
    ap.add_argument("--force", action="store_true", help="replace an earlier session written by this tool")
    args = ap.parse_args(argv)
    try:
        res = build_session(args.bench, args.kernels, args.out, shapes=args.shapes, label=args.label,
                            baseline=args.baseline, force=args.force)
    except HarnessError as e:
        print(f"session_from_bench: error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {res['out']}: {res['tracks']} track(s), {len(res['accepted'])} accepted "
          f"(passed every check and timed), {len(res['failed'])} failed, "
          f"{len(res['no_kernel'])} without a kernel; next: l2tui export {res['out']} --out DIR [--build]")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
