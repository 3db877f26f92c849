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

CATALOG_FINGERPRINT = "15ad804871da3cd988266be226fa60e3580090d0feefa1443b05cde8251c8be0"
SIZES = {("f32", "sm_90a"): 522, ("f32", "sm_80"): 113, ("f32", None): 522,
         ("f16", "sm_90a"): 33, ("f16", "sm_80"): 14, ("f16", None): 33}


def _dump() -> list:
    return [(acc, arch, [(c.name, c.family, dict(c.knobs)) for c in catalog(acc, arch)])
            for acc in ("f32", "f16") for arch in ("sm_90a", "sm_80", None)]


def test_catalog_is_unchanged():
    dump = _dump()
    assert {(acc, arch): len(cfgs) for acc, arch, cfgs in dump} == SIZES
    assert hashlib.sha256(json.dumps(dump).encode()).hexdigest() == CATALOG_FINGERPRINT


BF16_FINGERPRINT = "bcd5388a872f64b99adb8a73bc6941efe0b829eea94c4bc23b69c355295a4eb5"
BF16_SIZES = {"sm_90a": 40, "sm_80": 12, None: 40}


def test_bf16_catalog_is_unchanged():
    """The bf16 list is pinned apart from the fp16 ones, whose fingerprint above stays as it was."""
    dump = [(arch, [(c.name, c.family, dict(c.knobs)) for c in catalog("f32", arch, "bf16")])
            for arch in ("sm_90a", "sm_80", None)]
    assert {arch: len(cfgs) for arch, cfgs in dump} == BF16_SIZES
    assert hashlib.sha256(json.dumps(dump).encode()).hexdigest() == BF16_FINGERPRINT


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


def test_every_pdl_launch_has_its_no_pdl_twin_and_the_per_call_pool_keeps_only_that():
    """Per call the no-PDL launch is the faster one (families.no_pdl_twin), so the catalog holds
    it for every entry launched with PDL and a per-call search picks from the twins alone."""
    for acc in ("f32", "f16"):
        cfgs = catalog(acc, "sm_90a")
        have = set(cfgs)
        pdl = [c for c in cfgs if c.geometry().pdl]   # launched with PDL (stream-K ignores the knob)
        assert pdl
        for c in pdl:
            assert F.Config.of(c.family, {**c.knob_dict, "PDL": "0"}) in have, c.name
        pool = F.per_call_pool(cfgs)
        assert not any(c.geometry().pdl for c in pool)
        assert len(pool) == len(cfgs) - len(pdl)
        assert [c for c in cfgs if c in set(pool)] == pool   # order kept


def test_per_call_pool_keeps_a_pdl_launch_without_a_twin():
    lone = F.Config.of("tiny_mma", {"BM": "16", "BN": "64", "BK": "64", "WARPS_M": "1", "WARPS_N": "4"})
    assert lone.knob_dict["PDL"] == "1"
    assert F.per_call_pool([lone]) == [lone]


def test_a_twins_table_is_refused_with_one_line(tmp_path):
    bad = tmp_path / "catalog.toml"
    bad.write_text('[catalog]\nf32 = []\n[twins]\nno_pdl = ["x"]\n')
    with pytest.raises(F.FamilyError, match="twins"):
        F.load_catalog_file(bad)
