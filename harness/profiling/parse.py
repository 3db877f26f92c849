"""Nsight Compute CSV → typed records, one per profiled kernel.

Two pages of ``ncu --import REPORT --csv --print-units base`` are understood:

* ``--page raw`` (wide): a header row of column names (``ID``, ``Kernel Name``,
  ``Block Size``, …, then one column per metric such as
  ``gpu__time_duration.sum``), a second row of units, then one row per kernel.
  This is what the verdict reads: metric names are stable across versions.
* ``--page details`` (long): one row per (kernel, section, metric) with
  ``Section Name``, ``Metric Name`` (the human label, e.g. "DRAM Throughput"),
  ``Metric Unit`` and ``Metric Value``.  Used for the full table by section.

Numbers are normalised: thousands separators removed, scaled units
(``usecond``, ``Kbyte``, ``Gbyte/second``…) converted to base units
(ns, byte, byte/second, …) so values from either page compare directly.
With ``--nvtx`` ncu adds a ``thread Domain:Push/Pop_Range:…`` column that names the
NVTX push/pop ranges a kernel was launched in; it is parsed into ``ranges``
(outermost first) so one report holding several profiled calls can be split.
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass, field
from typing import Iterable, TypedDict

_THOUSANDS = re.compile(r"^[+-]?\d{1,3}(,\d{3})+(\.\d*)?([eE][+-]?\d+)?$")
_NUMBER = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")

_SCALE = {
    "nsecond": (1.0, "ns"), "usecond": (1e3, "ns"), "msecond": (1e6, "ns"), "second": (1e9, "ns"),
    "ns": (1.0, "ns"), "us": (1e3, "ns"), "ms": (1e6, "ns"), "s": (1e9, "ns"),
    "byte": (1.0, "byte"), "Kbyte": (1e3, "byte"), "Mbyte": (1e6, "byte"), "Gbyte": (1e9, "byte"),
    "Tbyte": (1e12, "byte"), "KB": (1e3, "byte"), "MB": (1e6, "byte"), "GB": (1e9, "byte"),
    "Kibyte": (1024.0, "byte"), "Mibyte": (1024.0 ** 2, "byte"), "Gibyte": (1024.0 ** 3, "byte"),
    "cycle": (1.0, "cycle"), "Kcycle": (1e3, "cycle"), "Mcycle": (1e6, "cycle"), "Gcycle": (1e9, "cycle"),
    "inst": (1.0, "inst"), "Kinst": (1e3, "inst"), "Minst": (1e6, "inst"), "Ginst": (1e9, "inst"),
    "hz": (1.0, "hz"), "Khz": (1e3, "hz"), "Mhz": (1e6, "hz"), "Ghz": (1e9, "hz"),
}
# a time unit in a denominator (".../usecond") scales the other way
_PER_TIME = {"nsecond": 1e-9, "usecond": 1e-6, "msecond": 1e-3, "second": 1.0}


class MetricDict(TypedDict):
    """A metric's dict form (``Metric.to_dict``), as events and profile files hold it."""

    value: float | str | None
    unit: str


@dataclass
class Metric:
    """One value with its unit (base units after :func:`normalise`); value None = n/a."""

    value: float | str | None
    unit: str = ""

    def to_dict(self) -> MetricDict:
        return {"value": self.value, "unit": self.unit}

    @classmethod
    def from_dict(cls, d: MetricDict) -> "Metric":
        return cls(d.get("value"), d.get("unit", "") or "")

    def __float__(self) -> float:
        if isinstance(self.value, (int, float)):
            return float(self.value)
        raise TypeError(f"metric value {self.value!r} is not a number")


class KernelRecordDict(TypedDict, total=False):
    """A kernel record's dict form (``KernelRecord.to_dict``); a missing key reads as empty."""

    id: int
    name: str
    ranges: list[str]
    stream: str
    block: str
    grid: str
    metrics: dict[str, MetricDict]
    sections: dict[str, dict[str, MetricDict]]


@dataclass
class KernelRecord:
    """Everything ncu reported about one kernel launch."""

    id: int
    name: str
    ranges: list[str] = field(default_factory=list)   # NVTX push/pop stack, outermost first
    stream: str = ""
    block: str = ""
    grid: str = ""
    metrics: dict[str, Metric] = field(default_factory=dict)              # raw page: metric name -> value
    sections: dict[str, dict[str, Metric]] = field(default_factory=dict)  # details: section -> label -> value

    def num(self, name: str) -> float | None:
        m = self.metrics.get(name)
        return m.value if m is not None and isinstance(m.value, float) else None

    def to_dict(self) -> KernelRecordDict:
        return {
            "id": self.id, "name": self.name, "ranges": list(self.ranges), "stream": self.stream,
            "block": self.block, "grid": self.grid,
            "metrics": {k: v.to_dict() for k, v in self.metrics.items()},
            "sections": {s: {k: v.to_dict() for k, v in d.items()} for s, d in self.sections.items()},
        }

    @classmethod
    def from_dict(cls, d: KernelRecordDict) -> "KernelRecord":
        return cls(
            id=int(d.get("id", 0)), name=d.get("name", ""), ranges=list(d.get("ranges", [])),
            stream=str(d.get("stream", "")), block=str(d.get("block", "")), grid=str(d.get("grid", "")),
            metrics={k: Metric.from_dict(v) for k, v in d.get("metrics", {}).items()},
            sections={s: {k: Metric.from_dict(v) for k, v in m.items()} for s, m in d.get("sections", {}).items()},
        )


def to_number(text: str) -> float | str | None:
    """``"1,234.5"`` → 1234.5; ``""``/``"n/a"`` → None; anything else stays a string."""
    s = text.strip()
    if s == "" or s.lower() in ("n/a", "nan", "-", "no data"):
        return None
    if _THOUSANDS.match(s):
        s = s.replace(",", "")
    if _NUMBER.match(s):
        return float(s)
    return s


def normalise(value: float | str | None, unit: str) -> Metric:
    """Convert a scaled unit to its base unit (``usecond`` → ns, ``Gbyte/second`` → byte/second)."""
    unit = (unit or "").strip()
    if not isinstance(value, float) or not unit:
        return Metric(value, unit)
    if unit in _SCALE:
        f, base = _SCALE[unit]
        return Metric(value * f, base)
    if "/" in unit:
        num, _, den = unit.partition("/")
        f, base = _SCALE.get(num, (1.0, num))
        if den in _PER_TIME:
            return Metric(value * f / _PER_TIME[den], f"{base}/second")
        return Metric(value * f, f"{base}/{den}")
    return Metric(value, unit)


def _csv_rows(text: str) -> list[list[str]]:
    """CSV rows from ncu's output, skipping any ``==PROF==``/``==WARNING==`` lines before the header."""
    lines = text.lstrip("\ufeff").splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.startswith('"ID"')), None)
    if start is None:
        return []
    return list(csv.reader(io.StringIO("\n".join(lines[start:]))))


_RANGE_ENTRY = re.compile(r'"([^"]*)"')


def parse_ranges(cell: str) -> list[str]:
    """Range names from an NVTX push/pop cell: ``1  "<default domain>:l2p_0:none:…"`` → ``["l2p_0"]``."""
    out = []
    for entry in _RANGE_ENTRY.findall(cell or ""):
        if entry.startswith("<"):                      # "<default domain>:NAME:payload..."
            rest = entry.split(">", 1)[1].lstrip(":")
        else:                                          # "Domain:NAME:..."
            rest = entry.split(":", 1)[1] if ":" in entry else entry
        name = rest.split(":", 1)[0]
        if name:
            out.append(name)
    return out


def _find_col(header: list[str], *names: str) -> int | None:
    for n in names:
        if n in header:
            return header.index(n)
    return None


_FIXED_COLS = {
    "ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream", "Block Size",
    "Grid Size", "Device", "CC", "Kernel Time", "Function Name", "Demangled Name",
}


def parse_raw(text: str) -> list[KernelRecord]:
    """Parse ``--page raw --csv`` output (header row, units row, one row per kernel)."""
    rows = _csv_rows(text)
    if len(rows) < 2:
        return []
    header, units = rows[0], rows[1]
    is_units = not units or not units[0].strip()       # the units row has an empty ID cell
    body = rows[2:] if is_units else rows[1:]
    if not is_units:
        units = [""] * len(header)
    i_id = _find_col(header, "ID")
    i_name = _find_col(header, "Kernel Name", "Function Name")
    i_stream = _find_col(header, "Stream")
    i_block = _find_col(header, "Block Size")
    i_grid = _find_col(header, "Grid Size")
    nvtx_cols = [i for i, h in enumerate(header) if "Push/Pop_Range" in h]
    skip = {i for i, h in enumerate(header) if h in _FIXED_COLS or "_Range" in h}
    out: list[KernelRecord] = []
    for row in body:
        if not row or not row[i_id or 0].strip():
            continue
        row = row + [""] * (len(header) - len(row))
        rec = KernelRecord(
            id=int(float(to_number(row[i_id]) or 0)) if i_id is not None else len(out),
            name=row[i_name] if i_name is not None else "",
            stream=row[i_stream] if i_stream is not None else "",
            block=row[i_block] if i_block is not None else "",
            grid=row[i_grid] if i_grid is not None else "",
        )
        for i in nvtx_cols:
            rec.ranges.extend(parse_ranges(row[i]))
        for i, name in enumerate(header):
            if i in skip or not name:
                continue
            rec.metrics[name] = normalise(to_number(row[i]), units[i] if i < len(units) else "")
        out.append(rec)
    return out


def parse_details(text: str) -> list[KernelRecord]:
    """Parse ``--page details --csv`` output (one row per kernel × section × metric)."""
    rows = _csv_rows(text)
    if len(rows) < 2:
        return []
    header = rows[0]
    col = {h: i for i, h in enumerate(header)}
    need = ("ID", "Section Name", "Metric Name", "Metric Unit", "Metric Value")
    if any(n not in col for n in need):
        return []
    nvtx_cols = [i for i, h in enumerate(header) if "Push/Pop_Range" in h]
    by_id: dict[int, KernelRecord] = {}
    for row in rows[1:]:
        row = row + [""] * (len(header) - len(row))    # ncu leaves empty trailing rule columns out
        if not row[col["ID"]].strip():
            continue
        kid = int(float(to_number(row[col["ID"]]) or 0))
        rec = by_id.get(kid)
        if rec is None:
            rec = by_id[kid] = KernelRecord(
                id=kid,
                name=row[col["Kernel Name"]] if "Kernel Name" in col else "",
                stream=row[col["Stream"]] if "Stream" in col else "",
                block=row[col["Block Size"]] if "Block Size" in col else "",
                grid=row[col["Grid Size"]] if "Grid Size" in col else "",
            )
            for i in nvtx_cols:
                rec.ranges.extend(parse_ranges(row[i]))
        section, label = row[col["Section Name"]], row[col["Metric Name"]]
        if not label:                                   # a rule row (Rule Name/Description only)
            continue
        rec.sections.setdefault(section, {})[label] = normalise(
            to_number(row[col["Metric Value"]]), row[col["Metric Unit"]])
    return [by_id[k] for k in sorted(by_id)]


def merge(raw: Iterable[KernelRecord], details: Iterable[KernelRecord]) -> list[KernelRecord]:
    """Raw records with the details page's sections attached (matched by kernel ID)."""
    det = {d.id: d for d in details}
    out = []
    for r in raw:
        d = det.pop(r.id, None)
        if d is not None:
            r.sections = d.sections
            if not r.ranges:
                r.ranges = d.ranges
        out.append(r)
    out.extend(det[k] for k in sorted(det))            # kernels only the details page had
    return out


def split_by_range(kernels: list[KernelRecord], names: list[str]) -> dict[str, list[KernelRecord]]:
    """Group kernels by the NVTX range (one per profiled call) they were launched in.

    Without NVTX columns (an ncu that did not record them), falls back to
    consecutive runs of one CUDA stream: the one-launch driver gives every call
    its own stream, so a change of stream starts the next call.
    """
    groups: dict[str, list[KernelRecord]] = {n: [] for n in names}
    wanted = set(names)
    if any(k.ranges for k in kernels):
        for k in kernels:
            hit = next((r for r in reversed(k.ranges) if r in wanted), None)
            if hit is not None:
                groups[hit].append(k)
        return groups
    runs: list[list[KernelRecord]] = []
    for k in sorted(kernels, key=lambda k: k.id):
        if runs and runs[-1][-1].stream == k.stream:
            runs[-1].append(k)
        else:
            runs.append([k])
    for name, run in zip(names, runs):
        groups[name] = run
    return groups
