"""bf16 (issue 55), the harness side: a family renders in bf16 through its DTYPE knob, the fp16
render stays the text that was measured, a bf16 kernel declares its element type by its entry
point (``l2_hgemm_bf16``) and a run of the other element type refuses it in one line, and result
and winners files carry the element type (files without it read as fp16).

Why these tests: a bf16 render that kept one fp16 spelling would compute on misread bits, and a
bf16 kernel timed on fp16 data would produce plausible-looking garbage; both must fail here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness import families as F
from harness import results as R
from harness import winners as W
from harness.build import ENTRY_POINTS, build, check_abi, source_dtype
from harness.errors import HarnessError, KernelSourceError
from harness.shapes import Shape

BF16 = {"DTYPE": "DTYPE_BF16"}
H200 = Path(__file__).resolve().parents[1] / "results" / "h200"


def _code(source: str) -> str:
    """``source`` without its comments (what the compiler reads)."""
    return "".join(line.split("//", 1)[0] + "\n" for line in source.splitlines())


@pytest.mark.parametrize("fam", [f.name for f in F.families()])
def test_every_family_renders_in_bf16_with_no_fp16_left_in_its_code(fam):
    fp16 = F.render(fam)
    assert fp16 == F.get_family(fam).template()   # the default render is the template, unchanged
    src = F.render(fam, BF16)
    assert F.FP16_RESIDUE.search(fp16) is not None   # the check can fail: fp16 code has them
    assert F.FP16_RESIDUE.search(_code(src)) is None
    assert "#include <cuda_bf16.h>" in src
    assert source_dtype(src) == "bf16" and source_dtype(fp16) == "fp16"
    cfg = F.Config.from_source(src)
    assert cfg is not None and cfg.dtype == "bf16" and cfg.name.endswith("-bf16")
    assert cfg.source() == src   # a bf16 source reads back as the configuration that renders it


def test_fp16_configurations_are_unchanged_by_the_dtype_knob():
    for cfg in F.catalog("f32", "sm_90a")[:20]:
        assert "DTYPE" not in cfg.knob_dict and cfg.dtype == "fp16"
        assert F.Config.of(cfg.family, {**cfg.knob_dict, "DTYPE": "DTYPE_F16"}) == cfg
        assert F.render(cfg.family, {**cfg.knob_dict, "DTYPE": "DTYPE_F16"}) == cfg.source()


def test_bf16_refuses_f16_accumulation_and_unknown_dtypes_in_one_line():
    assert F.validate("sm80_mma", {**F.get_family("sm80_mma").defaults(), **BF16, "ACC": "ACC_F16"}) == [
        "DTYPE_BF16 accumulates in f32 only: ACC_F16 is an fp16 option (set ACC ACC_F32)"]
    with pytest.raises(F.FamilyError, match="f32 only"):
        F.render("tiny_mma", {**BF16, "ACC": "ACC_F16"})
    with pytest.raises(F.FamilyError, match="DTYPE=DTYPE_F8 is not legal"):
        F.render("tiny_mma", {"DTYPE": "DTYPE_F8"})
    with pytest.raises(F.FamilyError, match="f32 only"):
        F.catalog("f16", dtype="bf16")
    with pytest.raises(F.FamilyError, match="render the family with DTYPE"):
        F.set_knobs(F.render("tiny_mma"), BF16)   # a knob line cannot retype the whole kernel


def test_the_bf16_catalog_holds_every_family_tagged_and_valid():
    cfgs = F.catalog("f32", None, "bf16")
    assert {c.family for c in cfgs} == set(F.FAMILIES)
    assert len({c.name for c in cfgs}) == len(cfgs)
    for c in cfgs:
        assert c.dtype == "bf16" and c.acc == "f32" and c.name.endswith("-bf16")
        assert F.validate(c.family, c.knob_dict) == [], c.name
    on_80 = F.catalog("f32", "sm_80", "bf16")
    assert on_80 and all(F.get_family(c.family).runs_on(80) for c in on_80)


@pytest.mark.parametrize("has, run", [("bf16", "fp16"), ("fp16", "bf16")])
def test_check_abi_refuses_a_kernel_of_the_other_dtype_in_one_line(has, run):
    src = F.render("tiny_mma", BF16 if has == "bf16" else {})
    assert check_abi(src) == has and check_abi(src, has) == has
    with pytest.raises(KernelSourceError) as e:
        check_abi(src, run)
    msg = str(e.value)
    assert "\n" not in msg and f"takes {has}" in msg and f"this run is {run}" in msg
    assert ENTRY_POINTS[has] in msg


@pytest.mark.parametrize("has, run", [("bf16", "fp16"), ("fp16", "bf16")])
def test_bench_refuses_kernels_of_the_other_dtype_in_one_line_before_anything_runs(tmp_path, has, run):
    kdir = tmp_path / "k"
    kdir.mkdir()
    (kdir / "64_64_64.cu").write_text(F.render("tiny_mma", BF16 if has == "bf16" else {}))
    p = subprocess.run([sys.executable, "-m", "harness", "bench", "--kernels", str(kdir), "--baselines", "",
                        "--dtype", run, "--out", str(tmp_path / "r.json")],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode != 0 and "Traceback" not in p.stderr
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and f"takes {has}" in lines[0] and "64_64_64.cu" in lines[0], p.stderr
    assert not (tmp_path / "r.json").exists()


def test_bench_refuses_bf16_with_f16_accumulation_in_one_line(tmp_path):
    p = subprocess.run([sys.executable, "-m", "harness", "bench", "--shape", "64x64x64", "--dtype", "bf16",
                        "--acc", "f16", "--out", str(tmp_path / "r.json")], capture_output=True, text=True, timeout=120)
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode != 0 and len(lines) == 1 and "f32 only" in lines[0], p.stderr


# ------------------------------------------------------------------ files


def _result(dtype: str | None) -> dict:
    meta = {"gpu": "H200", "driver": "1", "cuda": "13.0", "nvcc": "13.0", "date": "d", "git_rev": "r",
            "mode": "offline", "acc": "f32", "method": "m"}
    if dtype is not None:
        meta["dtype"] = dtype
    return {"meta": meta, "rows": [{"m": 64, "n": 64, "k": 64, "times_ms": {"cublas": 0.01},
                                    "roofline_ms": 0.001, "checks": {}}]}


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_result_file_dtype_round_trips(tmp_path, dtype):
    path = tmp_path / "r.json"
    R.save(R.validate(_result(dtype)), path, write_csv=False)
    back = R.load(path)
    assert back.dtype == dtype and json.loads(path.read_text())["meta"]["dtype"] == dtype


def test_a_result_file_without_dtype_reads_as_fp16_and_merges_only_with_fp16(tmp_path):
    old = tmp_path / "old.json"
    old.write_text(json.dumps(_result(None)))
    rf = R.load(old)
    assert rf.dtype == "fp16"
    assert R.merge([("old", rf), ("new", R.validate(_result("fp16")))]).dtype == "fp16"
    with pytest.raises(R.ResultFormatError, match="dtype differs"):
        R.merge([("old", rf), ("new", R.validate(_result("bf16")))])


@pytest.mark.parametrize("meta, words", [({"dtype": "fp8"}, "meta.dtype is 'fp8'"),
                                         ({"dtype": "bf16", "acc": "f16"}, "f32 only")])
def test_a_bad_result_dtype_is_one_line(meta, words):
    doc = _result(None)
    doc["meta"].update(meta)
    with pytest.raises(R.ResultFormatError, match=words) as e:
        R.validate(doc)
    assert "\n" not in str(e.value)


def _bf16_winners() -> W.Winners:
    cfgs = F.catalog("f32", "sm_80", "bf16")[:2]
    configs = {c.name: W.Winner(c.name, c, W.sha256(c.source())) for c in cfgs}
    shapes = {Shape(64, 64, 64): cfgs[0].name, Shape(128, 64, 256): cfgs[1].name}
    return W.Winners("f32", "bf16 test", configs, shapes, "bf16")


def test_bf16_winners_round_trip_and_render_bf16_kernels(tmp_path):
    w = _bf16_winners()
    path = tmp_path / "w.json"
    path.write_text(W.dump(w))
    assert json.loads(path.read_text())["dtype"] == "bf16"
    back = W.load(path)
    assert back == w and W.dump(back) == path.read_text()
    for src in W.render_sources(back).values():
        assert check_abi(src, "bf16") == "bf16"
    kdir = tmp_path / "k"
    W.render_dir(path, kdir)
    assert W.from_dir(kdir, "f32", "bf16 test", "bf16").configs == w.configs
    with pytest.raises(W.WinnersError, match="takes bf16, not fp16"):
        W.from_dir(kdir, "f32")


def test_committed_fp16_winners_have_no_dtype_and_read_as_fp16():
    path = H200 / "winners-f32.json"
    assert "dtype" not in json.loads(path.read_text())
    w = W.load(path)
    assert w.dtype == "fp16" and W.dump(w) == path.read_text()


@pytest.mark.parametrize("change, words", [({"dtype": "fp8"}, "'dtype' must be"), ({"dtype": "fp16"}, "takes bf16")])
def test_a_bad_winners_dtype_is_one_line(change, words):
    doc = json.loads(W.dump(_bf16_winners()))
    doc.update(change)
    with pytest.raises(W.WinnersError, match=words) as e:
        W.parse(doc)
    assert "\n" not in str(e.value)


# ------------------------------------------------------------------ real nvcc


_MMA_KNOBS = {
    "sm80_mma": {"BM": "64", "BN": "128", "BK": "64", "WARPS_M": "2", "WARPS_N": "2", "STAGES": "3", "SPLIT_K": "0"},
    "small_splitk": {"BM": "32", "BN": "64", "SPLIT_K": "0"},
    "tiny_mma": {"AHEAD": "2", "EPILOGUE": "EPI_SMEM"},   # the smem epilogue (WARPS_K 1 only)
    "skinny_splitk": {},
}
_SM90_KNOBS = {
    "sm90_cutlass": {"TILE_M": "128", "TILE_N": "128", "SCHEDULE": "PINGPONG"},
    "sm90_cutlass_t": {},
    "sm90_ksplit": {},
}
BUILDS = ([(f, "sm_80", k) for f, k in _MMA_KNOBS.items()] + [(f, "sm_90a", k) for f, k in _MMA_KNOBS.items()]
          + [(f, "sm_90a", k) for f, k in _SM90_KNOBS.items()])


@pytest.mark.compile
@pytest.mark.slow
@pytest.mark.parametrize("fam, arch, knobs", BUILDS, ids=[f"{f}-{a}" for f, a, _ in BUILDS])
def test_every_family_builds_in_bf16_and_exports_the_bf16_entry_point(fam, arch, knobs):
    res = build(F.render(fam, {**knobs, **BF16}), arch=arch, dtype="bf16")
    assert res.ok, res.error_text()
    assert res.so_path is not None and res.so_path.is_file()


def test_dtype_knob_value_names_are_the_harness_dtypes():
    assert [F.dtype_knob(d) for d in F.DTYPES] == list(F.DTYPE_VALUES)
    with pytest.raises(HarnessError):
        F.dtype_knob("fp8")
