"""The generated summary names every figure's timing mode and says when a run is partial,
derived, host-timed through different paths, or an A/B run of two kernel sets."""

from __future__ import annotations

from harness import report, results


def _row(m: int, n: int, k: int, times: dict, chained: dict | None = None, pdl: dict | None = None) -> dict:
    row = {"m": m, "n": n, "k": k, "times_ms": dict(times), "status": {lb: "ok" for lb in times},
           "checks": {}, "roofline_ms": 0.001}
    if chained is not None:
        row["times_ms_chained"] = dict(chained)
    if pdl is not None:
        row["pdl"] = pdl
    return row


SHAPES = [(128, 128, 128), (1024, 1024, 1024), (8192, 8192, 8192)]


def _meta(**kw) -> dict:
    return {"gpu": "NVIDIA H200", "driver": "580.159.04", "cuda": "13.0", "nvcc": "13.0.88", "method": "m",
            "mode": "offline", "acc": "f32", "date": "d", "git_rev": "abc",
            "shapes": ["sample100"], "complete": True, **kw}


def test_server_run_names_its_call_paths_and_a_partial_one_is_flagged():
    rows = [_row(*s, {"l2": 1.0, "cublas": 1.1, "cublaslt_autotune": 1.2, "torch": 1.3}) for s in SHAPES]
    rf = results.ResultFile(_meta(mode="server", timing="server"), rows)
    text = "\n".join(report.caveats(rf))
    assert "every subject through the same kind of call" in text
    assert "cublaslt_autotune: C entry point through ctypes" in text and "torch: torch.matmul (the framework path" in text
    # a file made when cuBLASLt was called through a Python path says so
    old = results.ResultFile(_meta(mode="server", method="... nvmath-python ..."), rows)
    assert "compare them with `cublas` only" in "\n".join(report.caveats(old))
    cut = results.ResultFile({**rf.meta, "complete": False}, rows[:2])
    text = "\n".join(report.caveats(cut))
    assert "**Partial run:** 2 shapes of the 100 in `sample100` (stopped by its time limit)" in text


def test_every_table_names_its_mode_and_old_files_are_back_to_back():
    rows = [_row(*s, {"l2": 1.0, "cublaslt_autotune": 1.1}) for s in SHAPES]
    old = results.ResultFile(_meta(), rows)                  # no "timing" in meta: made back to back
    assert report.mode_label(old) == "back to back"
    text = report.markdown([("old.json", old)])
    assert "**back to back**" in text and "A pipeline figure" in text
    new = results.ResultFile(_meta(timing="isolated", command="l2tui bench --shapes grid"), rows)
    text = report.markdown([("new.json", new)])
    assert "**per call**" in text and "Command: `l2tui bench --shapes grid`" in text
    assert "A pipeline figure" not in text
    assert report.caveats(new) == []


def test_a_file_timed_both_ways_reports_per_call_first_then_back_to_back_and_their_ratio():
    rows = []
    for s in SHAPES:
        iso = {"l2": 1.10, "cublaslt_autotune": 1.02}
        ch = {"l2": 1.00, "cublaslt_autotune": 1.00}
        rows.append(_row(*s, iso, ch, pdl={"l2": True}))
    rf = results.ResultFile(_meta(timing="both"), rows)
    text = report.markdown([("both.json", rf)])
    first = text.index("Candidate `l2` on 3 shapes (0 without a time), **per call**")
    second = text.index("Candidate `l2` on 3 shapes (0 without a time), **back to back**")
    assert first < second
    per = report.summarize(rf, "l2")["baselines"]["cublaslt_autotune"]["geomean"]
    assert abs(per - 1.02 / 1.10) < 1e-9
    cmp = report.per_call_vs_chained(rf)
    assert abs(cmp["l2 (PDL)"]["all"]["ratio"] - 1.10) < 1e-9 and cmp["l2 (PDL)"]["all"]["within_3pct"] == 0
    assert abs(cmp["cublaslt_autotune"]["all"]["ratio"] - 1.02) < 1e-9
    assert cmp["cublaslt_autotune"]["all"]["within_3pct"] == 1.0
    assert "| cublaslt_autotune | " in text and "Per call against back to back" in text


def test_calibration_json_is_written_for_files_timed_both_ways(tmp_path):
    rows = [_row(*s, {"l2": 1.0, "cublas": 1.0}, {"l2": 1.0, "cublas": 0.99}, pdl={"l2": False}) for s in SHAPES]
    path = tmp_path / "both.json"
    results.save(results.ResultFile(_meta(timing="both", command="l2tui bench --timing both"), rows), path)
    out = tmp_path / "cal.json"
    assert report.main([str(path), "-o", str(tmp_path / "R.md"), "--calibration", str(out)]) == 0
    import json

    cal = json.loads(out.read_text())["both.json"]
    assert cal["meta"]["command"] == "l2tui bench --timing both"
    assert cal["per_call_over_back_to_back"]["l2 (no PDL)"]["all"]["n"] == 3


def test_an_ab_run_reports_both_candidates_and_their_head_to_head():
    """Two kernel sets in one bench run: both candidates' tables, the preferred label first, and the
    geomean of one against the other over the shapes both timed."""
    times = [(1.0, 1.2), (2.0, 1.9), (3.0, 3.3)]
    rows = [_row(*s, {"l2": a, "incumbent": b, "cublaslt_autotune": 1.5}) for s, (a, b) in zip(SHAPES, times)]
    rf = results.ResultFile(_meta(timing="isolated"), rows)
    assert report.report_labels(rf, None) == ["l2", "incumbent"]
    assert report.report_labels(rf, "incumbent") == ["incumbent"]
    g, wins, n = report.head_to_head(rf, "l2", "incumbent")
    expect = (1.2 / 1.0 * 1.9 / 2.0 * 3.3 / 3.0) ** (1 / 3)
    assert n == 3 and abs(g - expect) < 1e-12 and wins == 2
    text = report.markdown([("ab.json", rf)])
    assert "Candidates side by side in this run: `l2`, `incumbent`." in text
    assert text.index("Candidate `l2` on 3 shapes") < text.index("Candidate `incumbent` on 3 shapes")
    assert f"| l2 | incumbent | {g:.3f}x | {100 * wins / n:.0f}% | 3 |" in text
    single = report.markdown([("ab.json", rf)], "l2")
    assert "side by side" not in single and "Candidate `incumbent`" not in single
