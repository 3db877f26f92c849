"""One-line, actionable errors of the profiler (all :class:`HarnessError` subclasses).

The messages quote what to do, because the person reading them is usually
looking at a terminal, not at this code.  :func:`classify_ncu_failure` maps ncu's
own output to these errors; the texts it looks for are the ones ncu prints.
"""

from __future__ import annotations

from ..errors import HarnessError, ToolMissing

#: printed by ncu when the driver restricts the performance counters to admins
#: (documented text: https://developer.nvidia.com/ERR_NVGPUCTRPERM)
PERM_MARKER = "ERR_NVGPUCTRPERM"
#: printed by ncu when its filters matched no kernel
NO_KERNEL_MARKER = "No kernels were profiled"


class NcuMissing(ToolMissing):
    """The Nsight Compute CLI is not installed or not on PATH."""

    def __init__(self, detail: str = "") -> None:
        super().__init__(
            "ncu (Nsight Compute CLI) not found"
            + (f" ({detail})" if detail else "")
            + ": install Nsight Compute (it ships with the CUDA toolkit, e.g. /usr/local/cuda/bin/ncu)"
            " and put it on PATH, or set L2TUI_NCU=/path/to/ncu"
        )


class CountersRefused(HarnessError):
    """The driver refuses access to the GPU performance counters (ERR_NVGPUCTRPERM)."""

    def __init__(self) -> None:
        super().__init__(
            "the NVIDIA driver refuses access to GPU performance counters (ERR_NVGPUCTRPERM): run as root,"
            " or allow all users with 'options nvidia NVreg_RestrictProfilingToAdminUsers=0' in"
            " /etc/modprobe.d/nvidia-profiling.conf and reload the driver (or reboot)"
        )


class ProfileTimeout(HarnessError):
    """ncu (with its replay passes) ran past the time limit."""

    def __init__(self, what: str, timeout_s: float) -> None:
        super().__init__(
            f"profiling {what} took longer than {timeout_s:.0f} s and was stopped:"
            " give it more time (--timeout) or profile a smaller shape"
        )


class NoKernelProfiled(HarnessError):
    """ncu ran but captured no kernel inside the profiled call."""

    def __init__(self, what: str, detail: str = "") -> None:
        super().__init__(
            f"ncu captured no kernel for {what}"
            + (f" ({detail})" if detail else "")
            + ": check that the kernel supports this shape (l2_hgemm returns 0) and launches on the given stream"
        )


class ProfileFailed(HarnessError):
    """ncu or the one-launch driver failed for another reason; the message carries ncu's last error line."""


def classify_ncu_failure(output: str, what: str) -> HarnessError | None:
    """The error that ncu's combined stdout/stderr ``output`` describes, or None."""
    if PERM_MARKER in output:
        return CountersRefused()
    for line in output.splitlines():
        s = line.strip()
        if s.startswith("==ERROR==") and "ERR_NVGPUCTRPERM" not in s:
            return ProfileFailed(f"ncu failed while profiling {what}: {s[len('==ERROR=='):].strip()}")
    return None


class ProfileRefused(HarnessError):
    """Profiling a kernel would run its code outside the sandbox that this run requires.

    Nsight Compute starts its own process around the call and does not run inside the sandbox
    yet, so under ``require`` (what the llm and human policies set) a model-written kernel is
    not profiled: its load-time code would run with the user's files and environment in reach."""
