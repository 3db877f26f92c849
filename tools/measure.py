#!/usr/bin/env python3
"""The measurements behind the committed result files, as plans of resumable steps under one budget.

    python tools/measure.py --list
    python tools/measure.py h100-grid --budget 3600
    python tools/measure.py h100-cuda-l2 --cuda-l2 ../CUDA-L2 --budget 1800
    python tools/measure.py h200-models --budget 900 --work /scratch/l2tui-measure

Why a runner: a plan such as the H100 grid (a sweep from an empty build cache, then its winners
benched against every library in both timing modes) runs longer than one sitting on a shared GPU
box. Each step here is skipped once its output is complete, a step starts only while the budget
left covers its minimum, and a time-boxed step (a sweep's ``--max-seconds``, a bench's
``--limit-seconds``) gets what is left as its box. Run the same command again and it goes on where
it stopped: a stopped sweep resumes its session, an unfinished bench is run again.

Everything a plan makes lives in ``--work`` (sessions, the build cache, exports: default
``.measure/`` in the checkout, which git ignores) except the result files, written under
``--results`` (default ``results/h100`` or ``results/h200``, the plan's GPU). The build cache is
``WORK/cache``: empty on a first run, which is what "from an empty build cache" means in the
result files' commands. Where the GPU box's sittings are short, its nvcc time can be spent
beforehand on a build machine: ``l2tui sweep --shapes grid --steps 0 --seeds 3 --arch sm_90a
--prebuild-only --for-gpu "NVIDIA H100 80GB HBM3"`` with ``L2TUI_CACHE_DIR=WORK/cache`` fills
the cache with what the plan's sweep will build; the sweep's record then counts those builds as
cached, not compiled, so the result says which it was.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent

#: every library the benches time beside the candidates
ALL_LIBRARIES = "cublas,cublaslt_heuristic,cublaslt_autotune,torch"
#: the first-result shapes of docs/known.md: one or two per size class
FIRST_RESULT_SHAPES = "64x64x64,1024x128x1024,512x512x4096,2048x2048x2048,4096x4096x4096,8192x8192x8192"
#: the model presets' shapes files (Llama-3-8B and Qwen2.5-7B at 16, 128, 512 and 4096 tokens)
MODEL_SHAPES = ("results/h200/shapes-llama-3-8b.txt", "results/h200/shapes-qwen2.5-7b.txt")
#: the CUDA-L2 checkout's own per-shape speedups of its H100 kernels (its offline mode, host-timed, over cuBLASLt-autotune)
CUDA_L2_CLAIMS = "cuda_l2_h100_F32F16F16F32_speedup_offline.csv"
#: what a sweep runs past its --max-seconds (the CUTLASS builds and the tracks it has started) and
#: a bench past its --limit-seconds (the shape in flight, then writing the file)
SWEEP_TAIL_S = 90
BENCH_TAIL_S = 30
#: a session log or result file is read only up to this size
MAX_READ_BYTES = 256 << 20


@dataclass(frozen=True)
class Ctx:
    """Where a plan's steps read and write."""

    work: Path
    results: Path
    cuda_l2: Path | None = None

    @property
    def cache(self) -> Path:
        return self.work / "cache"


@dataclass(frozen=True)
class Step:
    """One step of a plan: a command, ``argv(ctx, box)`` given the seconds it may take, or a
    function of this file, ``action(ctx)``. ``done(ctx)`` says whether its output is already
    complete (then it is skipped, and a step that ran without reaching it stopped at its time box);
    ``min_s`` is the least budget worth starting it with; a time-boxed command gets the budget left
    less ``tail_s``, what it may run past its box (a sweep finishes the builds and tracks it has
    started)."""

    name: str
    argv: Callable[[Ctx, int], list[str]] | None
    done: Callable[[Ctx], bool]
    min_s: int = 30
    needs_cuda_l2: bool = False
    action: Callable[[Ctx], None] | None = None
    tail_s: int = 0


@dataclass(frozen=True)
class Plan:
    name: str
    gpu: str
    about: str
    steps: tuple[Step, ...] = field(default_factory=tuple)


# --------------------------------------------------------------------------- reading outputs


def _read_json(path: Path) -> dict | None:
    """A JSON object from ``path``, or None when it is missing, too large or not an object."""
    try:
        if path.stat().st_size > MAX_READ_BYTES:
            return None
        data = json.loads(path.read_text(errors="replace"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def sweep_finished(session: Path) -> bool:
    """The sweep in ``session`` ran every track: its last recorded run ended ``sweep done``."""
    data = _read_json(session / "sweep.json")
    runs = data.get("runs") if data else None
    return bool(runs) and isinstance(runs, list) and isinstance(runs[-1], dict) and runs[-1].get("ended") == "sweep done"


def session_ended(session: Path) -> bool:
    """The session's log holds its end (a run that was killed has none)."""
    log = session / "events.jsonl"
    try:
        if log.stat().st_size > MAX_READ_BYTES:
            return False
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return False
    return any('"type":"session_ended"' in line.replace(" ", "") for line in lines[-50:])


def bench_complete(path: Path) -> bool:
    """A bench result file that timed every shape it was asked for (``meta.complete``)."""
    data = _read_json(path)
    meta = data.get("meta") if data else None
    return isinstance(meta, dict) and meta.get("complete") is True


def exists(path: Path) -> bool:
    return path.is_file() and path.stat().st_size > 0


def newer(out: Path, than: Path) -> bool:
    """``out`` is there and was written after ``than`` (the output it was made from), so a result
    file left from an earlier run, or committed, is made again from this run's sweep."""
    return exists(out) and (not than.exists() or out.stat().st_mtime >= than.stat().st_mtime)


# --------------------------------------------------------------------------- step makers


def l2tui(*args: str) -> list[str]:
    return [sys.executable, "-m", "l2tui", *args]


def harness(*args: str) -> list[str]:
    return [sys.executable, "-m", "harness", *args]


def sweep_step(name: str, session: str, *fresh: str, min_s: int = 120) -> Step:
    """A sweep into ``WORK/session``: started with ``fresh`` arguments, resumed when the session exists."""

    def argv(ctx: Ctx, box: int) -> list[str]:
        where = ctx.work / session
        if where.is_dir():
            return l2tui("sweep", "--session", str(where), "--resume", "--max-seconds", str(box))
        return l2tui("sweep", *fresh, "--session", str(where), "--max-seconds", str(box))

    return Step(name, argv, lambda ctx: sweep_finished(ctx.work / session), min_s, tail_s=SWEEP_TAIL_S)


def winners_step(session: str, out: str, *extra: str) -> Step:
    """The session's winners folder as a winners file under the results."""
    return Step(f"winners -> {out}",
                lambda ctx, box: harness("winners", "from-dir", "--kernels", str(ctx.work / session / "winners"),
                                         *extra, "--out", str(ctx.results / out)),
                lambda ctx: newer(ctx.results / out, ctx.work / session / "sweep.json"), 10)


def bench_step(out: str, *args: str, after: str, min_s: int = 240, needs_cuda_l2: bool = False) -> Step:
    """``l2tui bench ARGS --out RESULTS/out`` time-boxed by the budget left; ``{work}`` and
    ``{cuda_l2}`` in ARGS are filled in. Done once complete and newer than WORK/``after``, what its
    kernels came from."""

    def argv(ctx: Ctx, box: int) -> list[str]:
        filled = [a.format(work=ctx.work, cuda_l2=ctx.cuda_l2) for a in args]
        return l2tui("bench", *filled, "--limit-seconds", str(box), "--out", str(ctx.results / out))

    def done(ctx: Ctx) -> bool:
        return bench_complete(ctx.results / out) and newer(ctx.results / out, ctx.work / after)

    return Step(f"bench -> {out}", argv, done, min_s, needs_cuda_l2, tail_s=BENCH_TAIL_S)


def known_layer_step() -> Step:
    """results/<gpu>/gpu.json: the folder as the known-kernels store's layer for the GPU the bench ran on."""
    return Step("known-kernels layer -> gpu.json", None, lambda ctx: layer_current(ctx.results), 1,
                action=lambda ctx: write_layer(ctx.results))


def record_step(session: str, stem: str) -> Step:
    """The sweep's own record (its runs' wall, GPU and nvcc time; every track) and its settings,
    copied beside the results as sweep-STEM.json and sweep-STEM.toml."""

    def copy(ctx: Ctx) -> None:
        for src, ext in (("sweep.json", "json"), ("session.toml", "toml")):
            (ctx.results / f"sweep-{stem}.{ext}").write_bytes((ctx.work / session / src).read_bytes())

    def current(ctx: Ctx) -> bool:
        out, src = ctx.results / f"sweep-{stem}.json", ctx.work / session / "sweep.json"
        return exists(out) and src.is_file() and out.read_bytes() == src.read_bytes()

    return Step(f"sweep record -> sweep-{stem}.json", None, current, 1, action=copy)


# --------------------------------------------------------------------------- the plans


def _plans() -> dict[str, Plan]:
    grid_bench = ("--kernels", "{work}/grid/winners", "--label", "l2", "--baselines", ALL_LIBRARIES, "--timing", "both")
    plans = [
        Plan("h100-grid", "h100", "the grid from an empty build cache, its winners benched in both modes, the H100 layer",
             (sweep_step("sweep grid", "grid", "--shapes", "grid", "--steps", "0", "--seeds", "3"),
              record_step("grid", "grid"),
              winners_step("grid", "winners-f32.json", "--acc", "f32"),
              bench_step("kernels-offline.json", *grid_bench, after="grid/sweep.json", min_s=400),
              known_layer_step())),
        Plan("h100-f16", "h100", "sample100 with f16 accumulation: its sweep and its bench",
             (sweep_step("sweep sample100 f16", "sample100-f16", "--shapes", "sample100", "--acc", "f16",
                         "--steps", "0", "--seeds", "3"),
              record_step("sample100-f16", "f16-sample100"),
              winners_step("sample100-f16", "winners-f16-sample100.json", "--acc", "f16"),
              bench_step("kernels-f16-sample100.json", "--kernels", "{work}/sample100-f16/winners", "--label", "l2",
                         "--acc", "f16", "--shapes", "sample100", "--baselines", ALL_LIBRARIES, "--timing", "both",
                         after="sample100-f16/sweep.json", min_s=120))),
        Plan("h100-transfer", "h100", "the H200 winners beside the H100 ones on sample100, on this GPU",
             (Step("render the H200 winners",
                   lambda ctx, box: harness("winners", "render", "--winners", "results/h200/winners-f32.json",
                                            "--out", str(ctx.work / "h200-winners")),
                   lambda ctx: (ctx.work / "h200-winners").is_dir(), 10),
              bench_step("transfer-sample100.json", "--kernels", "{work}/grid/winners", "--label", "h100",
                         "--kernels", "{work}/h200-winners", "--label", "h200", "--shapes", "sample100",
                         "--baselines", ALL_LIBRARIES, "--timing", "both", after="grid/sweep.json", min_s=120))),
        Plan("h100-cuda-l2", "h100", "the CUDA-L2 H100 kernels (--cuda-l2 CHECKOUT) beside ours and every library",
             (bench_step("cuda-l2-sample100.json", "--kernels", "{work}/grid/winners", "--label", "h100", "--abi", "l2",
                         "--kernels", "{cuda_l2}/kernels/h100_F32F16F16F32", "--label", "cuda_l2",
                         "--abi", "cuda-l2", "--shapes", "sample100", "--baselines", ALL_LIBRARIES,
                         "--timing", "both", after="grid/sweep.json", min_s=240, needs_cuda_l2=True),
              Step("their claims beside the measurement -> cuda-l2-sample100.md", _cuda_l2_report,
                   lambda ctx: newer(ctx.results / "cuda-l2-sample100.md", ctx.results / "cuda-l2-sample100.json"),
                   5, needs_cuda_l2=True))),
        Plan("h200-models", "h200", "the model presets from an empty build cache: sweep, bench, export and its bench",
             _model_steps("fp16")),
        Plan("h200-models-bf16", "h200", "the same in bf16", _model_steps("bf16")),
        Plan("h200-bf16", "h200", "the bf16 grid from an empty build cache and its bench in both modes",
             (sweep_step("sweep grid bf16", "grid-bf16", "--shapes", "grid", "--dtype", "bf16", "--steps", "0",
                         "--seeds", "3"),
              record_step("grid-bf16", "grid-bf16"),
              winners_step("grid-bf16", "winners-bf16-f32.json", "--acc", "f32", "--dtype", "bf16"),
              bench_step("kernels-bf16-offline.json", "--dtype", "bf16", "--kernels", "{work}/grid-bf16/winners",
                         "--label", "l2", "--baselines", ALL_LIBRARIES, "--timing", "both", after="grid-bf16/sweep.json",
                         min_s=400))),
        Plan("h200-first", "h200", "each first-result shape's first timed result and best, 60 s a track",
             (Step("run 6 shapes, 60 s each", _first_run, lambda ctx: session_ended(ctx.work / "known-first"), 420),
              Step("first and best -> known-first.json",
                   lambda ctx, box: [sys.executable, str(ROOT / "tools" / "first_and_best.py"),
                                     str(ctx.work / "known-first"), "--json", str(ctx.results / "known-first.json")],
                   lambda ctx: newer(ctx.results / "known-first.json", ctx.work / "known-first" / "events.jsonl"),
                   10))),
    ]
    return {p.name: p for p in plans}


def _model_steps(dtype: str) -> tuple[Step, ...]:
    """The model presets' plan in ``dtype``: sweep from an empty build cache, its record, winners and
    bench, then ``l2tui export --build`` of the session and the export's own bench."""
    tag = "" if dtype == "fp16" else f"-{dtype}"
    session, export = f"models{tag}", f"export-models{tag}"
    dt = ("--dtype", dtype) if tag else ()
    shapes = tuple(a for s in MODEL_SHAPES for a in ("--shapes", s))
    lib = Path(export) / "lib" / "libl2hgemm.so"
    bench_out = f"kernels-export-models{tag}.json"
    return (
        sweep_step(f"sweep models{tag}", session, *shapes, *dt, "--steps", "0", "--seeds", "3", "--libraries", "all"),
        record_step(session, session),
        winners_step(session, f"winners-models{tag}-f32.json", "--acc", "f32", *dt),
        bench_step(f"kernels-models{tag}.json", *dt, "--kernels", f"{{work}}/{session}/winners", "--label", "l2",
                   "--shapes", "results/h200/shapes-models.txt", "--baselines", ALL_LIBRARIES,
                   after=f"{session}/sweep.json", min_s=180),
        Step(f"export --build -> {export}",
             lambda ctx, box: l2tui("export", str(ctx.work / session), "--build", "--force", "--out", str(ctx.work / export)),
             lambda ctx: newer(ctx.work / lib, ctx.work / session / "sweep.json"), 60),
        Step(f"bench the export -> {bench_out}",
             lambda ctx, box: [sys.executable, "-m", "l2tui.export.bench", str(ctx.work / export),
                               "--out", str(ctx.results / bench_out)],
             lambda ctx: newer(ctx.results / bench_out, ctx.work / lib), 90),
    )


def _cuda_l2_report(ctx: Ctx, box: int) -> list[str]:
    """``python -m harness foreign-report``: the CUDA-L2 checkout's own per-shape claims (its H100
    CSV) beside the bench of its kernels and ours."""
    claims = ctx.cuda_l2 / "eval_results" / CUDA_L2_CLAIMS if ctx.cuda_l2 else Path(CUDA_L2_CLAIMS)
    return harness("foreign-report", str(ctx.results / "cuda-l2-sample100.json"), "--claims", str(claims),
                   "--theirs", "cuda_l2", "--ours", "h100", "--out", str(ctx.results / "cuda-l2-sample100.md"))


def _first_run(ctx: Ctx, box: int) -> list[str]:
    """The first-result run: started, or resumed where a stopped run left its session."""
    session = ctx.work / "known-first"
    again = ("--resume",) if session.is_dir() else ("--shapes", FIRST_RESULT_SHAPES)
    return l2tui("run", "--headless", "--policy", "search", "--config", str(_first_config(ctx)),
                 "--session", str(session), *again)


def _first_config(ctx: Ctx) -> Path:
    """The first-result run's settings: 60 s a track, one track at a time, speedups over cuBLASLt-autotune."""
    path = ctx.work / "known-60s.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('[loop]\nwall_time_s = 60\nparallel_tracks = 1\n[harness]\nbaseline = "cublaslt_autotune"\n')
    return path


PLANS = _plans()


# --------------------------------------------------------------------------- running


def run_plan(plan: Plan, ctx: Ctx, budget_s: float, *, say: Callable[[str], None] = print,
             clock: Callable[[], float] = time.monotonic) -> int:
    """Every step of ``plan`` not done yet, in order, while the budget lasts. 0 when every step is
    done at the end, 3 when the budget ended first (run again to go on), else the failing step's
    exit status."""
    start = clock()
    env = {**os.environ, "L2TUI_CACHE_DIR": str(ctx.cache)}
    ctx.work.mkdir(parents=True, exist_ok=True)
    ctx.results.mkdir(parents=True, exist_ok=True)
    for step in plan.steps:
        if step.needs_cuda_l2 and ctx.cuda_l2 is None:
            say(f"measure: {plan.name}: {step.name}: needs --cuda-l2 CHECKOUT (the CUDA-L2 repository)")
            return 2
        if step.done(ctx):
            say(f"measure: {plan.name}: {step.name}: done")
            continue
        left = int(budget_s - (clock() - start))
        if left < step.min_s:
            say(f"measure: {plan.name}: {step.name}: {left} s left, needs {step.min_s}: run the same command again")
            return 3
        say(f"measure: {plan.name}: {step.name} ({left} s left)")
        rc = _run_step(step, ctx, left - step.tail_s, env)
        if rc != 0:
            say(f"measure: {plan.name}: {step.name}: exit status {rc}")
            return rc
        if not step.done(ctx):
            say(f"measure: {plan.name}: {step.name}: stopped at its time box: run the same command again")
            return 3
    say(f"measure: {plan.name}: every step done; results in {ctx.results}")
    return 0


def _run_step(step: Step, ctx: Ctx, box: int, env: dict[str, str]) -> int:
    """The step's function, or its command (from the checkout, with the plan's build cache)."""
    if step.action is not None:
        step.action(ctx)
        return 0
    assert step.argv is not None
    return subprocess.run(step.argv(ctx, box), cwd=ROOT, env=env).returncode


# --------------------------------------------------------------------------- the known-kernels layer


def layer_current(results: Path) -> bool:
    """gpu.json names the grid bench now in the folder (same git revision and date)."""
    layer, bench = _read_json(results / "gpu.json"), _read_json(results / "kernels-offline.json")
    meta = bench.get("meta") if bench else None
    return (layer is not None and isinstance(meta, dict) and layer.get("bench", {}).get("f32") == "kernels-offline.json"
            and layer.get("git") == meta.get("git_rev") and layer.get("date") == str(meta.get("date"))[:10])


def write_layer(results: Path) -> None:
    """``results/gpu.json``: the folder as the known-kernels store's layer for the GPU its grid bench
    (kernels-offline.json) ran on, keyed by that GPU's name; the layer's other winners files (the
    model shapes) stay listed, each with its own bench."""
    from harness.known import KNOWN_SMS

    bench = _read_json(results / "kernels-offline.json")
    meta = bench.get("meta") if bench else None
    if not isinstance(meta, dict):
        raise SystemExit(f"measure: {results / 'kernels-offline.json'} has no meta: bench the grid first")
    gpu = str(meta.get("gpu"))
    if gpu not in KNOWN_SMS:
        raise SystemExit(f"measure: the bench ran on {gpu!r}, which harness.known.KNOWN_SMS does not name")
    old = _read_json(results / "gpu.json") or {}
    winners = ["winners-f32.json"] + [w for w in old.get("winners", []) if w != "winners-f32.json"]
    doc = {"format": "l2tui-known-gpu/1", "gpu": gpu, "sms": KNOWN_SMS[gpu],
           "cuda_major": int(str(meta.get("cuda_driver") or meta.get("cuda")).split(".")[0]),
           "timing": "offline, per call", "date": str(meta.get("date"))[:10], "git": meta.get("git_rev"),
           "driver": meta.get("driver"), "winners": winners,
           "bench": {**old.get("bench", {}), "f32": "kernels-offline.json"}, "baseline": "cublaslt_autotune"}
    (results / "gpu.json").write_text(json.dumps(doc, indent=1) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("plan", nargs="?", choices=sorted(PLANS), help="the plan to run (--list says what each does)")
    ap.add_argument("--list", action="store_true", help="the plans and their steps")
    ap.add_argument("--budget", type=float, default=3600.0, help="seconds for this run (default 3600)")
    ap.add_argument("--work", type=Path, default=ROOT / ".measure", help="sessions, build cache, exports")
    ap.add_argument("--results", type=Path, default=None, help="result files (default results/<plan's GPU>)")
    ap.add_argument("--cuda-l2", type=Path, default=None, help="a CUDA-L2 checkout (h100-cuda-l2)")
    args = ap.parse_args(argv)
    if args.list or args.plan is None:
        for p in PLANS.values():
            print(f"{p.name:18} {p.about}")
            for s in p.steps:
                print(f"{'':20}- {s.name}")
        return 0
    plan = PLANS[args.plan]
    ctx = Ctx(work=args.work.resolve(), results=(args.results or ROOT / "results" / plan.gpu).resolve(),
              cuda_l2=args.cuda_l2.resolve() if args.cuda_l2 else None)
    return run_plan(plan, ctx, args.budget)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
