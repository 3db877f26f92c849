"""Fit the cost model's per-family constants to recorded H200 timings and save them.

    python tools/calibrate_costmodel.py tests/fixtures/h200_timings/time_*.json
    python tools/calibrate_costmodel.py sessions/grid-h200 --save-timings percall_f32.json
    python tools/calibrate_costmodel.py tests/fixtures/h200_timings/percall_f32_grid.json \
        --objective top3 --out /tmp/costmodel_top3.json     # a candidate, the committed file untouched

An input is a timing file (the format of tests/fixtures/h200_timings) or a sweep's session folder,
whose pick timed a dozen or more catalog configurations per shape (``timed`` events; per call
unless ``--timing chained``); ``--save-timings FILE`` writes what was read as one timing file.
Inputs are merged by shape: where several inputs timed the same (shape, acc), the later input's
rows replace the earlier ones whole (one request on one GPU, so a shape's times stay comparable),
or with ``--merge union`` every configuration any input timed stays (the last input's time where
several did: runs of one method whose picks chose different sets);
the saved file's ``env`` keeps what every input agrees on, joins (``; ``) the strings that differ,
and lists each input's own under ``rounds`` (each row's ``round`` is its index there, from 1).

``--objective`` picks what the fit minimises (``costmodel.fit``): ``log`` (default), the log2 error
of every predicted time, or ``top3``, the regret of each shape's predicted top 3 and first choice.

Writes ``l2tui/agent/policies/costmodel_h200.json`` (loaded by ``CostModel()``; ``--out FILE``
writes FILE instead, to load with ``Params.from_dict``) and prints how
well the model ranks: mean Spearman correlation per shape, and the geomean regret (measured time
of the predicted-best configuration / measured best; also for the best of the predicted top 3),
overall and per size class (``Shape.size_class``: small, mid, big).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.stats import geomean  # noqa: E402
from l2tui.agent.policies.costmodel import (  # noqa: E402
    CALIBRATED_FILE, DEFAULT_PARAMS, OBJECTIVES, CostModel, fit, load_params, log_error, records_of, spearman)
from l2tui.agent.policies.timings import MODES, from_session  # noqa: E402


def ranking_quality(model: CostModel, records) -> dict:
    by = defaultdict(list)
    for c, s, t in records:
        by[s].append((c, t))
    rho, r1, r3 = [], [], []
    for s, rows in by.items():
        pred = [model.predict(c, s) for c, _ in rows]
        meas = [t for _, t in rows]
        rho.append(spearman(pred, meas))
        order = sorted(range(len(rows)), key=lambda i: pred[i])
        r1.append(meas[order[0]] / min(meas))
        r3.append(min(meas[i] for i in order[:3]) / min(meas))
    return {"spearman": sum(rho) / len(rho), "regret_top1": geomean(r1), "regret_top3": geomean(r3),
            "log2_mse": log_error(model, records), "shapes": len(by), "records": len(records)}


def quality_by_class(model: CostModel, records) -> dict:
    """:func:`ranking_quality` of the records of each size class (small, mid, big) present."""
    by = defaultdict(list)
    for r in records:
        by[r[1].size_class].append(r)
    return {c: ranking_quality(model, by[c]) for c in ("small", "mid", "big") if by[c]}


def unite_docs(docs: list[dict]) -> list[dict]:
    """The inputs with every row kept but the times a later input measured again: where several
    inputs timed one (shape, acc), each configuration (and baseline) keeps the time of the last
    input that timed it, so a shape ranks the union of what every run's pick chose. For runs of
    one method on one kind of GPU whose picks timed different sets (a pick with other constants,
    a catalog with more configurations); each row is tagged with its input's ``round``."""
    if len(docs) == 1:
        return docs
    later: dict = defaultdict(set)     # (shape, acc) -> names a later input timed
    out: list[dict] = []
    for i in range(len(docs) - 1, -1, -1):
        rows = []
        for t in docs[i]["timings"]:
            k = (tuple(t["shape"]), str(t.get("acc")))
            times = {n: v for n, v in t["times_ms"].items() if n not in later[k]}
            if times:
                rows.append({**t, "times_ms": times, "round": i + 1})
        for t in docs[i]["timings"]:
            later[(tuple(t["shape"]), str(t.get("acc")))].update(t["times_ms"])
        out.append({**docs[i], "timings": rows})
    return out[::-1]


def merge_docs(docs: list[dict]) -> list[dict]:
    """The inputs, each left with the rows it keeps (see the module docstring): a (shape, acc) that
    a later input timed keeps only that input's rows (one input's own repeats of a shape, like the
    two back-to-back runs, all stay); with several inputs each row is tagged with its ``round``.
    Each input keeps its own configurations: the same name can mean other knobs in an older file
    (the back-to-back fixtures predate the PDL knob)."""
    if len(docs) == 1:
        return docs

    def key(t):
        return tuple(t["shape"]), str(t.get("acc"))

    owner = {key(t): i for i, d in enumerate(docs) for t in d["timings"]}   # the last input with the shape
    return [{**d, "timings": [{**t, "round": i + 1} for t in d["timings"] if owner[key(t)] == i]}
            for i, d in enumerate(docs)]


def one_document(docs: list[dict]) -> dict:
    """:func:`merge_docs`'s inputs as one timing file: ``env`` as the module docstring says, rows
    sorted by shape, configurations united (a name with other knobs in two inputs is an error)."""
    if len(docs) == 1:
        d = docs[0]
        return {"mode": d.get("mode"), "env": d.get("env"), "configs": dict(d["configs"]), "timings": list(d["timings"])}
    envs = [d.get("env") or {} for d in docs]
    env: dict = {}
    for k in dict.fromkeys(k for e in envs for k in e):
        vals = [e[k] for e in envs if k in e]
        if len(vals) < len(envs):
            continue                      # one input's own (a note): in rounds only
        if all(v == vals[0] for v in vals):
            env[k] = vals[0]
        elif all(isinstance(v, str) for v in vals):
            env[k] = "; ".join(dict.fromkeys(vals))
    env["rounds"] = envs
    configs: dict = {}
    for d in docs:
        for n, c in d["configs"].items():
            if configs.setdefault(n, c) != c:
                raise ValueError(f"configuration {n} has other knobs in another input: not one timing file")
    modes = sorted({str(d.get("mode")) for d in docs})
    rows = [t for d in docs for t in d["timings"]]
    return {"mode": modes[0] if len(modes) == 1 else modes, "env": env, "configs": dict(sorted(configs.items())),
            "timings": sorted(rows, key=lambda t: (tuple(t["shape"]), str(t.get("acc"))))}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("timings", nargs="+", help="timing files in the format of tests/fixtures/h200_timings (config name -> ms "
                                               "per shape), or sweep session folders")
    ap.add_argument("--timing", choices=sorted(MODES), default="isolated",
                    help="which of a session's timings to read (default isolated: per call)")
    ap.add_argument("--save-timings", metavar="FILE", help="also write the timings read as one timing file")
    ap.add_argument("--dry-run", action="store_true", help="print the fit's quality, write nothing")
    ap.add_argument("--objective", choices=OBJECTIVES, default="log",
                    help="what the fit minimises: log (default) the log2 error of every time, top3 the regret of "
                         "each shape's predicted top 3 and first choice")
    ap.add_argument("--merge", choices=("replace", "union"), default="replace",
                    help="where several inputs timed one shape: replace (default) keeps the last input's rows, "
                         "union keeps every configuration any input timed (the last input's time where several did)")
    ap.add_argument("--out", metavar="FILE", help=f"write the fitted constants to FILE instead of {CALIBRATED_FILE.name}")
    args = ap.parse_args(argv)
    paths = args.timings
    try:
        docs = [from_session(p, args.timing) if Path(p).is_dir() else json.loads(Path(p).read_text()) for p in paths]
        kept = unite_docs(docs) if args.merge == "union" else merge_docs(docs)
        records = [r for d in kept for r in records_of(d)]
        merged = one_document(kept) if args.save_timings else None
    except (OSError, ValueError, KeyError) as e:  # one line, not a traceback
        raise SystemExit(f"cannot read the timings: {e}") from None
    if merged is not None:
        Path(args.save_timings).write_text(json.dumps(merged, separators=(",", ":")) + "\n")
        print(f"wrote {args.save_timings}: {len(merged['timings'])} shapes, {len(records)} timings")
    if not records:
        raise SystemExit("no timings in " + ", ".join(paths))
    before = ranking_quality(CostModel(DEFAULT_PARAMS), records)
    current = ranking_quality(CostModel(load_params()), records)
    params = fit(records, DEFAULT_PARAMS, objective=args.objective)
    after = ranking_quality(CostModel(params), records)
    print("defaults:", json.dumps(before))
    print("current: ", json.dumps(current))   # the committed constants, on the same records
    print("fitted:  ", json.dumps(after))
    by_class = {}
    for label, model in (("current", CostModel(load_params())), ("fitted", CostModel(params))):
        by_class[label] = quality_by_class(model, records)
        for c, q in by_class[label].items():
            print(f"  {label:7s} {c:5s}: top-1 {q['regret_top1']:.4f}  top-3 {q['regret_top3']:.4f}  "
                  f"Spearman {q['spearman']:.3f}  ({q['shapes']} shapes, {q['records']} timings)")
    if args.dry_run:
        print("dry run: nothing written")
        return 0
    modes = sorted({str(d.get("mode")) for d in docs})
    out = Path(args.out) if args.out else CALIBRATED_FILE
    extra = {"objective": args.objective} if args.objective != "log" else {}   # the default file as before
    if args.merge != "replace":
        extra["merge"] = args.merge
    out.write_text(json.dumps({**params.to_dict(), "fitted_on": [Path(p).name for p in paths],
                               "timing": modes[0] if len(modes) == 1 else modes, **extra,
                               "quality": {**after, "by_class": by_class["fitted"]}},
                              indent=1) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
