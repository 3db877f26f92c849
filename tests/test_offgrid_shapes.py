"""Shapes off the grid are safe: every family runs them or refuses them before anything runs.

CPU: the families' applicability and the search policy's pool on off-grid shapes (a model's
GEMMs: M from 1 to 3000, N up to 152064, N and K multiples of 8 but not of any tile).
GPU (``pytest -m gpu tests/test_offgrid_shapes.py``): one catalog configuration of every family
through every check on those shapes: each passes, or is refused (``unsupported``), never wrong.
"""

from __future__ import annotations

import pytest

from harness import families as F
from harness.shapes import Shape

OFF_GRID = [Shape(m, n, k) for m in (1, 8, 100, 3000) for n, k in ((128256, 4096), (4104, 3592), (14336, 4096))]
NOT_ALIGNED = [Shape(16, 4100, 4096), Shape(16, 4096, 4100), Shape(1, 12, 8)]


@pytest.mark.parametrize("shape", OFF_GRID, ids=str)
def test_every_family_takes_off_grid_shapes_with_aligned_rows(shape):
    for fam in F.families_for("sm_90a"):
        if fam.name == "skinny_splitk" and shape.m > F.SKINNY_MAX_M:   # decode rows only, by design
            assert not F.applicable(fam, shape, "sm_90a")
            continue
        assert F.applicable(fam, shape, "sm_90a"), (fam.name, shape)
        for cfg in F.catalog("f32", "sm_90a"):
            if cfg.family == fam.name:
                g = cfg.geometry()
                tm, tn = g.tile_grid(shape)
                assert tm >= 1 and tn >= 1 and g.splits_for(shape) >= 1


@pytest.mark.parametrize("shape", NOT_ALIGNED, ids=str)
def test_rows_that_are_not_16_bytes_are_refused_before_they_run(shape):
    from l2tui.agent.policies.search import SearchPolicy

    assert not any(F.applicable(f, shape, "sm_90a") for f in F.families())
    assert SearchPolicy().candidates(shape, "f32", "sm_90a") == []


def test_an_operand_past_32_bit_indexing_is_refused():
    big = Shape(262144, 16384, 4096)   # C holds 2^32 elements
    assert not any(F.applicable(f, big, "sm_90a") for f in F.families())
    assert F.applicable("sm90_cutlass", Shape(16, 152064, 3584), "sm_90a")   # Qwen2.5's LM head


def _one_per_family(acc: str) -> list[F.Config]:
    seen: dict[str, F.Config] = {}
    for c in F.catalog(acc, "sm_90a"):
        seen.setdefault(c.family, c)
    return list(seen.values())


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [Shape(1, 128256, 4096), Shape(8, 14336, 4096), Shape(100, 4104, 3592),
                                   Shape(3000, 128256, 4096), Shape(16, 4100, 4096)], ids=str)
def test_off_grid_shapes_through_every_family_on_the_gpu(shape):
    from harness.evaluate import Evaluator

    with Evaluator(arch="sm_90a", baselines=("cublas",)) as ev:
        for cfg in _one_per_family("f32"):
            if not F.applicable(cfg.family, shape, "sm_90a"):
                continue   # refused before it runs
            res = ev.evaluate(cfg.source(), shape, "f32")
            assert res.status in ("ok", "unsupported"), (cfg.name, shape, res.status, res.message)
