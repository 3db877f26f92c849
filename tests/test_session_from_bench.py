"""tools/session_from_bench.py: a real H200 bench result + the kernels it timed -> a session -> l2tui export.

The bench rows are a slice of results/h200/kernels-offline.json (real measurements) and the
kernels are results/h200/winners-f32.json rendered into a folder; the export is the real one (no --build, no GPU).
"""

from __future__ import annotations

import atexit
import copy
import hashlib
import importlib.util
import json
import shutil
import tempfile
from pathlib import Path

import pytest

from harness.results import BASELINE_LABELS, validate as validate_results
from harness.shapes import Shape
from harness.winners import render_dir
from l2tui.cli import main as cli_main
from l2tui.export import ExportError, export_session, load_manifest
from l2tui.export.manifest import DEFAULT_FALLBACK_MARGIN, FALLBACK_LABELS
from l2tui.session import Session

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "results" / "h200" / "kernels-offline.json"
WINNERS = ROOT / "results" / "h200" / "winners-f32.json"
# The per-shape sources the bench timed, rendered from the winners file once per test run.
KERNELS = Path(tempfile.mkdtemp(prefix="l2-winners-"))
atexit.register(shutil.rmtree, KERNELS, True)
if WINNERS.is_file():
    render_dir(WINNERS, KERNELS, allow_changed=True)  # a stale template is test_committed_winners's to report
LABEL = "l2"

_spec = importlib.util.spec_from_file_location("session_from_bench", ROOT / "tools" / "session_from_bench.py")
sfb = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sfb)

pytestmark = pytest.mark.skipif(not (BENCH.is_file() and WINNERS.is_file()), reason="no committed H200 bench result")


def _shape(r: dict) -> Shape:
    return Shape(r["m"], r["n"], r["k"])


def _dims(r: dict) -> tuple[int, int, int]:
    return (r["m"], r["n"], r["k"])


def _bases(r: dict) -> dict[str, float]:
    return {lb: v for lb, v in r["times_ms"].items() if lb in BASELINE_LABELS and v}


def _has_kernel(r: dict) -> bool:
    return (KERNELS / f"{r['m']}_{r['n']}_{r['k']}.cu").exists()


@pytest.fixture(scope="module")
def bench_doc() -> dict:
    return json.loads(BENCH.read_text())


@pytest.fixture(scope="module")
def picked(bench_doc) -> dict[str, dict]:
    """Real rows: two where the kernel beat every baseline by more than the export's margin (so the
    export keeps their kernels), one where a baseline was faster, and (when the file has one) a
    shape the bench had no kernel for."""
    ok = [r for r in bench_doc["rows"] if r["status"].get(LABEL) == "ok" and r["times_ms"].get(LABEL)
          and r["checks"][LABEL]["ok"] and _has_kernel(r)]
    wins = [r for r in ok if min(_bases(r).values()) > r["times_ms"][LABEL] * (1.0 + DEFAULT_FALLBACK_MARGIN)]
    losses = [r for r in ok if min(_bases(r).values()) < r["times_ms"][LABEL]]
    assert len(wins) >= 2 and losses, "the H200 result should hold both wins and losses"
    out = {"win1": wins[0], "win2": wins[len(wins) // 2], "loss": losses[len(losses) // 2]}
    absent = [r for r in bench_doc["rows"] if r["times_ms"].get(LABEL) is None and not _has_kernel(r)]
    if absent:
        out["absent"] = absent[0]
    return out


def _write_bench(path: Path, meta: dict, rows: list[dict]) -> Path:
    validate_results({"meta": meta, "rows": rows})
    path.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    return path


def _events(sess: Path, typ: str, track: str | None = None) -> list[dict]:
    return [e for e in Session.open(sess).events if e["type"] == typ and (track is None or e.get("track") == track)]


def test_bench_slice_to_session_to_export(bench_doc, picked, tmp_path):
    rows = list(picked.values())
    bench = _write_bench(tmp_path / "bench.json", bench_doc["meta"], rows)
    sess = tmp_path / "sessions" / "h200-import"
    assert sfb.main([str(bench), "--kernels", str(KERNELS), "--out", str(sess)]) == 0
    meta = bench_doc["meta"]
    timed = [r for r in rows if r["times_ms"].get(LABEL)]

    # the session itself: written through the Session API, provenance recorded, no agent steps
    s = Session.open(sess)
    assert s.problems == []
    imp = s.config["import"]
    assert imp["origin"] == "bench-import" and imp["label"] == LABEL
    assert imp["bench_file"] == str(bench) and imp["bench_git_rev"] == meta["git_rev"]
    assert imp["bench_date"] == meta["date"] and imp["bench_sha256"] == hashlib.sha256(bench.read_bytes()).hexdigest()
    assert s.gpu["name"] == meta["gpu"] and s.gpu["driver"] == meta["driver"] and s.gpu["arch"] == meta["arch"]
    assert s.rewards() == []
    assert {e["origin"] for e in _events(sess, "candidate")} == {"bench-import"}
    assert {e["policy"] for e in _events(sess, "candidate")} == {"import"}
    assert len(_events(sess, "track_added")) == len(rows)

    # the real export, through the CLI entry
    out = tmp_path / "lib"
    assert cli_main(["export", str(sess), "--out", str(out)]) == 0
    man = load_manifest(out)
    got = {tuple(e["shape"]): e for e in man["kernels"]}
    assert set(got) == {(r["m"], r["n"], r["k"]) for r in timed}
    assert man["session"]["git_revision"] == meta["git_rev"]
    assert man["gpu"]["name"] == meta["gpu"] and man["driver"] == meta["driver"] and man["arch"] == meta["arch"]
    for r in timed:
        e = got[(r["m"], r["n"], r["k"])]
        src = (KERNELS / f"{r['m']}_{r['n']}_{r['k']}.cu").read_text()
        assert e["sha256"] == hashlib.sha256(src.encode()).hexdigest()
        if e["fallback"]:   # the dispatcher never calls it: not shipped
            assert e["file"] is None
        else:
            assert (out / e["file"]).read_text() == src
        assert e["origin"] == "bench-import" and e["policy"] == "import"
        assert e["selected_by"] == "accepted" and e["accepted_by"] == "import"
        assert e["timing_mode"] == meta["mode"] and e["step"] == 0 and e["flags"] == []
        l2 = r["times_ms"][LABEL]
        assert e["kernel_ms"] == l2 and e["times_ms"]["candidate"] == l2
        assert e["times_ms"] == {"candidate": l2, **_bases(r)}
        assert e["roofline_ms"] == r["roofline_ms"]
        assert e["rel_err"] == r["checks"][LABEL]["rel_err"] and e["bound"] == r["checks"][LABEL]["bound"]
        # the speedups are exactly the bench ratios
        assert set(e["speedup"]) == set(_bases(r))
        for lb, t in _bases(r).items():
            assert e["speedup"][lb] == pytest.approx(t / l2, rel=1e-12)
        # a shape where a library was faster goes to the fallback; a win keeps the kernel
        faster = sorted(lb for lb, t in _bases(r).items() if t < l2)
        assert e["slower_than"] == faster
        near = [t for lb, t in _bases(r).items() if lb in FALLBACK_LABELS and t < l2 * (1.0 + DEFAULT_FALLBACK_MARGIN)]
        assert e["fallback"] == ("cublaslt" if near else None)
    assert got[_dims(picked["loss"])]["fallback"] == "cublaslt"
    assert got[_dims(picked["win1"])]["fallback"] is None
    assert got[_dims(picked["win2"])]["fallback"] is None

    # a shape the bench had no kernel for is a failed track, never exported
    if "absent" in picked:
        tid = f"{picked['absent']['m']}x{picked['absent']['n']}x{picked['absent']['k']}-{meta['acc']}"
        assert _events(sess, "candidate", tid) == [] and _events(sess, "decision", tid) == []
        assert _events(sess, "track_state", tid)[-1]["state"] == "failed"

    # --shapes filter, and the target rules (an import is replaced only with --force, nothing else ever)
    one = tmp_path / "one"
    sp = _shape(picked["win1"])
    assert sfb.main([str(bench), "--kernels", str(KERNELS), "--out", str(one), "--shapes", f"{sp.m}x{sp.n}x{sp.k}"]) == 0
    assert [e["track"] for e in _events(one, "track_added")] == [f"{sp.m}x{sp.n}x{sp.k}-{meta['acc']}"]
    assert sfb.main([str(bench), "--kernels", str(KERNELS), "--out", str(one)]) == 2
    assert sfb.main([str(bench), "--kernels", str(KERNELS), "--out", str(one), "--force"]) == 0
    assert len(_events(one, "track_added")) == len(rows)
    assert sfb.main([str(bench), "--kernels", str(KERNELS), "--out", str(out), "--force"]) == 2  # an export, not an import
    assert load_manifest(out) == man


def test_failed_check_is_recorded_not_accepted(bench_doc, picked, tmp_path):
    good = picked["win1"]
    wrong = copy.deepcopy(picked["win2"])  # the faster-than-every-library kernel, but now it failed accuracy
    wrong["checks"][LABEL].update(ok=False, failed="accuracy", detail="rel err 3.1e-02 > bound 4.2e-04")
    wrong["checks"][LABEL]["checks"]["accuracy"]["ok"] = False
    wrong["status"][LABEL] = "wrong"
    sneaky = copy.deepcopy(picked["loss"])  # top-level ok, but one of its checks failed: still not accepted
    sneaky["checks"][LABEL]["checks"]["deterministic"] = {"ok": False, "detail": "two runs differ"}
    bench = _write_bench(tmp_path / "bench.json", bench_doc["meta"], [good, wrong, sneaky])
    sess = tmp_path / "sess"
    res = sfb.build_session(bench, KERNELS, sess, log=lambda msg: None)
    acc = bench_doc["meta"]["acc"]
    tid = {k: f"{r['m']}x{r['n']}x{r['k']}-{acc}" for k, r in (("good", good), ("wrong", wrong), ("sneaky", sneaky))}
    assert res["accepted"] == [tid["good"]]
    assert sorted(res["failed"]) == sorted([tid["wrong"], tid["sneaky"]])
    for k in ("wrong", "sneaky"):
        (chk,) = _events(sess, "checked", tid[k])
        assert chk["ok"] is False
        assert _events(sess, "decision", tid[k]) == [] and _events(sess, "best", tid[k]) == []
        assert _events(sess, "track_state", tid[k])[-1]["state"] == "failed"
        assert _events(sess, "timed", tid[k])  # the measurement is kept, for the record
    assert _events(sess, "checked", tid["wrong"])[0]["failed"] == "accuracy"
    assert _events(sess, "checked", tid["sneaky"])[0]["failed"] == "deterministic"

    res = export_session(sess, tmp_path / "lib")
    assert res.shapes == [_dims(good)]
    for i, r in enumerate((wrong, sneaky)):
        with pytest.raises(ExportError, match="nothing to export"):
            export_session(sess, tmp_path / f"lib-{i}", shapes=[_shape(r)])


def test_refuses_a_kernels_folder_that_is_not_the_one_timed(bench_doc, picked, tmp_path):
    bench = _write_bench(tmp_path / "bench.json", bench_doc["meta"], [picked["win1"]])
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "1_1_1.cu").write_text("// nothing\n")
    with pytest.raises(sfb.BenchImportError, match="pass the folder the bench timed"):
        sfb.build_session(bench, tmp_path / "other", tmp_path / "sess", log=lambda msg: None)
    with pytest.raises(sfb.BenchImportError, match="no candidate label"):
        sfb.build_session(bench, KERNELS, tmp_path / "sess", label="nope", log=lambda msg: None)
    assert not (tmp_path / "sess").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".sess")]
