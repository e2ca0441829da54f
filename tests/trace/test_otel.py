"""OpenTelemetry export: stored episodes become GenAI-convention OTLP spans, received by a real
loopback OTLP/HTTP receiver that decodes the protobuf requests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk", reason="the otel extra is not installed")
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest  # noqa: E402
from opentelemetry.proto.trace.v1.trace_pb2 import Span as ProtoSpan  # noqa: E402

from orchestrion import Pool, ScriptedModel, Task, ToolRegistry, TraceStore, solve  # noqa: E402
from orchestrion._errors import ConfigError  # noqa: E402
from orchestrion.cli import _otel as _otel_cli  # noqa: E402
from orchestrion.models.cost import Price  # noqa: E402
from orchestrion.tools.agents import agent_tools  # noqa: E402
from orchestrion.trace.otel import OtlpSender, episode_spans, resolve_endpoint, trace_id_of, traces_url  # noqa: E402

sys.path.insert(0, str(Path(__file__).parents[1]))
from fake_openai_server import run_in_process  # noqa: E402

from tests.helpers import free_port


class Receiver:
    """An OTLP/HTTP receiver on a free loopback port: decodes every request; ``status`` is its reply."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, ExportTraceServiceRequest]] = []
        self.status = 200
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers["Content-Length"]))
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                receiver.requests.append((self.path, request))
                self.send_response(receiver.status)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def spans(self) -> list[tuple[ProtoSpan, dict[str, Any]]]:
        """Every received span with its attributes decoded to Python values."""
        found = []
        for _, request in self.requests:
            for rs in request.resource_spans:
                for ss in rs.scope_spans:
                    for span in ss.spans:
                        found.append((span, {kv.key: _value(kv.value) for kv in span.attributes}))
        return found


def _value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [_value(x) for x in v.array_value.values]
    return getattr(v, kind)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.server.shutdown()
    r.server.server_close()


def act(calls: list[dict[str, Any]], final: bool = False) -> str:
    return json.dumps({"thought": "t", "calls": calls, "final": final})


async def agent_episode(store: TraceStore) -> str:
    """A para episode: round 1 asks the reasoner agent (model big), round 2 finishes, then synthesis."""
    orch = ScriptedModel([act([{"tool": "reasoner", "input": "half", "model": "big"}]), act([], True), "42"],
                         name="orch", price=Price(input_per_mtok=1, output_per_mtok=2))
    big = ScriptedModel(["forty two"], name="big", price=Price(input_per_mtok=10, output_per_mtok=20))
    res = await solve("What is 84/2?", strategy="para", pool=Pool.from_models([orch, big]),
                      tools=ToolRegistry(agent_tools()), store=store, run_id="run-otel")
    assert res.status == "ok"
    return res.trace_id


async def test_spans_keep_ids_parents_times_usage_and_cost(store: TraceStore) -> None:
    episode_id = await agent_episode(store)
    rows = {r.id: r for r in store.spans(episode_id)}
    spans = episode_spans(store, episode_id, providers={"orch": "scripted", "big": "scripted"})
    assert len(spans) == len(rows) >= 6
    by_orch_id = {s.attributes["orchestrion.span_id"]: s for s in spans if s.attributes}
    assert set(by_orch_id) == set(rows)
    for oid, span in by_orch_id.items():
        row = rows[oid]
        assert span.context is not None and span.context.trace_id == int(episode_id, 16)
        assert span.start_time == int(row.started * 1e9) and span.end_time == int(row.ended * 1e9)
        if row.parent_id is None:
            assert span.parent is None and row.kind == "episode"
        else:  # the OTel parent is the span made from the stored parent
            assert span.parent is not None
            parent_ctx = by_orch_id[row.parent_id].context
            assert parent_ctx is not None and span.parent.span_id == parent_ctx.span_id
        attrs = dict(span.attributes or {})
        assert attrs["orchestrion.episode_id"] == episode_id and attrs["orchestrion.run_id"] == "run-otel"
        assert attrs["orchestrion.input_tokens"] == row.input_tokens
        assert attrs["orchestrion.cost_usd"] == pytest.approx(row.cost_usd)
    calls = [s for s in spans if (s.attributes or {}).get("gen_ai.operation.name") == "chat"]
    agents = [s for s in spans if (s.attributes or {}).get("gen_ai.operation.name") == "invoke_agent"]
    root = next(s for s in spans if s.parent is None)
    episode = store.episode(episode_id)
    assert episode is not None
    # tokens sit on model calls only, and add up to the episode's totals
    assert sum(int((c.attributes or {})["gen_ai.usage.input_tokens"]) for c in calls) == episode.input_tokens > 0
    assert sum(int((c.attributes or {})["gen_ai.usage.output_tokens"]) for c in calls) == episode.output_tokens
    assert all("gen_ai.usage.input_tokens" not in (s.attributes or {}) for s in spans if s not in calls)
    assert {(c.attributes or {})["gen_ai.request.model"] for c in calls} == {"orch", "big"}
    assert all((c.attributes or {})["gen_ai.provider.name"] == "scripted" for c in calls)
    [agent] = agents
    assert (agent.attributes or {})["gen_ai.agent.name"] == "reasoner"
    big_call = next(c for c in calls if (c.attributes or {})["gen_ai.request.model"] == "big")
    assert big_call.parent is not None and agent.context is not None
    assert big_call.parent.span_id == agent.context.span_id
    assert root.name == "invoke_workflow para" and (root.attributes or {})["output.value"] == "42"
    messages = json.loads(str((big_call.attributes or {})["gen_ai.input.messages"]))
    assert messages[-1]["parts"][0]["type"] == "text" and "half" in messages[-1]["parts"][0]["content"]


async def test_content_capture_can_be_turned_off(store: TraceStore, monkeypatch: pytest.MonkeyPatch) -> None:
    episode_id = await agent_episode(store)
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "false")
    keys = {k for s in episode_spans(store, episode_id) for k in (s.attributes or {})}
    assert "gen_ai.usage.input_tokens" in keys
    assert not keys & {"gen_ai.input.messages", "gen_ai.output.messages", "input.value", "output.value"}


async def test_sender_delivers_to_a_receiver(store: TraceStore, receiver: Receiver) -> None:
    episode_id = await agent_episode(store)
    sender = OtlpSender(store, traces_url(receiver.base))
    sender.add(episode_id)
    report = sender.close(close_timeout_s=30)
    assert report.error is None and report.sent == 1 and report.not_sent == []
    got = receiver.spans()
    assert [p for p, _ in receiver.requests] == ["/v1/traces"]
    assert len(got) == report.spans == len(store.spans(episode_id))
    ids = {span.span_id for span, _ in got}
    roots = [span for span, _ in got if not span.parent_span_id]
    assert len(roots) == 1 and all(span.parent_span_id in ids for span, _ in got if span.parent_span_id)
    assert {span.trace_id.hex() for span, _ in got} == {episode_id}
    resource = receiver.requests[0][1].resource_spans[0].resource
    assert {kv.key: kv.value.string_value for kv in resource.attributes}["service.name"] == "orchestrion"


async def test_a_dead_or_refusing_receiver_gives_one_line_and_keeps_the_trace(store: TraceStore,
                                                                             receiver: Receiver) -> None:
    episode_id = await agent_episode(store)
    dead = OtlpSender(store, f"http://127.0.0.1:{free_port()}/v1/traces", timeout_s=2)
    dead.add_all([episode_id, episode_id])
    report = dead.close(close_timeout_s=30)
    assert report.sent == 0 and report.not_sent == [episode_id, episode_id]  # the second is not even tried
    assert report.error is not None and "refused" in report.error.lower()
    line = report.warning(store.path)
    assert line is not None and "\n" not in line and episode_id in line and "trace export --format otlp" in line
    receiver.status = 400
    refused = OtlpSender(store, traces_url(receiver.base), timeout_s=2)
    refused.add(episode_id)
    assert refused.close(close_timeout_s=30).not_sent == [episode_id]
    assert store.episode(episode_id) is not None and len(store.spans(episode_id)) > 0


def test_endpoints_from_the_option_or_the_standard_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    assert resolve_endpoint(None) is None
    assert traces_url("http://h:4318") == "http://h:4318/v1/traces"
    assert traces_url("http://h:6006/v1/traces") == "http://h:6006/v1/traces"
    assert traces_url("https://cloud/api/otel/") == "https://cloud/api/otel/v1/traces"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://base:4318/")
    assert resolve_endpoint(None) == "http://base:4318/v1/traces"
    assert resolve_endpoint("http://opt:1") == "http://opt:1/v1/traces"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://full:9/custom")
    assert resolve_endpoint(None) == "http://full:9/custom"
    with pytest.raises(Exception, match="give an http"):
        traces_url("127.0.0.1:6006")
    assert trace_id_of("not-hex") == trace_id_of("not-hex") != 0


def test_without_the_extra_an_env_endpoint_warns_and_an_option_fails(monkeypatch: pytest.MonkeyPatch,
                                                                      store: TraceStore) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry.exporter.otlp.proto.http.trace_exporter", None)
    monkeypatch.delitem(sys.modules, "orchestrion.trace.otel")  # imported afresh, without the exporter
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
    warned: list[str] = []
    assert _otel_cli.start_sender(None, store, warn=warned.append) is None
    assert len(warned) == 1 and "orchestrion[otel]" in warned[0]
    with pytest.raises(ConfigError, match=r"pip install 'orchestrion\[otel\]'"):
        _otel_cli.start_sender("http://127.0.0.1:1", store, warn=warned.append)


def test_cli_run_sends_live_and_trace_export_resends(tmp_path: Path, receiver: Receiver) -> None:
    round1 = act([{"tool": "calculator", "input": "2+3"}])
    with run_in_process("--reply", round1, "--reply", act([], True), "--reply", "5") as url:
        pool = tmp_path / "pool.yaml"
        pool.write_text(f"models:\n  - name: fake\n    backend: openai-api\n    base_url: {url}\n")
        env = {**os.environ, "ORCHESTRION_DB": str(tmp_path / "t.db")}
        env.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
        cmd = [sys.executable, "-m", "orchestrion"]
        res = subprocess.run([*cmd, "run", "What is 2+3?", "--pool", str(pool), "--json",
                              "--otlp-endpoint", receiver.base], capture_output=True, text=True, timeout=120, env=env)
        assert res.returncode == 0, res.stderr
        trace_id = json.loads(res.stdout)["trace_id"]
        live = receiver.spans()
        assert live and {s.trace_id.hex() for s, _ in live} == {trace_id}
        calls = [a for _, a in live if a.get("gen_ai.operation.name") == "chat"]
        usage = json.loads(res.stdout)["usage"]
        assert sum(a["gen_ai.usage.input_tokens"] for a in calls) == usage["input_tokens"] > 0
        assert all(a["gen_ai.provider.name"] == "openai-api" for a in calls)
        # a dead receiver: one warning line, exit 0, trace kept; then resent after the fact
        dead = f"http://127.0.0.1:{free_port()}"
        res2 = subprocess.run([*cmd, "run", "What is 2+3?", "--pool", str(pool), "--json", "--otlp-endpoint", dead],
                              capture_output=True, text=True, timeout=120, env=env)
        assert res2.returncode == 0, res2.stderr
        warnings = [line for line in res2.stderr.splitlines() if line.startswith("warning:")]
        second = json.loads(res2.stdout)["trace_id"]
        assert len(warnings) == 1 and second in warnings[0] and "Traceback" not in res2.stderr
    before = len(receiver.requests)
    sent = subprocess.run([*cmd, "trace", "export", second[:10], "--format", "otlp", "--otlp-endpoint",
                           receiver.base], capture_output=True, text=True, timeout=120, env=env)
    assert sent.returncode == 0 and "sent 1 episodes" in sent.stderr, sent.stderr
    assert {s.trace_id.hex() for s, _ in receiver.spans()[len(live):]} == {second}
    assert len(receiver.requests) == before + 1


def test_cli_eval_sends_each_episode(tmp_path: Path, receiver: Receiver) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"id": "a", "prompt": "What is 2+3?", "answer": "5"}\n'
                     '{"id": "b", "prompt": "What is 1+1?", "answer": "2"}\n')
    with run_in_process("--reply", "5") as url:
        pool = tmp_path / "pool.yaml"
        pool.write_text(f"models:\n  - name: fake\n    backend: openai-api\n    base_url: {url}\n")
        env = {**os.environ, "ORCHESTRION_DB": str(tmp_path / "t.db")}
        res = subprocess.run([sys.executable, "-m", "orchestrion", "eval", "--dataset", f"jsonl:{tasks}", "--pool",
                              str(pool), "--json", "--otlp-endpoint", receiver.base],
                             capture_output=True, text=True, timeout=120, env=env)
    assert res.returncode == 0, res.stderr
    assert "warning" not in res.stderr
    run_id = json.loads(res.stdout)["run_id"]
    store = TraceStore(tmp_path / "t.db")
    try:
        episodes = store.episode_ids(run_id=run_id)
    finally:
        store.close()
    roots = [a for s, a in receiver.spans() if not s.parent_span_id]
    assert len(episodes) == 2 and sorted(a["orchestrion.episode_id"] for a in roots) == sorted(episodes)
    assert {a["orchestrion.run_id"] for a in roots} == {run_id}


async def test_llm_cost_on_model_calls_where_known_never_zero_for_unknown(store: TraceStore) -> None:
    episode_id = await agent_episode(store)
    rows = {r.id: r for r in store.spans(episode_id)}
    spans = episode_spans(store, episode_id)
    calls = [s for s in spans if (s.attributes or {}).get("openinference.span.kind") == "LLM"]
    assert len(calls) >= 3
    for call in calls:
        attrs = dict(call.attributes or {})
        row = rows[str(attrs["orchestrion.span_id"])]
        assert row.cost_usd is not None and row.cost_usd > 0 and attrs["llm.cost.total"] == pytest.approx(row.cost_usd)
        # the split is the model's price times its tokens, and adds up to the total
        price_in, price_out = (10, 20) if row.name == "big" else (1, 2)
        assert attrs["llm.cost.prompt"] == pytest.approx(row.input_tokens * price_in / 1e6)
        assert attrs["llm.cost.completion"] == pytest.approx(row.output_tokens * price_out / 1e6)
        assert float(attrs["llm.cost.prompt"]) + float(attrs["llm.cost.completion"]) == pytest.approx(row.cost_usd)
    assert not any(k.startswith("llm.cost.") for s in spans if s not in calls for k in (s.attributes or {}))
    episode = store.episode(episode_id)
    assert episode is not None and episode.cost_usd is not None
    assert sum(float((c.attributes or {})["llm.cost.total"]) for c in calls) == pytest.approx(episode.cost_usd)

    unpriced = ScriptedModel([act([], True), "42"], name="free-ish")  # no price: cost unknown
    res = await solve("What is 84/2?", strategy="para", pool=Pool.from_models([unpriced]), store=store)
    for span in episode_spans(store, res.trace_id):
        assert not any(k.startswith("llm.cost.") for k in (span.attributes or {}))
        assert "orchestrion.cost_usd" not in (span.attributes or {})


async def test_session_id_groups_a_run_or_a_conversation(store: TraceStore) -> None:
    def sessions(episode_id: str) -> set[Any]:
        spans = episode_spans(store, episode_id)
        assert spans
        return {(s.attributes or {}).get("session.id") for s in spans}

    def pool() -> Pool:
        return Pool.from_models([ScriptedModel([act([], True), "42"], name="orch")])

    store.create_run("eval-run-1", "eval", {})
    store.create_run("serve-run-1", "serve", {})
    evals = [await solve("What is 84/2?", strategy="para", pool=pool(), store=store, run_id="eval-run-1")
             for _ in range(2)]
    assert [sessions(r.trace_id) for r in evals] == [{"eval-run-1"}, {"eval-run-1"}]  # one session per eval run
    chat = Task(prompt="What is 84/2?", metadata={"source": "serve", "metadata": {"session_id": "conv-7"}})
    served = await solve(chat, strategy="para", pool=pool(), store=store, run_id="serve-run-1")
    assert sessions(served.trace_id) == {"conv-7"}  # the client's conversation
    alone = await solve("What is 84/2?", strategy="para", pool=pool(), store=store, run_id="serve-run-1")
    assert sessions(alone.trace_id) == {alone.trace_id}  # a serve process is no session: the episode is its own
    unrun = await solve("What is 84/2?", strategy="para", pool=pool(), store=store)
    row = store.episode(unrun.trace_id)
    assert row is not None and sessions(unrun.trace_id) == {row.run_id or row.id}
