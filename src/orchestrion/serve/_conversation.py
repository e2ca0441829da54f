"""A chat conversation as `orchestrion serve` reads it: its messages, the task prompt it becomes,
and the client tool calls and results it carries.

Conversation -> task prompt
    The last ``user`` message is the task. With nothing before or after it, the prompt is
    exactly its text. Otherwise earlier messages become context, in this layout::

        Instructions:
        <system and developer messages, in order, blank-line separated>

        Conversation so far:
        User: <text>
        Assistant: <text>
        Assistant called add with {"a": 1, "b": 2}
        Tool result (add): <text>

        Current request:
        <the last user message>

        Tool calls made for this request:
        Assistant called add with {"a": 1, "b": 2}
        Tool result (add): 3

    The last section is there only when tool calls and their results follow the last user
    message (a client tool conversation that does not continue an episode waiting for those
    results: the server was restarted, say); other messages after the last user message are
    ignored. Content may be a string or a list of ``text`` parts (an assistant's ``refusal``
    part is read as text); an image, audio or file part is a 400: the pool's models read text.

Client tool calls
    An ``assistant`` message's ``tool_calls`` are the calls the server asked for; a ``tool``
    message answers one of them by ``tool_call_id`` (a 400 when it names no call of the
    conversation). A ``tool`` message may say ``"status": "error"`` (read as ``exec_error``).
    A request that ends with the ``tool`` messages answering an assistant message's calls may
    continue the episode that made them (:mod:`orchestrion.serve._client_tools`): its messages
    before that assistant message must be those of the request that got the calls
    (:func:`conversation_key` compares roles, text, and tool call ids).
"""

from __future__ import annotations

import hashlib
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict

from ..runtime.client_tools import ClientToolReply
from ..status import ToolStatus
from ._api_error import ApiError

TEXT_PARTS = ("text", "input_text", "output_text", "refusal")  # content parts read as text


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None

    def call_ids(self) -> list[str]:
        """The ids of an assistant message's tool calls."""
        return [str(c.get("id")) for c in self.tool_calls or [] if isinstance(c, dict)]


def text_of(message: ChatMessage) -> str:
    content = message.content
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "\n".join(str(p.get("text", p.get("refusal", ""))) for p in content if p.get("type") in TEXT_PARTS)


def task_prompt(messages: list[ChatMessage]) -> str:
    """The task prompt for a conversation (see the module docstring)."""
    last = max((i for i, m in enumerate(messages) if m.role == "user"), default=None)
    if last is None:
        raise ApiError(400, "'messages': there is no message with role 'user' to answer",
                       code="invalid_request", param="messages")
    request = text_of(messages[last]).strip()
    if not request:
        raise ApiError(400, f"'messages.{last}.content': the last user message has no text",
                       code="invalid_request", param=f"messages.{last}.content")
    names = tool_names(messages)
    instructions = [text_of(m).strip() for m in messages[:last] if m.role in ("system", "developer")]
    turns = [_turn(m, names) for m in messages[:last] if m.role not in ("system", "developer")]
    after = messages[last + 1:]
    work = [_turn(m, names) for m in after] if any(m.role == "tool" or m.tool_calls for m in after) else []
    parts = []
    if any(instructions):
        parts.append("Instructions:\n" + "\n\n".join(t for t in instructions if t))
    if turns:
        parts.append("Conversation so far:\n" + "\n".join(turns))
    if not parts and not work:
        return request
    parts.append("Current request:\n" + request)
    if work:
        parts.append("Tool calls made for this request:\n" + "\n".join(work))
    return "\n\n".join(parts)


def _turn(message: ChatMessage, names: dict[str, str]) -> str:
    if message.role in ("tool", "function"):
        name = message.name or names.get(message.tool_call_id or "")
        label = f"Tool result ({name})" if name else "Tool result"
        return f"{label}: {text_of(message).strip()}"
    text = f"{message.role.capitalize()}: {text_of(message).strip()}"
    calls = [f"{message.role.capitalize()} called {_function(c).get('name')} with {_function(c).get('arguments')}"
             for c in message.tool_calls or []]
    if calls and not text_of(message).strip():
        return "\n".join(calls)
    return "\n".join([text, *calls])


def _function(call: Any) -> dict[str, Any]:
    found = call.get("function") if isinstance(call, dict) else None
    return found if isinstance(found, dict) else {}


def tool_names(messages: list[ChatMessage]) -> dict[str, str]:
    """Tool call id -> the tool's name, over every assistant message's ``tool_calls``."""
    return {str(c.get("id")): str(_function(c).get("name")) for m in messages for c in m.tool_calls or []
            if isinstance(c, dict)}


def check_tool_messages(messages: list[ChatMessage]) -> None:
    """A 400 for a ``tool`` message with no ``tool_call_id``, or one that answers no tool call made
    before it in the conversation."""
    seen: set[str] = set()
    for i, message in enumerate(messages):
        seen.update(message.call_ids())
        if message.role != "tool":
            continue
        if not message.tool_call_id:
            raise ApiError(400, f"'messages.{i}.tool_call_id': a tool message must say which tool call it answers",
                           code="invalid_request", param=f"messages.{i}.tool_call_id")
        if message.tool_call_id not in seen:
            raise ApiError(400, f"'messages.{i}.tool_call_id': {message.tool_call_id!r} matches no tool call of an "
                           "earlier assistant message", code="invalid_request", param=f"messages.{i}.tool_call_id")


def trailing_results(messages: list[ChatMessage]) -> tuple[list[ChatMessage], ChatMessage, list[ChatMessage]] | None:
    """(the messages before it, the assistant message whose tool calls the conversation ends by
    answering, the ``tool`` messages after it); None when it does not end so."""
    i = len(messages) - 1
    while i >= 0 and messages[i].role == "tool":
        i -= 1
    if i < 0 or i == len(messages) - 1 or messages[i].role != "assistant" or not messages[i].call_ids():
        return None
    return messages[:i], messages[i], messages[i + 1:]


def replies(results: list[ChatMessage]) -> dict[str, ClientToolReply]:
    """The ``tool`` messages as results by call id (``"status": "error"`` gives ``exec_error``)."""
    found = {}
    for message in results:
        failed = str((message.model_extra or {}).get("status", "")).lower() == "error"
        found[str(message.tool_call_id)] = ClientToolReply(text_of(message),
                                                           ToolStatus.EXEC_ERROR if failed else ToolStatus.OK)
    return found


def conversation_key(messages: list[ChatMessage]) -> str:
    """What a continuation's messages must match: roles (developer as system), text, tool call ids."""
    parts = [("system" if m.role == "developer" else m.role, text_of(m).strip(), m.tool_call_id or "",
              m.call_ids()) for m in messages]
    return hashlib.sha256(orjson.dumps(parts)).hexdigest()
