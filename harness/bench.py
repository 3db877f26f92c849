"""``bench``: check and time baselines (and candidate kernels) on many shapes, headless.

    l2tui bench --shapes grid --baselines cublas,cublaslt_heuristic,cublaslt_autotune,torch
    l2tui bench --kernels DIR --shapes sample100 --mode server --out results.json

One request per shape to the GPU worker (buffers allocated once per shape, all
subjects interleaved); progress on stderr; a summary table on stdout; a JSON
result file (harness.results schema) with a CSV beside it, checkpointed as it goes.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from . import roofline
from .baselines import BASELINES, parse_baselines
from .errors import HarnessError, KernelSourceError
from .foreign_sets import ForeignSets
from .results import BASELINE_LABELS, DTYPES, ResultFile, save
from .shapes import MAX_ROLE_CHARS, Shape, parse_accumulator, parse_shape, resolve_shapes, shape_roles
from .stats import geomean, speedup
from .timing import DEFAULT_TIMING, MODE_LABELS, TIMINGS

METHOD_ISOLATED = ("offline, per call: per subject a CUDA graph of R steps, each an ordinary one-thread kernel that "
                   "changes one element of A (the separator; not the subject, not PDL-aware), the call, and a row "
                   "verification of its C; a base graph of R separator+verification steps replayed in the same "
                   "rounds is subtracted round by round (R the same for all subjects, so one replay >= 1 ms); one "
                   "warm-up replay, then {replays} rounds with graphs in random order, each replay timed with CUDA "
                   "events; median per call; every timed call verified; each candidate's graph has a twin whose "
                   "steps also flip the signs of a random half of A before the call (the fresh check's dense "
                   "part), replayed in the same rounds and not part of any time")
METHOD_CHAINED = ("offline, back to back: per subject a CUDA graph of R back-to-back calls (R so one replay >= 1 ms), "
                  "one warm-up replay, then {replays} rounds with subjects in random order, each replay timed "
                  "with CUDA events; median per call (call i+1 may overlap call i when launched with PDL: a "
                  "pipeline figure)")
METHOD_COMMON = ("; cublas = best of NN and TN (TN reads a column-major copy of B made outside the timed region); "
                 "cuBLASLt through C entry points of the baseline shim; cublaslt_autotune = fastest of up to 100 "
                 "cuBLASLt heuristic candidates screened with the headline's method (3 replays of >= 0.2 ms, 80 ms "
                 "of screening per shape, at least 4)")
METHOD_SERVER = ("server: one Poisson arrival process at {qps} QPS shared by all subjects (random interleaving), "
                 "{calls} calls per subject, each timed on the host from the call to stream completion "
                 "(CUDA events give device time); before each call one element of A changes and, on a random half "
                 "of the calls, C is poisoned (untimed); every call verified on sampled rows after it; every "
                 "subject called through a C entry point by the same ctypes caller except torch.matmul (the "
                 "framework path); median and p90 of host latency")


def method_text(mode: str, timing: str, replays: int, qps: float, calls: int) -> str:
    """What a result file's ``meta.method`` says about how its figures were made."""
    if mode == "server":
        return METHOD_SERVER.format(qps=qps, calls=calls)
    parts = {"isolated": [METHOD_ISOLATED], "chained": [METHOD_CHAINED],
             "both": [METHOD_ISOLATED, "times_ms_chained: " + METHOD_CHAINED]}[timing]
    return "; ".join(x.format(replays=replays) for x in parts) + METHOD_COMMON


CHECKPOINT_EVERY = 25


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--shapes", "--shape", dest="shapes", action="append", metavar="SPEC",
                   help="grid, small, sample100, MxNxK or a shapes file (repeatable; default: sample100, "
                        "or the shapes of --kernels)")
    p.add_argument("--mode", choices=("offline", "server"), default="offline", help="timing method (default offline)")
    p.add_argument("--timing", choices=TIMINGS, default=DEFAULT_TIMING,
                   help="offline mode: isolated = per call, each call after an unrelated kernel (default, the "
                        "headline); chained = back to back (a pipeline figure); both = each subject both ways in "
                        "the same rounds (times_ms per call, times_ms_chained back to back)")
    p.add_argument("--acc", default="f32", help="accumulator: f32 (default) or f16")
    p.add_argument("--dtype", choices=DTYPES, default="fp16",
                   help="element type of A, B and C: fp16 (default) or bf16 (f32 accumulation only)")
    p.add_argument("--baselines", default=",".join(BASELINES),
                   help=f"comma separated: {', '.join(BASELINES)}, all or none (default all)")
    p.add_argument("--kernels", metavar="DIR", action="append",
                   help="directory of candidate kernels named M_N_K.cu (repeatable: several sets are checked and timed "
                        "side by side, interleaved with the baselines in the same rounds)")
    p.add_argument("--label", action="append",
                   help="label of the --kernels candidates in results, one per --kernels in the same order "
                        "(default candidate, for a single set)")
    p.add_argument("--abi", action="append", metavar="NAME",
                   help="calling convention of the --kernels files, one per --kernels in the same order: l2 (ours, "
                        "the default) or cuda-l2 (the CUDA-L2 release's files, run through a shim; docs/h100.md)")
    p.add_argument("--out", metavar="FILE", help="result JSON (CSV written beside it); default bench-<mode>-<acc>-<time>.json")
    p.add_argument("--arch", help="build target, e.g. sm_90a or sm_80 (default: the GPU's)")
    p.add_argument("--seed", type=int, default=0, help="seed for interleaving order (default 0)")
    p.add_argument("--checks", choices=("full", "fast"), default="fast",
                   help="checks of BASELINES: fast (one seed + graph replay, default) or full; candidates always get all")
    p.add_argument("--limit-seconds", type=float, default=None, metavar="S",
                   help="stop starting new shapes after S seconds and write what is done")
    p.add_argument("--qps", type=float, default=100.0, help="server mode: target calls per second (default 100)")
    p.add_argument("--server-calls", type=int, default=20, help="server mode: calls per subject per shape (default 20)")
    p.add_argument("--replays", type=int, default=7, help="offline mode: timed replays per subject (>= 7, default 7)")
    p.add_argument("--timeout", type=float, default=120.0, help="base per-shape timeout in seconds (default 120)")
    p.add_argument("--device", type=int, default=None, help="GPU index (default: CUDA_VISIBLE_DEVICES / 0)")


def bench_dtype(dtype: str, acc: str) -> str:
    """The element type a bench runs in; bf16 accumulates in f32 only."""
    if dtype not in DTYPES:
        raise HarnessError(f"unknown --dtype {dtype!r}: use one of {', '.join(DTYPES)}")
    if dtype == "bf16" and acc == "f16":
        raise HarnessError("--dtype bf16 accumulates in f32 only: f16 accumulation is an fp16 option")
    return dtype


def read_sources(paths: list[Path], dtype: str) -> list[str]:
    """The kernel files' text; one that defines the other element type's entry point is refused
    in one line naming the file: it would read its inputs as the wrong numbers, so nothing is
    built or run. A file with no entry point at all is left to the build to report per shape."""
    from .build import check_abi, source_dtype

    sources = []
    for path in paths:
        try:
            text = path.read_text()
        except (OSError, UnicodeDecodeError) as e:
            raise KernelSourceError(f"cannot read kernel file {str(path)!r}: {e}") from None
        if "l2_hgemm" in text and source_dtype(text) != dtype:
            try:
                check_abi(text, dtype)
            except KernelSourceError as e:
                raise KernelSourceError(f"{path}: {e}") from None
        sources.append(text)
    return sources


def _command_line() -> str:
    """The command that made a result file, as a user would type it again."""
    import os
    import shlex

    argv = list(sys.argv)
    prog = os.path.basename(argv[0]) if argv else "bench"
    if prog in ("__main__.py", "-m", "cli.py"):
        # `python -m l2tui ...` is the l2tui command; `python -m harness ...` the harness's
        pkg = os.path.basename(os.path.dirname(argv[0])) if prog != "-m" else ""
        prog = "l2tui" if pkg == "l2tui" else "python -m harness"
    return " ".join([prog, shlex.join(argv[1:])]).strip()


def _git_rev() -> str:
    """The checkout's revision; ``$L2TUI_GIT_REV`` wins (a copy of the tree without .git)."""
    import os

    if os.environ.get("L2TUI_GIT_REV"):
        return os.environ["L2TUI_GIT_REV"]
    try:
        rev = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True, timeout=10)
        if rev.returncode != 0:
            return "unknown"
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                               text=True, timeout=10)
        return rev.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"


def load_kernels(dirname: str) -> dict[Shape, Path]:
    """``M_N_K.cu`` files of a directory, by shape."""
    d = Path(dirname)
    if not d.is_dir():
        raise KernelSourceError(f"--kernels {dirname!r} is not a directory: give a folder of M_N_K.cu files")
    if (d / "events.jsonl").is_file():
        raise HarnessError(f"{dirname!r} is a session: export its kernels first (l2tui export), then bench that folder")
    out: dict[Shape, Path] = {}
    for f in sorted(d.glob("*.cu")):
        try:
            out[parse_shape(f.stem)] = f
        except HarnessError:
            continue
    if not out:
        raise KernelSourceError(f"no kernel files named M_N_K.cu in {dirname!r}")
    return out


class Progress:
    """Plain-text progress on stderr: a rewriting line on a TTY, periodic lines otherwise."""

    def __init__(self, total: int, stream: Any = None) -> None:
        self.total = total
        self.out = stream or sys.stderr
        self.tty = bool(getattr(self.out, "isatty", lambda: False)())
        self.t0 = time.monotonic()
        self.last = 0.0

    def update(self, done: int, note: str = "") -> None:
        now = time.monotonic()
        el = now - self.t0
        eta = el / done * (self.total - done) if done else 0.0
        width = 24
        fill = int(width * done / max(1, self.total))
        line = f"[{'#' * fill}{'.' * (width - fill)}] {done}/{self.total} {el:5.0f}s eta {eta:4.0f}s {note}"
        if self.tty:
            self.out.write("\r" + line[:160].ljust(160))
            self.out.flush()
        elif done == self.total or now - self.last >= 10 or done == 1:
            self.out.write(line + "\n")
            self.out.flush()
            self.last = now

    def finish(self) -> None:
        if self.tty:
            self.out.write("\n")
            self.out.flush()


def summary_table(rf: ResultFile) -> str:
    """Geomean speedups of each candidate over each baseline and fraction of roofline, by size class."""
    labels = rf.labels()
    cands = [lb for lb in labels if lb not in BASELINE_LABELS]
    bases = [lb for lb in labels if lb in BASELINE_LABELS]
    classes = ("small", "mid", "big", "all")

    def rows_of(cls: str) -> list[dict[str, Any]]:
        return [r for r in rf.rows if cls == "all" or Shape(r["m"], r["n"], r["k"]).size_class == cls]

    lines = [f"element type {rf.dtype} (A, B and C), {rf.meta.get('acc') or 'f32'} accumulation"]
    head = f"{'':34}" + "".join(f"{c:>10}" for c in classes)
    lines.append(head)
    lines.append(f"{'shapes':34}" + "".join(f"{len(rows_of(c)):>10}" for c in classes))
    pairs = [(c, b) for c in cands for b in bases] or [(b, "cublas") for b in bases if b != "cublas" and "cublas" in bases]
    for num, den in pairs:
        cells = []
        for cls in classes:
            g = geomean(speedup(r["times_ms"].get(den), r["times_ms"].get(num)) for r in rows_of(cls))
            cells.append(f"{g:>9.3f}x" if g else f"{'-':>10}")
        lines.append(f"{(num + ' vs ' + den)[:33]:34}" + "".join(cells))
    for lb in labels:
        cells = []
        for cls in classes:
            g = geomean([r["roofline_ms"] / r["times_ms"][lb] for r in rows_of(cls)
                         if r["times_ms"].get(lb) and r.get("roofline_ms")])
            cells.append(f"{100 * g:>9.1f}%" if g else f"{'-':>10}")
        lines.append(f"{('roofline fraction ' + lb)[:33]:34}" + "".join(cells))
    bad: dict[str, dict[str, int]] = {}
    for r in rf.rows:
        for lb, st in (r.get("status") or {}).items():
            if st not in ("ok", "absent"):
                bad.setdefault(lb, {}).setdefault(st, 0)
                bad[lb][st] += 1
    for lb, d in bad.items():
        lines.append(f"not ok: {lb}: " + ", ".join(f"{v} {k}" for k, v in sorted(d.items())))
    skinny = roofline.b_floor_table(rf.rows, rf.meta.get("roofline"), labels)
    lines += [""] + skinny if skinny else []
    return "\n".join(lines)


def _row_from(res: dict[str, Any], shape: Shape) -> dict[str, Any]:
    row = {"m": shape.m, "n": shape.n, "k": shape.k, "times_ms": res["times_ms"], "roofline_ms": res.get("roofline_ms"),
           "checks": res["checks"], "status": res["status"], "size_class": shape.size_class}
    for key in ("spread", "p90_ms", "device_ms", "reps", "detail_times_ms", "cublas_variant", "bound", "autotune",
                "clocks", "absent", "errors", "seconds", "phases", "times_ms_chained", "spread_chained",
                "separator_ms", "charged_alone"):
        if res.get(key) not in (None, {}, []):
            row[key] = res[key]
    return row


def with_role(row: dict[str, Any], role: str | None) -> dict[str, Any]:
    """Name the row's shape by its role (a model's GEMM: ``llama-3-8b qkv t16``), where known."""
    text = " ".join((role or "").split())
    if text:
        row["role"] = text if len(text) <= MAX_ROLE_CHARS else text[:MAX_ROLE_CHARS - 1] + "…"
    return row


def _mark(row: dict[str, Any], label: str, status: str, message: str) -> None:
    """Record that ``label``'s kernel has no time on this row, and why."""
    row["times_ms"][label] = None
    row["status"][label] = status
    row["checks"][label] = {"ok": False, "failed": status, "detail": message}


def _failed_row(shape: Shape, labels: list[str], status: str, message: str) -> dict[str, Any]:
    return {"m": shape.m, "n": shape.n, "k": shape.k, "times_ms": {lb: None for lb in labels}, "roofline_ms": None,
            "checks": {lb: {"ok": False, "failed": status, "detail": message} for lb in labels},
            "status": {lb: status for lb in labels}, "size_class": shape.size_class}


def candidate_sets(kernels: list[str] | str | None, labels: list[str] | str | None) -> list[tuple[str, str]]:
    """(label, directory) per candidate set, from the repeatable ``--kernels`` / ``--label`` pair.

    Why several: comparing two winners of a shape in two bench runs mixes their difference with
    the GPU's drift between runs (a few per cent per shape on the H200, more on power-bound
    shapes); in one run they share every round and every clock state.
    """
    dirs = [kernels] if isinstance(kernels, str) else list(kernels or [])
    names = [labels] if isinstance(labels, str) else list(labels or [])
    if not dirs:
        if names:
            raise HarnessError("--label names the candidates of --kernels: give --kernels DIR too")
        return []
    if not names and len(dirs) == 1:
        names = ["candidate"]
    if len(names) != len(dirs):
        raise HarnessError(f"give one --label per --kernels ({len(dirs)} --kernels, {len(names)} --label)")
    if len(set(names)) != len(names):
        raise HarnessError(f"--label values must differ: {', '.join(names)}")
    clash = [n for n in names if n in BASELINE_LABELS]
    if clash:
        raise HarnessError(f"--label {clash[0]!r} is a baseline's name: choose another")
    return list(zip(names, dirs))


def _build_sets(wanted: list[tuple[Shape, str, Path]], sources: list[str], arch: str,
                foreign: ForeignSets | None = None) -> tuple[dict[Shape, list[dict[str, Any]]], dict[tuple[Shape, str], str]]:
    """Build every distinct candidate source once, in parallel (``sources[i]`` is ``wanted[i]``'s
    text, read and checked by :func:`read_sources`): per shape, the candidates that built (as the
    worker takes them), and the first error of each that did not."""
    from . import build as buildmod
    from .evaluate import is_nondeterministic, uses_pdl

    so_for: dict[Shape, list[dict[str, Any]]] = {}
    build_fail: dict[tuple[Shape, str], str] = {}
    if not wanted:
        return so_for, build_fail
    print(f"bench: building {len(set(sources))} kernel source(s) for {arch} ...", file=sys.stderr)
    if foreign is not None:   # kernels of another ABI (harness.foreign) build with their adapter's flags
        return foreign.build_sets(wanted, sources, arch)
    results = buildmod.build_many(sources, arch=arch)
    for (s, label, _), src, br in zip(wanted, sources, results):
        if br is not None and br.ok:
            so_for.setdefault(s, []).append({"label": label, "so_path": str(br.so_path),
                                             "nondeterministic": is_nondeterministic(src), "pdl": uses_pdl(src)})
        else:
            build_fail[(s, label)] = str(br.errors[0]) if br is not None and br.errors else "compile error"
    return so_for, build_fail


def main(args: argparse.Namespace) -> int:
    from . import build as buildmod
    from .evaluate import Evaluator
    from .gpuinfo import require_gpu
    from .worker import WorkerError

    acc = parse_accumulator(args.acc)
    baselines = parse_baselines(args.baselines)
    if args.replays < 7:
        raise HarnessError("--replays must be at least 7")
    pairs = candidate_sets(args.kernels, args.label)
    sets = [(label, load_kernels(d)) for label, d in pairs]
    all_shapes = sorted({s for _, ks in sets for s in ks})
    if args.shapes:
        shapes = resolve_shapes(args.shapes)
    elif sets:
        shapes = all_shapes
    else:
        shapes = resolve_shapes(None)
    if not baselines and not sets:
        raise HarnessError("nothing to time: give --kernels DIR or at least one baseline")
    dtype = bench_dtype(args.dtype, acc)
    wanted = [(s, label, ks[s]) for s in shapes for label, ks in sets if s in ks]
    foreign = ForeignSets(pairs, getattr(args, "abi", None), acc)   # --abi: harness.foreign
    sources = foreign.read_sources(wanted, dtype, read_sources)
    gpu = require_gpu(args.device or 0)
    arch = args.arch or gpu.arch
    so_for, build_fail = _build_sets(wanted, sources, arch, foreign if foreign.active else None)

    tag = f"{acc}-bf16" if dtype == "bf16" else acc
    out = Path(args.out) if args.out else Path(
        f"bench-{args.mode}-{tag}-{_dt.datetime.now(_dt.timezone.utc).strftime('%Y%m%dT%H%M%S')}.json")
    t0 = time.monotonic()
    timing = getattr(args, "timing", None) or DEFAULT_TIMING
    with Evaluator(arch=arch, baselines=baselines, mode=args.mode, timeout_s=args.timeout, checks=args.checks,
                   seed=args.seed, device=args.device, qps=args.qps, server_calls=args.server_calls,
                   replays=args.replays, timing=timing, dtype=dtype) as ev:
        _ = ev.shim
        try:
            info = ev.gpu_info()
            rfl = ev.worker.call("roofline", timeout_s=300, shim_path=str(ev.shim.so_path))
        except WorkerError as e:
            msg = str(e)
            if "no NVIDIA GPU found" in msg:
                raise HarnessError("no NVIDIA GPU found: " + msg.split("no NVIDIA GPU found:", 1)[1].strip()) from None
            raise
        method = method_text(args.mode, timing, args.replays, args.qps, args.server_calls)
        meta = {
            "gpu": info.get("name"), "driver": info.get("driver") or gpu.driver, "cuda": info.get("cuda_runtime"),
            "cuda_driver": info.get("cuda_driver"), "nvcc": buildmod.nvcc_version(),
            "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), "git_rev": _git_rev(),
            "mode": args.mode, "acc": acc, "dtype": dtype, "method": method, "gpu_uuid": info.get("uuid"), "arch": arch,
            "timing": timing if args.mode == "offline" else "server",
            "mode_label": MODE_LABELS["server" if args.mode == "server" else ("chained" if timing == "chained" else "isolated")],
            "command": _command_line(),
            "baselines": baselines, "candidates": dict(pairs), **foreign.meta(),
            "checks": args.checks, "seed": args.seed,
            "shapes": args.shapes or (["--kernels"] if sets else ["sample100"]),
            "roofline": rfl, "cupy": info.get("cupy"), "complete": False,
        }
        rf = ResultFile(meta, [])
        try:
            stopped = _run_shapes(args, ev, shapes, acc, baselines, sets, so_for, build_fail, rf, out, t0,
                                  roles=shape_roles(args.shapes) if args.shapes else {})
        except KeyboardInterrupt:
            rf.meta["elapsed_s"] = round(time.monotonic() - t0, 1)
            if rf.rows:
                save(rf, out)
                print(f"bench: interrupted; {len(rf.rows)} shapes written to {out}", file=sys.stderr)
            raise
    rf.meta["complete"] = not stopped
    rf.meta["elapsed_s"] = round(time.monotonic() - t0, 1)
    rf.meta["worker_starts"] = ev.worker.starts
    jp, cp_ = save(rf, out)
    print(summary_table(rf))
    print(f"bench ({dtype}): {len(rf.rows)} of {len(shapes)} shapes in {rf.meta['elapsed_s']:.0f} s"
          f"{' (stopped by --limit-seconds)' if stopped else ''}; wrote {jp} and {cp_}")
    return 0


def _run_shapes(args: argparse.Namespace, ev: Any, shapes: list[Shape], acc: str, baselines: list[str],
                sets: list[tuple[str, dict[Shape, Path]]], so_for: dict[Shape, list[dict[str, Any]]],
                build_fail: dict[tuple[Shape, str], str], rf: ResultFile, out: Path, t0: float,
                roles: dict[Shape, str] | None = None) -> bool:
    """One request per shape; returns True when --limit-seconds stopped it early. ``roles``: what
    each shape is for (a model's GEMM roles), kept in its row."""
    from .worker import WorkerError

    prog = Progress(len(shapes))
    stopped = False
    for i, shape in enumerate(shapes):
        if args.limit_seconds is not None and time.monotonic() - t0 > args.limit_seconds:
            stopped = True
            break
        cands = so_for.get(shape, [])
        try:
            # a candidate that crashes or hangs the worker is charged alone (Evaluator.run_shape)
            row = _row_from(ev.run_shape(shape, acc, cands, baselines), shape)
        except WorkerError as e:
            st = "timeout" if e.kind == "timeout" else "crashed"
            row = _failed_row(shape, baselines + [c["label"] for c in cands], st, str(e).splitlines()[0][:300])
        if cands:
            row["pdl"] = {c["label"]: bool(c.get("pdl")) for c in cands}
        for label, ks in sets:
            if (shape, label) in build_fail:
                _mark(row, label, "compile_error", build_fail[(shape, label)][:300])
            elif shape not in ks:
                row["times_ms"].setdefault(label, None)
                row["status"][label] = "absent"
        with_role(row, (roles or {}).get(shape))
        rf.rows.append(row)
        note = f"{shape}"
        t = row["times_ms"]
        if t.get("cublas"):
            note += f" cublas {t['cublas']:.4g}ms"
        for label, _ in sets:
            if t.get(label):
                note += f" {label} {t[label]:.4g}ms"
        prog.update(i + 1, note)
        if (i + 1) % CHECKPOINT_EVERY == 0:
            rf.meta["elapsed_s"] = round(time.monotonic() - t0, 1)
            save(rf, out)
    prog.finish()
    return stopped
