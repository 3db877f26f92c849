"""Probe the CUTLASS tile schedulers of the sm90 family for hangs, one variant per subprocess.

Why: the stream-K and split-K schedulers hung on the H200 under repeated CUDA-graph replay
in a grid pick, so they were taken out of the catalog.  This tool isolates the cause:
each (variant, shape) runs in its own process with a hard timeout, through three stages —
direct calls with a sync after each, one CUDA graph of back-to-back calls replayed several
times, then the result compared with torch — and reports which stage (if any) hung.

    # on a machine with nvcc (no GPU needed): render and build the variants into the build cache
    python tools/sched_probe.py build --out probe
    # on the GPU box, with the same build cache (L2TUI_CACHE_DIR):
    python tools/sched_probe.py run --probe probe --out probe.json

A variant is a catalog configuration plus optional extra ``#define`` lines (for example
``L2_NO_CLUSTER_QUERY`` restores the old grid sizing from sm_count alone).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.families import _sm90, render  # noqa: E402

#: name -> (knobs, extra defines)
VARIANTS: dict[str, tuple[dict[str, str], tuple[str, ...]]] = {
    "persist-128x256-c2x1": (_sm90(128, 256, cm=2), ()),
    "persist-128x256-c2x1-oldgrid": (_sm90(128, 256, cm=2), ("L2_NO_CLUSTER_QUERY",)),
    "streamk-128x128": (_sm90(128, 128, scheduler="STREAMK"), ()),
    "streamk-128x128-oldgrid": (_sm90(128, 128, scheduler="STREAMK"), ("L2_NO_CLUSTER_QUERY",)),
    "streamk-128x128-nondet": (_sm90(128, 128, scheduler="STREAMK"), ("L2_SK_NONDETERMINISTIC",)),
    "splitk4-128x128": (_sm90(128, 128, scheduler="SPLITK", splits=4), ()),
}

SHAPES = [(512, 4096, 16384), (256, 12288, 12288), (1024, 1024, 8192), (128, 4096, 4096),
          (4096, 4096, 4096), (2048, 8192, 1024)]


def variant_source(knobs: dict[str, str], defines: tuple[str, ...]) -> str:
    src = render("sm90_cutlass", knobs, allow_unsafe=True)
    head = "".join(f"#define {d} 1\n" for d in defines)
    return head + src


def cmd_build(args: argparse.Namespace) -> int:
    from concurrent.futures import ThreadPoolExecutor

    from harness.build import build

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    manifest = {}

    def one(item):
        name, (knobs, defines) = item
        src = variant_source(knobs, defines)
        t0 = time.time()
        r = build(src, arch="sm_90a", name=name)
        return name, src, r, time.time() - t0

    with ThreadPoolExecutor(max_workers=args.jobs) as ex:
        for name, src, r, dt in ex.map(one, VARIANTS.items()):
            print(f"{name}: ok={r.ok} {dt:.0f}s", flush=True)
            if not r.ok:
                print(r.log[-2000:] if hasattr(r, "log") else r, flush=True)
                continue
            (out / f"{name}.cu").write_text(src)
            shutil.copyfile(r.so_path, out / f"{name}.so")
            manifest[name] = {"so": f"{name}.so"}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return 0


_CHILD = r"""
import ctypes, sys, time, torch
so, m, n, k, stage_file = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
def stage(s):
    open(stage_file, "w").write(s)
lib = ctypes.CDLL(so)
fn = lib.l2_hgemm
fn.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int] * 3 + [ctypes.c_void_p]
torch.manual_seed(0)
a = torch.randn(m, k, device="cuda", dtype=torch.float16)
b = torch.randn(k, n, device="cuda", dtype=torch.float16)
c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float16)
st = torch.cuda.Stream()
sp = ctypes.c_void_p(st.cuda_stream)
with torch.cuda.stream(st):
    stage("direct")
    for i in range(20):
        rc = fn(a.data_ptr(), b.data_ptr(), c.data_ptr(), m, n, k, sp)
        if rc:
            print("RC", rc); sys.exit(0)
        st.synchronize()
    ref = (a.float() @ b.float())
    err = ((c.float() - ref).norm() / ref.norm()).item()
    stage("graph-capture")
    g = torch.cuda.CUDAGraph()
    reps = 20
    with torch.cuda.graph(g, stream=st):
        for i in range(reps):
            fn(a.data_ptr(), b.data_ptr(), c.data_ptr(), m, n, k, sp)
    stage("graph-replay")
    for i in range(10):
        g.replay()
    st.synchronize()
    stage("timing")
    ts = []
    for i in range(7):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record(st); g.replay(); e1.record(st); st.synchronize()
        ts.append(e0.elapsed_time(e1) / reps)
    err2 = ((c.float() - ref).norm() / ref.norm()).item()
    ts.sort()
    print("RESULT", ts[len(ts) // 2], err, err2)
"""


def _meta(timeout: float) -> dict:
    """GPU, driver, date and revision, so the result file says where it was measured."""
    import datetime as _dt

    def sh(*cmd: str) -> str | None:
        try:
            return subprocess.run(cmd, capture_output=True, text=True, timeout=20).stdout.strip() or None
        except (OSError, subprocess.SubprocessError):
            return None

    return {"gpu": sh("nvidia-smi", "--query-gpu=name", "--format=csv,noheader"),
            "driver": sh("nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"),
            "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "git_rev": os.environ.get("L2TUI_GIT_REV") or sh("git", "rev-parse", "--short", "HEAD"),
            "command": "python tools/sched_probe.py run", "timeout_s": timeout,
            "note": "a hang probe: 'ms' is from one 20-call graph without clock warm-up, "
                    "not comparable with harness timings"}


def cmd_run(args: argparse.Namespace) -> int:
    probe = Path(args.probe)
    manifest = json.loads((probe / "manifest.json").read_text())
    rows: list[dict] = []
    meta = _meta(args.timeout)
    stage_file = "/tmp/sched_probe.stage"
    shapes = SHAPES if not args.shapes else [tuple(int(x) for x in s.split("x")) for s in args.shapes.split(",")]
    for name, e in manifest.items():
        so = str(probe / e["so"])
        for (m, n, k) in shapes:
            Path(stage_file).write_text("start")
            t0 = time.time()
            try:
                p = subprocess.run([sys.executable, "-c", _CHILD, so, str(m), str(n), str(k), stage_file],
                                   capture_output=True, text=True, timeout=args.timeout)
                out = p.stdout + p.stderr
                res = [ln for ln in out.splitlines() if ln.startswith(("RESULT", "RC"))]
                if res and res[-1].startswith("RESULT"):
                    _, ms, err, err2 = res[-1].split()
                    row = {"variant": name, "shape": [m, n, k], "status": "ok", "ms": float(ms),
                           "rel_err": float(err), "rel_err_after_graph": float(err2)}
                elif res:
                    row = {"variant": name, "shape": [m, n, k], "status": "rc", "detail": res[-1]}
                else:
                    row = {"variant": name, "shape": [m, n, k], "status": "error", "detail": out[-400:]}
            except subprocess.TimeoutExpired:
                row = {"variant": name, "shape": [m, n, k], "status": "hang",
                       "stage": Path(stage_file).read_text()}
            row["wall_s"] = round(time.time() - t0, 1)
            print(json.dumps(row), flush=True)
            rows.append(row)
            Path(args.out).write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=("build", "run"))
    ap.add_argument("--out", required=True)
    ap.add_argument("--probe", default="probe-build")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--timeout", type=float, default=25.0)
    ap.add_argument("--shapes", default="")
    args = ap.parse_args(argv)
    return cmd_build(args) if args.mode == "build" else cmd_run(args)


if __name__ == "__main__":
    raise SystemExit(main())
