"""bench without a GPU, argument errors, kernels-dir parsing (CI, no GPU)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from harness.baselines import parse_baselines
from harness.bench import load_kernels
from harness.errors import HarnessError, KernelSourceError
from harness.gpuinfo import gpu_present


@pytest.mark.skipif(gpu_present(), reason="this machine has a GPU")
def test_bench_without_gpu_is_one_line_error(tmp_path):
    env = dict(os.environ, L2TUI_CACHE_DIR=str(tmp_path / "cache"))
    p = subprocess.run([sys.executable, "-m", "l2tui.cli", "bench", "--shape", "64x64x64", "--out", str(tmp_path / "r.json")],
                       capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("l2tui: error: no NVIDIA GPU found:"), p.stderr
    assert not (tmp_path / "r.json").exists()


def test_bad_baseline_and_bad_shape_are_one_line():
    with pytest.raises(HarnessError, match="unknown baseline 'cublass'"):
        parse_baselines("cublas,cublass")
    assert parse_baselines("none") == []
    assert parse_baselines("torch,cublas,torch") == ["torch", "cublas"]
    p = subprocess.run([sys.executable, "-m", "l2tui.cli", "bench", "--shape", "64x64"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "bad shape" in p.stderr or "unknown shapes" in p.stderr


def test_kernels_dir(tmp_path):
    with pytest.raises(KernelSourceError, match="not a directory"):
        load_kernels(str(tmp_path / "nope"))
    with pytest.raises(KernelSourceError, match="no kernel files"):
        load_kernels(str(tmp_path))
    (tmp_path / "64_128_256.cu").write_text("// x")
    (tmp_path / "notes.cu").write_text("// ignored")
    ks = load_kernels(str(tmp_path))
    assert [str(s) for s in ks] == ["64x128x256"]


def test_candidate_sets_pair_each_kernels_folder_with_its_label():
    from harness.bench import candidate_sets

    assert candidate_sets(None, None) == []
    assert candidate_sets(["k"], None) == [("candidate", "k")]
    assert candidate_sets("k", "l2") == [("l2", "k")]
    assert candidate_sets(["a", "b"], ["incumbent", "l2"]) == [("incumbent", "a"), ("l2", "b")]
    with pytest.raises(HarnessError, match="one --label per --kernels"):
        candidate_sets(["a", "b"], None)
    with pytest.raises(HarnessError, match="one --label per --kernels"):
        candidate_sets(["a", "b"], ["x"])
    with pytest.raises(HarnessError, match="must differ"):
        candidate_sets(["a", "b"], ["x", "x"])
    with pytest.raises(HarnessError, match="baseline's name"):
        candidate_sets(["a"], ["cublas"])
    with pytest.raises(HarnessError, match="give --kernels DIR too"):
        candidate_sets(None, ["x"])


def test_two_kernel_sets_without_labels_is_a_one_line_error(tmp_path):
    for d in ("a", "b"):
        (tmp_path / d).mkdir()
        (tmp_path / d / "64_64_64.cu").write_text("// x")
    p = subprocess.run([sys.executable, "-m", "l2tui.cli", "bench", "--kernels", str(tmp_path / "a"),
                        "--kernels", str(tmp_path / "b"), "--label", "one"],
                       capture_output=True, text=True, timeout=120)
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1, p.stderr
    assert "give one --label per --kernels (2 --kernels, 1 --label)" in lines[0]


@pytest.mark.skipif(gpu_present(), reason="this machine has a GPU")
def test_sweep_without_gpu_is_one_line_error_and_leaves_no_session(tmp_path):
    env = dict(os.environ, L2TUI_CACHE_DIR=str(tmp_path / "cache"))
    p = subprocess.run([sys.executable, "-m", "l2tui.cli", "sweep", "--shapes", "64x64x64", "--policy", "search",
                        "--session", str(tmp_path / "sw")], capture_output=True, text=True, env=env, timeout=120)
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1, p.stderr
    assert lines[0] == ("l2tui: error: no NVIDIA GPU found: run on a machine with a GPU and its driver "
                        "(nvidia-smi must work)")
    assert not (tmp_path / "sw" / "events.jsonl").exists()


@pytest.mark.parametrize("argv0,prog", [("/x/l2tui/__main__.py", "l2tui"), ("/x/harness/__main__.py", "python -m harness"),
                                        ("/usr/bin/l2tui", "l2tui")])
def test_the_result_files_command_names_what_the_user_typed(monkeypatch, argv0, prog):
    from harness.bench import _command_line

    monkeypatch.setattr("sys.argv", [argv0, "bench", "--shapes", "grid", "--kernels", "my dir"])
    assert _command_line() == f"{prog} bench --shapes grid --kernels 'my dir'"
