"""Side-by-side table of Nsight Compute profiles: our kernel against a library's, per shape.

    python tools/ncu_compare.py tests/fixtures/ncu/ncu-2c3cbdc/ --out summary.md

Why: the profiles that `python -m harness profile --out` writes (named
``ncu-l2-<shape>.json`` / ``ncu-cublaslt-<shape>.json`` for this tool) hold every
metric of every kernel, too much to read side by side. Where the time goes on a shape is in a few
numbers per kernel: grid, duration, SM clock and cycles (a power-capped clock shows up here, not
in the duration alone), tensor-pipe activity, DRAM bytes moved and the L2 hit rate. This prints
them for both subjects of each shape as Markdown, from the files alone (no GPU), so the figures
quoted in notes come from committed profiles. Plain or gzipped JSON.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import sys
from pathlib import Path
from typing import Any

FILE = re.compile(r"^ncu-(?P<who>.+?)-(?P<shape>\d+x\d+x\d+)\.json(\.gz)?$")
#: tensor-pipe cycles active (all MMA kinds, WGMMA included) per cycle the SM was active
TENSOR = "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active"


def load(path: Path) -> dict[str, Any]:
    raw = path.read_bytes()
    if path.suffix == ".gz":
        raw = gzip.decompress(raw)
    return json.loads(raw)


def short_name(name: str) -> str:
    """A readable kernel name: CUTLASS's template soup becomes tile + schedule."""
    if "GemmUniversal" in name:
        c = r"(?:cute::)?C<(\d+)>"  # the CTA tile follows the kernel schedule's name
        tile = re.search(rf"WarpSpecialized\w*>,\s*(?:cute::)?tuple<{c},\s*{c},\s*{c}>", name)
        sched = next((s for s in ("Pingpong", "Cooperative") if s in name), "")
        # the plain warp-specialized kernel is not persistent (a CTA per tile) whatever scheduler
        # tag its template carries
        basic = not sched and re.search(r"KernelTmaWarpSpecialized>", name) is not None
        kind = "StreamK" if "StreamK" in name else (
            "BASIC" if basic else "Persistent" if "PersistentScheduler" in name else "")
        stages = re.search(r"MainloopSm90TmaGmmaWarpSpecialized\w*<(\d+),", name)
        dims = "x".join(tile.groups()) if tile else "?"
        return " ".join(x for x in ("CUTLASS", dims, sched, kind, f"{stages.group(1)} stages" if stages else "") if x)
    base = re.sub(r"^void\s+", "", name)
    base = re.sub(r"\(.*$", "", base)
    return base if len(base) <= 60 else base[:57] + "..."


def _metric(kernel: dict[str, Any], key: str) -> float | None:
    m = kernel.get("metrics", {}).get(key)
    return None if m is None or m.get("value") is None else float(m["value"])


def _section(kernel: dict[str, Any], section: str, key: str) -> float | None:
    v = kernel.get("sections", {}).get(section, {}).get(key, {}).get("value")
    return None if v is None else float(v)


def kernel_rows(profile: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per kernel of the call, in launch order."""
    rows = []
    for k in profile.get("kernels", []):
        dur_ns = _section(k, "GPU Speed Of Light Throughput", "Duration") or 0.0
        bw = _section(k, "Memory Workload Analysis", "Memory Throughput")
        rows.append({
            "kernel": short_name(k.get("name", "?")),
            "grid": "x".join(str(int(x)) for x in _dims(k.get("grid"))),
            "block": int(_dims(k.get("block"))[0]),
            "us": dur_ns / 1e3,
            "sm_mhz": (_section(k, "GPU Speed Of Light Throughput", "SM Frequency") or 0.0) / 1e6,
            "cycles": _section(k, "GPU Speed Of Light Throughput", "Elapsed Cycles"),
            "tensor_pct": _metric(k, TENSOR),
            "dram_mb": (bw or 0.0) * dur_ns * 1e-9 / 1e6,
            "dram_tbs": (bw or 0.0) / 1e12,
            "l2_hit_pct": _section(k, "Memory Workload Analysis", "L2 Hit Rate"),
        })
    return rows


def _dims(v: Any) -> tuple[float, ...]:
    if isinstance(v, str):
        return tuple(float(x) for x in re.findall(r"\d+", v)) or (0.0,)
    if isinstance(v, (list, tuple)):
        return tuple(float(x) for x in v) or (0.0,)
    return (0.0,)


def _fmt(v: float | None, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def table(profiles: dict[str, dict[str, Any]]) -> list[str]:
    """Markdown lines for one shape: every kernel of every subject, then each subject's total."""
    out = ["| subject | kernel | grid | block | us | SM MHz | cycles | tensor pipe % | DRAM MB | DRAM TB/s | L2 hit % |",
           "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    totals = {}
    for who, prof in profiles.items():
        rows = kernel_rows(prof)
        totals[who] = sum(r["us"] for r in rows)
        for r in rows:
            out.append(f"| {who} | {r['kernel']} | {r['grid']} | {r['block']} | {r['us']:.1f} | {r['sm_mhz']:.0f} | "
                       f"{_fmt(r['cycles'], '.0f')} | {_fmt(r['tensor_pct'], '.1f')} | {r['dram_mb']:.1f} | "
                       f"{r['dram_tbs']:.2f} | {_fmt(r['l2_hit_pct'], '.0f')} |")
    out.append("")
    out.append("Total per call (ncu serializes kernels and flushes caches, so these exceed bench times): "
               + ", ".join(f"{who} {t:.1f} us" for who, t in totals.items()))
    return out


def collect(folder: Path) -> dict[str, dict[str, dict[str, Any]]]:
    """{shape: {subject: profile}} from the ``ncu-<subject>-<shape>.json[.gz]`` files of a folder."""
    found: dict[str, dict[str, dict[str, Any]]] = {}
    for p in sorted(folder.iterdir()):
        m = FILE.match(p.name)
        if m:
            found.setdefault(m["shape"], {})[m["who"]] = load(p)
    return found


def _shape_key(s: str) -> tuple[int, ...]:
    m, n, k = (int(x) for x in s.split("x"))
    return (m * n * k, m, n, k)


def render(folder: Path) -> str:
    found = collect(folder)
    if not found:
        raise SystemExit(f"ncu_compare: no ncu-<subject>-<MxNxK>.json files in {folder}")
    lines = [f"# Nsight Compute, side by side ({folder.name})", "",
             "Generated by `python tools/ncu_compare.py` from the profile files in this folder.", ""]
    for shape in sorted(found, key=_shape_key):
        first = next(iter(found[shape].values()))
        meta = first.get("meta", {})
        lines += [f"## {shape}", "", f"ncu {meta.get('ncu', '?')}", ""]
        lines += table(found[shape])
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    if not args.folder.is_dir():
        print(f"ncu_compare: {args.folder} is not a folder", file=sys.stderr)
        return 2
    text = render(args.folder)
    if args.out:
        args.out.write_text(text + "\n")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
