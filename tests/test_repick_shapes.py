"""tools/repick_shapes.py: the shapes a re-pick covers, and a list harness.shapes can read."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from harness.shapes import Shape, resolve_shapes

ROOT = Path(__file__).resolve().parent.parent


def _load(name: str):
    """A script of tools/ as a module (tools/ is not a package)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _tool():
    return _load("repick_shapes")


def _row(m, n, k, l2, lt):
    return {"m": m, "n": n, "k": k, "times_ms": {"l2": l2, "cublaslt_autotune": lt}}


ROWS = [_row(64, 64, 16384, 2.0, 1.0),        # 1 tile, slower
        _row(4096, 4096, 256, 2.0, 1.0),      # 1024 tiles, short K, slower
        _row(4096, 4096, 8192, 2.0, 1.0),     # 1024 tiles, long K, slower
        _row(128, 8192, 4096, 2.0, 1.0),      # 64 tiles, skinny, long K, slower
        _row(8192, 8192, 512, 1.0, 2.0)]      # faster already


def test_criteria_combine():
    sel = _tool().select
    assert sel(ROWS, slower_than="cublaslt_autotune") == [(64, 64, 16384), (4096, 4096, 256), (4096, 4096, 8192),
                                                          (128, 8192, 4096)]
    assert sel(ROWS, slower_than="cublaslt_autotune", min_tiles=33, max_k=1024) == [(4096, 4096, 256)]
    assert sel(ROWS, slower_than="cublaslt_autotune", min_tiles=33, max_k=1024,
               or_min_side_at_most=256) == [(4096, 4096, 256), (128, 8192, 4096)]
    assert sel(ROWS, max_tiles=32, min_k=1024) == [(64, 64, 16384)]


def test_written_list_is_readable_by_the_harness(tmp_path):
    bench = tmp_path / "b.json"
    bench.write_text(json.dumps({"meta": {"git_rev": "abc1234"}, "rows": ROWS}))
    out = tmp_path / "re.shapes"
    assert _tool().main(["--bench", str(bench), "--slower-than", "cublaslt_autotune", "--min-tiles", "33",
                         "--why", "test", "--out", str(out)]) == 0
    first = out.read_text().splitlines()[0]
    assert first.startswith("# 3 shapes") and "abc1234" in first and "min_tiles=33" in first
    assert resolve_shapes([str(out)]) == [Shape(4096, 4096, 256), Shape(4096, 4096, 8192), Shape(128, 8192, 4096)]


def test_the_pick_always_times_a_split_reduce_config_only_where_it_splits_and_a_cluster_of_four():
    """tools/sweep_gpu.py: besides the model's top-k, the pick times the best match of each kind."""
    mod = _load("sweep_gpu")
    from harness.families import catalog

    cat = catalog("f32", "sm_90a")

    def picks(shape):
        return [next((c for c in cat if want(c)), None) for want in mod.always_time(shape)]

    few = picks(Shape(64, 64, 16384))
    assert all(c is not None for c in few)
    assert {c.family for c in few[:4]} == {"sm90_cutlass", "sm80_mma", "small_splitk", "tiny_mma"}
    few = few[1:]  # (the kinds below keep their places after the families)
    assert few[3].knob_dict["SCHEDULER"] == "STREAMK" and few[4].knob_dict["SCHEDULE"] == "PINGPONG"
    assert few[5].knob_dict["SCHEDULER"] == "SPLITK_REDUCE"
    big = picks(Shape(8192, 8192, 128))[6]              # enough tiles: only a fixed slice count splits
    assert big is None or big.knob_dict["SPLITS"] != "0"
    assert few[6].family == "sm90_cutlass" and few[6].geometry().cluster >= 4   # no multicast term
    assert few[7].knob_dict["CLUSTER_K"] != "1"         # cluster split-K of the latency family
    assert few[8].geometry().cluster == 2 and few[8].name.startswith("sm90-64x64x64-")  # a 64x64 pair
    assert few[9].family == "tiny_mma" and few[9].knob_dict["WARPS_K"] != "1"  # K over the warps
    assert few[10].knob_dict["SCHEDULER"] == "SPLITK_REDUCE" and few[10].geometry().cluster == 2  # split pairs
    assert picks(Shape(8192, 8192, 128))[11] is None     # (nothing would split there)
    assert few[11].family == "sm90_ksplit"              # the newest family, after the kinds


def test_a_repick_times_each_shapes_earlier_winner_again(tmp_path):
    """--incumbents: the earlier pick's winner per shape (rows without one are not incumbents)."""
    mod = _load("sweep_gpu")
    pick = tmp_path / "pick.json"
    pick.write_text(json.dumps({"timings": [
        {"shape": [64, 64, 64], "winner": "tiny-16x64x64-w1x4", "times_ms": {}},
        {"shape": [128, 64, 64], "winner": None, "times_ms": {}}]}))
    assert mod.incumbents_of(str(pick)) == {(64, 64, 64): "tiny-16x64x64-w1x4"}
    assert mod.incumbents_of(None) == {} and mod.incumbents_of(str(tmp_path / "missing.json")) == {}


def test_the_pick_counts_epilogue_variants_once_and_times_them_together():
    """The cost model cannot tell EPI_TMA from EPI_TMA_NOC: top-k must hold k distinct
    configurations, and every chosen one brings its epilogue siblings along."""
    mod = _load("sweep_gpu")
    from harness.families import catalog, sans_epilogue

    class K:  # what the pick ranks: kernels with a .config
        def __init__(self, c):
            self.config, self.name = c, c.name

    cat = [K(c) for c in catalog("f32", "sm_90a")]
    pp = next(k for k in cat if k.name == "sm90-128x128x64-c1x1-pp-p-st0")
    twin = next(k for k in cat if k.name == "sm90-128x128x64-c1x1-pp-p-st0-noc-e64")
    others = [k for k in cat if k not in (pp, twin)]
    ranked = [pp, twin] + others            # the model ties twins: they come out side by side
    chosen = mod.choose(ranked, Shape(8192, 8192, 256), 3, kinds=False, siblings=False)
    strip = lambda k: sans_epilogue(k.config)  # noqa: E731
    assert len(chosen) == 3 and len({strip(k) for k in chosen}) == 3
    assert pp in chosen and twin not in chosen
    with_sibs = mod.choose(ranked, Shape(8192, 8192, 256), 3, kinds=False, siblings=True)
    names = {k.name for k in with_sibs}
    assert {"sm90-128x128x64-c1x1-pp-p-st0-noc", "sm90-128x128x64-c1x1-pp-p-st0-noc-e64",
            "sm90-128x128x64-c1x1-pp-p-st0-e64"} <= names
    bare = lambda k: tuple(kv for kv in strip(k)[1] if kv[0] != "PDL")  # noqa: E731
    assert {bare(k) for k in with_sibs} == {bare(k) for k in chosen}   # siblings and PDL twins only


@pytest.mark.parametrize("acc", ["f32", "f16"])
def test_every_tma_epilogue_entry_of_the_catalog_has_its_no_source_twin(acc):
    from harness.families import catalog, epilogue_twin

    cat = catalog(acc)
    names = {c.name for c in cat}
    for c in cat:
        k = c.knob_dict
        if c.family != "sm90_cutlass" or k["PDL"] == "0" or k["SCHEDULER"] == "SPLITK":
            continue
        twin = epilogue_twin(k)
        if twin is not None:
            from harness.families import Config

            assert Config.of("sm90_cutlass", twin).name in names, c.name


def test_the_pick_times_the_pdl_twins_of_what_it_chose():
    """PDL is priced as hidden launch latency, but it slows long multi-wave shapes: a chosen
    configuration brings its PDL=0 twin (and the twin's epilogue siblings' twins) along."""
    mod = _load("sweep_gpu")
    from harness.families import catalog, launch_twins

    class K:
        def __init__(self, c):
            self.config, self.name = c, c.name

    cat = [K(c) for c in catalog("f32", "sm_90a")]
    coop = next(k for k in cat if k.name == "sm90-128x256x64-c1x1-coop-p-st0-sw4")
    ranked = [coop] + [k for k in cat if k is not coop]
    names = {k.name for k in mod.choose(ranked, Shape(8192, 8192, 8192), 1, kinds=False, siblings=True)}
    assert names == {"sm90-128x256x64-c1x1-coop-p-st0-sw4", "sm90-128x256x64-c1x1-coop-p-st0-sw4-nopdl",
                     "sm90-128x256x64-c1x1-coop-p-st0-sw4-noc-e64", "sm90-128x256x64-c1x1-coop-p-st0-sw4-noc-e128",
                     "sm90-128x256x64-c1x1-coop-p-st0-sw4-noc-e64-nopdl"}
    twins = launch_twins(coop.config, [k.config for k in cat])
    assert [t.name for t in twins] == ["sm90-128x256x64-c1x1-coop-p-st0-sw4-nopdl"]
    assert names == {k.name for k in mod.choose(ranked, Shape(8192, 8192, 8192), 1, kinds=False, siblings=True)}


def test_time_window_and_speedup_threshold():
    sel = _tool().select
    rows = [_row(64, 64, 64, 0.002, 0.0021),      # 2 us, 1.05x
            _row(1024, 1024, 2048, 0.008, 0.0076),  # 8 us, 0.95x
            _row(4096, 4096, 4096, 0.2, 0.21),      # 200 us, 1.05x
            _row(512, 512, 512, 0.004, 0.0048)]     # 4 us, 1.2x
    assert sel(rows, slower_than="cublaslt_autotune", speedup_below=1.08) == [
        (64, 64, 64), (1024, 1024, 2048), (4096, 4096, 4096)]
    assert sel(rows, slower_than="cublaslt_autotune", speedup_below=1.08, min_us=3, max_us=150) == [(1024, 1024, 2048)]
    assert sel(rows, min_us=3, max_us=150) == [(1024, 1024, 2048), (512, 512, 512)]
    assert sel(rows, slower_than="cublaslt_autotune") == [(1024, 1024, 2048)]  # plain "slower than"


def test_changed_winners_between_two_picks(tmp_path):
    early = {"timings": [{"shape": [64, 64, 64], "winner": "a"}, {"shape": [128, 128, 128], "winner": "b"}]}
    late = {"timings": [{"shape": [128, 128, 128], "winner": "c"}, {"shape": [64, 64, 64], "winner": "a"},
                        {"shape": [256, 256, 256], "winner": "d"}, {"shape": [512, 512, 512], "winner": None}]}
    assert _tool().changed(early, late) == [(128, 128, 128), (256, 256, 256)]
    (tmp_path / "e.json").write_text(json.dumps(early))
    (tmp_path / "l.json").write_text(json.dumps(late))
    out = tmp_path / "c.shapes"
    assert _tool().main(["--changed-from", str(tmp_path / "e.json"), "--changed-to", str(tmp_path / "l.json"),
                         "--out", str(out)]) == 0
    assert out.read_text().splitlines()[0].startswith("# 2 shapes whose winner")
    assert resolve_shapes([str(out)]) == [Shape(128, 128, 128), Shape(256, 256, 256)]
    with pytest.raises(SystemExit, match="go together"):
        _tool().main(["--changed-from", str(tmp_path / "e.json"), "--out", str(out)])
    with pytest.raises(SystemExit, match="cannot read"):
        _tool().main(["--bench", str(tmp_path / "missing.json"), "--out", str(out)])
