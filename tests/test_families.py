"""Seed families: knob blocks, rendering, validity rules, and real nvcc builds (issue 5)."""

from __future__ import annotations

import re

import pytest

from harness import families as F
from harness.paths import PACKAGE_DIR
from harness.shapes import Shape


@pytest.mark.parametrize("fam", F.families(), ids=lambda f: f.name)
def test_template_defaults_are_legal_and_documented(fam):
    src = fam.template()
    knobs = F.parse_knobs(src)
    assert list(knobs) == list(fam.knob_names), "knob block order must match the registry"
    assert F.validate(fam, knobs) == []
    assert F.family_of(src) is fam
    assert 'extern "C" int l2_hgemm(' in src
    header = src.split("#include", 1)[0]
    for k in fam.knobs:   # every knob documented with its legal values in the header comment
        assert re.search(rf"//\s+{k.name}\s", header), k.name
    assert F.declared_acc(src) == "f32"


def test_render_changes_only_knob_lines_and_keeps_acc_declaration_in_step():
    base = F.SM80.template()
    out = F.render("sm80_mma", {"BM": 64, "STAGES": "3", "ACC": "ACC_F16"})
    assert F.parse_knobs(out)["BM"] == "64" and F.parse_knobs(out)["STAGES"] == "3"
    assert F.declared_acc(out) == "f16"
    changed = [(a, b) for a, b in zip(base.splitlines(), out.splitlines()) if a != b]
    assert len(changed) == 4   # BM, STAGES, ACC and the acc declaration
    assert len(base.splitlines()) == len(out.splitlines())


def test_render_rejects_illegal_values_and_invalid_combinations():
    with pytest.raises(F.FamilyError, match="not legal"):
        F.render("sm80_mma", {"BM": 48})
    with pytest.raises(F.FamilyError, match="COOPERATIVE needs TILE_M"):
        F.render("sm90_cutlass", {"TILE_M": 64, "SCHEDULE": "COOPERATIVE"})
    with pytest.raises(F.FamilyError, match="need SCHEDULE COOPERATIVE"):
        F.render("sm90_cutlass", {"TILE_M": 64, "SCHEDULE": "PINGPONG", "SCHEDULER": "STREAMK"})
    with pytest.raises(F.FamilyError, match="shared memory"):
        F.render("sm80_mma", {"BM": 256, "BN": 256, "BK": 64, "STAGES": 5, "WARPS_M": 4, "WARPS_N": 4})
    with pytest.raises(F.FamilyError, match="unknown kernel family"):
        F.render("nope", {})


def test_knob_patch_is_localized_search_replace():
    src = F.SM90.template()
    patch = F.knob_patch(src, {"TILE_N": "128", "ACC": "ACC_F16"})
    assert patch.count("<<<<<<< SEARCH") == 3   # two knob lines and the acc declaration
    from l2tui.agent.patches import apply_patch

    res = apply_patch(src, patch, allow_rewrite=False)
    assert res.ok, res.error
    assert F.parse_knobs(res.source)["TILE_N"] == "128"
    assert F.declared_acc(res.source) == "f16"


def test_catalog_is_valid_unique_and_per_arch():
    for acc in ("f32", "f16"):
        cat = F.catalog(acc)
        names = [c.name for c in cat]
        assert len(set(names)) == len(names)
        for c in cat:
            assert F.validate(c.family, c.knob_dict) == [], c.name
            assert c.acc == acc
            assert F.Config.from_source(c.source()) == c
    # Ampere GPUs get no sm_90a CUTLASS kernels
    assert all(c.family != "sm90_cutlass" for c in F.catalog("f32", "sm_80"))
    assert any(c.family == "sm90_cutlass" for c in F.catalog("f32", "sm_90a"))


def test_applicable_and_arch_parsing():
    s = Shape(4096, 4096, 4096)
    assert F.applicable("sm90_cutlass", s, "sm_90a")
    assert not F.applicable("sm90_cutlass", s, "sm_80")
    assert F.applicable("sm80_mma", s, "sm_80") and F.applicable("sm80_mma", s, "9.0")
    assert not F.applicable("small_splitk", Shape(64, 60, 64), "sm_90a")   # N not a multiple of 8
    assert F.cc_of("compute_90a") == 90 and F.cc_of(86) == 86
    assert F.build_arch_for("sm80_mma", "sm_90a") == "sm_90a"   # sm_80 SASS does not run on sm_90
    assert F.build_arch_for("sm80_mma", None) == "sm_80"


def test_splits_for_mirrors_the_host_code():
    g = F.Config.of("small_splitk", {}).geometry()      # SPLIT_K 0 = auto
    assert g.splits_for(Shape(64, 64, 16384)) > 8       # few tiles, long K: many slices
    # up to two CTAs per SM: 32x64 tiles of 64x64 = 2 tiles -> 132 slices, capped at 128
    assert g.splits_for(Shape(64, 64, 16384)) == 128
    assert g.splits_for(Shape(4096, 4096, 64)) == 1     # many tiles: no split
    assert g.splits_for(Shape(64, 64, 64)) == 1         # one k-tile cannot be split


# ---------------------------------------------------------------- real nvcc builds

def _build(source: str, arch: str):
    from harness.build import build

    return build(source, arch=arch)


@pytest.mark.compile
@pytest.mark.parametrize("family", ["sm80_mma", "small_splitk", "tiny_mma"])
@pytest.mark.parametrize("acc", ["f32", "f16"])
def test_mma_families_build_for_sm80(family, acc, tmp_path, monkeypatch):
    monkeypatch.setenv("L2TUI_CACHE_DIR", str(tmp_path))
    cfg = next(c for c in F.catalog(acc, "sm_80") if c.family == family)
    res = _build(cfg.source(), "sm_80")
    assert res.ok, res.error_text()
    assert res.ptxas is not None
    # no local-memory spills in the representative configuration
    assert "0 bytes spill stores" in res.log


@pytest.mark.compile
def test_mma_family_split_k_variant_builds(tmp_path, monkeypatch):
    monkeypatch.setenv("L2TUI_CACHE_DIR", str(tmp_path))
    src = F.render("sm80_mma", {"SPLIT_K": 4, "BM": 64, "BN": 64, "BK": 64, "STAGES": 3})
    res = _build(src, "sm_80")
    assert res.ok, res.error_text()


@pytest.mark.compile
def test_an_illegal_edit_fails_to_compile_with_a_clear_error(tmp_path, monkeypatch):
    """The static_asserts catch what the registry would reject, for hand edits."""
    monkeypatch.setenv("L2TUI_CACHE_DIR", str(tmp_path))
    src = F.set_knobs(F.SM80.template(), {"BK": "48"})
    res = _build(src, "sm_80")
    assert not res.ok
    assert "BK must be 32 or 64" in res.log


@pytest.mark.compile
@pytest.mark.slow
def test_sm90_family_builds_for_sm90a_without_serialized_wgmma(tmp_path, monkeypatch):
    """One representative CUTLASS configuration (a build takes 40-60 s on 2 cores)."""
    monkeypatch.setenv("L2TUI_CACHE_DIR", str(tmp_path))
    res = _build(F.SM90.template(), "sm_90a")
    assert res.ok, res.error_text()
    assert "C7510" not in res.log      # wgmma pipeline not serialized (NDEBUG inside the source)


def test_split_k_is_legal_only_with_automatic_splits():
    """SPLITS 0 keeps every (tile, split) unit in one resident wave; fixed splits hung once."""
    base = {**F.get_family("sm90_cutlass").defaults(), "SCHEDULE": "COOPERATIVE", "TILE_M": "128",
            "SCHEDULER": "SPLITK"}
    assert F.validate("sm90_cutlass", {**base, "SPLITS": "0"}) == []
    assert any("SPLITS 0" in p for p in F.validate("sm90_cutlass", {**base, "SPLITS": "4"}))
    assert F.validate("sm90_cutlass", {**base, "SPLITS": "4"}, allow_unsafe=True) == []
    g = F.geometry("sm90_cutlass", {**base, "SPLITS": "0", "TILE_N": "64"})
    # 256x256 in 128x64 tiles = 8 tiles: 132 // 8 = 16 splits, capped at a quarter of the k-tiles
    assert g.splits_for(Shape(256, 256, 16384)) == 16
    assert g.splits_for(Shape(256, 256, 512)) == 2
    assert g.splits_for(Shape(4096, 4096, 4096)) == 1


def test_splitk_reduce_cuts_k_into_equal_aligned_slices():
    """SPLITK_REDUCE runs the slices as one batched GEMM: equal lengths, multiples of TILE_K or 8."""
    cfg = F.Config.of("sm90_cutlass", F._sm90(128, 64, scheduler="SPLITK_REDUCE", splits=0))
    assert F.validate("sm90_cutlass", cfg.knob_dict) == []
    assert cfg.name == "sm90-128x64x64-c1x1-coop-splitr0-st0"
    g = cfg.geometry()
    assert g.separate_reduce and g.pdl
    # 64x64 output = 1 tile: 132 CTAs wanted, capped at a quarter of 256 k-tiles = 64 slices of 256
    assert g.splits_for(Shape(64, 64, 16384)) == 64
    # 12288 = 3 * 4096: 33 wanted (4 tiles) -> 32 slices of 384 (a multiple of 64)
    assert g.splits_for(Shape(256, 128, 12288)) == 32
    # K = 8 * 1537 (1537 = 29 * 53): no multiple of 64 divides it; slices of 8 * 53 = 424
    k = 8 * 1537
    s = g.splits_for(Shape(256, 128, k))
    assert s == 29 and k % s == 0 and (k // s) % 8 == 0
    assert g.splits_for(Shape(8192, 8192, 4096)) == 1   # enough tiles: one slice
    # pingpong is fine (it is a persistent GEMM), SPLITS 1 is a no-op and refused
    pp = {**cfg.knob_dict, "SCHEDULE": "PINGPONG", "TILE_M": "64"}
    assert F.validate("sm90_cutlass", pp) == []
    assert any("SPLITS > 1" in p for p in F.validate("sm90_cutlass", {**cfg.knob_dict, "SPLITS": "1"}))


@pytest.mark.compile
@pytest.mark.slow
def test_splitk_reduce_variant_builds_for_sm90a(tmp_path, monkeypatch):
    """The batched-slices GEMM (fp32 D) and its reduce kernel compile, without serialized wgmma."""
    monkeypatch.setenv("L2TUI_CACHE_DIR", str(tmp_path))
    src = F.render("sm90_cutlass", F._sm90(64, 128, sched="PINGPONG", scheduler="SPLITK_REDUCE", splits=0))
    res = _build(src, "sm_90a")
    assert res.ok, res.error_text()
    assert "C7510" not in res.log
    assert "splitk_reduce" in res.log     # ptxas compiled the reduce kernel too


def test_epilogue_knobs_are_validated_and_named():
    """EPI_TILE_N must divide TILE_N and applies to the TMA epilogues only; names show both knobs."""
    base = F._sm90(128, 192, sched="PINGPONG", epi="EPI_TMA_NOC")
    assert F.validate("sm90_cutlass", {**F.SM90.defaults(), **base}) == []
    assert F.Config.of("sm90_cutlass", base).name == "sm90-128x192x64-c1x1-pp-p-st0-noc"
    e64 = {**F.SM90.defaults(), **base, "EPI_TILE_N": "64"}
    assert F.validate("sm90_cutlass", e64) == []
    assert F.Config.of("sm90_cutlass", e64).name.endswith("-noc-e64")
    bad = F.validate("sm90_cutlass", {**e64, "EPI_TILE_N": "128"})
    assert any("not a multiple of EPI_TILE_N" in p for p in bad)
    nosmem = F.validate("sm90_cutlass", {**e64, "EPILOGUE": "EPI_NOSMEM"})
    assert any("TMA epilogues only" in p for p in nosmem)
    # a wider subtile takes shared memory from the mainloop's stages
    g32 = F.geometry("sm90_cutlass", {**F.SM90.defaults(), **base})
    g128 = F.geometry("sm90_cutlass", {**F.SM90.defaults(), **F._sm90(128, 256, epi="EPI_TMA_NOC", epi_n=128)})
    assert g128.stages <= g32.stages


@pytest.mark.compile
@pytest.mark.slow
def test_fixed_short_pipeline_builds_with_that_many_stages(tmp_path, monkeypatch):
    """STAGES 2: the mainloop's ring has two stages, not as many as fit in shared memory."""
    monkeypatch.setenv("L2TUI_CACHE_DIR", str(tmp_path))
    src = F.render("sm90_cutlass", F._sm90(64, 64, sched="PINGPONG", stages=2, epi="EPI_TMA_NOC", epi_n=64))
    res = _build(src, "sm_90a")
    assert res.ok, res.error_text()
    assert "C7510" not in res.log
    # the collective's dispatch policy in the kernel's name: MainloopSm90TmaGmmaWarpSpecialized<Stages, ...>
    assert "MainloopSm90TmaGmmaWarpSpecializedILi2E" in res.log, res.log[-2000:]


@pytest.mark.compile
@pytest.mark.slow
def test_basic_schedule_builds_the_non_persistent_kernel(tmp_path, monkeypatch):
    """SCHEDULE BASIC: CUTLASS's KernelTmaWarpSpecialized (a CTA per tile), not a persistent one."""
    monkeypatch.setenv("L2TUI_CACHE_DIR", str(tmp_path))
    res = _build(F.render("sm90_cutlass", F._sm90(64, 64, sched="BASIC", stages=4, epi="EPI_TMA_NOC")), "sm_90a")
    assert res.ok, res.error_text()
    assert "C7510" not in res.log
    assert "KernelTmaWarpSpecializedE" in res.log and "KernelTmaWarpSpecializedPingpong" not in res.log
    assert "COOPERATIVE needs" in F.validate("sm90_cutlass", {**F.SM90.defaults(), **F._sm90(64, 64)})[0]
    assert F.validate("sm90_cutlass", {**F.SM90.defaults(), **F._sm90(192, 64, sched="BASIC")})
    assert F.validate("sm90_cutlass", {**F.SM90.defaults(), **F._sm90(128, 128, sched="BASIC", scheduler="STREAMK")})


@pytest.mark.compile
@pytest.mark.slow
def test_basic_schedule_builds_a_deep_ring(tmp_path, monkeypatch):
    """SCHEDULE BASIC with STAGES 8 (the seventh round's deep ring): the non-persistent kernel with
    an eight-stage mainloop ring, 128 KB of 64x64 k-tiles, within one SM's shared memory."""
    monkeypatch.setenv("L2TUI_CACHE_DIR", str(tmp_path))
    knobs = F._sm90(64, 64, sched="BASIC", stages=8, epi="EPI_TMA_NOC")
    res = _build(F.render("sm90_cutlass", knobs), "sm_90a")
    assert res.ok, res.error_text()
    assert "C7510" not in res.log
    assert "KernelTmaWarpSpecializedE" in res.log
    assert "MainloopSm90TmaGmmaWarpSpecializedILi8E" in res.log, res.log[-2000:]
    assert F.geometry("sm90_cutlass", {**F.SM90.defaults(), **knobs}).smem_bytes <= 227 * 1024


@pytest.mark.compile
@pytest.mark.slow
def test_no_source_epilogue_builds_with_delayed_stores(tmp_path, monkeypatch):
    """EPI_TMA_NOC: C is void, so CUTLASS's epilogue delays each TMA store by one subtile."""
    monkeypatch.setenv("L2TUI_CACHE_DIR", str(tmp_path))
    src = F.render("sm90_cutlass", F._sm90(128, 128, sched="PINGPONG", epi="EPI_TMA_NOC", epi_n=64))
    res = _build(src, "sm_90a")
    assert res.ok, res.error_text()
    assert "C7510" not in res.log
    # the dispatch policy in the kernel's name: Sm90TmaWarpSpecialized<StagesC, StagesD,
    # FragmentSize, ReuseSmemC, DelayTmaStore> with DelayTmaStore = true
    assert "Sm90TmaWarpSpecializedILi4ELi2ELi32ELb0ELb1E" in res.log, res.log[-2000:]


@pytest.mark.compile
@pytest.mark.slow
def test_ninety_six_column_tile_builds_for_sm90a(tmp_path, monkeypatch):
    """TILE_N 96 is not a multiple of the 64-column (128-byte) swizzle atom of the N-major B tile:
    the collective builder must fall back to a narrower swizzle, and the build must not serialize
    the wgmma pipeline."""
    monkeypatch.setenv("L2TUI_CACHE_DIR", str(tmp_path))
    knobs = F._sm90(128, 96, scheduler="SPLITK_REDUCE", splits=0, epi="EPI_TMA_NOC")
    assert F.validate("sm90_cutlass", {**F.SM90.defaults(), **knobs}) == []
    assert F.Config.of("sm90_cutlass", knobs).name == "sm90-128x96x64-c1x1-coop-splitr0-st0-noc"
    res = _build(F.render("sm90_cutlass", knobs), "sm_90a")
    assert res.ok, res.error_text()
    assert "C7510" not in res.log
    assert "MMA_64x96x16_F32F16F16_SS" in res.log, res.log[-2000:]


@pytest.mark.compile
@pytest.mark.slow
def test_forty_eight_column_tile_builds_for_sm90a(tmp_path, monkeypatch):
    """TILE_N 48 (BASIC, eight stages): without CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED (which this
    template does not define: defining it would change every build key), CuTe's atom selector
    takes the largest of 256, 192, 128, 96, 64, 32, 16 that divides the tile, so 48 columns run as
    three 64x16x16 wgmmas per k-step and row block; the build must still not serialize the wgmma
    pipeline, and the ring must fit."""
    monkeypatch.setenv("L2TUI_CACHE_DIR", str(tmp_path))
    knobs = F._sm90(128, 48, sched="BASIC", stages=8, epi="EPI_TMA_NOC")
    full = {**F.SM90.defaults(), **knobs}
    assert F.validate("sm90_cutlass", full) == []
    assert F.Config.of("sm90_cutlass", knobs).name == "sm90-128x48x64-c1x1-ws-p-st8-noc"
    assert F.geometry("sm90_cutlass", full).smem_bytes <= 227 * 1024
    assert any("not a multiple of EPI_TILE_N" in p for p in F.validate("sm90_cutlass", {**full, "EPI_TILE_N": "64"}))
    res = _build(F.render("sm90_cutlass", knobs), "sm_90a")
    assert res.ok, res.error_text()
    assert "C7510" not in res.log
    assert "KernelTmaWarpSpecializedE" in res.log
    assert "MainloopSm90TmaGmmaWarpSpecializedILi8E" in res.log and "MMA_64x16x16_F32F16F16_SS" in res.log, res.log[-2000:]


def test_clusters_of_up_to_eight_ctas_are_legal():
    ok = {**F.SM90.defaults(), **F._sm90(128, 256, cm=4, cn=2)}
    assert F.validate("sm90_cutlass", ok) == []
    assert F.Config.of("sm90_cutlass", ok).name.startswith("sm90-128x256x64-c4x2-")
    bad = F.validate("sm90_cutlass", {**ok, "CLUSTER_N": "4"})
    assert any("at most 8" in p for p in bad)


def test_cluster_split_k_rules_names_and_arches():
    """CLUSTER_K (small_splitk): the slices of a tile in one cluster replace the global split-K;
    sm_90 only, so the catalog leaves those configurations out on older GPUs."""
    k = F._mma(64, 64, 64, 2, 2, 3, 4, 1, ck=8)
    full = {**F.SMALL.defaults(), **k}
    assert F.validate("small_splitk", full) == []
    assert F.Config.of("small_splitk", k).name == "small-64x64x64-w2x2-st3-sw4-sk1-ck8"
    assert any("use SPLIT_K 1" in p for p in F.validate("small_splitk", {**full, "SPLIT_K": "0"}))
    g = F.geometry("small_splitk", full)
    assert g.cluster == 8 and g.splits_for(Shape(64, 64, 4096)) == 8 and g.smem_bytes >= 64 * 64 * 4
    assert F.Config.of("small_splitk", F._mma(64, 64, 64, 2, 2, 3, 4, 0)).name == "small-64x64x64-w2x2-st3-sw4-sk0"
    on80 = [c.name for c in F.catalog("f32", "sm_80")]
    on90 = [c.name for c in F.catalog("f32", "sm_90a")]
    assert not any("-ck" in n for n in on80)
    assert "small-16x64x64-w1x2-st3-sw4-sk1-ck8" in on90


@pytest.mark.compile
@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_cluster_split_k_builds(arch, tmp_path, monkeypatch):
    """The cluster reduction (cooperative_groups cluster API, distributed shared memory) compiles
    for sm_90a; for sm_80 the same source compiles without it (the host refuses to launch it)."""
    monkeypatch.setenv("L2TUI_CACHE_DIR", str(tmp_path))
    res = _build(F.render("small_splitk", F._mma(64, 64, 64, 2, 2, 3, 4, 1, ck=8)), arch)
    assert res.ok, res.error_text()
    assert "0 bytes spill stores" in res.log


@pytest.mark.compile
def test_small_splitk_large_split_counts_build_for_sm80(tmp_path, monkeypatch):
    """SPLIT_K 128 (the parallel per-tile reduction's share of a 16x64 tile is 2 float4 groups)."""
    monkeypatch.setenv("L2TUI_CACHE_DIR", str(tmp_path))
    src = F.render("small_splitk", {"BM": 16, "BN": 64, "WARPS_M": 1, "WARPS_N": 2, "SPLIT_K": 128})
    res = _build(src, "sm_80")
    assert res.ok, res.error_text()
    assert "0 bytes spill stores" in res.log


def test_a_source_from_before_a_knob_existed_is_not_read_as_a_configuration():
    """A session recorded before EPI_TILE_N joined the template has kernels whose code ignores
    the new knob: editing it there would change nothing, so such a source is not a
    configuration (the search policy starts over from a fresh seed instead of patching it)."""
    src = F.render("sm90_cutlass", F._sm90(128, 128, sched="PINGPONG"))
    assert F.Config.from_source(src) is not None
    old = "\n".join(line for line in src.splitlines() if not line.startswith("#define EPI_TILE_N"))
    assert F.Config.from_source(old) is None


def test_tiny_family_rules_names_and_catalog():
    """tiny_mma: static shared memory, staged loads and accumulators are bounded by the
    registry exactly where the template's static_asserts would stop the build."""
    ok = {**F.TINY.defaults(), "BM": "32", "BN": "128", "BK": "64", "WARPS_M": "2", "WARPS_N": "4"}
    assert F.validate("tiny_mma", ok) == []
    assert F.config_name("tiny_mma", ok) == "tiny-32x128x64-w2x4"
    assert F.config_name("tiny_mma", {**ok, "ACC": "ACC_F16", "PDL": "0"}) == "tiny-32x128x64-w2x4-f16-nopdl"
    too_big = {**ok, "BM": "64", "BK": "128", "WARPS_M": "4"}          # 2 x (64x136 + 128x136) halfs
    assert any("static shared memory" in p for p in F.validate("tiny_mma", too_big))
    few_threads = {**ok, "BM": "16", "BN": "128", "BK": "128", "WARPS_M": "1", "WARPS_N": "1"}
    assert any("staged 16-byte loads" in p for p in F.validate("tiny_mma", few_threads))
    assert any("multiples of 16" in p for p in F.validate("tiny_mma", {**ok, "WARPS_N": "4", "BN": "32"}))
    g = F.geometry("tiny_mma", ok)
    assert (g.threads, g.split_k, g.stages, g.epilogue) == (256, 1, 2, "REGS")
    assert F.config_name("tiny_mma", {**ok, "WARPS_K": "2"}) == "tiny-32x128x64-w2x4x2"
    assert F.geometry("tiny_mma", {**ok, "WARPS_K": "2"}).threads == 512
    uneven = {**ok, "BK": "32", "WARPS_K": "4"}                        # 2 k-steps over 4 warps
    assert any("do not split over WARPS_K" in p for p in F.validate("tiny_mma", uneven))
    ahead = {**ok, "AHEAD": "2"}                                       # two sets of 4 + 4 loads
    assert F.validate("tiny_mma", ahead) == [] and F.config_name("tiny_mma", ahead) == "tiny-32x128x64-w2x4-a2"
    assert F.geometry("tiny_mma", ahead).stages == 3                  # two chunks in flight, one in use
    wide = {**ok, "BM": "16", "BN": "64", "BK": "128", "WARPS_M": "1", "WARPS_N": "4"}    # 2 + 8 per set
    assert F.validate("tiny_mma", wide) == []
    assert any("staged 16-byte loads" in p for p in F.validate("tiny_mma", {**wide, "AHEAD": "2"}))
    ck = {**ok, "CLUSTER_K": "8", "WARPS_K": "2"}                       # K over a cluster of 8 CTAs
    assert F.validate("tiny_mma", ck) == [] and F.config_name("tiny_mma", ck) == "tiny-32x128x64-w2x4x2-ck8"
    g = F.geometry("tiny_mma", ck)
    assert (g.split_k, g.cluster) == (8, 8)
    assert g.splits_for(Shape(64, 64, 264)) == 5                      # 5 chunks of 64: 3 CTAs get none
    full = {**ok, "BM": "64", "BN": "64", "WARPS_M": "2", "WARPS_N": "2", "WARPS_K": "4", "CLUSTER_K": "2"}
    assert any("every K warp's fp32 partial tile" in p for p in F.validate("tiny_mma", full))
    assert not [c for c in F.catalog("f32", "sm_80") if c.knob_dict.get("CLUSTER_K", "1") != "1"]
    for acc in ("f32", "f16"):
        for arch in ("sm_80", "sm_90a"):
            tiny = [c for c in F.catalog(acc, arch) if c.family == "tiny_mma"]
            assert tiny and all(F.validate("tiny_mma", c.knob_dict) == [] for c in tiny)


@pytest.mark.parametrize("knobs", [{"BM": 64, "BN": 128, "BK": 32, "WARPS_M": 2, "WARPS_N": 4},
                                   {"BM": 128, "BN": 128, "BK": 32, "WARPS_M": 2, "WARPS_N": 4},
                                   {"BM": 128, "BN": 64, "BK": 32, "WARPS_M": 4, "WARPS_N": 2},
                                   {"BM": 16, "BN": 64, "BK": 128, "WARPS_M": 1, "WARPS_N": 4, "WARPS_K": 4},
                                   {"BM": 16, "BN": 64, "BK": 64, "WARPS_M": 1, "WARPS_N": 4, "WARPS_K": 2,
                                    "ACC": "ACC_F16"},
                                   {"BM": 16, "BN": 64, "BK": 128, "WARPS_M": 1, "WARPS_N": 4, "ACC": "ACC_F16"},
                                   {"BM": 16, "BN": 64, "BK": 128, "WARPS_M": 1, "WARPS_N": 2, "WARPS_K": 4,
                                    "AHEAD": 2},
                                   {"BM": 16, "BN": 64, "BK": 128, "WARPS_M": 1, "WARPS_N": 4, "WARPS_K": 2,
                                    "AHEAD": 2, "CLUSTER_K": 8},
                                   {"BM": 128, "BN": 128, "BK": 32, "WARPS_M": 2, "WARPS_N": 4, "AHEAD": 2,
                                    "EPILOGUE": "EPI_SMEM"},
                                   {"BM": 128, "BN": 64, "BK": 32, "WARPS_M": 4, "WARPS_N": 2,
                                    "EPILOGUE": "EPI_SMEM", "ACC": "ACC_F16"},
                                   {"BM": 32, "BN": 64, "BK": 64, "WARPS_M": 2, "WARPS_N": 2,
                                    "EPILOGUE": "EPI_SMEM"}])
@pytest.mark.compile
def test_tiny_family_builds_for_sm90a_without_spills(knobs, tmp_path, monkeypatch):
    monkeypatch.setenv("L2TUI_CACHE_DIR", str(tmp_path))
    res = _build(F.render("tiny_mma", knobs), "sm_90a")
    assert res.ok, res.error_text()
    assert "0 bytes spill stores" in res.log


def test_tiny_smem_epilogue_rules_names_and_catalog():
    """EPILOGUE: C from each thread's fragments (EPI_REGS, the default, what every measured render
    ran) or through shared memory as 16-byte row segments (EPI_SMEM, tag -es), for a tile one CTA
    computes whole and that fits in the chunk buffers; the catalog gives the store-heavy entries
    a twin with it, which the pick times beside them (an epilogue sibling)."""
    base = {**F.TINY.defaults(), "BM": "128", "BN": "128", "BK": "32", "WARPS_M": "2", "WARPS_N": "4"}
    assert base["EPILOGUE"] == "EPI_REGS"
    es = {**base, "EPILOGUE": "EPI_SMEM"}
    assert F.validate("tiny_mma", es) == []
    assert F.config_name("tiny_mma", es) == "tiny-128x128x32-w2x4-es"
    assert F.config_name("tiny_mma", base) == "tiny-128x128x32-w2x4"
    assert (F.geometry("tiny_mma", es).epilogue, F.geometry("tiny_mma", base).epilogue) == ("SMEM", "REGS")
    assert "#define EPILOGUE EPI_SMEM" in F.render("tiny_mma", es)
    assert any("WARPS_K 1 and CLUSTER_K 1" in p for p in F.validate("tiny_mma", {**es, "WARPS_K": "2"}))
    assert any("WARPS_K 1 and CLUSTER_K 1" in p for p in F.validate("tiny_mma", {**es, "CLUSTER_K": "2"}))
    assert any("EPILOGUE" in p for p in F.validate("tiny_mma", {**base, "EPILOGUE": "EPI_TMA"}))
    pool = F.catalog("f32", "sm_90a")
    twins = [c for c in pool if c.family == "tiny_mma" and c.knob_dict["EPILOGUE"] == "EPI_SMEM"]
    assert len(twins) == 12 and all(F.validate("tiny_mma", c.knob_dict) == [] for c in twins)
    regs = next(c for c in pool if c.name == "tiny-128x128x32-w2x4-nopdl")
    assert [c.name for c in F.epilogue_siblings(regs, pool)] == ["tiny-128x128x32-w2x4-es-nopdl"]


@pytest.mark.compile
def test_tiny_smem_epilogue_refuses_a_split_tile_at_compile_time(tmp_path, monkeypatch):
    """A hand edit the registry would refuse stops at the template's static_assert."""
    monkeypatch.setenv("L2TUI_CACHE_DIR", str(tmp_path))
    src = F.set_knobs(F.TINY.template(), {"EPILOGUE": "EPI_SMEM", "WARPS_K": "2", "BK": "64"})
    res = _build(src, "sm_80")
    assert not res.ok
    assert "EPI_SMEM: CLUSTER_K 1 and WARPS_K 1 only" in res.log


def test_ksplit_family_rules_names_and_catalog():
    """sm90_ksplit: fp32 only, CLUSTER_K must divide TILE_M, shared memory bounded; catalog
    entries are f32-only and sm_90-only (WGMMA, TMA, clusters)."""
    ok = {"TILE_M": "64", "TILE_N": "128", "STAGES": "8", "CLUSTER_K": "2"}
    assert F.validate("sm90_ksplit", {**F.KSPLIT.defaults(), **ok}) == []
    assert F.config_name("sm90_ksplit", {**F.KSPLIT.defaults(), **ok}) == "ksp-64x128x64-s8-ck2"
    too_big = {**F.KSPLIT.defaults(), "TILE_M": "128", "TILE_N": "256", "STAGES": "8"}
    assert any("shared memory" in p for p in F.validate("sm90_ksplit", too_big))
    split = {**F.KSPLIT.defaults(), "TILE_M": "64", "CLUSTER_K": "8"}
    assert F.validate("sm90_ksplit", split) == []          # 8 rows each
    assert any("ACC" in p for p in F.validate("sm90_ksplit", {**F.KSPLIT.defaults(), "ACC": "ACC_F16"}))
    assert [c for c in F.catalog("f16") if c.family == "sm90_ksplit"] == []
    assert [c for c in F.catalog("f32", "sm_80") if c.family == "sm90_ksplit"] == []
    ksp = [c for c in F.catalog("f32", "sm_90a") if c.family == "sm90_ksplit"]
    assert len(ksp) >= 8 and all(F.validate(c.family, c.knob_dict) == [] for c in ksp)
    assert F.build_arch_for("sm90_ksplit", "sm_90") == "sm_90a"
    g = F.geometry("sm90_ksplit", {**F.KSPLIT.defaults(), **ok})
    assert (g.cluster, g.split_k, g.threads) == (2, 2, 160)


def test_ksplit_two_consumer_sets_rules_names_and_threads():
    """WG_K 2: twice the consumer warpgroups (one producer warp more), a ring of more stages than
    sets and a multiple of them (each stage serves one set), its own name tag."""
    base = {**F.KSPLIT.defaults(), "TILE_M": "64", "TILE_N": "64", "STAGES": "8", "CLUSTER_K": "1", "WG_K": "2"}
    assert F.validate("sm90_ksplit", base) == []
    assert F.config_name("sm90_ksplit", base) == "ksp-64x64x64-s8-ck1-wk2"
    assert F.config_name("sm90_ksplit", {**base, "WG_K": "1"}) == "ksp-64x64x64-s8-ck1"
    assert F.geometry("sm90_ksplit", base).threads == 288
    assert F.geometry("sm90_ksplit", {**base, "TILE_M": "128", "STAGES": "6"}).threads == 544
    for stages in ("2", "3", "5", "7"):
        assert any("multiple of WG_K" in p for p in F.validate("sm90_ksplit", {**base, "STAGES": stages})), stages
    assert F.validate("sm90_ksplit", {**base, "STAGES": "12"}) == []
    assert F.validate("sm90_ksplit", {**base, "WG_K": "1", "STAGES": "3"}) == []
    wk = [c for c in F.catalog("f32", "sm_90a") if c.family == "sm90_ksplit" and c.knob_dict["WG_K"] == "2"
          and c.knob_dict["RELEASE"] == "RELEASE_BY_THREAD"]
    assert len(wk) == 12 and all(c.knob_dict["PDL"] == "0" for c in wk)


def _committed_configs() -> dict:
    import json

    return json.loads((PACKAGE_DIR.parent / "results" / "h200" / "winners-f32.json").read_text())["configs"]


def test_ksplit_release_by_warp_names_defaults_and_catalog():
    """RELEASE: every consumer thread frees a stage (the default, what every measured render ran)
    or lane 0 of each consumer warp (tag -rw); the catalog holds the committed winners' sm90_ksplit
    configurations with it, launched without PDL."""
    base = {**F.KSPLIT.defaults(), "TILE_M": "64", "TILE_N": "64", "STAGES": "8", "CLUSTER_K": "2"}
    assert base["RELEASE"] == "RELEASE_BY_THREAD"
    by_warp = {**base, "RELEASE": "RELEASE_BY_WARP"}
    assert F.validate("sm90_ksplit", by_warp) == []
    assert F.config_name("sm90_ksplit", by_warp) == "ksp-64x64x64-s8-ck2-rw"
    assert F.config_name("sm90_ksplit", base) == "ksp-64x64x64-s8-ck2"
    assert F.geometry("sm90_ksplit", by_warp).threads == F.geometry("sm90_ksplit", base).threads
    assert "#define RELEASE RELEASE_BY_WARP" in F.render("sm90_ksplit", by_warp)
    assert any("RELEASE" in p for p in F.validate("sm90_ksplit", {**base, "RELEASE": "RELEASE_BY_CTA"}))
    rw = {c.name for c in F.catalog("f32", "sm_90a")
          if c.family == "sm90_ksplit" and c.knob_dict["RELEASE"] == "RELEASE_BY_WARP"}
    committed = {n for n, c in _committed_configs().items() if c["family"] == "sm90_ksplit"}
    assert {n.replace("-nopdl", "-rw-nopdl") for n in committed} <= rw and len(rw) == 9


def test_ksplit_groups_geometry_mirrors_the_host_rule():
    """GROUPS 0: the largest power of two up to 16 that keeps every cluster resident (66 clusters
    of 2, 30 of 4 on the H200) and two k-tiles per CTA; GROUPS 1 keeps one cluster per tile, an
    explicit value is used as given. The split the cost model sees is CLUSTER_K x GROUPS."""
    base = {**F.KSPLIT.defaults(), "TILE_M": "64", "TILE_N": "64", "STAGES": "8", "CLUSTER_K": "2"}
    auto = F.geometry("sm90_ksplit", {**base, "GROUPS": "0"})
    one = F.geometry("sm90_ksplit", base)
    assert auto.groups == 0 and one.groups == 1
    assert auto.groups_for(Shape(128, 128, 16384)) == 16       # 4 tiles x 16 groups = 64 clusters of 2
    assert auto.splits_for(Shape(128, 128, 16384)) == 32
    assert auto.groups_for(Shape(256, 256, 16384)) == 4        # 16 tiles: 8 x 16 > 66 would not be resident
    assert auto.groups_for(Shape(512, 512, 16384)) == 1        # 64 tiles: one group fills 64 of 66
    assert auto.groups_for(Shape(64, 64, 256)) == 1            # 4 k-tiles: two per CTA of one cluster
    assert auto.groups_for(Shape(64, 64, 512)) == 2
    assert auto.groups_for(Shape(4096, 4096, 4096)) == 1       # more tiles than resident clusters
    assert one.groups_for(Shape(128, 128, 16384)) == 1 and one.splits_for(Shape(128, 128, 16384)) == 2
    four = F.geometry("sm90_ksplit", {**base, "CLUSTER_K": "4", "GROUPS": "0"})
    assert four.groups_for(Shape(128, 128, 16384)) == 4        # 30 clusters of 4: 4 tiles x 4 groups
    fixed = F.geometry("sm90_ksplit", {**base, "GROUPS": "8"})
    assert fixed.groups_for(Shape(64, 64, 64)) == 8
    assert F.config_name("sm90_ksplit", {**base, "GROUPS": "0"}) == "ksp-64x64x64-s8-ck2-ga"
    assert F.config_name("sm90_ksplit", {**base, "GROUPS": "16"}) == "ksp-64x64x64-s8-ck2-g16"
    assert any("GROUPS" in p for p in F.validate("sm90_ksplit", {**base, "GROUPS": "3"}))


@pytest.mark.slow
@pytest.mark.parametrize("knobs", [{"TILE_M": "64", "TILE_N": "128", "STAGES": "8", "CLUSTER_K": "2"},
                                   {"TILE_M": "128", "TILE_N": "128", "STAGES": "4", "CLUSTER_K": "1"},
                                   {"TILE_M": "64", "TILE_N": "256", "STAGES": "4", "CLUSTER_K": "2"},
                                   {"TILE_M": "128", "TILE_N": "128", "STAGES": "4", "CLUSTER_K": "2",
                                    "GROUPS": "0"},
                                   {"TILE_M": "64", "TILE_N": "64", "STAGES": "8", "CLUSTER_K": "1",
                                    "GROUPS": "16"},
                                   {"TILE_M": "64", "TILE_N": "64", "STAGES": "12", "CLUSTER_K": "1", "WG_K": "2"},
                                   {"TILE_M": "128", "TILE_N": "128", "STAGES": "4", "CLUSTER_K": "1", "WG_K": "2"},
                                   {"TILE_M": "64", "TILE_N": "128", "STAGES": "8", "CLUSTER_K": "2", "WG_K": "2",
                                    "GROUPS": "0"},
                                   {"TILE_M": "64", "TILE_N": "64", "STAGES": "8", "CLUSTER_K": "1",
                                    "WG_K": "2", "RELEASE": "RELEASE_BY_WARP"},
                                   {"TILE_M": "64", "TILE_N": "128", "STAGES": "8", "CLUSTER_K": "4",
                                    "RELEASE": "RELEASE_BY_WARP", "MMA_DEPTH": "0"}])
@pytest.mark.compile
def test_ksplit_family_builds_for_sm90a_without_spills(knobs, tmp_path, monkeypatch):
    """The WGMMA mainloop, the TMA descriptors and the cluster reduction compile for sm_90a with
    no register spills (a 64x256 tile keeps 128 fp32 accumulators per thread; with WG_K 2 a 128x128
    tile runs four consumer warpgroups)."""
    monkeypatch.setenv("L2TUI_CACHE_DIR", str(tmp_path))
    res = _build(F.render("sm90_ksplit", knobs), "sm_90a")
    assert res.ok, res.error_text()
    assert "0 bytes spill stores" in res.log
    assert "C7510" not in res.log      # wgmma not serialized


def test_transposed_family_takes_rows_of_c_as_the_wgmma_n():
    """sm90_cutlass_t: tiles in C's orientation (TILE_M rows of C, any multiple of 16 the WGMMA's N
    allows; TILE_N columns, 64 per consumer warpgroup), sm90_cutlass's shared-memory arithmetic, its
    own names and rules."""
    base = {**F.SM90T.defaults(), "TILE_M": "80", "TILE_N": "64", "CLUSTER_M": "2", "CLUSTER_N": "4",
            "SCHEDULE": "PINGPONG"}
    assert F.validate("sm90_cutlass_t", base) == []
    cfg = F.Config.of("sm90_cutlass_t", base)
    assert cfg.name == "sm90t-80x64x64-c2x4-pp-st0-nopdl"
    g = cfg.geometry()
    assert (g.tile_m, g.tile_n, g.cluster, g.cluster_mn) == (80, 64, 8, (2, 4))
    assert g.stages == 12 and g.smem_bytes <= F.SMEM_PER_SM and g.persistent and g.pingpong
    # the tile grid counts C's tiles: 1024 rows in 80-row tiles, 512 columns in 64-column tiles,
    # each side rounded up to whole clusters
    assert g.tile_grid(Shape(1024, 512, 2048)) == (14, 8)
    assert g.splits_for(Shape(1024, 512, 2048)) == 1
    assert F.build_arch_for("sm90_cutlass_t", "sm_90a") == "sm_90a"
    assert not F.get_family("sm90_cutlass_t").runs_on(80)
    bad = F.validate("sm90_cutlass_t", {**base, "TILE_N": "256"})
    assert any("PINGPONG needs TILE_N 64 or 128" in p for p in bad)
    assert any("COOPERATIVE needs TILE_N 128 or 256" in p
               for p in F.validate("sm90_cutlass_t", {**base, "SCHEDULE": "COOPERATIVE"}))
    assert any("at most 8" in p for p in F.validate("sm90_cutlass_t", {**base, "CLUSTER_M": "4"}))
    assert any("not legal" in p for p in F.validate("sm90_cutlass_t", {**base, "TILE_M": "72"}))
    basic = F.Config.of("sm90_cutlass_t", {**base, "SCHEDULE": "BASIC", "TILE_M": "48", "CLUSTER_M": "1",
                                            "CLUSTER_N": "1"})
    assert basic.name == "sm90t-48x64x64-c1x1-ws-st0-nopdl" and not basic.geometry().persistent


def test_transposed_decode_tiles_and_their_schedulers():
    """16- and 32-row tiles for decode GEMMs; CUTLASS's stream-K and split-K schedulers need the
    cooperative kernel, split-K a split count other than 1, and the names say which scheduler."""
    base = {**F.SM90T.defaults(), "TILE_M": "16", "TILE_N": "256", "CLUSTER_M": "1", "CLUSTER_N": "1",
            "SCHEDULE": "COOPERATIVE"}
    assert F.validate("sm90_cutlass_t", base) == []
    assert F.Config.of("sm90_cutlass_t", base).name == "sm90t-16x256x64-c1x1-coop-st0-nopdl"
    sk = F.Config.of("sm90_cutlass_t", {**base, "SCHEDULER": "STREAMK"})
    assert sk.name == "sm90t-16x256x64-c1x1-coop-st0-sk-nopdl" and sk.geometry().streamk
    split = F.Config.of("sm90_cutlass_t", {**base, "TILE_N": "128", "SCHEDULER": "SPLITK", "SPLITS": "0"})
    assert split.name == "sm90t-16x128x64-c1x1-coop-st0-split0-nopdl"
    assert any("needs SCHEDULE COOPERATIVE" in p for p in
               F.validate("sm90_cutlass_t", {**base, "TILE_N": "128", "SCHEDULE": "BASIC", "SCHEDULER": "STREAMK"}))
    assert any("SPLITS 1" in p for p in F.validate("sm90_cutlass_t", {**base, "SCHEDULER": "SPLITK", "SPLITS": "1"}))
    # the decode shape 16x28672x4096 in 16x256 tiles: 112 tiles of C, as cuBLASLt's kernel there
    assert F.Config.of("sm90_cutlass_t", base).geometry().tile_grid(Shape(16, 28672, 4096)) == (1, 112)


def test_transposed_sliced_decode_tiles_are_validated_named_and_counted():
    """SPLITK_REDUCE on the transposed family: any schedule (BASIC included: a CTA per (tile,
    slice)), never SPLITS 1; the name says ``splitr``; with SPLITS 0 the slices fill one wave of
    resident CTAs, two at a full ring (one CTA per SM), four with an 8-stage ring (two per SM), as
    the kernel's host code counts them from the occupancy query; K is cut into multiples of TILE_K
    (else of 8): 4104 = 3 x 1368."""
    base = {**F.SM90T.defaults(), "TILE_M": "16", "TILE_N": "64", "CLUSTER_M": "1", "CLUSTER_N": "1",
            "SCHEDULE": "BASIC", "SCHEDULER": "SPLITK_REDUCE", "SPLITS": "0"}
    assert F.validate("sm90_cutlass_t", base) == []
    full = F.Config.of("sm90_cutlass_t", base)
    assert full.name == "sm90t-16x64x64-c1x1-ws-st0-splitr0-nopdl"
    g = full.geometry()
    assert g.separate_reduce and not g.persistent and g.ctas_per_sm == 1
    assert g.splits_for(Shape(16, 4096, 4096)) == 2
    assert g.splits_for(Shape(16, 6144, 4096)) == 1          # 96 tiles: one wave without slices
    assert g.splits_for(Shape(7, 4104, 4104)) == 1            # 65 tiles: 132 // 65 = 2 slices do not cut 4104
    ring8 = F.Config.of("sm90_cutlass_t", {**base, "STAGES": "8"}).geometry()
    assert ring8.ctas_per_sm == 2 and ring8.splits_for(Shape(16, 4096, 4096)) == 4
    assert ring8.splits_for(Shape(16, 3584, 4104)) == 3       # 4104 / 4 and / 2 are not multiples of 8
    assert any("SPLITS 1" in p for p in F.validate("sm90_cutlass_t", {**base, "SPLITS": "1"}))
    assert F.validate("sm90_cutlass_t", {**base, "SCHEDULE": "PINGPONG"}) == []
    src = F.render("sm90_cutlass_t", base)
    assert "splitk_reduce(" in src and "using ElementD = float;" in src and "// l2: part" not in src


def test_transposed_fused_sliced_tiles_are_basic_only_and_keep_the_second_kernel_as_fallback():
    """SPLITK_FUSED: the slices of SPLITK_REDUCE added inside the GEMM's launch, so BASIC only
    (the persistent schedules lower the producer's registers, and the fused reduce runs in every
    thread after the GEMM), never SPLITS 1, named ``splitf``, sliced like SPLITK_REDUCE; its render
    holds the fused kernel, the grid barrier and the reduce kernel it falls back to when the grid is
    larger than what the GPU holds at once."""
    base = {**F.SM90T.defaults(), "TILE_M": "16", "TILE_N": "64", "CLUSTER_M": "1", "CLUSTER_N": "1",
            "SCHEDULE": "BASIC", "SCHEDULER": "SPLITK_FUSED", "SPLITS": "0", "STAGES": "8"}
    assert F.validate("sm90_cutlass_t", base) == []
    cfg = F.Config.of("sm90_cutlass_t", base)
    assert cfg.name == "sm90t-16x64x64-c1x1-ws-st8-splitf0-nopdl"
    g = cfg.geometry()
    twin = F.Config.of("sm90_cutlass_t", {**base, "SCHEDULER": "SPLITK_REDUCE"}).geometry()
    assert g.separate_reduce and g.fused_reduce and not twin.fused_reduce
    for shape in (Shape(16, 4096, 4096), Shape(16, 3584, 4104), Shape(7, 4104, 4104)):
        assert g.splits_for(shape) == twin.splits_for(shape)
    assert any("BASIC" in p for p in F.validate("sm90_cutlass_t", {**base, "SCHEDULE": "PINGPONG"}))
    assert any("SPLITS 1" in p for p in F.validate("sm90_cutlass_t", {**base, "SPLITS": "1"}))
    src = F.render("sm90_cutlass_t", base)
    for part in ("gemm_fused_reduce<", "grid_barrier(", "splitk_reduce(", "cp.async.bulk.wait_group 0;",
                 "#define SCHEDULER SPLITK_FUSED"):
        assert part in src, part
    assert "// l2: part" not in src


def test_a_kernel_part_is_pasted_where_its_template_names_it(tmp_path, monkeypatch):
    """The reduce kernel both CUTLASS families use is one file: a template line ``// l2: part
    FILE`` becomes that part's code (what follows its ``// l2: part begins`` line), so a render is
    still one source; a part without that line is refused."""
    template = F._read_template("fam_sm90_cutlass.cu")
    assert "// l2: part" not in template and template.count("splitk_reduce(") == 1 and "launch_reduce(" in template
    raw = (F.KERNELS_DIR / "fam_sm90_cutlass.cu").read_text()
    assert raw.count("// l2: part part_splitk_reduce.cuh\n") == 1
    monkeypatch.setattr(F, "KERNELS_DIR", tmp_path)
    F._read_template.cache_clear()
    try:
        (tmp_path / "t.cu").write_text("a\n// l2: part part_x.cuh\nb\n")
        (tmp_path / "part_x.cuh").write_text("// what it needs\n// l2: part begins\nX\n")
        assert F._read_template("t.cu") == "a\nX\nb\n"
        (tmp_path / "part_x.cuh").write_text("X\n")
        F._read_template.cache_clear()
        with pytest.raises(F.FamilyError, match="lacks its '// l2: part begins' line"):
            F._read_template("t.cu")
    finally:
        F._read_template.cache_clear()


@pytest.mark.compile
@pytest.mark.slow
def test_transposed_family_builds_with_an_80_wide_wgmma(tmp_path, monkeypatch):
    """The template's default (80x64 tiles, ping-pong, clusters of 2x4): CuTe's extended WGMMA
    shapes are on, so the 80 rows of C are one 64x80x16 wgmma per k-step, not five 64x16x16; the
    ring takes twelve stages and the pipeline is not serialized."""
    monkeypatch.setenv("L2TUI_CACHE_DIR", str(tmp_path))
    res = _build(F.SM90T.template(), "sm_90a")
    assert res.ok, res.error_text()
    assert "C7510" not in res.log
    assert "MMA_64x80x16_F32F16F16_SS" in res.log and "MainloopSm90TmaGmmaWarpSpecializedILi12E" in res.log, \
        res.log[-2000:]


@pytest.mark.slow
@pytest.mark.parametrize("knobs,atom", [
    ({"TILE_M": "80", "TILE_N": "128", "SCHEDULE": "COOPERATIVE", "CLUSTER_M": "1", "CLUSTER_N": "1"},
     "MMA_64x80x16_F32F16F16_SS"),
    ({"ACC": "ACC_F16", "PDL": "1"}, "MMA_64x80x16_F16F16F16_SS"),
    ({"TILE_M": "160", "TILE_N": "128", "SCHEDULE": "PINGPONG", "CLUSTER_M": "1", "CLUSTER_N": "2"},
     "MMA_64x160x16_F32F16F16_SS"),
    ({"TILE_M": "16", "TILE_N": "256", "SCHEDULE": "COOPERATIVE", "CLUSTER_M": "1", "CLUSTER_N": "1",
      "SCHEDULER": "STREAMK"}, "MMA_64x16x16_F32F16F16_SS"),
    ({"TILE_M": "32", "TILE_N": "128", "SCHEDULE": "COOPERATIVE", "CLUSTER_M": "1", "CLUSTER_N": "1",
      "SCHEDULER": "SPLITK", "SPLITS": "0"}, "MMA_64x32x16_F32F16F16_SS"),
    ({"TILE_M": "16", "TILE_N": "64", "SCHEDULE": "BASIC", "CLUSTER_M": "1", "CLUSTER_N": "1",
      "SCHEDULER": "SPLITK_REDUCE", "SPLITS": "0", "PDL": "1"}, "MMA_64x16x16_F32F16F16_SS"),
    ({"TILE_M": "16", "TILE_N": "64", "SCHEDULE": "BASIC", "CLUSTER_M": "1", "CLUSTER_N": "1",
      "SCHEDULER": "SPLITK_REDUCE", "SPLITS": "0", "DTYPE": "DTYPE_BF16"}, "MMA_64x16x16_F32BF16BF16_SS"),
    ({"TILE_M": "16", "TILE_N": "64", "SCHEDULE": "BASIC", "CLUSTER_M": "1", "CLUSTER_N": "1", "STAGES": "8",
      "SCHEDULER": "SPLITK_FUSED", "SPLITS": "0", "PDL": "1"}, "MMA_64x16x16_F32F16F16_SS"),
    ({"TILE_M": "8", "TILE_N": "64", "SCHEDULE": "BASIC", "CLUSTER_M": "2", "CLUSTER_N": "1"},
     "MMA_64x8x16_F32F16F16_SS"),
], ids=["cooperative-80x128", "f16-pdl", "pingpong-160x128-pairs", "decode-16x256-streamk", "decode-32x128-splitk",
        "decode-16x64-sliced-pdl", "decode-16x64-sliced-bf16", "decode-16x64-fused-pdl", "decode-8x64-pairs"])
@pytest.mark.compile
def test_transposed_family_builds_its_other_schedules_and_accumulators(tmp_path, monkeypatch, knobs, atom):
    """Two schedules share two consumer warpgroups over CUTLASS's M (COOPERATIVE), the fp16
    accumulator and the PDL launch take other code paths, and the big entries' 160-row tiles hold
    160 fp32 accumulators a thread in ping-pong: each builds with the tile's own atom and without
    spilling (a spill would put local-memory traffic in the mainloop)."""
    monkeypatch.setenv("L2TUI_CACHE_DIR", str(tmp_path))
    src = F.render("sm90_cutlass_t", knobs)
    res = _build(src, "sm_90a")
    assert res.ok, res.error_text()
    assert "C7510" not in res.log and atom in res.log, res.log[-2000:]
    assert res.ptxas is not None and res.ptxas.spill_store_bytes == 0, res.log[-2000:]
    if knobs.get("SCHEDULER") == "SPLITK_REDUCE":
        assert "splitk_reduce" in res.log     # ptxas compiled the reduce kernel too
    if knobs.get("CLUSTER_M") == "2":
        assert "SM90_TMA_LOAD_MULTICAST" in res.log   # the pair loads each weight tile once for both
