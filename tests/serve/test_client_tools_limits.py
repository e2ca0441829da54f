"""Client tools at their edges: OpenAI's deprecated ``functions`` / ``function_call`` (refused with
the fields that replace them), the time an episode waits for the client's results (not its own:
reported apart, and not counted against its wall-time budget), and a ``max_tokens`` too small
for a call's arguments (the decision gets room anyway; the answer keeps to ``max_tokens``)."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

import openai
import pytest

from orchestrion import GenerateConfig, Message, Pool, TraceStore
from orchestrion.models.types import Completion, Usage
from orchestrion.runtime.client_actions import ACTION_TOKENS
from tests.serve.test_client_tools import ADD, ANSWER, CALL, TOOLS, Scripted, send_result
from tests.serve.test_metrics import samples, value
from tests.serve.test_server import ASK, client, episodes, ext, post, serving

LEGACY_ADD = {"name": "add", "description": "adds two integers",
              "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}}}


@pytest.mark.parametrize(("extra", "param", "names"), [
    ({"functions": [LEGACY_ADD]}, "functions", ["'tools'", "'tool_choice'"]),
    ({"functions": [LEGACY_ADD], "function_call": {"name": "add"}}, "function_call", ["'tool_choice'", "'tools'"]),
    ({"function_call": {"name": "add"}}, "function_call", ["'tool_choice'"]),
    ({"tools": [ADD], "function_call": "auto"}, "function_call", ["'tool_choice'"]),
])
def test_legacy_function_calling_is_a_one_line_400_naming_its_replacement(
        store: TraceStore, extra: dict[str, Any], param: str, names: list[str]) -> None:
    with serving(Scripted([ANSWER]).pool(), store) as url:
        r = post(url, {"model": "orchestrion/direct", "messages": ASK, **extra})
        with pytest.raises(openai.BadRequestError):
            client(url).chat.completions.create(model="orchestrion/direct", messages=ASK, **extra)
        plain = post(url, {"model": "orchestrion/direct", "messages": ASK, "function_call": "none"})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == param and error["type"] == "invalid_request_error" and "\n" not in error["message"]
    assert all(name in error["message"] for name in names), error["message"]
    assert plain.status_code == 200  # 'none' without tools: no function is called, as asked
    assert [e["status"] for e in episodes(store)] == ["ok"]


def test_the_wait_for_the_client_is_not_the_episodes_time(store: TraceStore) -> None:
    """The client takes longer over its tool than the episode's whole wall-time budget: the episode
    goes on (its clock stood still), and the wait is reported apart: in the response, the episode's
    meta, trace show, and left out of the episode duration metric."""
    from typer.testing import CliRunner

    from orchestrion.cli import app

    model = Scripted([CALL, ANSWER])
    budget = {"orchestrion": {"budget": {"wall_s": 0.5}}}
    with serving(model.pool(), store) as url:
        c = client(url)
        first = c.chat.completions.create(model="orchestrion/direct", messages=ASK, tools=TOOLS, extra_body=budget)
        [call] = first.choices[0].message.tool_calls or []
        time.sleep(0.8)  # the client runs its tool
        second = send_result(c, "orchestrion/direct", first, call.id, "5")
        found = samples(url)
    trace_id = ext(first)["trace_id"]
    done = ext(second)
    assert done["trace_id"] == trace_id and done["status"] == "ok", done
    assert done["client_wait_s"] >= 0.8 and done["wall_s"] >= done["client_wait_s"]
    assert done["wall_s"] - done["client_wait_s"] < 0.5
    ep = store.episode(trace_id)
    assert ep is not None and ep.meta_value()["client_wait_s"] == done["client_wait_s"]
    own = value(found, "orchestrion_episode_duration_seconds_sum", strategy="direct")
    assert own == pytest.approx(done["wall_s"] - done["client_wait_s"], abs=0.01)
    shown = CliRunner().invoke(app, ["trace", "show", trace_id, "--db", str(store.path)], env={"COLUMNS": "250"})
    assert f"of which client wait={done['client_wait_s']:g}s" in shown.output, shown.output


class Cut:
    """Decisions and answers from ``replies`` in turn (the last repeating), cut at max_tokens (one
    word a token) with finish_reason 'length', as a real backend cuts; keeps each call's max_tokens."""

    name = "cut"
    constrains_json = False

    def __init__(self, decisions: list[str], plain: str) -> None:
        self.decisions, self.plain = decisions, plain
        self.limits: list[tuple[bool, int]] = []  # (a decision, its max_tokens)

    async def complete(self, messages: Sequence[Message], config: GenerateConfig) -> Completion:
        decision = config.json_schema is not None
        self.limits.append((decision, config.max_tokens))
        reply = (self.decisions.pop(0) if len(self.decisions) > 1 else self.decisions[0]) if decision else self.plain
        words = reply.split(" ")
        kept = words[: config.max_tokens]
        if config.on_text is not None:
            config.on_text(" ".join(kept))
        return Completion(" ".join(kept), self.name, Usage(input_tokens=10, output_tokens=len(kept), calls=1), 0.0,
                          finish_reason="length" if len(kept) < len(words) else "stop")

    async def aclose(self) -> None:
        return None


LONG_ANSWER = json.dumps({"answer": "two and three make five, as anyone who counts on their fingers finds"})


@pytest.mark.parametrize("streamed", [False, True])
def test_a_small_max_tokens_leaves_room_for_the_call_and_still_caps_the_answer(store: TraceStore,
                                                                               streamed: bool) -> None:
    model = Cut([CALL, LONG_ANSWER], plain="two and three make five")
    with serving(Pool.from_models([model]), store) as url:
        c = client(url)
        first = c.chat.completions.create(model="orchestrion/direct", messages=ASK, tools=TOOLS, max_tokens=3)
        [call] = first.choices[0].message.tool_calls or []
        assert json.loads(call.function.arguments) == {"a": 2, "b": 3}  # whole, though 3 tokens could not hold it
        messages = [*ASK, first.choices[0].message.model_dump(exclude_none=True),
                    {"role": "tool", "tool_call_id": call.id, "content": "5"}]
        if streamed:
            chunks = list(c.chat.completions.create(model="orchestrion/direct", messages=messages, tools=TOOLS,
                                                    max_tokens=3, stream=True))
            text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
            finish = [ch.choices[0].finish_reason for ch in chunks if ch.choices and ch.choices[0].finish_reason]
        else:
            second = c.chat.completions.create(model="orchestrion/direct", messages=messages,
                                               tools=TOOLS, max_tokens=3)
            text, finish = second.choices[0].message.content or "", [second.choices[0].finish_reason]
    # decisions had ACTION_TOKENS; the decision's answer ran past max_tokens, so the answer is direct's, cut at 3
    assert [limit for decision, limit in model.limits if decision] == [ACTION_TOKENS, ACTION_TOKENS]
    assert model.limits[-1] == (False, 3)
    assert text == "two and three" and finish == ["length"]
    [ep] = episodes(store)
    kinds = [e["kind"] for e in store.query("SELECT kind FROM events WHERE episode_id = ?", (ep["id"],))]
    assert "answer_over_max_tokens" in kinds


def test_a_token_budget_too_small_for_the_call_ends_the_episode_with_no_call(store: TraceStore) -> None:
    """A token budget (input and output of every call) can cut the decision short: no broken call is
    sent, the episode ends budget_exceeded with finish_reason 'length'."""
    model = Cut([CALL], plain="five")
    with serving(Pool.from_models([model]), store) as url:
        done = client(url).chat.completions.create(model="orchestrion/direct", messages=ASK, tools=TOOLS,
                                                   extra_body={"orchestrion": {"budget": {"tokens": 4}}})
    choice = done.choices[0]
    assert choice.message.tool_calls is None and choice.finish_reason == "length"
    assert ext(done)["status"] == "budget_exceeded" and "tokens" in ext(done)["error"]
    assert model.limits[0] == (True, 4)  # the decision got what the budget had left, and was cut
