"""Where Orchestrion keeps downloaded data and converted weights."""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path


def cache_dir() -> Path:
    """``$ORCHESTRION_CACHE``, else ``$XDG_CACHE_HOME/orchestrion`` (``~/.cache/orchestrion``).

    The folder (and any missing parent) is created owner-only (0700), so other users and
    sandboxed code cannot read what is cached; the default folder is tightened to 0700 if an
    older version made it wider. Creation failures are left to the caller's own error.
    """
    env = os.environ.get("ORCHESTRION_CACHE")
    path = Path(env) if env else Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "orchestrion"
    with contextlib.suppress(OSError):
        _make_private(path, tighten=not env)
    return path


def _make_private(path: Path, *, tighten: bool) -> None:
    missing = []
    node = path
    while not node.exists() and node.parent != node:
        missing.append(node)
        node = node.parent
    for folder in reversed(missing):
        with contextlib.suppress(FileExistsError):
            folder.mkdir(mode=0o700)
    if not missing and tighten:
        info = path.stat()
        if info.st_uid == os.geteuid() and stat.S_IMODE(info.st_mode) & 0o077:
            path.chmod(0o700)
