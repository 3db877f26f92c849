"""GPU (``pytest -m gpu tests/test_bf16_gpu.py``): bf16 through the worker for real.

Every bf16 catalog configuration passes every check on shapes that are not multiples of its tile;
the bf16 baselines (cuBLAS NN and TN, cuBLASLt heuristic and autotuned, torch.matmul) pass every
check in bf16; the two bad bf16 kernels are not accepted. The catalog is built once, in parallel,
before anything is timed, so the checks themselves take a few minutes on an H200 (sm_90 runs
every family, sm_80/86/89 the mma.sync ones).
"""

from __future__ import annotations

import pytest

from harness import families as F
from harness.shapes import Shape
from harness.testkernels import source as kernel_source

pytestmark = pytest.mark.gpu

#: not multiples of any tile (N and K multiples of 8, as every family needs); the last one is a
#: decode shape, the only kind the skinny family serves
SHAPES = (Shape(200, 136, 264), Shape(1030, 2056, 776), Shape(40, 4104, 1032))
BASELINES = ("cublas", "cublaslt_heuristic", "cublaslt_autotune", "torch")


@pytest.fixture(scope="module")
def arch() -> str:
    from harness.gpuinfo import detect_arch

    found = detect_arch()
    if found is None:
        pytest.skip("no GPU")
    return found


@pytest.fixture(scope="module")
def catalog(arch: str) -> list[F.Config]:
    """The bf16 catalog for this GPU, built in parallel first (the evaluations then hit the cache)."""
    from harness.build import build_many

    cfgs = F.catalog("f32", arch, dtype="bf16")
    assert cfgs, f"no bf16 configuration for {arch}"
    results = build_many([c.source() for c in cfgs], arch=arch)
    failed = [f"{c.name}: {r.errors[0] if r is not None and r.errors else 'no result'}"
              for c, r in zip(cfgs, results) if r is None or not r.ok]
    assert not failed, "\n".join(failed)
    return cfgs


@pytest.fixture(scope="module")
def ev(arch: str):
    from harness.evaluate import Evaluator

    with Evaluator(arch=arch, baselines=(), dtype="bf16") as e:
        yield e


def test_every_bf16_catalog_configuration_passes_every_check(ev, arch, catalog):
    failures, idle = [], []
    for cfg in catalog:
        shapes = [shape for shape in SHAPES if F.applicable(cfg.family, shape, arch)]
        if not shapes:
            idle.append(cfg.name)
        for shape in shapes:
            e = ev.evaluate(cfg.source(), shape, "f32", time_baselines=False)
            if e.status != "ok":
                failures.append(f"{cfg.name} {shape}: {e.status} {e.message}")
            else:
                assert e.extra["dtype"] == "bf16" and e.times_ms["candidate"] > 0
                assert e.check["rel_err"] <= e.check["bound"]
    assert not idle, f"configurations no shape of SHAPES applies to: {idle}"
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("shape", [Shape(256, 200, 1024), Shape(1030, 2056, 776)])
def test_the_bf16_baselines_pass_every_check(ev, shape):
    res = ev.run_shape(shape, "f32", [], list(BASELINES))
    assert res["dtype"] == "bf16"
    torch_absent = res["status"].get("torch") == "absent"
    for name in BASELINES:
        if name == "torch" and torch_absent:
            continue
        assert res["status"][name] == "ok", (name, res["checks"].get(name), res.get("errors"))
        assert res["times_ms"][name] > 0
        chk = res["checks"][name]
        assert chk["ok"] and chk["rel_err"] <= chk["bound"], (name, chk)
    # the bound is twice cuBLAS's own bf16 error, which is bf16's rounding (~2^-9 relative), not fp16's
    assert all(1e-4 < e < 1e-2 for e in res["ref_err"]["e32"]), res["ref_err"]


def test_the_bf16_baselines_pass_the_full_checks_too(arch):
    from harness.evaluate import Evaluator

    with Evaluator(arch=arch, baselines=BASELINES, dtype="bf16", checks="full") as full:
        res = full.run_shape(Shape(256, 200, 1024), "f32", [], list(BASELINES))
    for name in BASELINES:
        if res["status"].get(name) == "absent":
            assert name == "torch", res["absent"]
            continue
        assert res["status"][name] == "ok", (name, res["checks"].get(name))


def test_bf16_accumulation_is_rejected_by_the_accuracy_check(ev):
    r = ev.evaluate(kernel_source("testbad_bf16acc"), Shape(256, 200, 1024))
    assert r.status == "wrong", r.message
    assert r.check["failed"] == "accuracy", r.check
    assert r.check["checks"]["exact"]["ok"]          # 0/1 sums <= 256 are exact in bf16
    assert r.check["rel_err"] > r.check["bound"]
    assert "candidate" not in r.times_ms


def test_truncation_is_rejected_by_the_accuracy_check(ev):
    """A kernel that truncates its f32 result to bf16 keeps the 0/1 check's exact integers and an
    error about twice round-to-nearest's (near the bound, twice cuBLAS's); its error's mean points
    toward zero, which the accuracy check measures against cuBLAS's (harness.checks.rounding_bias)."""
    r = ev.evaluate(kernel_source("testbad_bf16trunc"), Shape(256, 200, 1024))
    assert r.status == "wrong", r.message
    assert r.check["failed"] == "accuracy", r.check
    assert r.check["checks"]["exact"]["ok"], r.check
    assert "not rounded to nearest" in r.check["checks"]["accuracy"]["detail"] or r.check["rel_err"] > r.check["bound"]


def test_an_fp16_library_in_a_bf16_request_is_unsupported_and_never_called(ev):
    from harness.build import build

    res = build(kernel_source("testgood_simple"), arch=ev.arch, dtype="fp16")
    assert res.ok, res.errors
    out = ev.run_shape(Shape(256, 200, 1024), "f32", [{"label": "fp16", "so_path": str(res.so_path)}], ["cublas"])
    assert out["status"]["fp16"] == "unsupported" and out["times_ms"]["fp16"] is None
    assert out["checks"]["fp16"]["detail"].startswith("the library exports l2_hgemm (fp16), not l2_hgemm_bf16")
    assert out["status"]["cublas"] == "ok"
