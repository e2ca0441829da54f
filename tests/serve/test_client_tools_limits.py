"""Client tools at their edges: OpenAI's deprecated ``functions`` / ``function_call`` (refused with
the fields that replace them), and the time an episode waits for the client's results (not its
own: reported apart, and not counted against its wall-time budget)."""

from __future__ import annotations

import time
from typing import Any

import openai
import pytest

from orchestrion import TraceStore
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
