"""The worker's CUDA state (cupy, its stream, the loaded kernel libraries, NVML clocks).

A module of its own so that the shape phases (harness.shape_eval, shape_fresh, shape_timing) can
name the type they receive without importing the worker's serving loop (harness.worker_main),
which imports them. cupy is imported only when a ``Gpu`` is made: a process without a GPU can
import this module. The worker sets ``CUPY_TF32=0`` before anything imports cupy.
"""

from __future__ import annotations

import ctypes
import os
import time
from types import ModuleType
from typing import Callable, Protocol

IDLE_REWARM_S = 2.0          # re-warm the GPU after this much idle time

#: every library this process has loaded, by path (shared by the GPU state and the ops that load
#: candidates before it exists)
LIBS: dict[str, ctypes.CDLL] = {}

#: a number or a string NVML answered, or None where it could not
NvmlValue = float | int | str | None


def load_lib(path: str) -> ctypes.CDLL:
    """The library at ``path``, loaded once per process."""
    lib = LIBS.get(path)
    if lib is None:
        lib = ctypes.CDLL(path, mode=ctypes.RTLD_LOCAL)
        LIBS[path] = lib
    return lib


class ShapeBuffers(Protocol):
    """What the GPU state keeps of the last shape's buffers (harness.shape_eval.ShapeContext)."""

    key: tuple[int, int, int]

    def close(self) -> None: ...


class Gpu:
    """Per-process CUDA state: cupy, our non-blocking stream, the shim, caches."""

    def __init__(self) -> None:
        import cupy as cp

        self.cp = cp   # untyped: cupy ships no annotations
        cp.cuda.Device(0).use()
        self.stream = cp.cuda.Stream(non_blocking=True)
        props = cp.cuda.runtime.getDeviceProperties(0)
        self.name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
        self.cc = (int(props["major"]), int(props["minor"]))
        self.sms = int(props["multiProcessorCount"])
        raw_uuid = props.get("uuid", b"")
        self.uuid = "GPU-" + _fmt_uuid(raw_uuid) if raw_uuid else f"GPU-{self.name}-{os.getpid()}"
        self.cuda_runtime = _ver(int(cp.cuda.runtime.runtimeGetVersion()))
        self.cuda_driver = _ver(int(cp.cuda.runtime.driverGetVersion()))
        self.libs = LIBS
        self.autotune: dict[tuple[object, ...], int] = {}
        self.roofline: dict[str, object] | None = None
        self.nvml = Nvml(self.uuid)
        self.warmed = False
        self.last_active = 0.0
        self.ctx: ShapeBuffers | None = None   # the last shape's buffers, reused when the next request is the same shape

    def lib(self, path: str) -> ctypes.CDLL:
        return load_lib(path)

    def info(self) -> dict[str, str | int | None]:
        return {
            "name": self.name, "uuid": self.uuid, "cc": f"{self.cc[0]}.{self.cc[1]}", "sms": self.sms,
            "cuda_runtime": self.cuda_runtime, "cuda_driver": self.cuda_driver,
            "driver": self.nvml.driver(), "cupy": str(self.cp.__version__),
        }

    def warm_up(self, shim_fn: Callable[..., int], min_s: float = 0.2, max_s: float = 1.5) -> None:
        """Run big GEMMs until the SM clock is up (it idles at a few hundred MHz).

        Done when the worker starts and again whenever the GPU sat idle for more than
        IDLE_REWARM_S (an agent thinking between evaluations lets the clock drop).
        """
        now = time.monotonic()
        if self.warmed and now - self.last_active < IDLE_REWARM_S:
            self.last_active = now
            return
        cp, s = self.cp, self.stream
        n = 4096
        with s:
            a = cp.ones((n, n), dtype=cp.float16)
            c = cp.empty((n, n), dtype=cp.float16)
        target = self.nvml.max_sm_mhz()
        t0 = time.monotonic()
        while True:
            for _ in range(10):
                shim_fn(a.data.ptr, a.data.ptr, c.data.ptr, n, n, n, s.ptr)
            s.synchronize()
            el = time.monotonic() - t0
            if el >= max_s:
                break
            if el >= min_s:
                clk = self.nvml.clocks().get("sm_mhz") if target else None
                if not target or not isinstance(clk, (int, float)) or clk >= 0.9 * target:
                    break
        self.warmed = True
        self.last_active = time.monotonic()


def _fmt_uuid(raw: bytes | bytearray) -> str:
    b = bytes(raw)[:16]
    h = b.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def _ver(v: int) -> str:
    return f"{v // 1000}.{(v % 1000) // 10}"


class Nvml:
    """Clocks and driver through NVML when pynvml imports; every answer may be None."""

    def __init__(self, uuid: str) -> None:
        self.h: object | None = None
        self.mod: ModuleType | None = None
        try:
            import pynvml

            pynvml.nvmlInit()
            self.mod = pynvml
            try:
                self.h = pynvml.nvmlDeviceGetHandleByUUID(uuid.encode())
            except Exception:
                self.h = pynvml.nvmlDeviceGetHandleByIndex(0)
        except Exception:
            self.h = None

    def driver(self) -> str | None:
        if self.mod is None:
            return None
        try:
            v = self.mod.nvmlSystemGetDriverVersion()
            return v.decode() if isinstance(v, bytes) else str(v)
        except Exception:
            return None

    def max_sm_mhz(self) -> int | None:
        if self.h is None or self.mod is None:
            return None
        try:
            return int(self.mod.nvmlDeviceGetMaxClockInfo(self.h, self.mod.NVML_CLOCK_SM))
        except Exception:
            return None

    def clocks(self) -> dict[str, NvmlValue]:
        """SM and memory clock (MHz), temperature (C) and power (W) now; {} without NVML."""
        m, h = self.mod, self.h
        if h is None or m is None:
            return {}
        reads: tuple[tuple[str, Callable[[], NvmlValue]], ...] = (
            ("sm_mhz", lambda: m.nvmlDeviceGetClockInfo(h, m.NVML_CLOCK_SM)),
            ("mem_mhz", lambda: m.nvmlDeviceGetClockInfo(h, m.NVML_CLOCK_MEM)),
            ("temp_c", lambda: m.nvmlDeviceGetTemperature(h, m.NVML_TEMPERATURE_GPU)),
            ("power_w", lambda: m.nvmlDeviceGetPowerUsage(h) / 1000.0),
        )
        out: dict[str, NvmlValue] = {}
        for key, fn in reads:
            try:
                out[key] = fn()
            except Exception:
                out[key] = None
        return out
