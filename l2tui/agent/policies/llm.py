"""The ``llm`` policy: planner, coder, debugger and compiler played by a chat model.

A refinement step is one conversation of two calls: the planner prompt (kernel,
timings, history, hint, and profile once delayed profiling triggered) gets an
idea in words; the coder turn continues the same conversation ("implement it")
and gets SEARCH/REPLACE blocks plus an optional ``NVCC_FLAGS:`` line (the
compiler role).  The coder call's messages are exactly what the reward row
stores, so an RL job sees the whole step as one prompt/completion pair.

Endpoint trouble never raises here: a failed call yields a Proposal with
``error`` set (the loop records ``no_patch`` and goes on).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ... import events as ev_schema
from .. import context as C
from ..llm_client import EndpointUnusable, LLMClient, LLMResult

if TYPE_CHECKING:
    from ...config import Config
from ..patches import extract_rewrite
from ..roles import choose_flags, wants_rewrite
from .base import Failure, Proposal, TrackContext


def _add_usage(a: dict, b: dict) -> dict:
    """The usage of two calls together; estimated when either one's was (a server without usage
    reporting: the client counts four characters a token)."""
    out = {
        "prompt_tokens": int(a.get("prompt_tokens", 0)) + int(b.get("prompt_tokens", 0)),
        "completion_tokens": int(a.get("completion_tokens", 0)) + int(b.get("completion_tokens", 0)),
    }
    if a.get("estimated") or b.get("estimated"):
        out["estimated"] = True
    return out


#: a ``plan`` event shows this much of the plan; the whole plan is in the coder's messages (rewards.jsonl)
PLAN_EVENT_CHARS = 16384


def _shown_plan(plan: str) -> str:
    if len(plan) <= PLAN_EVENT_CHARS:
        return plan
    return plan[:PLAN_EVENT_CHARS] + f" [... {len(plan) - PLAN_EVENT_CHARS} more characters in rewards.jsonl]"


class LLMPolicy:
    name = "llm"

    def __init__(self, client: LLMClient, *, context_tokens: int = 24000, debug_rounds: int = 3,
                 debug_max_lines: int = 40, gpu: dict | None = None):
        self.client = client
        self.context_tokens = context_tokens
        self.debug_rounds = debug_rounds
        self.debug_max_lines = debug_max_lines
        self.gpu = gpu or {}

    @classmethod
    def from_config(cls, cfg: Config | None, gpu: dict | None = None, **_: object) -> "LLMPolicy":
        from ...config import Config

        cfg = cfg or Config()
        return cls(LLMClient.from_config(cfg), context_tokens=cfg.loop["context_tokens"],
                   debug_rounds=cfg.loop["debug_rounds"], debug_max_lines=cfg.loop["debug_max_lines"], gpu=gpu)

    @property
    def model(self) -> str:
        return self.client.model

    # ------------------------------------------------------------------ calls
    def _call(self, ctx: TrackContext, role: str, messages: list[dict]) -> LLMResult:
        res = self.client.chat(
            messages, role=role,
            on_delta=lambda text: ctx.send(ev_schema.LlmDelta(role=role, text=text)),
            on_retry=lambda n, why, delay: ctx.send(ev_schema.LlmRetry(role=role, attempt=n, error=why, delay_s=round(delay, 3))),
        )
        ctx.send(ev_schema.LlmCall(role=role, model=self.client.model, usage=dict(res.usage), seconds=round(res.seconds, 3),
                 ok=res.ok, error=res.error, attempts=res.attempts))
        if res.endpoint_unusable:   # the call is recorded; the loop pauses what needs the model
            raise EndpointUnusable(res.error or "the endpoint never answered")
        return res

    # ------------------------------------------------------------------ protocol
    def seed(self, ctx: TrackContext) -> Proposal:
        if ctx.seed_source:
            return Proposal(source=ctx.seed_source, plan="seed kernel", origin="seed", role="seed",
                            family=ctx.family, flags=list(ctx.flags), model=None)
        if ctx.known:
            # the loop seeds from the fastest known kernel; the first planner prompt improves on it
            return Proposal(plan="start from the best known kernel", origin="seed", role="seed", model=None)
        msgs = C.seed_messages(ctx, self.gpu)
        res = self._call(ctx, "coder", msgs)
        prop = Proposal(plan="first generation", messages=msgs, completion=res.text, usage=res.usage,
                        origin="seed", role="coder", model=self.model)
        if not res.ok:
            prop.error = f"LLM call failed: {res.error}"
            return prop
        src = extract_rewrite(res.text)
        if src is None:
            prop.error = "the reply holds no ```cuda block with l2_hgemm"
            return prop
        prop.source = src
        prop.flags, _ = choose_flags(res.text, ctx.allowed_flags, ctx.flags)
        return prop

    def propose(self, ctx: TrackContext) -> list[Proposal]:
        msgs = C.planner_messages(ctx, context_tokens=self.context_tokens, gpu=self.gpu)
        plan_res = self._call(ctx, "planner", msgs)
        if not plan_res.ok:
            return [Proposal(plan="", messages=msgs, completion=plan_res.text, usage=plan_res.usage,
                             origin="patch", role="planner", model=self.model,
                             error=f"planner call failed: {plan_res.error}")]
        plan = plan_res.text.strip()
        ctx.send(ev_schema.Plan(role="planner", text=_shown_plan(plan)))
        rewrite = wants_rewrite(plan)
        coder_msgs = msgs + [
            {"role": "assistant", "content": plan},
            {"role": "user", "content": C.coder_followup(ctx, rewrite=rewrite)},
        ]
        code_res = self._call(ctx, "coder", coder_msgs)
        usage = _add_usage(plan_res.usage, code_res.usage)
        prop = Proposal(plan=plan, messages=coder_msgs, completion=code_res.text, usage=usage,
                        origin="rewrite" if rewrite else "patch", role="coder", model=self.model,
                        family=ctx.family)
        if not code_res.ok:
            prop.error = f"coder call failed: {code_res.error}"
            return [prop]
        prop.patch = code_res.text
        prop.flags, note = choose_flags(code_res.text, ctx.allowed_flags, ctx.flags)
        if note:
            ctx.send(ev_schema.Plan(role="compiler", text=note))
        return [prop]

    def debug(self, ctx: TrackContext, failure: Failure) -> Proposal:
        from ..patches import unified_diff

        diff = unified_diff(failure.parent_source, failure.source) if failure.parent_source else ""
        msgs = C.debugger_messages(ctx, failure, max_rounds=self.debug_rounds, max_lines=self.debug_max_lines,
                                   context_tokens=self.context_tokens, diff=diff, gpu=self.gpu)
        res = self._call(ctx, "debugger", msgs)
        prop = Proposal(plan=f"debug {failure.kind} (round {failure.round})", messages=msgs, completion=res.text,
                        usage=res.usage, origin="debug", role="debugger", model=self.model, family=ctx.family,
                        flags=list(ctx.flags))
        if not res.ok:
            prop.error = f"debugger call failed: {res.error}"
            return prop
        prop.patch = res.text
        return prop
