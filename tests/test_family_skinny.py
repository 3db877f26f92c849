"""skinny_splitk (issue 57): the decode family's rules, names, applicability, the split count the
cost model reads (mirroring the .cu host code), the source policy, and real nvcc builds of every
catalog entry for sm_90a and sm_80 without register spills."""

from __future__ import annotations

import math

import pytest
from pathlib import Path

from harness import families as F
from harness.shapes import Shape
from harness.source_policy import violations

FAM = "skinny_splitk"
BASE = {"BM": "16", "BN": "128", "BK": "64", "WARPS_M": "1", "WARPS_N": "4", "WARPS_K": "1", "STAGES": "4",
        "KCHUNK": "0", "WAVES": "2", "ACC": "ACC_F32"}


def skinny_catalog() -> list[F.Config]:
    return [c for acc in ("f32", "f16") for c in F.catalog(acc) if c.family == FAM]


def test_the_family_is_registered_for_ampere_and_later_and_in_both_catalogs():
    fam = F.get_family(FAM)
    assert fam.runs_on(80) and fam.runs_on(90) and fam.build_arch == "sm_80"
    assert F.build_arch_for(FAM, "sm_90a") == "sm_90a" and F.build_arch_for(FAM, "sm_80") == "sm_80"
    for acc in ("f32", "f16"):
        for arch in ("sm_90a", "sm_80"):
            assert any(c.family == FAM for c in F.catalog(acc, arch)), (acc, arch)
    # a spread of row tiles, column tiles and split rules
    f32 = [c.knob_dict for c in F.catalog("f32") if c.family == FAM]
    assert {k["BM"] for k in f32} == {"16", "32", "64", "128"}
    assert {k["BN"] for k in f32} == {"64", "128", "256"}
    assert {k["KCHUNK"] for k in f32} >= {"0", "512"} and {k["WAVES"] for k in f32} >= {"2", "4"}


def test_applicability_refuses_more_than_128_rows_and_unaligned_n_or_k():
    assert F.applicable(FAM, Shape(1, 128256, 4096), "sm_90a")
    assert F.applicable(FAM, Shape(128, 4104, 14336), "sm_80")
    assert not F.applicable(FAM, Shape(129, 4096, 4096), "sm_90a")
    assert not F.applicable(FAM, Shape(16, 4100, 4096), "sm_90a")   # N % 8
    assert not F.applicable(FAM, Shape(16, 4096, 4100), "sm_90a")   # K % 8
    assert not F.applicable(FAM, Shape(16, 4096, 4096), "sm_75")    # no cp.async / ldmatrix path before Ampere
    # the kernel says the same: M above its limit returns 2 before any launch
    assert "if (K % 8 != 0 || N % 8 != 0 || M > kMaxM) return 2;" in F.get_family(FAM).template()
    assert f"constexpr int kMaxM = {F.SKINNY_MAX_M};" in F.get_family(FAM).template()


def test_names_say_tile_warps_ring_and_split_rule():
    assert F.Config.of(FAM, BASE).name == "skinny-16x128x64-w1x4x1-st4-wv2"
    assert F.Config.of(FAM, {**BASE, "KCHUNK": "512"}).name == "skinny-16x128x64-w1x4x1-st4-kc512"
    assert F.Config.of(FAM, {**BASE, "ACC": "ACC_F16", "WARPS_K": "2"}).name == "skinny-16x128x64-w1x4x2-st4-wv2-f16"
    names = [c.name for c in skinny_catalog()]
    assert len(set(names)) == len(names)


@pytest.mark.parametrize("change, words", [
    ({"BM": "16", "WARPS_M": "2"}, "multiples of 16"),
    ({"BN": "64", "WARPS_N": "4", "WARPS_K": "4", "BK": "128", "WARPS_M": "1", "BM": "16"}, None),
    ({"BM": "128", "WARPS_M": "1", "WARPS_N": "1"}, "accumulators"),
    ({"BK": "32", "WARPS_K": "4"}, "WARPS_K"),
    ({"BM": "64", "BN": "256", "BK": "128", "STAGES": "8", "WARPS_M": "4"}, "shared memory"),
    ({"BM": "128", "WARPS_M": "4", "WARPS_N": "4", "WARPS_K": "2"}, "16 warps"),
    ({"STAGES": "7"}, "STAGES=7 is not legal"),
    ({"KCHUNK": "300"}, "KCHUNK=300 is not legal"),
])
def test_validate_refuses_what_the_static_asserts_refuse(change, words):
    problems = F.validate(FAM, {**BASE, **change})
    if words is None:
        assert problems == []
    else:
        assert problems and any(words in p for p in problems), problems
        with pytest.raises(F.FamilyError):
            F.render(FAM, change)


def test_geometry_matches_the_kernel_layout():
    g = F.Config.of(FAM, BASE).geometry()
    assert (g.tile_m, g.tile_n, g.tile_k, g.threads, g.stages) == (16, 128, 64, 128, 4)
    # four stages of A (16 x 72 halfs) and B (64 x 136 halfs); the fp32 tile (16 x 132) is smaller
    assert g.smem_bytes == 4 * (16 * 72 + 64 * 136) * 2
    big = F.Config.of(FAM, {**BASE, "BM": "128", "WARPS_M": "4", "STAGES": "2", "BK": "32"}).geometry()
    assert big.smem_bytes == 128 * 132 * 4   # the fp32 tile outgrows a short ring
    assert not g.pdl and not g.persistent and g.split_k == 0 and g.k_chunk == 0 and g.waves == 2


def _host_splits(m: int, n: int, k: int, bm: int, bn: int, bk: int, kchunk: int, waves: int, resident: int) -> int:
    """slice_rows() and the split count of fam_skinny.cu's l2_hgemm, in the C integer arithmetic."""
    tiles = -(-m // bm) * -(-n // bn)
    ktiles = -(-k // bk)
    rows = min(m, bm)
    splits = -(-k // kchunk) if kchunk else -(-(waves * resident) // tiles)
    splits = min(splits, max(1, k // (4 * rows)))
    splits = max(1, min(splits, ktiles, 256))
    per = -(-ktiles // splits) * bk
    return -(-k // per)


@pytest.mark.parametrize("shape", [Shape(1, 4096, 4096), Shape(7, 4104, 4104), Shape(16, 128256, 4096),
                                   Shape(100, 4096, 14336), Shape(128, 28672, 4096), Shape(64, 6144, 4096),
                                   Shape(1, 64, 8), Shape(128, 8, 4096)], ids=str)
def test_splits_for_mirrors_the_host_code(shape):
    for cfg in skinny_catalog():
        g = cfg.geometry()
        resident = 132 * g.ctas_per_sm
        assert g.splits_for(shape) == _host_splits(shape.m, shape.n, shape.k, g.tile_m, g.tile_n, g.tile_k,
                                                   g.k_chunk, g.waves, resident), cfg.name


def test_split_k_fills_the_gpu_on_few_column_tiles_and_keeps_slices_long_enough():
    g = F.Config.of(FAM, BASE).geometry()              # WAVES 2, two CTAs per SM: 528 CTAs aimed at
    s = Shape(8, 4096, 14336)                          # 32 column tiles
    # about two waves (slices are whole k-tiles: 16 slices of 14 k-tiles, 512 CTAs)
    assert 32 * g.splits_for(s) == 512 and 512 > 1.9 * 132 * g.ctas_per_sm
    assert g.splits_for(Shape(8, 128256, 4096)) == 1   # an lm_head has 1,002 tiles: no split
    wide_m = F.Config.of(FAM, {**BASE, "BM": "128", "WARPS_M": "4"}).geometry()
    # at least 4 rows of K per row of the tile: 128 rows cut K = 4096 in at most 8 slices
    assert wide_m.splits_for(Shape(128, 4096, 4096)) <= 8
    fixed = F.Config.of(FAM, {**BASE, "KCHUNK": "512"}).geometry()
    assert fixed.splits_for(Shape(16, 4096, 14336)) == math.ceil(14336 / 512)


def test_every_render_passes_the_source_policy():
    for cfg in skinny_catalog():
        assert violations(cfg.source()) == [], cfg.name


@pytest.mark.compile
def test_a_hand_edit_past_the_limits_fails_to_compile_with_the_static_assert(tmp_path, monkeypatch):
    from harness.build import build

    monkeypatch.setenv("L2TUI_CACHE_DIR", str(tmp_path))
    src = F.set_knobs(F.render(FAM), {"WARPS_N": "1", "BN": "256"})   # 256 accumulators per thread
    res = build(src, arch="sm_80")
    assert not res.ok and "64 accumulators" in res.error_text()


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_every_catalog_entry_builds_without_spills(arch, tmp_path, monkeypatch):
    from harness.build import build

    monkeypatch.setenv("L2TUI_CACHE_DIR", str(tmp_path))
    for cfg in skinny_catalog():
        res = build(cfg.source(), arch=arch)
        assert res.ok, (cfg.name, res.error_text())
        assert res.ptxas is not None and res.ptxas.spill_store_bytes == 0, (cfg.name, res.log[-2000:])
        assert "0 bytes spill stores" in res.log, cfg.name


def test_the_documented_sweep_names_every_f32_entry_and_reads_the_shapes_file():
    """The sweep command in docs/families.md names every f32 skinny entry (as `l2tui sweep --also`
    resolves them) and a shapes file of decode shapes only."""
    import re

    from harness.paths import PACKAGE_DIR
    from harness.roofline import is_skinny
    from harness.shapes import resolve_shapes
    from l2tui.commands.sweep import resolve_also

    root = PACKAGE_DIR.parent
    doc = (root / "docs" / "families.md").read_text()
    section = doc[doc.index("### `skinny_splitk`"):doc.index("### `sm90_cutlass_t`")]
    named = re.findall(r"\bskinny-[0-9a-z-]+", section.split("--also", 1)[1].split("--session", 1)[0])
    wanted = {c.name for c in F.catalog("f32", "sm_90a") if c.family == FAM}
    assert set(named) == wanted
    assert {c.name for c in resolve_also(named, ("f32",), "sm_90a")["f32"]} == wanted
    shapes = resolve_shapes([str(root / "results" / "shapes" / "decode-skinny.txt")])
    assert len(shapes) >= 12 and all(is_skinny(s) and F.applicable(FAM, s, "sm_90a") for s in shapes)


# ---------------------------------------------------------------- the tiling, replayed on the CPU

#: the GPU test's decode shapes (tests/test_families_gpu.py) and the edges around them: one row, a
#: row tile and one row more, M = 128, N and K past a multiple of the tiles, an lm_head, K of 8
MODEL_SHAPES = [Shape(1, 4096, 4096), Shape(7, 4104, 4104), Shape(16, 128256, 4096), Shape(100, 4096, 14336),
                Shape(128, 4104, 14336), Shape(1, 128256, 4104), Shape(128, 4096, 4104), Shape(7, 4096, 14336),
                Shape(16, 4104, 4096), Shape(100, 128256, 4096), Shape(17, 4096, 4096), Shape(100, 4104, 4104),
                Shape(64, 6144, 4096), Shape(1, 64, 8), Shape(128, 8, 4096), Shape(33, 4104, 14336)]


def _index_configs() -> list[F.Config]:
    """One catalog configuration per distinct tiling (BM, BN, BK, KCHUNK, WAVES): the knobs the
    grid, the slices and the workspace depend on."""
    seen: dict[tuple[str, ...], F.Config] = {}
    for c in skinny_catalog():
        k = c.knob_dict
        seen.setdefault((k["BM"], k["BN"], k["BK"], k["KCHUNK"], k["WAVES"]), c)
    return list(seen.values())


_MODELS: dict[str, "Path"] = {}


def _build_model(cfg: F.Config, tmp: "Path") -> tuple["Path", "Path"]:
    """tests/fixtures/skinny_tiling_model.cu built with nvcc against ``cfg``'s rendered source:
    (the host object, the program). Device code is compiled to PTX only (nothing runs on a GPU)."""
    import subprocess
    from pathlib import Path

    from harness.build import nvcc_path
    from harness.paths import PACKAGE_DIR

    model = PACKAGE_DIR.parent / "tests" / "fixtures" / "skinny_tiling_model.cu"
    d = tmp / cfg.name
    d.mkdir()
    (d / "kernel.cu").write_text(cfg.source())
    obj, exe = d / "model.o", d / "model"
    nvcc = nvcc_path()
    for cmd in ([nvcc, "-std=c++17", "-O2", "-arch=compute_80", "-I", str(d), "-c", str(model), "-o", str(obj)],
                [nvcc, "-arch=compute_80", str(obj), "-o", str(exe)]):
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
    return Path(obj), Path(exe)


def _run_model(exe: "Path", lines: list[str]) -> list[str]:
    import subprocess

    done = subprocess.run([str(exe)], input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.splitlines()


@pytest.mark.compile
@pytest.mark.slow
def test_every_tiling_writes_each_element_of_c_once_from_the_slices_of_its_own_tile(tmp_path):
    """The family's own plan_call / work_of / slot_base / slot_offset / c_index, replayed on the
    CPU for every CTA in a scrambled order (tests/fixtures/skinny_tiling_model.cu): the slices
    partition K, no two CTAs write the same workspace float, the last CTA of each tile reads only
    slots its tile's slices wrote in this call, every element of C is stored exactly once, no
    store leaves its rows or columns, and every ticket is 0 again after the call. On every
    distinct tiling of the catalog, the GPU test's shapes and their edges (M = 1, 7, 17, 100,
    128; N and K not multiples of the tiles; 128256 columns) and several resident-CTA counts."""
    for cfg in _index_configs():
        _, exe = _build_model(cfg, tmp_path)
        cps = cfg.geometry().ctas_per_sm
        lines = [f"{s.m} {s.n} {s.k} {r}" for s in MODEL_SHAPES for r in (1, 132, 132 * cps, 114 * cps, 4 * 132 * cps)]
        out = _run_model(exe, lines)
        assert len(out) == len(lines), (cfg.name, out[-3:])
        bad = [ln for ln in out if not ln.startswith("ok ")]
        assert not bad, (cfg.name, bad[:5])
        # the model took the split path where the GPU test's failing shape splits
        assert any(ln.startswith("ok 100 4096 14336 splits=") and "splits=1 " not in ln for ln in out), cfg.name


@pytest.mark.compile
def test_new_tickets_are_zeroed_on_the_calls_stream(tmp_path):
    """The tickets each tile's last CTA is elected by must be 0 before the launch that uses them.
    The worker calls l2_hgemm on a non-blocking stream, which a memset on the legacy default
    stream (cudaMemset) is not ordered before: the GPU run at M = 100 found C tiles unwritten,
    the first in launch order. The compiled host code must zero them with cudaMemsetAsync (on the
    call's stream) and never call cudaMemset."""
    import subprocess

    cfg = F.Config.of(FAM, BASE)
    obj, exe = _build_model(cfg, tmp_path)
    undefined = subprocess.run(["nm", "-u", str(obj)], capture_output=True, text=True, check=True).stdout.split()
    assert "cudaMemsetAsync" in undefined
    assert "cudaMemset" not in undefined
    # the shape of the GPU failure: 7 row tiles x 32 column tiles, 3 slices each, all written once
    assert _run_model(exe, ["100 4096 14336 264"]) == ["ok 100 4096 14336 splits=3 tiles=7x32"]


# ---------------------------------------------------------------- verified on a GPU

def test_the_family_is_verified_and_an_unverified_one_is_timed_only_where_named(monkeypatch):
    """Its GPU tests passed (results/h100/gpu-tests.md): the search's pool (what the seed, the
    pick and the sweep's pick draw from) holds it on a decode shape. A family marked unverified
    is left out on every shape unless the families setting names it."""
    import dataclasses

    from l2tui.agent.policies.search import SearchPolicy

    assert all(f.verified_on_gpu for f in F.families())
    decode = Shape(8, 4096, 14336)
    assert F.applicable(FAM, decode, "sm_90a")
    assert any(c.family == FAM for c in SearchPolicy().candidates(decode, "f32", "sm_90a"))
    monkeypatch.setitem(F.FAMILIES, FAM, dataclasses.replace(F.get_family(FAM), verified_on_gpu=False))
    pool = SearchPolicy().candidates(decode, "f32", "sm_90a")
    assert pool and all(c.family != FAM for c in pool)
    named = SearchPolicy(families=[FAM, "sm80_mma"]).candidates(decode, "f32", "sm_90a")
    assert {c.family for c in named} == {FAM, "sm80_mma"}
