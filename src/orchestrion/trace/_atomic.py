"""Outputs that appear whole or not at all: written to a temporary file beside the target, then
renamed into place. A crash, a damaged trace database or Ctrl-C halfway leaves the old file (or
none), never a partial one. New files are owner-only (0o600): traces hold every prompt.
A folder of outputs (a report, a viewer bundle) is written to a temporary folder beside it,
then each file is renamed into the folder: every file is whole, and other files there are kept."""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from .._errors import TraceError
from ._schema import make_dirs


def _kind(mode: int) -> str:
    """What a file that is not a regular file is, in words."""
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISFIFO(mode):
        return "a pipe (FIFO)"
    return "a socket" if stat.S_ISSOCK(mode) else "not a regular file"


def check_output_file(path: Path, flag: str = "--out") -> None:
    """A one-line :class:`TraceError` when ``path`` cannot be a file to write: anything but a new
    path or a regular file (a directory, a device such as ``/dev/full``, a FIFO: the output would
    replace it, or never end), or a path in a folder that does not exist."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        mode = None
    except OSError as exc:
        raise TraceError(f"{flag} {path}: cannot be checked ({exc.strerror or exc})") from None
    if mode is not None and stat.S_ISDIR(mode):
        raise TraceError(f"{flag} {path}: is a directory; give a file name, e.g. {path / 'traces.jsonl'}")
    if mode is not None and not stat.S_ISREG(mode):
        raise TraceError(f"{flag} {path}: is {_kind(mode)}, not a regular file; give a new file or a regular one")
    if not path.parent.is_dir():
        raise TraceError(f"{flag} {path}: the folder {path.parent} does not exist; create it first")


def check_output_folder(folder: Path, flag: str = "--out") -> None:
    """A one-line :class:`TraceError` when ``folder`` cannot be a folder to write into: it exists
    and is not a directory (a file, a device, a FIFO)."""
    try:
        mode = folder.stat().st_mode
    except FileNotFoundError:
        return
    except OSError as exc:
        raise TraceError(f"{flag} {folder}: cannot be checked ({exc.strerror or exc})") from None
    if not stat.S_ISDIR(mode):
        what = "a file" if stat.S_ISREG(mode) else _kind(mode)
        raise TraceError(f"{flag} {folder}: is {what}, not a folder; give a new folder or an existing one")


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
    check_output_folder(folder, flag)
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
