"""Every path the harness reads or writes, in one place.

Caches live in the user cache dir (``$L2TUI_CACHE_DIR`` overrides it, which the
tests use to get a private cache).  Package data (kernel sources, prior
profiles) lives next to this file.
"""

from __future__ import annotations

import os
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
KERNELS_DIR = PACKAGE_DIR / "kernels"          # seed families, baseline shims (.cu)
PROFILING_DATA_DIR = PACKAGE_DIR / "profiling" / "data"  # prior NCU profile body


def cache_dir() -> Path:
    """Root of all harness caches (build cache, roofline cache)."""
    env = os.environ.get("L2TUI_CACHE_DIR")
    if env:
        # absolute: nvcc runs inside the build dir, where a relative cache path means nothing
        return Path(env).expanduser().resolve()
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("l2tui", appauthor=False))


def build_cache_dir() -> Path:
    """Content-addressed shared libraries: ``<key>/kernel.so`` plus ``build.json``."""
    return cache_dir() / "builds"


def roofline_cache_file(gpu_uuid: str) -> Path:
    """Measured peak tensor rate, copy bandwidth and launch floor of one GPU."""
    safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in gpu_uuid)
    return cache_dir() / "roofline" / f"{safe}.json"
