"""The export's C++, CMake and shell text comes from package templates, rendered exactly.

The digests below are of the files a fixed pair of manifests renders to; they were taken from the
renderer whose output the export build tests (real nvcc, cuBLASLt) and the GPU runtime tests
exercised.  A change to a template or to the renderer that alters one byte of the output fails
here, so it has to be a deliberate change (update the digest after re-running those tests).
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest

from l2tui.export import cdispatch
from l2tui.export.values import gencode

#: one export with two kernels (one with flags, one search path to drop, one library), a shape the
#: library won, listed out of order; and an export with no shapes at all
MANIFESTS = {
    "full": {"arch": "sm_90a", "kernels": [
        {"shape": [4096, 4096, 4096], "name": "4096_4096_4096", "symbol": "l2_hgemm_4096_4096_4096",
         "file": "kernels/4096_4096_4096.cu", "sha256": "ab" * 32,
         "flags": ["-DTILE_M=128", "-O3", "-Xptxas=-v", "-I/home/someone/cutlass/include", "-lcublas",
                   "--use_fast_math"],
         "fallback": False},
        {"shape": [128, 256, 64], "name": "128_256_64", "symbol": "l2_hgemm_128_256_64",
         "file": "kernels/128_256_64.cu", "sha256": "cd" * 32, "flags": [], "fallback": False,
         "fallback_pin": {"library": "cublas", "measured": "cublas"}},
        {"shape": [512, 512, 8192], "name": "512_512_8192", "symbol": "l2_hgemm_512_512_8192",
         "file": "kernels/512_512_8192.cu", "sha256": "ef" * 32, "flags": [], "fallback": True,
         "fallback_pin": {"library": "cublaslt", "measured": "cublaslt_autotune", "index": 3, "count": 17,
                          "requested": 100, "cublaslt_version": 130200}},
    ]},
    "empty": {"arch": "sm_80", "kernels": []},
}

SAME_IN_BOTH = {
    "CMakeLists.txt": "23724c41f60eb151d23f27b78103ffb540e264353a7117205552e9f917a74a1e",
    "src/example.cpp": "7aa20f8b7f6026c09588bc70a02ff12b33cc773f071bc9dabcbb33a51c3908d1",
    "src/l2hgemm.map": "7eb99fa6a6a1a583eefd6ebbc5715ef97eb37df15d27466d69b3815f7f2cd390",
}
DIGESTS = {
    "full": {
        **SAME_IN_BOTH,
        "build.sh": "42b6a7c3bec04cbc4713564a7e79946e6d4f89e11b144c6186c7dfdf3b2fe8ee",
        "include/l2hgemm.h": "9765d59b9673736fe8a6b1b7acd399245a7add10075d98bd532ee9c7ea4f98e2",
        "l2hgemm.cmake": "112b1931741eb87389bd72b59e29ec8658872d475a473f26f75a70d56264e76f",
        "src/l2hgemm_dispatch.cu": "b3a48ab18fa3218c787d65a1947246a44d7e96fb5087a887639863681b3ebe45",
    },
    "empty": {
        **SAME_IN_BOTH,
        "build.sh": "a36619ba95211d2ddbea68a2be288e42a4b9688551cb4927e7ea6fd6972cada0",
        "include/l2hgemm.h": "1eb991372c4a8ebf38bd1601d7b8cb85f2a985c25e36bb9942733ed1065a15f3",
        "l2hgemm.cmake": "234f6fede2a7e7ff7e2fa7ba560c67a32c1a360170e826dee2e224591f99591c",
        "src/l2hgemm_dispatch.cu": "8aa507b0db91e39b2b2d17cfce85c899a996d5d8c788e0dff717978831c5f680",
    },
}
FALLBACK_LIBRARY_DIGEST = "baad871e1a52dad9dd65be36e0db8615579787cf34241c41f7cfda1b98323d29"


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.mark.parametrize("label", sorted(MANIFESTS))
def test_rendered_export_files_are_byte_identical(tmp_path, label):
    man = MANIFESTS[label]
    files = cdispatch.write_sources(tmp_path, man, gencode(man["arch"]))
    assert sorted(files) == sorted(DIGESTS[label])
    got = {f: _sha((tmp_path / f).read_bytes()) for f in files}
    assert got == DIGESTS[label]


def test_fallback_library_is_byte_identical():
    assert _sha(cdispatch.render_fallback_library().encode()) == FALLBACK_LIBRARY_DIGEST


def test_the_dispatcher_holds_the_table_it_was_given(tmp_path):
    # what the digests stand for, said once in words: sorted rows, the library's shape as nullptr
    src = cdispatch.render_dispatch(MANIFESTS["full"])
    assert cdispatch.parse_table(src) == [(128, 256, 64, "l2_hgemm_128_256_64"), (512, 512, 8192, None),
                                          (4096, 4096, 4096, "l2_hgemm_4096_4096_4096")]
    # the pins as l2fb::Pin initialisers: kind (1 cuBLASLt index, 2 cublasGemmEx), index, count,
    # requested, version; a shape without one is all zeros (the fallback tunes it)
    assert cdispatch.parse_pins(src) == {(128, 256, 64): (2, 0, 0, 0, 0), (512, 512, 8192): (1, 3, 17, 100, 130200),
                                         (4096, 4096, 4096): (0, 0, 0, 0, 0)}
    assert not re.search(r"@[A-Z_]+@", src)


def test_values_go_in_as_they_are_and_the_renderer_refuses_drift():
    # one pass: a value that looks like a placeholder (a note taken from a manifest) stays text
    man = {"arch": "sm_90a", "kernels": [dict(MANIFESTS["full"]["kernels"][1], file="kernels/@COUNT@.cu")]}
    assert "// kernels/@COUNT@.cu sha256=" in cdispatch.render_dispatch(man)
    assert cdispatch._fill("a\n@X@\nb @Y@\n", X="", Y="1") == "a\nb 1\n"   # an empty line value: no line
    with pytest.raises(AssertionError, match="unfilled placeholder @Y@"):
        cdispatch._fill("@X@ @Y@", X="1")
    with pytest.raises(AssertionError, match="no placeholder for \\['Z'\\]"):
        cdispatch._fill("@X@", X="1", Z="2")


def test_every_template_is_used_and_shipped_next_to_the_module():
    used = {"l2hgemm.h.in", "l2hgemm_dispatch.cu.in", "fallback.cu", "fallback_library.cu.in", "l2hgemm.map",
            "l2hgemm.cmake.in", "example_CMakeLists.txt", "example.cpp", "build.sh.in", "build_kernel.sh.in",
            "bench_forwarder.cu.in"}
    assert cdispatch.TEMPLATES_DIR == Path(cdispatch.__file__).resolve().parent / "templates"
    assert {p.name for p in cdispatch.TEMPLATES_DIR.iterdir()} == used
    src = Path(cdispatch.__file__).read_text()
    assert all(f'"{name}"' in src for name in used)


def test_the_bench_forwarder_names_its_library_as_an_escaped_c_string():
    from harness.build import check_abi

    src = cdispatch.render_bench_forwarder(Path("/opt/ex port/lib/libl2hgemm.so"))
    check_abi(src)
    assert 'dlopen("/opt/ex port/lib/libl2hgemm.so", RTLD_NOW | RTLD_LOCAL)' in src
    odd = cdispatch.render_bench_forwarder(Path('/tmp/a"b\\c/lib.so'))
    assert 'dlopen("/tmp/a\\"b\\\\c/lib.so"' in odd
    with pytest.raises(ValueError, match="control character"):
        cdispatch.render_bench_forwarder(Path("/tmp/a\nb/lib.so"))
