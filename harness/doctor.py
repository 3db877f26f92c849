"""``doctor``: what this machine has for building, checking, timing and profiling.

Each line says found/missing and, when missing, the one thing to do about it.
Nothing here creates a CUDA context or imports the heavy GPU packages; package
versions are read from their installed metadata.
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import importlib.util
import json
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass
from typing import Sequence


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""
    required: bool = False  # needed for the main job (building kernels)


def _pkg_version(*names: str) -> str | None:
    for n in names:
        try:
            return md.version(n)
        except md.PackageNotFoundError:
            continue
    return None


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def check_gpu() -> Check:
    from .gpuinfo import list_gpus

    gpus = list_gpus()
    if not gpus:
        return Check("GPU", False, "no NVIDIA GPU found", "run on a machine with an NVIDIA GPU and driver (nvidia-smi must work); replay and builds still work without one")
    g = gpus[0]
    more = f" (+{len(gpus) - 1} more)" if len(gpus) > 1 else ""
    return Check("GPU", True, f"{g.name}{more}, cc {g.cc[0]}.{g.cc[1]} -> {g.arch}, driver {g.driver}, {g.memory_mib} MiB")


def check_nvcc() -> Check:
    from .build import nvcc_path, nvcc_version
    from .errors import ToolMissing

    try:
        path = nvcc_path()
        return Check("nvcc", True, f"{nvcc_version()} at {path}", required=True)
    except ToolMissing as e:
        return Check("nvcc", False, "not found", str(e).split(": ", 1)[-1], required=True)


def check_cutlass() -> Check:
    from .build import _cutlass_identity, cutlass_include_dirs

    dirs = cutlass_include_dirs()
    if not dirs:
        return Check("CUTLASS headers", False, "not found", "pip install nvidia-cutlass==4.2.0.0 (or set CUTLASS_PATH to a CUTLASS checkout)")
    return Check("CUTLASS headers", True, f"{_cutlass_identity()} at {dirs[0]}")


def check_sandbox() -> Check:
    """bubblewrap found, and a trial sandbox really starts (it fails in containers that forbid
    namespaces); without it the llm and human policies need --no-sandbox."""
    from .sandbox import INSTALL_HINT, describe, mode, probe

    st = probe()
    if mode() == "off":
        return Check("sandbox (bubblewrap)", False, f"turned off (L2TUI_SANDBOX=off); {describe()}",
                     "unset L2TUI_SANDBOX: model-written kernels then build and load inside the sandbox")
    if st.works:
        return Check("sandbox (bubblewrap)", True, f"works: {describe()}")
    return Check("sandbox (bubblewrap)", False, st.detail,
                 f"{INSTALL_HINT}; without it the llm and human policies run only with --no-sandbox")


def check_ncu() -> Check:
    ncu = shutil.which("ncu")
    if not ncu:
        for cand in ("/usr/local/cuda/bin/ncu", "/opt/nvidia/nsight-compute/ncu"):
            if shutil.which(cand):
                ncu = cand
                break
    if not ncu:
        return Check("ncu (Nsight Compute)", False, "not found", "install Nsight Compute (part of the CUDA toolkit) and put ncu on PATH; needed only for profiling")
    try:
        out = subprocess.run([ncu, "--version"], capture_output=True, text=True, timeout=60).stdout
        ver = out.strip().splitlines()[-1] if out.strip() else "unknown version"
    except (OSError, subprocess.TimeoutExpired):
        ver = "does not run"
    return Check("ncu (Nsight Compute)", True, f"{ver} at {ncu}")


def check_nvml() -> Check:
    if not _importable("pynvml"):
        return Check("NVML (pynvml)", False, "nvidia-ml-py not installed", "pip install nvidia-ml-py")
    try:
        import pynvml

        pynvml.nvmlInit()
        ver = pynvml.nvmlSystemGetDriverVersion()
        pynvml.nvmlShutdown()
        ver = ver.decode() if isinstance(ver, bytes) else ver
        return Check("NVML (pynvml)", True, f"driver {ver}")
    except Exception as e:  # NVMLError_* when there is no driver
        name = type(e).__name__
        return Check("NVML (pynvml)", False, f"installed, but NVML does not start ({name})", "needs an NVIDIA driver; telemetry shows 'no GPU' without one")


def check_package(label: str, module: str, dists: tuple[str, ...], fix: str) -> Check:
    ver = _pkg_version(*dists)
    if ver is None and not _importable(module):
        return Check(label, False, "not installed", fix)
    return Check(label, True, ver or "installed")


def run_checks() -> list[Check]:
    return [
        check_gpu(),
        check_nvcc(),
        check_cutlass(),
        check_sandbox(),
        check_ncu(),
        check_nvml(),
        check_package("cupy", "cupy", ("cupy-cuda13x", "cupy-cuda12x", "cupy"), "pip install 'l2tui[gpu]' (cupy-cuda13x; 'l2tui[cuda12]' for CUDA 12 drivers)"),
        check_package("torch", "torch", ("torch",), "optional: pip install torch for the torch.matmul baseline"),
    ]


def format_checks(checks: list[Check]) -> str:
    width = max(len(c.name) for c in checks)
    lines = []
    for c in checks:
        mark = "ok     " if c.ok else "MISSING"
        line = f"{mark}  {c.name:<{width}}  {c.detail}"
        if not c.ok and c.fix:
            line += f"  -> {c.fix}"
        lines.append(line)
    return "\n".join(lines)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print the checks as JSON")


def main(args: argparse.Namespace, extra: Sequence[Check] = ()) -> int:
    """Print the checks (and ``extra``, what a tool on top of the harness needs besides)."""
    checks = run_checks() + list(extra)
    if args.json:
        print(json.dumps([asdict(c) for c in checks], indent=1))
    else:
        print(format_checks(checks))
    # doctor reports; it fails only when the one required tool (nvcc) is missing
    return 0 if all(c.ok for c in checks if c.required) else 1


if __name__ == "__main__":  # pragma: no cover
    ns = argparse.ArgumentParser(prog="doctor")
    add_arguments(ns)
    sys.exit(main(ns.parse_args()))
