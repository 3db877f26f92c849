"""The keyword arguments Textual's widgets take and ours pass on, as types.

Why: a widget of ours takes its own arguments and hands the rest (``id="grid"``, classes) to
Textual's constructor; typed as this dict, a misspelt keyword fails the type check instead of
reaching Textual at run time.
"""

from __future__ import annotations

from typing import TypedDict


class WidgetOptions(TypedDict, total=False):
    """What ``textual.widget.Widget.__init__`` takes by keyword, besides ``markup``."""

    name: str | None
    id: str | None
    classes: str | None
    disabled: bool
