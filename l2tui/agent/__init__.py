"""The agent layer: the loop state machine, roles, policies, patches, rewards, LLM client.

Import the parts directly (``l2tui.agent.loop.AgentLoop``, ``l2tui.agent.policies.make_policy``,
``l2tui.agent.recorded.RecordedEvaluator``); this package imports nothing heavy so the app
starts fast.  See docs/INTERFACES.md ("The loop as the UI sees it") and the README, "The agent loop".
"""
