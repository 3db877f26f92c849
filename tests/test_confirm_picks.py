"""tools/confirm_picks.py: a changed winner survives only if its own bench run liked it better."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _tool():
    spec = importlib.util.spec_from_file_location("confirm_picks", ROOT / "tools" / "confirm_picks.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _pick(*rows, configs=None):
    return {"mode": "pick", "hung": [], "configs": configs or {},
            "timings": [{"shape": list(s), "times_ms": {w: 1.0}, "winner": w} for s, w in rows]}


def _bench(git, *rows):
    return {"meta": {"git": git}, "rows": [{"m": s[0], "n": s[1], "k": s[2],
                                             "times_ms": {"l2": mine, "cublaslt_autotune": ref}}
                                            for s, mine, ref in rows]}


A, B, C = (64, 64, 512), (128, 64, 1024), (256, 256, 256)


def _files(tmp_path):
    earlier = _pick((A, "old-a"), (B, "old-b"), (C, "same"), configs={"old-a": {"f": 1}, "old-b": {"f": 2}})
    later = _pick((A, "new-a"), (B, "new-b"), (C, "same"), configs={"new-a": {"f": 3}, "new-b": {"f": 4}})
    # the GPU is 10 % slower in the later run (cuBLASLt too): only the ratios may decide
    eb = _bench("e1", (A, 2.0, 3.0), (B, 4.0, 4.4), (C, 1.0, 1.0))
    lb = _bench("l1", (A, 2.4, 3.3), (B, 3.0, 4.84), (C, 1.1, 1.1))
    paths = []
    for name, doc in (("e.json", earlier), ("eb.json", eb), ("l.json", later), ("lb.json", lb)):
        (tmp_path / name).write_text(json.dumps(doc))
        paths.append(str(tmp_path / name))
    return paths


def test_keeps_the_winner_with_the_better_speedup_in_its_own_run(tmp_path):
    out = tmp_path / "out.json"
    assert _tool().main([*_files(tmp_path), "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    # A: earlier 1.50x, later 1.375x -> earlier; B: earlier 1.10x, later 1.61x -> later; C unchanged
    assert [r["winner"] for r in doc["timings"]] == ["old-a", "new-b", "same"]
    assert set(doc["configs"]) == {"old-a", "new-b"}
    dec = {tuple(d["shape"]): d["kept"] for d in doc["confirm"]["decisions"]}
    assert dec == {A: "earlier", B: "later"}
    assert doc["confirm"]["earlier_bench"] == "e1" and doc["confirm"]["later_bench"] == "l1"


def test_margin_leaves_near_ties_to_the_later_pick(tmp_path):
    out = tmp_path / "out.json"
    assert _tool().main([*_files(tmp_path), "--out", str(out), "--margin", "0.2"]) == 0
    assert [r["winner"] for r in json.loads(out.read_text())["timings"]] == ["new-a", "new-b", "same"]


def test_min_gain_keeps_the_earlier_winner_unless_the_later_clears_the_noise(tmp_path):
    out = tmp_path / "out.json"
    # B: later 1.613x against earlier 1.10x (+47 %): kept with --min-gain 0.4, not with 0.5
    assert _tool().main([*_files(tmp_path), "--out", str(out), "--min-gain", "0.4"]) == 0
    doc = json.loads(out.read_text())
    assert [r["winner"] for r in doc["timings"]] == ["old-a", "new-b", "same"]
    assert doc["confirm"]["min_gain"] == 0.4
    assert _tool().main([*_files(tmp_path), "--out", str(out), "--min-gain", "0.5"]) == 0
    assert [r["winner"] for r in json.loads(out.read_text())["timings"]] == ["old-a", "old-b", "same"]
    with pytest.raises(SystemExit, match="not both"):
        _tool().main([*_files(tmp_path), "--out", str(out), "--min-gain", "0.1", "--margin", "0.1"])
    with pytest.raises(SystemExit, match=">= 0"):
        _tool().main([*_files(tmp_path), "--out", str(out), "--min-gain", "-0.1"])


def test_a_shape_missing_from_a_bench_keeps_the_later_winner():
    tool = _tool()
    doc = tool.confirm(_pick((A, "old")), _bench("e", (B, 1.0, 1.0)), _pick((A, "new")), _bench("l", (A, 9.0, 1.0)))
    assert doc["timings"][0]["winner"] == "new" and doc["confirm"]["decisions"][0]["earlier_speedup"] is None


def test_bad_inputs_are_one_line_errors(tmp_path):
    e, eb, lat, lb = _files(tmp_path)
    (tmp_path / "torn.json").write_text('{"timings": [')
    with pytest.raises(SystemExit, match="cannot read"):
        _tool().main([str(tmp_path / "torn.json"), eb, lat, lb, "--out", str(tmp_path / "o.json")])
    with pytest.raises(SystemExit, match="not a pick file"):
        _tool().main([eb, eb, lat, lb, "--out", str(tmp_path / "o.json")])
    with pytest.raises(SystemExit, match="no shape timed"):
        _tool().main([e, eb, lat, lb, "--out", str(tmp_path / "o.json"), "--label", "nope"])
    assert not (tmp_path / "o.json").exists()


def test_tools_read_gzip_compressed_picks(tmp_path):
    """Superseded pick files are kept as .json.gz; the tools read them like plain JSON."""
    import gzip
    import sys

    sys.path.insert(0, str(ROOT / "tools"))
    from jsonio import read_json

    doc = {"mode": "pick", "timings": [{"shape": [64, 64, 64], "winner": "x", "times_ms": {"x": 0.001}}]}
    plain, packed = tmp_path / "p.json", tmp_path / "p.json.gz"
    plain.write_text(json.dumps(doc))
    with gzip.open(packed, "wt", encoding="utf-8") as fh:
        json.dump(doc, fh)
    assert read_json(plain) == read_json(packed) == doc


def test_one_ab_bench_file_gives_both_speedups(tmp_path):
    """Both winners timed in one run under two labels (l2tui bench --kernels OLD --label incumbent
    --kernels NEW --label l2): the file is given twice and each side reads its own label."""
    earlier = _pick((A, "old-a"), (B, "old-b"), configs={"old-a": {"f": 1}, "old-b": {"f": 2}})
    later = _pick((A, "new-a"), (B, "new-b"), configs={"new-a": {"f": 3}, "new-b": {"f": 4}})
    ab = {"meta": {"git_rev": "ab1"}, "rows": [
        {"m": A[0], "n": A[1], "k": A[2], "times_ms": {"incumbent": 2.0, "l2": 1.9, "cublaslt_autotune": 3.0}},
        {"m": B[0], "n": B[1], "k": B[2], "times_ms": {"incumbent": 4.0, "l2": 3.0, "cublaslt_autotune": 4.4}}]}
    paths = []
    for name, doc in (("e.json", earlier), ("ab.json", ab), ("l.json", later)):
        (tmp_path / name).write_text(json.dumps(doc))
        paths.append(str(tmp_path / name))
    out = tmp_path / "out.json"
    args = [paths[0], paths[1], paths[2], paths[1], "--out", str(out), "--earlier-label", "incumbent",
            "--later-label", "l2", "--min-gain", "0.1"]
    assert _tool().main(args) == 0
    doc = json.loads(out.read_text())
    # A: 1.9 against 2.0 is 5 % (under --min-gain 0.1): the incumbent stays; B: 33 % faster: the new one
    assert [r["winner"] for r in doc["timings"]] == ["old-a", "new-b"]
    conf = doc["confirm"]
    assert (conf["earlier_label"], conf["later_label"]) == ("incumbent", "l2")
    assert conf["earlier_bench"] == conf["later_bench"] == "ab1"
    with pytest.raises(SystemExit, match="no shape timed for both 'nope'"):
        _tool().main([*args[:6], "--earlier-label", "nope", "--later-label", "l2"])
