"""`GET /metrics` after para episodes served over HTTP: per pool model and per tool series with
vLLM's names, labels and buckets, read back with prometheus_client's own parser."""

from __future__ import annotations

import itertools
import json
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from orchestrion import GenerateConfig, Message, Pool, ScriptedModel, TraceStore
from orchestrion.serve._metrics import buckets_1_2_5

from .test_server import ASK, client, episodes, serving

ROUND1 = json.dumps({"thought": "add", "calls": [{"tool": "calculator", "input": "2+3"},
                                                 {"tool": "calculator", "input": "2+"},
                                                 {"tool": "reasoner", "input": "what is 2+3", "model": "big"}]})
FINAL = json.dumps({"thought": "done", "calls": [], "final": True})


def cycling(decisions: list[str], worker: str) -> Callable[[Sequence[Message], GenerateConfig], str]:
    """Decision calls take ``decisions`` in turn, over and over (one script per episode); others get ``worker``."""
    turn = itertools.cycle(decisions)

    def reply(messages: Sequence[Message], config: GenerateConfig) -> str:
        return next(turn) if config.json_schema is not None else worker

    return reply


def two_model_pool() -> Pool:
    """orch decides (its first output is not JSON: one repair) and synthesizes; big runs the reasoner."""
    orch = ScriptedModel(cycling(["not json at all", ROUND1, FINAL], "the sum is 5"), name="orch")
    big = ScriptedModel(["5"], name="big")
    return Pool.from_models([orch, big], orchestrator="orch", synthesizer="orch")


def samples(url: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Every sample of /metrics by sample name, with its labels and value."""
    text = httpx.get(url.removesuffix("/v1") + "/metrics", timeout=10).text
    found: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            found.setdefault(s.name, []).append((dict(s.labels), s.value))
    return found


def value(found: dict[str, list[tuple[dict[str, str], float]]], name: str, **labels: str) -> float:
    matching = [v for got, v in found.get(name, []) if all(got.get(k) == x for k, x in labels.items())]
    assert len(matching) == 1, (name, labels, found.get(name))
    return matching[0]


def test_per_model_and_per_tool_series_after_para_episodes(store: TraceStore) -> None:
    with serving(two_model_pool(), store) as url:
        client(url).chat.completions.create(model="orchestrion/para", messages=ASK)
        deltas = [c.choices[0].delta.content for c in client(url).chat.completions.create(
            model="orchestrion/para", messages=ASK, stream=True) if c.choices and c.choices[0].delta.content]
        found = samples(url)
    eps = episodes(store)
    assert [e["status"] for e in eps] == ["ok", "ok"]
    calls: list[dict[str, Any]] = []
    tools: list[dict[str, Any]] = []
    for e in eps:
        calls += store.query("SELECT * FROM spans WHERE episode_id = ? AND kind = 'call'", (e["id"],))
        tools += store.query("SELECT * FROM spans WHERE episode_id = ? AND kind IN ('tool', 'agent')", (e["id"],))

    # per pool model: labelled model_name (the pool's name) and strategy
    per_model = Counter(c["name"] for c in calls)
    assert set(per_model) == {"orch", "big"}
    for model, n in per_model.items():
        mine = [c for c in calls if c["name"] == model]
        assert value(found, "orchestrion:model_calls_total", model_name=model, strategy="para") == n
        assert value(found, "orchestrion:model_call_latency_seconds_count", model_name=model, strategy="para") == n
        assert value(found, "orchestrion:prompt_tokens_total", model_name=model,
                     strategy="para") == sum(c["input_tokens"] for c in mine) > 0
        assert value(found, "orchestrion:generation_tokens_total", model_name=model,
                     strategy="para") == sum(c["output_tokens"] for c in mine) > 0
    assert value(found, "orchestrion:model_call_retries_total", model_name="orch", strategy="para") == 2  # 1 each
    assert "orchestrion:model_call_retries_total" not in {n for n, v in found.items()
                                                          if any(lb.get("model_name") == "big" for lb, _ in v)}
    assert not found.get("orchestrion:model_call_errors_total")  # nothing failed
    buckets = [lb["le"] for lb, _ in found["orchestrion:model_call_latency_seconds_bucket"]
               if lb["model_name"] == "orch"]
    assert buckets[:3] == ["0.3", "0.5", "0.8"] and buckets[-2:] == ["7680.0", "+Inf"]  # vLLM's e2e buckets

    # per tool: labelled tool, strategy and the result's status
    by_status = Counter((json.loads(t["attrs"])["tool"], t["status"]) for t in tools)
    assert by_status == {("calculator", "ok"): 2, ("calculator", "exec_error"): 2, ("reasoner", "ok"): 2}
    for (tool, status), n in by_status.items():
        assert value(found, "orchestrion:tool_calls_total", tool=tool, strategy="para", status=status) == n
    assert value(found, "orchestrion:tool_call_latency_seconds_count", tool="calculator", strategy="para") == 4
    assert value(found, "orchestrion:tool_call_latency_seconds_count", tool="reasoner", strategy="para") == 2

    # per request: the model asked for, vLLM's 1-2-5 token buckets; inter-token gaps of the streamed one
    served = {"model_name": "orchestrion/para", "strategy": "para"}
    assert value(found, "orchestrion:request_prompt_tokens_count", **served) == 2
    assert value(found, "orchestrion:request_prompt_tokens_sum", **served) == sum(e["input_tokens"] for e in eps)
    assert value(found, "orchestrion:request_generation_tokens_sum", **served) == sum(e["output_tokens"] for e in eps)
    les = [lb["le"] for lb, _ in found["orchestrion:request_prompt_tokens_bucket"]]
    assert les[:4] == ["1.0", "2.0", "5.0", "10.0"]
    assert "".join(deltas).strip() == "the sum is 5" and len(deltas) >= 2
    assert value(found, "orchestrion:inter_token_latency_seconds_count", **served) == len(deltas) - 1


def test_buckets_1_2_5() -> None:
    assert buckets_1_2_5(100) == (1, 2, 5, 10, 20, 50, 100)
    assert buckets_1_2_5(1) == (1,)
