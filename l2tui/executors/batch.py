"""The executors' batched evaluation: several candidates on one shape in one worker request.

It is evaluation logic of the harness (``harness.batch``, which says why one request); the
executors and the search policy import it from here.
"""

from __future__ import annotations

from harness.batch import Item, evaluate_many

__all__ = ["Item", "evaluate_many"]
