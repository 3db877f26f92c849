"""The pick, the first stage of the search: what it chooses, and that a sweep keeps its fastest.

The evaluations are recorded H200 timings (tests/sweep_support.py); builds are skipped here
(``build=False``: the catalog's builds are covered by test_families and test_build_catalog).
"""

from __future__ import annotations

import collections
import json
import threading

import pytest

from harness.families import (Config, applicable, catalog, epilogue_siblings, get_family, per_call_pool,
                               sans_epilogue)
from harness.shapes import Shape
from l2tui.agent.policies.costmodel import SIBLING, CostModel
from l2tui.agent.policies.pick import (always_time, choose, decode_covers, decode_tile, deep_ring, is_decode,
                                      time_every)
from l2tui.agent.policies.base import TrackContext
from l2tui.agent.recorded import RecordedEvaluator, record_key
from l2tui.agent.sweep import RESULTS_FILE, Sweep, SweepConfig
from l2tui.session import Session
from tests.sweep_support import H200_UUID, TIMINGS, fixture_times, recorded_file, timed_names

SHAPES = [Shape(4096, 4096, 4096), Shape(64, 64, 16384), Shape(12288, 128, 1024)]


def ranked_for(shape: Shape) -> list[Config]:
    return [c for _, c in CostModel().rank(catalog("f32", "sm_90a"), shape)]


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_choose_takes_the_models_top_distinct_then_every_kind_then_the_siblings(shape):
    ranked = ranked_for(shape)
    chosen = choose(ranked, shape, 4)
    # the first four: the model's best four configurations, epilogue variants counted once, of
    # the families a pick has timed (one ranked with a sibling's constants is timed as a kind)
    distinct = []
    for c in ranked:
        if c.family not in SIBLING and sans_epilogue(c) not in {sans_epilogue(d) for d in distinct}:
            distinct.append(c)
    assert chosen[:4] == distinct[:4]
    assert len(set(chosen)) == len(chosen)
    # the model's best of every kind it is least sure of is timed, whatever its rank
    for wanted in always_time(shape):
        best = next((c for c in ranked if wanted(c)), None)
        if best is not None:
            assert best in chosen
    # one configuration of every family that runs here and serves the shape (skinny_splitk: M <= 128)
    assert {c.family for c in chosen} == {c.family for c in ranked if applicable(c.family, shape, "sm_90a")}
    # and the epilogue variants of everything chosen
    for c in chosen:
        assert set(epilogue_siblings(c, ranked)) <= set(chosen)
    # without kinds and siblings: the top distinct only
    assert choose(ranked, shape, 4, kinds=False, siblings=False) == distinct[:4]
    assert choose(ranked, shape, 0, kinds=False, siblings=False) == []


def test_every_basic_configuration_is_timed_where_one_can_win_and_none_elsewhere():
    every = [c for c in catalog("f32", "sm_90a")
             if c.knob_dict.get("SCHEDULE") == "BASIC" and c.knob_dict.get("SCHEDULER") != "SPLITK_REDUCE"]
    pairs = {c.name for c in every if c.family == "sm90_cutlass_t" and c.knob_dict["CLUSTER_M"] == "2"
             and int(c.knob_dict["TILE_M"]) <= 16}
    basic = {c.name for c in every} - pairs
    assert len(basic) == 48   # twenty sm90_cutlass entries and their no-PDL twins, eight sm90_cutlass_t
    assert len(pairs) == 4    # the decode pairs: timed on decode GEMMs only
    for shape, inside in ((Shape(2048, 512, 64), True), (Shape(512, 2048, 1024), True),
                          (Shape(64, 64, 2048), False), (Shape(8192, 512, 64), False),
                          (Shape(4096, 4096, 4096), False)):
        chosen = {c.name for c in choose(ranked_for(shape), shape, 4)}
        assert bool(time_every(shape)) == inside, shape
        if inside:
            assert basic <= chosen, (shape, basic - chosen)
        assert not any(kind(c) for kind in time_every(shape) for c in catalog("f32", "sm_90a") if c.name in pairs)


def test_deep_ring_basic_is_timed_past_the_basic_window_where_one_wave_fills_the_sms():
    """Past K = 1,024 the pick times every BASIC configuration with a deep ring where 32-264
    64x64 tiles (64-264 past K = 2,048) make at most one wave that fills the SMs; not on a grid
    too small to fill them (split-K's shapes) nor on more than one wave."""
    deep = {c.name for c in catalog("f32", "sm_90a") if deep_ring(c)}
    assert len(deep) == 34 and all("-ws-" in n for n in deep)
    for shape, inside in ((Shape(1024, 512, 2048), True), (Shape(512, 1024, 16384), True),
                          (Shape(256, 512, 2048), True), (Shape(256, 512, 4096), False),
                          (Shape(64, 64, 2048), False), (Shape(2048, 2048, 2048), False)):
        kinds = time_every(shape)
        assert (kinds == [deep_ring]) == inside, shape
        if inside:
            chosen = {c.name for c in choose(ranked_for(shape), shape, 4)}
            assert deep <= chosen, (shape, deep - chosen)


def test_every_decode_tile_that_holds_m_is_timed_on_a_decode_gemm_and_no_other():
    """On a decode GEMM (M <= 32, N and K >= 1,024) the pick times every transposed CUTLASS
    configuration of the narrowest tile that holds M (16 rows up to M = 16, then 32: five
    schedules, the 64-column BASIC tile with K sliced for a second kernel's sum, three and two, and
    in pairs of 8 or 16 rows, two each),
    whatever the model ranks; on other shapes none of them is added for it, and the sliced ones are
    not BASIC windows' configurations."""
    decode = {m: {c.name for c in catalog("f32", "sm_90a") if decode_tile(c, m)} for m in (16, 32)}
    assert {m: len(names) for m, names in decode.items()} == {16: 10, 32: 9}
    sliced = {n for names in decode.values() for n in names if "-splitr" in n}
    assert len(sliced) == 5
    for shape in (Shape(2048, 512, 64), Shape(1024, 512, 2048)):
        assert not any(kind(c) for kind in time_every(shape) for c in catalog("f32", "sm_90a") if c.name in sliced)
    for shape, rows in ((Shape(16, 28672, 4096), 16), (Shape(1, 6144, 4096), 16), (Shape(32, 4096, 14336), 32),
                        (Shape(17, 1024, 1024), 32)):
        assert is_decode(shape) and rows in decode_covers(shape.m)
        chosen = {c.name for c in choose(ranked_for(shape), shape, 3)}
        assert decode[rows] <= chosen, (shape, decode[rows] - chosen)
    # the BASIC windows still apply on a decode GEMM: 16x4096x4096 is 64 tiles of 64x64, a deep ring's
    assert time_every(Shape(16, 4096, 4096))[0] is deep_ring and len(time_every(Shape(16, 4096, 4096))) == 2
    stream_k_16 = next(c for c in catalog("f32", "sm_90a") if decode_tile(c, 16) and "-sk" in c.name)
    for shape in (Shape(33, 4096, 4096), Shape(16, 512, 4096), Shape(16, 4096, 512), Shape(2048, 2048, 2048)):
        assert not is_decode(shape)
        assert not any(kind(stream_k_16) for kind in time_every(shape)), shape


def _decode_config(rows: int, pair: int) -> Config:
    return Config.of("sm90_cutlass_t", {"TILE_M": str(rows), "TILE_N": "64", "TILE_K": "64", "CLUSTER_M": str(pair),
                                        "CLUSTER_N": "1", "SCHEDULE": "BASIC", "STAGES": "0",
                                        "SCHEDULER": "PERSISTENT", "SPLITS": "1", "RASTER": "RASTER_HEURISTIC",
                                        "SWIZZLE": "1", "ACC": "ACC_F32", "PDL": "0"})


def test_a_decode_cluster_counts_for_the_tokens_it_covers():
    """8-row tiles in pairs along M (a weight tile multicast to both) are decode tiles up to 16
    tokens (for 8 or fewer the second CTA holds none and still halves each CTA's share of B), not
    above; 16-row pairs for 17 to 32; a single 8-row tile for 8 or fewer, beside the 16-row tile
    that serves up to 16."""
    covers = {(rows, pair): {m for m in range(1, 40) if decode_tile(_decode_config(rows, pair), m)}
              for rows, pair in ((8, 1), (8, 2), (16, 1), (16, 2), (32, 1))}
    assert covers == {(8, 1): set(range(1, 9)), (8, 2): set(range(1, 17)), (16, 1): set(range(1, 17)),
                      (16, 2): set(range(17, 33)), (32, 1): set(range(17, 33))}
    pair = _decode_config(8, 2)
    assert any(kind(pair) for kind in time_every(Shape(16, 4096, 4096)))
    assert not any(kind(pair) for kind in time_every(Shape(16, 512, 4096)))   # not a decode GEMM


@pytest.mark.skipif(not TIMINGS.exists(), reason="H200 timings not recorded yet")
def test_the_sweep_times_the_pick_and_keeps_its_fastest(tmp_path, monkeypatch):
    import l2tui.agent.policies.search as search

    shape = Shape(4096, 4096, 4096)
    timed = timed_names()
    full = search.catalog
    # the catalog the fixture timed (configurations added later have no recorded H200 time)
    monkeypatch.setattr(search, "catalog", lambda acc, arch, dtype="fp16": [c for c in full(acc, arch, dtype) if c.name in timed])
    rec = recorded_file(tmp_path, [shape])
    s = Session.create(tmp_path / "s", config={"sweep": {}}, gpu={"name": "NVIDIA H200"}, versions={})
    ev = RecordedEvaluator(rec, arch="sm_90a", build=False)
    cfg = SweepConfig(shapes=[shape], steps=0, seeds=3, arch="sm_90a", build_batches=False)
    sw = Sweep(cfg, ev, session=s, out_dir=s.path, progress=lambda line: None)
    (res,) = sw.run()

    # what the pick timed: the policy's seed and what choose() adds, all at step 0
    step0 = [e for e in s.events if e["type"] == "candidate" and e["step"] == 0]
    assert res.picked == len(step0) == res.evaluated
    # a sweep times per call: it picks from the per-call pool (no-PDL twins in place of PDL launches)
    ranked = per_call_pool([c for c in ranked_for(shape) if c.name in timed])
    expected = {c.name for c in choose(ranked, shape, 3)}
    names = {Config.from_source(s.get_kernel(e["sha"])).name for e in step0}
    assert names == expected
    assert len(names) > 3        # the kinds and siblings beside the model's top 3
    # the winner is the fastest of them in the recording, and its speedup is against the baseline
    times = fixture_times()[(4096, 4096, 4096)]
    fastest = min(names, key=lambda n: times[n])
    assert res.best_name == fastest
    assert res.best_ms == pytest.approx(times[fastest])
    assert res.speedup == pytest.approx(times["cublaslt_autotune"] / times[fastest])
    # every checked and timed event, and the result row, name the GPU that timed them
    checked = [e for e in s.events if e["type"] in ("checked", "timed")]
    assert checked and all(e["gpu"] == H200_UUID for e in checked)
    row = json.loads((s.path / RESULTS_FILE).read_text())["tracks"][res.track]
    assert row["gpu_uuid"] == H200_UUID and row["gpu"] == "NVIDIA H200"
    # the pick's rationale reaches the log (the planner's plan) and the RL rows
    plans = [e for e in s.events if e["type"] == "plan" and e["text"].startswith("pick:")]
    assert plans and fastest in plans[0]["text"]
    assert len(s.rewards()) == res.evaluated


@pytest.mark.skipif(not TIMINGS.exists(), reason="H200 timings not recorded yet")
def test_a_pick_candidate_without_a_result_never_wins(tmp_path, monkeypatch):
    """A configuration without a result (here: its record removed) is logged and skipped, not guessed.
    Replaying, the pick chooses only what the recording holds, so the one without a result is timed
    here as the incumbent (which the pick always times)."""
    import l2tui.agent.policies.search as search

    timed = timed_names()
    full = search.catalog
    monkeypatch.setattr(search, "catalog", lambda acc, arch, dtype="fp16": [c for c in full(acc, arch, dtype) if c.name in timed])
    shape = Shape(4096, 4096, 4096)
    rec = recorded_file(tmp_path, [shape])
    doc = json.loads(rec.read_text())
    top = [c for c in ranked_for(shape) if c.name in timed][0]     # the model's favourite: timed first
    doc["records"].pop(record_key(top.source(), shape, "f32"), None)
    rec.write_text(json.dumps(doc))
    s = Session.create(tmp_path / "s", config={"sweep": {}}, gpu={}, versions={})
    cfg = SweepConfig(shapes=[shape], steps=0, seeds=2, arch="sm_90a", build_batches=False,
                      incumbents={(shape, "f32"): top})
    (res,) = Sweep(cfg, RecordedEvaluator(rec, arch="sm_90a", build=False), session=s, out_dir=s.path,
                   progress=lambda line: None).run()
    assert res.best_name and res.best_name != top.name
    names = {e["sha"]: Config.from_source(s.get_kernel(e["sha"])).name for e in s.events if e["type"] == "candidate"}
    kinds = {names[e["sha"]]: e["kind"] for e in s.events if e["type"] == "reward"}
    assert kinds[top.name] == "not_recorded"
    assert [k for n, k in kinds.items() if n != top.name] and all(
        k == "ok" for n, k in kinds.items() if n != top.name)   # the pick chose only what the recording holds


@pytest.mark.compile
@pytest.mark.skipif(not TIMINGS.exists(), reason="H200 timings not recorded yet")
def test_the_command_with_the_local_executor_picks_on_the_recordings_gpu(tmp_path, monkeypatch, capsys):
    """``l2tui sweep --recorded`` (default executor): real nvcc builds of a small family, the pick
    on the recording, every result naming the recording's GPU."""
    import l2tui.agent.policies.search as search
    from l2tui.cli import main

    monkeypatch.setenv("L2TUI_CACHE_DIR", str(tmp_path / "cache"))
    timed, full = timed_names(), search.catalog
    # the catalog the fixture timed (the no-PDL twins added later have no recorded time)
    monkeypatch.setattr(search, "catalog", lambda acc, arch, dtype="fp16": [c for c in full(acc, arch, dtype) if c.name in timed])
    shape = Shape(64, 64, 64)
    rec = recorded_file(tmp_path, [shape], ["sm80_mma"])
    sdir = tmp_path / "sweep"
    rc = main(["sweep", "--shapes", str(shape), "--recorded", str(rec), "--families", "sm80_mma", "--arch", "sm_80",
               "--steps", "0", "--seeds", "2", "--session", str(sdir)])
    out = capsys.readouterr()
    assert rc == 0, out.err
    assert "catalog [" in out.err and "NVIDIA H200" in out.out
    row = json.loads((sdir / RESULTS_FILE).read_text())["tracks"]["64x64x64-f32"]
    assert row["gpu_uuid"] == H200_UUID and row["picked"] >= 2 and row["best_name"].startswith("sm80-")
    s = Session.open(sdir)
    assert s.gpu.get("executor") == "local" and s.gpu.get("uuid") == H200_UUID
    compiled = [e for e in s.events if e["type"] == "compiled"]
    assert compiled and all(e["ok"] and e["cached"] for e in compiled)     # the prebuild compiled them all


def test_the_search_policy_picks_only_with_an_evaluator_that_times_many_at_once(tmp_path):
    """Replaying recorded evaluations (no batched request: ``can_batch`` False, which the loop
    passes on in ``TrackContext.can_batch``), ``l2tui run --policy search`` keeps the cost model's
    seed, among the configurations the recording holds; where the evaluator times many at once the
    seed is a pick request (tests/test_seed_timing.py; on a GPU tests/test_sweep_ray_gpu.py)."""
    from l2tui.agent.policies.base import TrackContext
    from l2tui.agent.policies.search import SearchPolicy

    shape = Shape(4096, 4096, 4096)
    rec = RecordedEvaluator(recorded_file(tmp_path, [shape]), arch="sm_90a", build=False)
    ctx = TrackContext(track="t", shape=shape, acc="f32", baseline="cublaslt_autotune", step=0, arch="sm_90a",
                       can_batch=rec.can_batch)
    pol = SearchPolicy()
    pol.replay_only(rec.holds)      # what the loop does when it replays a recording
    seed = pol.seed(ctx)
    assert rec.holds(seed.source, shape, "f32")
    assert seed.pick is None and "predicted" in seed.plan
    batching = SearchPolicy().seed(TrackContext(track="t", shape=shape, acc="f32", baseline="cublaslt_autotune",
                                                step=0, arch="sm_90a", can_batch=True))
    assert batching.pick is not None and batching.source is None
    # without the filter, the model's favourite of today's catalog may be one the recording never timed
    assert SearchPolicy().candidates(shape, "f32", "sm_90a") != pol.candidates(shape, "f32", "sm_90a")


@pytest.mark.skipif(not TIMINGS.exists(), reason="H200 timings not recorded yet")
def test_an_incumbent_is_timed_in_the_pick_and_kept_unless_beaten(tmp_path, monkeypatch):
    """``--incumbents``: the configuration a winners file holds for the shape is timed beside the
    pick's choice (here one the model ranks last, so choose() alone would not time it); it wins
    when it is the fastest of the request, and loses to a faster one."""
    import l2tui.agent.policies.search as search

    timed = timed_names()
    full = search.catalog
    monkeypatch.setattr(search, "catalog", lambda acc, arch, dtype="fp16": [c for c in full(acc, arch, dtype) if c.name in timed])
    shape = Shape(4096, 4096, 4096)
    times = fixture_times()[(4096, 4096, 4096)]
    ranked = [c for c in ranked_for(shape) if c.name in timed]
    chosen = choose(ranked, shape, 2, kinds=False, siblings=False)
    outsider = next(c for c in reversed(ranked) if c not in chosen)
    for fast in (True, False):
        rec = recorded_file(tmp_path, [shape])
        doc = json.loads(rec.read_text())
        key = record_key(outsider.source(), shape, "f32")
        best_other = min(times[c.name] for c in chosen)
        doc["records"][key]["times_ms"]["candidate"] = best_other * (0.5 if fast else 2.0)
        rec.write_text(json.dumps(doc))
        s = Session.create(tmp_path / f"s{fast}", config={"sweep": {}}, gpu={}, versions={})
        cfg = SweepConfig(shapes=[shape], steps=0, seeds=2, arch="sm_90a", build_batches=False, pick_kinds=False,
                          incumbents={(shape, "f32"): outsider})
        (res,) = Sweep(cfg, RecordedEvaluator(rec, arch="sm_90a", build=False), session=s, out_dir=s.path,
                       progress=lambda line: None).run()
        names = [Config.from_source(s.get_kernel(e["sha"])).name for e in s.events if e["type"] == "candidate"]
        assert outsider.name in names and res.picked == len(names)
        plans = [e["text"] for e in s.events if e["type"] == "plan"]
        assert any(outsider.name in p for p in plans)
        if fast:
            assert res.best_name == outsider.name
        else:
            assert res.best_name != outsider.name and res.best_ms == pytest.approx(best_other)


def test_the_command_reads_incumbents_from_a_winners_file_and_refuses_a_bad_one(tmp_path, capsys):
    from l2tui.cli import main
    from l2tui.commands.sweep import load_incumbents

    held = load_incumbents(["results/h200/winners-f32.json"], "sm_90a")
    assert len(held) == 1000 and held[(Shape(64, 64, 64), "f32")].name == "tiny-16x64x64-w1x4x2-nopdl"
    # a family that does not run on the arch is left out, not timed to fail
    assert all(c.family not in ("sm90_cutlass", "sm90_ksplit") for c in load_incumbents(
        ["results/h200/winners-f32.json"], "sm_80").values())
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    rc = main(["sweep", "--shapes", "64x64x64", "--recorded", str(bad), "--incumbents", str(bad),
               "--session", str(tmp_path / "s")])
    err = capsys.readouterr().err
    assert rc != 0 and "--incumbents" in err and "not JSON" in err and "Traceback" not in err


@pytest.mark.skipif(not TIMINGS.exists(), reason="H200 timings not recorded yet")
def test_also_times_named_configurations_in_every_pick_where_they_run(tmp_path, monkeypatch):
    """``--also``: named catalog configurations are timed on every track beside the pick (here one
    the model ranks last, with no seeds at all), win when fastest, and are left out of shapes
    their family cannot run (K not a multiple of 8 for TMA)."""
    import l2tui.agent.policies.search as search

    timed = timed_names()
    full = search.catalog
    monkeypatch.setattr(search, "catalog", lambda acc, arch, dtype="fp16": [c for c in full(acc, arch, dtype) if c.name in timed])
    shape = Shape(4096, 4096, 4096)
    ranked = [c for c in ranked_for(shape) if c.name in timed]
    outsider = next(c for c in reversed(ranked) if c.family == "sm90_cutlass")
    rec = recorded_file(tmp_path, [shape])
    doc = json.loads(rec.read_text())
    doc["records"][record_key(outsider.source(), shape, "f32")]["times_ms"]["candidate"] = 1e-6
    rec.write_text(json.dumps(doc))
    s = Session.create(tmp_path / "s", config={"sweep": {}}, gpu={}, versions={})
    cfg = SweepConfig(shapes=[shape], steps=0, seeds=0, arch="sm_90a", build_batches=False, pick_kinds=False,
                      also={"f32": (outsider,)})
    (res,) = Sweep(cfg, RecordedEvaluator(rec, arch="sm_90a", build=False), session=s, out_dir=s.path,
                   progress=lambda line: None).run()
    names = [Config.from_source(s.get_kernel(e["sha"])).name for e in s.events if e["type"] == "candidate"]
    assert outsider.name in names and res.best_name == outsider.name
    assert any(outsider.name in e["text"] for e in s.events if e["type"] == "plan")
    # the proposal says why it is timed; a shape the family cannot run does not get it
    sw = Sweep(SweepConfig(shapes=[Shape(64, 64, 100)], steps=0, seeds=0, arch="sm_90a", build_batches=False,
                           pick_kinds=False, also={"f32": (outsider,)}),
               RecordedEvaluator(rec, arch="sm_90a", build=False), session=Session.create(
                   tmp_path / "s2", config={"sweep": {}}, gpu={}, versions={}), out_dir=tmp_path / "s2",
               progress=lambda line: None)
    def plans(sh: Shape) -> list[str]:
        return [p.plan for p in sw._pick_proposals(TrackContext(track="t", shape=sh, acc="f32",
                                                                baseline="cublaslt_autotune", step=0, arch="sm_90a"))]

    assert any(outsider.name in p and "named by --also" in p for p in plans(shape))
    assert all(outsider.name not in p for p in plans(Shape(64, 64, 100)))


def test_also_resolves_catalog_names_and_refuses_an_unknown_one_in_one_line(tmp_path, capsys):
    from l2tui.cli import main
    from l2tui.commands.sweep import resolve_also
    from l2tui.errors import UserError

    name = "sm90-64x64x64-c1x1-ws-p-st8-noc-nopdl"
    got = resolve_also([name, name], ("f32",), "sm_90a")
    assert [c.name for c in got["f32"]] == [name]
    with pytest.raises(UserError, match="does not run on sm_80"):
        resolve_also([name], ("f32",), "sm_80")
    rc = main(["sweep", "--shapes", "64x64x64", "--also", "sm90-64x64x64-c1x1-ws-p-st9-noc-nopdl",
               "--recorded", str(tmp_path / "none.json"), "--session", str(tmp_path / "s")])
    err = capsys.readouterr().err.strip()
    assert rc != 0 and "--also sm90-64x64x64-c1x1-ws-p-st9-noc-nopdl" in err and "closest" in err
    assert "Traceback" not in err and len(err.splitlines()) == 1


@pytest.mark.skipif(not TIMINGS.exists(), reason="H200 timings not recorded yet")
def test_max_seconds_stops_starting_tracks_and_resume_finishes_them(tmp_path, monkeypatch):
    import l2tui.agent.policies.search as search

    timed = timed_names()
    full = search.catalog
    monkeypatch.setattr(search, "catalog", lambda acc, arch, dtype="fp16": [c for c in full(acc, arch, dtype) if c.name in timed])
    shapes = [Shape(4096, 4096, 4096), Shape(64, 64, 16384)]
    rec = recorded_file(tmp_path, shapes)
    s = Session.create(tmp_path / "s", config={"sweep": {}}, gpu={}, versions={})
    lines: list[str] = []

    def sweep(limit):
        cfg = SweepConfig(shapes=shapes, steps=0, seeds=2, arch="sm_90a", build_batches=False, max_seconds=limit)
        return Sweep(cfg, RecordedEvaluator(rec, arch="sm_90a", build=False), session=s, out_dir=s.path,
                     progress=lines.append)

    first = sweep(0.0)
    assert first.run() == [] and first.left_at_limit == 2
    assert any("2 of 2 tracks not started" in line for line in lines)
    assert not [e for e in s.events if e["type"] == "track_added"]
    second = sweep(None)
    assert len(second.run()) == 2 and second.left_at_limit == 0
    assert sorted(json.loads((s.path / RESULTS_FILE).read_text())["tracks"]) == ["4096x4096x4096-f32", "64x64x16384-f32"]


def test_a_negative_max_seconds_is_one_line(tmp_path, capsys):
    from l2tui.cli import main

    assert main(["sweep", "--shapes", "64x64x64", "--max-seconds", "-1", "--session", str(tmp_path / "s")]) != 0
    err = capsys.readouterr().err
    assert "--max-seconds must be between 0 and" in err and "Traceback" not in err


class _HeldBuilds:
    """An executor whose builds are instant, except the sources in ``hold``, which wait for
    ``release``; it keeps a cache like harness.build's (a second request of a source is a hit)
    and counts real builds per source. Evaluations: the recording, on one slot."""

    name = "local"

    def __init__(self, evaluator, hold: set[str], release: threading.Event):
        from l2tui.executors.local import LocalExecutor

        self._inner = LocalExecutor(evaluator, jobs=4, gpu={"uuid": H200_UUID, "name": "NVIDIA H200"})
        self.hold, self.release = hold, release
        self.built: collections.Counter = collections.Counter()
        self._lock = threading.Lock()
        self.build_width = 64   # every build at once: the held ones must not block the others

    def build_many(self, sources, *, arch=None, flags=(), progress=None, deadline=None):
        from harness.build import BuildResult

        out = []
        for src in sources:
            with self._lock:
                hit = src in self.built
            if not hit and src in self.hold:
                assert self.release.wait(30), "a held build was never released"
            with self._lock:
                hit = src in self.built
                if not hit:
                    self.built[src] += 1
            out.append(BuildResult(True, "k", None, None, [], "", 0.0 if hit else 2.0, hit, arch or "", []))
        return out

    def slots(self):
        return self._inner.slots()

    def close(self):
        self._inner.close()


@pytest.mark.skipif(not TIMINGS.exists(), reason="H200 timings not recorded yet")
def test_tracks_run_as_their_own_builds_finish_and_each_needed_build_runs_once(tmp_path, monkeypatch):
    """A cold sweep builds only what its picks name, each source once, while tracks run: the
    queue's second track, whose builds are done, runs while the first one's are still held."""
    import l2tui.agent.policies.search as search

    timed = timed_names()
    full = search.catalog
    monkeypatch.setattr(search, "catalog", lambda acc, arch, dtype="fp16": [c for c in full(acc, arch, dtype) if c.name in timed])
    big, small = Shape(4096, 4096, 4096), Shape(64, 64, 16384)
    rec = recorded_file(tmp_path, [big, small])
    cfg = SweepConfig(shapes=[big, small], steps=0, seeds=3, arch="sm_90a")
    probe = Sweep(cfg, None, progress=lambda line: None)
    probe._track_of = {"big": (big, "f32"), "small": (small, "f32")}
    need_big, need_small = set(probe._plan("big")), set(probe._plan("small"))
    only_big = need_big - need_small
    assert only_big, "the two shapes' picks should differ"

    release = threading.Event()

    class Releasing(RecordedEvaluator):
        def evaluate(self, source, shape, *a, **kw):
            if shape == small:
                release.set()      # the small track is running: let the big one's builds finish
            return super().evaluate(source, shape, *a, **kw)

    ex = _HeldBuilds(Releasing(rec, arch="sm_90a", build=False), only_big, release)
    s = Session.create(tmp_path / "s", config={"sweep": {}}, gpu={}, versions={})
    out = Sweep(cfg, session=s, out_dir=s.path, progress=lambda line: None, executor=ex).run()
    assert [r.track for r in out] == ["64x64x16384-f32", "4096x4096x4096-f32"]
    assert [e["track"] for e in s.events if e["type"] == "track_added"] == ["64x64x16384-f32", "4096x4096x4096-f32"]
    # only what the picks name, each once; nothing else of the catalog
    assert set(ex.built) == need_big | need_small and set(ex.built.values()) == {1}
    run = Sweep(cfg, session=s, out_dir=s.path, progress=lambda line: None, executor=ex)
    assert run.run() == []     # resumed with every track done: nothing planned, nothing built
    assert run.builds is None


def _fast_family_constants(tmp_path, family: str):
    """The committed constants with ``family`` made absurdly fast: the model must rank it first."""
    from dataclasses import replace

    from l2tui.agent.policies.costmodel import load_params

    p = load_params()
    fast = replace(p.families[family], fixed_us=0.01, peak_tflops=1e6, ktile_latency_us=0.001, fill_ktiles=0.0)
    doc = {"families": {k: dict(vars(v)) for k, v in {**p.families, family: fast}.items()},
           "bandwidth_gbs": p.bandwidth_gbs, "intensity_half": p.intensity_half, "reread_gbs": p.reread_gbs}
    path = tmp_path / "constants.json"
    path.write_text(json.dumps(doc))
    return path


def test_a_sweep_ranks_with_the_cost_model_constants_it_is_given(tmp_path):
    from l2tui.agent.policies.costmodel import read_params

    shape = Shape(4096, 4096, 4096)
    picks = {}
    for label, params in (("committed", None), ("fast-sm80", read_params(_fast_family_constants(tmp_path, "sm80_mma")))):
        sw = Sweep(SweepConfig(shapes=[shape], steps=0, seeds=3, arch="sm_90a", pick_kinds=False, cost_params=params),
                   None, progress=lambda line: None)
        sw._track_of = {"t": (shape, "f32")}
        picks[label] = [Config.from_source(src).family for src in sw._plan("t")]
    assert "sm80_mma" not in picks["committed"][:3]
    assert picks["fast-sm80"][:3] == ["sm80_mma"] * 3


def test_the_command_records_its_cost_model_and_refuses_a_bad_or_changed_one(tmp_path, capsys, monkeypatch):
    from l2tui.cli import main

    monkeypatch.setenv("L2TUI_CACHE_DIR", str(tmp_path / "cache"))
    rec = recorded_file(tmp_path, [Shape(64, 64, 64)], ["sm80_mma"])
    base = ["sweep", "--shapes", "64x64x64", "--recorded", str(rec), "--families", "sm80_mma", "--arch", "sm_80",
            "--steps", "0", "--max-seconds", "0"]
    bad = tmp_path / "bad.json"
    for content, why in (("{not json", "is not JSON"), ('{"families": {"sm80_mma": {"fixed_us": "x"}}}', "not a constants file"),
                         ("[1, 2]", "not a constants file")):
        bad.write_text(content)
        assert main([*base, "--cost-model", str(bad), "--session", str(tmp_path / "s-bad")]) != 0
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "--cost-model" in err[0] and why in err[0] and "Traceback" not in err[0]
        assert not (tmp_path / "s-bad").exists()
    assert main([*base, "--cost-model", str(tmp_path / "missing.json"), "--session", str(tmp_path / "s-bad")]) != 0
    assert "cannot read cost-model file" in capsys.readouterr().err

    good = _fast_family_constants(tmp_path, "sm80_mma")
    sdir = tmp_path / "s"
    assert main([*base, "--cost-model", str(good), "--session", str(sdir)]) == 0
    capsys.readouterr()
    saved = Session.open(sdir).config["sweep"]
    assert saved["cost_model"] == str(good) and len(saved["cost_model_sha256"]) == 64
    good.write_text(good.read_text().replace('"fixed_us": 0.01', '"fixed_us": 0.02'))
    assert main(["sweep", "--session", str(sdir), "--resume", "--recorded", str(rec)]) != 0
    err = capsys.readouterr().err
    assert "not the constants this sweep started with" in err and "Traceback" not in err


def test_an_incumbent_launched_with_pdl_is_timed_beside_its_no_pdl_twin(tmp_path, monkeypatch):
    """A sweep times per call, where the no-PDL launch is the faster one: an incumbent launched with
    PDL is timed together with its twin (which the per-call pool holds instead of it), and the
    twin takes the shape when it is faster."""
    import l2tui.agent.policies.search as search
    from harness.families import no_pdl_twin

    timed = timed_names()
    full = search.catalog
    monkeypatch.setattr(search, "catalog", lambda acc, arch, dtype="fp16": [c for c in full(acc, arch, dtype) if c.name in timed])
    shape = Shape(4096, 4096, 4096)
    times = fixture_times()[(4096, 4096, 4096)]
    held = next(c for c in catalog("f32", "sm_90a") if c.name in times and c.geometry().pdl)
    twin = Config.of(held.family, no_pdl_twin(held.family, held.knob_dict))
    # the recording predates the twins: the twin's record is the incumbent's, twice as fast as anything
    rec = recorded_file(tmp_path, [shape])
    doc = json.loads(rec.read_text())
    row = json.loads(json.dumps(doc["records"][record_key(held.source(), shape, "f32")]))
    row["times_ms"]["candidate"] = 0.5 * min(v for k, v in times.items() if k != "cublaslt_autotune")
    doc["records"][record_key(twin.source(), shape, "f32")] = row
    rec.write_text(json.dumps(doc))
    s = Session.create(tmp_path / "s", config={"sweep": {}}, gpu={}, versions={})
    cfg = SweepConfig(shapes=[shape], steps=0, seeds=2, arch="sm_90a", build_batches=False, pick_kinds=False,
                      incumbents={(shape, "f32"): held})
    (res,) = Sweep(cfg, RecordedEvaluator(rec, arch="sm_90a", build=False), session=s, out_dir=s.path,
                   progress=lambda line: None).run()
    names = [Config.from_source(s.get_kernel(e["sha"])).name for e in s.events if e["type"] == "candidate"]
    assert held.name in names and twin.name in names
    # nothing else the pick timed is launched with PDL where a twin exists
    others = [Config.from_source(s.get_kernel(e["sha"])) for e in s.events if e["type"] == "candidate"]
    assert all(not c.geometry().pdl for c in others if c != held)
    plans = [e["text"] for e in s.events if e["type"] == "plan"]
    assert any(twin.name in p for p in plans)
    assert res.best_name == twin.name
    # the pick's own reason for timing it (what an LLM-style RL row reads)
    sweep = Sweep(cfg, RecordedEvaluator(rec, arch="sm_90a", build=False), progress=lambda line: None)
    props = sweep._pick_proposals(TrackContext(track="t", shape=shape, acc="f32", baseline="cublaslt_autotune",
                                               step=0, arch="sm_90a"))
    assert any(twin.name in p.plan and "without PDL" in p.plan for p in props)


def test_the_search_policy_times_no_pdl_twins_per_call_and_both_launches_back_to_back():
    from l2tui.agent.policies import make_policy
    from l2tui.agent.policies.pick import token_pair
    from l2tui.agent.policies.search import SearchPolicy
    from l2tui.config import Config as L2Config

    shape = Shape(1024, 1024, 1024)
    per_call = SearchPolicy(arch="sm_90a").candidates(shape, "f32", "sm_90a")
    both = SearchPolicy(arch="sm_90a", launch="both").candidates(shape, "f32", "sm_90a")
    # the catalog entries that serve the shape, of the families verified on a GPU (Family.verified_on_gpu),
    # less the decode pairs (not a decode GEMM)
    served = [c for c in catalog("f32", "sm_90a")
              if applicable(c.family, shape, "sm_90a") and get_family(c.family).verified_on_gpu and not token_pair(c)]
    assert both == served and per_call == per_call_pool(both)
    assert not any(c.geometry().pdl for c in per_call)
    # the refinement never turns PDL back on when the reward is per call
    start = next(c for c in per_call if c.family == "sm90_cutlass" and c.knob_dict["PDL"] == "0")
    moves = SearchPolicy(arch="sm_90a").neighbours(start, shape, "f32", "sm_90a")
    assert moves and not any(m.config.geometry().pdl for m in moves)
    assert any(m.changes == {"PDL": "1"} for m in SearchPolicy(arch="sm_90a", launch="both").neighbours(
        start, shape, "f32", "sm_90a"))
    with pytest.raises(ValueError, match="launch"):
        SearchPolicy(launch="sometimes")
    # the [harness] timing decides for `l2tui run`: back to back keeps both launches
    assert make_policy("search", L2Config()).launch == "per_call"
    assert make_policy("search", L2Config().with_overrides({"harness.timing": "both"})).launch == "per_call"
    assert make_policy("search", L2Config().with_overrides({"harness.timing": "chained"})).launch == "both"


def test_the_models_best_cluster_pair_is_timed_on_every_shape():
    """The model has no multicast term, so its best pair of CTAs sharing an operand (other than
    the 64x64 pairs, a kind of their own) is timed whatever its rank."""
    for shape in (Shape(2048, 2048, 64), Shape(128, 12288, 1024), Shape(4096, 4096, 4096)):
        ranked = ranked_for(shape)
        pairs = [c for c in ranked if c.family == "sm90_cutlass" and c.geometry().cluster == 2
                 and (c.knob_dict["TILE_M"], c.knob_dict["TILE_N"]) != ("64", "64")]
        assert pairs, shape
        chosen = choose(ranked, shape, 4, siblings=False)
        assert pairs[0] in chosen, (shape, pairs[0].name)


def test_a_family_no_pick_has_timed_is_a_kind_not_a_top_rank():
    """sm90_cutlass_t ranks with sm90_cutlass's constants until timed: where the model puts one of
    its configurations first, the pick still times the model's top proven configurations and adds
    the new family's best beside them."""
    shape = Shape(128, 2048, 4096)
    ranked = ranked_for(shape)
    assert ranked[0].family == "sm90_cutlass_t" and "sm90_cutlass_t" in SIBLING
    chosen = choose(ranked, shape, 4, siblings=False)
    top = [c for c in chosen[:4]]
    assert all(c.family != "sm90_cutlass_t" for c in top)
    assert ranked[0] in chosen[4:]
    assert choose(ranked, shape, 4, kinds=False, siblings=False) == top


def test_the_decode_pairs_are_candidates_on_decode_gemms_only():
    """The model would price an 8-row pair as the best kernel of many small shapes (its CTAs fill
    the SMs); it is a decode kernel, so the search's pool offers the pairs on decode GEMMs only."""
    from l2tui.agent.policies.pick import token_pair
    from l2tui.agent.policies.search import SearchPolicy

    pol = SearchPolicy(seed=0, width=3, budget=0, arch="sm_90a")
    pairs = {c.name for c in catalog("f32", "sm_90a") if token_pair(c)}
    assert len(pairs) == 4
    for shape in (Shape(16, 4096, 4096), Shape(1, 6144, 4096), Shape(32, 4608, 3584)):
        assert pairs <= {c.name for c in pol.candidates(shape, "f32", "sm_90a")}, shape
    for shape in (Shape(64, 64, 128), Shape(256, 256, 1024), Shape(16, 512, 4096), Shape(4096, 4096, 4096)):
        assert not pairs & {c.name for c in pol.candidates(shape, "f32", "sm_90a")}, shape
