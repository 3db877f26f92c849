"""The seed stage's timing: several kernels of one track checked and timed in one request.

Why here and not in a policy: a policy only proposes. Before a track's seed, the search policy
proposes its pick (``policies/pick.py``: a ``PickRequest``) and every policy's seed may meet the
known kernels for the shape; the loop's seed stage builds and times them here, beside the track's
baseline, in one request of the GPU worker (``harness.batch.evaluate_many``, the function the
sweep's track driver reaches through its slot), so they are compared under the same clocks. A
pick's timings go back to the policy that proposed it (``PickRequest.decide``), which chooses the
seed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from .. import events as ev_schema

if TYPE_CHECKING:
    from harness.evaluate import Evaluation
    from harness.evaluator_protocol import Evaluator
    from harness.shapes import Shape

    from .policies.base import Proposal, TrackContext
    from .policies.pick import PickRequest

#: (label, source, nvcc flags): one kernel of a request
Item = tuple[str, str, Sequence[str]]


def time_together(evaluator: Evaluator, items: Sequence[Item], shape: Shape, acc: str,
                  baseline: str) -> dict[str, Evaluation]:
    """label -> evaluation of every item, checked and timed in one request with ``baseline``."""
    from ..executors.batch import evaluate_many

    return evaluate_many(evaluator, items, shape, acc, baselines=(baseline,))


def time_pick(evaluator: Evaluator, ctx: TrackContext, request: PickRequest) -> Proposal:
    """The policy's seed from its pick: the ``pick`` stage's events around building the request's
    kernels in parallel (each for its family's architecture) and timing them together."""
    from harness.build import build_many

    ctx.send(ev_schema.Stage(stage="pick", status="start", detail=request.detail()))
    for arch, sources in request.builds().items():
        build_many(sources, arch=arch)
    evs = time_together(evaluator, request.batch(), ctx.shape, ctx.acc, ctx.baseline)
    ctx.send(ev_schema.Stage(stage="pick", status="end"))
    return request.decide(evs)
