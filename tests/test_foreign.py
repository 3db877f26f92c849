"""The foreign-ABI adapters (harness/foreign.py): the registry, the cuda-l2 layout's reading of
a file (entry point, which B it reads), and the shim it writes passing the source policy and
building with real nvcc. The kernels here are tiny ones written for these tests in that layout's
calling convention; no file of the CUDA-L2 release is used."""

from __future__ import annotations

import pytest

from harness import foreign
from harness.bench import read_sources
from harness.build import check_abi
from harness.errors import HarnessError, KernelSourceError
from harness.foreign_sets import ForeignSets
from harness.gemm_shape import Shape
from harness.source_policy import violations

SHAPE = Shape(64, 32, 16)

KERNEL_SECTION = """\
#include <cuda_fp16.h>

__global__ void tiny_gemm(const half* a, const half* bt, half* c, int m, int n, int k) {
  int row = blockIdx.y * blockDim.y + threadIdx.y;
  int col = blockIdx.x * blockDim.x + threadIdx.x;
  if (row >= m || col >= n) return;
  float acc = 0.f;
  for (int i = 0; i < k; ++i) acc += __half2float(a[row * k + i]) * __half2float(bt[col * k + i]);
  c[row * n + col] = __float2half(acc);
}

void launch_tiny(half* a, half* bt, half* c, int m, int n, int k) {
  dim3 block(16, 16);
  dim3 grid((n + 15) / 16, (m + 15) / 16);
  tiny_gemm<<<grid, block>>>(a, bt, c, m, n, k);
}
"""


def binding(read: str) -> str:
    """A binding section in the cuda-l2 convention whose launch reads the tensor ``read``."""
    return f"""
#include <torch/extension.h>
#include <torch/types.h>

void tiny_entry(torch::Tensor a, torch::Tensor b, torch::Tensor b_col_major, torch::Tensor c) {{
  if (a.options().dtype() != torch::kHalf) throw std::runtime_error("values must be half");
  const int M = a.size(0);
  const int K = a.size(1);
  const int N = b.size(1);
  launch_tiny(reinterpret_cast<half*>(a.data_ptr()), reinterpret_cast<half*>({read}.data_ptr()),
              reinterpret_cast<half*>(c.data_ptr()), M, N, K);
}}
"""


def test_unknown_abi_is_one_line() -> None:
    with pytest.raises(HarnessError) as e:
        foreign.foreign_abi("cutlass-3\nrm -rf")
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.startswith("unknown --abi") and "l2, cuda-l2" in msg


def test_one_abi_per_kernels_set() -> None:
    assert [a.name for a in foreign.abis_for(None, 2)] == ["l2", "l2"]
    assert [a.name for a in foreign.abis_for(["l2", "cuda-l2"], 2)] == ["l2", "cuda-l2"]
    with pytest.raises(HarnessError, match="one --abi per --kernels"):
        foreign.abis_for(["cuda-l2"], 2)


def test_cuda_l2_reads_the_column_major_copy() -> None:
    done = foreign.translate_cuda_l2(KERNEL_SECTION + binding("b_col_major"), SHAPE, "64_32_16.cu")
    assert done.b_layout == "col"
    assert check_abi(done.source, "fp16") == "fp16"
    assert "#include <torch/" not in done.source
    assert "if (M != 64 || N != 32 || K != 16) return 1;" in done.source
    assert "torch::Tensor tbt{b, N, K};" in done.source and "torch::Tensor tb{nullptr, K, N};" in done.source
    assert KERNEL_SECTION in done.source     # the file's own text is kept as written


def test_cuda_l2_reads_the_row_major_b() -> None:
    done = foreign.translate_cuda_l2(KERNEL_SECTION + binding("b"), SHAPE, "64_32_16.cu")
    assert done.b_layout == "row"
    assert "torch::Tensor tb{b, K, N};" in done.source and "torch::Tensor tbt{nullptr, N, K};" in done.source


def test_an_entry_point_defined_in_each_branch_of_an_if_is_one_entry_point() -> None:
    stub = binding("b_col_major").split("{", 1)[0] + "{\n  throw std::runtime_error(\"needs sm_90\");\n}\n"
    text = (KERNEL_SECTION + "#if defined(CUTLASS_ARCH_MMA_SM90_SUPPORTED)\n" + binding("b_col_major")
            + "#else\n" + stub.replace("#include <torch/extension.h>\n", "") + "#endif\n")
    done = foreign.translate_cuda_l2(text, SHAPE, "64_32_16.cu")
    assert done.b_layout == "col" and done.source.count("tiny_entry(ta, tb, tbt, tc);") == 1


def test_a_mention_in_a_comment_is_not_a_read() -> None:
    text = KERNEL_SECTION + binding("b_col_major").replace("{\n", "{\n  // b.data_ptr() is never read\n", 1)
    assert foreign.translate_cuda_l2(text, SHAPE, "x.cu").b_layout == "col"


@pytest.mark.parametrize("text, why", [
    (KERNEL_SECTION, "no #include <torch/...> line"),
    (KERNEL_SECTION + binding("b_col_major").replace("b_col_major.data_ptr()", "b.data_ptr()) + (0 * "
                                                     "(long)b_col_major.data_ptr()"), "reads both B tensors"),
    (KERNEL_SECTION + binding("a"), "reads neither B tensor"),
    (KERNEL_SECTION + binding("b") + binding("b").replace("tiny_entry", "other_entry"), "found 2"),
])
def test_cuda_l2_refuses_what_it_cannot_read(text: str, why: str) -> None:
    with pytest.raises(KernelSourceError) as e:
        foreign.translate_cuda_l2(text, SHAPE, "64_32_16.cu")
    assert why in str(e.value) and str(e.value).startswith("64_32_16.cu: ")
    assert "\n" not in str(e.value)


def test_an_oversized_file_is_refused() -> None:
    with pytest.raises(KernelSourceError, match="not a kernel file"):
        foreign.translate_cuda_l2("x" * (foreign.MAX_FOREIGN_BYTES + 1), SHAPE, "big.cu")


def test_glue_passes_the_policy_and_the_policy_still_judges_the_file() -> None:
    good = foreign.translate_cuda_l2(KERNEL_SECTION + binding("b_col_major"), SHAPE, "x.cu")
    assert violations(good.source) == []
    bad_kernel = KERNEL_SECTION.replace("tiny_gemm<<<grid, block>>>(a, bt, c, m, n, k);",
                                        "tiny_gemm<<<grid, block>>>(a, bt, c, m, n, k);\n  cudaDeviceSynchronize();")
    bad = foreign.translate_cuda_l2(bad_kernel + binding("b_col_major"), SHAPE, "x.cu")
    assert any("host-sync" in msg for _, _, msg in violations(bad.source))


def test_foreign_sets_check_the_accumulator_and_record_layouts(tmp_path) -> None:   # type: ignore[no-untyped-def]
    d = tmp_path / "theirs"
    d.mkdir()
    (d / "64_32_16.cu").write_text(KERNEL_SECTION + binding("b_col_major"))
    with pytest.raises(HarnessError, match="run with --acc f32"):
        ForeignSets([("cuda_l2", str(d))], ["cuda-l2"], "f16")
    sets = ForeignSets([("ours", str(tmp_path)), ("cuda_l2", str(d))], ["l2", "cuda-l2"], "f32")
    srcs = sets.read_sources([(SHAPE, "cuda_l2", d / "64_32_16.cu")], "fp16", read_sources)
    assert check_abi(srcs[0], "fp16") == "fp16"
    assert sets.meta() == {"abis": {"ours": "l2", "cuda_l2": "cuda-l2"}, "b_layouts": {"64x32x16:cuda_l2": "col"}}
    assert ForeignSets([("ours", str(tmp_path))], None, "f32").meta() == {}


@pytest.mark.compile
def test_the_shim_builds_with_nvcc_and_exports_our_entry(tmp_path) -> None:   # type: ignore[no-untyped-def]
    import ctypes

    from harness.build import build

    done = foreign.translate_cuda_l2(KERNEL_SECTION + binding("b_col_major"), SHAPE, "64_32_16.cu")
    br = build(done.source, arch="sm_90a", flags=list(foreign.ABIS["cuda-l2"].flags), name="foreign")
    assert br.ok, br.log[-2000:]
    assert br.ptxas is not None and any("tiny_gemm" in kr.name for kr in br.ptxas.kernels)
    lib = ctypes.CDLL(str(br.so_path))
    assert hasattr(lib, "l2_hgemm")


def test_a_file_the_adapter_cannot_read_is_charged_alone(tmp_path) -> None:   # type: ignore[no-untyped-def]
    d = tmp_path / "theirs"
    d.mkdir()
    (d / "64_32_16.cu").write_text(KERNEL_SECTION)     # no binding section
    sets = ForeignSets([("cuda_l2", str(d))], ["cuda-l2"], "f32")
    assert sets.read_sources([(SHAPE, "cuda_l2", d / "64_32_16.cu")], "fp16", read_sources) == [""]
    so_for, fail = sets.build_sets([(SHAPE, "cuda_l2", d / "64_32_16.cu")], [""], "sm_90a")
    assert so_for == {} and "no #include <torch/...> line" in fail[(SHAPE, "cuda_l2")]
