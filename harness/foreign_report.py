"""Another system's kernels beside ours: what that system claims next to what was measured.

    python -m harness foreign-report cuda-l2-sample100.json --claims ../CUDA-L2/eval_results/cuda_l2_h100_F32F16F16F32_speedup_offline.csv \\
        --theirs cuda_l2 --ours h100 --out cuda-l2-report.md

Why: a published system's speedups were measured its way (host-timed, on its own card, its
kernels given B column-major). A bench of its kernels through the harness (``--abi cuda-l2``, every
check, per call and back to back, in one run beside ours and the libraries) says what they are on
this card; this report puts the system's own claimed per-shape speedup over cuBLASLt-autotune (its
CSV: a ``mnk`` column ``M_N_K`` and one column of speedups) next to that measurement and to ours,
over the shapes the bench ran: the claim's geomean, theirs and ours measured in both modes, which
of theirs failed a check and why, and on how many of the shapes theirs passed ours is ahead.

The CSV comes from the user's checkout of that system at run time and is read as data: at most
:data:`MAX_CLAIMS_BYTES`, a row whose shape or speedup does not parse is counted and skipped.
"""

from __future__ import annotations

import argparse
import csv
import io
import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from .errors import HarnessError
from .report import chained_view
from .results import ResultFile, load
from .shapes import Shape
from .stats import geomean, speedup

#: the claims file is read only up to this size (the published CSV of 1,000 shapes is ~70 KB)
MAX_CLAIMS_BYTES = 4 << 20
#: the CSV column of speedups over cuBLASLt-autotune (the faster of its TN and NN forms)
CLAIM_COLUMN = "cuBLASLt-auto-tuning-max"
BASELINE = "cublaslt_autotune"


@dataclass(frozen=True)
class Claims:
    """Per-shape claimed speedups, and how many rows of the file were not usable."""

    speedups: dict[Shape, float]
    skipped: int = 0


def read_claims(path: Path, column: str = CLAIM_COLUMN) -> Claims:
    """The claimed speedup per shape from a CSV with a ``mnk`` column (``M_N_K``) and ``column``."""
    try:
        if path.stat().st_size > MAX_CLAIMS_BYTES:
            raise HarnessError(f"{path}: over {MAX_CLAIMS_BYTES >> 20} MB: not a claims CSV")
        text = path.read_text(errors="replace")
    except OSError as e:
        raise HarnessError(f"{path}: {e.strerror or e}") from None
    reader = csv.DictReader(io.StringIO(text))
    if not reader.fieldnames or "mnk" not in reader.fieldnames or column not in reader.fieldnames:
        raise HarnessError(f"{path}: no 'mnk' and {column!r} columns: not a claims CSV")
    out: dict[Shape, float] = {}
    skipped = 0
    for row in reader:
        parsed = _claim(row.get("mnk"), row.get(column))
        if parsed is None:
            skipped += 1
        else:
            out[parsed[0]] = parsed[1]
    return Claims(out, skipped)


def _claim(mnk: str | None, value: str | None) -> tuple[Shape, float] | None:
    """One row's shape and positive finite speedup, or None."""
    try:
        m, n, k = (int(x) for x in (mnk or "").strip().split("_"))
        sp = float(value or "")
    except ValueError:
        return None
    if min(m, n, k) <= 0 or not math.isfinite(sp) or sp <= 0:
        return None
    return Shape(m, n, k), sp


@dataclass
class ShapeLine:
    """One shape of the report: the claim, and each side's speedup over the baseline per call and
    back to back (None where that side has no time: it failed a check, or was refused)."""

    shape: Shape
    claim: float | None
    theirs: tuple[float | None, float | None]
    ours: tuple[float | None, float | None]
    their_status: str


@dataclass
class Comparison:
    theirs: str
    ours: str
    lines: list[ShapeLine] = field(default_factory=list)

    def passed(self) -> list[ShapeLine]:
        """The shapes where their kernel passed every check (it has a per-call time)."""
        return [ln for ln in self.lines if ln.theirs[0] is not None]

    def failures(self) -> Counter[str]:
        return Counter(ln.their_status for ln in self.lines if ln.theirs[0] is None)

    def ours_ahead(self) -> tuple[int, int]:
        """Shapes where ours is faster per call, of the shapes theirs passed and ours timed."""
        both = [ln for ln in self.passed() if ln.ours[0] is not None]
        return sum(1 for ln in both if (ln.ours[0] or 0) > (ln.theirs[0] or 0)), len(both)


def compare(rf: ResultFile, claims: Claims, theirs: str, ours: str) -> Comparison:
    """Each bench row as a :class:`ShapeLine` (the bench's shapes; the claims of others are not used)."""
    labels = rf.labels()
    for lb in (theirs, ours, BASELINE):
        if lb not in labels:
            raise HarnessError(f"the result file has no {lb!r} times (its labels: {', '.join(labels)})")
    chained = chained_view(rf)
    back = {(r["m"], r["n"], r["k"]): r for r in chained.rows} if chained else {}
    out = Comparison(theirs, ours)
    for r in rf.rows:
        shape = Shape(r["m"], r["n"], r["k"])
        b2b = back.get((r["m"], r["n"], r["k"]), {}).get("times_ms")
        out.lines.append(ShapeLine(shape, claims.speedups.get(shape),
                                   (_over(r["times_ms"], theirs), _over(b2b, theirs)),
                                   (_over(r["times_ms"], ours), _over(b2b, ours)),
                                   str((r.get("status") or {}).get(theirs, "absent"))))
    return out


def _over(times: object, label: str) -> float | None:
    """``label``'s speedup over the baseline in one row's times; None unless both are numbers."""
    if not isinstance(times, dict):
        return None
    base, t = times.get(BASELINE), times.get(label)
    if isinstance(base, bool) or isinstance(t, bool) or not isinstance(base, (int, float)) \
            or not isinstance(t, (int, float)):
        return None
    return speedup(float(base), float(t))


def _g(xs: list[float | None]) -> str:
    g = geomean([x for x in xs if x is not None])
    return f"{g:.3f}x" if g else "-"


def markdown(comp: Comparison, claims: Claims, gpu: str) -> str:
    """The report: a summary table, then what failed, then one row a shape."""
    passed = comp.passed()
    ahead, of = comp.ours_ahead()
    lines = [f"## {comp.theirs} beside {comp.ours} on {gpu}, over cuBLASLt-autotune", "",
             f"{len(comp.lines)} shapes benched; {comp.theirs} passed every check on {len(passed)}. "
             f"{comp.ours} is faster per call on {ahead} of the {of} shapes {comp.theirs} passed"
             + (f" ({100 * ahead / of:.0f} %)." if of else "."), "",
             "| | shapes | claimed (their CSV) | per call | back to back |", "|---|---:|---:|---:|---:|"]
    for name, rows in ((f"{comp.theirs}, every shape benched", comp.lines), (f"{comp.theirs}, where it passed", passed)):
        lines.append(f"| {name} | {len(rows)} | {_g([ln.claim for ln in rows])} | {_g([ln.theirs[0] for ln in rows])} "
                     f"| {_g([ln.theirs[1] for ln in rows])} |")
    for name, rows in ((f"{comp.ours}, every shape benched", comp.lines), (f"{comp.ours}, where {comp.theirs} passed", passed)):
        lines.append(f"| {name} | {len(rows)} | | {_g([ln.ours[0] for ln in rows])} | {_g([ln.ours[1] for ln in rows])} |")
    fails = comp.failures()
    lines += ["", f"{comp.theirs} without a time: " + (", ".join(f"{n} {st}" for st, n in fails.most_common()) or "none")
              + (f"; {claims.skipped} rows of the claims file did not parse" if claims.skipped else ""), "",
              f"| shape | claimed | {comp.theirs} per call | {comp.ours} per call | {comp.theirs} back to back "
              f"| {comp.ours} back to back | faster per call |", "|---|---:|---:|---:|---:|---:|---|"]
    for ln in comp.lines:
        cells = [ln.claim, ln.theirs[0], ln.ours[0], ln.theirs[1], ln.ours[1]]
        lines.append(f"| {ln.shape} | " + " | ".join(f"{x:.3f}" if x is not None else "-" for x in cells)
                     + f" | {_winner(ln, comp)} |")
    return "\n".join(lines) + "\n"


def _winner(ln: ShapeLine, comp: Comparison) -> str:
    t, o = ln.theirs[0], ln.ours[0]
    if t is None:
        return f"{comp.ours} ({comp.theirs}: {ln.their_status})" if o is not None else "-"
    if o is None:
        return comp.theirs
    return comp.ours if o > t else comp.theirs


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("bench", help="a result file of l2tui bench holding both kernel sets and cublaslt_autotune")
    p.add_argument("--claims", required=True, metavar="CSV", help="the other system's speedups per shape (its CSV)")
    p.add_argument("--column", default=CLAIM_COLUMN, help=f"the CSV's column of speedups (default {CLAIM_COLUMN})")
    p.add_argument("--theirs", default="cuda_l2", help="their kernels' label in the bench (default cuda_l2)")
    p.add_argument("--ours", default="l2", help="our kernels' label in the bench (default l2)")
    p.add_argument("--out", metavar="FILE", help="write the report here (default: print it)")


def main(args: argparse.Namespace) -> int:
    rf = load(args.bench)
    claims = read_claims(Path(args.claims), args.column)
    text = markdown(compare(rf, claims, args.theirs, args.ours), claims, str(rf.meta.get("gpu") or "this GPU"))
    if args.out:
        Path(args.out).write_text(text)
    else:
        print(text, end="")
    return 0
