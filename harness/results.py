"""Bench result files: JSON (the schema other tools read) plus a CSV beside it.

Schema (version 1)::

    {"meta": {"gpu", "driver", "cuda", "nvcc", "date", "git_rev", "mode", "acc", "method", "dtype", ...},
     "rows": [{"m", "n", "k", "times_ms": {label: median ms per call or null},
               "roofline_ms": float or null, "checks": {label: {"ok", "failed", "detail", ...}},
               ...extra keys: "status", "spread", "p90_ms", "device_ms", "clocks", ...}]}

``times_ms`` has one key per baseline (``cublas``, ``cublaslt_heuristic``,
``cublaslt_autotune``, ``torch``) and one per candidate label; ``null`` means absent
or failed (``status`` says which).  Readers must ignore keys they do not know. ``meta.dtype``
(``fp16`` or ``bf16``, the element type of A, B and C) is fp16 in a file that lacks it.
"""

from __future__ import annotations

import csv
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from .errors import HarnessError
from .jsonfile import read_json
from .shapes import MAX_ROLE_CHARS
from .shapes import MAX_DIM

SCHEMA_VERSION = 1
META_REQUIRED = ("gpu", "driver", "cuda", "nvcc", "date", "git_rev", "mode", "acc", "method")
ROW_REQUIRED = ("m", "n", "k", "times_ms", "roofline_ms", "checks")
BASELINE_LABELS = ("cublas", "cublaslt_heuristic", "cublaslt_autotune", "torch")
#: element types a result file may record in ``meta.dtype``; a file without it is fp16 (every
#: file written before bf16 was measured)
DTYPES = ("fp16", "bf16")


class ResultFormatError(HarnessError):
    """A result file that does not follow the schema; the message names the first problem."""


@dataclass
class ResultFile:
    meta: dict[str, Any]
    rows: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"meta": self.meta, "rows": self.rows}

    @property
    def dtype(self) -> str:
        """The element type of A, B and C that the figures are for (fp16 where meta lacks it)."""
        return str(self.meta.get("dtype") or "fp16")

    def labels(self) -> list[str]:
        seen: dict[str, None] = {}
        for r in self.rows:
            for k in r["times_ms"]:
                seen[k] = None
        return list(seen)

    def candidate_labels(self) -> list[str]:
        return [lb for lb in self.labels() if lb not in BASELINE_LABELS]

    def row_for(self, m: int, n: int, k: int) -> dict[str, Any] | None:
        for r in self.rows:
            if (r["m"], r["n"], r["k"]) == (m, n, k):
                return r
        return None


def _num_or_none(x: object) -> bool:
    return x is None or (isinstance(x, (int, float)) and not isinstance(x, bool) and (math.isfinite(x) and x >= 0))


def problems(obj: object) -> list[str]:
    """Every schema violation, as short strings (empty list: valid)."""
    out: list[str] = []
    if not isinstance(obj, dict):
        return ["top level is not an object"]
    meta, rows = obj.get("meta"), obj.get("rows")
    if not isinstance(meta, dict):
        out.append("missing object 'meta'")
    else:
        for k in META_REQUIRED:
            if k not in meta:
                out.append(f"meta lacks '{k}'")
        if meta.get("mode") not in (None, "offline", "server"):
            out.append(f"meta.mode is {meta.get('mode')!r}, not offline/server")
        if meta.get("timing") not in (None, "isolated", "chained", "both", "server"):
            out.append(f"meta.timing is {meta.get('timing')!r}, not isolated/chained/both/server")
        if meta.get("acc") not in (None, "f32", "f16"):
            out.append(f"meta.acc is {meta.get('acc')!r}, not f32/f16")
        if meta.get("dtype") not in (None, *DTYPES):
            out.append(f"meta.dtype is {meta.get('dtype')!r}, not {'/'.join(DTYPES)}")
        elif meta.get("dtype") == "bf16" and meta.get("acc") == "f16":
            out.append("meta.dtype is bf16 with meta.acc f16: bf16 accumulates in f32 only")
    if not isinstance(rows, list):
        out.append("missing list 'rows'")
        return out
    for i, r in enumerate(rows):
        if not isinstance(r, dict):
            out.append(f"rows[{i}] is not an object")
            continue
        for k in ROW_REQUIRED:
            if k not in r:
                out.append(f"rows[{i}] lacks '{k}'")
        for k in ("m", "n", "k"):
            v = r.get(k)
            if k in r and not (isinstance(v, int) and not isinstance(v, bool) and 0 < v <= MAX_DIM):
                out.append(f"rows[{i}].{k} is not an integer between 1 and {MAX_DIM}")
        t = r.get("times_ms")
        if "times_ms" in r:
            if not isinstance(t, dict):
                out.append(f"rows[{i}].times_ms is not an object")
            else:
                for lb, v in t.items():
                    if not _num_or_none(v):
                        out.append(f"rows[{i}].times_ms.{lb} is not a non-negative number or null")
        if "roofline_ms" in r and not _num_or_none(r["roofline_ms"]):
            out.append(f"rows[{i}].roofline_ms is not a non-negative number or null")
        if "checks" in r and not isinstance(r["checks"], dict):
            out.append(f"rows[{i}].checks is not an object")
        if "role" in r and not _is_role(r["role"]):
            out.append(f"rows[{i}].role is not one line of at most {MAX_ROLE_CHARS} printable characters")
    return out


def _is_role(v: object) -> bool:
    """A shape's GEMM role (``llama-3-8b qkv t16``), as :func:`harness.shapes.shape_roles` gives it."""
    return isinstance(v, str) and 0 < len(v) <= MAX_ROLE_CHARS and v.isprintable()


def validate(obj: object, source: str = "result file") -> ResultFile:
    errs = problems(obj)
    if errs:
        more = f" (and {len(errs) - 1} more)" if len(errs) > 1 else ""
        raise ResultFormatError(f"{source}: {errs[0]}{more}")
    assert isinstance(obj, dict)   # problems() reports anything else
    meta = dict(obj["meta"])
    meta.setdefault("dtype", "fp16")
    return ResultFile(meta, list(obj["rows"]))


def load(path: str | Path) -> ResultFile:
    obj = read_json(path, ResultFormatError, "result file")
    return validate(obj, str(path))


def _clean(x: Any) -> Any:
    """JSON has no NaN/Inf: turn them into null."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    return x


def csv_path_for(json_path: str | Path) -> Path:
    p = Path(json_path)
    return p.with_suffix(".csv") if p.suffix == ".json" else Path(str(p) + ".csv")


def result_text(obj: dict[str, Any]) -> str:
    """A result file's text: everything but the rows indented, one compact line per row. A grid
    bench holds a thousand rows of checks and timings; indented, their whitespace alone was a
    third of the file, and a row per line still reads (and diffs) shape by shape."""
    head = {k: v for k, v in obj.items() if k != "rows"}
    rows = obj.get("rows", [])
    if not rows or not head:
        return json.dumps(obj, indent=1, sort_keys=False) + "\n"
    text = json.dumps(head, indent=1, sort_keys=False)
    body = ",\n".join(json.dumps(r, separators=(",", ":"), sort_keys=False) for r in rows)
    return text[:-2] + ',\n "rows": [\n' + body + "\n ]\n}\n"


def save(rf: ResultFile, path: str | Path, *, write_csv: bool = True) -> tuple[Path, Path | None]:
    """Validate and write atomically; returns (json path, csv path or None)."""
    obj = _clean(rf.to_dict())
    obj["meta"].setdefault("schema", SCHEMA_VERSION)
    validate(obj, "result being saved")
    p = Path(path)
    if p.parent and not p.parent.exists():
        p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_text(result_text(obj))
    os.replace(tmp, p)
    cp = None
    if write_csv:
        cp = csv_path_for(p)
        write_csv_file(ResultFile(obj["meta"], obj["rows"]), cp)
    return p, cp


def write_csv_file(rf: ResultFile, path: Path) -> None:
    """One line per shape: m,n,k,[role,]size_class,roofline_ms, then <label>_ms and <label>_status
    (``role`` where the shapes came with roles: a model's, or a shapes file's comments)."""
    from .shapes import Shape

    labels = rf.labels()
    roles = any(r.get("role") for r in rf.rows)   # a model's shapes: what each GEMM is for
    cols = ["m", "n", "k", *(["role"] if roles else []), "size_class", "roofline_ms"]
    for lb in labels:
        cols += [f"{lb}_ms", f"{lb}_status"]
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(cols)
        for r in rf.rows:
            st = r.get("status") or {}
            line = [r["m"], r["n"], r["k"], *([r.get("role", "")] if roles else []),
                    Shape(r["m"], r["n"], r["k"]).size_class, _fmt(r.get("roofline_ms"))]
            for lb in labels:
                line += [_fmt(r["times_ms"].get(lb)), st.get(lb, "")]
            w.writerow(line)
    os.replace(tmp, path)


def _fmt(x: object) -> str:
    return "" if x is None else f"{x:.6g}"


def subset(rf: ResultFile, labels: list[str], *, source: str = "") -> ResultFile:
    """The same measurements restricted to some labels (e.g. the baselines of a kernels run).

    Per-label row entries (times, checks, status, spread, ...) of other labels are dropped;
    meta records where the file came from, so a derived file never passes for a separate run.
    """
    keep = set(labels)
    rows = []
    for r in rf.rows:
        row = {}
        for key, val in r.items():
            if isinstance(val, dict) and key != "clocks" and set(val) & (set(rf.labels())):
                row[key] = {lb: v for lb, v in val.items() if lb in keep or lb not in rf.labels()}
            else:
                row[key] = val
        rows.append(row)
    meta = dict(rf.meta)
    meta["derived_from"] = source or "another result file"
    meta["derived_labels"] = sorted(keep)
    return ResultFile(meta, rows)


MERGE_SAME = ("gpu", "driver", "mode", "acc", "dtype", "method")


def _covers(specs: object, rows: Mapping[tuple[int, int, int], object]) -> bool:
    """Whether ``rows`` has every shape of the shape specs a run recorded (False when the specs
    cannot be read here, e.g. a shapes file of another machine)."""
    from .shapes import resolve_shapes

    try:
        if not (isinstance(specs, str) or (isinstance(specs, list) and all(isinstance(s, str) for s in specs))):
            return False   # not shape specs: cannot tell
        wanted = resolve_shapes(specs) if specs else []
    except Exception:  # noqa: BLE001 - an unreadable spec only means "cannot tell"
        return False
    return bool(wanted) and all((s.m, s.n, s.k) in rows for s in wanted)


def _comparable(rf: ResultFile) -> dict[str, object]:
    """``rf``'s meta with its element type spelled out (a file without one is fp16)."""
    return {**rf.meta, "dtype": rf.dtype}


def merge(files: list[tuple[str, ResultFile]]) -> ResultFile:
    """Rows of several runs of the same method on the same GPU, e.g. a run continued later.

    Refuses files whose GPU, driver, mode, accumulator, element type or method differ (they would not be
    comparable); a shape present twice keeps the later file's row.  meta lists every part
    (file, date, git revision).
    """
    if not files:
        raise ResultFormatError("nothing to merge")
    first = _comparable(files[0][1])
    rows: dict[tuple[int, int, int], dict[str, Any]] = {}
    parts = []
    for name, rf in files:
        for key in MERGE_SAME:
            if _comparable(rf).get(key) != first.get(key):
                raise ResultFormatError(f"cannot merge {name}: its {key} differs from {files[0][0]}'s")
        for r in rf.rows:
            rows[(r["m"], r["n"], r["k"])] = r
        parts.append({"file": name, "date": rf.meta.get("date"), "git_rev": rf.meta.get("git_rev"), "rows": len(rf.rows)})
    meta = dict(files[-1][1].meta)
    # a later run stopped by its time limit does not make the merge partial when earlier runs
    # supplied the rows it did not reach: complete = every shape of its shape list has a row
    if "complete" in meta and not meta["complete"]:
        meta["complete"] = _covers(meta.get("shapes"), rows)
    meta["merged_from"] = parts
    meta["git_rev"] = ",".join(dict.fromkeys(str(p["git_rev"]) for p in parts))
    return ResultFile(meta, [rows[k] for k in sorted(rows)])


def main(argv: list[str] | None = None) -> int:
    """``python -m harness.results subset|merge ...``: derive result files from measured ones."""
    import argparse
    import sys

    ap = argparse.ArgumentParser(prog="python -m harness.results", description=main.__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    sp = sub.add_parser("subset", help="write a result file with only some labels (records derived_from)")
    sp.add_argument("src")
    sp.add_argument("dst")
    sp.add_argument("--labels", default=",".join(BASELINE_LABELS), help="comma separated (default: the four baselines)")
    mp = sub.add_parser("merge", help="join runs of the same method on the same GPU (e.g. a continued run)")
    mp.add_argument("dst")
    mp.add_argument("srcs", nargs="+")
    args = ap.parse_args(argv)
    try:
        if args.cmd == "merge":
            out = merge([(s, load(s)) for s in args.srcs])
        else:
            out = subset(load(args.src), [x for x in args.labels.split(",") if x], source=str(args.src))
        save(out, args.dst)
    except HarnessError as e:
        print(f"harness.results: error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {args.dst} ({len(out.rows)} rows, labels {', '.join(out.labels())})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
