"""Training rows from recorded sessions (``l2tui rl-data``).

Reads ``rewards.jsonl`` (one row per agent step: the messages sent, the
completion, the reward and its parts) and ``events.jsonl`` (which children
became the track's best or were accepted) and writes JSON lines in one of
three formats a training job reads directly:

``trl``
    TRL's conversational prompt/completion format plus the logged reward:
    ``{"prompt": [messages], "completion": [{"role": "assistant", ...}],
    "reward": float, ...metadata columns}``.  Identical (prompt, completion)
    rows are merged, their rewards averaged (timing noise), ``n`` counts them.
``openai-sft``
    ``{"messages": [... , {"role": "assistant", "content": completion}]}`` for
    accepted improvements only: reward > 0 and the child kernel became the
    track's best or was accepted by the user, or a debugger's repair that
    compiled and passed the checks.
``openai-dpo``
    ``{"input": {"messages": [...]}, "preferred_output": [assistant msg],
    "non_preferred_output": [assistant msg]}``: for the same parent kernel and
    the same prompt, a completion with a higher reward is preferred over one
    with a lower reward (gap > ``margin``); at most ``max_pairs`` pairs per
    prompt, largest reward gaps first.  ``pair_by="parent"`` pairs by parent
    kernel alone (see :func:`dpo_rows`).

Filters: ``min_reward`` (rows; for DPO the preferred side), ``policy``,
``role``, ``shapes``.  Every written row is validated against the format's
required fields first (:func:`validate_row`), so a file this writes is one a
trainer accepts.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Sequence

from harness.shapes import Shape
from l2tui import events as ev_schema
from l2tui.config import session_dtype
from l2tui.errors import UserError

if TYPE_CHECKING:
    from harness.evaluator_protocol import Evaluator
    from l2tui.agent.rewards import RewardConfig

FORMATS = ("trl", "openai-sft", "openai-dpo")
OPENAI_ROLES = {"system", "developer", "user", "assistant", "tool"}
HIST_EDGES = (0.0, 0.5, 1.0, 1.5, 2.0)


class RlDataError(UserError):
    """rl-data cannot write what was asked (output exists, nothing matched, ...)."""


class RowError(ValueError):
    """A row that does not follow its format (raised by :func:`validate_row`)."""


# --------------------------------------------------------------------------- validation


def _check_messages(msgs: object, where: str, *, openai: bool) -> None:
    if not isinstance(msgs, list) or not msgs:
        raise RowError(f"{where}: must be a non-empty list of messages")
    for i, m in enumerate(msgs):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
            raise RowError(f"{where}[{i}]: a message needs string 'role' and 'content'")
        if openai and m["role"] not in OPENAI_ROLES:
            raise RowError(f"{where}[{i}]: role {m['role']!r} is not one of {sorted(OPENAI_ROLES)}")
        if openai and set(m) - {"role", "content", "name", "weight"}:
            raise RowError(f"{where}[{i}]: unexpected keys {sorted(set(m) - {'role', 'content', 'name', 'weight'})}")


def validate_row(fmt: str, row: object) -> None:
    """Raise :class:`RowError` unless ``row`` has every field ``fmt`` requires, with the right types."""
    if not isinstance(row, dict):
        raise RowError("a row must be a JSON object")
    if fmt == "trl":
        _check_messages(row.get("prompt"), "prompt", openai=False)
        _check_messages(row.get("completion"), "completion", openai=False)
        if row["completion"][-1]["role"] != "assistant":
            raise RowError("completion: the last message must be the assistant's")
        r = row.get("reward")
        if not isinstance(r, (int, float)) or isinstance(r, bool) or not math.isfinite(r):
            raise RowError("reward: must be a finite number")
    elif fmt == "openai-sft":
        if set(row) != {"messages"}:
            raise RowError(f"an SFT row has exactly one key, 'messages' (got {sorted(row)})")
        _check_messages(row["messages"], "messages", openai=True)
        if row["messages"][-1]["role"] != "assistant":
            raise RowError("messages: the last message must be the assistant's (the training target)")
    elif fmt == "openai-dpo":
        if set(row) != {"input", "preferred_output", "non_preferred_output"}:
            raise RowError(f"a DPO row has keys input, preferred_output, non_preferred_output (got {sorted(row)})")
        if not isinstance(row["input"], dict) or set(row["input"]) - {"messages", "tools", "parallel_tool_calls"}:
            raise RowError("input: must be an object with 'messages'")
        _check_messages(row["input"].get("messages"), "input.messages", openai=True)
        if row["input"]["messages"][-1]["role"] == "assistant":
            raise RowError("input.messages: must end with the prompt, not an assistant answer")
        for key in ("preferred_output", "non_preferred_output"):
            _check_messages(row[key], key, openai=True)
            if len(row[key]) != 1 or row[key][0]["role"] != "assistant":
                raise RowError(f"{key}: must be exactly one assistant message")
        if row["preferred_output"][0]["content"] == row["non_preferred_output"][0]["content"]:
            raise RowError("preferred and non-preferred outputs are identical")
    else:
        raise RowError(f"unknown format {fmt!r}")


# --------------------------------------------------------------------------- reading


@dataclass
class _Row:
    session: str
    data: dict
    improvement: bool

    @property
    def reward(self) -> float:
        return float(self.data["reward"])


def _digest(obj: object) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def _improvements(records: Iterable[ev_schema.Event]) -> set[tuple[str, str]]:
    """(track, sha) of every child that became a track's best, or that the user accepted (and did not reject)."""
    best: set[tuple[str, str]] = set()
    accepted: dict[str, str | None] = {}
    for ev in records:
        if isinstance(ev, ev_schema.Best) and ev.track is not None and ev.sha is not None:
            best.add((ev.track, ev.sha))
        elif isinstance(ev, ev_schema.Decision) and ev.track is not None and ev.sha is not None:
            if ev.action == "accept":
                accepted[ev.track] = ev.sha
            elif ev.action == "reject" and accepted.get(ev.track) == ev.sha:
                accepted[ev.track] = None
    return best | {(t, s) for t, s in accepted.items() if s}


def _repaired(r: dict) -> bool:
    """A debugger step whose fix compiled and passed the checks: its job is to repair a failing
    kernel, not to beat the best, so a successful repair is a completion worth imitating even
    when the repaired kernel is slower than the track's best."""
    return r.get("role") == "debugger" and r.get("kind") == "ok"


def _clean_messages(msgs: object) -> list[dict] | None:
    if not isinstance(msgs, list):
        return None
    out = []
    for m in msgs:
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            return None
        content = m.get("content")
        if not isinstance(content, str):
            return None
        out.append({"role": m["role"], "content": content})
    return out or None


@dataclass
class Stats:
    fmt: str
    sessions: int = 0
    read: int = 0
    filtered: int = 0
    invalid: int = 0
    duplicates: int = 0
    rows: int = 0
    rewards: list[float] = field(default_factory=list)

    def histogram(self) -> list[tuple[str, int]]:
        labels = [f"<{HIST_EDGES[0]:g}"] + [f"{a:g}-{b:g}" for a, b in zip(HIST_EDGES, HIST_EDGES[1:])] + [f">={HIST_EDGES[-1]:g}"]
        counts = [0] * len(labels)
        for r in self.rewards:
            i = sum(1 for e in HIST_EDGES if r >= e)
            counts[i] += 1
        return list(zip(labels, counts))

    def line(self, out: Path) -> str:
        what = "pairs" if self.fmt == "openai-dpo" else "rows"
        hist = " ".join(f"[{lab}]:{n}" for lab, n in self.histogram())
        subject = "preferred reward" if self.fmt == "openai-dpo" else "reward"
        return (f"rl-data: wrote {self.rows} {what} ({self.fmt}) to {out} from {self.sessions} session(s); "
                f"read {self.read}, filtered {self.filtered}, invalid {self.invalid}, duplicates {self.duplicates}; "
                f"{subject} histogram {hist}")


def _read(sessions: Sequence[str | Path], stats: Stats, *, min_reward: float | None, policy: str | None,
          role: str | None, shapes: set[Shape] | None, apply_min: bool) -> list[_Row]:
    from l2tui.export.sessionio import open_session

    rows: list[_Row] = []
    for sp in sessions:
        view = open_session(sp)
        stats.sessions += 1
        imp = _improvements(view.records)
        sess_dtype = session_dtype(view.config)   # the element type of the session's kernels (fp16 if unrecorded)
        for n, r in enumerate(view.rewards, 1):
            stats.read += 1
            _check_shas(r, view.path, n)
            msgs = _clean_messages(r.get("messages"))
            comp = r.get("completion")
            rew = r.get("reward")
            if msgs is None or not isinstance(comp, str) or not comp.strip() or not isinstance(rew, (int, float)) \
                    or isinstance(rew, bool) or not math.isfinite(rew):
                stats.invalid += 1
                continue
            shape = r.get("shape")
            try:
                shp = Shape(*(int(x) for x in shape)) if isinstance(shape, list) and len(shape) == 3 else None
            except (TypeError, ValueError):
                shp = None
            if (policy and r.get("policy") != policy) or (role and r.get("role") != role) \
                    or (shapes is not None and shp not in shapes) \
                    or (apply_min and min_reward is not None and rew < min_reward):
                stats.filtered += 1
                continue
            data = dict(r, messages=msgs, dtype=r.get("dtype") if r.get("dtype") in ("fp16", "bf16") else sess_dtype)
            key = (r.get("track"), r.get("child_sha"))
            improvement = (all(isinstance(x, str) for x in key) and key in imp) or _repaired(r)
            rows.append(_Row(str(view.path), data, improvement))
    return rows


_SHA_RE = re.compile(r"[0-9a-f]{64}")
_SHA_FIELDS = ("child_sha", "parent_sha")


def _check_shas(row: dict, session: Path, n: int) -> None:
    """A row's kernel ids are sha256 hex strings or absent: they become columns a trainer joins
    on and ``live_reward`` opens files by, so anything else (a path) refuses the session."""
    for k in _SHA_FIELDS:
        v = row.get(k)
        if v is not None and not (isinstance(v, str) and _SHA_RE.fullmatch(v)):
            raise RlDataError(f"{session}/rewards.jsonl row {n}: {k} is not a kernel id (64 hex characters); "
                              "the session file is damaged")


# --------------------------------------------------------------------------- formats


def _assistant(text: str) -> list[dict]:
    return [{"role": "assistant", "content": text}]


_META = ("track", "shape", "acc", "dtype", "step", "role", "policy", "model", "kind", "parent_sha", "child_sha",
         "baseline", "speedup", "origin", "plan", "seed_lines")


def trl_rows(rows: list[_Row], stats: Stats) -> list[dict]:
    merged: dict[str, tuple[dict, list[float]]] = {}
    for r in rows:
        key = _digest([r.data["messages"], r.data["completion"]])
        if key in merged:
            merged[key][1].append(r.reward)
            stats.duplicates += 1
            continue
        out = {"prompt": r.data["messages"], "completion": _assistant(r.data["completion"]), "reward": r.reward}
        for k in _META:
            out["agent_role" if k == "role" else k] = r.data.get(k)
        out["improvement"] = r.improvement
        out["session"] = r.session
        # TRL hands every column except prompt/completion to reward functions: keep the logged text reachable
        out["logged_completion"] = r.data["completion"]
        merged[key] = (out, [r.reward])
    result = []
    for out, rewards in merged.values():
        out["reward"] = sum(rewards) / len(rewards)
        out["n"] = len(rewards)
        result.append(out)
    return result


def sft_rows(rows: list[_Row], stats: Stats) -> list[dict]:
    seen: set[str] = set()
    out = []
    for r in rows:
        if not (r.reward > 0 and r.improvement):
            stats.filtered += 1
            continue
        msgs = r.data["messages"] + _assistant(r.data["completion"])
        key = _digest(msgs)
        if key in seen:
            stats.duplicates += 1
            continue
        seen.add(key)
        out.append({"messages": msgs})
        stats.rewards.append(r.reward)
    return out


PAIR_BY = ("parent+prompt", "parent")


def dpo_rows(rows: list[_Row], stats: Stats, *, min_reward: float | None, margin: float,
             max_pairs: int, pair_by: str = "parent+prompt") -> list[dict]:
    """Preference pairs.  ``pair_by="parent"`` also pairs completions for the same parent kernel
    (same track and role) whose prompts differ (the loop's prompts grow with the history); the
    pair's input is then the preferred completion's prompt."""
    groups: dict[str, dict[str, list]] = {}
    prompts: dict[str, dict[str, list[dict]]] = {}
    for r in rows:
        msgs = r.data["messages"]
        if msgs[-1]["role"] == "assistant":
            stats.invalid += 1
            continue
        if pair_by == "parent" and r.data.get("parent_sha"):
            gkey = _digest([r.data.get("track"), r.data.get("role"), r.data.get("parent_sha")])
        else:
            gkey = _digest([r.data.get("parent_sha"), msgs])
        comps = groups.setdefault(gkey, {})
        comp = r.data["completion"]
        prompts.setdefault(gkey, {}).setdefault(comp, msgs)
        if comp in comps:
            stats.duplicates += 1
            comps[comp].append(r.reward)
        else:
            comps[comp] = [r.reward]
    out = []
    seen: set[str] = set()
    for gkey, comps in groups.items():
        scored = sorted(((sum(v) / len(v), c) for c, v in comps.items()), key=lambda x: -x[0])
        pairs = []
        for i, (ra, ca) in enumerate(scored):
            if min_reward is not None and ra < min_reward:
                continue
            for rb, cb in scored[i + 1:]:
                if ra - rb > margin:
                    pairs.append((ra - rb, ra, ca, cb))
        pairs.sort(key=lambda p: -p[0])
        for _gap, ra, ca, cb in pairs[:max_pairs]:
            key = _digest([gkey, ca, cb])
            if key in seen:
                stats.duplicates += 1
                continue
            seen.add(key)
            out.append({"input": {"messages": prompts[gkey][ca]}, "preferred_output": _assistant(ca),
                        "non_preferred_output": _assistant(cb)})
            stats.rewards.append(ra)
    return out


# --------------------------------------------------------------------------- writing


def check_out(out: Path, sessions: Sequence[str | Path]) -> None:
    """Refuse an ``--out`` inside an input session (also with ``--force``) or under a file.

    A session folder holds the records everything else is rebuilt from; a training file
    written over ``events.jsonl`` would leave nothing to resume or replay.
    """
    from l2tui.export.values import ExportValueError, check_out_path, inside

    try:
        check_out_path(out)
    except ExportValueError as e:
        raise RlDataError(str(e)) from None
    for sp in sessions:
        if inside(out, Path(sp)):
            raise RlDataError(f"--out {out} is inside the session {sp}; write the rows somewhere else "
                              "(--force never replaces a session's files)")


def write_jsonl(path: Path, rows: list[dict], *, force: bool) -> None:
    """Write rows atomically (temp file + rename): a failed run never leaves half a file."""
    if path.exists() and not force:
        raise RlDataError(f"{path} exists; pass --force to overwrite it or pick another --out")
    if path.is_dir():
        raise RlDataError(f"{path} is a folder; --out takes a file name")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def rl_data(
    sessions: Sequence[str | Path],
    fmt: str,
    out: str | Path,
    *,
    min_reward: float | None = None,
    policy: str | None = None,
    role: str | None = None,
    shapes: Iterable[Shape] | None = None,
    margin: float = 0.0,
    max_pairs: int = 8,
    pair_by: str = "parent+prompt",
    force: bool = False,
) -> Stats:
    """Read the sessions, build ``fmt`` rows, validate them, write ``out``; return the stats."""
    if fmt not in FORMATS:
        raise RlDataError(f"unknown format {fmt!r}: use one of {', '.join(FORMATS)}")
    if pair_by not in PAIR_BY:
        raise RlDataError(f"unknown --pair-by {pair_by!r}: use {' or '.join(PAIR_BY)}")
    if not sessions:
        raise RlDataError("no session given: pass one or more session folders")
    out_p = Path(out).expanduser()
    check_out(out_p, sessions)
    if out_p.exists() and not force:
        raise RlDataError(f"{out_p} exists; pass --force to overwrite it or pick another --out")
    stats = Stats(fmt)
    want = set(shapes) if shapes is not None else None
    rows = _read(sessions, stats, min_reward=min_reward, policy=policy, role=role, shapes=want,
                 apply_min=fmt != "openai-dpo")
    if fmt == "trl":
        built = trl_rows(rows, stats)
        stats.rewards = [r["reward"] for r in built]
    elif fmt == "openai-sft":
        built = sft_rows(rows, stats)
    else:
        built = dpo_rows(rows, stats, min_reward=min_reward, margin=margin, max_pairs=max(1, max_pairs),
                         pair_by=pair_by)
    for i, row in enumerate(built):
        try:
            validate_row(fmt, row)
        except RowError as e:  # a bug here, not the user's: say which row
            raise RlDataError(f"row {i} does not follow {fmt}: {e}") from None
    if not built:
        hint = {"openai-sft": "no accepted improvements (reward > 0 and became best/accepted) or debugger repairs",
                "openai-dpo": "no two completions with different rewards for the same parent and prompt",
                "trl": "no rows with messages and a completion"}[fmt]
        raise RlDataError(f"nothing to write: {hint} among {stats.read} row(s) read ({stats.invalid} without "
                          f"messages/completion/reward, {stats.filtered} filtered out); relax the filters or pick "
                          "sessions recorded by the llm policy")
    write_jsonl(out_p, built, force=force)
    stats.rows = len(built)
    return stats


# --------------------------------------------------------------------------- GRPO reward functions


def _text(completion: object) -> str:
    """A TRL completion (conversational list of messages, or plain text) as text."""
    if isinstance(completion, list) and completion and isinstance(completion[-1], dict):
        return str(completion[-1].get("content", ""))
    return str(completion)


def logged_reward(prompts: object = None, completions: Sequence[object] = (), reward: Sequence[float] = (),
                  logged_completion: Sequence[str] = (), **_: object) -> list[float | None]:
    """GRPO reward function: the logged reward where the generated completion *is* the logged one, else None.

    TRL treats None as "no reward from this function" for that sample, so pair it
    with :func:`live_reward` (or use it alone for replay-style / offline runs).
    """
    return [float(r) if _text(c).strip() == str(lc).strip() else None
            for c, r, lc in zip(completions, reward, logged_completion)]


def live_reward(evaluator: Evaluator, *, reward_config: RewardConfig | None = None) -> Callable[..., list[float]]:
    """A GRPO reward function that scores *new* completions the way the agent loop does.

    For each generated completion: take the parent kernel (``parent_sha`` from
    ``session``), apply the completion as a patch (or whole-file rewrite), build,
    check and time it with ``evaluator`` (``harness.evaluate.Evaluator`` on a GPU,
    or a recorded one), and return the reward of ``l2tui.agent.step.score``, the one
    the loop and the sweep write (speedup over the row's baseline minus error and
    length penalties, the length against the track's seed, ``seed_lines``; fixed
    negative rewards for failures).  Reads the columns ``shape``, ``acc``,
    ``parent_sha``, ``session``, ``baseline``, ``seed_lines`` that ``--format trl``
    writes (rows written before ``seed_lines`` existed measure against the parent).
    """
    from harness.shapes import Shape as _Shape
    from l2tui.agent.patches import apply_patch
    from l2tui.agent.rewards import RewardConfig, code_lines
    from l2tui.agent.step import score, speedup
    from l2tui.session import Session

    cfg = reward_config or RewardConfig()
    parents: dict[tuple[str, str], str] = {}

    def parent_source(session: str, sha: str | None) -> str:
        if not sha:
            return ""
        key = (session, sha)
        if key not in parents:
            parents[key] = Session.open(session).get_kernel(sha)
        return parents[key]

    def reward_fn(prompts: object = None, completions: Sequence[object] = (), shape: Sequence[Sequence[int]] = (),
                  acc: Sequence[str] = (), parent_sha: Sequence[str | None] = (), session: Sequence[str] = (),
                  baseline: Sequence[str | None] = (), seed_lines: Sequence[int | None] | None = None,
                  **_: object) -> list[float]:
        out: list[float] = []
        seeds = seed_lines if seed_lines is not None else [None] * len(completions)
        for c, shp, a, psha, sess, base, sl in zip(completions, shape, acc, parent_sha, session, baseline, seeds):
            parent = parent_source(sess, psha)
            res = apply_patch(parent, _text(c), allow_rewrite=True)
            if not res.ok:
                out.append(score("patch_failed", speedup=None, check=None, source="", seed_lines=0, cfg=cfg)[0])
                continue
            ev = evaluator.evaluate(res.source, _Shape(*shp), a or "f32")
            status = str(getattr(ev, "status", "crashed"))
            sp = speedup(getattr(ev, "times_ms", None), base or "cublas") if status == "ok" else None
            ref = sl if isinstance(sl, int) and not isinstance(sl, bool) and sl > 0 else code_lines(parent)
            out.append(score(status, speedup=sp, check=getattr(ev, "check", None), source=res.source,
                             seed_lines=ref, cfg=cfg)[0])
        return out

    reward_fn.__name__ = "l2tui_live_reward"
    return reward_fn
