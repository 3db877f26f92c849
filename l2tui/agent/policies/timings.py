"""Catalog timings read back from a sweep's session, in the cost model's fixture format.

Why: the pick times a dozen or more catalog configurations on every shape it sweeps, in one
request with the same checker and timer, and logs each time as a ``timed`` event. Those are the
measurements the cost model (``costmodel.py``) should be fitted on: the real GPU, the timing
mode the product ranks by (per call by default), thousands of (configuration, shape) pairs.
This module turns a session folder into the format of ``tests/fixtures/h200_timings``
(``{"mode", "env", "configs": {name: {family, knobs, acc}}, "timings": [{"shape", "acc",
"times_ms": {name: ms, baseline: ms}}]}``), which ``costmodel.load_timings`` and
``tools/calibrate_costmodel.py`` read.

It reads ``events.jsonl`` and ``kernels/`` line by line (not ``Session.open``, which would load
the whole ``rewards.jsonl`` of a grid sweep: hundreds of megabytes of RL rows), and keeps only
sources that are catalog renders (``Config.from_source``): a hand-written or patched kernel has
no configuration to fit.
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

from harness.families import Config

from ... import events as ev_schema
from ...config import tomllib

#: the ``timing`` field of a ``timed`` event, by what the fixture's ``mode`` calls it
MODES = {"isolated": "per call", "chained": "back to back"}


def from_session(folder: str | Path, timing: str = "isolated") -> dict[str, Any]:
    """The fixture document of every ``timed`` event of ``timing`` in the session at ``folder``
    (see the module docstring). Raises ``ValueError`` with one line for a folder that is not a
    session."""
    root = Path(folder)
    events = root / "events.jsonl"
    if not events.is_file():
        raise ValueError(f"{root}: no events.jsonl (not a session folder)")
    env: dict[str, Any] = {}
    try:
        meta = tomllib.loads((root / "session.toml").read_text())
        gpu = meta.get("gpu") or {}
        env = {k: gpu[k] for k in ("uuid", "driver", "cuda_runtime", "arch") if k in gpu}
        if gpu.get("name"):
            env["gpu"] = gpu["name"]
        if (meta.get("versions") or {}).get("git_rev"):
            env["git_rev"] = meta["versions"]["git_rev"]
    except (OSError, tomllib.TOMLDecodeError):
        pass
    shapes: dict[str, tuple[list[int], str]] = {}
    configs: dict[str, Config | None] = {}
    rows: dict[tuple[tuple[int, ...], str], dict[str, float]] = {}
    first: float | None = None
    with open(events, encoding="utf-8") as f:
        for line in f:
            try:
                ev = json.loads(line)
            except json.JSONDecodeError:
                continue   # a torn last line
            kind = ev.get("type")
            if first is None and isinstance(ev.get("time"), (int, float)):
                first = float(ev["time"])
            if kind == ev_schema.TRACK_ADDED:
                shapes[ev["track"]] = (list(ev["shape"]), ev.get("acc", "f32"))
            elif kind == "timed" and ev.get("timing") == timing and ev.get("track") in shapes:
                sha = ev.get("sha") or ""
                if sha not in configs:
                    configs[sha] = _config_of(root / "kernels" / f"{sha}.cu")
                cfg = configs[sha]
                times = ev.get("times_ms") or {}
                if cfg is None or not times.get("candidate"):
                    continue
                shape, acc = shapes[ev["track"]]
                row = rows.setdefault((tuple(shape), acc), {})
                row[cfg.name] = float(times["candidate"])
                for name, ms in times.items():
                    if name != "candidate" and ms:
                        row.setdefault(name, float(ms))
    named = {c.name: c for c in configs.values() if c is not None}
    if first is not None:
        env["date"] = datetime.datetime.fromtimestamp(first, datetime.timezone.utc).isoformat(timespec="seconds")
    return {
        "mode": MODES.get(timing, timing),
        "env": {**env, "source": f"session {root.name}"},
        "configs": {n: {"family": c.family, "knobs": c.knob_dict, "acc": c.acc} for n, c in sorted(named.items())},
        "timings": [{"shape": list(s), "acc": acc, "times_ms": dict(sorted(t.items()))}
                    for (s, acc), t in sorted(rows.items())],
    }


def _config_of(path: Path) -> Config | None:
    try:
        return Config.from_source(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
