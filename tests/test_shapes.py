"""Shape sets and parsers: the grid, the named subsets, shape strings and files."""

from __future__ import annotations

import pytest

from harness.errors import ShapeError
from harness.shapes import GRID_DIMS, Shape, grid, parse_accumulator, parse_shape, read_shapes_file, resolve_shapes, sample100, small


def test_grid_is_the_cuda_l2_grid():
    g = grid()
    assert len(g) == 1000 == len(set(g))
    assert {s.m for s in g} == set(GRID_DIMS)
    assert Shape(64, 64, 64) in g and Shape(16384, 16384, 16384) in g


def test_small_has_every_dim_at_most_512():
    s = small()
    assert len(s) == 4 ** 3
    assert all(max(x.m, x.n, x.k) <= 512 for x in s)


def test_sample100_is_fixed_stratified_and_in_grid():
    s = sample100()
    assert len(s) == 100 == len(set(s))
    assert set(s) <= set(grid())
    assert s == sample100()  # deterministic
    classes = {c: sum(1 for x in s if x.size_class == c) for c in ("small", "mid", "big")}
    grid_classes = {c: sum(1 for x in grid() if x.size_class == c) for c in classes}
    for c in classes:  # proportional to the grid, within rounding
        assert abs(classes[c] - grid_classes[c] / 10) <= 1
    # every M value of the grid is represented
    assert {x.m for x in s} == set(GRID_DIMS)


@pytest.mark.parametrize("text,expected", [
    ("4096x4096x4096", Shape(4096, 4096, 4096)),
    ("64X128x256", Shape(64, 128, 256)),
    ("64,128,256", Shape(64, 128, 256)),
    ("64_128_256", Shape(64, 128, 256)),
    (" 1 x 2 x 3 ", Shape(1, 2, 3)),
])
def test_parse_shape(text, expected):
    assert parse_shape(text) == expected


@pytest.mark.parametrize("text", ["4096x4096", "axbxc", "0x1x1", "64x64x-1", "", "1x2x3x4", "64x64x999999999"])
def test_bad_shape_strings_are_one_line_errors(text):
    with pytest.raises(ShapeError) as e:
        parse_shape(text)
    assert "\n" not in str(e.value) and "MxNxK" in str(e.value) or "between" in str(e.value)


def test_shapes_file(tmp_path):
    f = tmp_path / "model.shapes"
    f.write_text("# llama MLP\n4096,11008,4096\n\n11008, 4096, 4096  # down\n128x128x128\n")
    assert read_shapes_file(f) == [Shape(4096, 11008, 4096), Shape(11008, 4096, 4096), Shape(128, 128, 128)]
    f.write_text("1,2,3\nnope\n")
    with pytest.raises(ShapeError, match=r":2: not a shape") as e:
        read_shapes_file(f)
    assert "nope" not in str(e.value)  # the line itself is never repeated (the file may be anything)
    with pytest.raises(ShapeError, match="cannot read shapes file"):
        read_shapes_file(tmp_path / "missing.txt")
    f.write_text("# only comments\n")
    with pytest.raises(ShapeError, match="holds no shapes"):
        read_shapes_file(f)


def test_resolve_shapes_mixes_sets_strings_and_files_without_duplicates(tmp_path):
    f = tmp_path / "s.txt"
    f.write_text("64,64,64\n")
    got = resolve_shapes(["64x64x64", str(f), "small"])
    assert got[0] == Shape(64, 64, 64) and len(got) == 64
    assert resolve_shapes(None) == sample100()
    assert resolve_shapes("grid") == grid()
    with pytest.raises(ShapeError, match="unknown shapes"):
        resolve_shapes(["bogus"])


def test_resolve_shapes_reads_long_lists_and_semicolons():
    """A list longer than a file name can be is still a list, not an OSError from the file check."""
    many = [Shape(64 * i, 64, 128) for i in range(1, 80)]
    assert resolve_shapes(" ".join(f"{s.m}x{s.n}x{s.k}" for s in many)) == many
    assert resolve_shapes("64x64x64;128x128x128") == [Shape(64, 64, 64), Shape(128, 128, 128)]
    with pytest.raises(ShapeError, match="unknown shapes"):
        resolve_shapes("no/such/dir/" + "x" * 5000)


def test_accumulator():
    assert parse_accumulator("f32") == "f32" and parse_accumulator("f16") == "f16"
    with pytest.raises(ShapeError):
        parse_accumulator("bf16")


def test_shape_properties():
    s = Shape(128, 256, 64)
    assert s.flops == 2 * 128 * 256 * 64
    assert s.min_bytes == 2 * (128 * 64 + 64 * 256 + 128 * 256)
    assert s.file_stem == "128_256_64" and str(s) == "128x256x64"
    assert Shape(64, 64, 64).size_class == "small" and Shape(16384, 16384, 16384).size_class == "big"
