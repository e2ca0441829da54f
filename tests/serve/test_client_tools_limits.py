"""Client tools at their edges: OpenAI's deprecated ``functions`` / ``function_call`` (refused with
the fields that replace them)."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from orchestrion import TraceStore
from tests.serve.test_client_tools import ADD, ANSWER, Scripted
from tests.serve.test_server import ASK, client, episodes, post, serving

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
