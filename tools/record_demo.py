#!/usr/bin/env python3
"""Record the bundled demo: the live l2tui app running the search policy on a GPU.

On the GPU machine, from the checkout (about ``--budget-s`` seconds, then it stops by itself)::

    python tools/record_demo.py --budget-s 540

It drives the real app (``L2App`` through Textual's ``run_test`` pilot, the same screens, feed
and worker thread as ``l2tui``; the loop builds with nvcc and evaluates on the GPU) on 24 shapes,
eight from each size class of ``harness.shapes`` (small / mid / big, spread over the sample100
set), with delayed profiling after the first refinement step so Nsight Compute verdicts show up,
speedups over ``--baseline`` (cuBLASLt autotuned by default), each track starting from the known
kernels for its shape (``harness.known``, timed beside the cost model's choice and prebuilt with it)
(the seed is the cost model's choice, ``[search] pick_top = 0``: the pick's catalog timings go
through the evaluator's batch request, which ``--recorded`` cannot replay; ``--pick-top 5`` shows
the pick instead, at the price of a demo that replays only from its events), and writes

* the session, ``sessions/demo-h200/`` (``--out``): what a plain ``l2tui`` replays without a GPU (on
  a GPU other than an H200 the recorder needs ``--out``: it never replaces the H200 demo);
* ``evaluations.json`` in it: every GPU evaluation and profile of the run, so
  ``l2tui run --headless --recorded sessions/demo-h200/evaluations.json
  --config sessions/demo-h200/l2tui.toml --policy search --shapes sessions/demo-h200/shapes.txt``
  replays the same run (the same proposals, their recorded builds, no GPU) on any machine;
* ``shapes.txt`` and ``l2tui.toml`` in it: the shapes and the settings the run used;
* an SVG screenshot of the live screen just before the run's time was up,
  ``docs/screenshots/live-h200.svg`` (``--screenshot``).

Time: first the kernels the search will build first (each shape's seed and its first step's
proposals: the search is deterministic, so they are known before anything is measured) are
built in parallel on every core; the app starts once the seeds are built (at most a third of
the budget) while the rest go on building.  The loop gets what is left less a tail for the
stage in flight (``[loop] global_wall_time_s``: every track ends ``done`` and the session ends
cleanly); at the budget the recorder stops the loop, saves what it has and exits, whatever is
still running.

Rehearsal without a GPU (the same app and recorder; evaluations replayed from a recording)::

    python tools/record_demo.py --recorded tests/fixtures/recorded/evaluations.json \\
        --shapes 512x512x512,1024x1024x1024 --seed-kernel tests/fixtures/recorded/seed_tiled.cu \\
        --min-shapes 2 --out /tmp/demo --screenshot /tmp/live.svg --budget-s 120
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

#: the loop's share of the budget ends this long before the budget: the stage in flight
#: (a CUTLASS build takes up to a minute), the screenshot and the files
TAIL_S = 75.0
SIZE = (160, 48)


def demo_shapes(per_class: int = 8) -> list:
    """``per_class`` shapes of each size class, evenly spread (by work) over sample100's."""
    from harness.shapes import sample100

    out = []
    for cls in ("small", "mid", "big"):
        members = sorted((s for s in sample100() if s.size_class == cls), key=lambda s: (s.flops, s.m, s.n, s.k))
        step = len(members) / per_class
        out.extend(members[int(i * step + step / 2)] for i in range(per_class))
    return out


class DemoRecording:
    """The run's evaluator, keeping every GPU result and profile it returns (for ``--recorded``).

    Profiles go through the evaluator's own ``profile`` when it has one, else through
    ``harness.profiling.api.profile_kernel`` as the loop itself would; results the evaluator
    could not give (``not_recorded`` in a rehearsal) are not kept. Its other capabilities are the
    inner evaluator's (``__getattr__``)."""

    own_profiles = True

    def __init__(self, inner: Any, *, arch: str | None, meta: dict) -> None:
        from l2tui.agent.recorded import RecordingEvaluator

        self.inner = inner
        self.arch = arch
        self.rec = RecordingEvaluator(inner, meta=meta)
        self.lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:  # anything else the loop asks of an evaluator
        return getattr(self.inner, name)

    def evaluate(self, source: str, shape: Any, acc: str = "f32", **kw: Any) -> Any:
        from l2tui.agent.recorded import _to_dict, record_key

        ev = self.inner.evaluate(source, shape, acc, **kw)
        d = json.loads(json.dumps(_to_dict(ev), default=str))
        if d.get("status") != "not_recorded":
            with self.lock:
                self.rec.records[record_key(source, shape, acc)] = d
        return ev

    def profile(self, source: str, shape: Any, acc: str = "f32") -> Any:
        from l2tui.agent.recorded import _to_dict, record_key

        fn = getattr(self.inner, "profile", None)
        if fn is not None:
            p = fn(source, shape, acc)
        else:
            from harness.profiling.api import profile_kernel

            p = profile_kernel(source, shape, acc, arch=self.arch)
        if p is not None:
            d = p.to_dict(kernels=False) if hasattr(p, "to_dict") and not isinstance(p, dict) else _to_dict(p)
            with self.lock:
                self.rec.profiles[record_key(source, shape, acc)] = json.loads(json.dumps(d, default=str))
        return p

    def close(self) -> None:
        close = getattr(self.inner, "close", None)
        if close:
            close()

    def save(self, path: Path) -> Path:
        with self.lock:
            return self.rec.save(path)


def known_sources(shapes: list, cfg: Any, arch: str, gpu: dict) -> dict[Any, list[str]]:
    """Per shape, the known kernels a track times first (``harness.known``: this GPU's entry, or
    its neighbours' winners), as the loop's seed stage asks for them; empty without a GPU key."""
    from harness.known import GpuKey, KnownStore, family_usable

    key = GpuKey.from_info(gpu)
    if key is None or not cfg.loop.get("known", True):
        return {}
    store = KnownStore()
    return {s: [k.source for k in store.seeds(s, cfg.loop["acc"], key, usable=family_usable(s, arch),
                                              dtype=cfg.loop.get("dtype", "fp16"))] for s in shapes}


def predicted_sources(shapes: list, cfg: Any, arch: str,
                      known: dict[Any, list[str]] | None = None) -> tuple[list[str], list[str]]:
    """(seeds, first proposals): the kernels the search will build first for ``shapes``.

    The search is deterministic: its seed depends on the shape alone, and its first step's
    proposals on the seed, the track and the step number, none of them on a measurement. The
    shape's known kernels (``known``) are timed beside that seed; the fastest becomes the seed, so
    each is built with the first step's proposals from it."""
    import hashlib

    from l2tui.agent.patches import apply_patch
    from l2tui.agent.policies import make_policy
    from l2tui.agent.policies.base import TrackContext

    acc, baseline = cfg.loop["acc"], cfg.harness["baseline"]
    seeds: list[str] = []
    firsts: list[str] = []
    for s in shapes:
        pol = make_policy("search", cfg, gpu={"arch": arch})   # a fresh one: nothing tried yet
        track = f"{s}-{acc}"
        seed = pol.seed(TrackContext(track=track, shape=s, acc=acc, baseline=baseline, step=0, arch=arch)).source
        for start in ([seed] if seed else []) + list((known or {}).get(s, [])):
            if start not in seeds:
                seeds.append(start)
            sha = hashlib.sha256(start.encode()).hexdigest()
            for prop in pol.propose(TrackContext(track=track, shape=s, acc=acc, baseline=baseline, step=1,
                                                 source=start, sha=sha, arch=arch)):
                src = prop.source
                if src is None and prop.patch:
                    res = apply_patch(start, prop.patch, allow_rewrite=prop.origin in ("rewrite", "seed"))
                    src = res.source if res.ok else None
                if src and src not in seeds and src not in firsts:
                    firsts.append(src)
    return seeds, firsts


def prebuild(shapes: list, cfg: Any, arch: str, deadline: float, gpu: dict) -> Any:
    """Build the seeds (the search's and the known kernels) and the first step's proposals in
    parallel (one nvcc per core): the loop starts once the seeds are built (or at ``deadline``),
    and the rest go on building into the cache while the GPU evaluates the seeds.  Returns the
    pool (never joined)."""
    from harness.build import build

    seeds, firsts = predicted_sources(shapes, cfg, arch, known_sources(shapes, cfg, arch, gpu))
    print(f"record_demo: building {len(seeds)} seed kernels and {len(firsts)} first proposals of "
          f"{len(shapes)} shapes on {os.cpu_count()} cores", flush=True)
    t = time.monotonic()
    pool = ThreadPoolExecutor(max_workers=max(1, os.cpu_count() or 1))
    futures = [pool.submit(build, src, arch=arch) for src in seeds]
    for src in firsts:
        pool.submit(build, src, arch=arch)
    done, left = wait(futures, timeout=max(0.0, deadline - time.monotonic()))
    failed = sum(1 for f in done if f.exception() is not None or not f.result().ok)
    print(f"record_demo: {len(done)} seeds built ({failed} failed) in {time.monotonic() - t:.0f} s"
          + (f"; {len(left)} still building" if left else "") + "; the first proposals go on building", flush=True)
    return pool


def replay_settings(session_events: list[dict], overrides: dict[str, Any]) -> str:
    """``l2tui.toml`` for replaying the run with ``--recorded``: the settings it ran with, and
    ``max_steps`` at the steps every track the budget stopped had completed (so the replay asks
    for no kernel the recording lacks)."""
    steps: dict[str, int] = {}
    cut: set[str] = set()
    for e in session_events:
        if e.get("type") == "checkpoint" and isinstance(e.get("steps_done"), int):
            steps[e["track"]] = e["steps_done"]
        elif e.get("type") == "track_done" and str(e.get("reason", "")).startswith(("global_wall_time", "stopped")):
            cut.add(e["track"])
        elif e.get("type") == "track_state" and e.get("state") == "stopped":
            cut.add(e["track"])
    stopped = [steps.get(t, 0) for t in cut]
    max_steps = max(1, min(stopped)) if stopped else None
    sections: dict[str, dict[str, Any]] = {}
    for dotted, v in overrides.items():
        if v is None or dotted == "loop.global_wall_time_s":
            continue
        sec, key = dotted.split(".", 1)
        sections.setdefault(sec, {})[key] = v
    if max_steps is not None:
        loop = sections.setdefault("loop", {})
        loop["max_steps"] = min(max_steps, loop.get("max_steps", max_steps))
    lines = ["# The settings tools/record_demo.py ran this session with; with --recorded evaluations.json",
             "# it replays the same proposals (max_steps: the steps every track cut by the time budget finished)."]
    for sec, kv in sections.items():
        lines.append(f"[{sec}]")
        lines.extend(f"{k} = {json.dumps(v)}" for k, v in kv.items())
    return "\n".join(lines) + "\n"


def summarize(events: list[dict]) -> dict[str, Any]:
    count: dict[str, int] = {}
    for e in events:
        count[e.get("type", "?")] = count.get(e.get("type", "?"), 0) + 1
    best: dict[str, float] = {}
    for e in events:
        if e.get("type") == "best" and isinstance(e.get("speedup"), (int, float)):
            best[e["track"]] = float(e["speedup"])
    from harness.stats import geomean

    gm = geomean(best.values())
    return {"events": len(events), "tracks": count.get("track_added", 0), "timed": count.get("timed", 0),
            "profiled": count.get("profiled", 0), "profiling_enabled": count.get("profiling_enabled", 0),
            "telemetry": count.get("telemetry", 0), "not_recorded": sum(
                1 for e in events if e.get("type") == "reward" and e.get("kind") == "not_recorded"),
            "tracks_with_best": len(best), "geomean_best": gm, "ended": any(e.get("type") == "session_ended" for e in events)}


async def drive(app: Any, *, shot_at: float, hard_stop: float, screenshot: Path, view_all: bool,
                finalize: Any) -> bool:
    """Run the app until the loop ends or ``hard_stop``; screenshot at ``shot_at`` (or the end).

    When the loop is still inside a stage at ``hard_stop`` (an nvcc build or an NCU run cannot be
    interrupted), ``finalize(False)`` writes the files and the process ends there: leaving the
    app would wait for that stage."""
    session = app.ctx.session
    shot = False

    def ended() -> bool:
        return any(e.get("type") == "session_ended" for e in session.events[-4:])

    async def take() -> None:
        nonlocal shot
        scr = app.screen
        if view_all and getattr(scr, "view", None) == "grid":
            scr.action_cycle_view()        # "all K": every shape of the run on one screen
            await asyncio.sleep(0.5)
        screenshot.parent.mkdir(parents=True, exist_ok=True)
        app.save_screenshot(filename=screenshot.name, path=str(screenshot.parent))
        shot = True
        print(f"record_demo: screenshot {screenshot}", flush=True)

    async with app.run_test(size=SIZE) as pilot:
        while True:
            await pilot.pause(0.5)
            now = time.monotonic()
            if not shot and (now >= shot_at or ended()):
                await pilot.pause(1.0)     # let the last batch reach the screen
                await take()
            if ended():
                break
            if now >= hard_stop:
                print("record_demo: budget reached; stopping the loop", flush=True)
                if app.ctx.handle is not None:
                    app.ctx.handle.request_stop()
                for _ in range(10):
                    await pilot.pause(0.5)
                    if ended():
                        break
                break
        if not shot:
            await take()
        finished = ended()
        if not finished:
            rc = finalize(False)
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(rc)
        await pilot.pause(0.2)
    return finished


def main(argv: list[str] | None = None) -> int:
    from harness.errors import HarnessError

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--budget-s", type=float, default=540.0, help="whole run, seconds (default 540)")
    ap.add_argument("--shapes", action="append", metavar="SPEC",
                    help="shapes (default: 24, eight of each size class)")
    ap.add_argument("--out", type=Path, default=None, help="session folder (default: sessions/demo-h200)")
    ap.add_argument("--force", action="store_true", help="replace --out if it holds a session")
    ap.add_argument("--screenshot", type=Path, default=ROOT / "docs" / "screenshots" / "live-h200.svg")
    ap.add_argument("--recorded", metavar="FILE", help="replay evaluations from FILE (a rehearsal without a GPU)")
    ap.add_argument("--config", metavar="FILE", help="config file the run starts from (default: l2tui's search)")
    ap.add_argument("--profile-after", type=int, default=1, help="[loop] profile_after (default 1)")
    ap.add_argument("--baseline", default="cublaslt_autotune",
                    help="[harness] baseline the speedups are over (default cublaslt_autotune, the fastest library "
                         "per call on most shapes)")
    ap.add_argument("--candidates-per-step", type=int, default=2, help="[search] candidates_per_step (default 2)")
    ap.add_argument("--parallel-tracks", type=int, default=None, help="[loop] parallel_tracks (default: every shape)")
    ap.add_argument("--seed-kernel", metavar="FILE", help="[loop] seed (default: the search policy's pick)")
    ap.add_argument("--max-steps", type=int, default=None, help="[loop] max_steps (default: the config's)")
    ap.add_argument("--pick-top", type=int, default=0,
                    help="[search] pick_top (default 0: the seed is the cost model's choice; the pick's catalog "
                         "timings are not in evaluations.json, so a run with the pick does not replay with --recorded)")
    ap.add_argument("--no-prebuild", action="store_true",
                    help="do not build the seeds and first proposals in parallel first")
    ap.add_argument("--min-shapes", type=int, default=24, help="fail unless the session has this many tracks")
    args = ap.parse_args(argv)
    t0 = time.monotonic()
    try:
        return record(args, t0)
    except HarnessError as e:
        print(f"record_demo: error: {e}", file=sys.stderr)
        return 2


def refuse_another_gpu_over_the_bundled_demo(gpu_name: str) -> None:
    """The bundled demo is named for the GPU it was recorded on (``sessions/demo-h200``), and the
    app shows it as that GPU's results: a recording on another GPU goes to a folder of its own
    (``--out``) and never replaces it."""
    from l2tui import paths
    from l2tui.errors import UserError

    if "H200" not in gpu_name:
        raise UserError(f"the bundled demo ({paths.DEMO_SESSION.name}) is an H200 recording and this GPU is "
                        f"{gpu_name}: record it into a folder of its own with --out DIR")


def record(args: argparse.Namespace, t0: float) -> int:
    from harness.shapes import resolve_shapes

    from l2tui import paths
    from l2tui.config import load_config
    from l2tui.errors import UserError
    from l2tui.tui.launch import gpu_present, make_live_app

    out: Path = args.out or paths.DEMO_SESSION
    if args.budget_s < 30:
        raise UserError("--budget-s must be at least 30 seconds")
    shapes = resolve_shapes(args.shapes) if args.shapes else demo_shapes()
    if not args.recorded and not gpu_present():
        raise UserError("no NVIDIA GPU found: record the demo on a GPU machine, or rehearse with --recorded FILE")
    if not args.recorded and args.out is None:
        from harness.gpuinfo import require_gpu

        refuse_another_gpu_over_the_bundled_demo(require_gpu().name)
    if (out / "events.jsonl").exists():
        if not args.force:
            raise UserError(f"{out} already holds a session: add --force to replace it")
        shutil.rmtree(out)

    cfg = load_config(args.config)
    overrides: dict[str, Any] = {
        "loop.profile_after": args.profile_after,
        "harness.baseline": args.baseline,
        "loop.parallel_tracks": args.parallel_tracks or len(shapes),
        "loop.seed": args.seed_kernel,
        "loop.max_steps": args.max_steps,
        "search.candidates_per_step": args.candidates_per_step,
        "search.pick_top": args.pick_top,
    }
    cfg = cfg.with_overrides(overrides)
    meta: dict[str, Any] = {"provisional": False, "note": "tools/record_demo.py: the bundled demo run"}
    if args.recorded:
        from l2tui.agent.recorded import RecordedEvaluator

        src = RecordedEvaluator(args.recorded, build=False).meta
        arch = cfg.harness.get("arch") or src.get("arch") or "sm_90a"
        meta.update(gpu=src.get("gpu") or {}, arch=arch, replayed_from=str(args.recorded))
    else:
        from harness.gpuinfo import require_gpu

        info = require_gpu()
        arch = cfg.harness.get("arch") or info.arch
        meta.update(gpu=info.to_dict(), arch=arch)
        if not args.no_prebuild and not args.seed_kernel and not args.pick_top:
            prebuild(shapes, cfg, arch, deadline=t0 + args.budget_s / 3, gpu=info.to_dict())

    hard_stop = t0 + args.budget_s - 8.0
    loop_budget = max(10.0, hard_stop - time.monotonic() - min(TAIL_S, args.budget_s / 4))
    overrides["loop.global_wall_time_s"] = round(loop_budget, 1)
    cfg = cfg.with_overrides({"loop.global_wall_time_s": overrides["loop.global_wall_time_s"]})

    holder: dict[str, DemoRecording] = {}

    def wrap(ev: Any) -> Any:
        holder["rec"] = DemoRecording(ev, arch=arch, meta=meta)
        return holder["rec"]

    # the spec as given, so a shapes file's role comments name the GEMMs in the list view
    spec = [args.shapes] if isinstance(args.shapes, str) else list(args.shapes or [" ".join(map(str, shapes))])
    ns = argparse.Namespace(session=str(out), resume=False, shapes=spec,
                            policy="search", app_recorded=args.recorded, config=args.config)
    app = make_live_app(ns, cfg, wrap=wrap)
    print(f"record_demo: live app on {len(shapes)} shapes into {out}; the loop has {loop_budget:.0f} s", flush=True)

    def finalize(finished: bool) -> int:
        return write_and_check(app, holder, out, shapes, overrides, args, t0, finished)

    finished = asyncio.run(drive(app, shot_at=time.monotonic() + loop_budget - 5.0, hard_stop=hard_stop,
                                 screenshot=args.screenshot, view_all=True, finalize=finalize))
    return finalize(finished)


def write_and_check(app: Any, holder: dict, out: Path, shapes: list, overrides: dict, args: argparse.Namespace,
                    t0: float, finished: bool) -> int:
    """The files beside the session, then a check that the session is complete and replays."""
    (out / "shapes.txt").write_text("".join(f"{s}\n" for s in shapes))
    events = list(app.ctx.session.events)
    (out / "l2tui.toml").write_text(replay_settings(events, overrides))
    if "rec" in holder:
        holder["rec"].save(out / "evaluations.json")
    from l2tui.tui.launch import make_replay_app

    replay = make_replay_app(out)
    summary = summarize(list(replay.ctx.events))
    summary["loop_finished"] = finished
    summary["seconds"] = round(time.monotonic() - t0, 1)
    print("record_demo: " + json.dumps(summary), flush=True)
    problems = []
    if summary["tracks"] < args.min_shapes:
        problems.append(f"{summary['tracks']} tracks (< {args.min_shapes})")
    if not summary["timed"]:
        problems.append("nothing timed")
    if not summary["profiled"] or not summary["profiling_enabled"]:
        problems.append("no NCU verdict / no delayed profiling in the session")
    if not args.recorded and not summary["telemetry"]:
        problems.append("no telemetry events")
    if not summary["ended"]:
        problems.append("the session has no session_ended event (the loop was still in a stage at the budget)")
    for p in problems:
        print(f"record_demo: warning: {p}", file=sys.stderr, flush=True)
    return 1 if problems else 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)   # builds of the prebuild pool may still run: the budget wins over them
