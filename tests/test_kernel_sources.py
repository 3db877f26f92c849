"""The checks' CUDA kernels live in ``harness/kernels/checks/`` and load as the exact text cupy compiles.

The digests are of the kernel text last verified on an H200 (the per-call separator, the fresh
graph's perturb and verify kernels, as ``harness.checks`` held them when the GPU tests and the
benches ran).  A byte changed in a file changes what runs on the GPU: the digest fails here until
the GPU tests have been run again on the new text and the digest updated with them.
"""

from __future__ import annotations

import hashlib
import subprocess

import pytest

from harness import checks as ck
from harness.paths import KERNELS_DIR

#: sha256 of each loaded source (UTF-8), as last verified on the GPU
VERIFIED_ON_GPU = {
    "FLIP_SOURCE": "92046c84796ffc9ce39183be0947c8cdc6d2dd5dcd3f8a19fbe935e39b36909e",
    "PERTURB_SOURCE": "a89a6146a8ac17fd732b2028fa580629cc769f88d42cd82bb594cf807f30aa6d",
    # with their bf16 instantiations (l2_gemv_bf16, l2_verify_rows_bf16, l2_separate_bf16)
    "VERIFY_SOURCE": "f36db83b29f736b7324ec021a9d26654919f1428dd661c6a0dd62f9bb0445e0f",
    "SEPARATE_SOURCE": "80b73751aada591905a076b2a7a61ba2f224aa6c2d142b92c6e988151382baa8",
}
#: sha256 of each loaded source not yet run on a GPU (written while none was at hand): it moves to
#: VERIFIED_ON_GPU once the GPU tests have passed on that text
NOT_YET_ON_GPU: dict[str, str] = {}
ALL_DIGESTS = {**VERIFIED_ON_GPU, **NOT_YET_ON_GPU}
#: the functions each module must define (what Perturber, SignFlipper, Verifier and Separator look up)
ENTRY_POINTS = {
    "FLIP_SOURCE": ["l2_flip_signs"],
    "PERTURB_SOURCE": ["l2_perturb"],
    "VERIFY_SOURCE": ["l2_gemv", "l2_verify_rows", "l2_gemv_bf16", "l2_verify_rows_bf16"],
    "SEPARATE_SOURCE": ["l2_gemv", "l2_verify_rows", "l2_separate", "l2_gemv_bf16", "l2_verify_rows_bf16",
                        "l2_separate_bf16"],
}


def test_no_source_is_both_verified_and_pending():
    assert not set(VERIFIED_ON_GPU) & set(NOT_YET_ON_GPU)


@pytest.mark.parametrize("name", sorted(ALL_DIGESTS))
def test_loaded_source_is_the_text_verified_on_the_gpu(name):
    assert hashlib.sha256(getattr(ck, name).encode("utf-8")).hexdigest() == ALL_DIGESTS[name]


def test_sources_come_from_the_package_files():
    d = ck.CHECK_KERNELS_DIR
    assert d == KERNELS_DIR / "checks"
    assert ck.PERTURB_SOURCE == (d / "perturb.cu").read_text()
    assert ck.VERIFY_SOURCE == (d / "verify.cu").read_text()
    assert ck.FLIP_SOURCE == (d / "flip.cu").read_text()
    assert ck.SEPARATE_SOURCE == ck.VERIFY_SOURCE + (d / "separate.cu").read_text()


def test_check_kernels_are_not_candidates_or_test_kernels():
    # the test kernels and seeds are globbed from KERNELS_DIR itself (not recursively); the check
    # kernels do not speak the l2_hgemm ABI and must never be picked up as one
    assert not any(p.name.startswith(("perturb", "verify", "separate", "flip")) for p in KERNELS_DIR.glob("*.cu"))
    assert all("l2_hgemm" not in src for src in (ck.PERTURB_SOURCE, ck.SEPARATE_SOURCE, ck.FLIP_SOURCE))


@pytest.mark.compile
@pytest.mark.parametrize("name", sorted(ALL_DIGESTS))
def test_source_compiles_with_nvcc_as_given(tmp_path, name):
    """nvcc -c for sm_90a on the very string cupy hands NVRTC (no include path, nothing prepended)."""
    from harness.build import nvcc_path

    src = tmp_path / "k.cu"
    src.write_bytes(getattr(ck, name).encode("utf-8"))
    proc = subprocess.run([nvcc_path(), "-c", "-arch=sm_90a", str(src), "-o", str(tmp_path / "k.o")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    nm = subprocess.run(["nm", "--defined-only", str(tmp_path / "k.o")], capture_output=True, text=True, timeout=60)
    assert nm.returncode == 0, nm.stderr
    for fn in ENTRY_POINTS[name]:
        assert fn in nm.stdout, f"{name} defines no {fn}"
