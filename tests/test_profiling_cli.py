"""``l2tui profile``: arguments, the printed verdict and tables, the JSON written by --out.

The profile itself comes from the real ncu outputs recorded on the H200 (the
GPU run of this command is in test_profiling_gpu.py and fixtures/ncu/cli_torch_8192.txt).
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from harness.profiling import Profile
from harness.profiling import api
from harness.profiling.cli import render
from harness.profiling.parse import merge, parse_details, parse_raw, split_by_range
from harness.shapes import Shape
from l2tui.cli import build_parser, main

FIX = Path(__file__).parent / "fixtures" / "ncu"


@pytest.fixture(scope="module")
def splitk_profile() -> Profile:
    manifest = json.loads((FIX / "manifest.json").read_text())["calls"]
    kernels = merge(parse_raw((FIX / "fixtures_raw.csv").read_text()),
                    parse_details((FIX / "fixtures_details.csv").read_text()))
    ks = split_by_range(kernels, list(manifest))["fx05_splitk_256x256x16384"]
    return Profile.from_kernels("splitk", Shape(256, 256, 16384), "f32", ks)


def test_profile_is_a_registered_command():
    parser, modules = build_parser()
    assert "profile" in modules
    args = parser.parse_args(["profile", "--shape", "64x64x64", "--kernel", "k.cu", "--all", "--out", "x.json"])
    assert args.kernel == "k.cu" and args.all and args.out == "x.json" and args.acc == "f32"
    with pytest.raises(SystemExit):
        parser.parse_args(["profile", "--shape", "64x64x64", "--kernel", "k.cu", "--baseline", "torch"])


def test_render_filtered_and_all(splitk_profile):
    out = io.StringIO()
    render(splitk_profile, out=out)
    text = out.getvalue()
    assert text.splitlines()[0].startswith("splitk on 256x256x16384 (f32): memory-bandwidth-bound")
    assert "[2 kernels in the call]" in text and "thresholds:" in text
    assert "Kernels in the call" in text and "GPU Speed Of Light Throughput" not in text
    full = io.StringIO()
    render(splitk_profile, all_=True, out=full)
    t = full.getvalue()
    assert "[GPU Speed Of Light Throughput]" in t and "[Occupancy]" in t
    assert "l2p_splitk_partial" in t and "l2p_splitk_reduce" in t
    assert len(t) > 3 * len(text)


def test_out_writes_json(monkeypatch, tmp_path, capsys, splitk_profile):
    seen = {}

    def fake_profile_kernel(kernel, shape, acc="f32", **kw):
        seen.update(kernel=kernel, shape=shape, acc=acc, **kw)
        return splitk_profile

    monkeypatch.setattr(api, "profile_kernel", fake_profile_kernel)
    out = tmp_path / "p.json"
    rc = main(["profile", "--shape", "256x256x16384", "--kernel", "splitk.cu", "--acc", "f16", "--out", str(out)])
    assert rc == 0
    assert seen["shape"] == Shape(256, 256, 16384) and seen["acc"] == "f16" and seen["kernel"] == "splitk.cu"
    d = json.loads(out.read_text())
    assert d["verdict"]["class"] == "memory-bandwidth-bound"
    assert len(d["kernels"]) == 2 and d["metrics"]["kernels"]["value"] == 2
    assert Profile.from_dict(d).filtered.keys() == splitk_profile.filtered.keys()
    assert "memory-bandwidth-bound" in capsys.readouterr().out


def test_bad_shape_and_accumulator_are_one_line_errors(capsys):
    assert main(["profile", "--shape", "64x64", "--baseline", "torch"]) == 2
    assert "bad shape" in capsys.readouterr().err
    assert main(["profile", "--shape", "64x64x64", "--baseline", "torch", "--acc", "bf16"]) == 2
    assert "bad accumulator" in capsys.readouterr().err
