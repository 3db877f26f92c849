"""Errors a user can cause in l2tui itself (config, sessions, endpoints).

They subclass :class:`harness.errors.HarnessError` so the CLI prints every one
of them the same way: one line, no traceback.
"""

from harness.errors import HarnessError


class UserError(HarnessError):
    """Base for l2tui errors with a one-line, actionable message."""


class ConfigError(UserError):
    """Malformed config: the message names the file, the key and what is allowed."""


class SessionError(UserError):
    """A session folder that cannot be created, read or resumed."""


class EndpointError(UserError):
    """An LLM endpoint that cannot be reached or answers garbage."""
