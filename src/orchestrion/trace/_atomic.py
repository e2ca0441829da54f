"""Outputs that appear whole or not at all: written to a temporary file beside the target, then
renamed into place. A crash, a damaged trace database or Ctrl-C halfway leaves the old file (or
none), never a partial one. New files are owner-only (0o600): traces hold every prompt.
A folder of outputs (a report, a viewer bundle) is written to a temporary folder beside it,
then each file is renamed into the folder: every file is whole, and other files there are kept."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from .._errors import TraceError
from ._schema import make_dirs


def check_output_file(path: Path, flag: str = "--out") -> None:
    """A one-line :class:`TraceError` when ``path`` cannot be a file to write: a directory, or in a
    folder that does not exist."""
    if path.is_dir():
        raise TraceError(f"{flag} {path}: is a directory; give a file name, e.g. {path / 'traces.jsonl'}")
    if not path.parent.is_dir():
        raise TraceError(f"{flag} {path}: the folder {path.parent} does not exist; create it first")


@contextlib.contextmanager
def atomic_output(path: Path, flag: str = "--out") -> Iterator[IO[bytes]]:
    """A binary handle whose content replaces ``path`` only if the block completes."""
    check_output_file(path, flag)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent)
    except OSError as exc:
        raise TraceError(f"{flag} {path}: cannot write there ({exc.strerror or exc})") from None
    try:
        with os.fdopen(fd, "wb") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise TraceError(f"{flag} {path}: cannot write it ({exc.strerror or exc})") from None
        raise


@contextlib.contextmanager
def atomic_files(folder: Path, flag: str = "--out") -> Iterator[Path]:
    """A temporary folder beside ``folder``; if the block completes, each file written into it is
    renamed into ``folder`` (created owner-only, with its subfolders), owner-only (0o600)."""
    if folder.exists() and not folder.is_dir():
        raise TraceError(f"{flag} {folder}: is a file; give a folder")
    try:
        make_dirs(folder.parent)
        staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", suffix=".part", dir=folder.parent))
    except OSError as exc:
        raise TraceError(f"{flag} {folder}: cannot write there ({exc.strerror or exc})") from None
    try:
        yield staging
        for root, _, files in os.walk(staging):
            target = folder / Path(root).relative_to(staging)
            make_dirs(target)
            for name in files:
                os.chmod(os.path.join(root, name), 0o600)
                os.replace(os.path.join(root, name), target / name)
    except OSError as exc:
        raise TraceError(f"{flag} {folder}: cannot write it ({exc.strerror or exc})") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
