"""GPU: every seed family passes every harness check on a spread of shapes (issue 5).

Run with ``pytest -m gpu tests/test_families_gpu.py`` on a GPU box (sm_90 runs all three
families, sm_80/86/89 the two mma.sync ones).  Shapes include non-multiples of every tile.
"""

from __future__ import annotations

import pytest

from harness import families as F
from harness.shapes import Shape

pytestmark = pytest.mark.gpu

SHAPES = [Shape(64, 64, 64), Shape(200, 136, 264), Shape(1030, 2056, 776), Shape(64, 128, 16384),
          Shape(777, 4104, 128), Shape(2048, 2048, 2048), Shape(4096, 4096, 8)]


@pytest.fixture(scope="module")
def evaluator():
    ev_mod = pytest.importorskip("harness.evaluate")
    from harness.gpuinfo import detect_arch

    arch = detect_arch()
    if arch is None:
        pytest.skip("no GPU")
    with ev_mod.Evaluator(arch=arch, baselines=()) as ev:
        yield ev, arch


def representative(acc: str, arch: str) -> list[F.Config]:
    seen, out = set(), []
    for c in F.catalog(acc, arch):
        if c.family not in seen:
            seen.add(c.family)
            out.append(c)
    # plus the split-K / stream-K variants, whose reductions are the riskiest code
    out += [c for c in F.catalog(acc, arch) if (c.knob_dict.get("SCHEDULER") == "STREAMK"
                                                  or c.knob_dict.get("SPLIT_K") == "0")][:2]
    return out


@pytest.mark.parametrize("acc", ["f32", "f16"])
def test_every_family_passes_every_check(evaluator, acc):
    ev, arch = evaluator
    failures = []
    for cfg in representative(acc, arch):
        for shape in SHAPES:
            e = ev.evaluate(cfg.source(), shape, acc, time_baselines=False)
            if e.status != "ok":
                failures.append(f"{cfg.name} {shape}: {e.status} {e.message}")
    assert not failures, "\n".join(failures)


def test_unaligned_shapes_are_refused_not_miscomputed(evaluator):
    ev, arch = evaluator
    for cfg in representative("f32", arch)[:3]:
        e = ev.evaluate(cfg.source(), Shape(100, 100, 100), "f32", time_baselines=False)
        assert e.status == "unsupported", (cfg.name, e.status, e.message)
