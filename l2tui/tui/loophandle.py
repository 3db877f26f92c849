"""The app's link to the agent loop: a thread-safe front of an ``AgentLoop`` that may not exist yet.

The UI holds a :class:`LoopHandle` from its start; the loop is built later in a worker thread
(so the agent's and the LLM client's imports stay out of the start-up path), and steering
commands sent before then wait here, in order.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Callable, Protocol

if TYPE_CHECKING:
    from harness.evaluator_protocol import Evaluator

    from ..steering import LoopCommand


class SteeredLoop(Protocol):
    """What the app needs of the agent loop (``l2tui.agent.loop.AgentLoop``): run it in a worker
    thread, hear its events, steer and stop it, and close the evaluator the app built for it."""

    @property
    def evaluator(self) -> Evaluator: ...

    def subscribe(self, fn: Callable[[dict], None]) -> None: ...

    def send(self, command: LoopCommand) -> None: ...

    def request_stop(self) -> None: ...

    def run(self) -> None: ...


class LoopHandle:
    """Thread-safe front of an AgentLoop that may not exist yet.

    The loop is built in the worker thread (so agent/openai imports stay out of
    the start-up path); commands sent before that are queued and delivered in
    order once it is attached.
    """

    def __init__(self, loop: SteeredLoop | None = None) -> None:
        self._lock = threading.Lock()
        self._loop = loop
        self._pending: list[LoopCommand] = []

    @property
    def loop(self) -> SteeredLoop | None:
        return self._loop

    def attach(self, loop: SteeredLoop) -> None:
        with self._lock:
            self._loop = loop
            pending, self._pending = self._pending, []
        for cmd in pending:
            loop.send(cmd)

    def send(self, command: LoopCommand) -> None:
        with self._lock:
            if self._loop is None:
                self._pending.append(command)
                return
            loop = self._loop
        loop.send(command)

    def request_stop(self) -> None:
        if self._loop is not None and hasattr(self._loop, "request_stop"):
            self._loop.request_stop()
