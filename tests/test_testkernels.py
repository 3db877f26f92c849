"""The test kernels reach the harness as the very text the GPU tests last ran.

Their shared naive GEMM lives once, in ``harness/kernels/test_gemm.cuh``, and
``harness.testkernels.source`` pastes it in.  The digests below are of the composed text, byte for
byte what the GPU tests ran.  A byte changed in the header or in a kernel changes what runs
on the GPU: the digest fails here until the GPU tests have been run on the new text.
"""

from __future__ import annotations

import hashlib

import pytest

from harness import source_policy as sp
from harness import testkernels as tk
from harness.paths import KERNELS_DIR

#: sha256 of each composed test kernel (UTF-8), as last run by the GPU tests
VERIFIED_ON_GPU = {
    "testbad_delta": "d06aa2033ed56e5d31bcabc4c455948c98363495036c6ace0f21675592b11fbd",
    "testbad_f16timed": "582c2494e1af8895f2bc462d091d637013f7ff664a60c37bb226e6e5765908b2",
    "testbad_crash": "0c7c84708be6fb3a23b4fec1da09ace39a55c98001ea97ea397458851c9596a6",
    "testbad_f16acc": "dd4a8ec7c15ec627fd86d0cae2e822a71b0d73d8864b79924d823ae86e194de8",
    "testbad_hang": "c2e70d0f128faa49f293f06803ad15071fd50607dca8b5a4a70fff96b4c5dc44",
    "testbad_marker": "e8374b583d6b16d503ad81a45a7ba45b554338844049e4f4cdb0ae99a8155e79",
    "testbad_memo": "bd077ef698bb49dae76d947135231fbaa06101a1de3b836c5c65cbffd9860ab4",
    "testbad_nanonly": "1f78fb1f1759fd360a8d9be793df7d1d0115358c9db80d3bbb19ff7850eac856",
    "testbad_oob": "4a7b181bb452830d431630d56389e23acfa42d737b2863cd06b42b3402cdc038",
    "testbad_skiplastrow": "65c9207dc05a3e81c9fa400a6f2d9461a62b78dbc2323ba95a991779265b8a0e",
    "testbad_stale": "9845c9c7432e461bad23545a134c150ab2919b1cf805ecdb7caffa4b59c05d56",
    "testbad_timegate": "62a67434af7da6aaf65297aeecb8660e6f394d0c446f492d5557590eaa6656d7",
    "testgood_simple": "a1e203acaf4fc4929d5964b5dbe18fb9271e9ae99bd9d17f38a7c1b140ae656a",
    "testbad_hog": "94d97e25fd60727eeff107ba9b0436293b3d29053617ff9003bf61c9ce025f32",
    # self-contained (the loop reads it by path as its fallback seed): comes back as it is
    "reference_naive": "eeebd8e281b22aa0484f4761e1ec0ea0e6355ed1a98381e324a38447374a0813",
    "testbad_bf16acc": "9c9693457cb59caf2bd5468912acce0c04e5c5ec1e16d9a1cd1c36a25f019d2b",
    "testbad_bf16trunc": "25bde0452582c323fc9b76bd277d574749f1f809a6bd80193f2f3f5a78ff5f71",
}
#: sha256 of each composed test kernel not yet run by the GPU tests (written while no GPU was at
#: hand): it moves to VERIFIED_ON_GPU once its GPU test has passed on that text
NOT_YET_ON_GPU: dict[str, str] = {}
#: the parts of the shared header each test kernel names
PARTS_USED = {
    "testbad_bf16acc": set(),        # bf16 tiles and a bf16 hfma accumulator, its own launch
    "testbad_bf16trunc": set(),      # f32 accumulation, truncated store, its own launch
    "testbad_f16timed": {"loop"},     # the fp32 path; its fp16 path and the look at C are its own
    "testbad_delta": {"loop"},
    "testbad_hog": {"head"},
    "testbad_crash": {"head", "launch"},
    "testbad_f16acc": {"launch"},      # fp16 tiles and an hfma accumulator: its own kernel
    "testbad_hang": {"head", "launch"},
    "testbad_marker": {"head"},
    "testbad_memo": {"loop"},
    "testbad_nanonly": {"loop", "launch"},
    "testbad_oob": {"head", "launch"},
    "testbad_skiplastrow": {"head", "launch"},
    "testbad_stale": {"head"},
    "testbad_timegate": {"loop"},
    "testgood_simple": {"head", "launch"},
    "reference_naive": set(),
}


def _test_kernel_files():
    return sorted(p.stem for p in KERNELS_DIR.glob("test*.cu"))


ALL_DIGESTS = {**VERIFIED_ON_GPU, **NOT_YET_ON_GPU}


def test_every_test_kernel_has_a_digest():
    assert not set(VERIFIED_ON_GPU) & set(NOT_YET_ON_GPU)
    assert set(_test_kernel_files()) | {"reference_naive"} == set(ALL_DIGESTS) == set(PARTS_USED)


@pytest.mark.parametrize("name", sorted(ALL_DIGESTS))
def test_composed_source_is_the_text_verified_on_the_gpu(name):
    assert hashlib.sha256(tk.source(name).encode("utf-8")).hexdigest() == ALL_DIGESTS[name]
    assert tk.source(f"{name}.cu") == tk.source(name)


@pytest.mark.parametrize("name", sorted(ALL_DIGESTS))
def test_each_kernel_names_its_parts_and_holds_no_copy_of_one(name):
    raw = (KERNELS_DIR / f"{name}.cu").read_text(encoding="utf-8")
    used = {line.removeprefix(tk.MARKER).strip() for line in raw.splitlines() if line.startswith(tk.MARKER)}
    assert used == PARTS_USED[name]
    for part, text in tk.parts().items():
        assert tk.compose(text) not in raw, f"{name}.cu holds a copy of part {part!r}: name it instead"
    assert tk.MARKER not in tk.source(name)


def test_composed_kernels_are_one_self_contained_candidate_each():
    for name in ALL_DIGESTS:
        text = tk.source(name)
        assert '#include "' not in text and sp.violations(text) == [], name
        entry = "l2_hgemm_bf16" if "bf16" in name else "l2_hgemm"
        assert f'extern "C" int {entry}(' in text, name


def test_the_header_is_not_a_candidate_and_every_part_is_used():
    assert tk.HEADER.parent == KERNELS_DIR and tk.HEADER.suffix == ".cuh"   # a *.cu glob never picks it up
    used = set().union(*PARTS_USED.values()) | {"loop"}                    # head names loop
    assert set(tk.parts()) == used


def test_an_unknown_or_self_naming_part_is_refused():
    with pytest.raises(ValueError, match="no part 'nope'"):
        tk.compose("// l2: test gemm nope\n")
    with pytest.raises(ValueError, match="names itself"):
        tk.compose("// l2: test gemm a\n", {"a": "x\n// l2: test gemm a\n"})
    with pytest.raises(ValueError, match="not on a line of its own"):
        tk.compose("  // l2: test gemm head\n")
