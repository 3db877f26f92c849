"""harness.foreign_report: another system's claimed speedups beside what a bench measured of its
kernels and of ours (a claims CSV in the published layout, written by the test; a bench result file
timed both ways, with one of their kernels refused and one failing a check)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.errors import HarnessError
from harness.foreign_report import Claims, compare, markdown, read_claims
from harness.results import validate
from harness.shapes import Shape

ROOT = Path(__file__).resolve().parent.parent
HEADER = "mnk,torch.matmul,cuBLAS-max,cuBLASLt-heuristic-max,cuBLASLt-auto-tuning-tn,cuBLASLt-auto-tuning-max\n"


def _claims_csv(tmp_path: Path, rows: list[str]) -> Path:
    p = tmp_path / "claims.csv"
    p.write_text(HEADER + "".join(r + "\n" for r in rows))
    return p


def _row(m: int, n: int, k: int, per_call: dict, chained: dict, status: dict) -> dict:
    checks = {lb: {"ok": st == "ok", "failed": None if st == "ok" else st, "detail": st} for lb, st in status.items()}
    return {"m": m, "n": n, "k": k, "times_ms": per_call, "times_ms_chained": chained, "roofline_ms": 0.001,
            "checks": checks, "status": status}


def _bench() -> dict:
    """Four shapes: theirs faster on one, ours on two, theirs refused on the fourth."""
    ok = {"cuda_l2": "ok", "h100": "ok", "cublaslt_autotune": "ok"}
    return {"meta": {"gpu": "NVIDIA H100 80GB HBM3", "driver": "580", "cuda": "13.0", "nvcc": "13.0", "date": "d",
                     "git_rev": "r", "mode": "offline", "acc": "f32", "method": "m", "timing": "both"},
            "rows": [_row(64, 64, 64, {"cuda_l2": 0.010, "h100": 0.008, "cublaslt_autotune": 0.012},
                          {"cuda_l2": 0.009, "h100": 0.007, "cublaslt_autotune": 0.010}, ok),
                     _row(128, 128, 128, {"cuda_l2": 0.010, "h100": 0.012, "cublaslt_autotune": 0.012},
                          {"cuda_l2": 0.009, "h100": 0.011, "cublaslt_autotune": 0.010}, ok),
                     _row(256, 256, 256, {"cuda_l2": None, "h100": 0.010, "cublaslt_autotune": 0.011},
                          {"cuda_l2": None, "h100": 0.009, "cublaslt_autotune": 0.010},
                          {**ok, "cuda_l2": "accuracy"}),
                     _row(512, 512, 512, {"cuda_l2": None, "h100": 0.020, "cublaslt_autotune": 0.022},
                          {"cuda_l2": None, "h100": 0.019, "cublaslt_autotune": 0.020},
                          {**ok, "cuda_l2": "compile_error"})]}


def test_claims_are_read_per_shape_and_unusable_rows_are_counted(tmp_path):
    p = _claims_csv(tmp_path, ["64_64_64,1,1,1,1.30,1.25", "128_128_128,1,1,1,1.1,1.05", "oops,1,1,1,1,1",
                               "256_256_256,1,1,1,1,nan", "512_512_512,1,1,1,1,-2", "1024_1024,1,1,1,1,1.0"])
    claims = read_claims(p)
    assert claims.speedups == {Shape(64, 64, 64): 1.25, Shape(128, 128, 128): 1.05}
    assert claims.skipped == 4


@pytest.mark.parametrize("text,why", [("a,b\n1,2\n", "no 'mnk'"), ("", "no 'mnk'")])
def test_a_file_that_is_not_a_claims_csv_is_refused_in_one_line(tmp_path, text, why):
    p = tmp_path / "c.csv"
    p.write_text(text)
    with pytest.raises(HarnessError, match=why):
        read_claims(p)


def test_a_huge_claims_file_is_not_read(tmp_path, monkeypatch):
    import harness.foreign_report as fr

    monkeypatch.setattr(fr, "MAX_CLAIMS_BYTES", 100)
    p = _claims_csv(tmp_path, ["64_64_64,1,1,1,1,1.2"] * 10)
    with pytest.raises(HarnessError, match="not a claims CSV"):
        read_claims(p)


def test_each_shape_gets_the_claim_and_both_sides_in_both_modes():
    claims = Claims({Shape(64, 64, 64): 1.25, Shape(128, 128, 128): 1.05, Shape(256, 256, 256): 1.10})
    comp = compare(validate(_bench()), claims, "cuda_l2", "h100")
    first = comp.lines[0]
    assert first.claim == 1.25 and first.theirs == pytest.approx((1.2, 10 / 9)) and first.ours == pytest.approx((1.5, 10 / 7))
    assert [ln.their_status for ln in comp.lines] == ["ok", "ok", "accuracy", "compile_error"]
    assert comp.lines[3].claim is None and comp.lines[2].theirs == (None, None)
    assert len(comp.passed()) == 2 and comp.ours_ahead() == (1, 2)
    assert comp.failures() == {"accuracy": 1, "compile_error": 1}


def test_the_report_says_the_claim_the_measurement_and_who_wins_where():
    claims = Claims({Shape(64, 64, 64): 1.25, Shape(128, 128, 128): 1.05}, skipped=3)
    text = markdown(compare(validate(_bench()), claims, "cuda_l2", "h100"), claims, "NVIDIA H100 80GB HBM3")
    assert "## cuda_l2 beside h100 on NVIDIA H100 80GB HBM3, over cuBLASLt-autotune" in text
    assert "cuda_l2 passed every check on 2. h100 is faster per call on 1 of the 2 shapes cuda_l2 passed (50 %)." in text
    # the claim over the two shapes it covers (geomean of 1.25 and 1.05), theirs measured per call
    assert f"| cuda_l2, where it passed | 2 | {(1.25 * 1.05) ** 0.5:.3f}x | {(1.2 * 1.2) ** 0.5:.3f}x |" in text
    assert "cuda_l2 without a time: 1 accuracy, 1 compile_error; 3 rows of the claims file did not parse" in text
    assert "| 256x256x256 | - | - | 1.100 | - | 1.111 | h100 (cuda_l2: accuracy) |" in text
    assert text.count("| cuda_l2 |") == 1     # 128x128x128: theirs ahead


def test_a_label_the_bench_lacks_is_refused_in_one_line():
    with pytest.raises(HarnessError, match="no 'l2' times"):
        compare(validate(_bench()), Claims({}), "cuda_l2", "l2")


def test_the_command_writes_the_report(tmp_path):
    bench = tmp_path / "b.json"
    bench.write_text(json.dumps(_bench()))
    claims = _claims_csv(tmp_path, ["64_64_64,1,1,1,1.3,1.25"])
    out = tmp_path / "r.md"
    r = subprocess.run([sys.executable, "-m", "harness", "foreign-report", str(bench), "--claims", str(claims),
                        "--theirs", "cuda_l2", "--ours", "h100", "--out", str(out)], cwd=ROOT, capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr
    assert out.read_text().startswith("## cuda_l2 beside h100 on NVIDIA H100 80GB HBM3")
    bad = subprocess.run([sys.executable, "-m", "harness", "foreign-report", str(bench), "--claims", str(bench)],
                         cwd=ROOT, capture_output=True, text=True)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "not a claims CSV" in bad.stderr
