from __future__ import annotations

import pytest

from orchestrion._text import extract_json
from orchestrion.models.structured import parse_as
from orchestrion.runtime.protocol import SubAgentAction, narrow
from orchestrion.strategies.para import ParaAction


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"a": 1}', {"a": 1}),
        ('Sure! ```json\n{"a": 2}\n``` hope it helps', {"a": 2}),
        ('prefix {"a": {"b": "}"}} suffix', {"a": {"b": "}"}}),
    ],
)
def test_extract_json(text: str, expected: object) -> None:
    assert extract_json(text) == expected


def test_extract_json_failure() -> None:
    with pytest.raises(ValueError, match="no JSON"):
        extract_json("no braces here")


def test_parse_as_reports_the_field() -> None:
    with pytest.raises(ValueError, match="calls"):
        parse_as(ParaAction, '{"calls": 3}')
    with pytest.raises(ValueError, match="action"):
        parse_as(SubAgentAction, '{"action": "dance"}')
    ok = parse_as(ParaAction, '{"calls": [{"tool": "python", "input": "print(1)"}]}')
    assert ok.calls[0].tool == "python"


def test_narrow_pins_names_and_drops_fields() -> None:
    schema = narrow(ParaAction.model_json_schema(), {"tool": ["a", "b"]}, drop=("args",))
    call = schema["$defs"]["Call"]["properties"]
    assert call["tool"] == {"enum": ["a", "b"]}
    assert "args" not in call
    assert "args" in ParaAction.model_json_schema()["$defs"]["Call"]["properties"]  # original untouched


def test_narrow_requires_fields_that_have_defaults() -> None:
    schema = narrow(ParaAction.model_json_schema(), {"tool": ["a"]}, drop=("args",))
    assert set(schema["required"]) == {"thought", "calls", "final"}
    assert set(schema["$defs"]["Call"]["required"]) == {"tool", "input"}


def test_raw_newline_inside_string_is_accepted() -> None:
    assert extract_json('{"thought": "line one\nline two", "final": true}')["final"] is True
