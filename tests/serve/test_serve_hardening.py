"""`orchestrion serve` and the viewer under hostile or failing input (issue 22): a bad option is a
400 that leaves the connection usable and counts no episode, a failed episode is a 502 with no
upstream URL in it (a 200 only when asked), and the viewer's damaged rows and keys."""

from __future__ import annotations

import base64
import sqlite3
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from orchestrion import Pool, TraceStore, solve
from orchestrion.serve.viewer import create_app as viewer_app
from tests.helpers import free_port

from .test_server import ASK, direct_pool, episodes, post, serving


def dead_pool(tmp_path: Path, key_env: str | None = None) -> tuple[Pool, str]:
    """A pool whose only model's server is down; returns it and that server's URL."""
    url = f"http://127.0.0.1:{free_port()}/v1"
    key = f", api_key_env: {key_env}" if key_env else ""
    path = tmp_path / "dead.yaml"
    path.write_text(f"models:\n  - {{name: dead, base_url: '{url}', timeout_s: 2, max_retries: 0{key}}}\n")
    return Pool.resolve(path), url


def _metric(text: str, name: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(name)]


@pytest.mark.parametrize("options", [{"max_rounds": -5}, {"max_rounds": 0}, {"decision_temperature": "NaN"},
                                     {"max_parallel": 10**30}])
def test_bad_option_is_400_and_the_connection_stays_usable(store: TraceStore, options: dict[str, Any]) -> None:
    with serving(direct_pool(), store) as url, httpx.Client(timeout=30) as http:
        bad = http.post(url + "/chat/completions", json={"model": "orchestrion/para", "messages": ASK,
                                                         "orchestrion": {"options": options}})
        assert bad.status_code == 400, bad.text
        error = bad.json()["error"]
        assert error["code"] == "invalid_option" and "strategy 'para': option" in error["message"]
        assert "\n" not in error["message"] and "Traceback" not in bad.text
        good = http.post(url + "/chat/completions", json={"model": "orchestrion/direct", "messages": ASK})
        assert good.status_code == 200 and good.json()["choices"][0]["message"]["content"] == "5"
        metrics = http.get(url.removesuffix("/v1") + "/metrics").text
    assert _metric(metrics, "orchestrion_episodes_total{") == [
        'orchestrion_episodes_total{status="ok",strategy="direct"} 1.0']  # the refused request counted no episode
    assert [r["status"] for r in episodes(store)] == ["ok"]


def test_failed_episode_is_502_without_the_upstream_url(store: TraceStore, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORCH_TEST_UPSTREAM_KEY", "sk-test-0123456789abcdefXYZ")
    pool, upstream = dead_pool(tmp_path, key_env="ORCH_TEST_UPSTREAM_KEY")
    body = {"model": "orchestrion/direct", "messages": ASK}
    with serving(pool, store) as url:
        failed = post(url, body)
        streamed = httpx.post(url + "/chat/completions", json={**body, "stream": True}, timeout=30)
        kept = post(url, {**body, "orchestrion": {"errors_as_200": True}})
    assert failed.status_code == 502, failed.text
    error = failed.json()["error"]
    assert error["code"] == "episode_failed" and error["type"] == "server_error"
    assert "is unreachable" in error["message"] and failed.headers["X-Orchestrion-Status"] == "error"
    assert streamed.status_code == 200 and '"code":"episode_failed"' in streamed.text
    assert streamed.text.rstrip().endswith("data: [DONE]") and '"finish_reason":"stop"' not in streamed.text
    assert kept.status_code == 200 and kept.json()["orchestrion"]["status"] == "error"
    assert "is unreachable" in kept.json()["orchestrion"]["error"]
    for response in (failed, streamed, kept):
        text = response.text + str(response.headers)
        host_port = upstream.removeprefix("http://").removesuffix("/v1")
        assert host_port not in text and "http://" not in text and "sk-test" not in text
    assert [r["status"] for r in episodes(store)] == ["error"] * 3  # each recorded, with its real error
    assert upstream in (episodes(store)[0]["error"] or "")


def test_errors_as_200_server_flag_keeps_the_old_answer(store: TraceStore, tmp_path: Path) -> None:
    pool, _ = dead_pool(tmp_path)
    with serving(pool, store, errors_as_200=True) as url:
        kept = post(url, {"model": "orchestrion/direct", "messages": ASK})
        refused = post(url, {"model": "orchestrion/direct", "messages": ASK, "orchestrion": {"errors_as_200": False}})
    assert kept.status_code == 200 and kept.json()["choices"][0]["finish_reason"] == "stop"
    assert kept.json()["orchestrion"]["status"] == "error"
    assert refused.status_code == 502


def test_live_servers_runs_are_left_alone_and_dead_ones_are_interrupted(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    store = TraceStore(db)
    for run, status in (("dead-run", "running"), ("stopped-run", "stopped")):  # as a kill -9 leaves them
        store.create_run(run, "serve", {}, status=status)
        store.start_episode(f"{run}-ep", run_id=run, task_id="t", epoch=0, strategy="direct", task={"prompt": "x"},
                            started=1.0, meta={})
    store.flush()
    with serving(direct_pool(), store):
        store.flush()
        live = store.query("SELECT id FROM runs WHERE kind = 'serve' AND status = 'running'")
        assert [r["id"] for r in live] != ["dead-run"] and len(live) == 1
        store.start_episode("live-ep", run_id=live[0]["id"], task_id="t", epoch=0, strategy="direct",
                            task={"prompt": "x"}, started=2.0, meta={})
        store.flush()
        with serving(direct_pool(), store):  # a second server on the same database, while the first lives
            pass
        assert store.episode("live-ep").status == "running"  # type: ignore[union-attr]
    status = {r["id"]: r["status"] for r in store.query("SELECT id, status FROM episodes")}
    assert status == {"dead-run-ep": "interrupted", "stopped-run-ep": "running", "live-ep": "running"}
    runs = {r["id"]: r["status"] for r in store.query("SELECT id, status FROM runs")}
    assert runs["dead-run"] == "interrupted" and runs["stopped-run"] == "stopped"
    store.close()


async def _one_episode(store: TraceStore) -> str:
    result = await solve("What is 2+3?", strategy="direct", pool=direct_pool(), store=store)
    return result.trace_id


@pytest.mark.parametrize(("column", "value"), [("started", "garbage"), ("task", "{not json"),
                                               ("meta", "[1, 2"), ("ended", "x")])
def test_viewer_damaged_row_is_a_one_line_4xx(store: TraceStore, column: str, value: str) -> None:
    import asyncio

    trace_id = asyncio.run(_one_episode(store))
    conn = sqlite3.connect(store.path)
    conn.execute(f"UPDATE episodes SET {column} = ? WHERE id = ?", (value, trace_id))
    conn.commit()
    conn.close()
    with TestClient(viewer_app(store), raise_server_exceptions=False, base_url="http://localhost") as http:
        res = http.get(f"/api/episodes/{trace_id}")
        listed = http.get("/api/episodes")
    assert res.status_code in (200, 422), res.text
    if res.status_code == 422:
        assert "its stored record is damaged" in res.json()["detail"] and "Traceback" not in res.text
    assert listed.status_code in (200, 422) and "Traceback" not in listed.text


def test_viewer_with_a_key_wants_it_on_every_path(store: TraceStore) -> None:
    basic = "Basic " + base64.b64encode(b"anyone:s3cret").decode()
    with TestClient(viewer_app(store, api_key="s3cret")) as http:
        for path in ("/", "/api/episodes", "/api/facets", "/app.js"):
            refused = http.get(path)
            assert refused.status_code == 401 and refused.headers["WWW-Authenticate"].startswith("Basic")
            assert http.get(path, headers={"Authorization": "Bearer wrong"}).status_code == 401
            assert http.get(path, headers={"Authorization": "Bearer s3cret"}).status_code == 200
            assert http.get(path, headers={"Authorization": basic}).status_code == 200
