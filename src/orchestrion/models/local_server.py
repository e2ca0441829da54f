"""Real OpenAI-compatible servers for pulled catalog models: one ``llama_cpp.server`` process each.

:func:`start_servers` starts them, waits until each answers ``GET /v1/models`` and stops them
all on exit (terminate, then kill after 5 s). :func:`pool_config` turns the running servers
into a pool.yaml mapping of ``openai-api`` models with the local preset's names, tiers,
descriptions, prices and context sizes.
"""

from __future__ import annotations

import importlib.util
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .._errors import ConfigError, ModelNotFoundError, ModelUnavailableError
from .catalog import entry, pulled_path

INSTALL_HINT = "pip install 'orchestrion[server-local]'"
_SERVER_MODULES = ("llama_cpp", "uvicorn", "fastapi", "sse_starlette", "starlette_context", "pydantic_settings")
STOP_GRACE_S = 5.0
POOL_HEADER = "# written by `orchestrion models serve`: llama.cpp servers for pulled catalog models\n"

# Used only if the local preset (orchestrion.models.presets) cannot be imported.
_FALLBACK_SPECS: dict[str, dict[str, Any]] = {
    "smollm2-135m": {"tier": 1, "context_size": 2048, "description": "SmolLM2-135M-Instruct"},
    "qwen2.5-coder-0.5b": {"tier": 2, "context_size": 4096, "description": "Qwen2.5-Coder-0.5B-Instruct"},
    "qwen2.5-coder-1.5b": {"tier": 3, "context_size": 4096, "description": "Qwen2.5-Coder-1.5B-Instruct"},
}


@dataclass
class LocalServer:
    """One running ``llama_cpp.server`` process."""

    name: str
    path: Path
    host: str
    port: int
    n_ctx: int
    process: subprocess.Popen[bytes]
    log: Path

    @property
    def url(self) -> str:
        """The OpenAI base URL (``…/v1``) clients use."""
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host  # noqa: S104
        host = f"[{host}]" if ":" in host else host
        return f"http://{host}:{self.port}/v1"

    def tail(self, lines: int = 4) -> str:
        """The last lines of the server's output, joined on one line."""
        try:
            text = self.log.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return "(no output)"
        kept = [ln.strip() for ln in text.splitlines() if ln.strip()][-lines:]
        return " | ".join(kept)[-400:] or "(no output)"


@dataclass
class ServerGroup:
    """The servers :func:`start_servers` runs; iterate it, or write its pool.yaml."""

    servers: list[LocalServer] = field(default_factory=list)

    def __iter__(self) -> Iterator[LocalServer]:
        return iter(self.servers)

    def dead(self) -> LocalServer | None:
        """A server whose process has exited, if any."""
        return next((s for s in self.servers if s.process.poll() is not None), None)

    def write_pool(self, path: Path) -> Path:
        """Write pool.yaml for these servers (refuses to overwrite a file it did not write)."""
        if path.exists() and not path.read_text(encoding="utf-8", errors="replace").startswith(POOL_HEADER):
            raise ConfigError(f"{path} exists and was not written by `orchestrion models serve`; pass another --out")
        path.write_text(POOL_HEADER + yaml.safe_dump(pool_config(self.servers), sort_keys=False), encoding="utf-8")
        return path


def server_installed() -> bool:
    return all(importlib.util.find_spec(m) is not None for m in _SERVER_MODULES)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def _port_free(host: str, port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def _specs() -> dict[str, dict[str, Any]]:
    try:
        from .presets import local_specs
    except ImportError:
        return {name: {"name": name, **row} for name, row in _FALLBACK_SPECS.items()}
    return {str(row["name"]): dict(row) for row in local_specs()}


def _roles(names: Sequence[str]) -> dict[str, str]:
    roles: dict[str, str] = {}
    try:
        from .presets import LOCAL_ROLES as roles
    except ImportError:
        pass
    specs = _specs()
    strongest = max(names, key=lambda n: int(specs.get(n, {}).get("tier", 1)))
    return {role: (chosen if chosen in names else strongest) for role, chosen in roles.items()}


def pool_config(servers: Sequence[LocalServer]) -> dict[str, Any]:
    """A pool.yaml mapping with one ``openai-api`` model per running server."""
    specs = _specs()
    models = []
    for s in servers:
        row = {k: v for k, v in specs.get(s.name, {"name": s.name}).items() if k not in ("backend", "path")}
        models.append({
            **row, "name": s.name, "backend": "openai-api", "base_url": s.url, "model": s.name,
            # llama-cpp-python's server takes {"type": "json_object", "schema": …}, not "json_schema"
            "structured": "json_object_schema", "timeout_s": 600.0,
        })
    return {"models": models, **_roles([s.name for s in servers])}


def _wait_ready(server: LocalServer, deadline: float) -> None:
    while True:
        code = server.process.poll()
        if code is not None:
            raise ModelUnavailableError(
                f"llama.cpp server for '{server.name}' exited with code {code} before answering: {server.tail()}"
            )
        try:
            with urllib.request.urlopen(server.url + "/models", timeout=2) as resp:  # noqa: S310 - local URL
                if resp.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        if time.monotonic() > deadline:
            raise ModelUnavailableError(
                f"llama.cpp server for '{server.name}' did not answer GET {server.url}/models in time: {server.tail()}"
            )
        time.sleep(0.25)


def stop(servers: Sequence[LocalServer], grace_s: float = STOP_GRACE_S) -> None:
    """Terminate every server, then kill those still running after ``grace_s``."""
    for s in servers:
        if s.process.poll() is None:
            s.process.terminate()
    deadline = time.monotonic() + grace_s
    for s in servers:
        try:
            s.process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            s.process.kill()
            s.process.wait()


def _command(name: str, path: Path, host: str, port: int, n_ctx: int, threads: int) -> list[str]:
    return [
        sys.executable, "-m", "llama_cpp.server", "--model", str(path), "--host", host, "--port", str(port),
        "--n_ctx", str(n_ctx), "--n_threads", str(threads), "--n_threads_batch", str(threads),
        "--model_alias", name,
    ]


@contextmanager
def start_servers(
    names: Sequence[str],
    host: str = "127.0.0.1",
    port_base: int = 8081,
    threads: int | None = None,
    *,
    timeout_s: float = 180.0,
) -> Iterator[ServerGroup]:
    """Run one llama.cpp server per pulled model ``names[i]`` on port ``port_base + i``.

    Yields once every server answers ``GET /v1/models``; on exit (normal, error, Ctrl-C)
    stops them all. Raises a one-line error for a missing server extra, a model that is
    not pulled, a busy port, or a server that exits or stays silent (with its last output).
    """
    if not server_installed():
        raise ConfigError(f"the llama.cpp server is not installed: {INSTALL_HINT}")
    if not names:
        raise ConfigError("no models to serve; name at least one catalog model")
    specs = _specs()
    paths: dict[str, Path] = {}
    for name in dict.fromkeys(names):
        entry(name)
        found = pulled_path(name)
        if found is None:
            raise ModelNotFoundError(f"model '{name}' is not pulled: run `orchestrion models pull {name}`")
        paths[name] = found
    if threads is None:
        from .llama_cpp import default_threads

        threads = default_threads()
    logs = Path(tempfile.mkdtemp(prefix="orchestrion-llama-server-"))
    group = ServerGroup()
    try:
        for i, (name, path) in enumerate(paths.items()):
            port = port_base + i
            if not _port_free(host, port):
                raise ConfigError(f"port {port} on {host} is in use (model '{name}'); pass another --port-base")
            n_ctx = int(specs.get(name, {}).get("context_size", 2048))
            log = logs / f"{name}.log"
            with log.open("wb") as fh:
                proc = subprocess.Popen(  # noqa: S603 - our own interpreter and arguments
                    _command(name, path, host, port, n_ctx, threads), stdin=subprocess.DEVNULL,
                    stdout=fh, stderr=subprocess.STDOUT, start_new_session=True,
                )
            group.servers.append(LocalServer(name, path, host, port, n_ctx, proc, log))
        deadline = time.monotonic() + timeout_s
        for server in group.servers:
            _wait_ready(server, deadline)
        yield group
    finally:
        stop(group.servers)
        shutil.rmtree(logs, ignore_errors=True)
