"""The trace viewer: its JSON API over real episodes, and the page in a real headless Chromium.

The browser is Debian's ``chromium`` driven by Playwright's Python API (never a downloaded
browser). Screenshots land in ``$ORCHESTRION_ARTIFACTS`` or else ``test-artifacts/`` at the
repository root (git ignores it); the browser tests print the folder.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from orchestrion import Pool, ScriptedModel, Tool, ToolRegistry, TraceStore, solve
from orchestrion.serve import _viewer_data as data
from orchestrion.serve.viewer import create_app, export_static, watch
from orchestrion.tools.agents import agent_tools
from tests.helpers import CrashTool as Crash
from tests.helpers import SlowTool as Slow
from tests.helpers import TextArgs

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
ARTIFACTS = Path(os.environ.get("ORCHESTRION_ARTIFACTS") or Path(__file__).resolve().parents[2] / "test-artifacts")
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
    same: str  # the para episode's task again, by another strategy: the compare view's pair
    touching: str  # hand-written spans that touch end to start, and one that overlaps them

    @property
    def all(self) -> set[str]:
        return {self.para, self.direct, self.milestone, self.same, self.touching}


# The touching episode's tool spans (start, end) in seconds: a, b and c follow each other with no gap,
# and d overlaps a and b. One row holds a, b and c; d needs a second row.
TOUCHING = {"a": (0.0, 0.4), "b": (0.4, 0.8), "c": (0.8, 1.2), "d": (0.2, 0.6)}


def _touching(store: TraceStore) -> str:
    episode_id, t0 = uuid.uuid4().hex, time.time() - 3600  # the oldest episode: last in the list
    store.submit("INSERT INTO episodes (id, strategy, task, status, answer, started, ended, finished, meta)"
                 " VALUES (?,?,?,?,?,?,?,?,?)", (episode_id, "direct", json.dumps({"prompt": "Touching bars"}), "ok",
                                                 "done", t0, t0 + 1.2, 1, "{}"))
    root = uuid.uuid4().hex
    store.submit("INSERT INTO spans (id, episode_id, parent_id, kind, name, started, ended, status, attrs)"
                 " VALUES (?,?,?,?,?,?,?,?,?)", (root, episode_id, None, "episode", "direct", t0, t0 + 1.2, "ok", "{}"))
    for name, (start, end) in TOUCHING.items():
        store.submit("INSERT INTO spans (id, episode_id, parent_id, kind, name, started, ended, status, attrs)"
                     " VALUES (?,?,?,?,?,?,?,?,?)",
                     (uuid.uuid4().hex, episode_id, root, "tool", name, t0 + start, t0 + end, "ok", "{}"))
    return episode_id


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
    slow = Slow(0.3, reply=lambda t: f"did {t}, 4")  # the 4 supports the synthesis (else direct answers again)
    para = await solve("What is 2+2?", strategy="para", pool=Pool.from_models([orch]), tools=ToolRegistry([slow]),
                       store=store, run_id="run-a")
    direct = await solve("What is 2+3?", strategy="direct", pool=Pool.from_models([ScriptedModel(["6"], name="m")]),
                         tools=ToolRegistry([]), store=store, run_id="run-a")
    plan = {"subtasks": [sub("a", "A"), sub("b", "B"), sub("c", "combine", deps=("a", "b"))]}
    milestone = await solve("Plan it", strategy="milestone", pool=Pool.from_models([milestone_model(plan)]),
                            tools=ToolRegistry([Slow(0.1), *agent_tools()]), store=store)
    same = await solve("What is 2+2?", strategy="direct", pool=Pool.from_models([ScriptedModel(["4"], name="m")]),
                       tools=ToolRegistry([]), store=store)
    assert para.status == direct.status == milestone.status == same.status == "ok"
    _score(store, para.trace_id, 1.0)
    _score(store, direct.trace_id, 0.0)
    touching = _touching(store)
    store.flush()
    return Episodes(store, para.trace_id, direct.trace_id, milestone.trace_id, same.trace_id, touching)


@pytest.fixture(scope="module")
def episodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Episodes]:
    store = TraceStore(tmp_path_factory.mktemp("viewer") / "traces.db")
    yield asyncio.run(_record(store))
    store.close()


@pytest.fixture(scope="module")
def client(episodes: Episodes) -> TestClient:
    return TestClient(create_app(episodes.store), base_url="http://localhost")


def _ids(client: TestClient, query: str = "") -> set[str]:
    res = client.get("/api/episodes" + query)
    assert res.status_code == 200, res.text
    return {e["id"] for e in res.json()["episodes"]}


# -- the JSON API ------------------------------------------------------------------------------
def test_filters_select_the_right_episodes(client: TestClient, episodes: Episodes) -> None:
    assert _ids(client) == episodes.all
    assert _ids(client, "?strategy=milestone") == {episodes.milestone}
    assert _ids(client, "?run=run-a") == {episodes.para, episodes.direct}
    assert _ids(client, "?run=-") == {episodes.milestone, episodes.same, episodes.touching}
    assert _ids(client, "?dataset=arith") == {episodes.para, episodes.direct}
    assert _ids(client, "?correct=yes") == {episodes.para}
    assert _ids(client, "?correct=no") == {episodes.direct}
    # never scored: unknown, not wrong
    assert _ids(client, "?correct=unknown") == {episodes.milestone, episodes.same, episodes.touching}
    assert _ids(client, "?strategy=para&correct=no") == set()
    assert client.get("/api/episodes?correct=maybe").status_code == 400


def test_facets_list_strategies_datasets_and_runs(client: TestClient) -> None:
    facets = client.get("/api/facets").json()
    assert facets["strategies"] == ["direct", "milestone", "para"]
    assert facets["datasets"] == ["arith"]
    runs = {r["id"]: r for r in facets["runs"]}
    assert runs["run-a"]["episodes"] == 2 and runs["run-a"]["scored"] == 2 and runs["run-a"]["correct"] == 1
    assert runs["run-a"]["kind"] == "eval" and runs["-"]["episodes"] == 3


def test_search_matches_every_word_of_the_task_in_any_case(client: TestClient, episodes: Episodes) -> None:
    assert _ids(client, "?q=2%2B2") == {episodes.para, episodes.same}
    assert _ids(client, "?q=WHAT%20is%202%2B3") == {episodes.direct}
    assert _ids(client, "?q=what%20plan") == set()  # every word must be there
    assert _ids(client, "?q=2%2B2&strategy=direct") == {episodes.same}  # search and filters combine
    assert data.matches_text("Plan it", "") and not data.matches_text("Plan it", "plant")


def test_pages_cut_the_newest_first_list_and_count_all(client: TestClient, episodes: Episodes) -> None:
    everything = client.get("/api/episodes").json()
    assert everything["total"] == 5 and everything["offset"] == 0
    order = [e["id"] for e in everything["episodes"]]
    assert order[-1] == episodes.touching  # the oldest
    pages = [client.get(f"/api/episodes?limit=2&offset={o}").json() for o in (0, 2, 4)]
    assert [p["total"] for p in pages] == [5, 5, 5] and [p["count"] for p in pages] == [2, 2, 1]
    assert [e["id"] for p in pages for e in p["episodes"]] == order
    assert client.get("/api/episodes?limit=2&offset=9").json()["episodes"] == []
    assert client.get("/api/episodes?q=2%2B2&limit=1").json()["total"] == 2


def test_episode_lists_the_other_episodes_of_its_task(client: TestClient, episodes: Episodes) -> None:
    para = client.get(f"/api/episodes/{episodes.para}").json()
    assert [o["id"] for o in para["same_task"]] == [episodes.same]
    assert para["same_task"][0]["strategy"] == "direct"
    assert client.get(f"/api/episodes/{episodes.milestone}").json()["same_task"] == []


def test_the_live_stream_never_creates_a_database(tmp_path: Path) -> None:
    from orchestrion.trace import FileWatch

    missing = tmp_path / "missing.db"
    watcher = FileWatch(missing)  # the stream's read-only look at the file
    assert watcher.changed() is None and not missing.exists()
    watcher.close()


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


def test_wall_time_leaves_out_the_wait_for_a_clients_tool_results() -> None:
    from orchestrion.trace.rows import EpisodeRow

    row = EpisodeRow(id="e", run_id=None, task_id=None, epoch=0, strategy="direct", task='{"prompt": "p"}',
                     status="ok", answer="a", error=None, started=100.0, ended=130.0, input_tokens=1,
                     output_tokens=1, cost_usd=None, cost_units=0.0, finished=1, meta='{"client_wait_s": 25.5}')
    summary = data._summary(row, {})
    assert summary["wall_s"] == 4.5 and summary["client_wait_s"] == 25.5  # as serve's latency metric counts it
    assert data._summary(replace(row, meta="{}"), {})["wall_s"] == 30.0


def test_sort_orders_by_any_column_before_paging(client: TestClient, episodes: Episodes) -> None:
    def order(query: str) -> list[str]:
        res = client.get("/api/episodes" + query)
        assert res.status_code == 200, res.text
        return [e["id"] for e in res.json()["episodes"]]

    newest = order("")
    assert order("?sort=-started") == newest and order("?sort=started") == newest[::-1]
    # scored: direct 0.0, para 1.0; the three unscored come last either way, in their newest-first order
    unscored = [i for i in newest if i not in (episodes.para, episodes.direct)]
    assert order("?sort=score") == [episodes.direct, episodes.para, *unscored]
    assert order("?sort=-score") == [episodes.para, episodes.direct, *unscored]
    assert order("?sort=-score&limit=1&offset=1") == [episodes.direct]  # sorted, then paged
    assert order("?sort=score&q=2%2B2") == [episodes.para, episodes.same]  # a search keeps the sort
    assert order("?sort=strategy")[-1] == episodes.para and order("?sort=-strategy")[0] == episodes.para
    by_tokens = client.get("/api/episodes?sort=-tokens").json()["episodes"]
    tokens = [e["input_tokens"] + e["output_tokens"] for e in by_tokens]
    assert tokens == sorted(tokens, reverse=True)
    walls = [e["wall_s"] for e in client.get("/api/episodes?sort=wall").json()["episodes"]]
    assert walls == sorted(walls)
    res = client.get("/api/episodes?sort=colour")
    assert res.status_code == 400 and "sort must be one of" in res.json()["detail"]


def test_summaries_carry_the_answer(client: TestClient, episodes: Episodes) -> None:
    found = {e["id"]: e for e in client.get("/api/episodes").json()["episodes"]}
    assert found[episodes.para]["answer"] == "answer: 4" and found[episodes.direct]["answer"] == "6"
    assert found[episodes.para]["label"] is None and found[episodes.para]["note"] is None


def test_annotation_is_stored_listed_filtered_and_cleared(store: TraceStore) -> None:
    pool = Pool.from_models([ScriptedModel(["ok", "ok"], name="m")])
    first = asyncio.run(solve("one", strategy="direct", pool=pool, tools=ToolRegistry([]), store=store)).trace_id
    second = asyncio.run(solve("two", strategy="direct", pool=pool, tools=ToolRegistry([]), store=store)).trace_id
    api = TestClient(create_app(store), base_url="http://localhost")
    url = f"/api/episodes/{first[:12]}/annotation"
    res = api.post(url, json={"label": "  good   plan ", "note": "splits the task well\n"})
    assert res.status_code == 200, res.text
    assert res.json() == {"id": first, "label": "good plan", "note": "splits the task well"}
    row = store.episode(first)
    assert row is not None and row.meta_value()["annotation"]["label"] == "good plan"
    assert api.get("/api/facets").json()["labels"] == ["good plan"]
    listed = api.get("/api/episodes?label=good%20plan").json()["episodes"]
    assert [(e["id"], e["label"], e["note"]) for e in listed] == [(first, "good plan", "splits the task well")]
    assert api.get(f"/api/episodes/{first}").json()["summary"]["label"] == "good plan"
    assert [e["id"] for e in api.get("/api/episodes?sort=label").json()["episodes"]] == [first, second]
    # refused: not JSON, unknown fields, a label too long, an unknown episode
    assert api.post(url, content=b"label=x", headers={"content-type": "text/plain"}).status_code == 415
    assert api.post(url, json={"label": "x", "colour": "red"}).status_code == 400
    assert api.post(url, json={"label": "x" * 65}).status_code == 400
    assert api.post(url, json={"label": 3}).status_code == 400
    assert api.post("/api/episodes/nosuch/annotation", json={"label": "x"}).status_code == 404
    # a new annotation replaces the old one whole; both empty clears it
    assert api.post(url, json={"label": "retry"}).json()["note"] is None
    assert api.get(f"/api/episodes/{first}").json()["summary"]["note"] is None
    assert api.post(url, json={"label": "", "note": " "}).status_code == 200
    row = store.episode(first)
    assert row is not None and "annotation" not in row.meta_value() and api.get("/api/facets").json()["labels"] == []


def test_charts_give_accuracy_cost_and_latency_per_strategy(client: TestClient, episodes: Episodes) -> None:
    from orchestrion.serve._viewer_charts import charts

    by_run = client.get("/api/charts?by=run").json()
    assert by_run["episodes"] == 5 and [s["strategy"] for s in by_run["series"]] == ["direct", "milestone", "para"]
    para = next(s for s in by_run["series"] if s["strategy"] == "para")
    assert [(p["label"], p["n"], p["accuracy"]) for p in para["points"]] == [("run-a", 1, 1.0)]
    direct = {p["label"]: p for p in next(s for s in by_run["series"] if s["strategy"] == "direct")["points"]}
    assert direct["run-a"]["accuracy"] == 0.0 and direct["(no run)"]["accuracy"] is None  # unscored: unknown
    assert direct["(no run)"]["n"] == 2 and direct["(no run)"]["wall_s"] > 0
    assert client.get("/api/charts?strategy=para").json()["episodes"] == 1  # the list's filters apply
    assert client.get("/api/charts?by=colour").status_code == 400
    summaries = [{"id": str(i), "strategy": "s", "started": float(i), "run_id": None, "finished": True,
                  "correct": i % 2 == 0, "cost_usd": None if i else 0.5, "wall_s": 1.0} for i in range(30)]
    points = charts(summaries)["series"][0]["points"]  # time: at most 12 buckets, each mean over known values
    assert len(points) == 12 and sum(p["n"] for p in points) == 30
    assert points[0]["cost_usd"] == 0.5 and points[0]["costed"] == 1 and points[1]["cost_usd"] is None


def test_action_facets_say_what_a_decision_did() -> None:
    from orchestrion.serve._viewer_diff import action_facets

    para = {"thought": "t", "calls": [{"tool": "slow", "input": "0"}, {"tool": "calc", "input": "1+1"}], "final": False}
    assert action_facets(para) == {"tools": ["slow", "calc"], "inputs": ["0", "1+1"], "final": False}
    assert action_facets({"action": "complete", "answer": "4"})["final"] is True
    assert action_facets({"action": "delegate_task", "task": "look", "tools": ["search"]}) == {
        "tools": [], "inputs": [], "final": False}
    assert action_facets({"subtasks": [{"id": "a", "tool": "python", "task": "run it"}]})["inputs"] == ["run it"]
    assert action_facets(None) == {"tools": [], "inputs": [], "final": None}


# -- the live stream ------------------------------------------------------------------------------
def _direct(store: TraceStore, prompt: str) -> str:
    """Record one direct episode, on a thread of its own (Playwright's sync API holds this thread's loop)."""
    pool = Pool.from_models([ScriptedModel(["ok"], name="m")])
    found: list[str] = []
    thread = threading.Thread(target=lambda: found.append(asyncio.run(solve(
        prompt, strategy="direct", pool=pool, tools=ToolRegistry([]), store=store)).trace_id))
    thread.start()
    thread.join(60)
    assert found, "the episode was not recorded"
    return found[0]


def _announced(base: str, write: Callable[[], str]) -> list[list[str]]:
    """Connect to the stream, wait until it listens, run ``write`` (it returns an episode id), and
    return the change events up to the first that names that episode."""
    import httpx

    seen: list[list[str]] = []
    with httpx.stream("GET", base + "api/stream", timeout=10) as res:
        assert res.status_code == 200 and res.headers["content-type"].startswith("text/event-stream")
        lines = res.iter_lines()
        assert any(line == "event: ready" for line in lines)
        wanted, event = write(), ""
        deadline = time.monotonic() + 20
        for line in lines:  # a silent stream ends in a read timeout, failing the test
            assert time.monotonic() < deadline, f"no change event named {wanted}: {seen}"
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: ") and event == "change":
                seen.append(json.loads(line[6:])["episodes"])
                if wanted in seen[-1]:
                    return seen
    raise AssertionError(f"the stream ended before announcing the episode: {seen}")


def test_stream_announces_writes_of_this_process(tmp_path: Path) -> None:
    store = TraceStore(tmp_path / "live.db")
    try:
        with _serving(store) as base:
            seen = _announced(base, lambda: _direct(store, "written beside the viewer"))
        assert all(ids for ids in seen)  # names episodes: never an unknown change
    finally:
        store.close()


async def test_watch_hears_this_process_on_the_bus_without_the_file(store: TraceStore) -> None:
    stream = watch(store, interval_s=0.05, watch_file=False)
    assert await anext(stream) == set()  # listening
    pool = Pool.from_models([ScriptedModel(["ok"], name="m")])
    res = await solve("heard on the bus", strategy="direct", pool=pool, tools=ToolRegistry([]), store=store)
    heard: set[str] = set()
    while res.trace_id not in heard:  # bounded: a silent bus yields only heartbeats, 15 s apart; the timeout fails
        got = await asyncio.wait_for(anext(stream), 5)
        heard |= got or set()
    await stream.aclose()


def test_stream_announces_writes_of_another_process_from_the_file(tmp_path: Path) -> None:
    viewer_store, writer = TraceStore(tmp_path / "live.db"), TraceStore(tmp_path / "live.db")
    try:
        with _serving(viewer_store) as base:  # the writer's bus is not the viewer's: only the file tells
            _announced(base, lambda: _direct(writer, "written by someone else"))
    finally:
        writer.close()
        viewer_store.close()


async def test_watch_reports_a_commit_that_names_no_episode_as_unknown(store: TraceStore) -> None:
    stream = watch(store, interval_s=0.05)
    assert await anext(stream) == set()  # listening
    store.create_run("run-x", "eval", {})  # a commit, but no episode is running or finished
    await store.aflush()
    got = await asyncio.wait_for(anext(stream), 5)
    assert got == set()  # something was committed, no episode named
    await stream.aclose()


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


@contextmanager
def _serving(store: TraceStore) -> Iterator[str]:
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    srv = uvicorn.Server(uvicorn.Config(create_app(store), log_level="warning", lifespan="off",
                                        timeout_graceful_shutdown=2))
    thread = threading.Thread(target=srv.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 15
    while not srv.started and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert srv.started, "the viewer server did not start"
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/"
    finally:
        srv.should_exit = True
        thread.join(10)
        sock.close()


@pytest.fixture(scope="module")
def server(episodes: Episodes) -> Iterator[str]:
    with _serving(episodes.store) as url:
        yield url


def _artifacts(capsys: pytest.CaptureFixture[str]) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with capsys.disabled():
        print(f"\nviewer screenshots: {ARTIFACTS}")
    return ARTIFACTS


def _open(browser: Chromium, url: str) -> tuple[Any, list[str], list[str]]:
    """A page that records errors and warnings from its console, uncaught exceptions, and every request."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    errors: list[str] = []
    requests: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda m: errors.append(f"{m.type}: {m.text} {m.location.get('url', '')}")
            if m.type in ("error", "warning") else None)
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


def _rows(page: Any, n: int) -> None:
    page.wait_for_function(f"document.body.dataset.ready === 'list' && "
                           f"document.querySelectorAll('tr.episode-row').length === {n}", timeout=15_000)


def _tops(page: Any, selector: str) -> dict[str, float]:
    """Each timeline bar's top edge by its label (the span name)."""
    found: dict[str, float] = page.evaluate(
        "(sel) => Object.fromEntries([...document.querySelectorAll(sel)]"
        ".map(e => [e.textContent.trim(), e.getBoundingClientRect().top]))", selector)
    return found


def _check_views(page: Any, base: str, episodes: Episodes, name: str, out: Path) -> None:
    # the list, then one filter applied through the page's own select
    page.wait_for_selector("body[data-ready=list]", timeout=15_000)
    assert page.locator("tr.episode-row").count() == 5
    page.select_option("select[name=strategy]", "milestone")
    page.wait_for_function("location.hash.includes('strategy=milestone') && document.body.dataset.ready === 'list'")
    page.wait_for_function("document.querySelectorAll('tr.episode-row').length === 1")
    assert page.locator("tr.episode-row").get_attribute("data-id") == episodes.milestone
    page.screenshot(path=str(out / f"viewer-{name}-list.png"), full_page=True)

    # search by task text, through the page's search box (the filter above is kept: cleared first)
    page.goto(f"{base}#/")
    _rows(page, 5)
    page.fill("input[name=q]", "2+2")
    page.press("input[name=q]", "Enter")
    page.wait_for_function("location.hash.includes('q=2%2B2')")
    _rows(page, 2)
    assert {page.locator("tr.episode-row").nth(i).get_attribute("data-id") for i in range(2)} == {
        episodes.para, episodes.same}
    page.screenshot(path=str(out / f"viewer-{name}-search.png"), full_page=True)

    # pages of two, newest first: older, older, then newer again
    page.goto(f"{base}#/?limit=2")
    _rows(page, 2)
    assert page.locator("nav.pager span").inner_text() == "1–2 of 5"
    page.click("nav.pager a.older")
    page.wait_for_function("document.querySelector('nav.pager span')?.innerText === '3–4 of 5'")
    _rows(page, 2)
    page.click("nav.pager a.older")
    page.wait_for_function("document.querySelector('nav.pager span')?.innerText === '5–5 of 5'")
    _rows(page, 1)
    assert page.locator("tr.episode-row").get_attribute("data-id") == episodes.touching
    assert page.locator("nav.pager a.older").count() == 0
    page.screenshot(path=str(out / f"viewer-{name}-page3.png"), full_page=True)
    page.click("nav.pager a.newer")
    page.wait_for_function("document.querySelector('nav.pager span')?.innerText === '3–4 of 5'")

    # bars that only touch share a row; a bar that overlaps them gets its own
    _show(page, base, episodes.touching)
    page.wait_for_function("""() => {  // drawn and stacked: the overlapping bar d has left a's row
        const bars = [...document.querySelectorAll('#timeline[data-drawn] .vis-item.kind-tool')];
        const top = (name) => bars.find(e => e.textContent.trim() === name)?.getBoundingClientRect().top;
        return bars.length === 4 && top('d') !== top('a'); }""", timeout=10_000)
    tops = _tops(page, "#timeline .vis-item.kind-tool")
    assert sorted(tops) == ["a", "b", "c", "d"], tops
    assert tops["a"] == tops["b"] == tops["c"], f"touching bars were stacked: {tops}"
    assert tops["d"] != tops["a"], f"an overlapping bar shares a row: {tops}"
    page.screenshot(path=str(out / f"viewer-{name}-touching.png"), full_page=True)

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
    for _ in range(12):  # zooming out as far as the page lets one: no scale warnings (checked by the caller)
        page.evaluate("() => window.orchestrionView.timeline.zoomOut(1, {animation: false})")
    span = page.evaluate("() => { const w = window.orchestrionView.timeline.getWindow(); return w.end - w.start; }")
    assert span < 60_000, f"the timeline zoomed out to {span} ms for an episode of about a second"
    page.locator("#timeline .vis-item.kind-tool").first.click()
    page.wait_for_selector("#span-detail h3")
    assert "did " in page.locator("#span-detail").inner_text()
    page.screenshot(path=str(out / f"viewer-{name}-para.png"), full_page=True)

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
    page.screenshot(path=str(out / f"viewer-{name}-plan.png"), full_page=True)

    # two episodes of one task side by side, reached from the episode page
    _show(page, base, episodes.para)
    assert page.locator("table.same-task tr").count() == 1
    page.click("a.compare-link")
    page.wait_for_selector("body[data-ready=compare]", timeout=15_000)
    page.wait_for_selector("#timeline-a[data-drawn] .vis-item", timeout=10_000)
    page.wait_for_selector("#timeline-b[data-drawn] .vis-item", timeout=10_000)
    heads = page.locator("table.compare tr").first.locator("th").all_inner_texts()
    assert heads[1:] == [episodes.para, episodes.same]
    strategies = page.locator("table.compare tr").nth(1).locator("td").all_inner_texts()
    assert strategies == ["para", "direct"]
    answers = page.locator("table.compare pre.answer").all_inner_texts()
    assert answers == ["answer: 4", "4"]
    assert page.locator(".warn-task").count() == 0
    page.screenshot(path=str(out / f"viewer-{name}-compare.png"), full_page=True)
    page.goto(f"{base}#/compare/{episodes.para}/{episodes.direct}")  # not the same task: said so
    page.wait_for_selector(".warn-task", timeout=15_000)


def test_served_page_shows_list_dag_timeline_and_decisions(browser: Chromium, server: str, episodes: Episodes,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    out = _artifacts(capsys)
    page, errors, requests = _open(browser, server)
    try:
        _check_views(page, server, episodes, "served", out)
    finally:
        page.close()
    assert not errors, errors
    assert all(u.startswith(server) for u in requests), [u for u in requests if not u.startswith(server)]


def test_static_export_opens_from_disk(browser: Chromium, episodes: Episodes, tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    out = _artifacts(capsys)
    index = export_static(episodes.store, tmp_path / "bundle")
    assert index == tmp_path / "bundle" / "index.html"
    assert {p.name for p in index.parent.iterdir()} >= {"index.html", "app.js", "app.css", "data.js", "vendor"}
    assert not list((index.parent / "vendor").glob("swagger-ui*"))  # serve's /docs assets stay out of the bundle
    base = index.as_uri()
    page, errors, requests = _open(browser, base)
    try:
        _check_views(page, base, episodes, "static", out)
    finally:
        page.close()
    assert not errors, errors
    assert requests and all(u.startswith("file://") for u in requests), [u for u in requests if not u.startswith("file://")]


class Gate(Tool):
    """Waits until the test opens it: an episode that stays running for as long as the test needs."""

    name = "gate"
    description = "waits until opened"
    Args = TextArgs

    def __init__(self) -> None:
        self.opened = threading.Event()

    async def run(self, args: Any, ctx: Any, model: str | None) -> str:
        await asyncio.to_thread(self.opened.wait, 60)
        return "opened"


def test_served_page_refreshes_live(browser: Chromium, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = _artifacts(capsys)
    store, other = TraceStore(tmp_path / "live.db"), TraceStore(tmp_path / "live.db")
    _direct(store, "first")
    gate = Gate()
    action = json.dumps({"thought": "wait", "calls": [{"tool": "gate", "input": "x"}], "final": False})
    orch = ScriptedModel([action, json.dumps({"thought": "t", "calls": [], "final": True}), "it opened"], name="orch")
    running = threading.Thread(target=lambda: asyncio.run(solve(
        "Wait for the gate", strategy="para", pool=Pool.from_models([orch]), tools=ToolRegistry([gate]), store=store)))
    try:
        with _serving(store) as base:
            page, errors, _ = _open(browser, base)
            try:
                _rows(page, 1)
                page.wait_for_function("document.body.dataset.live === 'open'", timeout=15_000)
                page.evaluate("window.keptAcrossRefreshes = 1")  # a reload would lose it
                _direct(other, "second, from another writer")  # the file watch tells the page
                _rows(page, 2)
                running.start()  # this process: the bus tells the page
                page.wait_for_selector("tr.episode-row.running", timeout=15_000)
                running_id = page.locator("tr.episode-row.running").get_attribute("data-id")
                page.screenshot(path=str(out / "viewer-live-list.png"), full_page=True)

                page.goto(f"{base}#/episode/{running_id}")
                page.wait_for_selector("body[data-ready=episode] #timeline[data-drawn]", timeout=15_000)
                assert "unfinished" in page.locator("dl.facts").inner_text()
                before = int(page.locator("#timeline").get_attribute("data-items"))
                page.screenshot(path=str(out / "viewer-live-running.png"), full_page=True)
                gate.opened.set()
                page.wait_for_function("""(n) => document.body.dataset.ready === 'episode'
                    && !document.querySelector('dl.facts').innerText.includes('unfinished')
                    && Number(document.querySelector('#timeline')?.dataset.items) > n""", arg=before, timeout=20_000)
                assert page.evaluate("window.keptAcrossRefreshes") == 1
                assert page.locator("pre.answer").inner_text() == "it opened"
                page.screenshot(path=str(out / "viewer-live-finished.png"), full_page=True)
            finally:
                page.close()
        assert not errors, errors
    finally:
        gate.opened.set()
        if running.is_alive() or running.ident is not None:
            running.join(30)
        other.close()
        store.close()


# -- sorting, charts, annotations and the decision diff, in Chromium -------------------------------
@dataclass
class Pair:
    store: TraceStore
    first: str  # para on "What is 3+3?": an invalid output, then calls slow 0, 1, 2; correct
    second: str  # para on the same task: calls slow 0, 1, 9 at once; wrong
    direct: str  # direct, same task, run-b; correct
    later: str  # direct, same task, run-c; wrong


async def _record_pair(store: TraceStore) -> Pair:
    for run, dataset in (("run-b", "arith"), ("run-c", "arith")):
        store.create_run(run, "eval", {"dataset": dataset})

    def para(calls: list[str], invalid: bool) -> Any:
        action = json.dumps({"thought": "split", "calls": [{"tool": "slow", "input": c} for c in calls],
                             "final": False})
        replies = [*(["I think we should add"] if invalid else []), action,
                   json.dumps({"thought": "t", "calls": [], "final": True}), "answer: 6"]
        return solve("What is 3+3?", strategy="para", pool=Pool.from_models([ScriptedModel(replies, name="orch")]),
                     tools=ToolRegistry([Slow(0.05, reply=lambda t: f"did {t}, 6")]), store=store, run_id="run-b")

    first, second = await para(["0", "1", "2"], True), await para(["0", "1", "9"], False)
    direct = await solve("What is 3+3?", strategy="direct", pool=Pool.from_models([ScriptedModel(["6"], name="m")]),
                         tools=ToolRegistry([]), store=store, run_id="run-b")
    later = await solve("What is 3+3?", strategy="direct", pool=Pool.from_models([ScriptedModel(["5"], name="m")]),
                        tools=ToolRegistry([]), store=store, run_id="run-c")
    for res, score, cost in ((first, 1.0, 0.004), (second, 0.0, 0.002), (direct, 1.0, 0.001), (later, 0.0, 0.003)):
        _score(store, res.trace_id, score)
        store.submit("UPDATE episodes SET cost_usd = ? WHERE id = ?", (cost, res.trace_id))
    store.flush()
    return Pair(store, first.trace_id, second.trace_id, direct.trace_id, later.trace_id)


def _row_ids(page: Any) -> list[str]:
    ids: list[str] = page.eval_on_selector_all("tr.episode-row", "rows => rows.map(r => r.dataset.id)")
    return ids


def _sort_by(page: Any, key: str, hash_part: str) -> None:
    page.evaluate("delete document.body.dataset.ready")  # set again once the sorted list is drawn
    page.click(f"th.sortable[data-sort={key}]")
    page.wait_for_function("(h) => location.hash.includes(h) && document.body.dataset.ready === 'list'", arg=hash_part)


def _check_more_views(page: Any, base: str, pair: Pair, name: str, out: Path, *, served: bool) -> None:
    # sorting: click a header, again to reverse; kept by paging and by a search
    page.goto(f"{base}#/?limit=2")
    _rows(page, 2)
    _sort_by(page, "cost", "sort=cost")
    assert _row_ids(page) == [pair.direct, pair.second]  # $0.001, $0.002
    assert page.locator("th.sorted").get_attribute("aria-sort") == "ascending"
    _sort_by(page, "cost", "sort=-cost")
    assert _row_ids(page) == [pair.first, pair.later]  # $0.004, $0.003
    page.click("nav.pager a.older")
    page.wait_for_function("document.querySelector('nav.pager span')?.innerText === '3–4 of 4'")
    assert "sort=-cost" in page.evaluate("location.hash") and _row_ids(page) == [pair.second, pair.direct]
    page.fill("input[name=q]", "3+3")
    page.evaluate("delete document.body.dataset.ready")  # the hash changes before the searched list is drawn
    page.press("input[name=q]", "Enter")
    page.wait_for_function("location.hash.includes('q=3%2B3') && location.hash.includes('sort=-cost')"
                           " && document.body.dataset.ready === 'list'")
    _rows(page, 2)
    assert _row_ids(page) == [pair.first, pair.later]
    _sort_by(page, "score", "sort=score")
    assert _row_ids(page) == [pair.later, pair.second]  # both 0.0: ties keep their newest-first order
    # the answer column: cut in the cell, whole on hover
    assert page.locator(f"tr.episode-row[data-id='{pair.later}'] td.answer").inner_text() == "5"
    answer = page.locator(f"tr.episode-row[data-id='{pair.second}'] td.answer")
    assert answer.inner_text() == "answer: 6" and answer.get_attribute("title") == "answer: 6"
    page.screenshot(path=str(out / f"viewer-{name}-sorted.png"), full_page=True)

    # annotate an episode on its page (served), then see the label in the list and filter on it
    page.goto(f"{base}#/episode/{pair.first}")
    page.wait_for_selector("body[data-ready=episode]", timeout=15_000)
    if served:
        page.fill("form.annotation input[name=label]", "good-plan")
        page.fill("form.annotation textarea[name=note]", "splits the sum three ways")
        page.click("form.annotation button[type=submit]")
        page.wait_for_function("document.querySelector('.annotation-status')?.innerText === 'saved'")
        page.screenshot(path=str(out / f"viewer-{name}-annotation.png"), full_page=True)
        row = pair.store.episode(pair.first)
        assert row is not None and row.meta_value()["annotation"]["label"] == "good-plan"
    else:  # the export was made after the served test annotated it: shown, not editable
        assert page.locator("form.annotation").count() == 0
        assert "good-plan" in page.locator("p.annotation-shown").inner_text()
    page.goto(f"{base}#/")
    _rows(page, 4)
    badge = page.locator(f"tr.episode-row[data-id='{pair.first}'] .badge.label")
    assert badge.inner_text() == "good-plan" and badge.get_attribute("title") == "splits the sum three ways"
    page.select_option("select[name=label]", "good-plan")
    page.wait_for_function("location.hash.includes('label=good-plan')")
    _rows(page, 1)
    assert _row_ids(page) == [pair.first]

    # charts per strategy across runs: three SVG charts, points where values are known
    page.goto(f"{base}#/charts?by=run")
    page.wait_for_selector("body[data-ready=charts]", timeout=15_000)
    assert page.locator("svg.chart").count() == 3
    acc = page.eval_on_selector_all("svg.chart[data-metric=accuracy] circle.point",
                                    "cs => cs.map(c => [c.dataset.strategy, c.dataset.label, Number(c.dataset.value)])")
    assert sorted(acc) == [["direct", "run-b", 1.0], ["direct", "run-c", 0.0], ["para", "run-b", 0.5]]
    costs = page.eval_on_selector_all("svg.chart[data-metric=cost_usd] circle.point",
                                      "cs => cs.map(c => Number(c.dataset.value))")
    assert sorted(round(c, 6) for c in costs) == [0.001, 0.003, 0.003]
    assert page.locator("svg.chart[data-metric=wall_s] circle.point").count() == 3
    assert page.locator(".legend .swatch").all_inner_texts() == ["direct", "para"]
    page.screenshot(path=str(out / f"viewer-{name}-charts.png"), full_page=True)
    page.select_option("select[name=by]", "time")
    page.wait_for_function("location.hash.includes('by=time') && document.body.dataset.ready === 'charts'")
    assert page.locator("svg.chart[data-metric=accuracy] circle.point").count() >= 2

    # the compare view diffs the decisions: aligned by sequence, differing fields marked
    page.goto(f"{base}#/compare/{pair.first}/{pair.second}")
    page.wait_for_selector("body[data-ready=compare] table.decision-diff", timeout=15_000)
    assert "1 of 2 differ" in page.locator("table.decision-diff").locator("xpath=..").locator("h2").inner_text()
    marked = page.eval_on_selector_all("table.decision-diff td.differs",
                                       "cs => cs.map(c => c.closest('tr').dataset.index + ':' + c.dataset.field)")
    assert sorted(set(marked)) == ["1:attempts", "1:input"], marked  # same tools, model and final
    cells = page.locator("tr.diff-row[data-index='1'][data-field=input] td").all_inner_texts()
    assert cells == ["0 | 1 | 2", "0 | 1 | 9"]
    assert page.locator("tr.diff-row.same[data-index='2']").count() == 5
    final = page.locator("tr.diff-row[data-index='2'][data-field=final] td").all_inner_texts()
    assert final == ["yes", "yes"]
    page.wait_for_selector("#timeline-b[data-drawn] .vis-item", timeout=10_000)
    page.screenshot(path=str(out / f"viewer-{name}-diff.png"), full_page=True)
    page.goto(f"{base}#/compare/{pair.first}/{pair.direct}")  # direct made no decision: every field differs
    page.wait_for_function("""(id) => document.body.dataset.ready === 'compare'
        && document.querySelectorAll('table.decision-diff th.mono')[1]?.innerText === id""", arg=pair.direct[:12])
    assert page.locator("table.decision-diff td.differs").count() == 2 * 5 * 2  # both sides of 5 fields, twice
    assert page.locator("table.decision-diff td", has_text="(no decision)").count() == 2 * 5


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    store = TraceStore(tmp_path_factory.mktemp("viewer-pair") / "traces.db")
    found: list[Pair] = []  # recorded on a thread of its own: Playwright's sync API may hold this thread's loop
    thread = threading.Thread(target=lambda: found.append(asyncio.run(_record_pair(store))))
    thread.start()
    thread.join(60)
    assert found, "the episodes were not recorded"
    yield found[0]
    store.close()


def test_page_sorts_annotates_charts_and_diffs(browser: Chromium, pair: Pair, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    out = _artifacts(capsys)
    with _serving(pair.store) as base:
        page, errors, requests = _open(browser, base)
        try:
            _check_more_views(page, base, pair, "served", out, served=True)
        finally:
            page.close()
    assert not errors, errors
    assert all(u.startswith(base) for u in requests), [u for u in requests if not u.startswith(base)]
    index = export_static(pair.store, tmp_path / "bundle")  # annotated above: the export shows it
    assert {"charts.js", "diff.js"} <= {p.name for p in index.parent.iterdir()}
    page, errors, requests = _open(browser, index.as_uri())
    try:
        _check_more_views(page, index.as_uri(), pair, "static", out, served=False)
    finally:
        page.close()
    assert not errors, errors
    assert all(u.startswith("file://") for u in requests)


def test_serve_docs_page_draws_swagger_ui_with_no_request_off_the_server(browser: Chromium, tmp_path: Path) -> None:
    from tests.serve.test_server import direct_pool, serving

    with serving(direct_pool(), TraceStore(tmp_path / "t.db")) as url:
        root = url.removesuffix("/v1")
        page, errors, requests = _open(browser, root + "/docs")
        try:
            page.wait_for_selector(".swagger-ui .info .title", timeout=15_000)
            title = page.locator(".swagger-ui .info .title").inner_text()
            operations = page.locator(".opblock").count()
        finally:
            page.close()
    assert title.startswith("orchestrion serve") and operations >= 5, (title, operations)
    assert all(u.startswith(root) for u in requests), [u for u in requests if not u.startswith(root)]
    assert not errors, errors
