"""GPU (``pytest -m gpu tests/test_bf16_run_gpu.py``): a bf16 run end to end, through the commands.

``l2tui run --headless --policy search --dtype bf16`` on one shape for a few steps: every kernel the
run tried is a bf16 kernel (it defines ``l2_hgemm_bf16``), every one that was checked passed every
check, and the track has a best. ``l2tui export --build`` of that session gives a bf16 library whose
``lib.matmul`` on ``torch.bfloat16`` tensors agrees with ``torch.matmul``: its error against an fp32
reference stays within twice torch's own bf16 error (the harness's bound, relative to cuBLAS's).
The run is kept to kernels whose builds take seconds: a small shape (128 x 128 x 128, where the
small families win by a wide margin, so the export dispatches its kernel), a pick of the cost
model's top two (both tiny_mma there) without the kinds it times besides, two steps of two
candidates, and no known kernels (on an H100 the fp16 twins of its model-shape winners are CUTLASS
kernels). Each of those brings
CUTLASS builds of a minute of nvcc: with them the run alone outlasted 330 s on an H100 from an
empty build cache.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.gpu, pytest.mark.compile]

SHAPE = (128, 128, 128)
STEPS = 2
#: the small families only: no extra kinds in the pick, no known kernels, two candidates a step
#: (see the module docstring)
QUICK_PICK = "[loop]\nknown = false\n[search]\npick_top = 2\npick_kinds = false\ncandidates_per_step = 2\n"


def _needs_gpu() -> None:
    from harness.gpuinfo import gpu_present

    if not gpu_present():
        pytest.skip("no GPU")


def _l2tui(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "l2tui.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=dict(os.environ))


@pytest.fixture(scope="module")
def bf16_session(tmp_path_factory: pytest.TempPathFactory) -> Path:
    _needs_gpu()
    sdir = tmp_path_factory.mktemp("bf16") / "run"
    config = sdir.parent / "quick-pick.toml"
    config.write_text(QUICK_PICK)
    p = _l2tui("run", "--headless", "--policy", "search", "--dtype", "bf16", "--acc", "f32", "--config", str(config),
               "--shapes", "x".join(map(str, SHAPE)), "--max-steps", str(STEPS), "--session", str(sdir))
    assert p.returncode == 0, (p.stdout[-3000:], p.stderr[-3000:])
    return sdir


def test_a_bf16_search_run_tries_bf16_kernels_that_pass_every_check(bf16_session: Path):
    from harness.build import source_dtype
    from l2tui.config import session_dtype
    from l2tui.session import Session

    s = Session.open(bf16_session)
    assert session_dtype(s.config) == "bf16"
    kernels = sorted((bf16_session / "kernels").glob("*.cu"))
    assert kernels
    assert {k.name: source_dtype(k.read_text()) for k in kernels} == {k.name: "bf16" for k in kernels}
    checked = [e for e in s.events if e["type"] == "checked"]
    assert checked, "no candidate reached the checks"
    assert [e for e in checked if not e.get("ok")] == []
    best = [e for e in s.events if e["type"] == "best"]
    assert best, "the track ended without a best kernel"
    rewards = s.rewards()
    assert [r for r in rewards if r.get("kind") == "ok"], "no reward row for a kernel that passed"
    assert {r["dtype"] for r in rewards} == {"bf16"}


def test_the_export_of_a_bf16_run_multiplies_torch_bfloat16_tensors(bf16_session: Path, tmp_path: Path):
    torch = pytest.importorskip("torch")
    from l2tui.export import runtime

    out = tmp_path / "exp"
    p = _l2tui("export", str(bf16_session), "--out", str(out), "--build")
    assert p.returncode == 0, (p.stdout[-3000:], p.stderr[-3000:])
    lib = runtime.load(out, strict=True)
    assert lib.dtype == "bf16"
    m, n, k = SHAPE
    assert lib.route(m, n, k).kind == "kernel"
    g = torch.Generator(device="cuda").manual_seed(55)
    a = torch.randn((m, k), generator=g, device="cuda").bfloat16()
    b = torch.randn((k, n), generator=g, device="cuda").bfloat16()
    c = lib.matmul(a, b)
    ref = torch.matmul(a.double(), b.double())
    theirs = torch.matmul(a, b)
    torch.cuda.synchronize()
    assert c.dtype == torch.bfloat16 and tuple(c.shape) == (m, n)

    def err(x: "torch.Tensor") -> float:
        return float((x.double() - ref).norm() / ref.norm())

    assert err(c) <= 2 * err(theirs), (err(c), err(theirs))
    with pytest.raises(runtime.MatmulArgumentError):
        lib.matmul(a.half(), b.half())   # the other half type is refused, not misread
