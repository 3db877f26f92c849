"""The cost model ranks configurations like the H200 does (recorded timings, issue 5)."""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path

import pytest

from harness.families import Config, catalog
from harness.shapes import Shape
from l2tui.agent.policies.costmodel import (
    CALIBRATED_FILE, DEFAULT_PARAMS, CostModel, Params, fit, load_params, load_timings, log_error)

FIXTURES = sorted((Path(__file__).parent / "fixtures" / "h200_timings").glob("time_f32*.json"))
pytestmark = pytest.mark.skipif(not FIXTURES, reason="no recorded H200 timings")


@pytest.fixture(scope="module")
def records():
    return load_timings(FIXTURES)


def by_shape(records):
    out = defaultdict(list)
    for c, s, t in records:
        out[s].append((c, t))
    return out


def test_fixture_carries_provenance():
    import json

    for p in FIXTURES:
        env = json.loads(p.read_text())["env"]
        for key in ("gpu", "driver", "date", "git_rev"):
            assert env.get(key), (p.name, key)
        assert "H200" in env["gpu"]


def test_known_good_ranked_above_known_bad(records):
    """Per shape: the measured fastest configuration is predicted faster than every configuration
    that measured at least 1.5x slower, for nearly all pairs."""
    model = CostModel()
    pairs = ok = 0
    for s, rows in by_shape(records).items():
        best_c, best_t = min(rows, key=lambda r: r[1])
        for c, t in rows:
            if t >= 1.5 * best_t:
                pairs += 1
                ok += model.predict(best_c, s) < model.predict(c, s)
    assert pairs > 50
    assert ok / pairs >= 0.9, f"{ok}/{pairs}"


def test_top3_of_the_model_holds_a_near_best_config(records):
    model = CostModel()
    regrets = []
    for s, rows in by_shape(records).items():
        ranked = sorted(rows, key=lambda r: model.predict(r[0], s))
        regrets.append(min(t for _, t in ranked[:3]) / min(t for _, t in rows))
    geo = math.exp(sum(math.log(r) for r in regrets) / len(regrets))
    assert geo < 1.10, geo


def test_fit_improves_on_the_defaults_and_is_deterministic(records):
    p1 = fit(records, DEFAULT_PARAMS, rounds=1)
    p2 = fit(records, DEFAULT_PARAMS, rounds=1)
    assert p1 == p2
    assert log_error(CostModel(p1), records) < log_error(CostModel(DEFAULT_PARAMS), records)


def test_calibrated_parameters_are_committed_and_load():
    assert CALIBRATED_FILE.exists()
    p = load_params()
    from harness.families import FAMILIES

    assert isinstance(p, Params) and set(p.families) == set(FAMILIES)   # every family fitted
    assert Params.from_dict(p.to_dict()) == p


def test_physics_sanity():
    """Shape-level facts that hold without any fitted constant."""
    m = CostModel(DEFAULT_PARAMS)
    big = Shape(16384, 16384, 16384)
    c256 = Config.of("sm90_cutlass", {"TILE_M": "128", "TILE_N": "256"})
    c64 = Config.of("sm90_cutlass", {"TILE_M": "64", "TILE_N": "64", "SCHEDULE": "PINGPONG", "CLUSTER_M": "1"})
    assert m.predict(c256, big) < m.predict(c64, big)                # intensity wins on big shapes
    skinny = Shape(64, 64, 16384)
    split = Config.of("small_splitk", {"SPLIT_K": "0"})
    nosplit = Config.of("small_splitk", {"SPLIT_K": "1"})
    assert m.predict(split, skinny) < m.predict(nosplit, skinny)     # split-K fills the SMs
    est = m.estimate(c256, Shape(4096, 4096, 4096))
    assert est.ctas == 512 and est.waves == 4 and est.quantization == 1.0
    assert m.estimate(c256, Shape(4100, 4096, 4096)).quantization > 1.0   # padding waste counted
    assert all(m.predict(c, Shape(64, 64, 64)) > 0 for c in catalog("f32"))


def test_store_term_ranks_the_no_source_epilogue_first_where_c_dominates():
    """The calibrated model charges the part of storing C that an EPI_TMA epilogue leaves exposed
    (fitted on the H200 pick, where the EPI_TMA_NOC twin of ping-pong 128x128 was 1.2x faster
    on short-K big outputs); on a long K the store is a small part of the time."""
    from harness.families import _sm90

    m = CostModel()
    tma = Config.of("sm90_cutlass", _sm90(128, 128, sched="PINGPONG"))
    noc = Config.of("sm90_cutlass", _sm90(128, 128, sched="PINGPONG", epi="EPI_TMA_NOC"))
    short, long_ = Shape(16384, 16384, 256), Shape(4096, 4096, 16384)
    assert m.predict(noc, short) < m.predict(tma, short) * 0.97
    assert m.predict(noc, long_) <= m.predict(tma, long_)
    assert m.predict(tma, long_) / m.predict(noc, long_) < 1.02
