"""Read the JSON result files of the tools, plain or gzip-compressed (``.gz``).

Why: superseded pick and bench files stay in ``results/h200/runs`` for the record, compressed so
the working tree still travels to the device (64 MiB with its carry); the tools read either.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any


def read_json(path: str | Path) -> Any:
    """The document in ``path``; a name ending in ``.gz`` is decompressed first."""
    p = Path(path)
    if p.suffix == ".gz":
        with gzip.open(p, "rt", encoding="utf-8") as fh:
            return json.load(fh)
    return json.loads(p.read_text())
