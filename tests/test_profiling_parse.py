"""The ncu CSV parser on real outputs recorded on the H200 (tests/fixtures/ncu, see its README)."""

from __future__ import annotations

import csv
import gzip
import io
import json
from pathlib import Path

import pytest

from harness.profiling.metrics import aggregate
from harness.profiling.parse import (merge, normalise, parse_details, parse_ranges, parse_raw, split_by_range,
                                     to_number)

FIX = Path(__file__).parent / "fixtures" / "ncu"


@pytest.fixture(scope="module")
def raw():
    return parse_raw((FIX / "fixtures_raw.csv").read_text())


@pytest.fixture(scope="module")
def details():
    return parse_details((FIX / "fixtures_details.csv").read_text())


@pytest.fixture(scope="module")
def calls(raw, details):
    manifest = json.loads((FIX / "manifest.json").read_text())["calls"]
    kernels = merge(parse_raw((FIX / "fixtures_raw.csv").read_text()), details)
    return manifest, split_by_range(kernels, list(manifest))


def test_numbers_and_units():
    assert to_number("1,419,136") == 1419136.0
    assert to_number("3,199,413,351.97") == pytest.approx(3199413351.97)
    assert to_number("0.65") == 0.65
    assert to_number("") is None and to_number("n/a") is None and to_number("no data") is None
    assert to_number("(384, 1, 1)") == "(384, 1, 1)"
    assert to_number("PolicySpread") == "PolicySpread"
    assert normalise(2.5, "usecond").value == 2500.0 and normalise(2.5, "usecond").unit == "ns"
    assert normalise(3.0, "Gbyte/second").value == 3e9 and normalise(3.0, "Gbyte/second").unit == "byte/second"
    assert normalise(1.5, "Mbyte").value == 1.5e6
    assert normalise(7.0, "%").unit == "%" and normalise("x", "ns").value == "x"


def test_raw_page_rows_units_and_ranges(raw):
    assert len(raw) == 13                      # 11 calls; two of them launch two kernels
    k = raw[4]                                 # cuBLAS 8192^3
    assert k.name.startswith("nvjet_sm90")
    assert k.ranges == ["fx04_cublas_8192x8192x8192"]
    d = k.metrics["gpu__time_duration.sum"]
    assert d.value == 1419136.0 and d.unit == "ns"
    assert k.metrics["sm__throughput.avg.pct_of_peak_sustained_elapsed"].unit == "%"
    assert k.metrics["launch__registers_per_thread"].value == 168.0
    assert k.metrics["launch__cluster_scheduling_policy"].value == "PolicySpread"
    assert k.block == "(384, 1, 1)" and k.grid.startswith("(")
    assert "Kernel Name" not in k.metrics and "ID" not in k.metrics


def test_nvtx_cell():
    cell = '600  "<default domain>:fx00_torch_64x64x64:none:none:none:none:none:none" '
    assert parse_ranges(cell) == ["fx00_torch_64x64x64"]
    assert parse_ranges('1 "<default domain>:outer:none" "<default domain>:inner:none"') == ["outer", "inner"]
    assert parse_ranges("") == []


def test_details_page_sections(details):
    k = details[4]
    sol = k.sections["GPU Speed Of Light Throughput"]
    assert sol["Duration"].value == 1419136.0 and sol["Duration"].unit == "ns"
    assert sol["Compute (SM) Throughput"].value == pytest.approx(93.45)
    assert k.sections["Occupancy"]["Achieved Occupancy"].unit == "%"
    assert k.sections["Memory Workload Analysis"]["Local Memory Spilling Request Overhead"].value is None
    # rule rows (section identifier, no metric name) do not become sections
    assert "SpeedOfLight" not in k.sections
    assert all(label for sec in k.sections.values() for label in sec)


def test_merge_attaches_sections(calls):
    _, groups = calls
    ks = groups["fx04_cublas_8192x8192x8192"]
    assert len(ks) == 1 and ks[0].metrics and ks[0].sections


def test_multi_kernel_calls(calls):
    _, groups = calls
    split = groups["fx05_splitk_256x256x16384"]
    assert [("partial" in k.name, "reduce" in k.name) for k in split] == [(True, False), (False, True)]
    cublas_splitk = groups["fx06_torch_128x128x16384"]
    assert len(cublas_splitk) == 2 and "splitKreduce" in cublas_splitk[1].name
    for ks in (split, cublas_splitk):
        agg = aggregate(ks)
        durs = [k.num("gpu__time_duration.sum") for k in ks]
        assert agg["kernels"].value == 2
        assert agg["duration_us"].value == pytest.approx(sum(durs) / 1000)
        assert agg["duration_us"].unit == "us"
        sm = [k.num("sm__throughput.avg.pct_of_peak_sustained_elapsed") for k in ks]
        expect = sum(s * d for s, d in zip(sm, durs)) / sum(durs)   # duration-weighted
        assert agg["sm_throughput_pct"].value == pytest.approx(expect)
        assert min(sm) <= agg["sm_throughput_pct"].value <= max(sm)
        main = max(ks, key=lambda k: k.num("gpu__time_duration.sum"))
        assert agg["grid_size"].value == main.num("launch__grid_size")


def test_every_fixture_call_has_kernels(calls):
    manifest, groups = calls
    assert set(groups) == set(manifest)
    assert all(groups[r] for r in manifest)


def test_canonical_metrics_of_a_big_gemm(calls):
    _, groups = calls
    agg = aggregate(groups["fx04_cublas_8192x8192x8192"])
    assert agg["tensor_pipe_pct"].value > 90
    assert agg["sm_clock_mhz"].unit == "MHz" and 300 < agg["sm_clock_mhz"].value < 2100
    assert agg["dram_bytes"].value > 3 * 8192 * 8192 * 2 * 0.9     # at least A, B and C once
    assert agg["stall_top"].value == "gmma"
    assert 0 <= agg["stall_memory_frac"].value <= 1
    assert "stall_selected" not in agg


def _drop_columns(text: str, keep) -> str:
    rows = list(csv.reader(io.StringIO(text)))
    idx = [i for i, h in enumerate(rows[0]) if keep(h)]
    out = io.StringIO()
    w = csv.writer(out, quoting=csv.QUOTE_ALL)
    for r in rows:
        w.writerow([r[i] for i in idx])
    return out.getvalue()


def test_missing_sections_leave_metrics_out():
    text = (FIX / "fixtures_raw.csv").read_text()
    only_sol = _drop_columns(text, lambda h: not h.startswith(("smsp__average_warps_issue_stalled", "sm__warps_active",
                                                                "launch__", "dram__", "gpu__dram")))
    ks = parse_raw(only_sol)
    assert len(ks) == 13
    agg = aggregate([ks[0]])
    assert "duration_us" in agg and "sm_throughput_pct" in agg
    for gone in ("dram_throughput_pct", "achieved_occupancy_pct", "grid_size", "stall_memory_frac", "stall_top"):
        assert gone not in agg


def test_stream_fallback_without_nvtx_columns():
    text = (FIX / "fixtures_raw.csv").read_text()
    no_nvtx = _drop_columns(text, lambda h: "_Range" not in h)
    ks = parse_raw(no_nvtx)
    assert all(not k.ranges for k in ks)
    names = [f"c{i}" for i in range(11)]
    groups = split_by_range(ks, names)
    assert [len(groups[n]) for n in names] == [1, 1, 1, 1, 1, 2, 2, 1, 1, 1, 1]


def test_prior_chunks_parse():
    for mf in sorted((FIX / "prior").glob("chunk*_manifest.json")):
        man = json.loads(mf.read_text())["calls"]
        raw = gzip.decompress(mf.with_name(mf.name.replace("_manifest.json", "_raw.csv.gz")).read_bytes()).decode()
        groups = split_by_range(parse_raw(raw), list(man))
        assert all(groups[r] for r in man), mf.name


def test_garbage_is_empty_not_an_exception():
    assert parse_raw("") == [] and parse_details("") == []
    assert parse_raw("==PROF== Connected to process 1\n==WARNING== No kernels were profiled.\n") == []
