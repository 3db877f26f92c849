"""The generated summary says when a run is partial, derived or host-timed through Python."""

from __future__ import annotations

from pathlib import Path

from harness import report, results

H200 = Path(__file__).resolve().parent.parent / "results" / "h200"


def test_partial_server_run_is_flagged_with_its_host_paths():
    rf = results.load(H200 / "kernels-server-sample100.json")
    text = "\n".join(report.caveats(rf))
    assert f"**Partial run:** {len(rf.rows)} shapes of the 100 in `sample100`" in text
    assert "cublaslt_autotune: nvmath-python (Python)" in text and "l2: ctypes" in text


def test_complete_offline_run_has_no_caveat_and_derived_file_says_so():
    assert report.caveats(results.load(H200 / "kernels-offline.json")) == []
    text = "\n".join(report.caveats(results.load(H200 / "baselines-offline.json")))
    assert "Derived from `results/h200/kernels-offline.json`" in text
