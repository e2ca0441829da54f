"""OpenTelemetry into a real Phoenix: `orchestrion run --otlp-endpoint` sends a para episode to a
`phoenix serve` on free ports, and Phoenix's REST API gives the spans back with their parents,
kinds and token counts; an `orchestrion eval` run reads back, through Phoenix's REST and GraphQL
APIs, as one session whose cost Phoenix shows, and Debian's Chromium (driven by Playwright, as in
tests/serve/test_viewer.py) screenshots Phoenix's trace list and sessions page into
``$ORCHESTRION_ARTIFACTS`` or ``test-artifacts/``. The episodes' models are a loopback
OpenAI-compatible server, so the runs are deterministic and fast; Phoenix itself is the real thing."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
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


# -- an eval run: its cost and its session, read back from Phoenix and seen in its UI --------------
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
ARTIFACTS = Path(os.environ.get("ORCHESTRION_ARTIFACTS") or Path(__file__).resolve().parents[2] / "test-artifacts")
PER_MTOK = {"input": 1000.0, "output": 2000.0}  # $ per million tokens: cents per episode, as Phoenix shows them
MODEL_STORE_REFRESH_S = 7.0  # Phoenix reloads its model prices every 5 s (GenerativeModelStore); a margin on top


def graphql(base: str, query: str, variables: dict[str, Any] | None = None) -> Any:
    body = json.dumps({"query": query, "variables": variables or {}}).encode()
    request = urllib.request.Request(f"{base}/graphql", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=20) as response:
        answer = json.loads(response.read())
    assert not answer.get("errors"), answer["errors"]
    return answer["data"]


def eval_into(phoenix: str, tmp_path: Path, project: str, model: str) -> tuple[dict[str, Any], list[str]]:
    """`orchestrion eval` of two tasks with one priced scripted model, sent to Phoenix's project ``project``;
    the run's summary and its episode ids (which are the trace ids)."""
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"id": "a", "prompt": "What is 2+3?", "answer": "5"}\n'
                     '{"id": "b", "prompt": "What is 1+1?", "answer": "2"}\n')
    db = tmp_path / f"{project}.db"
    env = {**os.environ, "ORCHESTRION_DB": str(db), "OTEL_RESOURCE_ATTRIBUTES": f"openinference.project.name={project}"}
    with run_in_process("--reply", "5") as url:
        pool = tmp_path / f"{project}.yaml"
        pool.write_text(f"models:\n  - name: {model}\n    backend: openai-api\n    base_url: {url}\n"
                        f"    price: {{input_per_mtok: {PER_MTOK['input']}, output_per_mtok: {PER_MTOK['output']}}}\n")
        res = subprocess.run([sys.executable, "-m", "orchestrion", "eval", "--dataset", f"jsonl:{tasks}",
                              "--pool", str(pool), "--json", "--otlp-endpoint", f"{phoenix}/v1/traces"],
                             capture_output=True, text=True, timeout=120, env=env)
    assert res.returncode == 0, res.stderr
    assert "warning" not in res.stderr, res.stderr
    body = json.loads(res.stdout)
    [summary] = body["summaries"]
    assert summary["episodes"] == 2 and summary["cost_usd"] > 0

    from orchestrion import TraceStore

    store = TraceStore(db)
    try:
        episodes = store.episode_ids(run_id=body["run_id"])
    finally:
        store.close()
    assert len(episodes) == 2
    return {**summary, "run_id": body["run_id"]}, episodes


def project_spans(base: str, project: str, expected: int) -> list[dict[str, Any]]:
    """A project's spans from Phoenix's REST API, once it has ingested ``expected`` of them."""
    deadline = time.monotonic() + 30
    while True:
        try:
            spans: list[dict[str, Any]] = get_json(f"{base}/v1/projects/{project}/spans?limit=1000")["data"]
        except urllib.error.HTTPError as exc:  # 404 until the project's first span lands
            if exc.code != 404:
                raise
            spans = []
        if len(spans) >= expected or time.monotonic() > deadline:
            return spans
        time.sleep(0.3)


def check_llm_cost(spans: list[dict[str, Any]], summary: dict[str, Any], episodes: list[str]) -> dict[str, float]:
    """Every model-call span carries OpenInference's llm.cost.*, and they add up to the run's cost; the
    cost per trace."""
    assert {s["context"]["trace_id"] for s in spans} == set(episodes)
    llm = [s for s in spans if s["span_kind"] == "LLM"]
    assert len(llm) == 2  # `direct`: one model call per episode
    per_trace: dict[str, float] = {}
    for s in llm:
        a = s["attributes"]
        prompt = a["llm.token_count.prompt"] * PER_MTOK["input"] / 1e6
        completion = a["llm.token_count.completion"] * PER_MTOK["output"] / 1e6
        assert a["llm.cost.prompt"] == pytest.approx(prompt) and a["llm.cost.completion"] == pytest.approx(completion)
        assert a["llm.cost.total"] > 0 and a["llm.cost.total"] == pytest.approx(prompt + completion)
        per_trace[s["context"]["trace_id"]] = a["llm.cost.total"]
    assert sum(per_trace.values()) == pytest.approx(summary["cost_usd"])
    return per_trace


PROJECT_QUERY = """{ projects { edges { node { id name
  costSummary { total { cost tokens } }
  sessionCount
  sessions(first: 10) { edges { node { sessionId numTraces costSummary { total { cost } }
                                       traces(first: 10) { edges { node { traceId } } } } } }
} } } }"""


def phoenix_project(base: str, name: str) -> dict[str, Any]:
    [project] = [e["node"] for e in graphql(base, PROJECT_QUERY)["projects"]["edges"]
                 if e["node"]["name"] == name]
    return project


def trace_cost(base: str, project_id: str, trace_id: str) -> float:
    query = """query ($id: ID!, $trace: ID!) { node(id: $id) { ... on Project {
      trace(traceId: $trace) { costSummary { total { cost } } } } } }"""
    trace = graphql(base, query, {"id": project_id, "trace": trace_id})["node"]["trace"]
    return float(trace["costSummary"]["total"]["cost"] or 0.0)


@pytest.mark.timeout(240)
def test_an_eval_run_is_one_phoenix_session_with_its_cost(phoenix: str, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    # Phoenix (20.x) prices an LLM span itself, from its token counts and the price it holds for the span's
    # llm.model_name (a built-in table, or a model added under Settings > Models); it does not read the
    # span's llm.cost.* attributes. So the pool's price is given to Phoenix too, for the model "fake" only.
    registered = graphql(phoenix, """mutation ($input: CreateModelMutationInput!) {
      createModel(input: $input) { model { namePattern } } }""", {"input": {
        "name": "orchestrion fake", "namePattern": "^fake$", "costs": [
            {"tokenType": "input", "costPerMillionTokens": PER_MTOK["input"], "kind": "PROMPT"},
            {"tokenType": "output", "costPerMillionTokens": PER_MTOK["output"], "kind": "COMPLETION"}]}})
    assert registered["createModel"]["model"]["namePattern"] == "^fake$"
    since = time.monotonic()

    # a model Phoenix has no price for: the spans carry llm.cost.total, and Phoenix still shows $0
    unpriced, unpriced_episodes = eval_into(phoenix, tmp_path, "orchestrion-unpriced", "local-model")
    spans = project_spans(phoenix, "orchestrion-unpriced", 4)
    check_llm_cost(spans, unpriced, unpriced_episodes)
    project = phoenix_project(phoenix, "orchestrion-unpriced")
    assert project["costSummary"]["total"]["tokens"] == unpriced["input_tokens"] + unpriced["output_tokens"] > 0
    assert project["costSummary"]["total"]["cost"] == 0, (
        "Phoenix now prices spans it has no model price for: does it read llm.cost.*? Update the handbook's "
        "viewer and OpenTelemetry page (docs/viewer.md) and this test")

    # the model Phoenix holds the pool's price for: Phoenix's cost per trace, per session and per project
    # is the episode's cost, and the run is one session holding both episodes
    time.sleep(max(0.0, MODEL_STORE_REFRESH_S - (time.monotonic() - since)))
    run, episodes = eval_into(phoenix, tmp_path, "orchestrion-eval", "fake")
    spans = project_spans(phoenix, "orchestrion-eval", 4)
    per_trace = check_llm_cost(spans, run, episodes)
    assert {s["attributes"]["session.id"] for s in spans} == {run["run_id"]}
    project = phoenix_project(phoenix, "orchestrion-eval")
    for trace_id, cost in per_trace.items():
        assert trace_cost(phoenix, project["id"], trace_id) == pytest.approx(cost)
    assert project["costSummary"]["total"]["cost"] == pytest.approx(run["cost_usd"])
    assert project["sessionCount"] == 1
    [session] = [e["node"] for e in project["sessions"]["edges"]]
    assert session["sessionId"] == run["run_id"] and session["numTraces"] == 2
    assert {e["node"]["traceId"] for e in session["traces"]["edges"]} == set(episodes)
    assert session["costSummary"]["total"]["cost"] == pytest.approx(run["cost_usd"])
    [listed] = get_json(f"{phoenix}/v1/projects/orchestrion-eval/sessions")["data"]  # the REST view agrees
    assert listed["session_id"] == run["run_id"] and {t["trace_id"] for t in listed["traces"]} == set(episodes)

    screenshot_phoenix(phoenix, project["id"], run, capsys)


def screenshot_phoenix(base: str, project_id: str, run: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    """Phoenix's trace list (a cost column per trace) and sessions page (the run as one session), in Chromium."""
    if not CHROMIUM.exists():
        pytest.fail(f"Debian's chromium is missing at {CHROMIUM}: install it (apt-get install -y chromium); CI does",
                    pytrace=False)
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with capsys.disabled():
        print(f"\nphoenix screenshots: {ARTIFACTS}")
    episode_cost = f"${run['cost_usd'] / 2:.2f}"  # both episodes cost the same: same prompt length, same reply
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            width = 1500
            page = browser.new_page(viewport={"width": width, "height": 560})

            def columns(hidden: list[str]) -> None:  # hide columns through Phoenix's own Columns menu
                page.get_by_role("button", name="Columns").click()
                for column in hidden:
                    page.locator(f"li[data-column-id='{column}']").click()
                page.keyboard.press("Escape")
                page.get_by_placeholder("Search columns...").wait_for(state="detached")
                page.mouse.move(5, 550)
                cost = page.get_by_role("columnheader", name="total cost").bounding_box()
                assert cost is not None and cost["x"] + cost["width"] <= width  # in the screenshot

            page.goto(f"{base}/projects/{project_id}/traces")
            page.get_by_role("columnheader", name="total cost").wait_for(timeout=30_000)
            columns(["error", "userId", "annotations", "traceAnnotations", "startTime", "latencyMs"])
            rows = page.locator("tbody tr")
            assert rows.count() == 2
            for i in range(2):
                assert episode_cost in rows.nth(i).inner_text()
            page.screenshot(path=str(ARTIFACTS / "phoenix-eval-traces-cost.png"))

            page.goto(f"{base}/projects/{project_id}/sessions")
            page.get_by_role("columnheader", name="total cost").wait_for(timeout=30_000)
            columns(["firstInput_value", "lastOutput_value", "userId", "annotations", "startTime", "endTime",
                     "traceLatencyMsP50", "traceLatencyMsP99"])
            rows = page.locator("tbody tr")
            assert rows.count() == 1
            cells = rows.first.inner_text()
            assert run["run_id"][:8] in cells and f"${run['cost_usd']:.2f}" in cells
            page.screenshot(path=str(ARTIFACTS / "phoenix-eval-session.png"))
        finally:
            browser.close()
