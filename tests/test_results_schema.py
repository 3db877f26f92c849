"""Result-file schema: round trip, CSV beside the JSON, validation errors."""

from __future__ import annotations

import csv
import json
import math

import pytest

from harness.bench import summary_table
from harness.results import ResultFile, ResultFormatError, csv_path_for, load, problems, save, validate

META = {"gpu": "NVIDIA H200", "driver": "580.159", "cuda": "13.0", "nvcc": "13.0.88", "date": "2026-11-29T09:00:00+00:00",
        "git_rev": "abc123", "mode": "offline", "acc": "f32", "method": "graph"}


def _row(m, n, k, **times):
    return {"m": m, "n": n, "k": k, "times_ms": times, "roofline_ms": 0.01,
            "checks": {lb: {"ok": True, "failed": None, "detail": ""} for lb in times},
            "status": {lb: "ok" for lb in times}}


def test_round_trip_json_and_csv(tmp_path):
    rf = ResultFile(dict(META), [_row(64, 64, 64, cublas=0.002, torch=0.003, candidate=0.0015),
                                 _row(4096, 4096, 4096, cublas=0.2, torch=None, candidate=0.19)])
    jp, cp = save(rf, tmp_path / "r.json")
    assert cp == csv_path_for(jp) == tmp_path / "r.csv"
    back = load(jp)
    assert back.meta["gpu"] == "NVIDIA H200" and back.meta["schema"] == 1
    assert back.rows == json.loads(jp.read_text())["rows"]
    assert back.rows[1]["times_ms"]["torch"] is None
    assert back.candidate_labels() == ["candidate"]
    rows = list(csv.DictReader(open(cp)))
    assert rows[0]["cublas_ms"] == "0.002" and rows[1]["torch_ms"] == "" and rows[1]["size_class"] == "big"
    table = summary_table(back)
    assert "candidate vs cublas" in table and "roofline fraction candidate" in table


def test_a_saved_file_holds_one_row_a_line_under_an_indented_head(tmp_path):
    rows = [_row(64, 64, 64, cublas=0.002, candidate=0.0015), _row(128, 64, 64, cublas=0.003, candidate=None)]
    jp, _ = save(ResultFile(dict(META), rows), tmp_path / "r.json", write_csv=False)
    text = jp.read_text()
    lines = text.splitlines()
    assert lines[0] == "{" and lines[1] == ' "meta": {' and lines[-1] == "}"
    assert [json.loads(ln.rstrip(",")) for ln in lines if ln.startswith('{"m":')] == json.loads(text)["rows"]
    assert load(jp).rows == json.loads(text)["rows"] and len(json.loads(text)["rows"]) == 2


def test_nan_becomes_null(tmp_path):
    rf = ResultFile(dict(META), [_row(64, 64, 64, cublas=0.002)])
    rf.rows[0]["spread"] = {"cublas": math.nan}
    jp, _ = save(rf, tmp_path / "r.json", write_csv=False)
    assert json.loads(jp.read_text())["rows"][0]["spread"]["cublas"] is None


@pytest.mark.parametrize("mutate, needle", [
    (lambda o: o["meta"].pop("gpu"), "meta lacks 'gpu'"),
    (lambda o: o["meta"].__setitem__("mode", "fast"), "meta.mode"),
    (lambda o: o.pop("rows"), "missing list 'rows'"),
    (lambda o: o["rows"][0].pop("roofline_ms"), "lacks 'roofline_ms'"),
    (lambda o: o["rows"][0].__setitem__("m", -4), "rows[0].m"),
    (lambda o: o["rows"][0]["times_ms"].__setitem__("cublas", "fast"), "times_ms.cublas"),
    (lambda o: o["rows"][0].__setitem__("checks", []), "checks is not an object"),
])
def test_validation_errors_name_the_problem(mutate, needle):
    obj = {"meta": dict(META), "rows": [_row(64, 64, 64, cublas=0.002)]}
    assert problems(obj) == []
    mutate(obj)
    with pytest.raises(ResultFormatError) as ei:
        validate(obj)
    assert needle in str(ei.value)
    assert "\n" not in str(ei.value)


def test_load_errors_are_one_line(tmp_path):
    with pytest.raises(ResultFormatError, match="cannot read"):
        load(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ResultFormatError, match="not JSON"):
        load(bad)
