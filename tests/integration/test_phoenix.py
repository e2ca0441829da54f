"""OpenTelemetry into a real Phoenix: `orchestrion run --otlp-endpoint` sends a para episode to a
`phoenix serve` on free ports, and Phoenix's REST API gives the spans back with their parents,
kinds and token counts. The episode's models are a loopback OpenAI-compatible server, so the
run is deterministic and fast; Phoenix itself is the real thing."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("phoenix", reason="arize-phoenix is not installed (it is in the dev extra)")

sys.path.insert(0, str(Path(__file__).parents[1]))
from fake_openai_server import run_in_process  # noqa: E402

from tests.helpers import free_port

ROUND1 = json.dumps({"thought": "compute", "calls": [{"tool": "calculator", "input": "2+3"},
                                                     {"tool": "reasoner", "input": "2 plus 3", "model": "fake"}]})
ROUND2 = json.dumps({"thought": "done", "calls": [], "final": True})


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


@pytest.fixture
def phoenix(tmp_path: Path) -> Iterator[str]:
    """A `phoenix serve` on free loopback ports with its files in tmp; yields its base URL."""
    exe = shutil.which("phoenix", path=str(Path(sys.executable).parent))
    if exe is None:
        pytest.skip("the phoenix command is not installed next to this Python")
    port = free_port()
    env = {**os.environ, "PHOENIX_PORT": str(port), "PHOENIX_GRPC_PORT": str(free_port()), "PHOENIX_HOST": "127.0.0.1",
           "PHOENIX_WORKING_DIR": str(tmp_path / "phoenix"), "PHOENIX_TELEMETRY_ENABLED": "false"}
    log = (tmp_path / "phoenix.log").open("wb")
    proc = subprocess.Popen([exe, "serve"], env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                get_json(f"{base}/v1/projects")
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError("phoenix serve did not start: "
                                         + (tmp_path / "phoenix.log").read_text()[-2000:]) from None
                time.sleep(0.5)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        log.close()


def phoenix_spans(base: str, trace_id: str, expected: int) -> list[dict[str, Any]]:
    """The trace's spans from Phoenix's REST API, once it has ingested ``expected`` of them."""
    url = f"{base}/v1/projects/default/spans?trace_id={trace_id}&limit=1000&sort=start_time&order=asc"
    deadline = time.monotonic() + 30
    while True:
        spans: list[dict[str, Any]] = get_json(url)["data"]
        if len(spans) >= expected or time.monotonic() > deadline:
            return spans
        time.sleep(0.3)


@pytest.mark.timeout(150)
def test_a_para_episode_reaches_phoenix_with_its_structure_and_tokens(phoenix: str, tmp_path: Path) -> None:
    db = tmp_path / "traces.db"
    env = {**os.environ, "ORCHESTRION_DB": str(db)}
    with run_in_process("--reply", ROUND1, "--reply", "2 plus 3 is 5", "--reply", ROUND2, "--reply", "5") as url:
        pool = tmp_path / "pool.yaml"
        pool.write_text(f"models:\n  - name: fake\n    backend: openai-api\n    base_url: {url}\n"
                        "    price: {input_per_mtok: 1.0, output_per_mtok: 2.0}\n")
        res = subprocess.run([sys.executable, "-m", "orchestrion", "run", "What is 2+3?", "--strategy", "para",
                              "--pool", str(pool), "--json", "--otlp-endpoint", f"{phoenix}/v1/traces"],
                             capture_output=True, text=True, timeout=120, env=env)
    assert res.returncode == 0, res.stderr
    assert "warning" not in res.stderr, res.stderr
    result = json.loads(res.stdout)
    trace_id = result["trace_id"]

    from orchestrion import TraceStore

    store = TraceStore(db)
    rows = store.spans(trace_id)
    store.close()
    spans = phoenix_spans(phoenix, trace_id, len(rows))
    assert len(spans) == len(rows) >= 8

    by_id = {s["context"]["span_id"]: s for s in spans}
    by_orch = {s["attributes"]["orchestrion.span_id"]: s for s in spans}
    assert set(by_orch) == {r.id for r in rows}
    for row in rows:  # each Phoenix span's parent is the span made from the stored parent
        span = by_orch[row.id]
        assert span["context"]["trace_id"] == trace_id
        if row.parent_id is None:
            assert span["parent_id"] is None
        else:
            assert span["parent_id"] == by_orch[row.parent_id]["context"]["span_id"]
    [root] = [s for s in spans if s["parent_id"] is None]
    assert root["name"] == "invoke_workflow para" and root["status_code"] == "OK"
    assert root["attributes"]["orchestrion.cost_usd"] == pytest.approx(result["cost_usd"])

    def parent_kind(span: dict[str, Any]) -> str:
        return str(by_id[span["parent_id"]]["attributes"]["orchestrion.kind"])

    llm = [s for s in spans if s["span_kind"] == "LLM"]
    tools = [s for s in spans if s["span_kind"] == "TOOL"]
    agents = [s for s in spans if s["span_kind"] == "AGENT"]
    assert [s["attributes"]["gen_ai.tool.name"] for s in tools] == ["calculator"]
    assert [s["attributes"]["gen_ai.agent.name"] for s in agents] == ["reasoner"]
    assert sorted(parent_kind(s) for s in llm) == ["agent", "answer", "decision", "decision"]
    assert parent_kind(tools[0]) == "round" and parent_kind(agents[0]) == "round"
    # token counts: per call as sent, and Phoenix's own token fields agree; they add up to the episode
    for s in llm:
        a = s["attributes"]
        assert a["gen_ai.usage.input_tokens"] == a["llm.token_count.prompt"] > 0
        assert a["gen_ai.usage.output_tokens"] == a["llm.token_count.completion"] > 0
        assert a["gen_ai.request.model"] == "fake"
    assert sum(s["attributes"]["gen_ai.usage.input_tokens"] for s in llm) == result["usage"]["input_tokens"]
    assert sum(s["attributes"]["gen_ai.usage.output_tokens"] for s in llm) == result["usage"]["output_tokens"]
