"""Export of a recorded session: selection rules, manifest schema, target-folder rules, CLI."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from harness.shapes import Shape
from l2tui.cli import main as cli_main
from l2tui.export import ExportError, ManifestError, export_session, load_manifest
from l2tui.export.manifest import SCHEMA, validate
from tests.fixtures.export import make_session as fx


@pytest.fixture(scope="module")
def session(tmp_path_factory) -> Path:
    return fx.make_session(tmp_path_factory.mktemp("sess") / "run-1")


def _expected_source(what) -> str:
    return fx.SHIM if what == "shim" else fx.tiled(what)


def test_export_picks_per_rules_and_writes_manifest(session, tmp_path):
    out = tmp_path / "exp"
    res = export_session(session, out)
    man = json.loads((out / "manifest.json").read_text())
    assert man == res.manifest
    validate(man, out)
    assert man["schema"] == SCHEMA
    got = {tuple(e["shape"]): e for e in man["kernels"]}
    assert set(got) == set(fx.EXPECTED)
    for shape, (what, how, fallback) in fx.EXPECTED.items():
        e = got[shape]
        text = _expected_source(what)
        assert e["sha256"] == hashlib.sha256(text.encode()).hexdigest()
        assert e["selected_by"] == how, shape
        assert e["accepted_by"] == ("user" if how == "accepted" else None)
        assert e["fallback"] == fallback, shape
        # only what the dispatcher calls is shipped: a fallback shape's kernel is not copied
        name = f"{shape[0]}_{shape[1]}_{shape[2]}"
        if fallback:
            assert e["file"] is None and not (out / "kernels" / f"{name}.cu").exists(), shape
        else:
            assert e["file"] == f"kernels/{name}.cu" and (out / e["file"]).read_text() == text, shape
        assert e["acc"] == "f32"  # the f16 track of 128^3 is faster, but f32 is preferred
        assert e["rel_err"] == pytest.approx(2.1e-4)
        assert set(e["speedup"]) == {"cublas", "cublaslt_heuristic", "torch"}
    # speedups are recomputed from the manifest's own timings
    e = got[(128, 128, 128)]
    assert e["speedup"]["cublas"] == pytest.approx(0.012 / 0.0082)
    assert e["fastest_baseline"] == "cublas"
    # the fallback marker follows the timings: cuBLAS (and so the cuBLASLt fallback) was faster on 64^3
    assert got[(64, 64, 64)]["speedup"]["cublas"] < 1.0
    assert all(min(x["speedup"].values()) >= 1.0 for x in man["kernels"] if not x["fallback"])
    assert man["gpu"]["name"] == "NVIDIA H200" and man["arch"] == "sm_90a" and man["driver"] == "580.159"
    assert man["session"]["path"] == str(session.resolve())
    assert man["session"]["git_revision"] == "0" * 40
    assert man["library"] is None
    assert any("failed a check" in w for w in res.warnings)
    assert load_manifest(out) == man


def test_only_accepted_and_shapes_filter(session, tmp_path):
    res = export_session(session, tmp_path / "a", only_accepted=True)
    assert res.shapes == [(256, 128, 64)]
    res = export_session(session, tmp_path / "b", shapes=[Shape(128, 128, 128), Shape(1024, 64, 256)])
    assert res.shapes == [(128, 128, 128)]
    res = export_session(session, tmp_path / "c", acc="f16")
    assert res.shapes == [(128, 128, 128)] and res.manifest["kernels"][0]["acc"] == "f16"
    with pytest.raises(ExportError, match="nothing to export"):
        export_session(session, tmp_path / "d", shapes=[Shape(1024, 64, 256)])
    assert not (tmp_path / "d").exists()


def test_non_empty_target_needs_force(session, tmp_path):
    out = tmp_path / "exp"
    export_session(session, out, shapes=[Shape(64, 64, 64)])
    first = json.loads((out / "manifest.json").read_text())
    with pytest.raises(ExportError, match="--force"):
        export_session(session, out)
    assert json.loads((out / "manifest.json").read_text()) == first  # untouched
    ino = out.stat().st_ino
    res = export_session(session, out, force=True)
    assert len(res.manifest["kernels"]) == len(fx.EXPECTED)
    assert out.stat().st_ino == ino  # replaced in place: a shell sitting in DIR stays valid
    kept = next(e["file"] for e in res.manifest["kernels"] if e["file"])
    assert (out / kept).read_text() != ""
    # --force never deletes a folder that is not an export
    other = tmp_path / "notes"
    other.mkdir()
    (other / "keep.txt").write_text("mine")
    with pytest.raises(ExportError, match="holds no l2tui export"):
        export_session(session, other, force=True)
    assert (other / "keep.txt").read_text() == "mine"
    # an empty folder is fine without --force
    empty = tmp_path / "empty"
    empty.mkdir()
    export_session(session, empty)
    assert (empty / "manifest.json").is_file()
    # a file, or the session folder itself, is refused
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(ExportError, match="not a folder"):
        export_session(session, f)
    with pytest.raises(ExportError, match="overlaps the session"):
        export_session(session, session / "exp")


def test_nothing_partial_on_error(session, tmp_path):
    # a session whose kernel store lost a file: the export fails as a whole
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(session, broken)
    man = export_session(session, tmp_path / "ok").manifest
    victim = man["kernels"][-1]["sha256"]
    (broken / "kernels" / f"{victim}.cu").unlink()
    out = tmp_path / "exp"
    with pytest.raises(Exception, match="missing"):
        export_session(broken, out)
    assert not out.exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    # with --force over an earlier export, the earlier export survives the failure
    export_session(session, out, shapes=[Shape(64, 64, 64)])
    with pytest.raises(Exception, match="missing"):
        export_session(broken, out, force=True)
    assert load_manifest(out)["kernels"][0]["shape"] == [64, 64, 64]
    # a damaged kernel (text no longer matches its hash) is never exported
    (broken / "kernels" / f"{victim}.cu").write_text("// tampered\n")
    with pytest.raises(Exception, match="does not match its hash"):
        export_session(broken, tmp_path / "exp2")


def test_manifest_schema_rejects_bad_documents(session, tmp_path):
    out = tmp_path / "exp"
    man = export_session(session, out).manifest

    def bad(mut, match):
        doc = json.loads(json.dumps(man))
        mut(doc)
        with pytest.raises(ManifestError, match=match):
            validate(doc, out)

    bad(lambda d: d.update(schema="other/9"), "schema")
    bad(lambda d: d.pop("gpu"), "missing 'gpu'")
    bad(lambda d: d["kernels"][0].update(shape=[1, 2]), "shape")
    bad(lambda d: d["kernels"][0].update(name="../../etc"), "name")
    bad(lambda d: d["kernels"][0].update(file="../x.cu"), "file")
    bad(lambda d: d["kernels"][0].update(symbol="system"), "symbol")
    bad(lambda d: d["kernels"][0].update(fallback="torch"), "fallback")
    bad(lambda d: d["kernels"].append(dict(d["kernels"][0])), "twice")
    bad(lambda d: d["kernels"][0].update(sha256="zz"), "sha256")
    (out / next(e["file"] for e in man["kernels"] if e["file"])).unlink()
    with pytest.raises(ManifestError, match="missing"):
        load_manifest(out)
    with pytest.raises(ManifestError, match="no manifest.json"):
        load_manifest(tmp_path)


def test_flags_from_a_session_are_checked(tmp_path):
    from l2tui.export.cdispatch import check_flags
    from harness.errors import HarnessError

    assert check_flags(["-DTILE=32", "--use_fast_math", "-Xptxas=-v", "-I/home/x/include", "-L/opt/lib"], "k") == \
        ["-DTILE=32", "--use_fast_math", "-Xptxas=-v"]
    for f in ("-o/etc/passwd", "-Xcompiler=-fplugin=/tmp/evil.so", "--include=/etc/shadow", "-DX=$(rm -rf /)"):
        with pytest.raises(HarnessError):
            check_flags([f], "k")


def test_names_are_sanitised():
    from l2tui.export.manifest import kernel_name, safe_label

    assert safe_label("cublas */ int x; /*") == "cublas____int_x____"
    assert safe_label("") == "_"
    assert kernel_name(1, 2, 3) == "1_2_3"
    with pytest.raises(ManifestError):
        kernel_name(0, 2, 3)


def test_cli_export_and_one_line_errors(session, tmp_path, capsys):
    out = tmp_path / "exp"
    assert cli_main(["export", str(session), "--out", str(out), "--shapes", "128x128x128"]) == 0
    text = capsys.readouterr().out
    assert "1 shape: 1 run an exported kernel, 0 the cuBLAS fallback" in text and "128x128x128 f32" in text
    assert cli_main(["export", str(session), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("l2tui: error:") and "--force" in err[0]
    assert cli_main(["export", str(tmp_path / "nosuch"), "--out", str(tmp_path / "x")]) == 2
    assert "not a session folder" in capsys.readouterr().err


def test_fallback_is_decided_by_what_the_fallback_runs():
    from l2tui.export.manifest import fallback_for

    # cuBLAS faster: dispatch to the fallback (autotuned cuBLASLt, at least as fast)
    assert fallback_for({"candidate": 1.0, "cublas": 0.9, "cublaslt_autotune": 0.8}, 1.0) == \
        ("cublaslt", ["cublas", "cublaslt_autotune"])
    # only autotuned cuBLASLt faster: the fallback *is* autotuned cuBLASLt now, so it takes the shape
    assert fallback_for({"candidate": 1.0, "cublas": 1.1, "cublaslt_autotune": 0.95}, 1.0) == \
        ("cublaslt", ["cublaslt_autotune"])
    assert fallback_for({"candidate": 1.0, "cublaslt_heuristic": 0.99, "cublas": 1.2}, 1.0) == \
        ("cublaslt", ["cublaslt_heuristic"])
    # torch runs cuBLAS(Lt) underneath: it counts too
    assert fallback_for({"candidate": 1.0, "torch": 0.97}, 1.0) == ("cublaslt", ["torch"])
    # a baseline outside the cuBLAS family is reported, not matched by the fallback
    assert fallback_for({"candidate": 1.0, "cublas": 1.1, "other_lib": 0.5}, 1.0) == (None, ["other_lib"])
    assert fallback_for({"candidate": 1.0, "cublas": 1.0}, 1.0) == (None, [])
    assert fallback_for({}, None) == (None, [])


def test_old_fallback_marker_still_reads(session, tmp_path):
    """Exports written while the fallback was plain cuBLAS said "cublas": same meaning, still valid."""
    from l2tui.export import runtime

    out = tmp_path / "exp"
    man = export_session(session, out).manifest
    assert {e["fallback"] for e in man["kernels"]} == {None, "cublaslt"}
    for e in man["kernels"]:
        if e["fallback"]:
            e["fallback"] = "cublas"
    (out / "manifest.json").write_text(json.dumps(man))
    lib = runtime.load(out)
    assert lib.route(64, 64, 64).kind == "cublaslt" and lib.route(64, 64, 64).shape is None
    assert (64, 64, 64) not in lib.kernel_shapes


def test_export_never_writes_to_the_session(session, tmp_path):
    """A run may still be appending: a partial last line is skipped, not trimmed away."""
    import shutil

    live = tmp_path / "live"
    shutil.copytree(session, live)
    with open(live / "events.jsonl", "a") as f:
        f.write('{"seq": 99999, "type": "tim')  # a line being written right now
    before = (live / "events.jsonl").read_bytes()
    res = export_session(live, tmp_path / "exp")
    assert len(res.manifest["kernels"]) == len(fx.EXPECTED)
    assert (live / "events.jsonl").read_bytes() == before


def test_fallback_margin_decides_close_calls():
    """A kernel must beat every cuBLAS-family library by the margin; a tie or a 1 % lead goes to the
    fallback by default, a 3 % lead stays, and margin 0 keeps the old strict rule."""
    from l2tui.export.manifest import DEFAULT_FALLBACK_MARGIN, fallback_for

    assert DEFAULT_FALLBACK_MARGIN == pytest.approx(0.02)
    lib = {"cublas": 0.0101, "cublaslt_autotune": 0.0103, "candidate": 0.0100}
    assert fallback_for(lib, 0.0100, DEFAULT_FALLBACK_MARGIN) == ("cublaslt", [])
    assert fallback_for(lib, 0.0100, 0.0) == (None, [])
    assert fallback_for({"cublas": 0.0103}, 0.0100, DEFAULT_FALLBACK_MARGIN) == (None, [])
    assert fallback_for({"cublas": 0.0099}, 0.0100, 0.0) == ("cublaslt", ["cublas"])


def test_export_margin_is_recorded_and_changes_the_routes(session, tmp_path):
    # the cuBLAS shim ties cuBLAS: with no margin at all it would be dispatched, and a kernel that
    # calls cuBLAS is one the source policy refuses, so the export refuses it in one line
    with pytest.raises(ExportError, match=r"512x256x128-f32 kernel \w+ is refused: line \d+: source policy \(vendor-gemm\)"):
        export_session(session, tmp_path / "m0", margin=0.0)
    assert not (tmp_path / "m0").exists()
    others = [Shape(*k) for k in fx.EXPECTED if k != (512, 256, 128)]
    strict = export_session(session, tmp_path / "m0", margin=0.0, shapes=others).manifest
    default = export_session(session, tmp_path / "m2").manifest
    wide = export_session(session, tmp_path / "m50", margin=0.5).manifest
    assert (strict["fallback_margin"], default["fallback_margin"], wide["fallback_margin"]) == (0.0, 0.02, 0.5)
    routes = {lab: {tuple(e["shape"]): e["fallback"] for e in m["kernels"]}
              for lab, m in (("0", strict), ("2", default), ("50", wide))}
    assert routes["2"][(512, 256, 128)] == "cublaslt"
    # 0.0082 ms against cuBLAS's 0.012 ms is 46 % ahead: kept at 2 %, not at 50 %
    assert routes["2"][(128, 128, 128)] is None and routes["50"][(128, 128, 128)] == "cublaslt"
    assert sum(r is None for r in routes["0"].values()) >= sum(r is None for r in routes["2"].values()) \
        >= sum(r is None for r in routes["50"].values())


def test_a_fallback_shapes_kernel_is_neither_shipped_nor_checked(session, tmp_path):
    """The fixture's cuBLAS shim (a kernel the source policy refuses) ties cuBLAS, so at the
    default margin its shape runs the fallback: the export goes through and ships no copy of it,
    since the dispatcher never calls it; dispatched at margin 0 it is refused (see the margin test)."""
    out = tmp_path / "exp"
    man = export_session(session, out).manifest
    shim = next(e for e in man["kernels"] if tuple(e["shape"]) == (512, 256, 128))
    assert shim["fallback"] == "cublaslt" and shim["file"] is None
    assert shim["sha256"] == hashlib.sha256(fx.SHIM.encode()).hexdigest()
    shipped = sorted(p.name for p in (out / "kernels").iterdir())
    assert shipped == sorted(f"{e['name']}.cu" for e in man["kernels"] if not e["fallback"])
    assert all("cublas" not in (out / "kernels" / name).read_text().lower() for name in shipped)
    dispatched = next(e for e in man["kernels"] if not e["fallback"])
    with pytest.raises(ManifestError, match="file"):
        validate({**man, "kernels": [{**dispatched, "file": None}]})
    older = {**shim, "file": "kernels/512_256_128.cu"}   # older exports shipped fallback kernels too
    assert validate({**man, "kernels": [older]})


@pytest.mark.parametrize("bad", ["-1", "100", "nan"])
def test_export_cli_refuses_a_bad_margin_in_one_line(session, tmp_path, capsys, bad):
    rc = cli_main(["export", str(session), "--out", str(tmp_path / "x"), f"--margin={bad}"])
    err = capsys.readouterr().err
    assert rc != 0 and "--margin" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "x").exists()


def test_a_manifest_with_a_bad_margin_is_refused(session, tmp_path):
    man = export_session(session, tmp_path / "e").manifest
    with pytest.raises(ManifestError, match="fallback_margin"):
        validate({**man, "fallback_margin": -0.1})
    legacy = {k: v for k, v in man.items() if k != "fallback_margin"}
    assert validate(legacy) is legacy


def test_the_manifest_names_each_shape_by_the_role_the_session_knows(tmp_path):
    roles = {"128x128x128": "toy-model qkv t128", "512x256x128": "toy-model o t512", "../../etc": "ignored"}
    sess = fx.make_session(tmp_path / "model", roles=roles)
    man = export_session(sess, tmp_path / "exp").manifest
    got = {"x".join(map(str, e["shape"])): e.get("role") for e in man["kernels"]}
    assert got["128x128x128"] == "toy-model qkv t128" and got["512x256x128"] == "toy-model o t512"
    assert all(role is None for shape, role in got.items() if shape not in roles)
    assert load_manifest(tmp_path / "exp")["kernels"] == man["kernels"]
    entry = next(e for e in man["kernels"] if e.get("role"))
    with pytest.raises(ManifestError, match="role"):
        validate({**man, "kernels": [{**entry, "role": "qkv\x1b[2J"}]})
