#!/usr/bin/env python
"""Benchmark of the terminal UI: first-frame start-up time and event throughput (reports, not a test).

    python tools/bench_tui.py                     # both, default rates 100, 300, 1000 events/s
    python tools/bench_tui.py --rates 100 2000 --seconds 5 --json out.json

*Start-up*: a fresh ``python`` process imports l2tui, builds the replay app on
the fixture session and runs it headless; the time from process start to
Textual's ``Ready`` event (first frame drawn) is reported, with the heavy
modules that were (not) imported by then.

*Throughput*: the live main screen (headless, 160×48) with all 1,000 grid
shapes as tracks, fed by a thread that plays the loop's role at a fixed rate
(stage / candidate / compiled / checked / timed / reward / best / llm_delta /
telemetry events).  Reported: events folded per second, batches per second
(one message per batch), time spent handling batches, the lag from an event's
emission to its fold, and the event-loop stall (lateness of a 100 Hz timer), so
"fluid" is a number.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
FIXTURE = ROOT / "tests" / "fixtures" / "sessions" / "tui_grid"

STARTUP_SNIPPET = r"""
import time, sys
t0 = time.perf_counter()
from textual import events
from l2tui.tui.launch import make_replay_app
t_import = time.perf_counter()
app = make_replay_app(sys.argv[1], autoplay=False, start=10**9)
marks = {}
def ready(event):
    marks["ready"] = time.perf_counter()
    heavy = sorted(m for m in ("cupy", "torch", "openai", "pynvml", "l2tui.agent", "harness.evaluate") if m in sys.modules)
    marks["heavy"] = heavy
    app.exit()
app._on_ready = ready  # noqa
from textual.app import App
orig = app.on_event
async def on_event(event):
    await orig(event)
    if isinstance(event, events.Ready):
        ready(event)
app.on_event = on_event
app.run(headless=True, size=(160, 48))
import json
print(json.dumps({"import_s": t_import - t0, "first_frame_s": marks["ready"] - t0, "heavy_modules_loaded": marks["heavy"]}))
"""


def bench_startup(runs: int) -> dict:
    out = []
    for _ in range(runs):
        t = time.perf_counter()
        r = subprocess.run([sys.executable, "-c", STARTUP_SNIPPET, str(FIXTURE)], capture_output=True, text=True,
                           cwd=ROOT, timeout=120)
        wall = time.perf_counter() - t
        if r.returncode != 0:
            raise SystemExit(f"start-up run failed:\n{r.stderr[-2000:]}")
        d = json.loads(r.stdout.strip().splitlines()[-1])
        d["process_wall_s"] = wall
        out.append(d)
    return {
        "runs": runs,
        "first_frame_s_median": statistics.median(d["first_frame_s"] for d in out),
        "first_frame_s_min": min(d["first_frame_s"] for d in out),
        "import_s_median": statistics.median(d["import_s"] for d in out),
        "process_wall_s_median": statistics.median(d["process_wall_s"] for d in out),
        "heavy_modules_loaded": out[-1]["heavy_modules_loaded"],
    }


class SyntheticLoop:
    """Emits loop-shaped events at ``rate`` per second over all 1,000 grid shapes (the UI's load)."""

    def __init__(self, rate: float, seconds: float, shas: list[str]) -> None:
        from harness.shapes import grid

        self.rate, self.seconds, self.shas = rate, seconds, shas
        self.shapes = grid()
        self.subs = []
        self.stop = threading.Event()
        self.emitted = 0
        self.seq = 0
        self.t_emit: dict[int, float] = {}
        self.rng = random.Random(0)

    def subscribe(self, fn) -> None:
        self.subs.append(fn)

    def send(self, cmd: dict) -> None:
        pass

    def request_stop(self) -> None:
        self.stop.set()

    def _ev(self, type: str, **payload) -> None:
        ev = {"seq": self.seq, "time": time.time(), "type": type, **payload}
        self.t_emit[self.seq] = time.perf_counter()
        self.seq += 1
        for fn in self.subs:
            fn(ev)
        self.emitted += 1

    def preamble(self) -> list[dict]:
        evs = [{"seq": 0, "time": time.time(), "type": "session_started", "config": {"policy": "search"},
                "gpu": {"name": "NVIDIA H200"}, "versions": {}}]
        for s in self.shapes:
            tid = f"{s}-f32"
            evs.append({"seq": len(evs), "time": time.time(), "type": "track_added", "track": tid,
                        "shape": [s.m, s.n, s.k], "acc": "f32", "baseline": "cublas"})
        self.seq = len(evs)
        return evs

    def run(self) -> None:
        period = 1.0 / self.rate
        start = time.perf_counter()
        step = 0
        n = 0
        cycle = ("stage", "candidate", "compiled", "checked", "timed", "reward", "best", "llm_delta", "telemetry")
        while not self.stop.is_set() and time.perf_counter() - start < self.seconds:
            s = self.shapes[self.rng.randrange(len(self.shapes))]
            tid = f"{s}-f32"
            kind = cycle[n % len(cycle)]
            sha = self.shas[n % len(self.shas)]
            sp = self.rng.uniform(0.7, 1.4)
            times = {"candidate": 0.1, "cublas": 0.1 * sp, "torch": 0.11 * sp}
            if kind == "stage":
                self._ev("stage", track=tid, step=step, stage="compile", status="start")
            elif kind == "candidate":
                self._ev("candidate", track=tid, step=step, sha=sha, parent=None, origin="patch", policy="search",
                         family="f", diff="--- a\n+++ b\n@@ -1 +1 @@\n-#define BM 64\n+#define BM 128\n", flags=[])
            elif kind == "compiled":
                self._ev("compiled", track=tid, step=step, sha=sha, ok=True, ptxas={"registers": 128, "smem_bytes": 65536},
                         errors=[], seconds=2.0, cached=False)
            elif kind == "checked":
                self._ev("checked", track=tid, step=step, sha=sha, ok=True, status="ok", failed=None, detail="",
                         rel_err=1e-4, bound=1e-3)
            elif kind == "timed":
                self._ev("timed", track=tid, step=step, sha=sha, mode="offline", times_ms=times, roofline_ms=0.05,
                         baseline="cublas", speedup=sp)
            elif kind == "reward":
                self._ev("reward", track=tid, step=step, sha=sha, reward=sp - 1, parts={}, kind="ok")
            elif kind == "best":
                self._ev("best", track=tid, sha=sha, speedup=sp, baseline="cublas", times_ms=times)
            elif kind == "llm_delta":
                self._ev("llm_delta", track=tid, step=step, role="coder", text="tokens tokens tokens\n")
            else:
                self._ev("telemetry", sm_clock_mhz=1980, mem_clock_mhz=3201, temp_c=60, power_w=500.0,
                         power_limit_w=700.0, util_pct=99, mem_used_mib=4000)
            n += 1
            step = n // 1000
            target = start + n * period
            delay = target - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
        self.stop.wait()


async def bench_throughput(rate: float, seconds: float) -> dict:
    from l2tui.session import Session
    from l2tui.tui.app import L2App, UIContext
    from l2tui.tui.screens.main import MainScreen
    from l2tui.tui.loophandle import LoopHandle

    tmp = Path(tempfile.mkdtemp(prefix="l2tui-bench-"))
    sess = Session.create(tmp / "s", config={}, gpu={}, versions={})
    src = (FIXTURE / "kernels").glob("*.cu")
    shas = [sess.put_kernel(p.read_text()) for p in list(src)[:8]]
    loop = SyntheticLoop(rate, seconds, shas)
    preamble = loop.preamble()
    ctx = UIContext(session=sess, events=preamble, handle=LoopHandle(loop))
    app = L2App(ctx)
    handle_times: list[float] = []
    lags: list[float] = []
    batches = 0
    folded = 0
    stalls: list[float] = []
    async with app.run_test(size=(160, 48)) as pilot:
        scr = app.screen
        assert isinstance(scr, MainScreen)
        model = scr.model
        orig_apply, orig_sync = model.apply_many, scr._sync_all
        pending: list[dict] = []
        t_start = [0.0]

        def apply_many(events):  # the fold half of MainScreen._on_batch
            t_start[0] = time.perf_counter()
            pending[:] = list(events)
            return orig_apply(pending)

        def sync_all(ch):  # the redraw half
            nonlocal batches, folded
            orig_sync(ch)
            done = time.perf_counter()
            if not pending:
                return
            handle_times.append(done - t_start[0])
            batches += 1
            folded += len(pending)
            for ev in pending:
                te = loop.t_emit.get(ev.get("seq"))
                if te is not None:
                    lags.append(done - te)
            pending.clear()

        model.apply_many = apply_many  # type: ignore[method-assign]
        scr._sync_all = sync_all  # type: ignore[method-assign]

        async def tick_probe():
            last = time.perf_counter()
            while not loop.stop.is_set():
                await asyncio.sleep(0.01)
                now = time.perf_counter()
                if now - t0 > 1.0:  # after a 1 s warm-up (the first frame and the 1,000-track preamble)
                    stalls.append(now - last - 0.01)
                last = now

        t0 = time.perf_counter()
        probe = asyncio.create_task(tick_probe())
        while time.perf_counter() - t0 < seconds + 1.0:
            await pilot.pause(0.1)
        loop.request_stop()
        await pilot.pause(0.3)
        probe.cancel()
        nt = len(scr.model.tracks)
        all_folded = scr.model.n_events == len(preamble) + loop.emitted
    return {
        "rate_target": rate, "seconds": seconds, "tracks": nt, "emitted": loop.emitted, "all_folded": all_folded,
        "emitted_per_s": loop.emitted / seconds, "folded": folded, "folded_per_s": folded / seconds,
        "batches_per_s": batches / seconds, "events_per_batch": folded / batches if batches else 0,
        "batch_handle_ms_median": 1e3 * statistics.median(handle_times) if handle_times else None,
        "batch_handle_ms_p99": 1e3 * sorted(handle_times)[int(0.99 * (len(handle_times) - 1))] if handle_times else None,
        "lag_ms_median": 1e3 * statistics.median(lags) if lags else None,
        "lag_ms_max": 1e3 * max(lags) if lags else None,
        "event_loop_stall_ms_max": 1e3 * max(stalls) if stalls else None,
        "event_loop_stall_ms_p99": 1e3 * sorted(stalls)[int(0.99 * (len(stalls) - 1))] if stalls else None,
    }


def bench_fold(n: int = 100_000) -> dict:
    """The pure-Python fold alone (what a seek back costs per event)."""
    from l2tui.tui.sessionio import open_session
    from l2tui.tui.state import SessionModel

    evs = open_session(FIXTURE).events
    reps = max(1, n // len(evs))
    t = time.perf_counter()
    for _ in range(reps):
        SessionModel().apply_many(evs)
    dt = time.perf_counter() - t
    return {"events": reps * len(evs), "events_per_s": reps * len(evs) / dt}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rates", type=float, nargs="+", default=[100, 300, 1000])
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--startup-runs", type=int, default=5)
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args()
    report: dict = {"python": sys.version.split()[0]}
    report["startup"] = bench_startup(args.startup_runs)
    s = report["startup"]
    print(f"first frame: median {s['first_frame_s_median'] * 1e3:.0f} ms (min {s['first_frame_s_min'] * 1e3:.0f} ms; "
          f"imports {s['import_s_median'] * 1e3:.0f} ms); heavy modules loaded at first frame: {s['heavy_modules_loaded'] or 'none'}")
    report["fold"] = bench_fold()
    print(f"model fold: {report['fold']['events_per_s']:,.0f} events/s")
    report["throughput"] = []
    for rate in args.rates:
        r = asyncio.run(bench_throughput(rate, args.seconds))
        report["throughput"].append(r)
        print(f"{rate:>6.0f} ev/s target, {r['tracks']} tracks: folded {r['folded_per_s']:.0f} ev/s in "
              f"{r['batches_per_s']:.1f} batches/s ({r['events_per_batch']:.1f} ev/batch); batch handling median "
              f"{r['batch_handle_ms_median']:.1f} ms, p99 {r['batch_handle_ms_p99']:.1f} ms; lag median "
              f"{r['lag_ms_median']:.0f} ms, max {r['lag_ms_max']:.0f} ms; event-loop stall p99 "
              f"{r['event_loop_stall_ms_p99']:.1f} ms, max {r['event_loop_stall_ms_max']:.1f} ms; "
              f"every event folded: {r['all_folded']}")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
