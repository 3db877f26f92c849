"""tools/probes/family_variants.py: knob variants of a family as benchable kernel folders."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from harness.families import Config

ROOT = Path(__file__).resolve().parent.parent


def _load():
    spec = importlib.util.spec_from_file_location("family_variants", ROOT / "tools" / "probes" / "family_variants.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_variants_become_one_source_and_one_link_per_shape(tmp_path):
    mod = _load()
    out = tmp_path / "ks"
    assert mod.main(["sm90_ksplit", "--shapes", "1024x512x2048 64x64x64", "--out", str(out),
                     "--variant", "a:TILE_M=64,TILE_N=64,STAGES=4,CLUSTER_K=8",
                     "--variant", "b:TILE_M=128,TILE_N=128,STAGES=4,CLUSTER_K=2"]) == 0
    assert (out / "shapes").read_text() == "1024,512,2048\n64,64,64\n"
    a = Config.from_source((out / "a.cu").read_text())
    assert a.knob_dict["CLUSTER_K"] == "8" and a.knob_dict["TILE_N"] == "64"
    link = out / "a" / "1024_512_2048.cu"
    assert link.is_symlink() and link.read_text() == (out / "a.cu").read_text()
    assert sorted(p.name for p in (out / "b").iterdir()) == ["1024_512_2048.cu", "64_64_64.cu"]


def test_an_illegal_variant_is_a_one_line_error(tmp_path):
    mod = _load()
    with pytest.raises(SystemExit, match="shared memory"):
        mod.main(["sm90_ksplit", "--shapes", "64x64x64", "--out", str(tmp_path),
                  "--variant", "big:TILE_M=128,TILE_N=256,STAGES=8"])
    with pytest.raises(SystemExit, match="NAME:KNOB=VALUE"):
        mod.main(["sm90_ksplit", "--shapes", "64x64x64", "--out", str(tmp_path), "--variant", "nocolon"])
