"""The cost model ranks configurations like the H200 does, per call (recorded timings).

The ranking tests read what the committed constants are fitted on: the per-call pick of a grid
sweep (``percall_f32.json``) and the big shapes of the earlier back-to-back fixtures
(``big_f32_back_to_back.json``: on big shapes the two modes agree within 1 %)."""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path

import pytest

from harness.families import Config, catalog
from harness.shapes import Shape
from l2tui.agent.policies.costmodel import (
    CALIBRATED_FILE, DEFAULT_PARAMS, REFUSED_S, SIBLING, UNCALIBRATED, CostModel, Params, family_params, fit,
    load_params, load_timings, log_error)

FIXTURES = [Path(__file__).parent / "fixtures" / "h200_timings" / n for n in ("percall_f32.json",
                                                                              "big_f32_back_to_back.json")]
pytestmark = pytest.mark.skipif(not all(p.is_file() for p in FIXTURES), reason="no recorded H200 timings")


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


def test_grid_fixture_carries_provenance_and_the_model_keeps_a_near_best_config_in_its_top3():
    """``percall_f32_grid.json``: the per-call pick of the whole grid by one sweep on one H200
    (git dfc4b46, session sessions/grid-cold), measured with the committed constants. It says where
    it comes from, and the committed model's top 3 per shape holds a near-best configuration,
    overall and on the small shapes (the class a refit on this file ranked worst), while a
    reversed ranking does not.

    Measured (per call; README of the fixtures): top-3 regret 1.113 overall, 1.119 small with the
    committed constants; DEFAULT_PARAMS 1.124 / 1.175; the refit on this file 1.140 / 1.208 (in
    sample); the committed ranking reversed 2.229 / 1.550. The bound 1.15 passes the committed
    constants with a margin of 0.03-0.04 and fails the reversed ranking (and, on small shapes,
    DEFAULT_PARAMS). Only the configurations the pick named were timed (the committed model's own
    choices), so this is a ranking among those, not over the catalog."""
    import json

    path = Path(__file__).parent / "fixtures" / "h200_timings" / "percall_f32_grid.json"
    doc = json.loads(path.read_text())
    env = doc["env"]
    for key in ("gpu", "uuid", "driver", "date", "git_rev", "source", "note"):
        assert env.get(key), key
    assert "H200" in env["gpu"] and env["git_rev"] == "dfc4b46" and doc["mode"] == "per call"
    assert "sessions/grid-cold" in env["source"] and "/tmp" not in path.read_text()
    assert len(doc["timings"]) == 1000

    from l2tui.agent.policies.costmodel import records_of

    rows = by_shape(records_of(doc))

    def top3_regret(predict, small_only=False):
        logs = []
        for s, rs in rows.items():
            if small_only and s.size_class != "small":
                continue
            ranked = sorted(rs, key=lambda r: predict(r[0], s))
            logs.append(math.log(min(t for _, t in ranked[:3]) / min(t for _, t in rs)))
        return math.exp(sum(logs) / len(logs))

    model = CostModel()
    reversed_ = lambda c, s: -model.predict(c, s)   # noqa: E731
    bound = 1.15
    for small_only in (False, True):
        assert top3_regret(model.predict, small_only) < bound, small_only
        assert top3_regret(reversed_, small_only) > bound, small_only   # the bound tells a broken ranking


@pytest.mark.slow
def test_fit_improves_on_the_defaults_and_is_deterministic(records):
    p1 = fit(records, DEFAULT_PARAMS, rounds=1)
    p2 = fit(records, DEFAULT_PARAMS, rounds=1)
    assert p1 == p2
    assert log_error(CostModel(p1), records) < log_error(CostModel(DEFAULT_PARAMS), records)


def test_calibrated_parameters_are_committed_and_load():
    assert CALIBRATED_FILE.exists()
    p = load_params()
    from harness.families import FAMILIES

    # every family fitted, but one no calibration has timed yet, which ranks with its sibling's fit
    # or (UNCALIBRATED) with its own first-principles defaults
    assert isinstance(p, Params) and set(p.families) | set(SIBLING) | UNCALIBRATED == set(FAMILIES)
    for fam in UNCALIBRATED - set(p.families):
        assert family_params(p, fam) == DEFAULT_PARAMS.families[fam]
    for fam, sibling in SIBLING.items():
        assert fam not in p.families and family_params(p, fam) == p.families[sibling]
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


def test_tile_order_sets_the_dram_traffic_and_the_padded_grid():
    """CUTLASS's tile order, as the model sees it (no fitted constant): the heuristic raster
    along N with swizzle 1 makes a wave of 132 tiles span every tile column, so B is read again
    every wave once it is too big for L2; swizzle 8 makes it a block of 8 rows; operands that fit
    in L2 are read once whatever the order; and the swizzle pads the tile grid to its multiple."""
    from harness.families import _sm90
    from l2tui.agent.policies.costmodel import dram_bytes, wave_block

    sw1 = Config.of("sm90_cutlass", _sm90(128, 192, sched="PINGPONG", epi="EPI_TMA_NOC", epi_n=64)).geometry()
    sw8 = Config.of("sm90_cutlass", _sm90(128, 192, sched="PINGPONG", swizzle=8, epi="EPI_TMA_NOC",
                                          epi_n=64)).geometry()
    big = Shape(8192, 12288, 4096)                      # 64 x 64 tiles of 128x192
    assert sw1.tile_grid(big) == sw8.tile_grid(big) == (64, 64)
    assert wave_block(sw1, 64, 64, 132) == (3, 64)
    assert wave_block(sw8, 64, 64, 132) == (8, 17)
    assert dram_bytes(sw8, big, 132) < 0.5 * dram_bytes(sw1, big, 132)
    assert dram_bytes(sw1, big, 132) > 3 * big.min_bytes
    small = Shape(2048, 2048, 2048)                     # A and B of 8 MB each stay in L2
    assert dram_bytes(sw1, small, 132) == dram_bytes(sw8, small, 132) == small.min_bytes
    tall = Shape(12288, 2048, 8192)                     # 96 x 11 tiles: swizzle 8 pads 11 to 16
    assert sw1.tile_grid(tall) == (96, 11) and sw8.tile_grid(tall) == (96, 16)
    assert sw8.tile_grid(Shape(640, 2048, 512)) == (8, 12)   # 5 rows: narrowed to swizzle 4
    narrow = Shape(640, 12288, 8192)     # 5 x 64 tiles, padded to 8 x 64, still a strip of 4 columns
    assert sw8.tile_grid(narrow) == (8, 64) and wave_block(sw8, 8, 64, 132, 4) == (8, 20)
    b_reads = 8 * 64 / 132 * 20 * 192 * narrow.k * 2.0          # B (201 MB) once per wave, 20 columns
    assert dram_bytes(sw8, narrow, 132) == pytest.approx(2.0 * narrow.m * (narrow.k + narrow.n) + b_reads)
    m = CostModel(DEFAULT_PARAMS)
    assert m.predict(Config.of("sm90_cutlass", _sm90(128, 192, sched="PINGPONG", swizzle=8)), tall) > \
        1.3 * m.predict(Config.of("sm90_cutlass", _sm90(128, 192, sched="PINGPONG")), tall)


def test_calibrated_model_orders_swizzle_twins_like_the_h200():
    """On the power-bound shapes where the swizzle-1 and swizzle-8 twins of two ping-pong
    configurations measured more than 5 % apart on the H200 (fixtures/h200_timings/
    swizzle_pairs.json), the calibrated model puts the faster one first on most: 109 of 137 with the
    constants fitted for the top of each shape's ranking on the grid's per-call timings (124 with the
    log-error fit before them, whose picks were worse: tests/fixtures/h200_timings/README.md); a
    model blind to the swizzle's DRAM traffic gets about half."""
    import json

    doc = json.loads((Path(__file__).parent / "fixtures" / "h200_timings" / "swizzle_pairs.json").read_text())
    assert "H200" in doc["env"]["gpu"]
    cfgs = {n: Config.of(c["family"], c["knobs"]) for n, c in doc["configs"].items()}
    model = CostModel()
    pairs = agree = 0
    for row in doc["timings"]:
        shape, times = Shape(*row["shape"]), row["times_ms"]
        for a in times:
            b = a.replace("-st0-noc", "-st0-sw8-noc")
            if b == a or b not in times or abs(math.log(times[a] / times[b])) < math.log(1.05):
                continue
            pairs += 1
            agree += (times[a] < times[b]) == (model.predict(cfgs[a], shape) < model.predict(cfgs[b], shape))
    assert pairs >= 60
    assert agree / pairs >= 0.75, f"{agree}/{pairs}"


def test_ksplit_groups_are_priced_where_one_cluster_per_tile_leaves_the_sms_idle():
    """Four 64x64 tiles with K = 16384: one cluster of 2 per tile keeps 8 of 132 SMs busy, 16
    groups keep 128 busy at the price of a workspace round trip and a global barrier; on a grid
    of many tiles the auto rule adds no group, so the prediction is unchanged."""
    model = CostModel()
    base = {"TILE_M": "64", "TILE_N": "64", "STAGES": "8", "CLUSTER_K": "2"}
    auto, one = Config.of("sm90_ksplit", {**base, "GROUPS": "0"}), Config.of("sm90_ksplit", base)
    long_k = Shape(128, 128, 16384)
    assert model.estimate(auto, long_k).splits == 32 and model.estimate(one, long_k).splits == 2
    assert model.predict(auto, long_k) < 0.5 * model.predict(one, long_k)
    many = Shape(4096, 4096, 1024)
    assert model.predict(auto, many) == model.predict(one, many)


def _grid_sample(every: int = 25):
    """Every ``every``-th shape of ``percall_f32_grid.json`` (40 shapes of all size classes, about
    800 timings of real catalog configurations)."""
    import json

    from l2tui.agent.policies.costmodel import records_of

    doc = json.loads((Path(__file__).parent / "fixtures" / "h200_timings" / "percall_f32_grid.json").read_text())
    return records_of({**doc, "timings": doc["timings"][::every]})


def _top3_regret(params, records):
    model = CostModel(params)
    logs = []
    for s, rows in by_shape(records).items():
        ranked = sorted(rows, key=lambda r: model.predict(r[0], s))
        logs.append(math.log(min(t for _, t in ranked[:3]) / min(t for _, t in rows)))
    return math.exp(sum(logs) / len(logs))


@pytest.mark.slow
def test_fit_objectives_default_unchanged_and_top3_ranks_the_top_no_worse():
    """``fit(objective="top3")`` (the regret of each shape's predicted top 3 and first choice, a
    little log error) keeps a near-best configuration in the model's top 3 at least as well as the
    default log-error fit on the records it is fitted on; the default is the log objective, its
    result unchanged; the ranking fit is deterministic; an unknown objective is an error."""
    records = _grid_sample()
    assert len(by_shape(records)) == 40
    p_default = fit(records, DEFAULT_PARAMS, rounds=1)
    assert fit(records, DEFAULT_PARAMS, rounds=1, objective="log") == p_default
    p_top3 = fit(records, DEFAULT_PARAMS, rounds=1, objective="top3")
    assert fit(records, DEFAULT_PARAMS, rounds=1, objective="top3") == p_top3
    assert p_top3 != p_default
    # measured: 1.063 (top3) against 1.155 (log), DEFAULT_PARAMS 1.124
    assert _top3_regret(p_top3, records) <= _top3_regret(p_default, records)
    from l2tui.agent.policies.costmodel import top3_objective

    assert top3_objective(CostModel(p_top3), records) < top3_objective(CostModel(p_default), records)
    with pytest.raises(ValueError, match="objective"):
        fit(records, DEFAULT_PARAMS, rounds=1, objective="spearman")


# ---------------------------------------------------------------- skinny_splitk (decode shapes)


def _skinny(**knobs: str) -> Config:
    base = {"BM": "16", "BN": "128", "BK": "64", "WARPS_M": "1", "WARPS_N": "4", "STAGES": "4"}
    return Config.of("skinny_splitk", {**base, **knobs})


def test_skinny_is_priced_as_a_stream_of_b_and_refused_shapes_rank_last():
    """skinny_splitk's estimate is B's bytes at the bandwidth (or what its CTAs keep in flight)
    plus a launch: never under B's read floor, a memory bound on a decode shape, and a shape its
    l2_hgemm refuses (M > 128) gets REFUSED_S so it ranks after everything."""
    m = CostModel(load_params())
    cfg = _skinny()
    decode = Shape(16, 4096, 14336)
    est = m.estimate(cfg, decode)
    floor_s = 2.0 * decode.k * decode.n / (m.params.bandwidth_gbs * 1e9)
    assert floor_s < est.seconds < 2 * floor_s and est.bound == "memory"
    assert est.ctas >= 2 * 132 and est.splits > 1          # split-K fills the SMs twice over (WAVES 2)
    refused = m.estimate(cfg, Shape(256, 4096, 4096))
    assert refused.seconds == REFUSED_S and refused.bound == "unsupported"


def test_skinny_model_prefers_a_row_tile_that_covers_m_and_enough_loads_in_flight():
    m = CostModel(load_params())
    s128 = Shape(128, 4096, 4096)   # a 16-row tile reads all of B eight times
    assert m.predict(_skinny(BM="128", WARPS_M="4"), s128) < m.predict(_skinny(), s128)
    one = Shape(1, 4096, 4096)
    # unsplit, 32 CTAs stream B: with two stages each has one stage in flight, far from the
    # bandwidth; a ring of eight keeps seven; splitting K over every SM beats both
    unsplit = {"KCHUNK": "4096"}
    st2, st8 = m.predict(_skinny(STAGES="2", **unsplit), one), m.predict(_skinny(STAGES="8", **unsplit), one)
    assert m.predict(_skinny(), one) < st8 < st2
    assert "skinny_splitk" in UNCALIBRATED


def test_pick_times_the_skinny_family_on_decode_shapes_only():
    """Without a calibration the model cannot be trusted to rank skinny_splitk into its top places,
    so the pick times the family's model-best as a kind on every shape it serves, and never on one
    it refuses."""
    from l2tui.agent.policies.pick import choose

    m = CostModel(load_params())
    cat = catalog("f32", "sm_90a")
    for shape, wanted in ((Shape(8, 4096, 14336), True), (Shape(128, 28672, 4096), True),
                          (Shape(1, 128256, 4096), True), (Shape(512, 4096, 4096), False)):
        ranked = [c for _, c in m.rank(cat, shape)]
        chosen = choose(ranked, shape, 5)
        assert any(c.family == "skinny_splitk" for c in chosen) == wanted, shape
