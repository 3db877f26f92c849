"""One-line errors: ncu missing, counters refused, no kernel captured, timeout, bad input.

No machine here can refuse counters on purpose (the H200 runs ncu as root), so
the refused-counters case runs the real runner against a small executable that
prints ncu's documented ERR_NVGPUCTRPERM text; the no-kernel and application-error
cases print the texts recorded from ncu 2025.3.1 on the H200 (fixtures/ncu/errors).
"""

from __future__ import annotations

import json
import stat
import sys
import time
from pathlib import Path

import pytest

from harness.errors import HarnessError, KernelSourceError
from harness.profiling import CountersRefused, NcuMissing, NoKernelProfiled, ProfileFailed, ProfileTimeout
from harness.profiling import ncu as ncu_mod
from harness.profiling.api import profile_kernel
from harness.profiling.errors import classify_ncu_failure

FIX = Path(__file__).parent / "fixtures" / "ncu"
# The text ncu prints (documented at https://developer.nvidia.com/ERR_NVGPUCTRPERM):
PERM_TEXT = ("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance "
             "Counters on the target device 0. For instructions on enabling permissions and to get more "
             "information see https://developer.nvidia.com/ERR_NVGPUCTRPERM\n")


def _tool(tmp_path: Path, text: str, sleep: float = 0.0, rc: int = 0) -> str:
    p = tmp_path / "ncu"
    p.write_text(f"#!{sys.executable}\nimport sys, time\n"
                 "if '--version' in sys.argv: print('Version 2025.3.1.0'); sys.exit(0)\n"
                 "if '--list-sections' in sys.argv: sys.exit(0)\n"
                 f"time.sleep({sleep})\nsys.stdout.write({text!r})\nsys.exit({rc})\n")
    p.chmod(p.stat().st_mode | stat.S_IXUSR)
    return str(p)


@pytest.fixture()
def so(tmp_path):
    f = tmp_path / "k.so"
    f.write_bytes(b"\x7fELF")          # never loaded: the tool stands in for ncu + driver
    return str(f)


def test_ncu_missing(monkeypatch, tmp_path):
    monkeypatch.delenv("L2TUI_NCU", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(ncu_mod, "_CANDIDATES", ())
    with pytest.raises(NcuMissing) as e:
        ncu_mod.find_ncu()
    msg = str(e.value)
    assert "\n" not in msg and "PATH" in msg and "L2TUI_NCU" in msg
    assert isinstance(e.value, HarnessError)


def test_l2tui_ncu_must_be_executable(monkeypatch, tmp_path):
    f = tmp_path / "ncu"
    f.write_text("")
    monkeypatch.setenv("L2TUI_NCU", str(f))
    with pytest.raises(NcuMissing, match="not an executable"):
        ncu_mod.find_ncu()


def test_cli_prints_one_line(monkeypatch, tmp_path, capsys):
    from l2tui.cli import main

    monkeypatch.delenv("L2TUI_NCU", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(ncu_mod, "_CANDIDATES", ())
    assert main(["profile", "--shape", "64x64x64", "--baseline", "torch"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("l2tui: error: ncu (Nsight Compute CLI) not found") and "\n" not in err


def test_counters_refused(monkeypatch, tmp_path, so):
    monkeypatch.setenv("L2TUI_NCU", _tool(tmp_path, PERM_TEXT, rc=1))
    with pytest.raises(CountersRefused) as e:
        profile_kernel(so, "64x64x64")
    msg = str(e.value)
    assert "NVreg_RestrictProfilingToAdminUsers=0" in msg and "root" in msg and "\n" not in msg
    assert isinstance(classify_ncu_failure(PERM_TEXT, "x"), CountersRefused)


def test_no_kernel_recorded_text(monkeypatch, tmp_path, so):
    text = (FIX / "errors" / "no_kernel.txt").read_text()
    assert "No kernels were profiled" in text            # as ncu printed it on the H200
    monkeypatch.setenv("L2TUI_NCU", _tool(tmp_path, text))
    with pytest.raises(NoKernelProfiled, match="captured no kernel"):
        profile_kernel(so, "64x64x64")


def test_application_error_recorded_text(monkeypatch, tmp_path, so):
    text = (FIX / "errors" / "app_error.txt").read_text()
    monkeypatch.setenv("L2TUI_NCU", _tool(tmp_path, text, rc=1))
    with pytest.raises(ProfileFailed, match="The application returned an error code"):
        profile_kernel(so, "64x64x64")


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for its reaper has stopped)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "State:\tZ" not in status


def test_timeout_stops_the_process_group(monkeypatch, tmp_path, so):
    """ncu and what it started (the profiled driver) are killed together at the time limit."""
    pids = tmp_path / "pids"
    tool = tmp_path / "ncu"
    tool.write_text(f"#!{sys.executable}\nimport os, subprocess, sys, time\n"
                    "if '--version' in sys.argv: print('Version 2025.3.1.0'); sys.exit(0)\n"
                    "if '--list-sections' in sys.argv: sys.exit(0)\n"
                    "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
                    f"open({str(pids)!r}, 'w').write(f'{{os.getpid()}} {{child.pid}}')\n"
                    "time.sleep(600)\n")
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("L2TUI_NCU", str(tool))
    with pytest.raises(ProfileTimeout, match="longer than 3 s"):
        profile_kernel(so, "64x64x64", timeout_s=3)
    started = [int(x) for x in pids.read_text().split()]
    assert len(started) == 2
    for _ in range(600):             # SIGKILL is delivered at once; the kernel's bookkeeping may lag
        if not any(_alive(pid) for pid in started):
            break
        time.sleep(0.05)
    assert not any(_alive(pid) for pid in started)


@pytest.mark.parametrize("flags, want", [([], "all"), (["--warm-caches"], "none")])
def test_warm_caches_reaches_ncu(monkeypatch, tmp_path, so, capsys, flags, want):
    """`l2tui profile` flushes the caches before each pass unless --warm-caches asks ncu to keep
    them (the per-call bench runs with A and B still in L2); the flag is on ncu's own command line."""
    from l2tui.cli import main

    argv_file = tmp_path / "argv.json"
    tool = tmp_path / "ncu"
    tool.write_text(f"#!{sys.executable}\nimport json, sys\n"
                    "if '--version' in sys.argv: print('Version 2025.3.1.0'); sys.exit(0)\n"
                    "if '--list-sections' in sys.argv: sys.exit(0)\n"
                    f"open({str(argv_file)!r}, 'w').write(json.dumps(sys.argv))\n"
                    f"sys.stdout.write({(FIX / 'errors' / 'no_kernel.txt').read_text()!r})\n")
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("L2TUI_NCU", str(tool))
    assert main(["profile", "--shape", "64x64x64", "--kernel", so, *flags]) == 2
    assert "captured no kernel" in capsys.readouterr().err
    argv = json.loads(argv_file.read_text())
    assert argv[argv.index("--cache-control") + 1] == want and argv[argv.index("--clock-control") + 1] == "none"


def test_bad_inputs():
    with pytest.raises(KernelSourceError):
        profile_kernel("/nonexistent/kernel.so", "64x64x64")
    with pytest.raises(HarnessError, match="unknown baseline"):
        profile_kernel(None, "64x64x64", baseline="mkl")
    with pytest.raises(HarnessError, match="exactly one"):
        profile_kernel(None, "64x64x64")


def test_command_line_shape(tmp_path):
    cmd = ncu_mod.profile_command("ncu", tmp_path / "r", tmp_path / "s.json", tmp_path / "o.json",
                                  ["a", "b"], ["SpeedOfLight", "Occupancy"])
    assert cmd[:3] == ["ncu", "--clock-control", "none"]
    assert cmd.count("--nvtx-include") == 2 and "a/" in cmd and "b/" in cmd
    assert cmd[cmd.index("--section") + 1] == "SpeedOfLight"
    assert "harness.profiling.launch" in cmd
    prof = ncu_mod.profile_command("ncu", tmp_path / "r", tmp_path / "s.json", tmp_path / "o.json", ["a"], [],
                                   nvtx="profiler")
    assert "--nvtx" not in prof and prof[prof.index("--profile-from-start") + 1] == "off"
    assert ncu_mod.import_command("ncu", tmp_path / "r.ncu-rep", "raw")[-5:] == ["--csv", "--page", "raw",
                                                                                 "--print-units", "base"]


@pytest.mark.compile
def test_cublas_baseline_request_builds_the_trusted_linked_shim(tmp_path, monkeypatch):
    """--baseline cublas profiles the bench's own cuBLAS shim: built as trusted code and linked to
    libcublas (it once went through the candidate path, whose source policy refuses cuBLAS calls,
    so `l2tui profile --baseline cublas` failed with 'the kernel does not compile')."""
    import subprocess

    from harness.profiling.api import baseline_request
    from harness.shapes import Shape

    monkeypatch.setenv("L2TUI_CACHE_DIR", str(tmp_path / "cache"))
    req = baseline_request("cublas", Shape(64, 64, 64), "f16", arch="sm_90a")
    assert req.label == "cublas" and req.symbol == "l2_hgemm_f16" and req.baseline is None
    assert Path(req.so_path).is_file()
    ldd = subprocess.run(["ldd", req.so_path], capture_output=True, text=True).stdout
    assert "libcublas.so" in ldd and "not found" not in ldd, ldd
    assert req.item("r0")["kind"] == "so"


def test_cublaslt_baselines_are_profiled_through_the_bench_shim(monkeypatch):
    """cuBLASLt is profiled through the same C entry points of the baseline shim as the bench
    times it (not through a Python library): the request carries the shim's path."""
    from types import SimpleNamespace

    import harness.baselines as bl
    from harness.profiling.api import baseline_request
    from harness.shapes import Shape

    monkeypatch.setattr(bl, "build_shim", lambda arch=None: SimpleNamespace(so_path="/cache/shim/kernel.so"))
    for name in ("cublaslt_heuristic", "cublaslt_autotune"):
        item = baseline_request(name, Shape(64, 64, 64), "f16").item("r")
        assert item["kind"] == name and item["so_path"] == "/cache/shim/kernel.so" and item["acc"] == "f16"
    assert baseline_request("torch", Shape(64, 64, 64)).item("r")["so_path"] is None


def test_a_kernel_is_not_profiled_outside_a_required_sandbox(tmp_path, monkeypatch):
    """Under ``require`` (the llm and human policies) ncu would load a model-written kernel
    outside the sandbox: one line, nothing built or run. Without it the request goes on (here to
    the missing-file error of a .so that does not exist)."""
    from harness import sandbox
    from harness.errors import KernelSourceError
    from harness.profiling import ProfileRefused, profile_kernel

    monkeypatch.setenv("L2TUI_CACHE_DIR", str(tmp_path / "cache"))
    prev = sandbox.set_mode("require")
    try:
        with pytest.raises(ProfileRefused, match="outside the sandbox") as e:
            profile_kernel('extern "C" int l2_hgemm(const void*, const void*, void*, int, int, int, void*);',
                           "64x64x64")
        assert "\n" not in str(e.value) and not (tmp_path / "cache").exists()
        sandbox.set_mode("off")
        with pytest.raises(KernelSourceError, match="not found"):
            profile_kernel(str(tmp_path / "missing.so"), "64x64x64")
    finally:
        sandbox.set_mode(prev)
