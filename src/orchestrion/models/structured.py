"""Schema-constrained output with fallbacks.

Backends that can constrain decoding get the JSON schema (llama.cpp grammar,
server ``json_schema``/``json_object``). Whatever comes back is still parsed and
validated here; on failure the caller re-prompts with the validation error a
bounded number of times. Every attempt, valid or not, is kept as data.
"""

from __future__ import annotations

import json
import re
from typing import Any, TypeVar

import orjson
from pydantic import BaseModel, ValidationError

from ._types import Message, msg

T = TypeVar("T", bound=BaseModel)

_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL)


def extract_json(text: str) -> Any:
    """The first JSON value in ``text``: bare, inside a code fence, or the outermost {...}."""
    candidates = [text.strip()]
    candidates += [m.strip() for m in _FENCE.findall(text)]
    start = text.find("{")
    if start >= 0:
        candidates.append(_balanced(text, start))
    last: Exception | None = None
    for cand in candidates:
        if not cand:
            continue
        try:
            return orjson.loads(cand)
        except orjson.JSONDecodeError as exc:
            last = exc
        try:  # small models put raw newlines inside strings; accept them
            return json.loads(cand, strict=False)
        except json.JSONDecodeError:
            pass
    raise ValueError(f"no JSON object found ({last})" if last else "empty output")


def _balanced(text: str, start: int) -> str:
    depth, in_str, esc = 0, False, False
    for i in range(start, len(text)):
        ch = text[i]
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return text[start : i + 1]
    return text[start:]


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


def repair_messages(messages: list[Message], bad_output: str, error: str) -> list[Message]:
    """Messages for a repair attempt: the bad output and what was wrong with it."""
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
