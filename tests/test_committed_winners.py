"""The committed winners (results/h200/kernels-f32) are what the current templates render.

Why: the grid bench measured those sources; a template edit that is not followed by
re-rendering the winners (tools/commit_winners.py from a fresh tools/prebuild.py) would leave
the committed kernels and the code that generates them telling different stories, and a search
that starts from a winner would patch knobs into a file whose knob block no longer matches."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness import families as F
from harness.shapes import Shape, resolve_shapes

KERNELS = Path(__file__).resolve().parents[1] / "results" / "h200" / "kernels-f32"


@pytest.fixture(scope="module")
def catalog():
    return {c.name: c for c in F.catalog("f32", "sm_90a")}


def test_every_winner_configuration_is_a_current_catalog_render(catalog):
    configs = sorted((KERNELS / "configs").glob("*.cu"))
    assert configs
    stale = [p.name for p in configs if p.stem not in catalog or catalog[p.stem].source() != p.read_text()]
    assert not stale, f"re-render these winners from the current templates: {stale}"


def test_every_grid_shape_links_to_one_winner_configuration(catalog):
    shapes = resolve_shapes("grid")
    assert len(shapes) == 1000
    for s in shapes:
        link = KERNELS / f"{s.m}_{s.n}_{s.k}.cu"
        assert link.is_symlink(), link
        target = link.resolve()
        assert target.parent == (KERNELS / "configs").resolve() and target.stem in catalog, link
    assert isinstance(shapes[0], Shape)
