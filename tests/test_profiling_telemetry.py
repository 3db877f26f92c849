"""NVML telemetry: the unavailable state never raises; the sample format matches the telemetry event."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pynvml
import pytest

from harness.profiling import TelemetrySampler

FIX = Path(__file__).parent / "fixtures" / "ncu"
EVENT_KEYS = {"sm_clock_mhz", "mem_clock_mhz", "temp_c", "power_w", "power_limit_w", "util_pct", "mem_used_mib"}


def _gpu_present() -> bool:
    try:
        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
        return True
    except pynvml.NVMLError:
        return False


@pytest.mark.skipif(_gpu_present(), reason="this machine has a GPU; the gpu tests cover the available state")
def test_no_gpu_is_unavailable_not_an_exception():
    t = TelemetrySampler(hz=5)
    assert t.available is False
    assert "NVML" in t.reason
    t.start()
    assert not t.running
    time.sleep(0.3)
    assert t.samples() == [] and t.latest() is None and t.sample() == {}
    t.stop()
    t.close()
    with TelemetrySampler() as t2:
        assert t2.status()["available"] is False


class _BrokenNvml:
    """pynvml with a driver that fails to load: the real error class pynvml raises."""

    def nvmlInit(self):
        raise pynvml.NVMLError(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)


def test_driver_not_loaded_reason():
    t = TelemetrySampler(nvml=_BrokenNvml())
    assert not t.available
    assert "NVML unavailable" in t.reason and "Driver Not Loaded" in t.reason


def test_rate_is_validated():
    with pytest.raises(ValueError):
        TelemetrySampler(hz=0)
    with pytest.raises(ValueError):
        TelemetrySampler(hz=1000)


def test_recorded_h200_samples_have_the_event_keys():
    data = json.loads((FIX / "telemetry.json").read_text())
    assert data["samples"], "recorded on the H200 by harness.profiling.record's device run"
    for s in data["samples"]:
        assert EVENT_KEYS <= set(s)
        assert s["sm_clock_mhz"] > 0 and s["power_limit_w"] == 700.0
        assert isinstance(s["throttle"], list)
