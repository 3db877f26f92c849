"""Policies that play the agent's roles: ``llm``, ``search`` and ``human``.

``make_policy(name, ...)`` builds one by name; the protocol and its data
classes live in :mod:`l2tui.agent.policies.base`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .base import Attempt, Failure, Policy, Proposal, TrackContext

if TYPE_CHECKING:
    from l2tui.config import Config

__all__ = ["Attempt", "Failure", "Policy", "Proposal", "TrackContext", "make_policy", "POLICY_NAMES"]

POLICY_NAMES = ("llm", "search", "human")


def make_policy(name: str, config: Config | None = None, gpu: dict | None = None) -> Policy:
    """Build a policy by name, from the settings (None: the defaults) and the GPU the session runs on."""
    from l2tui.errors import UserError

    if name == "llm":
        import importlib.util

        # the SDK is imported at the first call; without it every step would fail the same way
        if importlib.util.find_spec("openai") is None:
            raise UserError("the llm policy calls its endpoint through the openai package, which is not "
                            "installed: pip install openai (or use --policy search or human)")
        from .llm import LLMPolicy

        return LLMPolicy.from_config(config, gpu=gpu)
    if name == "search":
        try:
            from .search import SearchPolicy
        except ImportError as e:
            raise UserError(f"the search policy is not available ({e}); use --policy llm") from None
        opts = dict(getattr(config, "search", {}) or {}) if config is not None else {}
        arch = None
        if config is not None:
            arch = config.harness.get("arch") or None
        arch = arch or (gpu or {}).get("arch")
        # back to back (timing "chained") PDL's overlap can pay; otherwise the reward is per call
        timing = config.harness.get("timing") if config is not None else None
        return SearchPolicy(seed=opts.get("seed", 0), width=opts.get("candidates_per_step", 4), arch=arch,
                            pick_top=opts.get("pick_top", 5), pick_kinds=opts.get("pick_kinds", True),
                            launch="both" if timing == "chained" else "per_call")
    if name == "human":
        from .human import HumanPolicy

        return HumanPolicy()
    raise UserError(f"unknown policy {name!r}: use one of {', '.join(POLICY_NAMES)}")
