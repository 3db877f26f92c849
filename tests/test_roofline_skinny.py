"""The fraction of the B-read floor for decode shapes (issue 57): computed from a bench file's
measured read bandwidth, reported in the bench summary and by ``python -m harness.roofline``,
and one clear line for a file that is not a bench result."""

from __future__ import annotations

import json

import pytest

from harness import roofline
from harness.bench import summary_table
from harness.results import ResultFile
from harness.shapes import Shape

RF = {"version": 3, "peak_tflops": 800.0, "bw_gbs": 4400.0, "bw_read_gbs": 4000.0, "floor_ms": 0.002}


def _row(m: int, n: int, k: int, **times: float | None) -> dict:
    return {"m": m, "n": n, "k": k, "times_ms": dict(times), "roofline_ms": 0.01,
            "checks": {lb: {"ok": True} for lb in times}, "status": {lb: "ok" for lb in times},
            "size_class": Shape(m, n, k).size_class}


def test_decode_shapes_are_few_rows_against_a_large_b():
    assert roofline.is_skinny(Shape(1, 128256, 4096)) and roofline.is_skinny(Shape(128, 4096, 14336))
    assert not roofline.is_skinny(Shape(129, 4096, 4096))
    assert not roofline.is_skinny(Shape(16, 512, 4096)) and not roofline.is_skinny(Shape(16, 4096, 512))


def test_the_floor_is_b_once_at_the_read_bandwidth():
    s = Shape(16, 4096, 4096)                          # B: 32 MiB
    assert roofline.b_read_floor_ms(s, RF) == pytest.approx(2 * 4096 * 4096 / 4000e9 * 1e3)
    # without the read kernel's figure, the larger of copy and read
    assert roofline.b_read_floor_ms(s, {"bw_gbs": 4400.0}) == pytest.approx(2 * 4096 * 4096 / 4400e9 * 1e3)
    for bad in (None, {}, {"bw_read_gbs": "fast"}, {"bw_read_gbs": -1.0}, {"bw_read_gbs": float("nan")},
                {"bw_read_gbs": True}, [4000.0]):
        assert roofline.b_read_floor_ms(s, bad) is None


def test_fractions_per_shape_and_label_only_for_decode_shapes():
    floor = roofline.b_read_floor_ms(Shape(16, 4096, 4096), RF)
    rows = [_row(16, 4096, 4096, l2=floor / 0.9, cublas=floor / 0.8),
            _row(4096, 4096, 4096, l2=1.0, cublas=1.0),     # not a decode shape
            _row(1, 14336, 4096, l2=None, cublas=0.05)]     # l2 has no time here
    per = roofline.b_floor_fractions(rows, RF, ["l2", "cublas"])
    assert [s for s, _, _ in per] == [Shape(16, 4096, 4096), Shape(1, 14336, 4096)]
    assert per[0][2]["l2"] == pytest.approx(0.9) and per[0][2]["cublas"] == pytest.approx(0.8)
    assert per[1][2]["l2"] is None
    # hostile rows are skipped, not raised on
    assert roofline.b_floor_fractions([{"m": "x"}, {"n": 1}, _row(8, 4096, 4096, l2="1")], RF, ["l2"]) == \
        [(Shape(8, 4096, 4096), roofline.b_read_floor_ms(Shape(8, 4096, 4096), RF), {"l2": None})]


def test_the_bench_summary_ends_with_the_b_floor_table():
    floor = roofline.b_read_floor_ms(Shape(16, 4096, 4096), RF)
    rf = ResultFile(meta={"roofline": RF}, rows=[_row(16, 4096, 4096, l2=floor / 0.9, cublas=floor / 0.75),
                                                 _row(4096, 4096, 4096, l2=1.0, cublas=1.0)])
    text = summary_table(rf)
    tail = text.split("fraction of the B-read floor", 1)[1].splitlines()
    assert "4000 GB/s" in tail[0]
    line = next(x for x in tail if x.startswith("16x4096x4096"))
    assert line.split()[-2:] == ["0.90", "0.75"]
    assert tail[-1].split() == ["geomean", "0.90", "0.75"]
    # no decode shape or no bandwidth: no table
    assert "B-read floor" not in summary_table(ResultFile(meta={"roofline": RF}, rows=rf.rows[1:]))
    assert "B-read floor" not in summary_table(ResultFile(meta={}, rows=rf.rows))


def test_the_command_prints_the_table_of_a_bench_file_and_one_line_for_anything_else(tmp_path, capsys):
    floor = roofline.b_read_floor_ms(Shape(8, 4096, 4096), RF)
    good = tmp_path / "bench.json"
    meta = {"gpu": "NVIDIA H200", "driver": "580", "cuda": "13.0", "nvcc": "13.0", "date": "2026-12-06",
            "git_rev": "0", "mode": "offline", "acc": "f32", "method": "per call", "roofline": RF}
    good.write_text(json.dumps({"meta": meta, "rows": [_row(8, 4096, 4096, l2=floor / 0.5)]}))
    assert roofline.main([str(good)]) == 0
    out = capsys.readouterr().out
    assert "8x4096x4096" in out and "0.50" in out
    bad = tmp_path / "notes.txt"
    bad.write_text("not json")
    assert roofline.main([str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("roofline: ") and "Traceback" not in err[0]


def test_a_decode_shape_whose_b_fits_in_l2_is_marked_and_the_table_says_why():
    """With the L2 size in the record, a B that fits (4096 x 4096: 32 MiB of 50) is marked and a
    last line says a per-call time may find it there; a B that does not (14336 x 4096: 112 MiB) is
    not; a record without the size (files measured before it was kept) marks nothing."""
    with_l2 = {**RF, "l2_bytes": 50 * 2**20}
    rows = [_row(16, 4096, 4096, l2=0.01), _row(16, 14336, 4096, l2=0.05)]
    lines = roofline.b_floor_table(rows, with_l2, ["l2"])
    assert lines[2].startswith("16x4096x4096*") and lines[3].startswith("16x14336x4096 ")
    assert lines[-1].startswith("* B fits in the L2 (50 MiB)") and "previous call" in lines[-1]
    assert roofline.b_fits_in_l2(Shape(16, 4096, 4096), with_l2)
    assert not roofline.b_fits_in_l2(Shape(16, 4096, 4096), RF)
    plain = roofline.b_floor_table(rows, RF, ["l2"])
    assert "*" not in "\n".join(plain) and plain[-1].startswith("geomean")
    for bad in ({"l2_bytes": "50"}, {"l2_bytes": True}, {"l2_bytes": -1}, None):
        assert roofline.l2_bytes(bad) is None


def _measure_keys() -> list[str]:
    """The keys of the dict ``roofline.measure`` returns, read from its source (it needs a GPU)."""
    import ast
    import inspect
    import textwrap

    tree = ast.parse(textwrap.dedent(inspect.getsource(roofline.measure)))
    returns = [n.value for n in ast.walk(tree) if isinstance(n, ast.Return) and isinstance(n.value, ast.Dict)]
    assert len(returns) == 1
    return [k.value for k in returns[0].keys if isinstance(k, ast.Constant)]


def test_every_key_the_gpu_worker_measures_is_one_the_parent_accepts():
    """The worker's roofline answer is checked against a schema in the parent: a key the
    measurement gains must be added there too, or every bench on a GPU fails at its first step."""
    from harness.worker import ANSWERS

    sample = {"l2_bytes": 52428800, "version": 3, "peak_tflops": 764.7, "bw_gbs": 4432.7, "bw_copy_gbs": 3946.6,
              "bw_read_gbs": 4432.7, "floor_ms": 0.0005, "measured_s": 0.41, "method": "peak: ...; bw: ...",
              "gpu": "NVIDIA H200", "uuid": "GPU-0"}
    keys = _measure_keys()
    assert keys and set(keys) <= set(sample), f"give this test a sample value of {sorted(set(keys) - set(sample))}"
    ANSWERS["roofline"].check({k: sample[k] for k in keys}, "$.result")
    ANSWERS["roofline"].check({**{k: sample[k] for k in keys}, "l2_bytes": None}, "$.result")   # not told: None
