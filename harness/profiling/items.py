"""The data that travels between the profiler and its one-launch driver (:mod:`.launch`).

The profiler writes a spec of items (one NVTX-named call each) to a JSON file, ncu runs the
driver on it, and the driver writes one result per item back. Both files are data: the result
file is checked against ``harness.profiling.ncu.RESULT_SCHEMA`` before it is read, so these
types describe what a reader may rely on after that check.
"""

from __future__ import annotations

from typing import TypedDict


class _LaunchItemKeys(TypedDict):
    range: str
    #: ``so`` (a built library's ``l2_hgemm``), ``torch``, or a cuBLASLt shim's baseline name
    kind: str
    so_path: str | None
    shape: list[int]
    acc: str
    warmup: int


class LaunchItem(_LaunchItemKeys, total=False):
    """One call for the driver to make inside the NVTX range ``range``."""

    label: str
    symbol: str


class LaunchSpec(TypedDict):
    """The driver's input file: the NVTX flavour and the calls."""

    nvtx: str
    items: list[LaunchItem]


class ItemResult(TypedDict):
    """What the driver reports for one item (``status``: ok, unsupported or error)."""

    range: str
    status: str
    rc: int | None
    message: str


class _DriverResultKeys(TypedDict):
    items: list[ItemResult]


class DriverResult(_DriverResultKeys, total=False):
    """The driver's result file, as ``read_result`` returns it after the schema check."""

    nvtx: str
