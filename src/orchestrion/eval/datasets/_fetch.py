"""Where BIG-bench's task files live, and how to get them.

The ``bigbench`` package cannot be installed or even ``pip download``-ed (its
metadata declares a direct-URL dependency, which pip refuses for PyPI
distributions), so its sdist is downloaded over HTTPS from PyPI, checked
against a pinned sha256, and only the ``task.json`` files under
``bigbench/benchmark_tasks`` are kept in the cache. An installed ``bigbench``
package is used instead when one is present (it is located, never imported), and so is a
checkout of google/BIG-bench on ``PYTHONPATH``: the way left where the sdist cannot be had.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import shutil
import tarfile
import tempfile
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import IO

from ..._errors import ConfigError
from ..._paths import cache_dir

SDIST_NAME = "bigbench-1.0.0.tar.gz"
SDIST_SHA256 = "1bb398a5512c6d798cdebe0dfa0ac03f67f6033fa6b39c6ef71df978c7cbc5c2"
SIMPLE_URL = "https://pypi.org/simple/bigbench/"
ENV_SDIST = "ORCHESTRION_BIGBENCH_SDIST"
PROGRAMMATIC_LIST = "programmatic.txt"  # task folders with a task.py and no task.json
FETCH_HINT = "run `orchestrion datasets fetch bigbench`"
# where the sdist cannot be downloaded (offline; PyPI stopped listing it on 2026-12-07)
OTHER_SOURCES = (f"set {ENV_SDIST} to a local copy of {SDIST_NAME}, or put a checkout of "
                 "github.com/google/BIG-bench on PYTHONPATH (its bigbench/benchmark_tasks is read in place)")
_CHUNK = 1 << 20
_TASK_FILE = re.compile(r"^[^/]+/bigbench/benchmark_tasks/((?:[\w.-]+/)+)(task\.json|task\.py)$")

Progress = Callable[[int, int], None]


def cache_root() -> Path:
    """The folder that holds the fetched copy: ``<cache>/datasets/bigbench-1.0.0``."""
    return cache_dir() / "datasets" / "bigbench-1.0.0"


def installed_tasks_dir() -> Path | None:
    """``benchmark_tasks`` of an installed ``bigbench`` package, found without importing it."""
    try:
        spec = importlib.util.find_spec("bigbench")
    except (ImportError, ValueError):
        return None
    for location in (spec.submodule_search_locations or []) if spec else []:
        tasks = Path(location) / "benchmark_tasks"
        if tasks.is_dir():
            return tasks
    return None


def tasks_dir() -> Path | None:
    """Where BIG-bench task folders are read from, or None when there are none."""
    installed = installed_tasks_dir()
    if installed is not None:
        return installed
    cached = cache_root() / "benchmark_tasks"
    return cached if cached.is_dir() else None


def require_tasks_dir() -> Path:
    found = tasks_dir()
    if found is None:
        raise ConfigError(f"BIG-bench task files are not available (looked in {cache_root()}); {FETCH_HINT}")
    return found


def fetch_bigbench(
    progress: Progress | None = None, *, force: bool = False, on_stage: Callable[[str], None] | None = None
) -> Path:
    """Fill the cache with BIG-bench's task files; return the ``benchmark_tasks`` folder.

    ``progress(done, total)`` counts bytes: the download, then the compressed
    bytes read while extracting. ``on_stage`` gets a short word per stage.
    """
    final = cache_root()
    if (final / "benchmark_tasks").is_dir() and not force:
        return final / "benchmark_tasks"
    final.parent.mkdir(parents=True, exist_ok=True)
    source = os.environ.get(ENV_SDIST, "").strip()
    with tempfile.TemporaryDirectory(prefix=".bigbench-fetch-", dir=final.parent) as tmp:
        if source and not re.match(r"^https?://", source):
            sdist = Path(source).expanduser()
            if not sdist.is_file():
                raise ConfigError(f"{ENV_SDIST}={source}: no such file; point it at {SDIST_NAME} or unset it")
        else:
            url = source or _sdist_url()
            sdist = Path(tmp) / SDIST_NAME
            _stage(on_stage, "download")
            _download(url, sdist, progress)
        _stage(on_stage, "verify")
        _verify(sdist)
        _stage(on_stage, "extract")
        staged = Path(tmp) / "bigbench-1.0.0"
        _extract(sdist, staged / "benchmark_tasks", progress)
        _replace(staged, final)
        # the downloaded tarball goes with the temporary folder; a user's local copy stays
    return final / "benchmark_tasks"


def _stage(on_stage: Callable[[str], None] | None, name: str) -> None:
    if on_stage is not None:
        on_stage(name)


def _sdist_url() -> str:
    """Ask PyPI's JSON simple API for the sdist's URL; its hash must be the pinned one."""
    request = urllib.request.Request(SIMPLE_URL, headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            index = json.load(response)
    except (OSError, ValueError) as exc:
        raise ConfigError(
            f"could not read {SIMPLE_URL} ({exc}); check the network, or {OTHER_SOURCES}"
        ) from None
    for entry in index.get("files", []):
        if entry.get("filename") == SDIST_NAME:
            listed = entry.get("hashes", {}).get("sha256")
            if listed and listed != SDIST_SHA256:
                raise ConfigError(f"PyPI lists sha256 {listed} for {SDIST_NAME}, expected {SDIST_SHA256}; not fetching")
            return str(entry["url"])
    raise ConfigError(f"{SIMPLE_URL} does not list {SDIST_NAME}; {OTHER_SOURCES}")


def _download(url: str, dest: Path, progress: Progress | None) -> None:
    try:
        with urllib.request.urlopen(url, timeout=60) as response, dest.open("wb") as fh:
            total, done = int(response.headers.get("Content-Length") or 0), 0
            while chunk := response.read(_CHUNK):
                fh.write(chunk)
                done += len(chunk)
                if progress is not None:
                    progress(done, total or done)
    except OSError as exc:
        raise ConfigError(f"downloading {url} failed ({exc}); retry, or set {ENV_SDIST} to a local copy") from None


def _verify(sdist: Path) -> None:
    digest = hashlib.sha256()
    with sdist.open("rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    if digest.hexdigest() != SDIST_SHA256:
        raise ConfigError(
            f"{sdist}: sha256 {digest.hexdigest()} is not the expected {SDIST_SHA256}; the file is not {SDIST_NAME}"
        )


class _Counting:
    """A read-only file wrapper that reports how many bytes were read."""

    def __init__(self, raw: IO[bytes], total: int, progress: Progress | None) -> None:
        self.raw, self.total, self.progress, self.done = raw, total, progress, 0

    def read(self, size: int = -1) -> bytes:
        data = self.raw.read(size)
        self.done += len(data)
        if self.progress is not None:
            self.progress(self.done, self.total)
        return data


def _extract(sdist: Path, dest: Path, progress: Progress | None) -> None:
    """Copy every ``benchmark_tasks/**/task.json`` out of the sdist; list the task.py-only folders."""
    json_dirs: set[str] = set()
    py_dirs: set[str] = set()
    dest.mkdir(parents=True)
    with sdist.open("rb") as raw:
        counting = _Counting(raw, sdist.stat().st_size, progress)
        with tarfile.open(fileobj=counting, mode="r|gz") as tar:  # type: ignore[call-overload]
            for member in tar:
                match = _TASK_FILE.match(member.name)
                if match is None or not member.isfile() or ".." in match[1].split("/"):
                    continue
                folder = match[1].rstrip("/")
                if match[2] == "task.py":
                    py_dirs.add(folder)
                    continue
                json_dirs.add(folder)
                target = dest / folder / "task.json"
                target.parent.mkdir(parents=True, exist_ok=True)
                source = tar.extractfile(member)
                assert source is not None  # a regular file always has contents
                with target.open("wb") as out:
                    shutil.copyfileobj(source, out, _CHUNK)
    if not json_dirs:
        raise ConfigError(f"{sdist}: no benchmark_tasks/**/task.json inside; is it really {SDIST_NAME}?")
    (dest / PROGRAMMATIC_LIST).write_text("".join(f"{d}\n" for d in sorted(py_dirs - json_dirs)), encoding="utf-8")


def _replace(staged: Path, final: Path) -> None:
    """Move ``staged`` to ``final`` with renames, so readers never see a half-written cache."""
    old = final.with_name(final.name + ".old")
    if final.exists():
        shutil.rmtree(old, ignore_errors=True)
        os.rename(final, old)
    os.rename(staged, final)
    shutil.rmtree(old, ignore_errors=True)


def programmatic_tasks(root: Path) -> set[str]:
    """Task folders (relative to ``root``) that are Python programs rather than task.json files."""
    listed = root / PROGRAMMATIC_LIST
    if listed.is_file():
        return {line.strip() for line in listed.read_text(encoding="utf-8").splitlines() if line.strip()}
    return {
        str(p.parent.relative_to(root)) for p in root.glob("**/task.py") if not (p.parent / "task.json").exists()
    }
