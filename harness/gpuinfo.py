"""What GPUs this machine has, read through NVML (``pynvml``) or ``nvidia-smi``.

Neither creates a CUDA context, so the UI and the parent of the GPU worker can
ask freely.  Every function answers "nothing" rather than raising when there is
no GPU, no driver or no NVML.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
from dataclasses import asdict, dataclass
from typing import Any

from .errors import ToolMissing


@dataclass(frozen=True)
class GpuInfo:
    index: int
    name: str
    uuid: str
    driver: str
    cc: tuple[int, int]          # compute capability
    memory_mib: int
    cuda_driver: str = ""        # CUDA version the driver supports, e.g. "13.0"

    @property
    def arch(self) -> str:
        return arch_for_cc(self.cc)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["cc"] = f"{self.cc[0]}.{self.cc[1]}"
        d["arch"] = self.arch
        return d


def arch_for_cc(cc: tuple[int, int]) -> str:
    """The nvcc target we build for on a GPU of this compute capability."""
    major, minor = cc
    if major == 9:
        return "sm_90a"       # wgmma/TMA need the arch-specific target
    if major == 10:
        return "sm_100a"
    if major == 8:
        return {0: "sm_80", 6: "sm_86", 9: "sm_89"}.get(minor, "sm_80")
    return f"sm_{major}{minor}"


def _nvml_gpus() -> list[GpuInfo] | None:
    try:
        import pynvml  # from nvidia-ml-py
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        return None
    try:
        driver = _s(pynvml.nvmlSystemGetDriverVersion())
        try:
            v = pynvml.nvmlSystemGetCudaDriverVersion_v2()
            cuda = f"{v // 1000}.{(v % 1000) // 10}"
        except Exception:
            cuda = ""
        out = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(h)
            mem = pynvml.nvmlDeviceGetMemoryInfo(h).total // (1 << 20)
            out.append(GpuInfo(i, _s(pynvml.nvmlDeviceGetName(h)), _s(pynvml.nvmlDeviceGetUUID(h)), driver, (int(major), int(minor)), int(mem), cuda))
        return out
    except Exception:
        return None
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass


def _smi_gpus() -> list[GpuInfo] | None:
    smi = shutil.which("nvidia-smi")
    if not smi:
        return None
    q = "index,name,uuid,driver_version,compute_cap,memory.total"
    try:
        proc = subprocess.run([smi, f"--query-gpu={q}", "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0:
        return None
    out = []
    for line in proc.stdout.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 6:
            continue
        try:
            major, minor = (int(x) for x in parts[4].split("."))
            out.append(GpuInfo(int(parts[0]), parts[1], parts[2], parts[3], (major, minor), int(float(parts[5]))))
        except ValueError:
            continue
    return out


def _s(x: Any) -> str:
    return x.decode() if isinstance(x, bytes) else str(x)


@functools.lru_cache(maxsize=1)
def list_gpus() -> tuple[GpuInfo, ...]:
    """All NVIDIA GPUs (empty when there are none or no driver)."""
    gpus = _nvml_gpus()
    if gpus is None:
        gpus = _smi_gpus()
    return tuple(gpus or ())


def gpu_present() -> bool:
    return bool(list_gpus())


def detect_arch(index: int = 0) -> str | None:
    gpus = list_gpus()
    if not gpus or index >= len(gpus):
        return None
    return gpus[index].arch


def require_gpu(index: int = 0) -> GpuInfo:
    """The GPU to run on, or a one-line :class:`ToolMissing`."""
    gpus = list_gpus()
    if not gpus:
        raise ToolMissing("no NVIDIA GPU found: run on a machine with a GPU and its driver (nvidia-smi must work)")
    if index >= len(gpus):
        raise ToolMissing(f"GPU {index} does not exist: this machine has {len(gpus)} GPU(s)")
    return gpus[index]
