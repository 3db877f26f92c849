"""The worker's answer channel carries data only (issue 51): real nvcc, real bwrap, the real worker.

A candidate's host code runs inside the worker and can write to any of its descriptors, the
answer pipe included. These tests load such a library (tests/channel_attack.py) into the real
worker and check that what it writes runs nothing in this process, is charged to it in one line,
and that the next request is served. The library's constructor is refused by the source policy
(load-time-attribute), so it is built with the policy bypassed and loaded through the worker's
``_debug_load`` op and through ``evaluate_shape``, which loads candidates before it touches the
GPU; the same attack from ``l2_hgemm``, which the policy lets through, needs a GPU:
tests/test_worker_channel_gpu.py.
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path

import pytest

import channel_attack as attack
from harness import channel, sandbox
from harness import source_policy as sp
from harness.build import build
from harness.channel import FrameError
from harness.worker import GpuWorker, OutOfTurn, WorkerCrashed, check_answer

LABEL = "evil-candidate"


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A private build cache and a folder outside every sandbox for the markers."""
    root = tmp_path_factory.mktemp("chan")
    mp = pytest.MonkeyPatch()
    mp.setenv("L2TUI_CACHE_DIR", str(root / "cache"))
    mp.delenv("L2TUI_SANDBOX", raising=False)
    outside = root / "outside"
    outside.mkdir()
    yield {"root": root, "outside": outside}
    mp.undo()


@pytest.fixture(scope="module", params=["pickle", "json"])
def hostile(request, lab):
    """The at-load attacker writing old pickle frames or forged current frames."""
    marker = lab["outside"] / f"marker-{request.param}"
    src = attack.at_load_source(attack.frames_for(request.param, marker))
    assert any("(load-time-attribute)" in m for _, _, m in sp.violations(src))   # why it is loaded directly
    res = build(src, arch="sm_90a", trusted=True, use_cache=False)
    assert res.ok, res.error_text()
    return {"kind": request.param, "so": str(res.so_path), "marker": marker}


def _sandbox_modes() -> list[bool]:
    return [True, False] if sandbox.probe().works else [False]


def _assert_charged(e: WorkerCrashed, kind: str) -> None:
    text = str(e)
    assert "\n" not in text and LABEL in text and text.endswith("it was restarted")
    assert ("malformed answer" if kind == "pickle" else "answered out of turn") in text, text


@pytest.mark.parametrize("sandboxed", _sandbox_modes())
def test_frames_written_at_load_run_nothing_and_charge_the_library(hostile, sandboxed):
    with GpuWorker(sandbox=sandboxed, default_timeout_s=60) as w:
        with pytest.raises(WorkerCrashed) as ei:
            w.call("_debug_load", path=hostile["so"], label=LABEL)
        _assert_charged(ei.value, hostile["kind"])
        assert ei.value.kind == "crashed"
        assert w.call("ping")["pid"] > 0 and w.starts == 2          # l2tui carries on with a fresh worker
    time.sleep(0.2)
    assert not hostile["marker"].exists(), "the worker's frame ran code in the parent"


def test_evaluate_shape_charges_the_candidate_it_was_evaluating(hostile):
    cands = [{"label": LABEL, "so_path": hostile["so"], "nondeterministic": False}]
    with GpuWorker(default_timeout_s=60) as w:
        with pytest.raises(WorkerCrashed) as ei:
            w.call("evaluate_shape", m=64, n=64, k=64, acc="f32", shim_path="/nonexistent.so", candidates=cands,
                   baselines=["cublas"])
        _assert_charged(ei.value, hostile["kind"])
        assert ei.value.label == LABEL
        assert w.call("ping")["pid"] > 0
    assert not hostile["marker"].exists()


def _open_answer_pipe_of(w: GpuWorker) -> int:
    """A write descriptor onto the pipe the worker answers on, found through /proc as any process
    of the same user could (the stray writer of the test below)."""
    ours = os.readlink(f"/proc/self/fd/{w._rfd}")
    fds = Path(f"/proc/{w.pid}/fd")
    for fd in fds.iterdir():
        try:
            if os.readlink(fd) == ours:
                return os.open(fd, os.O_WRONLY)
        except OSError:
            continue
    raise AssertionError("the worker's answer pipe was not found")


def test_a_frame_that_arrives_when_nothing_was_asked_is_never_an_answer():
    """Bytes waiting on the pipe before a request is sent were written by no request: the worker is
    replaced before the request, and the request gets its own answer."""
    with GpuWorker(sandbox=False, default_timeout_s=60) as w:
        pid = w.call("ping")["pid"]
        fd = _open_answer_pipe_of(w)
        try:
            os.write(fd, channel.encode_frame({"id": "ab", "ok": True, "result": 0.5, "retire": False}))
        finally:
            os.close(fd)
        assert w.call("_debug_sleep", seconds=0.25) == 0.25
        assert w.starts == 2 and w.call("ping")["pid"] != pid


# --------------------------------------------------------------------------- the decoder, unit by unit

REQ = {"m": 64, "n": 64, "k": 64, "acc": "f32", "candidates": [{"label": "a", "so_path": "/x.so"}], "baselines": ["cublas"]}


def shape_answer(**over: object) -> dict:
    """A well-formed evaluate_shape answer to REQ."""
    res = {
        "shape": [64, 64, 64], "acc": "f32", "mode": "offline", "status": {"a": "ok", "cublas": "ok"},
        "checks": {"a": {"ok": True, "failed": None, "detail": "all checks passed", "rel_err": 1e-3, "bound": 0.01,
                         "checks": {"runs": {"ok": True, "detail": "ran"}}},
                   "cublas": {"ok": True, "failed": None, "detail": "all checks passed", "rel_err": 1e-3, "bound": 0.01}},
        "times_ms": {"a": 0.02, "cublas": 0.03}, "spread": {"a": 0.01, "cublas": 0.01},
        "p90_ms": {"a": 0.021, "cublas": 0.031}, "device_ms": {}, "reps": {"a": 20, "cublas": 20},
        "timing": "isolated", "times_ms_chained": {}, "spread_chained": {}, "separator_ms": None,
        "detail_times_ms": {"cublas_nn": 0.03, "cublas_tn": 0.031}, "cublas_variant": "nn", "absent": {},
        "errors": {}, "bound": 0.01, "ref_err": {"e32": [1e-6], "e16": [1e-3]}, "autotune": None,
        "clocks": {"before": {"sm_mhz": 1980, "power_w": None}, "after": {"sm_mhz": 1980, "power_w": 300.5}},
        "roofline_ms": 0.001, "seconds": 1.5, "phases": {"setup": 0.1, "checks": 0.5, "timing": 0.9},
    }
    res.update(over)
    return res


def ok(result: object, rid: str = "ab12") -> dict:
    return {"id": rid, "ok": True, "result": result, "retire": False}


def test_a_well_formed_answer_passes():
    assert check_answer("evaluate_shape", ok(shape_answer()), "ab12", REQ)["result"]["times_ms"]["a"] == 0.02
    assert check_answer("ping", ok({"pid": 5, "python": "3.12.1"}), "ab12", {})["ok"] is True


def test_an_oversize_frame_is_refused_from_its_header():
    header = channel.HEADER.pack(channel.MAGIC, channel.MAX_FRAME_BYTES + 1)
    with pytest.raises(FrameError, match="more than the limit"):
        channel.frame_length(header)
    with pytest.raises(FrameError, match="not a frame"):
        channel.frame_length((123).to_bytes(8, "big"))        # an old-protocol header
    with pytest.raises(FrameError, match="more than the limit"):
        channel.loads(b" " * (channel.MAX_FRAME_BYTES + 1))


def test_an_oversize_header_on_a_real_pipe_is_refused_before_the_body_is_read():
    w = GpuWorker()
    r, wr = os.pipe()
    try:
        w._rfd = r
        os.write(wr, channel.HEADER.pack(channel.MAGIC, 1 << 30))
        with pytest.raises(WorkerCrashed) as ei:
            w._read_frame(time.monotonic() + 10, "evaluate_shape", subject="cand-7")
        assert "malformed answer while evaluating cand-7" in str(ei.value) and "\n" not in str(ei.value)
    finally:
        os.close(r)
        os.close(wr)


@pytest.mark.parametrize("body", [b'{"id": "ab12", "ok": tr', b"\x80\x81", b"[" * 100000 + b"]" * 100000,
                                  b'{"id": "ab12", "id": "cd34"}', b"cos\nsystem\n(S'touch x'\ntR."])
def test_truncated_or_ambiguous_or_foreign_bodies_are_one_line(body):
    with pytest.raises(FrameError) as ei:
        channel.loads(body)
    assert "\n" not in str(ei.value)


@pytest.mark.parametrize("op, answer, match", [
    ("ping", ok({"pid": "5", "python": "3"}), r"\$\.result\.pid: expected an integer"),
    ("ping", ok({"pid": True, "python": "3"}), r"\$\.result\.pid: expected an integer"),
    ("ping", ok({"pid": 5, "python": "3", "code": "x"}), "unexpected key 'code'"),
    ("ping", {"id": "ab12", "ok": True, "result": {"pid": 5, "python": "3"}, "retire": False, "more": 1},
     "unexpected key 'more'"),
    ("ping", {"id": "ab12", "ok": True, "result": {"pid": 5, "python": "3"}}, "'retire' is missing"),
    ("ping", ok({"pid": 5, "python": "3" * 100}), "more than 32"),
    ("no_such_op", ok(None), "has no result"),
    ("evaluate_shape", ok(shape_answer(times_ms={"a": math.inf, "cublas": 0.03})), r"times_ms\.a: expected a finite"),
    ("evaluate_shape", ok(shape_answer(times_ms={"a": math.nan, "cublas": 0.03})), r"times_ms\.a: expected a finite"),
    ("evaluate_shape", ok(shape_answer(times_ms={"a": -1.0, "cublas": 0.03})), r"times_ms\.a: expected a number in"),
    ("evaluate_shape", ok(shape_answer(seconds=math.inf)), r"\$\.result\.seconds"),
    ("evaluate_shape", ok(shape_answer(status={"a": "ok", "forged": "ok"})), "'forged', which the request did not"),
    ("evaluate_shape", ok(shape_answer(shape=[128, 64, 64])), "not the shape asked for"),
    ("evaluate_shape", ok(shape_answer(acc="f16")), "not the accumulator asked for"),
    ("evaluate_shape", ok(shape_answer(timing="fastest")), r"\$\.result\.timing"),
    ("evaluate_shape", ok(shape_answer(hack=1)), "unexpected key 'hack'"),
    ("evaluate_shape", ok(shape_answer(checks={"a": {"ok": "yes", "failed": None, "detail": ""}})), r"checks\.a\.ok"),
    ("evaluate_shape", ok({k: v for k, v in shape_answer().items() if k != "times_ms"}), "'times_ms' is missing"),
    ("evaluate_shape", {"id": "ab12", "ok": False, "kind": "fine", "error": "x", "type": "T"}, r"\$\.kind"),
])
def test_a_malformed_answer_names_the_field(op, answer, match):
    with pytest.raises(FrameError, match=match) as ei:
        check_answer(op, answer, "ab12", REQ)
    assert "\n" not in str(ei.value) and not isinstance(ei.value, OutOfTurn)


@pytest.mark.parametrize("rid", ["1", "cd34", None, 1])
def test_an_answer_with_another_id_is_out_of_turn(rid):
    with pytest.raises(OutOfTurn):
        check_answer("ping", {"id": rid, "ok": True, "result": {"pid": 5, "python": "3"}, "retire": False}, "ab12", {})


def test_results_are_made_plain_at_the_source_and_anything_else_is_refused():
    assert channel.loads(channel.dumps({"t": (1, 2.5), "n": None})) == {"t": [1, 2.5], "n": None}
    with pytest.raises(TypeError, match=r"\$\.p: a PosixPath"):
        channel.dumps({"p": Path("/x")})
    with pytest.raises(TypeError, match="bytes"):
        channel.dumps({"b": b"x"})


def test_the_log_tail_quoted_in_a_crash_line_shows_control_characters_as_escapes(tmp_path):
    """A candidate's prints land in the worker's log, and a crash line quotes its last lines."""
    from harness.worker import WorkerRemoteError

    with GpuWorker(sandbox=False, default_timeout_s=60) as w:
        with pytest.raises(WorkerRemoteError):      # the worker prints the error's text to its log
            w.call("_debug_raise", message="kernel says \x1b]52;c;aGk=\x07\x1b[2J done")
        with pytest.raises(WorkerCrashed) as ei:
            w.call("_debug_exit", code=4)
    line = str(ei.value)
    assert "\x1b" not in line and "\x07" not in line and "\\x1b]52;c;aGk=\\x07" in line and "\n" not in line
