"""bf16 through the GPU worker, on the CPU: the evaluate_shape request's ``dtype`` (its schema, an
old request read as fp16, the answer held to the type asked for), a library of the other element
type refused in one line, the bf16 inputs' bits, the timing and its checks on bf16 buffers (the
simulated GPU of tests/gpusim.py) and ``bench --dtype bf16`` reaching the GPU.

Why: a bf16 request evaluated on fp16 buffers, or an fp16 kernel handed bf16 bits, produces
plausible numbers that are wrong; each of these seams must say so, or carry the type through.
What real kernels do on a GPU is tests/test_bf16_gpu.py (``pytest -m gpu``)."""

from __future__ import annotations

import ctypes
import os
import random
import subprocess
import sys
from fractions import Fraction
from types import SimpleNamespace

import numpy as np
import pytest

from harness import baselines as bl
from harness import channel
from harness import checks as ck
from harness import shape_timing as st
from harness.build import build
from harness.channel import FrameError
from harness.errors import HarnessError, KernelSourceError
from harness.evaluate import Evaluator
from harness.gpuinfo import gpu_present
from harness.shape_eval import SeedChecks, ShapeChecks, Subjects, candidate_subjects, entry_refusal
from harness.shape_result import check_shape_request, check_shape_result, request_dtype, shape_result
from harness.testkernels import source as kernel_source
from harness.worker import GpuWorker, WorkerRemoteError

import gpusim

REQ = {"m": 64, "n": 48, "k": 32, "shim_path": "/nonexistent.so", "acc": "f32",
       "candidates": [{"label": "cand", "so_path": "/x.so", "nondeterministic": False}], "baselines": ["cublas"]}


# --------------------------------------------------------------------------- the request and the answer


def test_the_request_carries_dtype_through_a_frame_and_an_old_request_is_fp16():
    for dtype in ("fp16", "bf16"):
        sent = {**REQ, "dtype": dtype}
        frame = channel.encode_frame({"id": "ab", "op": "evaluate_shape", "args": sent})
        got = channel.loads(frame[channel.HEADER.size:])
        assert isinstance(got, dict)
        check_shape_request(got["args"])
        assert request_dtype(got["args"]) == dtype
    check_shape_request(REQ)
    assert request_dtype(REQ) == "fp16"


@pytest.mark.parametrize("change, words", [
    ({"dtype": "fp8"}, "$.args.dtype: expected one of fp16/bf16"),
    ({"dtype": 16}, "$.args.dtype: expected a string"),
    ({"dtype": "bf16", "acc": "f16"}, "bf16 accumulates in f32 only"),
    ({"m": "64"}, "$.args.m: expected an integer"),
])
def test_a_bad_request_is_refused_in_one_line(change, words):
    with pytest.raises(FrameError) as ei:
        check_shape_request({**REQ, **change})
    assert words in str(ei.value) and "\n" not in str(ei.value)


def _answer(dtype: str | None) -> dict:
    res = shape_result(m=64, n=48, k=32, acc="f32", mode="offline", timing_mode="isolated",
                       kinds={"cand": "candidate"}, baselines=[], status={"cand": "ok"},
                       summaries={"cand": {"ok": True, "failed": None, "detail": "all checks passed"}},
                       timed={"cand": {"median_ms": 0.01, "spread": 0.01, "p90_ms": 0.011}}, chained={}, absent={},
                       errors={}, bounds=[1e-5], e32s=[4e-6], e16s=[], autotune=None, clocks_before={},
                       clocks_after={}, roofline_ms=0.001, seconds=1.0, phases={}, dtype=dtype or "fp16")
    if dtype is None:
        del res["dtype"]     # an answer of a worker from before bf16
    return channel.loads(channel.dumps(res))   # type: ignore[return-value]


def test_the_answer_names_its_dtype_and_must_be_the_one_asked_for():
    check_shape_result(_answer("bf16"), {**REQ, "dtype": "bf16"})
    check_shape_result(_answer("fp16"), REQ)
    check_shape_result(_answer(None), REQ)                   # no dtype: fp16, as asked
    for answer, req in ((_answer("bf16"), REQ), (_answer(None), {**REQ, "dtype": "bf16"}),
                        (_answer("fp16"), {**REQ, "dtype": "bf16"})):
        with pytest.raises(FrameError, match=r"\$\.dtype: .* is not the element type asked for"):
            check_shape_result(answer, req)


def test_the_worker_process_refuses_a_bad_dtype_in_one_line_and_takes_bf16():
    with GpuWorker(default_timeout_s=60) as w:
        with pytest.raises(WorkerRemoteError) as ei:
            w.call("evaluate_shape", **{**REQ, "dtype": "fp8"})
        assert "dtype: expected one of fp16/bf16" in str(ei.value) and "\n" not in str(ei.value)
        if not gpu_present():
            with pytest.raises(WorkerRemoteError, match="no NVIDIA GPU found"):
                w.call("evaluate_shape", **{**REQ, "candidates": [], "dtype": "bf16"})


def test_the_evaluator_takes_a_dtype_and_refuses_a_wrong_one_in_one_line():
    with pytest.raises(HarnessError, match="unknown dtype 'fp8'"):
        Evaluator(dtype="fp8")
    ev = Evaluator(dtype="bf16", worker=SimpleNamespace(close=lambda: None))
    assert ev.dtype == "bf16"
    with pytest.raises(HarnessError, match="bf16 accumulates in f32 only"):
        ev.evaluate(kernel_source("testbad_bf16trunc"), gpusim_shape(), "f16")
    # an fp16 kernel in a bf16 evaluator is refused before nvcc runs
    with pytest.raises(KernelSourceError) as ei:
        ev.evaluate(kernel_source("testgood_simple"), gpusim_shape())
    assert "takes fp16" in str(ei.value) and "\n" not in str(ei.value)


def test_run_shape_sends_the_evaluators_dtype_or_the_one_given():
    sent: list[dict] = []

    class Worker:
        def call(self, op: str, timeout_s: float, **args: object) -> dict:
            sent.append(args)
            return {"status": {}, "times_ms": {}, "checks": {}}

        def close(self) -> None:
            pass

    ev = Evaluator(dtype="bf16", worker=Worker())     # type: ignore[arg-type]
    ev._shim = SimpleNamespace(so_path="/shim.so")    # type: ignore[assignment]
    ev.run_shape(gpusim_shape(), "f32", [], ["cublas"])
    ev.run_shape(gpusim_shape(), "f32", [], ["cublas"], dtype="fp16")
    assert [a["dtype"] for a in sent] == ["bf16", "fp16"]
    with pytest.raises(HarnessError, match="bf16 accumulates in f32 only"):
        ev.run_shape(gpusim_shape(), "f16", [], [])


def gpusim_shape():
    from harness.shapes import Shape

    return Shape(64, 48, 32)


# --------------------------------------------------------------------------- a library of the other type


@pytest.fixture(scope="module")
def libraries() -> dict[str, ctypes.CDLL]:
    """A real fp16 kernel and a real bf16 kernel, built by nvcc and loaded as the worker loads them."""
    out = {}
    for dtype, name in (("fp16", "testgood_simple"), ("bf16", "testbad_bf16trunc")):
        res = build(kernel_source(name), arch="sm_80", dtype=dtype)
        assert res.ok, res.errors
        out[dtype] = ctypes.CDLL(str(res.so_path), mode=ctypes.RTLD_LOCAL)
    return out


@pytest.mark.compile
@pytest.mark.parametrize("has, asked", [("bf16", "fp16"), ("fp16", "bf16")])
def test_a_library_of_the_other_dtype_is_refused_in_one_line_and_never_called(libraries, has, asked):
    lib = libraries[has]
    assert entry_refusal(lib, has) is None
    why = entry_refusal(lib, asked)
    assert why is not None and "\n" not in why
    assert why.startswith(f"the library exports {'l2_hgemm_bf16' if has == 'bf16' else 'l2_hgemm'} ({has}), not ")
    g = SimpleNamespace(lib=lambda path: lib, stream=SimpleNamespace(ptr=0))
    buf = lambda: SimpleNamespace(ptr=0, data=np.zeros((2, 2), np.uint16))  # noqa: E731
    ctx = SimpleNamespace(key=(2, 2, 2), dtype=asked, A=buf(), B=buf(), C=buf())
    subs = Subjects()
    candidate_subjects(g, ctx, [{"label": "cand", "so_path": "/built.so"}], subs)   # type: ignore[arg-type]
    assert subs.refused == {"cand": why}
    sc = ShapeChecks(np, gpusim.SimGpu().stream, ctx, subs.subjects, {})  # type: ignore[arg-type]
    sc.refuse("cand", why)
    sc.set_statuses()
    assert sc.status == {"cand": "unsupported"} and "cand" not in sc.alive and not sc.timeable("cand")
    assert sc.recs["cand"].summary()["detail"] == why


# --------------------------------------------------------------------------- bf16 inputs


def _rne_bf16(v: float) -> int:
    """The bf16 bits nearest ``v`` (a finite float32), ties to the even significand: chosen by
    exact rational distance between the two bf16 neighbours, without bit arithmetic."""
    bits = int(np.array([v], np.float32).view(np.uint32)[0])
    down = bits >> 16                       # the bf16 towards zero from v
    up = down + 1
    val = lambda b: Fraction(float(np.array([b << 16], np.uint32).view(np.float32)[0]))  # noqa: E731
    dd, du = abs(Fraction(v) - val(down)), abs(val(up) - Fraction(v))
    if dd != du:
        return down if dd < du else up
    return down if down % 2 == 0 else up


class _NumpyAsCupy:
    """numpy under cupy's spelling of ``random.RandomState`` (``dtype=`` on standard_normal)."""

    class _State:
        def __init__(self, seed: int) -> None:
            self.rs = np.random.RandomState(seed)

        def standard_normal(self, shape: tuple[int, ...], dtype: type = np.float64) -> np.ndarray:
            return self.rs.standard_normal(shape).astype(dtype)

    random = SimpleNamespace(RandomState=_State)

    def __getattr__(self, name: str) -> object:
        return getattr(np, name)


def test_bf16_inputs_are_the_float32_draws_rounded_to_nearest_even_bit_for_bit():
    a = np.zeros((33, 17), np.uint16)
    b = np.zeros((17, 9), np.uint16)
    ck.fill_random(_NumpyAsCupy(), 5, a, b, "bf16")
    rs = _NumpyAsCupy._State(5)
    draws_a = rs.standard_normal(a.shape, np.float32)
    draws_b = rs.standard_normal(b.shape, np.float32)
    for got, draws in ((a, draws_a), (b, draws_b)):
        want = np.array([_rne_bf16(float(v)) for v in draws.ravel()], np.uint16).reshape(draws.shape)
        np.testing.assert_array_equal(got, want)
    # ties, both ways, and a carry into the exponent
    ties = np.array([1.0 + 2.0 ** -8, 1.0 + 3 * 2.0 ** -8, 2.0 - 2.0 ** -9, -(1.0 + 2.0 ** -8)], np.float32)
    got = ck.from_float32(np, ties, "bf16")
    assert got.tolist() == [_rne_bf16(float(v)) for v in ties] == [0x3F80, 0x3F82, 0x4000, 0xBF80]


# --------------------------------------------------------------------------- timing on bf16 buffers

SHAPE = (64, 48, 96)


def _fp16_reader(gpu: gpusim.SimGpu, ctx: SimpleNamespace):
    """A kernel of the wrong type: reads the bf16 bits of A and B as fp16 and writes fp16 bits."""

    def op() -> float:
        prod = np.asarray(ctx.A.data).view(np.float16).astype(np.float32) @ \
            np.asarray(ctx.B.data).view(np.float16).astype(np.float32)
        with np.errstate(all="ignore"):
            ctx.C.data[...] = prod.astype(np.float16).view(np.uint16)
        return 0.040

    def call() -> int:
        gpu.stream.launch(op)
        return 0

    return call


def _bf16_setup():
    gpu = gpusim.SimGpu()
    ctx = gpusim.context(gpu, *SHAPE, dtype="bf16")
    subjects = {"honest": bl.Subject("honest", gpusim.honest(gpu, ctx, 0.050), kind="candidate"),
                "fp16": bl.Subject("fp16", _fp16_reader(gpu, ctx), kind="candidate"),
                "cublas": bl.Subject("cublas", gpusim.honest(gpu, ctx, 0.045))}
    sc = ShapeChecks(gpu.cp, gpu.stream, ctx, subjects, {})
    sc.set_statuses()
    sc.keep_inputs()
    ref = ck.reference(gpu.cp, ctx.A.data, ctx.B.data, "bf16")
    bound = ck.bound_for("f32", 4e-3, None, "bf16")
    return gpu, ctx, sc, SeedChecks(ref=ref, norm=ck.ref_norm(gpu.cp, ref), bound=bound), bound


@pytest.mark.parametrize("mode", ["isolated", "both", "chained", "server"])
def test_every_timing_mode_runs_on_bf16_buffers_and_verifies_in_bf16(mode):
    """The separators, perturbers, verifiers and the sparse change read and write bf16 bits: an
    honest bf16 kernel passes every check of the timing, and a kernel that takes the bits for
    fp16 fails one of them."""
    gpu, ctx, sc, seeds, bound = _bf16_setup()
    assert ctx.A.data.dtype == np.uint16 and sc.nan == ck.BF16_NAN_BITS
    limit = ck.verify_limit(bound, "f32", "bf16")
    labels = list(sc.subjects)
    if mode == "server":
        st.time_server(gpu, sc, labels, 1e6, 6, random.Random(3), limit)
    else:
        st.time_offline(gpu, sc, labels, mode, 3, random.Random(1), seeds, limit, {})
    assert sc.status["honest"] == "ok" and sc.status["cublas"] == "ok", \
        {lb: sc.recs[lb].results for lb in ("honest", "cublas")}
    for name, res in sc.recs["honest"].results.items():
        assert res["ok"], (name, res)
    assert sc.status["fp16"] == "wrong", sc.recs["fp16"].results
    assert sc.recs["fp16"].failed() in ("timed_calls", "graph_replay", "fresh"), sc.recs["fp16"].results


def test_the_sparse_change_writes_bf16_values():
    a = np.zeros((4, 8), np.uint16)
    changed = ck.sparse_change(np, a, random.Random(2), count=5, value=64.0, dtype="bf16")
    vals = ck.to_float32(np, a, "bf16")
    assert changed == int(np.count_nonzero(vals)) and set(np.abs(vals[vals != 0]).tolist()) == {64.0}


# --------------------------------------------------------------------------- bench --dtype bf16


@pytest.mark.skipif(gpu_present(), reason="this machine has a GPU")
@pytest.mark.parametrize("cmd", [["-m", "harness"], ["-m", "l2tui.cli"]])
def test_bench_dtype_bf16_goes_on_to_the_gpu(tmp_path, cmd):
    """No refusal of bf16 is left before the GPU: without one, the one line is the GPU's."""
    env = dict(os.environ, L2TUI_CACHE_DIR=str(tmp_path / "cache"))
    p = subprocess.run([sys.executable, *cmd, "bench", "--shape", "64x64x64", "--dtype", "bf16",
                        "--out", str(tmp_path / "r.json")], capture_output=True, text=True, env=env, timeout=120)
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode != 0 and len(lines) == 1 and "no NVIDIA GPU found" in lines[0], p.stderr
    assert "Traceback" not in p.stderr and not (tmp_path / "r.json").exists()
