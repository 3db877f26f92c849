"""Record real ncu outputs on a GPU: test fixtures, the prior profile body, error texts.

``python -m harness.profiling.record --out DIR --so-dir DIR_WITH_SO [--budget-s 200]``
is what produced ``tests/fixtures/ncu/`` and ``data/prior_profiles.json`` on the
H200 (see ``data/README.md``).  Re-run it on another GPU to make a prior body
for that GPU (point ``Classifier.from_prior(path)`` at the result).

The ``.so`` folder must hold ``naive.so``, ``tiled.so``, ``splitk.so`` (built from
``harness/profiling/kernels/*.cu``) and optionally ``cublas.so`` (the cuBLAS
shim); missing ones are skipped.  Raw and details CSV of every ncu run are kept
verbatim; the body is derived from them.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from functools import partial
from pathlib import Path
from typing import Mapping, Protocol, TypedDict

from ..errors import HarnessError
from ..shapes import sample100
from .items import LaunchItem
from .metrics import aggregate, fmt_value
from .ncu import NcuRun, find_ncu, ncu_version, profile_command, run_ncu, choose_sections
from .parse import KernelRecord, Metric, merge, parse_details, parse_raw, split_by_range
from .verdict import Classifier


class Call(TypedDict):
    """One profiled call of a recording: its NVTX range, what was called, and what ncu measured."""

    range: str
    label: str
    shape: list[int]
    kernels: list[KernelRecord]
    metrics: dict[str, Metric]


class ManifestEntry(TypedDict, total=False):
    """A manifest's line for one range: what was called, then the driver's status for it."""

    label: str
    shape: list[int]
    kind: str
    status: str
    message: str


class CsvPages(Protocol):
    """The two CSV pages of an ncu report: an :class:`NcuRun`, or a recorded folder's files."""

    raw_csv: str
    details_csv: str

FIXTURES: list[tuple[str, str, tuple[int, int, int]]] = [
    ("torch", "torch", (64, 64, 64)),                  # tiny: launch-bound
    ("cublas", "so:cublas", (128, 128, 128)),          # tiny through the ABI shim
    ("torch", "torch", (64, 16384, 16384)),            # skinny: streams B once, bandwidth-bound
    ("cublas", "so:cublas", (16384, 64, 4096)),        # skinny the other way
    ("cublas", "so:cublas", (8192, 8192, 8192)),       # big: compute-bound (tensor pipe)
    ("splitk", "so:splitk", (256, 256, 16384)),        # a call of two kernels (partial + reduce)
    ("torch", "torch", (128, 128, 16384)),             # tall K: cuBLAS may split K itself
    ("naive", "so:naive", (64, 64, 16384)),            # few threads, long dependent loops: latency
    ("naive", "so:naive", (2048, 2048, 2048)),
    ("tiled", "so:tiled", (4096, 4096, 4096)),         # SIMT FMA + shared memory
    ("cublaslt_heuristic", "cublaslt_heuristic", (4096, 4096, 4096)),
]
PRIOR_KINDS = (("cublas", "so:cublas", 1 << 43), ("tiled", "so:tiled", 1 << 34), ("naive", "so:naive", 1 << 31))


def _item(rng: str, kind: str, shape: tuple[int, int, int], so_dir: Path) -> LaunchItem | None:
    if kind.startswith("so:"):
        so = so_dir / f"{kind[3:]}.so"
        if not so.is_file():
            return None
        return {"range": rng, "kind": "so", "so_path": str(so.resolve()), "shape": list(shape), "acc": "f32", "warmup": 2}
    return {"range": rng, "kind": kind, "so_path": None, "shape": list(shape), "acc": "f32", "warmup": 2}


def _save_run(run: NcuRun, dest: Path, stem: str) -> None:
    (dest / f"{stem}_raw.csv").write_text(run.raw_csv)
    (dest / f"{stem}_details.csv").write_text(run.details_csv)
    (dest / f"{stem}_log.txt").write_text(" ".join(run.command) + "\n" + run.log)


def _calls(run: CsvPages, manifest: Mapping[str, ManifestEntry]) -> list[Call]:
    kernels = merge(parse_raw(run.raw_csv), parse_details(run.details_csv))
    groups = split_by_range(kernels, list(manifest))
    out: list[Call] = []
    for rng, ks in groups.items():
        if ks:
            m = manifest[rng]
            out.append({"range": rng, "label": m["label"], "shape": m["shape"], "kernels": ks, "metrics": aggregate(ks)})
    return out


def record_fixtures(out: Path, so_dir: Path, timeout_s: float) -> list[Call]:
    dest = out / "fixtures"
    dest.mkdir(parents=True, exist_ok=True)
    items: list[LaunchItem] = []
    manifest: dict[str, ManifestEntry] = {}
    for i, (label, kind, shape) in enumerate(FIXTURES):
        it = _item(f"fx{i:02d}_{label}_{'x'.join(map(str, shape))}", kind, shape, so_dir)
        if it is not None:
            items.append(it)
            manifest[it["range"]] = {"label": label, "shape": list(shape), "kind": it["kind"]}
    run = run_ncu(items, timeout_s=timeout_s, what="fixtures", nvtx="cupy")
    calls = _calls(run, manifest)
    if not calls:                                     # cupy NVTX not working here: try torch's
        print("no kernel in any NVTX range with cupy's NVTX; retrying with torch.cuda.nvtx", flush=True)
        run = run_ncu(items, timeout_s=timeout_s, what="fixtures", nvtx="torch")
        calls = _calls(run, manifest)
    _save_run(run, dest, "fixtures")
    for r in run.items:
        manifest.get(r["range"], {}).update({"status": r["status"], "message": r["message"]})
    (dest / "manifest.json").write_text(json.dumps({"ncu": run.ncu_version, "nvtx": run.nvtx,
                                                    "command": run.command, "seconds": run.seconds,
                                                    "calls": manifest}, indent=1))
    print(f"fixtures: {len(calls)} calls with kernels, {run.seconds:.1f} s", flush=True)
    return calls


def record_prior(out: Path, so_dir: Path, budget_s: float, chunks: int, nvtx: str) -> list[Call]:
    dest = out / "prior"
    dest.mkdir(parents=True, exist_ok=True)
    shapes = sample100()
    t0 = time.monotonic()
    worst = 0.0
    calls: list[Call] = []
    for c in range(chunks):
        chunk_shapes = shapes[c::chunks]
        items: list[LaunchItem] = []
        manifest: dict[str, ManifestEntry] = {}
        for s in chunk_shapes:
            for label, kind, cap in PRIOR_KINDS:
                if s.flops > cap:
                    continue
                it = _item(f"pr_{label}_{s}", kind, (s.m, s.n, s.k), so_dir)
                if it is not None:
                    items.append(it)
                    manifest[it["range"]] = {"label": label, "shape": [s.m, s.n, s.k], "kind": it["kind"]}
        left = budget_s - (time.monotonic() - t0)
        if left < max(20.0, 1.2 * worst):
            print(f"prior: budget left {left:.0f} s, stopping before chunk {c}", flush=True)
            break
        try:
            run = run_ncu(items, timeout_s=left, what=f"prior chunk {c}", nvtx=nvtx)
        except HarnessError as e:
            print(f"prior chunk {c}: {e}", flush=True)
            continue
        worst = max(worst, run.seconds)
        _save_run(run, dest, f"chunk{c:02d}")
        for r in run.items:
            manifest.get(r["range"], {}).update({"status": r["status"], "message": r["message"]})
        (dest / f"chunk{c:02d}_manifest.json").write_text(json.dumps({"ncu": run.ncu_version, "calls": manifest}, indent=1))
        got = _calls(run, manifest)
        calls += got
        print(f"prior chunk {c}: {len(items)} items, {len(got)} with kernels, {run.seconds:.1f} s", flush=True)
    return calls


def body_json(calls: list[Call], meta: Mapping[str, object]) -> dict[str, object]:
    profiles: list[dict[str, object]] = []
    for c in calls:
        nums: dict[str, float | str | None] = {k: v.value for k, v in c["metrics"].items() if isinstance(v.value, float) and math.isfinite(v.value)}
        top = c["metrics"].get("stall_top")
        if top is not None:
            nums["stall_top"] = top.value
        profiles.append({"label": c["label"], "shape": c["shape"], "metrics": nums})
    return {"meta": meta, "profiles": profiles}


def rebuild(src: Path) -> tuple[list[Call], list[Call], dict[str, object]]:
    """Re-derive fixture calls and the prior body from a recorded folder (no GPU needed)."""
    class _Run:  # the two fields _calls reads
        def __init__(self, raw: Path, det: Path | None) -> None:
            self.raw_csv = raw.read_text()
            self.details_csv = det.read_text() if det and det.is_file() else ""

    fx: list[Call] = []
    fdir = src / "fixtures" if (src / "fixtures" / "manifest.json").is_file() else src
    if (fdir / "manifest.json").is_file():
        man = json.loads((fdir / "manifest.json").read_text())["calls"]
        fx = _calls(_Run(fdir / "fixtures_raw.csv", fdir / "fixtures_details.csv"), man)
    prior: list[Call] = []
    for mf in sorted((src / "prior").glob("chunk*_manifest.json")):
        stem = mf.name.replace("_manifest.json", "")
        raw = mf.with_name(f"{stem}_raw.csv")
        if not raw.is_file():
            raw = mf.with_name(f"{stem}_raw.csv.gz")
        if raw.suffix == ".gz":
            import gzip

            r = _Run.__new__(_Run)
            r.raw_csv, r.details_csv = gzip.decompress(raw.read_bytes()).decode(), ""
        else:
            r = _Run(raw, None)
        prior += _calls(r, json.loads(mf.read_text())["calls"])
    meta: dict[str, object] = {}
    info = src / "info.json"
    if info.is_file():
        meta = json.loads(info.read_text())
    return fx, prior, meta


def record_no_kernel_text(out: Path, so_dir: Path) -> None:
    """Run ncu with an NVTX filter that matches nothing, to keep ncu's real message."""
    ncu = find_ncu()
    d = out / "errors"
    d.mkdir(parents=True, exist_ok=True)
    spec = d / "spec.json"
    it = _item("l2p_real", "torch", (64, 64, 64), so_dir)
    spec.write_text(json.dumps({"nvtx": "cupy", "items": [it]}))
    cmd = profile_command(ncu, d / "nokernel", spec, d / "result.json", ["l2p_nomatch"], ["SpeedOfLight"])
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    (d / "no_kernel.txt").write_text(f"$ {' '.join(cmd)}\n# exit status {p.returncode}\n" + p.stdout + p.stderr)


def _cell(metrics: Mapping[str, Metric], key: str) -> str:
    """One table cell: the metric's value, or a dash where ncu did not report it."""
    x = metrics.get(key)
    return fmt_value(x) if x is not None else "-"


def table(calls: list[Call], clf: Classifier) -> str:
    rows = [("shape", "kernel", "verdict", "kernels", "time", "SM%", "tensor%", "mem%", "DRAM%", "occ%", "memstall")]
    for c in calls:
        m = c["metrics"]
        v = clf.classify(m)
        g = partial(_cell, m)
        rows.append(("x".join(map(str, c["shape"])), c["label"], v.cls, g("kernels"), g("duration_us"),
                     g("sm_throughput_pct"), g("tensor_pipe_pct"), g("memory_throughput_pct"),
                     g("dram_throughput_pct"), g("achieved_occupancy_pct"), g("stall_memory_frac")))
    w = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(x.ljust(w[i]) for i, x in enumerate(r)) for r in rows)


def _rebuilt(out: Path) -> int:
    """``--rebuild``: prior_profiles.json and the tables again from the CSVs already in ``out``."""
    from collections import Counter

    fx, prior, meta = rebuild(out)
    if prior:
        (out / "prior_profiles.json").write_text(json.dumps(body_json(prior, meta), separators=(",", ":")))
    clf = Classifier([c["metrics"] for c in prior]) if prior else Classifier.from_prior()
    print("thresholds:", json.dumps({k: round(v, 3) for k, v in clf.thresholds.items()}))
    if fx:
        print(table(fx, clf))
    if prior:
        print("prior verdicts:", dict(Counter((c["label"], clf.classify(c["metrics"]).cls) for c in prior)))
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--so-dir", required=True, type=Path)
    ap.add_argument("--budget-s", type=float, default=200.0, help="time for the prior body")
    ap.add_argument("--chunks", type=int, default=5)
    ap.add_argument("--skip-fixtures", action="store_true")
    ap.add_argument("--skip-prior", action="store_true")
    ap.add_argument("--nvtx", default="", help="NVTX backend for the prior (default: what worked for the fixtures, else cupy)")
    ap.add_argument("--rebuild", action="store_true",
                    help="no GPU: re-derive prior_profiles.json and the tables from the CSVs already in --out")
    a = ap.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    if a.rebuild:
        return _rebuilt(a.out)
    ncu = find_ncu()
    info: dict[str, object] = {"ncu": ncu_version(ncu), "sections": choose_sections(ncu), "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    try:
        from ..gpuinfo import list_gpus

        gpus = list_gpus()
        if gpus:
            info["gpu"] = gpus[0].to_dict()
    except Exception as e:  # informational only
        info["gpu_error"] = str(e)
    print(json.dumps(info), flush=True)
    (a.out / "info.json").write_text(json.dumps(info, indent=1))
    fx: list[Call] = []
    nvtx = a.nvtx or "cupy"
    if not a.skip_fixtures:
        fx = record_fixtures(a.out, a.so_dir, 240.0)
        nvtx = a.nvtx or json.loads((a.out / "fixtures" / "manifest.json").read_text())["nvtx"]
        try:
            record_no_kernel_text(a.out, a.so_dir)
        except Exception as e:
            print(f"no-kernel text: {e}", flush=True)
    prior: list[Call] = []
    if not a.skip_prior:
        prior = record_prior(a.out, a.so_dir, a.budget_s, a.chunks, nvtx)
        body = body_json(prior, info)
        (a.out / "prior_profiles.json").write_text(json.dumps(body, separators=(",", ":")))
    clf = Classifier([c["metrics"] for c in prior]) if prior else Classifier.from_prior()
    print("thresholds:", json.dumps({k: round(v, 3) for k, v in clf.thresholds.items()}), flush=True)
    if fx:
        print(table(fx, clf), flush=True)
    if prior:
        from collections import Counter

        print("prior verdicts:", dict(Counter((c["label"], clf.classify(c["metrics"]).cls) for c in prior)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
