"""The fallback's pins: a session's measured library choice per shape, carried into the export.

From the harness's autotune record (in every ``timed`` event of a request that timed autotuned
cuBLASLt) to the manifest's ``fallback_pin`` and the generated dispatch table's ``l2fb::Pin``
initialisers; malformed pins are refused in one line.  The GPU side (the pinned algorithm is the
harness's, bit for bit) is in ``test_export_pins_gpu.py``.
"""

from __future__ import annotations

import json

import pytest

from harness.shapes import Shape
from l2tui import events as E
from l2tui.errors import SessionError
from l2tui.export import cdispatch, export_session
from l2tui.export.manifest import ManifestError, check_pin, fallback_pin, validate
from l2tui.session import Session
from tests.sweep_support import recorded_file

TUNE = {"best_index": 3, "available": 17, "requested": 100, "cublaslt_version": 130200}


def test_the_pin_is_the_fastest_library_the_fallback_can_reproduce():
    times = {"candidate": 1.0, "cublas": 1.3, "cublaslt_heuristic": 1.4, "cublaslt_autotune": 1.2, "torch": 1.1}
    # torch was fastest but the fallback cannot run torch: autotuned cuBLASLt's pick, by index
    assert fallback_pin(times, TUNE, "f32") == {
        "library": "cublaslt", "measured": "cublaslt_autotune", "index": 3, "count": 17, "requested": 100,
        "cublaslt_version": 130200}
    # the heuristic is index 0 of the same list
    pin = fallback_pin(dict(times, cublaslt_heuristic=1.15), TUNE, "f32")
    assert pin["measured"] == "cublaslt_heuristic" and pin["index"] == 0 and pin["count"] == 17
    # cublasGemmEx needs no list, and runs the layout the harness calls nn
    assert fallback_pin(dict(times, cublas=1.05), None, "f32", "nn") == {"library": "cublas", "measured": "cublas"}
    # the harness's tn layout multiplies a transposed copy of B: not what the fallback can call
    assert fallback_pin(dict(times, cublas=1.05), TUNE, "f32", "tn")["measured"] == "cublaslt_autotune"
    assert fallback_pin(dict(times, cublas=1.05), TUNE, "f32", None)["measured"] == "cublaslt_autotune"


@pytest.mark.parametrize("times,tune,acc", [
    ({"cublas": 1.0, "cublaslt_heuristic": 1.1}, TUNE, "f32"),        # autotuned cuBLASLt never timed
    ({"cublaslt_autotune": 1.0}, None, "f32"),                         # no record of the list
    ({"cublaslt_autotune": 1.0}, {**TUNE, "cublaslt_version": None}, "f32"),
    ({"cublaslt_autotune": 1.0}, {**TUNE, "best_index": 17}, "f32"),  # outside the list
    ({"cublaslt_autotune": 1.0}, {**TUNE, "available": 300, "requested": 300}, "f32"),  # over the C cap
    ({"cublaslt_autotune": 1.0, "cublas": 0.9}, TUNE, "f16"),         # the fallback computes in fp32
])
def test_no_pin_where_the_session_did_not_measure_what_tuning_would_find(times, tune, acc):
    assert fallback_pin(times, tune, acc) is None


@pytest.mark.parametrize("pin", [
    "cublas", {"library": "torch"}, {"library": "cublaslt"},
    {"library": "cublaslt", "index": "3", "count": 17, "requested": 100, "cublaslt_version": 1},
    {"library": "cublaslt", "index": 17, "count": 17, "requested": 100, "cublaslt_version": 1},
    {"library": "cublaslt", "index": 0, "count": 17, "requested": 1000, "cublaslt_version": 1},
    {"library": "cublaslt", "index": 0, "count": 17, "requested": 100, "cublaslt_version": 2**31},
    {"library": "cublaslt", "index": True, "count": 17, "requested": 100, "cublaslt_version": 1},
    {"library": "cublas", "measured": "cublas\x1b[2J"},
])
def test_a_malformed_pin_is_one_line(pin):
    with pytest.raises(ManifestError, match="fallback_pin is malformed; re-run l2tui export") as ei:
        check_pin(pin, "manifest.json: kernels[0]")
    assert "\n" not in str(ei.value)


def test_the_timed_event_keeps_the_autotune_record():
    raw = {**TUNE, "screened": 8, "method": "per call", "seconds": 0.07, "cached": True}
    assert E.autotune_record(raw) == TUNE
    assert E.autotune_record({"cached": True}) is None and E.autotune_record(None) is None
    assert E.library_fields({"autotune": raw, "cublas_variant": "nn", "p90_ms": {}}) == {
        "autotune": TUNE, "cublas_variant": "nn"}
    assert E.library_fields({"cublas_variant": "xx"}) == {} and E.library_fields(None) == {}
    ev = E.parse({"seq": 3, "type": "timed", "track": "t", "sha": "a" * 64, "autotune": TUNE})
    assert ev.autotune == TUNE
    with pytest.raises(SessionError, match="autotune"):
        E.parse({"seq": 3, "type": "timed", "track": "t", "sha": "a" * 64, "autotune": [3]})


@pytest.mark.compile
@pytest.mark.parametrize("libraries", [(), ("cublas",)])
def test_a_sweep_pins_the_autotuned_algorithm_into_the_export(capsys, tmp_path, monkeypatch, libraries):
    """The recorded worker autotuned cuBLASLt (index 3 of 17): the sweep's timed events keep the
    record, the export's manifest pins it on the shape, and the dispatch table carries it to C.
    With cuBLAS timed as well (faster in the fixture's timings), cublasGemmEx is the pin."""
    from l2tui.cli import main

    monkeypatch.setenv("L2TUI_CACHE_DIR", str(tmp_path / "cache"))
    rec = recorded_file(tmp_path, [Shape(64, 64, 64)], ["sm80_mma"], libraries=libraries,
                        extra={"autotune": {**TUNE, "screened": 8, "method": "per call"}, "cublas_variant": "nn"})
    data = json.loads(rec.read_text())
    if libraries:   # the fixture has no cuBLAS time for this shape: faster than autotuned cuBLASLt
        for r in data["records"].values():
            r["times_ms"]["cublas"] = r["times_ms"]["cublaslt_autotune"] * 0.9
        rec.write_text(json.dumps(data))
    sdir = tmp_path / "s"
    assert main(["sweep", "--shapes", "64x64x64", "--recorded", str(rec), "--steps", "0", "--families", "sm80_mma",
                 "--arch", "sm_80", "--seeds", "1", "--no-pick-kinds", "--session", str(sdir)]
                + (["--libraries", ",".join(libraries)] if libraries else [])) == 0
    timed = [e for e in Session.open(sdir).events if e["type"] == "timed"]
    assert timed and all(e["autotune"] == TUNE and e["cublas_variant"] == "nn" for e in timed)
    res = export_session(sdir, tmp_path / "exp")
    (entry,) = res.manifest["kernels"]
    validate(res.manifest, res.out)
    src = (res.out / "src" / "l2hgemm_dispatch.cu").read_text()
    if libraries:
        assert entry["fallback_pin"] == {"library": "cublas", "measured": "cublas"}
        assert cdispatch.parse_pins(src) == {(64, 64, 64): (2, 0, 0, 0, 0)}
    else:
        assert entry["fallback_pin"] == {"library": "cublaslt", "measured": "cublaslt_autotune", **{
            "index": 3, "count": 17, "requested": 100, "cublaslt_version": 130200}}
        assert cdispatch.parse_pins(src) == {(64, 64, 64): (1, 3, 17, 100, 130200)}
    # the command says what the fallback runs (a 50 % margin sends the shape there)
    capsys.readouterr()
    assert main(["export", str(sdir), "--out", str(tmp_path / "exp2"), "--margin", "50"]) == 0
    out = capsys.readouterr().out
    assert ("fallback: cublasGemmEx (measured fastest)" if libraries else
            "fallback: cuBLASLt heuristic algorithm 3 (measured fastest: cublaslt_autotune)") in out


def test_an_export_refuses_a_hand_edited_pin_before_writing_c(tmp_path):
    man = {"arch": "sm_90a", "kernels": [
        {"shape": [64, 64, 64], "name": "64_64_64", "symbol": "l2_hgemm_64_64_64", "file": "kernels/64_64_64.cu",
         "sha256": "ab" * 32, "flags": [], "fallback": "cublaslt",
         "fallback_pin": {"library": "cublaslt", "index": "0); system(\"x\"); (", "count": 1, "requested": 1,
                          "cublaslt_version": 1}}]}
    with pytest.raises(ManifestError, match="fallback_pin is malformed"):
        cdispatch.render_dispatch(man)


def test_the_export_command_names_each_fallback():
    from l2tui.commands.export import _fallback_text

    assert _fallback_text(None) == "cuBLASLt, tuned at the first call"
    assert _fallback_text({"library": "cublas", "measured": "cublas"}) == "cublasGemmEx (measured fastest)"
    assert _fallback_text({"library": "cublaslt", "measured": "cublaslt_heuristic", "index": 0, "count": 9,
                           "requested": 100, "cublaslt_version": 1}) == \
        "cuBLASLt heuristic algorithm 0 (measured fastest: cublaslt_heuristic)"
