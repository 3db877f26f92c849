"""GPU (an H100, ``pytest -m gpu tests/test_foreign_gpu.py``): kernels of the CUDA-L2 release
through the ``cuda-l2`` adapter pass every check beside ours and the libraries, in one bench.

The release is not part of this repository: ``L2TUI_CUDA_L2_DIR`` names a checkout of it (the test
is skipped without it, and without a GPU). The test takes the first few files, in name order,
whose shim the source policy lets through and that use no fp16-accumulating MMA atom
(``F16F16F16F16``: the accuracy bound for f32 accumulation refuses those, as it should) and no
``CUTE_CHECK_LAST`` (CuTe's macro synchronises the device, which a graph capture refuses): the
policy's refusals are the CPU tests' business; this one asserts that the column-major B, the
stream fork and the tensor view make an accepted file run and be judged right.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness import foreign
from harness.shapes import parse_shape
from harness.source_policy import violations

pytestmark = [pytest.mark.gpu, pytest.mark.compile, pytest.mark.slow]
REPO = Path(__file__).resolve().parent.parent
HANDFUL = 4


def _accepted(folder: Path) -> list[Path]:
    out = []
    for f in sorted(folder.glob("*.cu")):
        text = f.read_text()
        if "F16F16F16F16" in text or "CUTE_CHECK_LAST" in text:
            continue
        try:
            done = foreign.translate_cuda_l2(text, parse_shape(f.stem), f.name)
        except Exception:
            continue
        if not violations(done.source):
            out.append(f)
        if len(out) == HANDFUL:
            break
    return out


def test_published_h100_kernels_pass_every_check_beside_ours(tmp_path):
    from harness.gpuinfo import gpu_present

    root = os.environ.get("L2TUI_CUDA_L2_DIR")
    if not gpu_present() or not root:
        pytest.skip("needs a GPU and L2TUI_CUDA_L2_DIR (a CUDA-L2 checkout)")
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    picked = _accepted(Path(root) / "kernels" / "h100_F32F16F16F32")
    assert len(picked) == HANDFUL
    for f in picked:
        (theirs / f.name).write_text(f.read_text())
    ours = tmp_path / "ours"
    winners = REPO / "results" / ("h100" if (REPO / "results" / "h100" / "winners-f32.json").is_file() else "h200")
    subprocess.run([sys.executable, "-m", "harness", "winners", "render", "--winners",
                    str(winners / "winners-f32.json"), "--out", str(ours)], check=True, timeout=600)
    shapes = ",".join(f.stem.replace("_", "x") for f in picked)
    out = tmp_path / "r.json"
    p = subprocess.run([sys.executable, "-m", "l2tui.cli", "bench", "--kernels", str(ours), "--label", "l2",
                        "--abi", "l2", "--kernels", str(theirs), "--label", "cuda_l2", "--abi", "cuda-l2",
                        "--shapes", shapes, "--timing", "both", "--out", str(out)],
                       capture_output=True, text=True, timeout=3000, env=dict(os.environ))
    assert p.returncode == 0, p.stderr[-2000:]
    doc = json.loads(out.read_text())
    assert doc["meta"]["abis"] == {"l2": "l2", "cuda_l2": "cuda-l2"}
    assert len(doc["rows"]) == HANDFUL
    for row in doc["rows"]:
        assert row["status"]["cuda_l2"] == "ok", (row["m"], row["n"], row["k"], row.get("messages"))
        assert row["status"]["l2"] == "ok" and row["times_ms"]["cuda_l2"] > 0
        assert row["times_ms"]["cublaslt_autotune"] > 0
