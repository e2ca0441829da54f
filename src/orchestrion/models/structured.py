"""Schema-constrained output with fallbacks.

Backends that can constrain decoding get the JSON schema (llama.cpp grammar,
server ``json_schema``/``json_object``). Whatever comes back is still parsed and
validated here; on failure the caller re-prompts with the validation error a
bounded number of times. Every attempt, valid or not, is kept as data.
"""

from __future__ import annotations

from typing import Any, TypeVar

import orjson
from pydantic import BaseModel, ValidationError

from .._text import extract_json
from .types import Message, msg

T = TypeVar("T", bound=BaseModel)


def parse_as(schema: type[T], text: str) -> T:
    """Parse and validate ``text`` as ``schema``; raise ValueError with a short reason."""
    data = extract_json(text)
    try:
        return schema.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '(root)'}: {e['msg']}" for e in exc.errors()[:4]
        )
        raise ValueError(problems) from None


def repair_messages(messages: list[Message], bad_output: str, error: str, *, truncated: bool = False) -> list[Message]:
    """Messages for a repair attempt: the bad output and what was wrong with it. An output cut off
    at the token limit is left out (a small model that looped would copy the loop): the model is
    told to reply shorter instead."""
    if truncated:
        return [
            *messages,
            msg("user", "Your reply ran past the length limit and was cut off. Reply again with one short JSON "
                        "object that matches the schema: keep every text field to one short sentence."),
        ]
    return [
        *messages,
        msg("assistant", bad_output[:600]),
        msg(
            "user",
            f"That reply was not a valid action: {error}. Reply again with one JSON object "
            "that matches the schema, and nothing else.",
        ),
    ]


def schema_prompt(schema: dict[str, Any]) -> str:
    """A prompt suffix that states the required JSON schema, for backends that cannot constrain."""
    return "Reply with one JSON object matching this JSON schema, and nothing else:\n" + orjson.dumps(schema).decode()
