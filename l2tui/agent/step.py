"""A candidate's outcome to its record: the speedup, the reward and the reward row, one definition.

The agent loop (``loop.py``), the sweep (``sweep.py``) and the GRPO reward function of
``l2tui.rldata`` all score a candidate here, so a row of ``rewards.jsonl`` means the same
thing whichever of them wrote it:

* the speedup is :func:`speedup` (the baseline's time over the candidate's, from one
  evaluation's ``times_ms``);
* the reward is :func:`score` with the session's ``[rewards]`` (``RewardConfig``) and the length
  penalty measured against the track's seed (the kernel the track's refinement starts from; a
  seed itself pays none);
* the row is :func:`reward_row` and goes out with its ``reward`` event through
  :func:`record_reward`: the same keys (``origin`` and ``plan`` included) from every writer.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, cast

from harness.channel import FrameError

if TYPE_CHECKING:
    from harness.channel import Json
from harness.evaluate import Evaluation, evaluation_from_data
from harness.stats import speedup as stats_speedup

from .. import events as ev_schema
from .policies.base import Proposal
from .recorded import NOT_RECORDED
from .rewards import RewardConfig, code_lines, failure_reward, reference_error, success_reward

#: the keys of every ``rewards.jsonl`` row (``seq`` and ``time`` are added by the session)
ROW_KEYS = ("track", "shape", "acc", "dtype", "step", "role", "policy", "model", "messages", "completion", "reward",
            "parts", "kind", "parent_sha", "child_sha", "usage", "baseline", "speedup", "origin", "plan",
            "seed_lines")


class RewardSink(Protocol):
    """Where a reward goes: a ``Session`` (or the sweep's ``NullSession``)."""

    def record(self, event: ev_schema.Event) -> dict: ...

    def append_reward(self, row: dict) -> dict: ...


def _ms(value: object) -> float | None:
    """A time from ``times_ms`` when it is a finite number (a hostile file may hold anything)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def speedup(times: Mapping[str, object] | None, baseline: str, label: str = "candidate") -> float | None:
    """``times[baseline] / times[label]`` (``harness.stats.speedup``, the one ratio): None when
    either is missing, not a finite number or not positive."""
    if not times:
        return None
    v = stats_speedup(_ms(times.get(baseline)), _ms(times.get(label)))
    return v if v is not None and math.isfinite(v) else None


def evaluation_of(raw: Evaluation | Mapping[str, object], where: str = "evaluation") -> Evaluation:
    """The one door to an :class:`Evaluation` in l2tui: one as is, or its dict form (a recording,
    a Ray actor's answer) read as untrusted data against ``harness.evaluate.EVALUATION_SCHEMA``;
    a dict that does not fit is a ``crashed`` evaluation whose message names the field."""
    if isinstance(raw, Evaluation):
        return raw
    try:
        # evaluation_from_data checks every field against the schema: any value may come in
        return evaluation_from_data(cast("Json", dict(raw)), where)
    except (FrameError, TypeError, ValueError) as e:
        return Evaluation("crashed", None, message=one_line(f"a malformed {where} came back: {e}", 300))


def one_line(s: object, limit: int = 400) -> str:
    """``s`` on one line of at most ``limit`` characters (event and row fields are shown as lines)."""
    text = " ".join(str(s).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def score(kind: str, *, speedup: float | None, check: Mapping[str, object] | None, source: str,
          seed_lines: int, cfg: RewardConfig, message: str = "") -> tuple[float, dict]:
    """The reward of one outcome and its parts.

    ``kind`` ``not_recorded`` (a replay without this kernel's GPU result): 0, no judgement;
    "ok": speedup minus the error and length penalties, the length measured against
    ``seed_lines`` (0: no seed known yet, so ``source`` is the seed and pays nothing); any
    other kind: its fixed reward from ``cfg``, with ``message`` as the part ``reason``."""
    if kind == NOT_RECORDED:
        return 0.0, {"not_recorded": True}
    if kind != "ok":
        r, parts = failure_reward(kind, cfg)
        parts["reason"] = one_line(message or kind, 300)
        return r, parts
    chk = dict(check or {})
    rel = chk.get("rel_err")
    lines = code_lines(source)
    return success_reward(speedup=speedup, rel_err=float(rel) if isinstance(rel, (int, float)) else None,
                          ref_err=reference_error(chk), lines=lines, seed_lines=seed_lines or lines, cfg=cfg)


@dataclass(frozen=True)
class StepInfo:
    """Who and where a reward is for: the track and the policy that proposed the candidate."""

    track: str
    shape: tuple[int, int, int]
    acc: str
    baseline: str
    policy: str
    model: str | None = None
    dtype: str = "fp16"   # element type of the track's kernels (rl-data rows carry it)


def _usage(prop: Proposal) -> dict:
    """Token counts of the proposal (``estimated`` when the client counted, not the server)."""
    raw = prop.usage or {}
    usage: dict = {"prompt_tokens": int(raw.get("prompt_tokens", 0) or 0),
                   "completion_tokens": int(raw.get("completion_tokens", 0) or 0)}
    if raw.get("estimated"):
        usage["estimated"] = True
    return usage


def reward_row(info: StepInfo, step: int, prop: Proposal, *, parent: str | None, child: str | None, kind: str,
               reward: float, parts: dict, speedup: float | None, seed_lines: int) -> dict:
    """One ``rewards.jsonl`` row (:data:`ROW_KEYS`), the same for every writer."""
    row = {
        "track": info.track, "shape": list(info.shape), "acc": info.acc, "dtype": info.dtype, "step": step,
        "role": prop.role,
        "policy": info.policy, "model": prop.model or info.model, "messages": prop.messages,
        "completion": prop.completion, "reward": reward, "parts": parts, "kind": kind, "parent_sha": parent,
        "child_sha": child, "usage": _usage(prop), "baseline": info.baseline, "speedup": speedup,
        "origin": prop.origin, "plan": prop.plan, "seed_lines": seed_lines,
    }
    return row


def record_reward(sink: RewardSink, info: StepInfo, step: int, prop: Proposal, *, parent: str | None,
                  child: str | None, kind: str, reward: float, parts: dict, speedup: float | None,
                  seed_lines: int) -> dict:
    """Write the row to ``rewards.jsonl`` and its ``reward`` event; the row."""
    row = reward_row(info, step, prop, parent=parent, child=child, kind=kind, reward=reward, parts=parts,
                     speedup=speedup, seed_lines=seed_lines)
    sink.append_reward(row)
    sink.record(ev_schema.Reward(track=info.track, step=step, sha=child, reward=reward, parts=parts, kind=kind,
                                 role=prop.role, origin=prop.origin, plan=one_line(prop.plan, 200), speedup=speedup))
    return row
