"""The committed winners (results/h200/winners-*.json) are what the current templates render.

Why: the benches measured the sources these files name; a template edit that is not followed
by re-measuring (or at least re-recording) the winners would leave the committed results and
the code that generates their kernels telling different stories, and a search that starts from
a winner would patch knobs into a file whose knob block no longer matches."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness import families as F
from harness import winners as W
from harness.shapes import resolve_shapes

H200 = Path(__file__).resolve().parents[1] / "results" / "h200"
FILES = {"f32": (H200 / "winners-f32.json", "grid"), "f16": (H200 / "winners-f16.json", "sample100")}


@pytest.mark.parametrize("acc", sorted(FILES))
def test_every_winner_renders_the_measured_source(acc):
    w = W.load(FILES[acc][0])
    stale = [n for n, win in w.configs.items() if W.sha256(win.source()) != win.sha256]
    assert not stale, f"a template changed under these winners; re-measure them: {stale}"


@pytest.mark.parametrize("acc", sorted(FILES))
def test_every_winner_is_a_current_catalog_configuration(acc):
    catalog = {c.name: c for c in F.catalog(acc, "sm_90a")}
    w = W.load(FILES[acc][0])
    missing = [n for n, win in w.configs.items() if catalog.get(n) != win.config]
    assert not missing, f"not in the {acc} catalog (or with other knobs): {missing}"


@pytest.mark.parametrize("acc", sorted(FILES))
def test_the_winners_cover_their_shape_set_exactly(acc):
    path, spec = FILES[acc]
    assert set(W.load(path).shapes) == set(resolve_shapes(spec))


def _bundled_winners_files() -> list[Path]:
    """Every winners file a bundled known-kernels layer names (results/<gpu>/gpu.json)."""
    import json

    files = []
    for layer in sorted((H200.parent).glob("*/gpu.json")):
        files += [layer.parent / name for name in json.loads(layer.read_text())["winners"]]
    return files


@pytest.mark.parametrize("path", _bundled_winners_files(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_bundled_layers_winner_renders_the_measured_source(path):
    """A track starts from these winners on their GPU: the source it times must be the one measured
    there (the model-shape files and the H100 layer included, not only the grid's)."""
    w = W.load(path)
    stale = [n for n, win in w.configs.items() if W.sha256(win.source()) != win.sha256]
    assert not stale, f"a template changed under {path.name}; re-measure or re-hash them: {stale}"
    assert w.shapes, f"{path} holds no shapes"
