"""What the parts of the agent loop (steering, resume, profiling) use of the loop that hosts them.

:class:`l2tui.agent.loop.AgentLoop` is made of mixins kept in their own modules; each mixin
reads the loop's state and calls its methods.  :class:`LoopHost` names that state and those
methods for the type checker only (at run time it is an empty base class), so a mixin's use of
a field the loop does not have is a mypy finding rather than an ``AttributeError`` mid-run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import queue
    from collections.abc import Callable, Generator

    from harness.evaluator_protocol import Evaluator
    from harness.shapes import Shape

    from .. import events as ev_schema
    from ..session import Session
    from ..steering import LoopCommand
    from .loop import LoopConfig
    from .policies.base import Policy
    from .track import Track


class LoopHost:
    """The loop's state and methods its mixins use (declared for mypy; defined by ``AgentLoop``)."""

    if TYPE_CHECKING:
        session: Session
        config: LoopConfig
        policy: Policy
        evaluator: Evaluator
        policy_factory: Callable[[str], Policy] | None
        tracks: dict[str, Track]
        order: list[str]
        _commands: queue.Queue[LoopCommand]
        _resumed_from: int | None
        _seed_cache: dict[str, str | None]

        def _emit(self, event: ev_schema.Event) -> dict: ...

        def _error(self, t: Track | None, message: str) -> None: ...

        def _stage(self, t: Track, step: int, stage: str, status: str, detail: str | None = None) -> None: ...

        def _set_state(self, t: Track, state: str) -> None: ...

        def _finish(self, t: Track, reason: str, state: str = "done") -> None: ...

        def _budget(self, t: Track) -> str | None: ...

        def add_track(self, shape: Shape, acc: str | None = None) -> str: ...

        def request_stop(self) -> None: ...

        def _maybe_enable_profiling(self, t: Track, manual: bool = False) -> None: ...

        def _profile(self, t: Track) -> Generator[None, None, object]: ...
