"""The debugger guard and the structure key used by delayed profiling."""

from pathlib import Path

from l2tui.agent.structure import feature_counts, guard_debug_patch, knob_values, structure_key

SEED = (Path(__file__).parent / "fixtures" / "recorded" / "seed_tiled.cu").read_text()


def test_seed_features_are_seen():
    f = feature_counts(SEED)
    assert f["shared-memory tiling"] == 2 and f["#pragma unroll"] >= 5
    assert knob_values(SEED)["BM"] == 64


def test_small_fix_is_allowed():
    new = SEED.replace("  float acc[TM][TN];", "  const float alpha = 1.0f;\n  float acc[TM][TN];")
    assert guard_debug_patch(SEED, new) is None


def test_tile_shrink_is_rejected():
    why = guard_debug_patch(SEED, SEED.replace("#define BM 64", "#define BM 16"))
    assert why and "shrinks a tile size (BM 64 -> 16)" in why


def test_stage_reduction_and_feature_removal_are_rejected():
    src = "#define STAGES 4\n__shared__ float s[4];\ncp.async.ca.shared.global x;\n#pragma unroll\n"
    assert "pipeline stages" in guard_debug_patch(src, src.replace("STAGES 4", "STAGES 2"))
    assert "removes cp.async" in guard_debug_patch(src, src.replace("cp.async.ca.shared.global x;", "x;"))
    assert "pragma unroll" in guard_debug_patch(src, src.replace("#pragma unroll\n", ""))
    wg = "wgmma.mma_async.sync x;\n"
    assert "removes wgmma" in guard_debug_patch(wg, "mul x;\n")
    cute = "using T = Shape<_128,_128,_64>;\n"
    assert "CuTe tile" in guard_debug_patch(cute, cute.replace("_128,_128", "_64,_64"))


def test_large_patch_is_rejected():
    new = SEED + "\n".join(f"// filler {i}" for i in range(60)) + "\n"
    why = guard_debug_patch(SEED, new, max_lines=40)
    assert why and "limit 40" in why


def test_structure_key_ignores_numbers_and_comments_only():
    knobbed = SEED.replace("#define BK 16", "#define BK 32").replace("// l2tui test seed", "// changed comment")
    assert structure_key(knobbed) == structure_key(SEED)
    restructured = SEED.replace("__syncthreads();\n#pragma unroll", "__syncthreads();\n__syncwarp();\n#pragma unroll", 1)
    assert structure_key(restructured) != structure_key(SEED)
