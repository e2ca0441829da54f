"""start_servers' process handling, with stand-in processes instead of llama.cpp (fast, no model)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from orchestrion._errors import ConfigError, ModelNotFoundError, ModelUnavailableError
from orchestrion.models import local_server
from orchestrion.models.local_server import LocalServer, free_port, start_servers, stop

# A stand-in server: answers GET /v1/models on the port it is given, or misbehaves.
GOOD = """
import sys, http.server
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/v1/models" else 404); self.end_headers(); self.wfile.write(b"{}")
    def log_message(self, *a): pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""
CRASH = "import sys; print('loading model...'); sys.stderr.write('fatal: bad magic in model file\\n'); sys.exit(3)"
SILENT = "import time; print('warming up', flush=True); time.sleep(60)"
STUBBORN = (
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); time.sleep(60)"
)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, str]:
    script = {"code": GOOD}
    monkeypatch.setattr(local_server, "server_installed", lambda: True)
    monkeypatch.setattr(local_server, "pulled_path", lambda name: tmp_path / f"{name}.gguf")
    monkeypatch.setattr(local_server, "_command",
                        lambda name, path, host, port, n_ctx,
                        threads: [sys.executable, "-c", script["code"], str(port)])
    return script


def test_servers_start_answer_and_stop(fake: dict[str, str]) -> None:
    base = free_port()
    with start_servers(["smollm2-135m", "qwen2.5-coder-0.5b"], port_base=base, threads=1) as group:
        servers = list(group)
        assert [s.port for s in servers] == [base, base + 1]
        assert all(s.process.poll() is None for s in servers) and group.dead() is None
    assert all(s.process.poll() is not None for s in servers)


def test_a_crashing_server_is_one_line_with_its_output(fake: dict[str, str]) -> None:
    fake["code"] = CRASH
    with pytest.raises(ModelUnavailableError) as info:
        with start_servers(["smollm2-135m"], port_base=free_port(), threads=1):
            pass
    msg = str(info.value)
    assert "\n" not in msg and "'smollm2-135m'" in msg and "code 3" in msg and "fatal: bad magic" in msg


def test_a_silent_server_times_out_and_is_stopped(fake: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    fake["code"] = SILENT
    started: list[LocalServer] = []
    real_wait = local_server._wait_ready
    monkeypatch.setattr(local_server, "_wait_ready", lambda s, d: (started.append(s), real_wait(s, d))[1])
    with pytest.raises(ModelUnavailableError, match="did not answer GET .* in time: warming up"):
        with start_servers(["smollm2-135m"], port_base=free_port(), threads=1, timeout_s=1.0):
            pass
    assert started and started[0].process.poll() is not None


def test_stop_kills_what_ignores_terminate(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", STUBBORN], stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
    server = LocalServer("x", tmp_path, "127.0.0.1", 1, 1, proc, tmp_path / "log")
    t0 = time.monotonic()
    stop([server], grace_s=0.5)
    assert proc.returncode == -9 and time.monotonic() - t0 < 5


def test_busy_port_unpulled_model_and_missing_extra(fake: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        with pytest.raises(ConfigError, match="in use"):
            with start_servers(["smollm2-135m"], port_base=busy.getsockname()[1]):
                pass
    monkeypatch.setattr(local_server, "pulled_path", lambda name: None)
    with pytest.raises(ModelNotFoundError, match="orchestrion models pull qwen2.5-coder-1.5b"):
        with start_servers(["qwen2.5-coder-1.5b"]):
            pass
    monkeypatch.setattr(local_server, "server_installed", lambda: False)
    from orchestrion.cli import app

    res = CliRunner().invoke(app, ["models", "serve", "smollm2-135m"])
    assert res.exit_code == 2 and "pip install 'orchestrion[server-local]'" in res.output  # markup did not eat it
