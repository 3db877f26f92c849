"""tools/ncu_compare.py on the Nsight Compute profiles recorded on the H200 at 2c3cbdc
(tests/fixtures/ncu/ncu-2c3cbdc: our winner and cuBLASLt autotuned on one shape per size class)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import ncu_compare  # noqa: E402

RUN = ROOT / "tests" / "fixtures" / "ncu" / "ncu-2c3cbdc"


def test_rows_carry_what_explains_the_big_shape_gap():
    """8192x8192x4096: the same cycle count, but our CUTLASS tile order moves about twice the DRAM
    bytes of cuBLASLt's and runs at a lower SM clock (the 700 W cap): the table shows all three."""
    found = ncu_compare.collect(RUN)
    assert set(found) == {"128x128x16384", "1024x1024x8192", "8192x8192x4096"}
    ours = ncu_compare.kernel_rows(found["8192x8192x4096"]["l2"])
    lib = ncu_compare.kernel_rows(found["8192x8192x4096"]["cublaslt"])
    assert [r["kernel"] for r in ours] == ["CUTLASS 128x192x64 Pingpong Persistent 5 stages"]
    assert lib[0]["kernel"].startswith("nvjet_sm90_hsh_256x96")
    assert ours[0]["dram_mb"] > 2 * lib[0]["dram_mb"]
    assert ours[0]["sm_mhz"] < lib[0]["sm_mhz"]
    assert abs(ours[0]["cycles"] / lib[0]["cycles"] - 1) < 0.05
    assert ours[0]["tensor_pct"] > 90 and ours[0]["grid"] == "1x132x1"


def test_split_k_calls_list_both_kernels_and_the_total():
    found = ncu_compare.collect(RUN)
    lines = ncu_compare.table(found["128x128x16384"])
    body = [ln for ln in lines if ln.startswith("| l2 ")]
    assert len(body) == 2 and "l2::splitk_reduce" in body[1]
    total = next(ln for ln in lines if ln.startswith("Total per call"))
    want = sum(r["us"] for r in ncu_compare.kernel_rows(found["128x128x16384"]["l2"]))
    assert f"l2 {want:.1f} us" in total


def test_render_orders_shapes_by_size_and_matches_the_committed_summary(tmp_path):
    text = ncu_compare.render(RUN)
    assert text.index("## 128x128x16384") < text.index("## 1024x1024x8192") < text.index("## 8192x8192x4096")
    assert (RUN / "summary.md").read_text() == text + "\n"
    with pytest.raises(SystemExit, match="no ncu-"):
        ncu_compare.render(tmp_path)
    assert ncu_compare.main([str(tmp_path / "missing")]) == 2


def test_short_names():
    # CUTLASS's plain warp-specialized kernel runs a CTA per tile: BASIC, whatever scheduler tag it carries
    basic = ("void device_kernel<GemmUniversal<tuple<int, int, int, int>, CollectiveMma<MainloopSm90TmaGmmaWarpSpecialized"
             "<6, tuple<C<1>, C<1>, C<1>>, KernelTmaWarpSpecialized>, tuple<C<64>, C<64>, C<64>>, half_t>, "
             "PersistentScheduler>>(Params)")
    assert ncu_compare.short_name(basic) == "CUTLASS 64x64x64 BASIC 6 stages"
    pp = basic.replace("KernelTmaWarpSpecialized>", "KernelTmaWarpSpecializedPingpong>").replace("<6,", "<13,")
    assert ncu_compare.short_name(pp) == "CUTLASS 64x64x64 Pingpong Persistent 13 stages"
    assert ncu_compare.short_name("void l2::splitk_reduce(const float4 *, uint2 *, long long)") == "l2::splitk_reduce"
    assert ncu_compare.short_name("nvjet_sm90_hsh_128x64_64x8_1x2_h_bz_NNT") == "nvjet_sm90_hsh_128x64_64x8_1x2_h_bz_NNT"
    assert len(ncu_compare.short_name("void " + "x" * 200 + "(int)")) == 60
