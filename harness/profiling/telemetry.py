"""NVML telemetry: a sampler thread for clocks, temperature, power, utilisation, memory, throttling.

Why a thread at a few Hz: server-mode timing wants to know whether the GPU was
cold, throttled or power-capped while it measured, and the UI shows a live
strip.  NVML (``pynvml`` from ``nvidia-ml-py``) reads these without a CUDA
context, so the sampler can run in any process.

Never raises for a missing GPU/NVML: ``available`` is False and ``reason`` says
why; ``start()``/``stop()`` are then no-ops and ``samples()`` is empty.
A sample's keys match the ``telemetry`` event of INTERFACES.md
(``sm_clock_mhz``, ``mem_clock_mhz``, ``temp_c``, ``power_w``, ``power_limit_w``,
``util_pct``, ``mem_used_mib``) plus ``time``, ``mem_util_pct`` and ``throttle``
(list of active clock-throttle reasons); any value may be None.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any, Callable, TypeAlias

#: the ``pynvml`` module (or a test's stand-in for it): pynvml ships no type information, so what
#: it returns is read defensively here (``_read`` turns every NVML error into None)
NvmlModule: TypeAlias = Any

_THROTTLE_NAMES = (
    ("GpuIdle", "idle"), ("ApplicationsClocksSetting", "app_clocks"), ("SwPowerCap", "sw_power_cap"),
    ("HwSlowdown", "hw_slowdown"), ("SyncBoost", "sync_boost"), ("SwThermalSlowdown", "sw_thermal"),
    ("HwThermalSlowdown", "hw_thermal"), ("HwPowerBrakeSlowdown", "hw_power_brake"),
    ("DisplayClockSetting", "display_clock"),
)


def _throttle_reasons(nv: NvmlModule, mask: int) -> list[str]:
    out = []
    for suffix, name in _THROTTLE_NAMES:
        bit = getattr(nv, "nvmlClocksEventReason" + suffix, None)
        if bit is None:
            bit = getattr(nv, "nvmlClocksThrottleReason" + suffix, None)
        if bit is not None and mask & int(bit):
            out.append(name)
    return out


class TelemetrySampler:
    """``TelemetrySampler(hz=2, index=0)``; ``start()``, ``latest()``, ``samples()``, ``stop()``.

    Also a context manager.  Keeps the last ``max_samples`` samples; ``on_sample``
    (optional) is called from the sampler thread with each new sample.
    """

    def __init__(self, hz: float = 2.0, index: int = 0, max_samples: int = 36000,
                 on_sample: Callable[[dict[str, object]], None] | None = None, nvml: NvmlModule = None) -> None:
        if not 0.1 <= hz <= 50:
            raise ValueError("hz must be between 0.1 and 50")
        self.hz = hz
        self.index = index
        self.on_sample = on_sample
        self._buf: deque[dict[str, object]] = deque(maxlen=max_samples)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._nv: NvmlModule = None
        self._handle: object = None
        self.available = False
        self.reason = ""
        self._init(nvml)

    # ------------------------------------------------------------------ NVML
    def _init(self, nvml: NvmlModule) -> None:
        try:
            if nvml is None:
                import pynvml as nvml  # type: ignore[no-redef]
        except ImportError:
            self.reason = "pynvml is not installed (pip install nvidia-ml-py)"
            return
        try:
            nvml.nvmlInit()
        except Exception as e:  # NVMLError_LibraryNotFound / DriverNotLoaded / ...
            self.reason = f"NVML unavailable: {e or type(e).__name__} (no NVIDIA driver or GPU)"
            return
        try:
            count = nvml.nvmlDeviceGetCount()
            if self.index >= count:
                self.reason = f"no GPU with index {self.index} ({count} found)"
                nvml.nvmlShutdown()
                return
            self._handle = nvml.nvmlDeviceGetHandleByIndex(self.index)
        except Exception as e:
            self.reason = f"NVML cannot open GPU {self.index}: {e}"
            try:
                nvml.nvmlShutdown()
            except Exception:
                pass
            return
        self._nv = nvml
        self.available = True

    def _read(self, fn: str, *args: object) -> object:
        try:
            return getattr(self._nv, fn)(self._handle, *args)
        except Exception:
            return None

    def sample(self) -> dict[str, object]:
        """One reading now (every field may be None); ``{}`` when unavailable."""
        if not self.available:
            return {}
        nv = self._nv
        util = self._read("nvmlDeviceGetUtilizationRates")
        mem = self._read("nvmlDeviceGetMemoryInfo")
        power = self._read("nvmlDeviceGetPowerUsage")
        limit = self._read("nvmlDeviceGetEnforcedPowerLimit")
        mask = self._read("nvmlDeviceGetCurrentClocksEventReasons")
        if mask is None:
            mask = self._read("nvmlDeviceGetCurrentClocksThrottleReasons")
        used = getattr(mem, "used", None)
        return {
            "time": time.time(),
            "sm_clock_mhz": self._read("nvmlDeviceGetClockInfo", nv.NVML_CLOCK_SM),
            "mem_clock_mhz": self._read("nvmlDeviceGetClockInfo", nv.NVML_CLOCK_MEM),
            "temp_c": self._read("nvmlDeviceGetTemperature", nv.NVML_TEMPERATURE_GPU),
            "power_w": power / 1000.0 if isinstance(power, (int, float)) else None,
            "power_limit_w": limit / 1000.0 if isinstance(limit, (int, float)) else None,
            "util_pct": getattr(util, "gpu", None),
            "mem_util_pct": getattr(util, "memory", None),
            "mem_used_mib": used / 2**20 if isinstance(used, (int, float)) else None,
            "throttle": _throttle_reasons(nv, int(mask)) if isinstance(mask, int) else None,
        }

    # ---------------------------------------------------------------- thread
    def _loop(self) -> None:
        period = 1.0 / self.hz
        nxt = time.monotonic()
        while not self._stop.is_set():
            s = self.sample()
            with self._lock:
                self._buf.append(s)
            if self.on_sample is not None:
                try:
                    self.on_sample(s)
                except Exception:
                    pass
            nxt += period
            self._stop.wait(max(0.0, nxt - time.monotonic()))

    def start(self) -> "TelemetrySampler":
        if self.available and self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._loop, name="l2tui-telemetry", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        t = self._thread
        if t is not None:
            self._stop.set()
            t.join(timeout=5.0)
            self._thread = None

    def close(self) -> None:
        self.stop()
        if self.available:
            try:
                self._nv.nvmlShutdown()
            except Exception:
                pass
            self.available = False
            self.reason = "closed"

    @property
    def running(self) -> bool:
        return self._thread is not None

    def latest(self) -> dict[str, object] | None:
        with self._lock:
            return dict(self._buf[-1]) if self._buf else None

    def samples(self) -> list[dict[str, object]]:
        with self._lock:
            return [dict(s) for s in self._buf]

    def status(self) -> dict[str, object]:
        return {"available": self.available, "reason": self.reason, "hz": self.hz, "samples": len(self._buf)}

    def __enter__(self) -> "TelemetrySampler":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
