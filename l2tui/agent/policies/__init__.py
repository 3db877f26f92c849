"""Policies that play the agent's roles: ``llm``, ``search`` and ``human``.

``make_policy(name, ...)`` builds one by name; the protocol and its data
classes live in :mod:`l2tui.agent.policies.base`.
"""

from .base import Attempt, Failure, Policy, Proposal, TrackContext

__all__ = ["Attempt", "Failure", "Policy", "Proposal", "TrackContext", "make_policy", "POLICY_NAMES"]

POLICY_NAMES = ("llm", "search", "human")


def make_policy(name: str, config=None, **kwargs) -> Policy:
    """Build a policy by name.  ``config`` is an ``l2tui.config.Config`` (or None)."""
    from l2tui.errors import UserError

    if name == "llm":
        import importlib.util

        # the SDK is imported at the first call; without it every step would fail the same way
        if importlib.util.find_spec("openai") is None:
            raise UserError("the llm policy calls its endpoint through the openai package, which is not "
                            "installed: pip install openai (or use --policy search or human)")
        from .llm import LLMPolicy

        return LLMPolicy.from_config(config, **kwargs)
    if name == "search":
        try:
            from .search import SearchPolicy
        except ImportError as e:
            raise UserError(f"the search policy is not available ({e}); use --policy llm") from None
        opts = dict(getattr(config, "search", {}) or {}) if config is not None else {}
        arch = None
        if config is not None:
            arch = config.harness.get("arch") or None
        gpu = kwargs.get("gpu") or {}
        arch = arch or gpu.get("arch")
        # back to back (timing "chained") PDL's overlap can pay; otherwise the reward is per call
        timing = config.harness.get("timing") if config is not None else None
        return SearchPolicy(seed=opts.get("seed", 0), width=opts.get("candidates_per_step", 4), arch=arch,
                            pick_top=opts.get("pick_top", 5), pick_kinds=opts.get("pick_kinds", True),
                            launch="both" if timing == "chained" else "per_call")
    if name == "human":
        from .human import HumanPolicy

        return HumanPolicy()
    raise UserError(f"unknown policy {name!r}: use one of {', '.join(POLICY_NAMES)}")
