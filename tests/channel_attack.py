"""A candidate that attacks the worker's answer channel, as the outside probe of issue 51 did.

Its host code writes frames of its own to every descriptor from 3 to 9 (the worker's private
answer pipe is among them) through the machine-code bytes of ``syscall`` in inline asm, a form no
source rule names. The frames are either the old protocol's (an 8-byte length and a pickle that
would run ``touch MARKER`` in whoever unpickles it) or the current one's, well formed, with a
forged result under a guessed request id. Used by tests/test_worker_channel.py (CPU) and
tests/test_worker_channel_gpu.py (GPU).
"""

from __future__ import annotations

import os
import pickle
import struct
from pathlib import Path

from harness import channel
from harness.testkernels import source as kernel_source


class _Touch:
    """Unpickles into a call of os.system: what the old protocol's reader would have run."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, (f"touch {self.marker}",))


def pickle_frame(marker: Path) -> bytes:
    """An old-protocol answer frame whose unpickling creates ``marker``."""
    body = pickle.dumps({"id": 1, "ok": True, "result": _Touch(marker), "retire": False}, protocol=2)
    return struct.pack(">Q", len(body)) + body


def forged_frame() -> bytes:
    """A well-formed current frame: an answer claiming a 100x speedup for a request id guessed
    the way a sequential counter would have it."""
    forged = {"id": "1", "ok": True, "retire": False,
              "result": {"status": {"evil": "ok"}, "times_ms": {"evil": 0.001, "cublas": 0.1}}}
    return channel.encode_frame(forged)


def frames_for(kind: str, marker: Path) -> bytes:
    if kind == "pickle":
        return pickle_frame(marker)
    if kind == "json":
        return forged_frame()
    raise ValueError(kind)


_WRITER = """\
static long l2_raw_write(long fd, const void* buf, long n) {
  long ret;
  /* the two bytes of the x86-64 syscall instruction; rax = 1 is write */
  asm volatile(".byte 0x0f, 0x05" : "=a"(ret) : "a"(1L), "D"(fd), "S"(buf), "d"(n) : "rcx", "r11", "memory");
  return ret;
}
static const unsigned char l2_frames[] = {%s};
static void l2_emit() {
  for (long fd = 3; fd <= 9; ++fd) l2_raw_write(fd, l2_frames, (long)sizeof(l2_frames));
}
"""


def _writer(frames: bytes) -> str:
    return _WRITER % ", ".join(f"0x{b:02x}" for b in frames)


def at_load_source(frames: bytes) -> str:
    """A library that writes ``frames`` from a load-time constructor (the source policy refuses
    the constructor attribute, so tests build it with the policy bypassed and load it directly)."""
    return (_writer(frames) + "__attribute__((constructor)) static void l2_boot() { l2_emit(); }\n"
            'extern "C" int l2_hgemm(const void* A, const void* B, void* C, int M, int N, int K, void* s) '
            "{ return 1; }\n")


def first_call_source(frames: bytes) -> str:
    """A correct GEMM whose first call writes ``frames`` before computing (it passes the source
    policy: the raw system call is two bytes in asm)."""
    honest = kernel_source("testgood_simple")
    return ("#define l2_hgemm l2_honest_hgemm\n" + honest + "#undef l2_hgemm\n" + _writer(frames)
            + 'extern "C" int l2_hgemm(const void* A, const void* B, void* C, int M, int N, int K, void* s) {\n'
              "  static int emitted = 0;\n"
              "  if (!emitted) { emitted = 1; l2_emit(); }\n"
              "  return l2_honest_hgemm(A, B, C, M, N, K, s);\n"
              "}\n")
