"""bf16 exports: the manifest's dtype, the C header's and dispatcher's entry points per dtype, one
element type per export, and the Python runtime's refusal of the other half type (issue 55)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from harness import families as F
from l2tui.cli import main as cli_main
from l2tui.export import ExportError, ManifestError, export_session, load_manifest
from l2tui.export import cdispatch, runtime
from l2tui.export.manifest import validate
from l2tui.session import Session
from tests.fixtures.export import make_session as fx


def _bf16_session(path: Path, *, with_fp16: bool = False, loop_dtype: str | None = "bf16") -> Path:
    """A session whose tracks ran bf16 kernels (the tiny_mma family rendered with DTYPE_BF16); with
    ``with_fp16`` one more track holds an fp16 kernel."""
    config: dict = {"policy": "search"}
    if loop_dtype:
        config["loop"] = {"dtype": loop_dtype, "acc": "f32"}
    s = Session.create(path, config=config, gpu={"name": "NVIDIA H200", "driver": "580.159", "arch": "sm_90a"},
                       versions={"l2tui": "0.1.0"})
    w = fx._Writer(s)
    t = w.track(128, 128, 128)
    w.candidate(t, F.render("tiny_mma", {"DTYPE": "DTYPE_BF16"}), None, cand_ms=0.008, cublas_ms=0.012,
                origin="seed", policy="search")
    if with_fp16:
        t = w.track(256, 128, 64)
        w.candidate(t, F.render("tiny_mma", {}), None, cand_ms=0.008, cublas_ms=0.012, origin="seed", policy="search")
    s.append("session_ended", reason="done")
    return path


def test_a_bf16_session_exports_a_bf16_library(tmp_path):
    out = tmp_path / "exp"
    res = export_session(_bf16_session(tmp_path / "s"), out)
    man = load_manifest(out)
    assert man == res.manifest and man["dtype"] == "bf16"
    assert "l2_hgemm_bf16(" in man["abi"]
    (e,) = man["kernels"]
    assert e["symbol"] == "l2_hgemm_bf16_128_128_128" and e["fallback"] is None
    header = (out / cdispatch.HEADER_FILE).read_text()
    assert '#define L2HGEMM_DTYPE "bf16"' in header and "#define L2HGEMM_BF16 1" in header
    assert "int l2_hgemm_bf16_128_128_128(const void* A" in header
    dispatch = (out / cdispatch.DISPATCH_FILE).read_text()
    assert dispatch.startswith("// Generated") and "#define L2FB_CUDA_TYPE CUDA_R_16BF" in dispatch
    assert cdispatch.parse_table(dispatch) == [(128, 128, 128, "l2_hgemm_bf16_128_128_128")]
    script = (out / cdispatch.BUILD_SCRIPT).read_text()
    assert "-Dl2_hgemm_bf16=l2_hgemm_bf16_128_128_128" in script and "-Dl2_hgemm=" not in script


def test_an_fp16_export_keeps_its_names_and_reads_without_a_dtype(tmp_path):
    out = tmp_path / "exp"
    export_session(fx.make_session(tmp_path / "s"), out)
    man = json.loads((out / "manifest.json").read_text())
    assert man["dtype"] == "fp16"
    assert all(e["symbol"].startswith("l2_hgemm_") and "bf16" not in e["symbol"] for e in man["kernels"])
    assert "#define L2FB_CUDA_TYPE CUDA_R_16F\n" in (out / cdispatch.DISPATCH_FILE).read_text()
    del man["dtype"]   # an export written before bf16
    (out / "manifest.json").write_text(json.dumps(man))
    assert runtime.load(out).dtype == "fp16"


def test_the_header_names_the_element_type_of_an_fp16_export():
    man = {"arch": "sm_90a", "kernels": []}
    header = cdispatch.render_header(man)
    assert '#define L2HGEMM_DTYPE "fp16"' in header and "#define L2HGEMM_BF16 0" in header
    assert "extern \"C\" int l2_hgemm_bf16(" in cdispatch.render_fallback_library("bf16")
    assert "CUDA_R_16BF" in cdispatch.render_fallback_library("bf16")
    assert "extern \"C\" int l2_hgemm(" in cdispatch.render_fallback_library("fp16")


def test_an_export_mixing_dtypes_is_refused_in_one_line(tmp_path):
    sess = _bf16_session(tmp_path / "s", with_fp16=True)
    with pytest.raises(ExportError) as ei:
        export_session(sess, tmp_path / "exp")
    msg = str(ei.value)
    assert "\n" not in msg and "mix fp16 kernels (256x128x64-f32) and bf16 kernels (128x128x128-f32)" in msg
    assert not (tmp_path / "exp").exists()
    from harness.shapes import Shape
    res = export_session(sess, tmp_path / "only", shapes=[Shape(256, 128, 64)], dtype="fp16")
    assert res.manifest["dtype"] == "fp16"


def test_dtype_against_the_kernels_is_refused_in_one_line(tmp_path, capsys):
    sess = _bf16_session(tmp_path / "s")
    assert cli_main(["export", str(sess), "--out", str(tmp_path / "a"), "--dtype", "fp16"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "the kernels take bf16 but --dtype is fp16" in err[0]
    # a session that says fp16 (or says nothing: fp16) while its kernels are bf16
    old = _bf16_session(tmp_path / "old", loop_dtype=None)
    with pytest.raises(ExportError, match="the kernels take bf16 but the session's dtype is fp16"):
        export_session(old, tmp_path / "b")
    assert export_session(old, tmp_path / "c", dtype="bf16").manifest["dtype"] == "bf16"


def test_a_manifest_with_a_bad_dtype_or_a_symbol_of_the_other_type_is_refused(tmp_path):
    out = tmp_path / "exp"
    man = export_session(_bf16_session(tmp_path / "s"), out).manifest
    with pytest.raises(ManifestError, match="dtype must be fp16 or bf16"):
        validate({**man, "dtype": "fp8"}, out)
    fp16_named = {**man, "kernels": [{**man["kernels"][0], "symbol": "l2_hgemm_128_128_128"}]}
    with pytest.raises(ManifestError, match="symbol must be l2_hgemm_bf16_128_128_128"):
        validate(fp16_named, out)


class _NumpyAsCupy(runtime._Cupy):
    """The cupy backend's dtype rules over numpy, cupy's host twin (same ndarray, dtype and flags
    API): the refusal happens before any device attribute is read, so it runs on a CPU machine."""

    def __init__(self) -> None:
        self.cp = np


@pytest.mark.parametrize(("lib_dtype", "arr_dtype", "has"), [("fp16", np.uint16, "bf16"), ("bf16", np.float16, "fp16")])
def test_the_cupy_backend_refuses_the_other_half_type_in_one_line(lib_dtype, arr_dtype, has):
    with pytest.raises(runtime.MatmulArgumentError) as ei:
        _NumpyAsCupy().check(np.zeros((4, 4), dtype=arr_dtype), "a", lib_dtype)
    msg = str(ei.value)
    assert "\n" not in msg and f"a holds {has} but this export's kernels take {lib_dtype}" in msg
    with pytest.raises(runtime.MatmulArgumentError, match="has dtype float32; this export's kernels take"):
        _NumpyAsCupy().check(np.zeros((4, 4), dtype=np.float32), "b", lib_dtype)


def test_cupy_bf16_bits_are_never_multiplied_as_integers():
    a = np.zeros((4, 4), dtype=np.uint16)
    with pytest.raises(runtime.KernelLoadError, match="cupy cannot multiply bf16"):
        _NumpyAsCupy().matmul(a, a, None)


@pytest.mark.compile
@pytest.mark.slow
def test_the_bf16_fallback_library_builds_with_its_bf16_entry_point():
    """The C fallback with bf16 types (real nvcc, the cuBLAS headers): a bf16 export's Python
    runtime builds exactly this where no combined library was built."""
    from harness.build import build

    res = build(cdispatch.render_fallback_library("bf16"), arch="sm_90a", flags=cdispatch.cublas_flags(),
                name="export-fallback-bf16", trusted=True, dtype="bf16")
    assert res.ok, res.errors[:3]
    assert "l2_hgemm_bf16" in cdispatch.exported_symbols(res.so_path)


def test_the_export_bench_times_a_bf16_export_in_bf16_and_refuses_a_mismatch(tmp_path, capsys):
    """``python -m l2tui.export.bench`` takes the manifest's dtype: its forwarder defines the bf16
    entry point (so the harness checks and times it beside the bf16 libraries), and a ``--dtype``
    of the other type is one line before any GPU work (no GPU is needed to see it)."""
    from harness.build import check_abi
    from l2tui.export.bench import bench_dtype, main

    out = tmp_path / "exp"
    export_session(_bf16_session(tmp_path / "s"), out)
    man = load_manifest(out)
    assert bench_dtype(man, None, "exp") == "bf16" == bench_dtype(man, "bf16", "exp")
    forwarder = cdispatch.render_bench_forwarder(out / "lib" / "libl2hgemm.so", bench_dtype(man, None, "exp"))
    assert check_abi(forwarder, "bf16") == "bf16"
    assert main([str(out), "--dtype", "fp16"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert "is a bf16 export but --dtype is fp16" in err and "--dtype bf16" in err


def test_the_export_bench_reads_an_export_without_a_dtype_as_fp16(tmp_path, capsys):
    from l2tui.export.bench import bench_dtype, main

    out = tmp_path / "exp"
    export_session(fx.make_session(tmp_path / "s"), out)
    man = load_manifest(out)
    man.pop("dtype", None)
    assert bench_dtype(man, None, "exp") == "fp16"
    assert main([str(out), "--dtype", "bf16"]) == 2
    assert "is an fp16 export but --dtype is bf16" in capsys.readouterr().err
