"""tools/calibrate_costmodel.py: one-line errors on bad input, and a dry run that writes nothing."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _tool():
    spec = importlib.util.spec_from_file_location("calibrate_costmodel", ROOT / "tools" / "calibrate_costmodel.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_missing_and_empty_timings_are_one_line_errors(tmp_path):
    with pytest.raises(SystemExit, match="cannot read the timings"):
        _tool().main([str(tmp_path / "missing.json")])
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps({"mode": "pick", "timings": [], "configs": {}}))
    with pytest.raises(SystemExit, match="no timings in"):
        _tool().main([str(empty)])


def test_dry_run_leaves_the_calibration_file_alone(capsys):
    tool = _tool()
    before = tool.CALIBRATED_FILE.read_text()
    fixture = ROOT / "tests" / "fixtures" / "h200_timings" / "swizzle_pairs.json"
    assert tool.main([str(fixture), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "fitted:" in out and "current:" in out and "dry run: nothing written" in out
    assert tool.CALIBRATED_FILE.read_text() == before


def _session_with_timings(path: Path) -> tuple[Path, dict]:
    """A session folder written by the Session API as a sweep's pick writes it: two shapes, three
    catalog configurations each, per call; one back-to-back event and one hand-written kernel
    that must not be read as a configuration."""
    from harness.families import catalog
    from l2tui import events as ev
    from l2tui.session import Session

    s = Session.create(path, config={"sweep": {}}, gpu={"name": "NVIDIA H200", "uuid": "GPU-1"}, versions={})
    cfgs = catalog("f32", "sm_90a")[:3]
    want: dict = {}
    for shape in ([64, 64, 64], [4096, 4096, 4096]):
        track = "x".join(map(str, shape)) + "-f32"
        s.append(ev.TRACK_ADDED, track=track, shape=shape, acc="f32", baseline="cublaslt_autotune", gpu="GPU-1")
        for i, c in enumerate(cfgs):
            sha = s.put_kernel(c.source())
            ms = 0.01 * (i + 1) * shape[0] / 64
            s.append(ev.TIMED, track=track, step=0, sha=sha, mode="offline", timing="isolated",
                     times_ms={"candidate": ms, "cublaslt_autotune": 0.02}, baseline="cublaslt_autotune")
            want[(tuple(shape), c.name)] = ms
        s.append(ev.TIMED, track=track, step=0, sha=s.put_kernel(cfgs[0].source()), mode="offline", timing="chained",
                 times_ms={"candidate": 123.0}, baseline="cublaslt_autotune")
        s.append(ev.TIMED, track=track, step=1, sha=s.put_kernel("// hand written\n__global__ void k() {}\n"),
                 mode="offline", timing="isolated", times_ms={"candidate": 1e-6}, baseline="cublaslt_autotune")
    s.close()
    return path, want


def test_a_sweep_session_is_read_as_per_call_timings_and_saved(tmp_path, capsys):
    from l2tui.agent.policies.costmodel import records_of
    from l2tui.agent.policies.timings import from_session

    folder, want = _session_with_timings(tmp_path / "s")
    doc = from_session(folder)
    assert doc["mode"] == "per call" and doc["env"]["gpu"] == "NVIDIA H200" and doc["env"]["date"].startswith("20")
    got = {(tuple(r["shape"]), n): ms for r in doc["timings"] for n, ms in r["times_ms"].items() if n in doc["configs"]}
    assert got == want                                    # no back-to-back time, no hand-written kernel
    assert all(r["times_ms"]["cublaslt_autotune"] == 0.02 for r in doc["timings"])
    assert len(records_of(doc)) == len(want)
    assert from_session(folder, "chained")["mode"] == "back to back"
    # the tool reads the folder, fits, and saves the timings it read (dry run: the model stays)
    tool = _tool()
    before = tool.CALIBRATED_FILE.read_text()
    out = tmp_path / "percall.json"
    assert tool.main([str(folder), "--save-timings", str(out), "--dry-run"]) == 0
    assert "6 timings" in capsys.readouterr().out
    assert json.loads(out.read_text())["timings"] == doc["timings"]
    assert tool.CALIBRATED_FILE.read_text() == before
    with pytest.raises(SystemExit, match="not a session folder"):
        tool.main([str(tmp_path)])


def _doc(env: dict, rows: list, configs: dict) -> dict:
    return {"mode": "pick", "env": env, "configs": configs, "timings": rows}


def test_inputs_merge_by_shape_the_later_winning_whole():
    """A shape two inputs timed keeps the later input's row only (not a mix of two requests);
    shapes of one input stay; each row names its round; env keeps what the rounds share."""
    tool = _tool()
    cfg = {"a": {"family": "tiny_mma", "knobs": {"BM": "16"}}, "b": {"family": "tiny_mma", "knobs": {"BM": "32"}}}
    old = _doc({"gpu": "H200", "git_rev": "r1"},
               [{"shape": [64, 64, 64], "acc": "f32", "times_ms": {"a": 1.0, "b": 2.0}},
                {"shape": [128, 64, 64], "acc": "f32", "times_ms": {"a": 3.0}}], cfg)
    new = _doc({"gpu": "H200", "git_rev": "r2"},
               [{"shape": [64, 64, 64], "acc": "f32", "times_ms": {"b": 0.5}}], {"b": cfg["b"]})
    merged = tool.one_document(tool.merge_docs([old, new]))
    rows = {tuple(t["shape"]): t for t in merged["timings"]}
    assert rows[(64, 64, 64)]["times_ms"] == {"b": 0.5} and rows[(64, 64, 64)]["round"] == 2
    assert rows[(128, 64, 64)]["times_ms"] == {"a": 3.0} and rows[(128, 64, 64)]["round"] == 1
    assert merged["env"]["gpu"] == "H200" and merged["env"]["git_rev"] == "r1; r2"
    assert [e["git_rev"] for e in merged["env"]["rounds"]] == ["r1", "r2"]


def test_inputs_united_keep_every_configuration_any_input_timed():
    """``--merge union``: a shape two inputs timed keeps every configuration either timed, with the
    later input's time where both did; rows keep their round."""
    tool = _tool()
    cfg = {"a": {"family": "tiny_mma", "knobs": {"BM": "16"}}, "b": {"family": "tiny_mma", "knobs": {"BM": "32"}},
           "c": {"family": "tiny_mma", "knobs": {"BM": "64"}}}
    old = _doc({"git_rev": "r1"}, [{"shape": [64, 64, 64], "acc": "f32", "times_ms": {"a": 1.0, "b": 2.0, "base": 9.0}},
                                   {"shape": [128, 64, 64], "acc": "f32", "times_ms": {"a": 3.0}}], cfg)
    new = _doc({"git_rev": "r2"}, [{"shape": [64, 64, 64], "acc": "f32", "times_ms": {"b": 0.5, "c": 0.7, "base": 8.0}}],
               {"b": cfg["b"], "c": cfg["c"]})
    kept = tool.unite_docs([old, new])
    times = {}
    for d in kept:
        for t in d["timings"]:
            for n, v in t["times_ms"].items():
                assert (tuple(t["shape"]), n) not in times      # every time once
                times[(tuple(t["shape"]), n)] = (v, t["round"])
    assert times == {((64, 64, 64), "a"): (1.0, 1), ((64, 64, 64), "b"): (0.5, 2), ((64, 64, 64), "c"): (0.7, 2),
                     ((64, 64, 64), "base"): (8.0, 2), ((128, 64, 64), "a"): (3.0, 1)}
    assert tool.unite_docs([old]) == [old]


def test_the_command_fits_on_the_union_and_says_so_in_the_file(tmp_path, capsys):
    tool = _tool()
    fixture = ROOT / "tests" / "fixtures" / "h200_timings" / "swizzle_pairs.json"
    out = tmp_path / "cm.json"
    assert tool.main([str(fixture), str(fixture), "--merge", "union", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["merge"] == "union" and doc["fitted_on"] == ["swizzle_pairs.json"] * 2


def test_a_name_with_other_knobs_in_two_inputs_is_refused():
    tool = _tool()
    a = _doc({}, [{"shape": [64, 64, 64], "acc": "f32", "times_ms": {"x": 1.0}}],
             {"x": {"family": "tiny_mma", "knobs": {"PDL": "0"}}})
    b = _doc({}, [{"shape": [128, 64, 64], "acc": "f32", "times_ms": {"x": 1.0}}],
             {"x": {"family": "tiny_mma", "knobs": {"PDL": "1"}}})
    with pytest.raises(ValueError, match="configuration x has other knobs"):
        tool.one_document(tool.merge_docs([a, b]))


def test_out_writes_a_candidate_that_sweep_cost_model_reads_and_leaves_the_committed_file(tmp_path, capsys):
    """``--objective top3 --out FILE``: the candidate constants go to FILE (what ``l2tui sweep
    --cost-model FILE`` reads), the committed calibration stays as it is."""
    from l2tui.agent.policies.costmodel import Params, read_params

    tool = _tool()
    before = tool.CALIBRATED_FILE.read_text()
    fixture = ROOT / "tests" / "fixtures" / "h200_timings" / "swizzle_pairs.json"
    out = tmp_path / "candidate.json"
    assert tool.main([str(fixture), "--objective", "top3", "--out", str(out)]) == 0
    capsys.readouterr()
    assert tool.CALIBRATED_FILE.read_text() == before
    params = read_params(out)
    assert isinstance(params, Params) and params.families
    assert json.loads(out.read_text()).get("objective") == "top3"
