"""The GPU worker's protocol with a worker that really dies and really hangs (no GPU needed)."""

from __future__ import annotations

import os
import time

import pytest

from harness.worker import GpuWorker, WorkerCrashed, WorkerRemoteError, WorkerTimeout


@pytest.fixture
def worker():
    w = GpuWorker(default_timeout_s=30)
    yield w
    w.close()


def test_ping_runs_in_a_separate_process(worker):
    r = worker.call("ping")
    assert r["pid"] != os.getpid()
    assert worker.alive and worker.starts == 1


def test_segfault_is_reported_as_crash_and_worker_restarts(worker):
    pid1 = worker.call("ping")["pid"]
    with pytest.raises(WorkerCrashed) as ei:
        worker.call("_debug_segfault")
    assert "SIGSEGV" in str(ei.value)
    assert str(ei.value).startswith("_debug_segfault: the GPU worker died")
    assert ei.value.kind == "crashed"
    assert not worker.alive
    pid2 = worker.call("ping")["pid"]          # restarted lazily
    assert pid2 != pid1 and worker.starts == 2


def test_hang_times_out_kills_and_restarts(worker):
    pid1 = worker.call("ping")["pid"]
    t0 = time.monotonic()
    with pytest.raises(WorkerTimeout) as ei:
        worker.call("_debug_hang", timeout_s=1.5)
    assert ei.value.kind == "timeout"
    assert "no answer within 2 s" in str(ei.value)
    assert time.monotonic() - t0 < 15
    with pytest.raises(ProcessLookupError):
        os.kill(pid1, 0)                        # the hung worker is gone
    assert worker.call("ping")["pid"] != pid1


def test_exit_is_a_crash(worker):
    with pytest.raises(WorkerCrashed) as ei:
        worker.call("_debug_exit", code=5)
    assert "exit status 5" in str(ei.value)


def test_remote_exception_keeps_worker_alive(worker):
    pid = worker.call("ping")["pid"]
    with pytest.raises(WorkerRemoteError) as ei:
        worker.call("_debug_raise", message="kaputt")
    assert "kaputt" in str(ei.value) and ei.value.remote_type == "ValueError"
    assert worker.call("ping")["pid"] == pid


def test_unknown_op_is_an_error(worker):
    with pytest.raises(WorkerRemoteError):
        worker.call("no_such_op")


def test_request_within_timeout_succeeds(worker):
    assert worker.call("_debug_sleep", seconds=0.2, timeout_s=10) == 0.2


def test_stray_stdout_does_not_break_protocol(worker):
    # _debug_raise prints a traceback; the protocol channel must stay clean
    with pytest.raises(WorkerRemoteError):
        worker.call("_debug_raise")
    assert worker.call("ping")["pid"] > 0
    assert "ValueError" in worker.stderr_tail()


def test_close_ends_process():
    w = GpuWorker()
    pid = w.call("ping")["pid"]
    w.close()
    time.sleep(0.1)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_gpu_op_without_gpu_reports_no_gpu(worker):
    try:
        import cupy  # noqa: F401
        pytest.skip("cupy installed: this checks the message on a machine without it")
    except ImportError:
        pass
    with pytest.raises(WorkerRemoteError) as ei:
        worker.call("gpu_info")
    assert "no NVIDIA GPU found" in str(ei.value)


@pytest.mark.parametrize("op, args", [
    ("evaluate_shape", {"m": 64, "n": 64, "k": 64, "shim_path": "/nonexistent.so"}),
    ("roofline", {"shim_path": "/nonexistent.so"}),
    ("_debug_sticky", {}),
])
def test_every_gpu_op_is_wired_and_fails_cleanly_without_gpu(worker, op, args):
    try:
        import cupy  # noqa: F401
        pytest.skip("cupy installed: this checks the message on a machine without it")
    except ImportError:
        pass
    with pytest.raises(WorkerRemoteError) as ei:
        worker.call(op, **args)
    assert "no NVIDIA GPU found" in str(ei.value), str(ei.value)
    assert worker.call("ping")["pid"] > 0


def test_retiring_worker_is_not_a_crash(worker):
    pid = worker.call("ping")["pid"]
    assert worker.call("_debug_retire") == "retiring"
    assert not worker.alive
    assert worker.call("ping")["pid"] != pid     # restarted lazily, no error
    assert worker.starts == 2


def test_parent_side_imports_no_cuda_stack():
    """The calling process must never create a CUDA context: no cupy/torch/nvmath on import."""
    import subprocess
    import sys

    code = ("import sys, harness.evaluate, harness.bench, harness.worker, harness.results, harness.baselines, "
            "harness.roofline, harness.timing, harness.checks, l2tui.commands.bench; "
            "print(sorted(m for m in ('cupy', 'torch', 'nvmath', 'cuda.bindings.runtime') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_a_flood_of_prints_stops_at_the_file_cap_and_the_worker_carries_on(worker):
    """A candidate that prints on every call (host printf, or device printf flushed to stdout)
    writes to the worker's log; RLIMIT_FSIZE stops the log at MAX_FILE_BYTES, the writes past it
    fail, and the worker goes on answering."""
    from harness.worker_main import MAX_FILE_BYTES

    written = worker.call("_debug_print", nbytes=MAX_FILE_BYTES + (8 << 20))
    assert written <= MAX_FILE_BYTES
    assert worker._stderr_path is not None and worker._stderr_path.stat().st_size <= MAX_FILE_BYTES
    assert worker.call("ping")["pid"] and worker.alive and worker.starts == 1


@pytest.mark.skipif(not os.path.exists("/proc/self/oom_score_adj"), reason="no /proc oom_score_adj here")
def test_the_worker_is_the_first_to_go_when_memory_runs_out(worker):
    assert worker.call("_debug_oom_score") == "1000"
    with open("/proc/self/oom_score_adj", encoding="ascii") as f:
        assert f.read().strip() != "1000"
