"""harness.winners: winners files by configuration name, rendered into per-shape sources.

The committed files are the real input here: rendering them must be deterministic, every
rendered source must be a loadable ABI kernel that the source policy admits, and a folder of
renders must turn back into the same winners file. Bad files give one line, no traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness import winners as W
from harness.__main__ import main as harness_main
from harness.build import check_abi
from harness.source_policy import violations

H200 = Path(__file__).resolve().parents[1] / "results" / "h200"
COMMITTED = [H200 / "winners-f32.json", H200 / "winners-f16.json"]


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: p.name)
def test_committed_file_round_trips_and_renders_abi_kernels_the_policy_admits(path):
    w = W.load(path)
    assert W.dump(w) == path.read_text()  # the committed text is the canonical dump
    first = W.render_sources(w)
    assert first == W.render_sources(W.load(path))  # deterministic
    for name, src in first.items():
        check_abi(src)
        assert violations(src) == [], name
        assert W.sha256(src) == w.configs[name].sha256


def test_render_dir_writes_one_file_per_shape_and_from_dir_reads_it_back(tmp_path):
    src = H200 / "winners-f16.json"
    out = tmp_path / "k"
    assert W.render_dir(src, out) == 100
    files = sorted(out.iterdir())
    assert len(files) == 100 and all(f.suffix == ".cu" and f.stem.count("_") == 2 for f in files)
    w = W.load(src)
    for shape, win in w.by_shape().items():
        assert (out / W.file_name(shape)).read_text() == win.source()
    back = W.from_dir(out, "f16", w.about)
    assert W.dump(back) == src.read_text()


def test_from_dir_refuses_a_hand_edited_source(tmp_path):
    W.render_dir(H200 / "winners-f16.json", tmp_path)
    victim = sorted(tmp_path.iterdir())[0]
    victim.write_text(victim.read_text().replace("extern \"C\"", "// edited\nextern \"C\"", 1))
    with pytest.raises(W.WinnersError, match="byte for byte"):
        W.from_dir(tmp_path, "f16")
    with pytest.raises(W.WinnersError, match="accumulates in f16"):
        W.from_dir(tmp_path, "f32")


def _doc() -> dict:
    return json.loads((H200 / "winners-f16.json").read_text())


def _bad(doc: dict) -> str:
    try:
        W.parse(doc, "w.json")
    except W.WinnersError as e:
        return str(e)
    raise AssertionError("accepted a bad winners document")


def test_bad_documents_get_one_line_each():
    doc = _doc()
    name = next(iter(doc["configs"]))
    cases = []
    cases.append(_bad({**doc, "format": "other"}))
    cases.append(_bad({**doc, "acc": "f64"}))
    renamed = {**doc, "configs": {**doc["configs"], "wrong-name": doc["configs"][name]}}
    cases.append(_bad(renamed))
    knob = {**doc["configs"][name], "knobs": {**doc["configs"][name]["knobs"], "NOPE": "1"}}
    cases.append(_bad({**doc, "configs": {**doc["configs"], name: knob}}))
    cases.append(_bad({**doc, "shapes": {**doc["shapes"], "64x64x64": "absent"}}))
    cases.append(_bad({**doc, "shapes": {"64x64": name}}))
    nosha = {k: v for k, v in doc["configs"][name].items() if k != "sha256"}
    cases.append(_bad({**doc, "configs": {**doc["configs"], name: nosha}}))
    assert "not a winners file" in cases[0] and "its knobs name it" in cases[2]
    assert "unknown knob NOPE" in cases[3] and "not under 'configs'" in cases[4]
    assert all(c.startswith("w.json: ") and "\n" not in c for c in cases)


def test_a_changed_template_is_refused_unless_allowed(tmp_path):
    doc = _doc()
    name = next(iter(doc["configs"]))
    doc["configs"][name]["sha256"] = "0" * 64
    path = tmp_path / "w.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(W.WinnersError, match="no longer renders the measured source"):
        W.render_dir(path, tmp_path / "out")
    assert W.render_dir(path, tmp_path / "out", allow_changed=True) == 100


def test_cli_renders_and_reports_errors_in_one_line(tmp_path, capsys):
    out = tmp_path / "k"
    assert harness_main(["winners", "render", "--winners", str(H200 / "winners-f16.json"), "--out", str(out)]) == 0
    assert capsys.readouterr().out.strip() == f"100 kernels in {out}"
    (tmp_path / "bad.json").write_text("{not json")
    assert harness_main(["winners", "render", "--winners", str(tmp_path / "bad.json"), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("harness: error: ") and "not JSON" in err and err.count("\n") == 1
    (tmp_path / "latin1.json").write_bytes(b'{"acc": "f32", "about": "caf\xe9"}')
    assert harness_main(["winners", "render", "--winners", str(tmp_path / "latin1.json"), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "not a winners file (not UTF-8 text)" in err and err.count("\n") == 1
    (tmp_path / "plain").write_text("a file, not a folder")
    assert harness_main(["winners", "render", "--winners", str(H200 / "winners-f16.json"), "--out", str(tmp_path / "plain")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("harness: error: cannot write the kernels into") and err.count("\n") == 1
    assert harness_main(["winners", "from-dir", "--kernels", str(out), "--acc", "f16", "--out", str(tmp_path / "w.json")]) == 0
    assert W.load(tmp_path / "w.json").shapes == W.load(H200 / "winners-f16.json").shapes


def test_from_dir_with_a_base_keeps_the_shapes_the_folder_lacks_and_reads_sweep_names(tmp_path, capsys):
    """A re-pick of some shapes (a sweep's ``winners/``, f16 ones named ``M_N_K_f16.cu``) updates
    a full winners file: its shapes take the folder's configuration, the others keep the base's."""
    base = W.load(H200 / "winners-f16.json")
    shapes = sorted(base.shapes, key=lambda s: (s.m, s.n, s.k))
    other = next(c for c in base.configs.values() if c.name != base.shapes[shapes[0]])
    d = tmp_path / "winners"
    d.mkdir()
    (d / f"{shapes[0].m}_{shapes[0].n}_{shapes[0].k}_f16.cu").write_text(other.source())
    out = tmp_path / "new.json"
    assert harness_main(["winners", "from-dir", "--kernels", str(d), "--acc", "f16", "--base",
                         str(H200 / "winners-f16.json"), "--out", str(out)]) == 0
    assert "99 kept from" in capsys.readouterr().out
    new = W.load(out)
    assert new.shapes[shapes[0]] == other.name
    assert {s: n for s, n in new.shapes.items() if s != shapes[0]} == {s: n for s, n in base.shapes.items()
                                                                         if s != shapes[0]}
    with pytest.raises(W.WinnersError, match="accumulates in f32"):
        W.with_base(new, W.load(H200 / "winners-f32.json"))
