"""``l2tui bench`` names a model's shapes by their GEMM role: the role of each shape (from a model
spec or a shapes file's comments) is kept in its result row and written as a ``role`` CSV column;
a result file's role is read back as data, one bounded printable line."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from harness.bench import with_role
from harness.errors import HarnessError
from harness.results import ResultFile, load, save
from harness.shapes import Shape, shape_roles

META = {"gpu": "NVIDIA H200", "driver": "580", "cuda": "13.0", "nvcc": "13.0", "date": "2026-01-01",
        "git_rev": "0" * 40, "mode": "offline", "acc": "f32", "method": "per call"}


def _row(shape: Shape) -> dict:
    return {"m": shape.m, "n": shape.n, "k": shape.k, "times_ms": {"cublas": 0.01}, "roofline_ms": 0.005,
            "checks": {"cublas": {"ok": True}}, "status": {"cublas": "ok"}, "size_class": shape.size_class}


def test_a_shapes_files_roles_reach_the_rows_and_the_csv(tmp_path: Path):
    spec = tmp_path / "decode.txt"
    spec.write_text("16,6144,4096   # llama-3-8b qkv t16\n16x4096x4096  # llama-3-8b o t16\n64x64x64\n")
    roles = shape_roles([str(spec)])
    rows = [with_role(_row(s), roles.get(s)) for s in (Shape(16, 6144, 4096), Shape(16, 4096, 4096), Shape(64, 64, 64))]
    jp, cp = save(ResultFile(dict(META), rows), tmp_path / "bench.json")
    back = load(jp)
    assert [r.get("role") for r in back.rows] == ["llama-3-8b qkv t16", "llama-3-8b o t16", None]
    table = list(csv.DictReader(cp.open()))
    assert list(table[0])[:4] == ["m", "n", "k", "role"]
    assert [r["role"] for r in table] == ["llama-3-8b qkv t16", "llama-3-8b o t16", ""]


def test_a_bench_without_roles_keeps_its_csv_columns(tmp_path: Path):
    _, cp = save(ResultFile(dict(META), [with_role(_row(Shape(64, 64, 64)), None)]), tmp_path / "bench.json")
    assert next(csv.reader(cp.open()))[:5] == ["m", "n", "k", "size_class", "roofline_ms"]


def test_a_long_joined_role_is_cut_to_the_bound():
    row = with_role(_row(Shape(16, 4096, 4096)), ", ".join(["llama-3-8b o t16"] * 20))
    assert len(row["role"]) == 120 and row["role"].endswith("…")


@pytest.mark.parametrize("bad", ["qkv\x1b[2J", "", "x" * 500, 7])
def test_a_result_files_role_is_refused_unless_one_bounded_printable_line(tmp_path: Path, bad):
    row = {**_row(Shape(64, 64, 64)), "role": bad}
    with pytest.raises(HarnessError, match="role"):
        save(ResultFile(dict(META), [row]), tmp_path / "bad.json")
