"""Summary tables of bench result files, as Markdown (``results/README.md``).

    python -m harness.report results/h200/*.json -o results/README.md [--label l2]

For every result file (``harness.results`` schema): the run's metadata; the candidate's geomean
speedup over each baseline and over the per-shape fastest baseline; the share of shapes where
it is faster than ``cublaslt_autotune``; and per size class (small / mid / big, see
``Shape.size_class``) the same speedups plus the fraction of the roofline reached
(``roofline_ms / candidate ms``), which says where launch latency or bandwidth bounds a shape;
and the same per regime (output tiles of 128x128 against one wave of the GPU, K up to or over
1024), which separates shapes of equal flops that different things bound.
Every table names its timing mode: per call (each call after an unrelated kernel, the
headline), back to back (a graph of calls of the same subject, a pipeline figure) or server. A
file timed both ways (``--timing both``) gets the per-call tables first, then the back-to-back
ones, then how the two compare per subject (the fairness of the per-call method: a subject not
launched with programmatic dependent launch should time the same both ways).
Deterministic output (sorted, fixed formats), so the committed README diffs cleanly.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections import Counter
from pathlib import Path
from typing import Any, Sequence

from .results import BASELINE_LABELS, ResultFile, load
from .shapes import Shape
from .stats import geomean, speedup
from .timing import MODE_LABELS

CLASSES = ("small", "mid", "big")
TARGET_BASELINE = "cublaslt_autotune"

#: Regimes by what bounds a GEMM on a GPU of about 132 SMs: output tiles of 128x128 against one
#: wave (a quarter wave or less: few CTAs, latency; less than a wave: one tile per CTA; a wave or
#: more), and a K up to or over 1024 (whether the main loop or the epilogue and launch dominate).
#: Size classes group by flops only and put e.g. 16384x16384x256 with 2048^3.
TILE_WAVES = ((0, 33, "< 33"), (33, 132, "33-131"), (132, None, "132+"))
K_SPLIT = 1024


def regime(shape: Shape) -> str:
    """``"<33 tiles, K<=1024"`` etc.: the row of the regime table ``shape`` falls in."""
    tiles = math.ceil(shape.m / 128) * math.ceil(shape.n / 128)
    name = next(nm for lo, hi, nm in TILE_WAVES if tiles >= lo and (hi is None or tiles < hi))
    return f"{name} tiles, K {'<=' if shape.k <= K_SPLIT else '>'} {K_SPLIT}"


def regimes() -> list[str]:
    return [f"{nm} tiles, K {op} {K_SPLIT}" for _, _, nm in TILE_WAVES for op in ("<=", ">")]


def _f(x: float | None, spec: str = ".3f", suffix: str = "") -> str:
    return "-" if x is None else format(x, spec) + suffix


def pick_label(rf: ResultFile, label: str | None) -> str | None:
    cands = rf.candidate_labels()
    if label:
        return label if label in cands else None
    for pref in ("l2", "candidate"):
        if pref in cands:
            return pref
    return cands[0] if cands else None


def report_labels(rf: ResultFile, label: str | None) -> list[str]:
    """The candidate labels to report: ``label`` alone when given, else every candidate of the
    file (an A/B run holds two), the preferred one (``pick_label``) first."""
    first = pick_label(rf, label)
    if first is None:
        return []
    if label:
        return [first]
    return [first] + [lb for lb in rf.candidate_labels() if lb != first]


def head_to_head(rf: ResultFile, a: str, b: str) -> tuple[float | None, int, int]:
    """Geomean of time(b) / time(a) over the shapes both timed, shapes where a was faster, shapes."""
    ratios = [x for x in (speedup(r["times_ms"].get(b), r["times_ms"].get(a)) for r in rf.rows) if x is not None]
    return geomean(ratios), sum(1 for x in ratios if x > 1), len(ratios)


def speedups(rf: ResultFile, label: str, baseline: str) -> list[tuple[Shape, float]]:
    out = []
    for r in rf.rows:
        t = r["times_ms"].get(label)
        if baseline == "best":
            bs = [r["times_ms"].get(b) for b in BASELINE_LABELS]
            bs = [b for b in bs if b]
            b = min(bs) if bs else None
        else:
            b = r["times_ms"].get(baseline)
        sp = speedup(b, t)
        if sp is not None:
            out.append((Shape(r["m"], r["n"], r["k"]), sp))
    return out


def roofline_fraction(rf: ResultFile, label: str) -> list[tuple[Shape, float]]:
    out = []
    for r in rf.rows:
        t, roof = r["times_ms"].get(label), r.get("roofline_ms")
        if t and roof:
            out.append((Shape(r["m"], r["n"], r["k"]), roof / t))
    return out


def summarize(rf: ResultFile, label: str) -> dict[str, Any]:
    """Numbers behind the tables (also used by tests)."""
    bases = [b for b in (*BASELINE_LABELS, "best") if b == "best" or any(r["times_ms"].get(b) for r in rf.rows)]
    res: dict[str, Any] = {"label": label, "shapes": len(rf.rows), "baselines": {}, "classes": {}}
    for b in bases:
        sp = speedups(rf, label, b)
        res["baselines"][b] = {"geomean": geomean(x for _, x in sp), "n": len(sp),
                               "wins": sum(1 for _, x in sp if x > 1.0)}
    target = speedups(rf, label, TARGET_BASELINE)
    best = speedups(rf, label, "best")
    roof = roofline_fraction(rf, label)
    for cls in CLASSES:
        t = [x for s, x in target if s.size_class == cls]
        bb = [x for s, x in best if s.size_class == cls]
        rr = [x for s, x in roof if s.size_class == cls]
        res["classes"][cls] = {"n": len([r for r in rf.rows if Shape(r["m"], r["n"], r["k"]).size_class == cls]),
                               "vs_target": geomean(t), "wins": sum(1 for x in t if x > 1.0), "timed": len(t),
                               "vs_best": geomean(bb), "roofline": geomean(rr)}
    res["regimes"] = {}
    counts = Counter(regime(Shape(r["m"], r["n"], r["k"])) for r in rf.rows)
    for reg in (g for g in regimes() if counts[g]):
        t = [x for s, x in target if regime(s) == reg]
        res["regimes"][reg] = {"n": counts[reg], "vs_target": geomean(t), "wins": sum(1 for x in t if x > 1.0),
                               "timed": len(t), "vs_best": geomean(x for s, x in best if regime(s) == reg),
                               "roofline": geomean(x for s, x in roof if regime(s) == reg)}
    failed = [r for r in rf.rows if not r["times_ms"].get(label)]
    res["missing"] = len(failed)
    return res


#: how each subject is called from the worker (the host path server mode measures on purpose)
HOST_PATHS = {"torch": "torch.matmul (the framework path, Python)"}
C_PATH = "C entry point through ctypes"


def timing_of(rf: ResultFile) -> str:
    """The file's offline timing mode; files made before the mode was recorded were back to back."""
    m = rf.meta
    if m.get("mode") == "server":
        return "server"
    return m.get("timing") or "chained"


def mode_label(rf: ResultFile) -> str:
    t = timing_of(rf)
    return MODE_LABELS["isolated" if t == "both" else t]


def chained_view(rf: ResultFile) -> ResultFile | None:
    """The back-to-back figures of a file timed both ways, as a file of their own (None otherwise)."""
    if not any(r.get("times_ms_chained") for r in rf.rows):
        return None
    rows = [{**r, "times_ms": dict(r.get("times_ms_chained") or {})} for r in rf.rows]
    return ResultFile({**rf.meta, "timing": "chained"}, rows)


def per_call_vs_chained(rf: ResultFile) -> dict[str, dict[str, Any]]:
    """Per subject and size class: geomean of per-call time / back-to-back time, and the share of
    shapes within 3 %. Candidates are split by whether their source launches with PDL
    (``row['pdl']``), since PDL is what back to back rewards."""
    groups: dict[str, dict[str, list[float]]] = {}
    for r in rf.rows:
        iso, ch = r.get("times_ms") or {}, r.get("times_ms_chained") or {}
        pdl = r.get("pdl") or {}
        cls = Shape(r["m"], r["n"], r["k"]).size_class
        for lb, t in iso.items():
            c = ch.get(lb)
            if not t or not c:
                continue
            name = lb if lb in BASELINE_LABELS else f"{lb} ({'PDL' if pdl.get(lb) else 'no PDL'})"
            g = groups.setdefault(name, {})
            g.setdefault(cls, []).append(t / c)
            g.setdefault("all", []).append(t / c)
    out: dict[str, dict[str, Any]] = {}
    for name in sorted(groups):
        out[name] = {cls: {"n": len(xs), "ratio": geomean(xs), "within_3pct": sum(1 for x in xs if abs(x - 1) <= 0.03) / len(xs)}
                     for cls, xs in groups[name].items()}
    return out


def caveats(rf: ResultFile) -> list[str]:
    """What a reader must know before comparing numbers: partial runs, derived files, host paths."""
    m, out = rf.meta, []
    shapes = m.get("shapes") or []
    if m.get("complete") is False:
        want = ""
        if len(shapes) == 1 and shapes[0] in ("grid", "small", "sample100"):
            from .shapes import SHAPE_SETS

            want = f" of the {len(SHAPE_SETS[shapes[0]]())} in `{shapes[0]}`"
        out.append(f"**Partial run:** {len(rf.rows)} shapes{want} (stopped by its time limit).")
    if m.get("derived_from"):
        out.append(f"Derived from `{m['derived_from']}` (same run, labels {', '.join(m.get('derived_labels', []))}).")
    if m.get("merged_from"):
        out.append("Merged from " + ", ".join(f"`{p['file']}` ({p['rows']} rows, git {p['git_rev']})" for p in m["merged_from"]) + ".")
    if m.get("mode") == "server":
        if "nvmath" in str(m.get("method", "")) or not m.get("timing"):
            out.append("Server mode times each call on the host; in this file cuBLASLt was called through "
                       "nvmath-python's Python path and the candidates through C: compare them with `cublas` only.")
        else:
            paths = ", ".join(f"{lb}: {HOST_PATHS.get(lb, C_PATH)}" for lb in rf.labels())
            out.append(f"Server mode times each call on the host, every subject through the same kind of call ({paths}).")
    elif timing_of(rf) == "chained":
        out.append("**Back to back:** a CUDA graph of calls of the same subject; a kernel launched with programmatic "
                   "dependent launch overlaps its previous call. A pipeline figure, not what one call costs.")
    return out + [""] if out else []


def markdown(files: Sequence[tuple[str, ResultFile]], label: str | None = None) -> str:
    lines = ["# Results", "",
             "Generated by `python -m harness.report " + " ".join(p for p, _ in files) + "`; do not edit by hand.",
             "Speedup = baseline time / candidate time (geomean over shapes); roofline = roofline time / "
             "candidate time (1.0 = at the GPU's limit). Size classes: small < 2^30 flop <= mid < 2^37 flop <= big.",
             ""]
    for path, rf in files:
        labels = report_labels(rf, label)
        m = rf.meta
        lines += [f"## {Path(path).name}", "",
                  f"{m.get('gpu')} · driver {m.get('driver')} · CUDA {m.get('cuda')} · nvcc {m.get('nvcc')} · "
                  f"**{mode_label(rf)}** · acc {m.get('acc')} · {m.get('date')} · git {str(m.get('git_rev'))[:10]}", ""]
        if m.get("command"):
            lines += [f"Command: `{m['command']}`", ""]
        lines += caveats(rf)
        if not labels:
            lines += ["No candidate label in this file.", ""]
            continue
        if len(labels) > 1:
            lines += [f"Candidates side by side in this run: {', '.join(f'`{x}`' for x in labels)}.", "",
                      "| candidate | against | geomean speedup | faster on | shapes |", "|---|---|---:|---:|---:|"]
            for other in labels[1:]:
                g, wins, n = head_to_head(rf, labels[0], other)
                pct = f"{100 * wins / n:.0f}%" if n else "-"
                lines.append(f"| {labels[0]} | {other} | {_f(g)}x | {pct} | {n} |")
            lines.append("")
        for lb in labels:
            lines += _candidate_tables(rf, lb, mode_label(rf))
        ch = chained_view(rf)
        if ch is not None:
            lines += ["### Back to back (the same run; a pipeline figure)", ""]
            for lb in labels:
                lines += _candidate_tables(ch, lb, MODE_LABELS["chained"])
            lines += _comparison_table(rf)
    return "\n".join(lines) + "\n"


def _comparison_table(rf: ResultFile) -> list[str]:
    cmp = per_call_vs_chained(rf)
    if not cmp:
        return []
    lines = ["### Per call against back to back, per subject", "",
             "Geomean of per-call time / back-to-back time (1.00 = the same both ways), and the share of shapes "
             "within 3 %. A subject launched without PDL gains nothing from back-to-back overlap.", "",
             "| subject | " + " | ".join(f"{c}" for c in (*CLASSES, "all")) + " | within 3 % (all) |",
             "|---|" + "---:|" * (len(CLASSES) + 2)]
    for name, d in cmp.items():
        cells = [_f((d.get(c) or {}).get("ratio")) for c in (*CLASSES, "all")]
        within = (d.get("all") or {}).get("within_3pct")
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {_f(None if within is None else 100 * within, '.0f', '%')} |")
    return lines + [""]


def _candidate_tables(rf: ResultFile, lb: str, mode: str) -> list[str]:
    """One candidate's tables: speedup over each baseline, by size class and by regime."""
    lines: list[str] = []
    s = summarize(rf, lb)
    lines += [f"Candidate `{lb}` on {s['shapes']} shapes ({s['missing']} without a time), **{mode}**.", "",
              "| baseline | geomean speedup | faster on | shapes |", "|---|---:|---:|---:|"]
    for b, v in s["baselines"].items():
        name = "per-shape fastest baseline" if b == "best" else b
        pct = f"{100 * v['wins'] / v['n']:.0f}%" if v["n"] else "-"
        lines.append(f"| {name} | {_f(v['geomean'])}x | {pct} | {v['n']} |")
    lines += ["", f"| size class | shapes | vs {TARGET_BASELINE} | faster on | vs fastest baseline | roofline reached |",
              "|---|---:|---:|---:|---:|---:|"]
    for cls, v in s["classes"].items():
        pct = f"{100 * v['wins'] / v['timed']:.0f}%" if v["timed"] else "-"
        lines.append(f"| {cls} | {v['n']} | {_f(v['vs_target'])}x | {pct} | {_f(v['vs_best'])}x | "
                     f"{_f(v['roofline'], '.2f')} |")
    lines += ["", f"| regime (128x128 output tiles, K) | shapes | vs {TARGET_BASELINE} | faster on | "
              "vs fastest baseline | roofline reached |", "|---|---:|---:|---:|---:|---:|"]
    for reg, v in s["regimes"].items():
        pct = f"{100 * v['wins'] / v['timed']:.0f}%" if v["timed"] else "-"
        lines.append(f"| {reg} | {v['n']} | {_f(v['vs_target'])}x | {pct} | {_f(v['vs_best'])}x | "
                     f"{_f(v['roofline'], '.2f')} |")
    lines.append("")
    return lines


README_BEGIN, README_END = "<!-- results:begin -->", "<!-- results:end -->"


def readme_block(files: Sequence[tuple[str, ResultFile]], label: str | None = None) -> str:
    """The README's results summary: one row per file and timing mode (per call first where a
    file has both), the candidate's geomean speedup over the libraries and per size class."""
    lines = ["Generated by `python -m harness.report " + " ".join(p for p, _ in files) + " --readme README.md`;",
             "every table per file is in `results/README.md`. Speedup = library time / our time, geomean over",
             "the shapes; *faster on* = share of shapes where ours beats `cublaslt_autotune`.", "",
             f"| mode | acc | shapes | vs cublas | vs {TARGET_BASELINE} | faster on | vs fastest library | "
             "small | mid | big | file |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    order = sorted(files, key=lambda f: (timing_of(f[1]) == "server", f[1].meta.get("acc") != "f32", f[0]))
    metas = []
    for path, rf in order:
        lb = pick_label(rf, label)
        if lb is None:
            continue
        views = [(mode_label(rf), rf)]
        ch = chained_view(rf)
        if ch is not None:
            views.append((MODE_LABELS["chained"], ch))
        for mode, view in views:
            sm = summarize(view, lb)
            b = sm["baselines"]
            t = b.get(TARGET_BASELINE, {})
            pct = f"{100 * t['wins'] / t['n']:.0f}%" if t.get("n") else "-"
            partial = " (partial)" if rf.meta.get("complete") is False else ""
            cls = [_f(sm["classes"][c]["vs_target"]) + "x" if sm["classes"][c]["vs_target"] else "-" for c in CLASSES]
            lines.append(f"| **{mode}** | {rf.meta.get('acc')} | {sm['shapes']}{partial} | "
                         f"{_f(b.get('cublas', {}).get('geomean'))}x | {_f(t.get('geomean'))}x | {pct} | "
                         f"{_f(b.get('best', {}).get('geomean'))}x | " + " | ".join(cls) + f" | `{path}` |")
        metas.append(rf.meta)
    if metas:
        m = metas[0]
        revs = sorted({str(x.get("git_rev"))[:10] for x in metas})
        lines += ["", f"{m.get('gpu')}, driver {m.get('driver')}, CUDA {m.get('cuda')}, nvcc {m.get('nvcc')}; "
                  f"git {', '.join(revs)}; the command of each run is in its file's `meta.command`."]
    return "\n".join(lines).rstrip() + "\n"


def write_readme(path: Path, block: str) -> None:
    """Replace what stands between the results markers of ``path`` with ``block``."""
    text = path.read_text()
    if text.count(README_BEGIN) != 1 or text.count(README_END) != 1:
        raise SystemExit(f"python -m harness.report: {path} needs one {README_BEGIN} and one {README_END}")
    head, rest = text.split(README_BEGIN)
    _, tail = rest.split(README_END)
    path.write_text(head + README_BEGIN + "\n" + block + README_END + tail)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness.report", description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+", help="bench result files (JSON)")
    ap.add_argument("-o", "--output", help="write Markdown here (default: stdout)")
    ap.add_argument("--label", help="candidate label (default: l2, else the first candidate)")
    ap.add_argument("--calibration", metavar="FILE",
                    help="also write, as JSON, per-call / back-to-back ratios per subject and size class of every "
                         "file timed both ways (the per-call method's fairness check)")
    ap.add_argument("--readme", metavar="FILE", help="also rewrite the results block of this README")
    args = ap.parse_args(argv)
    files = [(p, load(p)) for p in sorted(args.files)]
    if args.readme:
        write_readme(Path(args.readme), readme_block(files, args.label))
    if args.calibration:
        import json

        cal = {Path(p).name: {"meta": {k: rf.meta.get(k) for k in ("gpu", "driver", "date", "git_rev", "command")},
                              "per_call_over_back_to_back": per_call_vs_chained(rf)}
               for p, rf in files if chained_view(rf) is not None}
        Path(args.calibration).write_text(json.dumps(cal, indent=1, sort_keys=True) + "\n")
    text = markdown(files, args.label)
    if args.output:
        Path(args.output).write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
