"""The ``human`` policy: the engineer plays every role.

It proposes nothing by itself; the loop waits (the track shows ``paused``)
until an ``edit`` command brings a kernel, which is then compiled, checked and
timed like any candidate (origin ``human``).  Hints and accept/reject decisions
are commands too, so they work under every policy.
"""

from __future__ import annotations

from .base import Failure, Proposal, TrackContext


class HumanPolicy:
    name = "human"
    model = None

    def seed(self, ctx: TrackContext) -> Proposal:
        if ctx.seed_source:
            return Proposal(source=ctx.seed_source, plan="seed kernel", origin="seed", role="seed", family=ctx.family)
        if ctx.known:   # the loop opens the track on the fastest known kernel
            return Proposal(plan="open on the best known kernel", origin="seed", role="human")
        return Proposal(origin="seed", role="human", error="no seed kernel configured: set [loop] seed or send an edit")

    def propose(self, ctx: TrackContext) -> list[Proposal]:
        return []  # wait for the engineer's edit command

    def debug(self, ctx: TrackContext, failure: Failure) -> Proposal:
        return Proposal(origin="debug", role="human",
                        error=f"{failure.kind}: {failure.message} (edit the kernel to fix it)")
