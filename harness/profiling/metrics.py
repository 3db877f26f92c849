"""Canonical metrics: a small, named, unit-carrying view of ncu's raw metrics.

ncu's metric names differ between versions and chips (e.g. the DRAM throughput
is ``gpu__dram_throughput`` or ``dram__throughput``; Hopper's tensor pipes have
several names), so every canonical metric lists candidate raw names (first one
present wins) or a pattern over all names (largest value wins).

A call that launches several kernels (split-K + reduce, padding copies) is
aggregated: durations, bytes and cycles are summed; percentages and ratios are
weighted by each kernel's duration (a 2 µs reduce kernel should not halve the
tensor-pipe utilisation of a 100 µs main kernel); the launch configuration is
the one of the longest kernel.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

from .parse import KernelRecord, Metric


@dataclass(frozen=True)
class Canon:
    key: str
    label: str
    unit: str
    agg: str                       # "sum" | "wavg" | "main" (longest kernel) | "max"
    names: tuple[str, ...] = ()
    pattern: str | None = None     # regex over raw names; the largest matching value is used
    scale: float = 1.0             # multiply the raw value (ns -> us)


STALL_RE = re.compile(r"^smsp__average_warps_issue_stalled_([a-z_]+)_per_issue_active\.ratio$")
STALL_PCSAMP_RE = re.compile(r"^smsp__pcsamp_warps_issue_stalled_([a-z_]+)$")

CANON: tuple[Canon, ...] = (
    Canon("duration_us", "Duration", "us", "sum", ("gpu__time_duration.sum",), scale=1e-3),
    Canon("kernels", "Kernels in the call", "", "sum"),
    Canon("sm_throughput_pct", "Compute (SM) throughput", "%", "wavg",
          ("sm__throughput.avg.pct_of_peak_sustained_elapsed",)),
    Canon("tensor_pipe_pct", "Tensor pipe utilisation", "%", "wavg",
          pattern=r"^sm__(pipe_tensor|inst_executed_pipe_tensor)[a-z_]*(_cycles_active)?\.avg\.pct_of_peak_sustained_(active|elapsed)$"),
    Canon("memory_throughput_pct", "Memory throughput (max unit)", "%", "wavg",
          ("gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",)),
    Canon("dram_throughput_pct", "DRAM throughput", "%", "wavg",
          ("gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
           "dram__throughput.avg.pct_of_peak_sustained_elapsed")),
    Canon("l2_throughput_pct", "L2 throughput", "%", "wavg",
          ("lts__throughput.avg.pct_of_peak_sustained_elapsed",)),
    Canon("l1_throughput_pct", "L1/shared throughput", "%", "wavg",
          ("l1tex__throughput.avg.pct_of_peak_sustained_active",)),
    Canon("dram_bandwidth", "DRAM bandwidth", "byte/s", "wavg", ("dram__bytes.sum.per_second",)),
    Canon("dram_bytes", "DRAM bytes moved", "byte", "sum", ("dram__bytes.sum", "dram__bytes_read.sum")),
    Canon("l2_hit_rate_pct", "L2 hit rate", "%", "wavg", ("lts__t_sector_hit_rate.pct",)),
    Canon("l1_hit_rate_pct", "L1 hit rate", "%", "wavg", ("l1tex__t_sector_hit_rate.pct",)),
    Canon("achieved_occupancy_pct", "Achieved occupancy", "%", "wavg",
          ("sm__warps_active.avg.pct_of_peak_sustained_active",)),
    Canon("theoretical_occupancy_pct", "Theoretical occupancy", "%", "main",
          ("sm__maximum_warps_per_active_cycle_pct",)),
    Canon("ipc", "Executed IPC (active)", "inst/cycle", "wavg", ("sm__inst_executed.avg.per_cycle_active",)),
    Canon("issue_active_pct", "Issue slots busy", "%", "wavg",
          ("smsp__issue_active.avg.pct_of_peak_sustained_active", "sm__inst_issued.avg.pct_of_peak_sustained_active")),
    Canon("eligible_warps", "Eligible warps per scheduler", "warp", "wavg",
          ("smsp__warps_eligible.avg.per_cycle_active",)),
    Canon("active_warps", "Active warps per scheduler", "warp", "wavg",
          ("smsp__warps_active.avg.per_cycle_active",)),
    Canon("warp_cycles_per_issue", "Warp cycles per issued instruction", "cycle", "wavg",
          ("smsp__average_warp_latency_per_inst_issued.ratio", "smsp__average_warps_active_per_issue_active.ratio")),
    Canon("grid_size", "Grid size (blocks)", "block", "main", ("launch__grid_size",)),
    Canon("block_size", "Block size (threads)", "thread", "main", ("launch__block_size",)),
    Canon("registers_per_thread", "Registers per thread", "register", "main", ("launch__registers_per_thread",)),
    Canon("smem_per_block", "Shared memory per block", "byte", "main",
          ("launch__shared_mem_per_block", "launch__shared_mem_per_block_static")),
    Canon("waves_per_sm", "Waves per SM", "", "main", ("launch__waves_per_multiprocessor",)),
    Canon("sm_count", "SMs", "", "main", ("launch__sm_count", "device__attribute_multiprocessor_count")),
    Canon("sm_clock_mhz", "SM clock", "MHz", "wavg", ("gpc__cycles_elapsed.avg.per_second",), scale=1e-6),
    Canon("dram_clock_mhz", "DRAM clock", "MHz", "wavg", ("dram__cycles_elapsed.avg.per_second",), scale=1e-6),
    Canon("elapsed_cycles", "Elapsed cycles", "cycle", "sum", ("gpc__cycles_elapsed.max",)),
)
CANON_BY_KEY = {c.key: c for c in CANON}

#: stalls that wait on memory (global/local through L1TEX, shared memory/MIO, texture, store drain)
MEMORY_STALLS = ("long_scoreboard", "lg_throttle", "mio_throttle", "short_scoreboard", "tex_throttle", "drain")


def _value(k: KernelRecord, c: Canon) -> float | None:
    if c.key == "dram_bytes" and not any(k.num(n) is not None for n in c.names):
        # MemoryWorkloadAnalysis gives the rate, not the total: bytes = rate x duration
        rate, dur = k.num("dram__bytes.sum.per_second"), k.num("gpu__time_duration.sum")
        return rate * dur * 1e-9 if rate is not None and dur is not None else None
    if c.pattern is not None:
        rx = re.compile(c.pattern)
        vals = [m.value for n, m in k.metrics.items() if rx.match(n) and isinstance(m.value, float)]
        return max(vals) if vals else None
    for n in c.names:
        v = k.num(n)
        if v is not None:
            return v
    return None


def stall_breakdown(k: KernelRecord) -> dict[str, float]:
    """Warp-stall reasons of one kernel: reason -> cycles per issued instruction (or samples)."""
    out: dict[str, float] = {}
    for rx in (STALL_RE, STALL_PCSAMP_RE):
        for n, m in k.metrics.items():
            mt = rx.match(n)
            if mt and isinstance(m.value, float) and not mt.group(1).endswith("not_issued"):
                out.setdefault(mt.group(1), m.value)
        if out:
            break
    out.pop("selected", None)          # issuing is not a stall
    return out


def _duration(k: KernelRecord) -> float:
    return k.num("gpu__time_duration.sum") or 0.0


def aggregate(kernels: list[KernelRecord]) -> dict[str, Metric]:
    """Canonical metrics of one call (all its kernels), plus ``stall_<reason>`` and ``stall_memory_frac``."""
    out: dict[str, Metric] = {}
    if not kernels:
        return out
    durs = [_duration(k) for k in kernels]
    total = sum(durs)
    weights = [d / total if total > 0 else 1.0 / len(kernels) for d in durs]
    main = kernels[max(range(len(kernels)), key=lambda i: durs[i])]
    for c in CANON:
        if c.key == "kernels":
            out[c.key] = Metric(float(len(kernels)), c.unit)
            continue
        vals = [_value(k, c) for k in kernels]
        v: float | None
        if c.agg == "sum":
            present = [x for x in vals if x is not None]
            v = sum(present) if present else None
        elif c.agg == "main":
            v = _value(main, c)
        elif c.agg == "max":
            present = [x for x in vals if x is not None]
            v = max(present) if present else None
        else:                                          # duration-weighted mean over kernels that have it
            pw = [(x, w) for x, w in zip(vals, weights) if x is not None]
            sw = sum(w for _, w in pw)
            v = sum(x * w for x, w in pw) / sw if pw and sw > 0 else None
        if v is not None:
            out[c.key] = Metric(v * c.scale, c.unit)
    # warp stalls, duration-weighted
    stalls: dict[str, float] = {}
    for k, w in zip(kernels, weights):
        for r, x in stall_breakdown(k).items():
            stalls[r] = stalls.get(r, 0.0) + w * x
    tot = sum(stalls.values())
    for r, x in sorted(stalls.items(), key=lambda kv: -kv[1]):
        out[f"stall_{r}"] = Metric(x, "cycle")
    if tot > 0:
        mem = sum(stalls.get(r, 0.0) for r in MEMORY_STALLS)
        out["stall_memory_frac"] = Metric(mem / tot, "")
        top = max(stalls, key=lambda r: stalls[r])
        out["stall_top"] = Metric(top, "")
    return out


def label_of(key: str) -> str:
    c = CANON_BY_KEY.get(key)
    if c is not None:
        return c.label
    if key == "stall_memory_frac":
        return "Share of stalls waiting on memory"
    if key == "stall_top":
        return "Top stall reason"
    if key.startswith("stall_"):
        return f"Stall: {key[6:].replace('_', ' ')}"
    return key


def fmt_value(m: Metric) -> str:
    """A compact human string for a metric value with its unit."""
    v, u = m.value, m.unit
    if v is None:
        return "n/a"
    if not isinstance(v, float):
        return str(v)
    if u in ("byte", "byte/s"):
        suffix = "/s" if u == "byte/s" else ""
        for f, s in ((1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "KB")):
            if abs(v) >= f:
                return f"{v / f:.2f} {s}{suffix}"
        return f"{v:.0f} B{suffix}"
    if u == "%":
        return f"{v:.1f}%"
    if u == "" and abs(v) < 1 and v != 0:
        return f"{v:.2f}"
    if v == int(v) and abs(v) < 1e15:
        return f"{int(v)}" + (f" {u}" if u else "")
    return f"{v:.3g}" + (f" {u}" if u else "") if abs(v) < 1000 else f"{v:,.0f}" + (f" {u}" if u else "")


Formatter = Callable[[Metric], str]
