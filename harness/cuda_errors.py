"""Sticky CUDA errors: the ones that poison the worker's CUDA context.

A sticky error (illegal address, trap, launch failure) leaves every later CUDA call failing, so
the worker answers ``kind="crashed"`` and exits and the parent starts a fresh one. This module
holds only the recognising and the exception, with no GPU import, so that the worker's loop and
the per-shape checks (harness.shape_eval, harness.shape_timing) raise and catch the same class.
"""

from __future__ import annotations

STICKY_MARKERS = (
    "IllegalAddress", "illegal memory access", "LaunchFailure", "unspecified launch failure",
    "IllegalInstruction", "illegal instruction", "MisalignedAddress", "misaligned address",
    "HardwareStackError", "InvalidPc", "invalid program counter", "cudaErrorAssert", "device-side assert",
    "LaunchTimeout", "ECCUncorrectable", "uncorrectable ECC", "CUDA_ERROR_ILLEGAL_ADDRESS",
    "CUDA_ERROR_LAUNCH_FAILED", "CUDA_ERROR_ILLEGAL_INSTRUCTION", "CUDA_ERROR_MISALIGNED_ADDRESS",
    "an illegal", "context is destroyed", "CUBLAS_STATUS_EXECUTION_FAILED",
)


class Sticky(Exception):
    """A CUDA error that poisons the context; carries the subject label when known."""

    def __init__(self, message: str, label: str | None = None) -> None:
        super().__init__(message)
        self.label = label


def is_sticky(exc: BaseException) -> bool:
    text = f"{type(exc).__name__}: {exc}"
    return any(m in text for m in STICKY_MARKERS)
