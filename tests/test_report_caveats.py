"""The generated summary says when a run is partial, derived or host-timed through Python."""

from __future__ import annotations

from pathlib import Path

from harness import report, results

H200 = Path(__file__).resolve().parent.parent / "results" / "h200"


def test_server_run_names_its_host_paths_and_a_partial_one_is_flagged():
    rf = results.load(H200 / "kernels-server-sample100.json")
    text = "\n".join(report.caveats(rf))
    assert "Partial run" not in text    # the committed run covers all 100 shapes
    assert "cublaslt_autotune: nvmath-python (Python)" in text and "l2: ctypes" in text
    # the same run stopped by its time limit after 52 shapes (as an earlier one was)
    cut = results.ResultFile({**rf.meta, "complete": False}, rf.rows[:52])
    text = "\n".join(report.caveats(cut))
    assert "**Partial run:** 52 shapes of the 100 in `sample100` (stopped by its time limit)" in text


def test_complete_offline_run_has_no_caveat_and_derived_file_says_so():
    rf = results.load(H200 / "kernels-offline.json")
    one_run = results.ResultFile({k: v for k, v in rf.meta.items() if k != "merged_from"}, rf.rows)
    assert report.caveats(one_run) == []
    if "merged_from" in rf.meta:  # the committed grid file joins runs: it says which
        assert "Merged from" in "\n".join(report.caveats(rf))
    text = "\n".join(report.caveats(results.load(H200 / "baselines-offline.json")))
    assert "Derived from `results/h200/kernels-offline.json`" in text


def test_an_ab_run_reports_both_candidates_and_their_head_to_head():
    """The committed A/B file (two kernel sets in one bench run): both candidates' tables, the
    preferred label first, and the geomean of one against the other over the shapes both timed."""
    path = H200 / "runs" / "ab-tile256-e42f7a3.json"
    rf = results.load(path)
    assert report.report_labels(rf, None) == ["l2", "incumbent"]
    assert report.report_labels(rf, "incumbent") == ["incumbent"]
    g, wins, n = report.head_to_head(rf, "l2", "incumbent")
    expect = 1.0
    for r in rf.rows:
        expect *= r["times_ms"]["incumbent"] / r["times_ms"]["l2"]
    assert n == 3 and abs(g - expect ** (1 / 3)) < 1e-12
    assert wins == sum(1 for r in rf.rows if r["times_ms"]["incumbent"] > r["times_ms"]["l2"])
    text = report.markdown([(str(path), rf)])
    assert "Candidates side by side in this run: `l2`, `incumbent`." in text
    assert text.index("Candidate `l2` on 3 shapes") < text.index("Candidate `incumbent` on 3 shapes")
    assert f"| l2 | incumbent | {g:.3f}x | {100 * wins / n:.0f}% | 3 |" in text
    single = report.markdown([(str(path), rf)], "l2")
    assert "side by side" not in single and "Candidate `incumbent`" not in single
