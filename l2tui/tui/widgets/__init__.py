"""Widgets of the l2tui main screen; each reads the :class:`~l2tui.tui.state.SessionModel`."""
