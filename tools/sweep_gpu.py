"""GPU-side tool for the seed families: check, time and pick prebuilt configurations.

Runs on the GPU machine with only torch (and optionally nvmath-python) installed; it loads the
``.so`` files that ``tools/prebuild.py`` compiled elsewhere, so no compiler is needed there.

    # correctness of every configuration on a spread of shapes (incl. non-multiples of tiles)
    python tools/sweep_gpu.py check --prebuilt .carry/prebuilt --out $OUT
    # time every configuration on representative shapes vs cuBLAS (torch) and cuBLASLt autotune
    python tools/sweep_gpu.py time --prebuilt .carry/prebuilt --out $OUT --shapes sample100
    # pick the best prebuilt configuration per shape (cost-model pre-ranked, time-budgeted) and
    # write the winners as M_N_K.cu into a kernels dir for `l2tui bench --kernels DIR`
    python tools/sweep_gpu.py pick --prebuilt .carry/prebuilt --out $OUT --shapes grid \
        --kernels-dir $OUT/kernels --budget-s 420

Timing method (same for kernels and baselines): CUDA graph of R back-to-back calls (R so one
replay lasts >= --target-ms), one warm-up round, then --reps rounds; in each round every
subject's graph is replayed once in a fresh seeded random order, each replay between two events,
and the median per call is kept (the grid bench's method: subjects interleaved, so a drift of
clocks or temperature during a shape lands on all of them). --sequential times one subject's
replays after another (the method before; a winner's bench/pick ratio ranged 0.76-1.34 with it).
"""

from __future__ import annotations

import argparse
import ctypes
import datetime as _dt
import json
import math
import os
import random
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

torch = None  # imported in main() (not needed by `materialize`, which runs without a GPU)

from harness.families import Config  # noqa: E402
from harness.shapes import Shape, resolve_shapes  # noqa: E402

GUARD = 256  # fp16 elements of NaN guard on each side of C (512 bytes keeps 16-byte alignment)


# ---------------------------------------------------------------- loading


def always_time(shape: Shape) -> list:
    """Predicates on configurations; the pick times the model's best match of each besides its
    top-k: one per family; stream-K (the model's least calibrated term); ping-pong (its epilogue
    overlaps the other warpgroup's mainloop, which the model does not see: store-bound shapes);
    when it would split this shape, SPLITK_REDUCE (its reduce term is not calibrated yet); and
    clusters of four and pairs of 64x64 tiles (the model has no multicast term: it sees only
    their coarser grid); the
    cluster split-K of the latency family (the model prices its reduction like the global one's);
    tiny_mma with K over its warps (the model does not see the shorter MMA chains); and, where it
    would split, SPLITK_REDUCE in a cluster (multicast again); and the best of sm90_ksplit (its
    constants come from its development benches only)."""
    fams = [lambda c, f=f: c.family == f for f in ("sm90_cutlass", "sm80_mma", "small_splitk", "tiny_mma")]
    return fams + [
        lambda c: c.knob_dict.get("SCHEDULER") == "STREAMK",
        lambda c: c.knob_dict.get("SCHEDULE") == "PINGPONG",
        lambda c: c.geometry().separate_reduce and c.geometry().splits_for(shape) > 1,
        lambda c: c.family == "sm90_cutlass" and c.geometry().cluster >= 4,
        lambda c: c.knob_dict.get("CLUSTER_K", "1") != "1",
        lambda c: c.family == "sm90_cutlass" and c.geometry().cluster >= 2 and c.knob_dict["TILE_M"] == "64"
        and c.knob_dict["TILE_N"] == "64",
        lambda c: c.family == "tiny_mma" and c.knob_dict.get("WARPS_K", "1") != "1",
        lambda c: c.geometry().separate_reduce and c.geometry().cluster >= 2 and c.geometry().splits_for(shape) > 1,
        lambda c: c.family == "sm90_ksplit",   # (the newest family: after the kinds above, which keep their places)
    ]


def choose(ranked: list, shape: Shape, top: int, kinds: bool = True, siblings: bool = True) -> list:
    """What the pick times on ``shape``, from kernels ranked best-first by the cost model: the top
    ``top`` distinct configurations, counting those that differ only in the epilogue as one (the
    model cannot tell them apart); with ``kinds`` the best of each kind in :func:`always_time`;
    with ``siblings`` the epilogue variants and PDL twins of everything chosen (they are timed,
    not ranked)."""
    from harness.families import epilogue_siblings, launch_twins, sans_epilogue

    chosen, keys = [], set()
    for k in ranked:
        if len(chosen) >= top:
            break
        if sans_epilogue(k.config) not in keys:
            keys.add(sans_epilogue(k.config))
            chosen.append(k)
    if kinds:  # the best of each kind the model is least sure of, model or not
        for wanted in always_time(shape):
            extra = next((k for k in ranked if wanted(k.config)), None)
            if extra is not None and extra not in chosen:
                chosen.append(extra)
    if siblings:
        by_cfg = {k.config: k for k in ranked}
        for k in list(chosen):
            for sib in epilogue_siblings(k.config, list(by_cfg)):
                if by_cfg[sib] not in chosen:
                    chosen.append(by_cfg[sib])
        for k in list(chosen):  # and the PDL twins of all of these
            for twin in launch_twins(k.config, list(by_cfg)):
                if by_cfg[twin] not in chosen:
                    chosen.append(by_cfg[twin])
    return chosen


class Kernel:
    def __init__(self, name: str, entry: dict, so: Path, source: str):
        self.name, self.entry, self.source = name, entry, source
        self.config = Config.of(entry["family"], entry["knobs"])
        self.acc = entry["acc"]
        self.lib = ctypes.CDLL(str(so))
        self.fn = self.lib.l2_hgemm
        self.fn.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int] * 3 + [ctypes.c_void_p]
        self.fn.restype = ctypes.c_int

    def __call__(self, a, b, c, m, n, k) -> int:
        return self.fn(a.data_ptr(), b.data_ptr(), c.data_ptr(), m, n, k,
                       ctypes.c_void_p(torch.cuda.current_stream().cuda_stream))


def load_kernels(prebuilt: Path, acc: str | None, only: str = "") -> list[Kernel]:
    import re

    manifest = json.loads((prebuilt / "manifest.json").read_text())
    out = []
    for name, entry in sorted(manifest.items()):
        if not entry.get("ok") or (acc and entry["acc"] != acc) or (only and not re.search(only, name)):
            continue
        so = prebuilt / f"{name}.so"
        src = prebuilt / f"{name}.cu"
        import hashlib

        if src.exists() and hashlib.sha256(src.read_text().encode()).hexdigest() != entry.get("sha"):
            print(f"skipping {name}: its .so is stale (source changed, not rebuilt yet)", flush=True)
            continue
        try:
            out.append(Kernel(name, entry, so, (prebuilt / f"{name}.cu").read_text()))
        except OSError as e:
            print(f"cannot load {so}: {e}", flush=True)
    return out


# ---------------------------------------------------------------- environment


def env_info() -> dict:
    props = torch.cuda.get_device_properties(0)
    try:
        driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                capture_output=True, text=True, timeout=20).stdout.strip()
    except Exception:  # noqa: BLE001 - informational only
        driver = None
    from harness.bench import _git_rev  # $L2TUI_GIT_REV first: the device's copy has a stale .git

    rev = _git_rev()
    return {"gpu": props.name, "sms": props.multi_processor_count, "cc": f"{props.major}.{props.minor}",
            "driver": driver, "torch": torch.__version__, "cuda": torch.version.cuda,
            "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), "git_rev": rev}


# ---------------------------------------------------------------- correctness


def _poisoned(m: int, n: int):
    buf = torch.full((m * n + 2 * GUARD,), float("nan"), dtype=torch.float16, device="cuda")
    return buf, buf[GUARD:GUARD + m * n].view(m, n)


def check(kern: Kernel, shape: Shape, seed: int = 0) -> dict:
    """NaN-poisoned full write, guards intact, error vs fp32 reference, exact on 0/1, repeatable."""
    m, n, k = shape.m, shape.n, shape.k
    g = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(m, k, device="cuda", dtype=torch.float16, generator=g)
    b = torch.randn(k, n, device="cuda", dtype=torch.float16, generator=g)
    buf, c = _poisoned(m, n)
    rc = kern(a, b, c, m, n, k)
    torch.cuda.synchronize()
    if rc != 0:
        return {"ok": False, "failed": "unsupported", "rc": rc}
    guards = bool(torch.isnan(buf[:GUARD]).all() and torch.isnan(buf[GUARD + m * n:]).all())
    if not guards:
        return {"ok": False, "failed": "out_of_bounds"}
    if torch.isnan(c).any():
        return {"ok": False, "failed": "not_fully_written", "nan": int(torch.isnan(c).sum())}
    torch.backends.cuda.matmul.allow_tf32 = False
    ref = a.float() @ b.float()
    scale = ref.abs().max().item() or 1.0
    err = (c.float() - ref).abs().max().item() / scale
    lib_err = ((a @ b).float() - ref).abs().max().item() / scale
    bound = max(4 * lib_err, 2e-3) if kern.acc == "f32" else max(64 * lib_err, 5e-2)
    out = {"rel_err": err, "lib_err": lib_err, "bound": bound}
    if err > bound:
        return {**out, "ok": False, "failed": "accuracy"}
    # repeated runs agree bit for bit (races, nondeterministic reductions)
    c2 = torch.empty_like(c)
    kern(a, b, c2, m, n, k)
    kern(a, b, c2, m, n, k)
    torch.cuda.synchronize()
    if not torch.equal(c, c2):
        return {**out, "ok": False, "failed": "not_reproducible"}
    # exact on 0/1 inputs (f32 accumulate: integers < 2^24 are exact; f16 only while sums <= 2048)
    if kern.acc == "f32" or k <= 2048:
        a01 = torch.randint(0, 2, (m, k), device="cuda", generator=g).half()
        b01 = torch.randint(0, 2, (k, n), device="cuda", generator=g).half()
        buf3, c3 = _poisoned(m, n)
        kern(a01, b01, c3, m, n, k)
        exact = (a01.float() @ b01.float()).half()
        torch.cuda.synchronize()
        if not torch.equal(c3, exact):
            return {**out, "ok": False, "failed": "binary_inputs",
                    "mismatches": int((c3 != exact).sum())}
    return {**out, "ok": True, "failed": None}


# ---------------------------------------------------------------- timing


def capture_graph(launch, target_ms: float, s) -> tuple | None:
    """(graph, calls per replay) of ``launch`` on stream ``s`` (None if capture fails)."""
    with torch.cuda.stream(s):
        for _ in range(3):
            launch()
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record(s)
        for _ in range(5):
            launch()
        e1.record(s)
        s.synchronize()
        est = max(e0.elapsed_time(e1) / 5, 1e-3)
    r = max(1, min(400, int(math.ceil(target_ms / est))))
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph, stream=s):
            for _ in range(r):
                launch()
    except Exception as e:  # noqa: BLE001
        print(f"  graph capture failed: {e}", flush=True)
        return None
    return graph, r


def time_interleaved(launches: dict, target_ms: float, reps: int, rng: random.Random, beat=None) -> dict:
    """Median ms per call of every launch: graphs captured first, then rounds in random order.

    Heartbeats name the subject as ``name@stage`` (the watchdog's record of a hang, which a
    resumed pick skips by the part before ``@``). A kernel that hangs shows it in the eager,
    synchronised calls before its capture, so the right one is named; one that hangs only in the
    queued rounds is blamed on the last subject queued."""
    s = torch.cuda.Stream()
    graphs: dict = {}
    out: dict = {}
    for name, fn in launches.items():
        if beat:
            beat(f"{name}@capture")
        got = capture_graph(fn, target_ms, s)
        if got is None:
            out[name] = None
        else:
            graphs[name] = got
    marks = []
    with torch.cuda.stream(s):
        for rnd in range(reps + 1):  # round 0 warms up
            order = list(graphs)
            rng.shuffle(order)
            for name in order:
                if beat:
                    beat(f"{name}@round {rnd}")
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                e0.record(s)
                graphs[name][0].replay()
                e1.record(s)
                if rnd:
                    marks.append((name, e0, e1))
        s.synchronize()
    per: dict = {name: [] for name in graphs}
    for name, e0, e1 in marks:
        per[name].append(e0.elapsed_time(e1) / graphs[name][1])
    for name, xs in per.items():
        xs.sort()
        out[name] = xs[len(xs) // 2]
    graphs.clear()
    return out


def time_graph(launch, target_ms: float, reps: int) -> float | None:
    """Median ms per call of ``launch`` replayed in a CUDA graph (None if capture fails)."""
    s = torch.cuda.Stream()
    got = capture_graph(launch, target_ms, s)
    if got is None:
        return None
    graph, r = got
    times = []
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with torch.cuda.stream(s):
        graph.replay()
        for _ in range(reps):
            e0.record(s)
            graph.replay()
            e1.record(s)
            e1.synchronize()
            times.append(e0.elapsed_time(e1) / r)
    del graph
    times.sort()
    return times[len(times) // 2]


class Baselines:
    """cuBLAS through torch.matmul, and cuBLASLt autotuned through nvmath-python when present."""

    def __init__(self, names: list[str]):
        self.names = names
        self.nvmath = None
        if "cublaslt_autotune" in names:
            try:
                from nvmath.linalg.advanced import Matmul

                self.nvmath = Matmul
            except Exception as e:  # noqa: BLE001
                print(f"nvmath unavailable ({e}); skipping cublaslt_autotune", flush=True)

    def launches(self, a, b, c) -> dict:
        out = {}
        if "torch" in self.names:
            out["torch"] = lambda: torch.matmul(a, b, out=c)
        if self.nvmath is not None:
            try:
                mm = self.nvmath(a, b)
                mm.plan()
                mm.autotune(iterations=3)
                out["cublaslt_autotune"] = lambda mm=mm: mm.execute(stream=torch.cuda.current_stream())
                out["_hold"] = mm
            except Exception as e:  # noqa: BLE001
                print(f"  nvmath plan failed: {e}", flush=True)
        return out


def time_shape(kerns: list[Kernel], shape: Shape, baselines: Baselines | None, target_ms: float, reps: int,
               seed: int, beat=None, interleave: bool = True) -> dict[str, float | None]:
    m, n, k = shape.m, shape.n, shape.k
    a = torch.randn(m, k, device="cuda", dtype=torch.float16)
    b = torch.randn(k, n, device="cuda", dtype=torch.float16)
    c = torch.empty(m, n, device="cuda", dtype=torch.float16)
    jobs = {}
    for kern in kerns:
        if beat:
            beat(f"{kern.name}@{shape}")
        if kern(a, b, c, m, n, k) != 0:
            jobs[kern.name] = None
            continue
        jobs[kern.name] = (lambda kern=kern: kern(a, b, c, m, n, k))
    # The probes above ran on the current stream and the captures below run each kernel eagerly on
    # another (non-blocking) one: without this wait a stream-K or split-K library could run on both
    # at once over its one workspace (a library keeps one per process), and their barriers
    # deadlock. The 33c8c7d wide pick lost six configurations to its watchdog that way.
    torch.cuda.synchronize()
    hold = None
    if baselines is not None:
        bl = baselines.launches(a, b, c)
        hold = bl.pop("_hold", None)
        jobs.update(bl)
    names = list(jobs)
    rng = random.Random(seed)
    rng.shuffle(names)
    out: dict[str, float | None] = {}
    if interleave:
        live = {name: jobs[name] for name in names if jobs[name] is not None}
        out = {name: None for name in names if jobs[name] is None}
        out.update(time_interleaved(live, target_ms, reps, rng, beat))
        del hold
        return out
    for name in names:
        fn = jobs[name]
        if beat:
            beat(f"{name}@{shape}")
        t1 = time.time()
        out[name] = None if fn is None else time_graph(fn, target_ms, reps)
        if time.time() - t1 > 5:
            print(f"  slow: {name} on {shape} took {time.time() - t1:.1f}s to time", flush=True)
    del hold
    return out


def warm_up(seconds: float = 1.0) -> None:
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
    t0 = time.time()
    while time.time() - t0 < seconds:
        for _ in range(20):
            a @ a
        torch.cuda.synchronize()


# ---------------------------------------------------------------- modes

CHECK_SHAPES = ["64x64x64", "64x128x16384", "128x64x8192", "256x256x256", "200x136x264", "1000x1000x1000",
                "1030x2056x776", "4096x128x64", "777x4104x128", "1024x1024x4096", "2048x2048x2048", "4096x4096x8"]


def cmd_check(args, kerns) -> dict:
    shapes = resolve_shapes(args.shapes) if args.shapes else [resolve_shapes(s)[0] for s in CHECK_SHAPES]
    results = {}
    failures = 0
    for kern in kerns:
        row = {}
        for s in shapes:
            try:
                r = check(kern, s, seed=args.seed)
            except Exception as e:  # noqa: BLE001
                r = {"ok": False, "failed": "crashed", "detail": str(e)[:300]}
            row[str(s)] = r
            if r.get("failed") == "crashed" and "illegal" in r.get("detail", "").lower():
                print(f"{kern.name}: sticky CUDA error on {s}; stopping (rerun without it)", flush=True)
                results[kern.name] = row
                return {"mode": "check", "shapes": [str(x) for x in shapes], "results": results, "failures": failures + 1}
            if not r["ok"] and r.get("failed") != "unsupported":
                failures += 1
        bad = {k: v["failed"] for k, v in row.items() if not v["ok"]}
        worst = max((v.get("rel_err", 0) for v in row.values() if v["ok"]), default=0)
        print(f"{kern.name:48s} {'OK ' if not bad else 'BAD'} max_rel_err={worst:.2e} {bad if bad else ''}",
              flush=True)
        results[kern.name] = row
    return {"mode": "check", "shapes": [str(s) for s in shapes], "results": results, "failures": failures}


def partial_save(args, kerns, res: dict) -> None:
    """Write what we have so far (a crash of a later kernel must not lose earlier timings)."""
    out = Path(args.out) / f"{args.tag or args.mode}.json"
    doc = {**res, "partial": True,
           "configs": {k.name: {"family": k.config.family, "knobs": k.config.knob_dict, "acc": k.acc} for k in kerns}}
    out.write_text(json.dumps(doc, indent=1))


def cmd_time(args, kerns) -> dict:
    shapes = resolve_shapes(args.shapes or ["sample100"])
    baselines = Baselines(args.baselines)
    warm_up()
    rows = []
    t0 = time.time()
    for i, s in enumerate(shapes):
        times = time_shape(kerns, s, baselines, args.target_ms, args.reps, args.seed + i,
                           interleave=not args.sequential)
        rows.append({"shape": [s.m, s.n, s.k], "times_ms": times})
        partial_save(args, kerns, {"mode": "time", "timings": rows})
        best = min(((v, k) for k, v in times.items() if v and k in {x.name for x in kerns}), default=(None, None))
        ref = times.get("cublaslt_autotune") or times.get("torch")
        sp = f"{ref / best[0]:.2f}x" if best[0] and ref else "-"
        el = time.time() - t0
        us = lambda v: f"{v * 1e3:.1f}us" if v else "-"  # noqa: E731
        print(f"[{i + 1}/{len(shapes)}] {str(s):20s} best {best[1]} {us(best[0])} "
              f"torch {us(times.get('torch'))} lt {us(times.get('cublaslt_autotune'))} "
              f"speedup {sp}  ETA {el / (i + 1) * (len(shapes) - i - 1):.0f}s", flush=True)
        if args.budget_s and el > args.budget_s:
            print("time budget reached", flush=True)
            break
    return {"mode": "time", "timings": rows}


class Watchdog:
    """Ends the process (after saving) when one shape makes no progress for ``limit_s`` seconds.

    A kernel that hangs cannot be interrupted from Python; without this a single hang would
    cost the whole device call.  The partial results and the winners so far are kept, and
    ``pick --resume`` continues from them.
    """

    def __init__(self, limit_s: float, on_fire):
        import threading

        self.limit_s, self.on_fire = limit_s, on_fire
        self.last = time.time()
        self.what = "start"
        t = threading.Thread(target=self._run, daemon=True)
        t.start()

    def beat(self, what: str) -> None:
        self.last, self.what = time.time(), what

    def _run(self) -> None:
        while True:
            time.sleep(1.0)
            if time.time() - self.last > self.limit_s:
                print(f"WATCHDOG: no progress for {self.limit_s:.0f}s at {self.what}; saving and exiting", flush=True)
                try:
                    self.on_fire(self.what)
                finally:
                    os._exit(3)


def incumbents_of(pick_file: str | None) -> dict[tuple[int, int, int], str]:
    """The winner per shape of an earlier pick: a re-pick times it again beside the new
    candidates, so a re-pick restricted to a few configurations (--only) never replaces a
    winner it did not beat in the same interleaved run."""
    if not pick_file or not Path(pick_file).exists():
        return {}
    doc = json.loads(Path(pick_file).read_text())
    return {tuple(r["shape"]): r["winner"] for r in doc.get("timings", []) if r.get("winner")}


def cmd_pick(args, kerns, extra: list | None = None) -> dict:
    from l2tui.agent.policies.costmodel import CostModel

    shapes = resolve_shapes(args.shapes or ["grid"])
    model = CostModel()
    baselines = Baselines(args.baselines) if args.baselines else None
    kdir = Path(args.kernels_dir) if args.kernels_dir else None
    if kdir:
        kdir.mkdir(parents=True, exist_ok=True)
    by_name = {k.name: k for k in [*kerns, *(extra or [])]}
    incumbent = incumbents_of(args.incumbents)
    rows = []
    hung: list[str] = []
    if args.resume and Path(args.resume).exists():
        prev = json.loads(Path(args.resume).read_text())
        rows = [r for r in prev.get("timings", []) if r.get("winner")]
        hung = list(prev.get("hung", []))
        done = {tuple(r["shape"]) for r in rows}
        shapes = [s for s in shapes if (s.m, s.n, s.k) not in done]
        print(f"resuming: {len(done)} shapes already picked, {len(shapes)} to go; skipping {hung}", flush=True)

    def save(hang: str | None = None) -> None:
        doc = {"mode": "pick", "timings": rows, "hung": hung + ([hang] if hang else []),
               "configs": {k.name: {"family": k.config.family, "knobs": k.config.knob_dict, "acc": k.acc}
                           for k in by_name.values()}}
        tmp = Path(args.out) / f"{args.tag or 'pick'}.json.tmp"
        tmp.write_text(json.dumps(doc))
        os.replace(tmp, Path(args.out) / f"{args.tag or 'pick'}.json")

    dog = Watchdog(args.watchdog_s, save)
    evaluator = None
    if args.full_check:
        # the quick check's bounds are torch's; the bench's are the harness's (for f16: twice
        # the error of cuBLAS with fp16 accumulation, much tighter), so a near-bound f16 kernel
        # could win the pick and fail the bench
        from harness.evaluate import Evaluator
        from harness.gpuinfo import detect_arch

        evaluator = Evaluator(arch=detect_arch(), baselines=()).__enter__()
    warm_up()
    t0 = time.time()
    skip = {h.split("@", 1)[0] for h in hung}
    for i, s in enumerate(shapes):
        left = args.budget_s - (time.time() - t0)
        per_shape = left / max(1, len(shapes) - i)
        ranked = [by_name[c.name] for _, c in model.rank([k.config for k in kerns], s)]
        top = args.top_k if per_shape > 0.25 else max(2, args.top_k // 2)
        chosen = choose(ranked, s, top, kinds=per_shape > 0.15, siblings=per_shape > 0.2)
        held = incumbent.get((s.m, s.n, s.k))
        if held in by_name and by_name[held] not in chosen:
            chosen.append(by_name[held])
        chosen = [k for k in chosen if k.name not in skip]
        dog.beat(f"{chosen[0].name if chosen else '-'}@{s}")
        best_us = min((model.predict(k.config, s) * 1e6 for k in chosen), default=0.0)
        target_ms, reps = burst_for(best_us, args)
        times = time_shape(chosen, s, baselines, target_ms, reps, args.seed + i, beat=dog.beat,
                           interleave=not args.sequential)
        order = sorted((v, name) for name, v in times.items() if v and name in by_name)
        winner = None
        for v, name in order:  # the fastest that also passes a quick check on this shape
            if s.m * s.n * s.k <= args.check_max_mnk:
                dog.beat(f"{name}@{s} (check)")
                r = check(by_name[name], s, seed=args.seed)
                if not r["ok"]:
                    print(f"  {name} failed {r['failed']} on {s}", flush=True)
                    continue
                if evaluator is not None:  # and every check of the harness, with its bounds
                    dog.beat(f"{name}@{s} (harness checks)")
                    e = evaluator.evaluate(by_name[name].source, s, by_name[name].acc, time_baselines=False)
                    if e.status != "ok":
                        print(f"  {name} failed the harness checks on {s}: {e.status} {e.message}", flush=True)
                        continue
            winner = name
            break
        if winner and kdir:
            (kdir / f"{s.m}_{s.n}_{s.k}.cu").write_text(by_name[winner].source)
        rows.append({"shape": [s.m, s.n, s.k], "times_ms": times, "winner": winner, "incumbent": held,
                     "predicted_us": {k.name: round(model.predict(k.config, s) * 1e6, 2) for k in chosen}})
        if i % 10 == 0 or i == len(shapes) - 1:
            save()
        el = time.time() - t0
        wt = f"{times[winner] * 1e3:.1f}us" if winner else "-"
        print(f"[{i + 1}/{len(shapes)}] {str(s):20s} winner {winner} {wt}  elapsed {el:.0f}s "
              f"ETA {el / (i + 1) * (len(shapes) - i - 1):.0f}s", flush=True)
        if el > args.budget_s * 1.15 and i < len(shapes) - 1:
            print(f"over the time budget: stopping after {i + 1} shapes (continue with --resume)", flush=True)
            save()
            break
    if evaluator is not None:
        evaluator.close()
    if kdir:
        pack_kernels(kdir, Path(args.out) / f"{args.tag or 'pick'}-kernels.tar.gz")
    return {"mode": "pick", "timings": rows, "hung": hung}


def burst_for(predicted_us: float, args) -> tuple[float, int]:
    """(target ms per replay, replays) for a shape whose best candidate the model predicts at
    ``predicted_us``. Shapes over ``--hot-above-us`` are timed in bursts of ``--hot-target-ms``
    (``--hot-reps`` replays): a replay of one call is too short for the GPU's power management to
    lower the clock of a kernel that spends its power moving bytes from DRAM, so such a kernel
    wins a short-burst pick and loses the grid bench (results/h200/runs/ncu-5360991/summary.txt);
    in a ~20 ms burst each configuration runs at the clock its own traffic allows."""
    hot = getattr(args, "hot_target_ms", 0.0)
    if hot > 0 and predicted_us > getattr(args, "hot_above_us", float("inf")):
        return max(hot, args.target_ms), getattr(args, "hot_reps", args.reps)
    return args.target_ms, args.reps


def pack_kernels(kdir: Path, tar_path: Path) -> None:
    """One file instead of a thousand: a device call returns only a few files."""
    import tarfile

    with tarfile.open(tar_path, "w:gz") as tf:
        for p in sorted(kdir.glob("*.cu")):
            tf.add(p, arcname=f"kernels/{p.name}")


def cmd_materialize(args) -> dict:
    """Write ``M_N_K.cu`` winners from a pick file and the prebuilt sources (no GPU needed)."""
    doc = json.loads(Path(args.pick).read_text())
    kdir = Path(args.kernels_dir or "kernels")
    kdir.mkdir(parents=True, exist_ok=True)
    n = 0
    for row in doc["timings"]:
        w = row.get("winner")
        if not w:
            continue
        m, nn, k = row["shape"]
        (kdir / f"{m}_{nn}_{k}.cu").write_text((Path(args.prebuilt) / f"{w}.cu").read_text())
        n += 1
    print(f"wrote {n} kernels to {kdir}", flush=True)
    return {"mode": "materialize", "written": n}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=("check", "time", "pick", "materialize"))
    ap.add_argument("--pick", help="materialize: the pick JSON")
    ap.add_argument("--resume", help="pick: a previous pick JSON to continue from")
    ap.add_argument("--watchdog-s", type=float, default=60.0, help="pick: exit after this long without progress")
    ap.add_argument("--prebuilt", default=".carry/prebuilt")
    ap.add_argument("--out", default=os.environ.get("OUT", "out"))
    ap.add_argument("--shapes", action="append")
    ap.add_argument("--acc", default=None, help="only configurations with this accumulator")
    ap.add_argument("--only", default="", help="regex on configuration names")
    ap.add_argument("--incumbents", default=None,
                    help="pick: an earlier pick JSON; each shape's winner there is timed again (even outside --only)")
    ap.add_argument("--baselines", nargs="*", default=["torch", "cublaslt_autotune"])
    ap.add_argument("--target-ms", type=float, default=0.3)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--hot-target-ms", type=float, default=0.0,
                    help="pick: replays of this many ms for shapes over --hot-above-us (0 = off; see burst_for)")
    ap.add_argument("--hot-above-us", type=float, default=200.0,
                    help="pick: predicted time of the best candidate above which --hot-target-ms applies")
    ap.add_argument("--hot-reps", type=int, default=3, help="pick: replays per subject in --hot-target-ms bursts")
    ap.add_argument("--sequential", action="store_true",
                    help="time each subject's replays one after another instead of interleaved rounds")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--budget-s", type=float, default=0.0)
    ap.add_argument("--top-k", type=int, default=5)
    ap.add_argument("--kernels-dir", default=None)
    ap.add_argument("--full-check", action="store_true",
                    help="pick: the winner must also pass every harness check (the bench's bounds)")
    ap.add_argument("--check-max-mnk", type=float, default=float("inf"), help="pick: check winners up to this M*N*K")
    ap.add_argument("--tag", default=None, help="output file name stem")
    ap.add_argument("--exclude-failed", nargs="*", default=[], help="check result files: skip configurations that failed")
    args = ap.parse_args(argv)
    if args.mode == "pick" and not args.budget_s:
        args.budget_s = 420.0
    if args.mode == "materialize":
        cmd_materialize(args)
        return 0
    global torch
    import torch as _torch

    torch = _torch
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t_load = time.time()
    kerns = load_kernels(Path(args.prebuilt), args.acc, args.only)
    failed = set()
    for f in args.exclude_failed:
        try:
            doc = json.loads(Path(f).read_text())
        except (OSError, ValueError):
            continue
        for name, row in doc.get("results", {}).items():
            if any(not v["ok"] and v.get("failed") != "unsupported" for v in row.values()):
                failed.add(name)
    if failed:
        print(f"skipping configurations that failed checks: {sorted(failed)}", flush=True)
        kerns = [k for k in kerns if k.name not in failed]
    print(f"{len(kerns)} configurations loaded in {time.time() - t_load:.1f}s", flush=True)
    t0 = time.time()
    res = {"mode": args.mode}
    if args.mode == "check":
        res = cmd_check(args, kerns)
    elif args.mode == "time":
        res = cmd_time(args, kerns)
    else:
        held = set(incumbents_of(args.incumbents).values()) - {k.name for k in kerns}
        extra = [k for k in load_kernels(Path(args.prebuilt), args.acc) if k.name in held] if held else []
        res = cmd_pick(args, kerns, extra)
        kerns = kerns + extra
    res["env"] = env_info()
    res["seconds"] = round(time.time() - t0, 1)
    res["configs"] = {k.name: {"family": k.config.family, "knobs": k.config.knob_dict, "acc": k.acc} for k in kerns}
    name = args.tag or args.mode
    (out / f"{name}.json").write_text(json.dumps(res, indent=1))
    print(f"wrote {out / (name + '.json')} in {res['seconds']}s", flush=True)
    return 0 if res.get("failures", 0) == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
