"""The prebuilt catalog is data (``harness/catalog.toml``): these tests pin what ``catalog()``
returns, so that editing the file's layout or comments can never change a configuration.

The committed winners are renders of catalog configurations by name; the fingerprint below is the
sha256 of every (name, family, knobs) that ``catalog()`` returns for both accumulators on sm_90a,
sm_80 and all GPUs, in order. A deliberate change to the catalog updates it (and says so in the
commit); an accidental one fails here.
"""

from __future__ import annotations

import hashlib
import json

import pytest

from harness import families as F
from harness.families import catalog

CATALOG_FINGERPRINT = "2e09c10faad1f001f3c529c089404ec5d3af49120b181d8e23cd9d038daaf6ff"
SIZES = {("f32", "sm_90a"): 237, ("f32", "sm_80"): 43, ("f32", None): 237,
         ("f16", "sm_90a"): 17, ("f16", "sm_80"): 6, ("f16", None): 17}


def _dump() -> list:
    return [(acc, arch, [(c.name, c.family, dict(c.knobs)) for c in catalog(acc, arch)])
            for acc in ("f32", "f16") for arch in ("sm_90a", "sm_80", None)]


def test_catalog_is_unchanged():
    dump = _dump()
    assert {(acc, arch): len(cfgs) for acc, arch, cfgs in dump} == SIZES
    assert hashlib.sha256(json.dumps(dump).encode()).hexdigest() == CATALOG_FINGERPRINT


def test_catalog_names_are_unique_and_valid():
    for acc in ("f32", "f16"):
        cfgs = catalog(acc)
        assert len({c.name for c in cfgs}) == len(cfgs)
        for c in cfgs:
            assert F.validate(c.family, c.knob_dict) == [], c.name


def test_catalog_file_ships_inside_the_package():
    from harness.paths import PACKAGE_DIR

    assert F.CATALOG_FILE.parent == PACKAGE_DIR and F.CATALOG_FILE.is_file()


def test_unsafe_entries_are_refused_by_validate():
    unsafe = F.unsafe_catalog()
    assert unsafe and all(c.knob_dict["SCHEDULER"] == "SPLITK" for c in unsafe)
    for c in unsafe:
        assert F.validate(c.family, c.knob_dict)
        assert F.validate(c.family, c.knob_dict, allow_unsafe=True) == []


@pytest.mark.parametrize("text, words", [
    ('[catalog]\nf32 = [{ family = "nope", BM = 16 }]\n', "unknown kernel family"),
    ('[catalog]\nf32 = [{ family = "tiny_mma", BOGUS = 16 }]\n', "BOGUS"),
    ('[catalog]\nf32 = [{ BM = 16 }]\n', "no family"),
    ('[catalog\n', "catalog.toml"),
])
def test_a_broken_catalog_file_is_one_clear_error(tmp_path, text, words):
    bad = tmp_path / "catalog.toml"
    bad.write_text(text)
    with pytest.raises(F.FamilyError, match=words):
        F.load_catalog_file(bad)
