"""Where Orchestrion keeps downloaded data and converted weights."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """``$ORCHESTRION_CACHE``, else ``$XDG_CACHE_HOME/orchestrion`` (``~/.cache/orchestrion``)."""
    env = os.environ.get("ORCHESTRION_CACHE")
    if env:
        return Path(env)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "orchestrion"
