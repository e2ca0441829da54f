"""The trace viewer: its JSON API over real episodes, and the page in a real headless Chromium.

The browser is Debian's ``chromium`` driven by Playwright's Python API (never a downloaded
browser). Screenshots land in ``test-artifacts/`` at the repository root.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from orchestrion import Pool, ScriptedModel, ToolRegistry, TraceStore, solve
from orchestrion.serve import _viewer_data as data
from orchestrion.serve.viewer import create_app, export_static
from orchestrion.tools.agents import agent_tools
from tests.helpers import CrashTool as Crash
from tests.helpers import SlowTool as Slow

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
PARA_ACTION = json.dumps({"thought": "split", "calls": [{"tool": "slow", "input": str(i)} for i in range(3)],
                          "final": False})


def milestone_model(plan: dict[str, Any]) -> ScriptedModel:
    """Replies by prompt kind: milestone steps (first "go", then done), the plan, agent and synthesis text."""
    steps = iter([{"thought": "t", "milestone": "gather"}])

    def reply(messages: Any, config: Any) -> str:
        if config.json_schema is not None and "subtasks" in config.json_schema.get("properties", {}):
            return json.dumps(plan)
        if config.json_schema is not None:
            return json.dumps(next(steps, {"thought": "t", "done": True, "milestone": ""}))
        return "final answer"

    return ScriptedModel(reply, name="orch")


def sub(id: str, task: str, tool: str = "slow", deps: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"id": id, "task": task, "tool": tool, "deps": list(deps)}


@dataclass
class Episodes:
    store: TraceStore
    para: str
    direct: str
    milestone: str


def _score(store: TraceStore, episode_id: str, score: float) -> None:
    store.submit("UPDATE episodes SET meta = json_patch(meta, ?) WHERE id = ?",
                 (json.dumps({"score": score}), episode_id))


async def _record(store: TraceStore) -> Episodes:
    store.submit("INSERT INTO runs (id, created, kind, config, status) VALUES (?,?,?,?,?)",
                 ("run-a", time.time(), "eval", json.dumps({"dataset": "arith"}), "done"))
    # para: one invalid output (recorded, repaired), then a round of three parallel 0.3 s tool calls
    orch = ScriptedModel(["I think we should add", PARA_ACTION, json.dumps({"thought": "t", "calls": [],
                                                                            "final": True}),
                          "answer: 4"], name="orch")
    para = await solve("What is 2+2?", strategy="para", pool=Pool.from_models([orch]), tools=ToolRegistry([Slow(0.3)]),
                       store=store, run_id="run-a")
    direct = await solve("What is 2+3?", strategy="direct", pool=Pool.from_models([ScriptedModel(["6"], name="m")]),
                         tools=ToolRegistry([]), store=store, run_id="run-a")
    plan = {"subtasks": [sub("a", "A"), sub("b", "B"), sub("c", "combine", deps=("a", "b"))]}
    milestone = await solve("Plan it", strategy="milestone", pool=Pool.from_models([milestone_model(plan)]),
                            tools=ToolRegistry([Slow(0.1), *agent_tools()]), store=store)
    assert para.status == direct.status == milestone.status == "ok"
    _score(store, para.trace_id, 1.0)
    _score(store, direct.trace_id, 0.0)
    store.flush()
    return Episodes(store, para.trace_id, direct.trace_id, milestone.trace_id)


@pytest.fixture(scope="module")
def episodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Episodes]:
    store = TraceStore(tmp_path_factory.mktemp("viewer") / "traces.db")
    yield asyncio.run(_record(store))
    store.close()


@pytest.fixture(scope="module")
def client(episodes: Episodes) -> TestClient:
    return TestClient(create_app(episodes.store))


def _ids(client: TestClient, query: str = "") -> set[str]:
    res = client.get("/api/episodes" + query)
    assert res.status_code == 200, res.text
    return {e["id"] for e in res.json()["episodes"]}


# -- the JSON API ------------------------------------------------------------------------------
def test_filters_select_the_right_episodes(client: TestClient, episodes: Episodes) -> None:
    everything = {episodes.para, episodes.direct, episodes.milestone}
    assert _ids(client) == everything
    assert _ids(client, "?strategy=milestone") == {episodes.milestone}
    assert _ids(client, "?run=run-a") == {episodes.para, episodes.direct}
    assert _ids(client, "?run=-") == {episodes.milestone}
    assert _ids(client, "?dataset=arith") == {episodes.para, episodes.direct}
    assert _ids(client, "?correct=yes") == {episodes.para}
    assert _ids(client, "?correct=no") == {episodes.direct}
    assert _ids(client, "?correct=unknown") == {episodes.milestone}  # never scored: unknown, not wrong
    assert _ids(client, "?strategy=para&correct=no") == set()
    assert client.get("/api/episodes?correct=maybe").status_code == 400


def test_facets_list_strategies_datasets_and_runs(client: TestClient) -> None:
    facets = client.get("/api/facets").json()
    assert facets["strategies"] == ["direct", "milestone", "para"]
    assert facets["datasets"] == ["arith"]
    runs = {r["id"]: r for r in facets["runs"]}
    assert runs["run-a"]["episodes"] == 2 and runs["run-a"]["scored"] == 2 and runs["run-a"]["correct"] == 1
    assert runs["run-a"]["kind"] == "eval" and runs["-"]["episodes"] == 1


def test_para_episode_has_span_graph_overlapping_tools_and_decisions(client: TestClient, episodes: Episodes) -> None:
    res = client.get(f"/api/episodes/{episodes.para[:10]}")  # a prefix is enough
    assert res.status_code == 200
    d = res.json()
    assert d["summary"]["id"] == episodes.para and d["summary"]["correct"] is True
    assert d["graph"]["mode"] == "spans" and len(d["graph"]["nodes"]) == len(d["spans"])
    assert len(d["graph"]["edges"]) == len(d["spans"]) - 1  # a tree under the episode span
    tools = [s for s in d["spans"] if s["kind"] == "tool"]
    assert len(tools) == 3 and max(t["start"] for t in tools) < min(t["end"] for t in tools)
    assert {t["lane"] for t in tools} == {"tool"}
    assert [x["valid"] for x in d["decisions"]][:2] == [False, True]
    assert d["decisions"][0]["output"] == "I think we should add" and "JSON" in d["decisions"][0]["error"]
    assert d["decisions"][1]["messages"][0]["role"] == "system"
    root = next(s for s in d["spans"] if s["kind"] == "episode")
    assert root["input_tokens"] == d["summary"]["input_tokens"] > 0  # rolled up to the root


def test_plan_episode_has_its_dag(client: TestClient, episodes: Episodes) -> None:
    d = client.get(f"/api/episodes/{episodes.milestone}").json()
    g = d["graph"]
    assert g["mode"] == "plan"
    names = {n["id"]: n["label"].split("\n")[0] for n in g["nodes"]}
    assert sorted(names.values()) == ["a", "b", "c"]
    assert sorted((names[e["from"]], names[e["to"]]) for e in g["edges"]) == [("a", "c"), ("b", "c")]
    assert any(e["kind"] == "milestone" for e in d["events"])
    assert client.get("/api/episodes/nosuchid").status_code == 404


def test_skipped_subtasks_join_the_dag_from_the_plan_event(store: TraceStore) -> None:
    plan = {"subtasks": [sub("x", "X", tool="crash"), sub("y", "Y", deps=("x",))]}
    res = asyncio.run(solve("Fail it", strategy="milestone", pool=Pool.from_models([milestone_model(plan)]),
                            tools=ToolRegistry([Slow(0), Crash(), *agent_tools()]), store=store))
    d = data.episode_detail(store, res.trace_id)
    assert d is not None
    nodes = {n["label"].split("\n")[0]: n for n in d["graph"]["nodes"]}
    assert nodes["x"]["status"] == "exec_error" and nodes["x"]["span_id"]
    assert nodes["y"]["status"] == "skipped" and nodes["y"]["span_id"] is None  # never ran: no span
    assert [(e["from"], e["to"]) for e in d["graph"]["edges"]] == [(nodes["x"]["id"], nodes["y"]["id"])]


def test_score_and_correct_rules() -> None:
    assert data.score_of({"options": {}}) == (None, None)
    assert data.score_of({"score": 1}) == (1.0, True)
    assert data.score_of({"result": {"score": 0.0}}) == (0.0, False)
    assert data.score_of({"score": 0.2, "correct": True}) == (0.2, True)
    assert data.score_of({"score": True}) == (None, None)  # a bool is not a score


# -- the page in Chromium ------------------------------------------------------------------------
class Chromium:
    """Debian's Chromium, launched on first use, so that a missing browser fails the test itself."""

    def __init__(self) -> None:
        self._playwright: Any = None
        self._browser: Any = None

    def new_page(self, **kwargs: Any) -> Any:
        if self._browser is None:
            if not CHROMIUM.exists():
                pytest.fail(f"Debian's chromium is missing at {CHROMIUM}: install it (apt-get install -y chromium); "
                            "CI does", pytrace=False)
            from playwright.sync_api import sync_playwright

            self._playwright = sync_playwright().start()
            self._browser = self._playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        return self._browser.new_page(**kwargs)

    def close(self) -> None:
        if self._browser is not None:
            self._browser.close()
            self._playwright.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Chromium]:
    chromium = Chromium()
    yield chromium
    chromium.close()


@pytest.fixture(scope="module")
def server(episodes: Episodes) -> Iterator[str]:
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    srv = uvicorn.Server(uvicorn.Config(create_app(episodes.store), log_level="warning", lifespan="off"))
    thread = threading.Thread(target=srv.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 15
    while not srv.started and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert srv.started, "the viewer server did not start"
    yield f"http://127.0.0.1:{sock.getsockname()[1]}/"
    srv.should_exit = True
    thread.join(10)
    sock.close()


def _open(browser: Chromium, url: str) -> tuple[Any, list[str], list[str]]:
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    errors: list[str] = []
    requests: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda m: errors.append(f"{m.text} {m.location.get('url', '')}") if m.type == "error" else None)
    page.on("request", lambda r: requests.append(r.url))
    page.goto(url)
    return page, errors, requests


def _show(page: Any, base: str, episode_id: str) -> dict[str, Any]:
    page.goto(f"{base}#/episode/{episode_id}")
    page.wait_for_selector("body[data-ready=episode]", timeout=15_000)
    assert page.locator("h1").inner_text().endswith(episode_id)
    result: dict[str, Any] = page.evaluate("""() => {
        const v = window.orchestrionView;
        return {mode: v.episode.graph.mode, graphIds: v.episode.graph.nodes.map(n => n.id),
                drawn: Object.keys(v.network.getPositions()), canvas: !!document.querySelector('#graph canvas')};
    }""")
    assert result["canvas"], "vis-network drew no canvas"
    assert sorted(result["drawn"]) == sorted(result["graphIds"]) and result["drawn"], "graph nodes are not all drawn"
    return result


def _check_views(page: Any, base: str, episodes: Episodes, name: str) -> None:
    # the list, then one filter applied through the page's own select
    page.wait_for_selector("body[data-ready=list]", timeout=15_000)
    assert page.locator("tr.episode-row").count() == 3
    page.select_option("select[name=strategy]", "milestone")
    page.wait_for_function("location.hash.includes('strategy=milestone') && document.body.dataset.ready === 'list'")
    page.wait_for_function("document.querySelectorAll('tr.episode-row').length === 1")
    assert page.locator("tr.episode-row").get_attribute("data-id") == episodes.milestone
    page.screenshot(path=str(ARTIFACTS / f"viewer-{name}-list.png"), full_page=True)

    # the para episode: span graph, three overlapping tool bars, each decision's raw output
    para = _show(page, base, episodes.para)
    assert para["mode"] == "spans"
    page.wait_for_selector("#timeline[data-drawn] .vis-item.kind-tool", timeout=10_000)
    page.wait_for_function(
        """() => {  // the three parallel calls stack into three rows of the tool lane
        const tops = [...document.querySelectorAll('#timeline .vis-item.kind-tool')]
          .map(e => e.getBoundingClientRect().top);
        return tops.length === 3 && new Set(tops).size === 3; }""",
        timeout=10_000,
    )
    bars = page.locator("#timeline .vis-item.kind-tool")
    assert bars.count() == 3
    boxes = [bars.nth(i).bounding_box() for i in range(3)]
    assert all(b is not None and b["width"] > 20 for b in boxes), boxes
    a, b = boxes[0], boxes[1]
    assert a["x"] < b["x"] + b["width"] and b["x"] < a["x"] + a["width"], f"parallel bars do not overlap: {a} {b}"
    assert a["y"] != b["y"], "overlapping bars should be stacked in their lane"
    assert page.locator("#timeline .vis-item").count() >= 8  # episode, rounds, decisions, calls, tools
    raw = page.locator("pre.raw-output")
    assert raw.nth(0).inner_text() == "I think we should add"
    assert '"tool": "slow"' in raw.nth(1).inner_text()
    assert "Error:" in page.locator("article.decision.invalid").first.inner_text()
    page.locator("#timeline .vis-item.kind-tool").first.click()
    page.wait_for_selector("#span-detail h3")
    assert "did " in page.locator("#span-detail").inner_text()
    page.screenshot(path=str(ARTIFACTS / f"viewer-{name}-para.png"), full_page=True)

    # the plan episode: three DAG nodes, two edges into c
    plan = _show(page, base, episodes.milestone)
    assert plan["mode"] == "plan" and len(plan["graphIds"]) == 3
    edges = page.evaluate(
        "() => window.orchestrionView.episode.graph.nodes"
        ".map(n => window.orchestrionView.network.getConnectedEdges(n.id).length)"
    )
    assert sorted(edges) == [1, 1, 2]
    assert page.locator("#timeline .vis-item.kind-node").count() == 3
    assert page.locator("tr.event-milestone").count() == 1
    page.screenshot(path=str(ARTIFACTS / f"viewer-{name}-plan.png"), full_page=True)


def test_served_page_shows_list_dag_timeline_and_decisions(browser: Chromium, server: str, episodes: Episodes) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page, errors, requests = _open(browser, server)
    try:
        _check_views(page, server, episodes, "served")
    finally:
        page.close()
    assert not errors, errors
    assert all(u.startswith(server) for u in requests), [u for u in requests if not u.startswith(server)]


def test_static_export_opens_from_disk(browser: Chromium, episodes: Episodes, tmp_path: Path) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    index = export_static(episodes.store, tmp_path / "bundle")
    assert index == tmp_path / "bundle" / "index.html"
    assert {p.name for p in index.parent.iterdir()} >= {"index.html", "app.js", "app.css", "data.js", "vendor"}
    base = index.as_uri()
    page, errors, requests = _open(browser, base)
    try:
        _check_views(page, base, episodes, "static")
    finally:
        page.close()
    assert not errors, errors
    assert requests and all(u.startswith("file://") for u in requests), [u for u in requests if not u.startswith("file://")]
