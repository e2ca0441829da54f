"""Static-prefix KV states on disk, so a new process starts warm.

A pinned prefix state (``_kv_cache.PrefixStateCache.pin``) is also written here, one file
per prefix, under ``cache_dir()/kv/<key>/``. ``<key>`` digests everything that decides
whether a saved state fits a live context: the model file's sha256 (and the LoRA
adapter's), llama.cpp's version and the CPU features it was built with
(``llama_print_system_info``), and the context settings (``n_ctx``, batch sizes, KV cache
types, flash attention). A state written under another key lives in another folder and
is never read.

A file holds a header line (format, key, token count, sha256 of the token ids and of
the data), the token ids, then the bytes ``llama_state_seq_get_data`` returned. A file
is trusted only when its header, key, token ids and data digest all check out, and
``llama_state_seq_set_data`` accepts it; otherwise it is deleted and the prefix is
evaluated again (and written anew).

The folder (``$ORCHESTRION_PREFIX_CACHE_DIR`` when set) is bounded by
``$ORCHESTRION_PREFIX_CACHE_MB`` (default 2048 MB) over all models together: after a write,
the least recently used files (a load touches its file) go first.
``$ORCHESTRION_PREFIX_CACHE=off`` turns pinning and this store off. The folders are made
owner-only (0700, every one this store creates) and the files 0600, like the other state files.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import stat
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from .._errors import ConfigError
from .._paths import cache_dir
from ._threads import env_int
from .catalog import private_dir, write_private

log = logging.getLogger(__name__)

MAGIC = b"ORCHESTRION-KV 1\n"
DEFAULT_MAX_MB = 2048


def prefix_cache_enabled() -> bool:
    """False when ``$ORCHESTRION_PREFIX_CACHE`` is ``off`` (or ``0``/``false``/``no``)."""
    raw = os.environ.get("ORCHESTRION_PREFIX_CACHE", "on").strip().lower()
    if raw in ("on", "1", "true", "yes", ""):
        return True
    if raw in ("off", "0", "false", "no"):
        return False
    raise ConfigError(f"ORCHESTRION_PREFIX_CACHE='{raw}' must be on or off")


def max_bytes() -> int:
    """The disk bound: ``$ORCHESTRION_PREFIX_CACHE_MB`` megabytes (default 2048)."""
    value = env_int("ORCHESTRION_PREFIX_CACHE_MB", 0)
    return (DEFAULT_MAX_MB if value is None else value) << 20


def kv_root() -> Path:
    """``$ORCHESTRION_PREFIX_CACHE_DIR``, else ``cache_dir()/kv``."""
    env = os.environ.get("ORCHESTRION_PREFIX_CACHE_DIR")
    return Path(env) if env else cache_dir() / "kv"


def tokens_digest(tokens: Sequence[int]) -> str:
    return hashlib.sha256(array("i", tokens).tobytes()).hexdigest()


def file_sha256(path: Path) -> str:
    """The sha256 of ``path``, remembered beside the states by (path, size, mtime) so a large
    model file is hashed once, not on every start."""
    st = path.stat()
    memo = cache_dir() / "file-hashes.json"
    ident = f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}"
    try:
        known = orjson.loads(memo.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        known = {}
    if not isinstance(known, dict):
        known = {}
    found = known.get(ident)
    if isinstance(found, str):
        return found
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 22):
            digest.update(chunk)
    hexdigest = digest.hexdigest()
    known[ident] = hexdigest
    with contextlib.suppress(OSError):
        private_dir(memo.parent)
        write_private(memo, orjson.dumps(known))
    return hexdigest


@dataclass(frozen=True)
class DiskState:
    tokens: tuple[int, ...]
    data: bytes


class DiskStateStore:
    """The state files of one (model, build, context settings) key."""

    def __init__(self, key: dict[str, Any], root: Path | None = None, limit: int | None = None) -> None:
        self.key = orjson.dumps(key, option=orjson.OPT_SORT_KEYS).decode()
        self.digest = hashlib.sha256(self.key.encode()).hexdigest()[:24]
        self.root = root or kv_root()
        self.folder = self.root / self.digest
        self.limit = max_bytes() if limit is None else limit

    def path_for(self, tokens: Sequence[int]) -> Path:
        return self.folder / f"{len(tokens):06d}-{tokens_digest(tokens)[:32]}.kvs"

    def load(self, tokens: Sequence[int]) -> DiskState | None:
        """The saved state of exactly ``tokens``, checked; None when there is none or it fails a
        check (the file is then deleted, so the prefix is evaluated and written again)."""
        path = self.path_for(tokens)
        try:
            blob = path.read_bytes()
        except OSError:
            return None
        try:
            state = self._parse(blob, tokens)
        except ValueError as exc:
            log.warning("prefix state %s: %s; evaluating the prefix again", path, exc)
            self.discard(tokens)
            return None
        with contextlib.suppress(OSError):
            os.utime(path)  # recently used: the last to go when the folder is over its bound
        return state

    def _parse(self, blob: bytes, tokens: Sequence[int]) -> DiskState:
        if not blob.startswith(MAGIC):
            raise ValueError("not a state file of this format")
        end = blob.find(b"\n", len(MAGIC))
        if end < 0:
            raise ValueError("truncated header")
        try:
            header = orjson.loads(blob[len(MAGIC):end])
        except orjson.JSONDecodeError:
            raise ValueError("damaged header") from None
        if not isinstance(header, dict) or header.get("key") != self.key:
            raise ValueError("written by another model, build or context setting")
        n, nbytes = header.get("n_tokens"), header.get("nbytes")
        if n != len(tokens) or not isinstance(nbytes, int):
            raise ValueError("token count does not match")
        body = blob[end + 1:]
        if len(body) != 4 * n + nbytes:
            raise ValueError(f"{len(body)} bytes of body, expected {4 * n + nbytes}")
        saved = array("i")
        saved.frombytes(body[: 4 * n])
        if tuple(saved) != tuple(tokens) or header.get("tokens_sha256") != tokens_digest(tokens):
            raise ValueError("token ids do not match")
        data = body[4 * n:]
        if hashlib.sha256(data).hexdigest() != header.get("data_sha256"):
            raise ValueError("data digest does not match (damaged file)")
        return DiskState(tuple(tokens), data)

    def save(self, tokens: Sequence[int], data: bytes) -> None:
        """Write the state of ``tokens``, then trim the store to its bound. A full or read-only
        disk costs only the warm start."""
        if self.limit <= 0:
            return
        header = {"key": self.key, "n_tokens": len(tokens), "nbytes": len(data),
                  "tokens_sha256": tokens_digest(tokens), "data_sha256": hashlib.sha256(data).hexdigest()}
        blob = MAGIC + orjson.dumps(header) + b"\n" + array("i", tokens).tobytes() + data
        try:
            _private_folder(self.folder, self.root)
            write_private(self.path_for(tokens), blob)
        except OSError as exc:
            log.warning("prefix state not written to %s: %s", self.folder, exc)
            return
        self.trim()

    def discard(self, tokens: Sequence[int]) -> None:
        with contextlib.suppress(OSError):
            self.path_for(tokens).unlink()

    def trim(self) -> None:
        """Delete the least recently used state files (all keys) until the total fits the bound."""
        files: list[tuple[float, int, Path]] = []
        for path in self.root.glob("*/*.kvs"):
            with contextlib.suppress(OSError):
                st = path.stat()
                files.append((st.st_mtime, st.st_size, path))
        total = sum(size for _, size, _ in files)
        for _, size, path in sorted(files):
            if total <= self.limit:
                break
            with contextlib.suppress(OSError):
                path.unlink()
                total -= size


def _private_folder(folder: Path, root: Path) -> None:
    """Create ``folder`` and every missing folder above it owner-only (0o700); the default root,
    when an older version made it wider, is tightened to 0o700 too."""
    private_dir(folder)
    if "ORCHESTRION_PREFIX_CACHE_DIR" not in os.environ:
        info = root.stat()
        if info.st_uid == os.geteuid() and stat.S_IMODE(info.st_mode) & 0o077:
            root.chmod(0o700)
